"""Schedules: runs an app starts by the clock, each tick exactly once across every worker.

An app declares :class:`Schedule` values (a cron expression in a time zone,
or an interval; the message, the user, one session or a new session per
tick; the overlap and catch-up policies). This module holds the declaration,
its ticks and the catch-up plan (:func:`plan`), and the records of the two
tables; :class:`~durable_adk.tables.schedules.ScheduleTable` keeps them in the
store and :mod:`durable_adk.adk.loops.scheduler` is the poller that submits the
runs. Framework-agnostic: no ADK import here.

What it guarantees:

* A schedule is checked when it is made: a bad cron expression, an unknown
  time zone, a bad policy or value raise
  :class:`~durable_adk.errors.InvalidArgument` naming it, before anything is
  stored.
* Its ticks are instants (UTC seconds) in increasing order, the DST rule of
  :mod:`durable_adk.cron` for a cron; a tick's jitter is the same on every
  worker (derived from the tick); a tick's key is its UTC time.
* :func:`plan` decides, from the database's clock alone, which due ticks fire
  under the catch-up policy and which tick comes next.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import timedelta
from enum import StrEnum
from typing import Any

from durable_adk import errors
from durable_adk.cron import Cron, utc_iso
from durable_adk.ids import check_id
from durable_adk.store.base import Row


class Overlap(StrEnum):
    """What a tick does while the schedule's previous run is still QUEUED or RUNNING."""

    SKIP = "skip"
    """The tick is recorded SKIPPED and starts no run."""
    QUEUE = "queue"
    """The tick waits (PENDING) and starts its run once the previous one ended."""
    ALLOW = "allow"
    """The tick starts its run at once (on one session, the session's queue still orders them)."""


class CatchUp(StrEnum):
    """What happens to ticks that came due while no worker ran (later than ``grace``)."""

    NONE = "none"
    """Missed ticks are counted and not fired; only a tick on time fires."""
    LATEST = "latest"
    """The latest missed tick fires; the others are counted as missed."""
    ALL = "all"
    """Every missed tick fires, oldest first, at most ``catch_up_limit`` (the most recent)."""


class TickState(StrEnum):
    """Where a recorded tick stands."""

    PENDING = "PENDING"
    SUBMITTED = "SUBMITTED"
    SKIPPED = "SKIPPED"


def _choice(kind: type[StrEnum], value: object, what: str) -> Any:
    try:
        return kind(str(value)) if isinstance(value, str) else kind(value)  # type: ignore[arg-type]
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in kind)
        raise errors.InvalidArgument(f"{what} must be one of {allowed}, got {value!r}") from None


