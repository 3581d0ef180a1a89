"""Stored events the reader cannot parse: kept as stored, shown as unreadable stand-ins.

What it guarantees: a session whose log holds a row that ``Event`` cannot be
parsed from (a function response nested deeper than pydantic-core's JSON
parser goes, about 200 levels, written before the library bounded what it
stores; a row written by another ADK version that fails validation; a
damaged row) still loads. The row is left in the store as it is; the session
holds in its place a placeholder :class:`~google.adk.events.event.Event`
that

* keeps the row's event id, invocation id, author and timestamp, so the log's
  order, its sequence numbers and its ids stay what they were;
* has no content: ADK's contents builder skips an event without content
  (``_contains_empty_content``), so nothing unreadable is ever shown to a
  model, and no part of ADK sees a call or a response that is not there;
* carries the row's session-scoped state delta (a column of its own, read by
  the fold and the snapshots all along), so the session's state is the same
  as before the row became unreadable;
* names itself in ``custom_metadata[UNREADABLE_KEY]``: its sequence number
  and why it could not be read.

A run that meets such a session is parked with that reason before ADK is
called (:mod:`durable_adk.adk.runs.driver`); an operator inspects and repairs
the row (:mod:`durable_adk.adk.runs.repairs`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pydantic
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions

__all__ = [
    "UNREADABLE",
    "UNREADABLE_KEY",
    "Unreadable",
    "is_unreadable",
    "placeholder",
    "reason_of",
    "unreadable_in",
    "unreadable_note",
]

UNREADABLE_KEY = "durable_adk_unreadable"
"""The ``Event.custom_metadata`` key of a placeholder: ``{"seq", "reason"}``."""

UNREADABLE = "UNREADABLE_EVENT"
"""The class recorded with a run parked on an unreadable event (its dead letter's)."""

READ_ERRORS: tuple[type[BaseException], ...] = (pydantic.ValidationError, RecursionError)
"""What reading a stored row may raise when the row cannot be parsed into an ``Event``."""

_REASON_CHARS = 500


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A stored event the reader cannot parse.

    Attributes:
        seq: Its sequence number in the session's log.
        event_id: Its event id.
        invocation_id: The invocation it belongs to.
        author: Who wrote it.
        reason: Why it cannot be read (the parser's words).
    """

    seq: int
    event_id: str
    invocation_id: str
    author: str
    reason: str

    def describe(self) -> str:
        """One line naming the event and the reason."""
        return f"event #{self.seq} ({self.event_id}, by {self.author}): {self.reason}"


def reason_of(exc: BaseException) -> str:
    """Why a row could not be read, in the parser's words (short, without the row itself)."""
    if isinstance(exc, pydantic.ValidationError):
        found = exc.errors(include_url=False, include_input=False)
        words = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" if e["loc"] else str(e["msg"])
            for e in found[:3]
        )
        if len(found) > 3:
            words += f" (and {len(found) - 3} more)"
    elif isinstance(exc, RecursionError):
        words = "nested too deep to read"
    else:
        words = f"{type(exc).__name__}: {exc}"
    return words[:_REASON_CHARS]


def placeholder(
    *,
    seq: int,
    data: str,
    reason: str,
    columns: Mapping[str, Any] | None = None,
) -> Event:
    """The stand-in of an unreadable row (see the module docstring).

    Args:
        seq: The row's sequence number.
        data: The row's JSON text, as stored.
        reason: Why it cannot be read.
        columns: The row's own columns (``event_id``, ``invocation_id``,
            ``author``, ``timestamp``, ``delta``), when read; else what
            Python's JSON parser (which goes deeper than pydantic-core's)
            finds in ``data``.
    """
    known: dict[str, Any] = dict(columns or {})
    if not {"event_id", "invocation_id", "author", "timestamp"} <= known.keys():
        parsed = _loose(data)
        known.setdefault("event_id", parsed.get("id"))
        known.setdefault("invocation_id", parsed.get("invocation_id"))
        known.setdefault("author", parsed.get("author"))
        known.setdefault("timestamp", parsed.get("timestamp"))
        if "delta" not in known:
            delta = (parsed.get("actions") or {}).get("state_delta")
            known["delta"] = json.dumps(delta) if isinstance(delta, dict) and delta else None
    delta = _loose(known.get("delta") or "{}")
    event = Event(
        id=str(known.get("event_id") or f"unreadable-{seq}"),
        invocation_id=str(known.get("invocation_id") or ""),
        author=str(known.get("author") or "unknown"),
        custom_metadata={UNREADABLE_KEY: {"seq": seq, "reason": reason}},
    )
    timestamp = known.get("timestamp")
    if isinstance(timestamp, (int, float)):
        event.timestamp = float(timestamp)
    if delta:
        # Assigned, not validated: a delta is free-form JSON, kept as the fold reads it.
        event.actions = EventActions()
        event.actions.state_delta = delta
    return event


def _loose(text: str) -> dict[str, Any]:
    """``text`` parsed by Python's JSON parser, or empty when even that fails."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def is_unreadable(event: Event) -> bool:
    """Whether ``event`` is the placeholder of an unreadable row."""
    return bool(event.custom_metadata) and UNREADABLE_KEY in (event.custom_metadata or {})


def unreadable_in(events: Iterable[Event]) -> list[Unreadable]:
    """The placeholders among ``events``, in log order."""
    found = []
    for event in events:
        if not is_unreadable(event):
            continue
        mark = (event.custom_metadata or {})[UNREADABLE_KEY]
        found.append(
            Unreadable(
                seq=int(mark.get("seq") or 0),
                event_id=event.id,
                invocation_id=event.invocation_id,
                author=event.author,
                reason=str(mark.get("reason") or "unreadable"),
            )
        )
    return found


def unreadable_note(
    found: list[Unreadable], *, app_name: str, user_id: str, session_id: str
) -> str:
    """Why a run is parked on ``found`` and what an operator does about it."""
    first = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return (
        f"unreadable event in session {session_id!r}: {first.describe()}{more}. The log keeps "
        "it as stored; nothing was sent to the model. Inspect it with `durable-adk sessions "
        f"unreadable {app_name} {user_id} {session_id}`, repair it with `durable-adk sessions "
        f"repair {app_name} {user_id} {session_id} {first.event_id} --drop` (or --with a "
        "readable event), then retry the run"
    )
