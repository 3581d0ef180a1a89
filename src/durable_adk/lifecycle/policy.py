"""Retention policies as values: how long an app keeps what its finished runs leave.

A :class:`RetentionPolicy` says, per way a run ended (DONE, FAILED,
CANCELLED, PARKED, abandoned by an operator), how long after its end the
run's session and everything of it stay (events, journal entries, jobs,
sagas, dead letters, interrupts, schedule firings, artifacts); how long a
session without runs stays after its last change; and whether only the
payloads go (``payload_only``: the ledger's skeleton stays, ids, statuses,
times, who answered). ``None`` keeps for ever; a policy of nothing but
``None`` purges nothing. The same policy is written as text for the command
line (:meth:`RetentionPolicy.parse`): ``done=30d,failed=90d,idle=14d,payload-only``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from datetime import timedelta

from durable_adk import errors

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"^\s*(?P<n>\d+(\.\d+)?)\s*(?P<unit>[smhdw]?)\s*$")

STATUSES = ("done", "failed", "cancelled", "parked", "abandoned")
"""The endings a policy gives a duration, as written in a spec."""

DEFAULT_DUTY = 0.05
"""The share of the time a purge spends in its statements unless told otherwise."""

KEEP_FOR_EVER = -1.0
"""The cut-off passed to SQL for an ending kept for ever: no time is before it."""


def parse_duration(text: str) -> float | None:
    """Seconds from ``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or a bare number of
    seconds; ``never`` (or ``forever``) is None: kept for ever.

    Raises:
        InvalidArgument: Anything else, a negative duration included.
    """
    if text.strip().lower() in ("never", "forever"):
        return None
    if text.strip().startswith("-"):
        raise errors.InvalidArgument(f"bad duration {text!r}: a duration must not be negative")
    found = _DURATION.match(text)
    if found is None:
        raise errors.InvalidArgument(
            f"bad duration {text!r}: write a number and a unit (s, m, h, d, w), e.g. 30d, "
            "or 'never'"
        )
    return float(found["n"]) * _UNITS[found["unit"] or "s"]


def _seconds(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise errors.InvalidArgument(
            f"{name} must be seconds or a timedelta, not {type(value).__name__}"
        )
    seconds = float(value)
    if math.isnan(seconds) or seconds < 0 or math.isinf(seconds):
        raise errors.InvalidArgument(f"{name} must be a duration >= 0, got {value!r}")
    return seconds


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long one app keeps what its finished runs leave behind.

    Attributes:
        done: Seconds a session is kept after its runs ended DONE (None: for ever).
        failed: The same after a run ended FAILED.
        cancelled: The same after a run was CANCELLED.
        parked: The same after a run was PARKED and left so (a parked run
            waits for a person: keep it long enough to be seen).
        abandoned: The same after an operator abandoned a run.
        idle_sessions: Seconds a session with no runs at all is kept after its
            last change (None: for ever).
        payload_only: Drop the payloads only: sessions, events, snapshots and
            artifacts go; the ledger keeps its rows (runs, journal entries,
            jobs, sagas and their steps, interrupts, dead letters, schedule
            firings) with ids, statuses, times and who answered, and without
            requests, results, arguments, answers and errors.
        batch: The most rows one statement of the purge deletes (and sessions
            one statement marks).
        interval: Seconds between passes of the purge loop of a worker.
        duty: The share of the time a pass may spend in its statements
            (0 < duty <= 1, :mod:`durable_adk.lifecycle.pacing`): after each
            statement it rests for that statement's time times
            ``(1 - duty) / duty``, with batches sized to a few milliseconds,
            so the appends of live runs barely wait for it. 1.0: no rest and
            ``batch`` rows a statement (a one-off purge by an operator).

    A session goes when every one of its runs ended before the cut-off of its
    ending, whichever is longest among them; a run whose ending is kept for
    ever keeps its session for ever.
    """

    done: float | timedelta | None = None
    failed: float | timedelta | None = None
    cancelled: float | timedelta | None = None
    parked: float | timedelta | None = None
    abandoned: float | timedelta | None = None
    idle_sessions: float | timedelta | None = None
    payload_only: bool = False
    batch: int = 500
    interval: float = 60.0
    duty: float = DEFAULT_DUTY

    def __post_init__(self) -> None:
        for name in (*STATUSES, "idle_sessions"):
            object.__setattr__(self, name, _seconds(name, getattr(self, name)))
        if not isinstance(self.payload_only, bool):
            raise errors.InvalidArgument("payload_only must be True or False")
        if (
            isinstance(self.batch, bool)
            or not isinstance(self.batch, int)
            or not (1 <= self.batch <= 100_000)
        ):
            raise errors.InvalidArgument(f"batch must be 1..100000 rows, got {self.batch!r}")
        interval = _seconds("interval", self.interval)
        if not interval:
            raise errors.InvalidArgument(f"interval must be > 0 seconds, got {self.interval!r}")
        object.__setattr__(self, "interval", interval)
        duty = self.duty
        if (
            isinstance(duty, bool)
            or not isinstance(duty, int | float)
            or math.isnan(duty)
            or not 0 < duty <= 1
        ):
            raise errors.InvalidArgument(
                f"duty must be a share of the time in (0, 1], e.g. 0.05, got {duty!r}"
            )
        object.__setattr__(self, "duty", float(duty))

    @classmethod
    def parse(
        cls,
        spec: str,
        *,
        batch: int = 500,
        interval: float = 60.0,
        duty: float = DEFAULT_DUTY,
    ) -> RetentionPolicy:
        """Reads a policy written as ``done=30d,failed=90d,cancelled=7d,parked=never,
        abandoned=30d,idle=14d,payload-only`` (any subset, any order).

        Raises:
            InvalidArgument: An unknown name (the known ones are listed), a
                name given twice, or a bad duration.
        """
        values: dict[str, object] = {}
        for item in (part.strip() for part in spec.split(",")):
            if not item:
                continue
            name, eq, text = item.partition("=")
            name = name.strip().lower().replace("-", "_")
            if not eq:
                if name != "payload_only":
                    raise errors.InvalidArgument(
                        f"bad retention item {item!r}: write NAME=DURATION or payload-only"
                    )
                values["payload_only"] = True
                continue
            name = "idle_sessions" if name in ("idle", "idle_sessions") else name
            if name not in STATUSES and name != "idle_sessions":
                raise errors.InvalidArgument(
                    f"unknown retention name {name!r}: known are {', '.join(STATUSES)}, idle "
                    "and payload-only"
                )
            if name in values:
                raise errors.InvalidArgument(f"retention for {name!r} is given twice")
            values[name] = parse_duration(text)
        if not values:
            raise errors.InvalidArgument(
                "an empty retention policy: give at least one of "
                f"{', '.join(STATUSES)}, idle (e.g. done=30d)"
            )
        return cls(batch=batch, interval=interval, duty=duty, **values)  # type: ignore[arg-type]

    @property
    def purges_anything(self) -> bool:
        """Whether some ending or idle sessions have a duration (else a purge is a no-op)."""
        return any(getattr(self, f.name) is not None for f in fields(self)[:6])

    def describe(self) -> str:
        """The policy as :meth:`parse` reads it (``never`` for what is kept for ever)."""
        parts = []
        for name in (*STATUSES, "idle_sessions"):
            seconds = getattr(self, name)
            label = "idle" if name == "idle_sessions" else name
            parts.append(f"{label}={'never' if seconds is None else _short(seconds)}")
        if self.payload_only:
            parts.append("payload-only")
        return ",".join(parts)

    def cutoffs(self, now: float) -> dict[str, float]:
        """The SQL parameters of the purge: for each ending, the time a run must have
        ended before (database clock ``now`` minus its duration, or
        :data:`KEEP_FOR_EVER`), and ``before``, the latest of them."""
        out: dict[str, float] = {}
        for name in (*STATUSES, "idle_sessions"):
            seconds = getattr(self, name)
            key = "idle_before" if name == "idle_sessions" else f"{name}_before"
            out[key] = KEEP_FOR_EVER if seconds is None else now - float(seconds)
        out["before"] = max(out.values())
        return out


def _short(seconds: float) -> str:
    for unit, size in (("w", 604800.0), ("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