@dataclass(frozen=True, slots=True)
class Schedule:
    """A run an app starts by the clock.

    Exactly one of ``cron`` and ``every`` is given.

    Attributes:
        name: The schedule's name, unique in its app (an id: no ``/``).
        message: The user message each tick's run starts with.
        user_id: The user the runs belong to.
        cron: A cron expression (5 fields, lists, ranges, steps, names,
            ``@daily``...; :mod:`durable_adk.cron`), read in ``timezone``.
        timezone: The IANA time zone of ``cron``'s wall times (DST rule:
            :mod:`durable_adk.cron`).
        every: An interval instead of a cron expression: ticks at whole
            multiples of it since the Unix epoch (UTC).
        session_id: The session every tick's run goes to (its runs then
            queue behind each other); None: a new session per tick, named
            ``<name>@<tick time>`` (``<name>@trigger:<id>`` for a trigger).
        overlap: What a tick does while the previous tick's run is still
            QUEUED or RUNNING (:class:`Overlap`).
        catch_up: What happens to ticks that came due while no worker ran
            (:class:`CatchUp`).
        catch_up_limit: With ``catch_up="all"``, the most missed ticks fired.
        grace: How late a tick may fire and still count as on time.
        jitter: Each tick fires up to this much after its time (the same
            offset on every worker, derived from the tick), to spread load;
            the tick keeps its own key, so it never fires twice.

    Raises:
        InvalidArgument: A bad cron expression, an unknown time zone, a bad
            policy, both or neither of ``cron`` and ``every``, or a bad value.
    """

    name: str
    message: str
    user_id: str
    cron: str | None = None
    timezone: str = "UTC"
    every: timedelta | None = None
    session_id: str | None = None
    overlap: Overlap | str = Overlap.SKIP
    catch_up: CatchUp | str = CatchUp.LATEST
    catch_up_limit: int = 10
    grace: timedelta = timedelta(seconds=60)
    jitter: timedelta = timedelta(0)
    _cron: Cron | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        check_id("schedule name", self.name)
        check_id("user_id", self.user_id)
        if self.session_id is not None:
            check_id("session_id", self.session_id)
        if not isinstance(self.message, str) or not self.message.strip():
            raise errors.InvalidArgument(f"schedule {self.name!r}: message must be non-empty text")
        object.__setattr__(self, "overlap", _choice(Overlap, self.overlap, "overlap"))
        object.__setattr__(self, "catch_up", _choice(CatchUp, self.catch_up, "catch_up"))
        if (self.cron is None) == (self.every is None):
            raise errors.InvalidArgument(
                f"schedule {self.name!r}: give exactly one of cron=... and every=..."
            )
        try:
            # The zone is checked even when unused; an error names this schedule.
            made = Cron(self.cron if self.cron is not None else "* * * * *", self.timezone)
        except errors.InvalidArgument as exc:
            said = "" if self.cron is None or repr(self.cron) in str(exc) else f" ({self.cron!r})"
            raise errors.InvalidArgument(f"schedule {self.name!r}{said}: {exc}") from None
        if self.cron is not None:
            object.__setattr__(self, "_cron", made)
        elif not isinstance(self.every, timedelta) or self.every < timedelta(seconds=1):
            raise errors.InvalidArgument(
                f"schedule {self.name!r}: every must be a timedelta of at least 1 second"
            )
        if self.catch_up_limit < 1:
            raise errors.InvalidArgument(f"schedule {self.name!r}: catch_up_limit must be >= 1")
        for what, value in (("grace", self.grace), ("jitter", self.jitter)):
            if not isinstance(value, timedelta) or value < timedelta(0):
                raise errors.InvalidArgument(
                    f"schedule {self.name!r}: {what} must be a timedelta >= 0"
                )

    # ------------------------------------------------------------- its ticks

    def ticks(self, after: float) -> Iterator[float]:
        """Every tick strictly after ``after`` (UTC seconds), in increasing order."""
        if self._cron is not None:
            yield from self._cron.ticks(after)
            return
        assert self.every is not None
        step = self.every.total_seconds()
        tick = (after // step + 1) * step
        while True:
            yield tick
            tick += step

    def next_tick(self, after: float) -> float:
        """The first tick strictly after ``after``."""
        return next(self.ticks(after))

    def fire_at(self, tick: float) -> float:
        """When ``tick`` fires: its time plus its jitter (the same on every worker)."""
        spread = self.jitter.total_seconds()
        if spread <= 0:
            return tick
        digest = hashlib.sha256(f"{self.name}\0{tick!r}".encode()).digest()
        return tick + spread * int.from_bytes(digest[:4], "big") / 2**32

    def session_for(self, tick_key: str) -> str:
        """The session of a tick's run: the schedule's own, or one made for the tick."""
        return self.session_id or f"{self.name}@{tick_key.removeprefix('at:')}"

    # ----------------------------------------------------------- as JSON

    @property
    def timing(self) -> tuple[str | None, str, float | None]:
        """What decides the ticks (a change of it moves the next tick)."""
        every = None if self.every is None else self.every.total_seconds()
        return (self.cron, self.timezone, every)

    def to_spec(self) -> str:
        """The definition as the JSON stored in the schedule's row."""
        data = asdict(self)
        data.pop("_cron")
        for key in ("every", "grace", "jitter"):
            value = data[key]
            data[key] = None if value is None else value.total_seconds()
        data["overlap"] = str(self.overlap)
        data["catch_up"] = str(self.catch_up)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_spec(cls, spec: str) -> Schedule:
        """The definition stored in a row (see :meth:`to_spec`)."""
        known = {f.name for f in fields(cls) if f.init}
        # A field a later version added is left out: the row stays readable here.
        data: dict[str, Any] = {k: v for k, v in json.loads(spec).items() if k in known}
        for key in ("every", "grace", "jitter"):
            if data.get(key) is not None:
                data[key] = timedelta(seconds=data[key])
        if data.get("every") is None:
            data.pop("every", None)
        return cls(**data)


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """A schedule's row.

    Attributes:
        pk: The row's key.
        app_name: The app.
        name: The schedule.
        schedule: The definition as last synced from code.
        next_tick_at: The next tick not yet recorded (UTC seconds).
        next_fire_at: When a worker should next claim it (database clock).
        paused: Whether an operator paused it.
        orphaned_at: When a sync found it gone from the code (None: declared).
        epoch: Bumped by every claim and change.
        owner: The worker of the last claim.
        last_tick_at: The last tick recorded.
        last_run_id: The run of the last tick submitted.
        missed: Ticks the catch-up policy did not fire.
        db_now: The database clock when the row was read (None if not asked).
        app_version: The app version whose code last synced it (declared it,
            or orphaned it); None: an unversioned app, or synced before
            schema version 19.
    """

    pk: int
    app_name: str
    name: str
    schedule: Schedule
    next_tick_at: float
    next_fire_at: float
    paused: bool
    orphaned_at: float | None
    epoch: int
    owner: str | None
    last_tick_at: float | None
    last_run_id: str | None
    missed: int
    db_now: float | None = None
    app_version: str | None = None

    @classmethod
    def from_row(cls, row: Row) -> ScheduleRow:
        """Maps a ``schedules`` row."""
        orphaned = row["orphaned_at"]
        last = row["last_tick_at"]
        now = row.get("db_now")
        return cls(
            pk=int(row["pk"]),
            app_name=row["app_name"],
            name=row["name"],
            schedule=Schedule.from_spec(row["spec"]),
            next_tick_at=float(row["next_tick_at"]),
            next_fire_at=float(row["next_fire_at"]),
            paused=bool(row["paused"]),
            orphaned_at=None if orphaned is None else float(orphaned),
            epoch=int(row["epoch"]),
            owner=row["owner"],
            last_tick_at=None if last is None else float(last),
            last_run_id=row["last_run_id"],
            missed=int(row["missed"]),
            db_now=None if now is None else float(now),
            app_version=row.get("app_version"),
        )

    @property
    def state(self) -> str:
        """``active``, ``paused`` or ``orphaned``."""
        if self.orphaned_at is not None:
            return "orphaned"
        return "paused" if self.paused else "active"

    def describe(self) -> dict[str, Any]:
        """JSON-ready facts for listings (API, CLI, dashboard)."""
        s = self.schedule
        return {
            "name": self.name,
            "app_name": self.app_name,
            "state": self.state,
            "cron": s.cron,
            "timezone": s.timezone,
            "every_seconds": None if s.every is None else s.every.total_seconds(),
            "next_tick_at": self.next_tick_at,
            "next_tick": utc_iso(self.next_tick_at),
            "last_tick_at": self.last_tick_at,
            "last_run_id": self.last_run_id,
            "missed": self.missed,
            "overlap": str(s.overlap),
            "catch_up": str(s.catch_up),
            "user_id": s.user_id,
            "session_id": s.session_id,
            "orphaned_at": self.orphaned_at,
            "app_version": self.app_version,
        }


@dataclass(frozen=True, slots=True)
class Tick:
    """A recorded tick.

    Attributes:
        app_name: The app.
        schedule_name: The schedule.
        tick_key: ``at:<UTC time>`` or ``trigger:<id>``: unique per schedule.
        tick_at: The tick's time (UTC seconds).
        kind: ``tick`` or ``trigger``.
        run_id: The run it starts (chosen when it was recorded).
        user_id: The run's user.
        session_id: The run's session.
        state: Where it stands.
        actor: Who triggered it (trigger ticks).
        detail: Why it was skipped.
    """

    app_name: str
    schedule_name: str
    tick_key: str
    tick_at: float
    kind: str
    run_id: str
    user_id: str
    session_id: str
    state: TickState
    actor: str | None
    detail: str | None

    @classmethod
    def from_row(cls, row: Row) -> Tick:
        """Maps a ``schedule_ticks`` row."""
        return cls(
            app_name=row["app_name"],
            schedule_name=row["schedule_name"],
            tick_key=row["tick_key"],
            tick_at=float(row["tick_at"]),
            kind=row["kind"],
            run_id=row["run_id"],
            user_id=row["user_id"],
            session_id=row["session_id"],
            state=TickState(row["state"]),
            actor=row["actor"],
            detail=row["detail"],
        )


@dataclass(frozen=True, slots=True)
class Plan:
    """What a claim of a schedule records (:func:`plan`).

    Attributes:
        fire: The ticks to record and fire, oldest first.
        missed: Due ticks the catch-up policy does not fire.
        next_tick: The first tick not yet due.
    """

    fire: tuple[float, ...]
    missed: int
    next_tick: float


SCAN_LIMIT = 100_000
"""Due ticks one claim walks through one by one (a minutely schedule idle for ~70 days);
past them it jumps to the last :data:`JUMP_TO` seconds."""

JUMP_TO = 86_400.0
"""Seconds before now the walk of a very long idle span jumps to."""


def plan(schedule: Schedule, next_tick_at: float, now: float) -> Plan:
    """The ticks due at ``now`` (database clock) from ``next_tick_at`` on, by the catch-up policy.

    A tick is due when its fire time (time + jitter) has come; it is on time
    when it fires within ``grace`` of that. Past :data:`SCAN_LIMIT` due ticks
    the walk jumps to the ticks after ``now`` (they are all missed anyway).
    """
    keep = max(schedule.catch_up_limit, 1)
    due: deque[float] = deque(maxlen=keep)  # the latest due ticks (all may fire)
    count = 0
    grace = schedule.grace.total_seconds()
    tick = next_tick_at
    ticks = schedule.ticks(next_tick_at)
    while schedule.fire_at(tick) <= now:
        due.append(tick)
        count += 1
        if count == SCAN_LIMIT and tick < now - JUMP_TO:
            ticks = schedule.ticks(now - JUMP_TO)  # the rest of the skipped span is not counted
        tick = next(ticks)
    latest = list(due)
    on_time = [t for t in latest if now - schedule.fire_at(t) <= grace]
    if schedule.catch_up is CatchUp.NONE:
        fire = on_time[-1:]
    elif schedule.catch_up is CatchUp.LATEST:
        fire = latest[-1:]
    else:
        fire = latest[-schedule.catch_up_limit :]
    return Plan(tuple(fire), count - len(fire), tick)


def tick_key(tick: float) -> str:
    """The key of the tick at ``tick``: ``at:<UTC time>``."""
    return f"at:{utc_iso(tick)}"


def declared(value: object, *, source: str) -> tuple[Schedule, ...]:
    """Checks what an app declares as its schedules (a sequence or mapping of them).

    Raises:
        InvalidArgument: Anything else.
    """
    items: Sequence[object]
    if isinstance(value, Mapping):
        items = list(value.values())
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        raise errors.InvalidArgument(
            f"{source} is a {type(value).__name__}: expected a list of Schedule"
        )
    for item in items:
        if not isinstance(item, Schedule):
            raise errors.InvalidArgument(
                f"{source} holds a {type(item).__name__}: expected Schedule values"
            )
    return tuple(item for item in items if isinstance(item, Schedule))
