"""An operator's repair of a stored event the reader cannot parse.

What it guarantees:

* :func:`unreadable_events` lists the events of a session that come back as
  unreadable stand-ins (:mod:`durable_adk.adk.eventlog.unreadable`), each
  with its sequence number, id and the reason, and never fails on them.
* :func:`repair_event` writes a readable event over one such row, in one
  unit: only when the row still holds what was read (a concurrent repair
  that got there first makes this one a ``Conflict`` that changed nothing),
  with the session's repair count bumped (every worker's cached copy of the
  log is dropped at its next read) and an audit line in ``event_repairs``
  (who, when, why, the original text as it was stored, the stand-in).
  With keys, the stand-in is sealed as every event is, and so are the
  audit line's copies of the original and of the stand-in.
  Nothing is deleted: the log keeps its order, ids and sequence numbers.
* The stand-in is readable (it is read back before it is written) and keeps
  the row's event id, invocation id, author, timestamp and session-scoped
  state delta (the session's state and snapshots were folded from it). With
  ``drop`` it keeps the calls and answers the row held, by id and name, with
  an error in place of the answer (a call left without its response would
  make the history invalid for a model), and drops the rest of the content;
  with ``replacement`` it is the operator's event.
* A readable event, an unknown session or event id, a bad ``by`` or
  ``reason``, or a replacement that is not a readable event of that row is
  refused with a clear error and changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pydantic
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.genai import types

from durable_adk import errors
from durable_adk.adk.eventlog.stored import load_event
from durable_adk.adk.eventlog.unreadable import (
    READ_ERRORS,
    Unreadable,
    reason_of,
    unreadable_in,
)
from durable_adk.adk.services.fold import split_delta
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.ids import check_id
from durable_adk.limits import EVENT_ENVELOPE
from durable_adk.store.base import Row
from durable_adk.store.sealing.codec import open_rows, seal_value

__all__ = ["REPAIRED_KEY", "EventRepair", "repair_event", "repairs_of", "unreadable_events"]

REPAIRED_KEY = "durable_adk_repaired"
"""The ``Event.custom_metadata`` key of a stand-in: who repaired it, when asked, and why."""

MAX_REASON_CHARS = 2000


@dataclass(frozen=True, slots=True)
class EventRepair:
    """One repair of a stored event, as audited.

    Attributes:
        app_name: The session's app.
        user_id: The session's user.
        session_id: The session.
        seq: The event's sequence number.
        event_id: The event's id.
        action: ``drop`` (a stand-in made from what could be read) or ``replace``.
        actor: Who repaired it.
        reason: Why.
        original: The row's data as it was stored (unreadable).
        replacement: The readable event written in its place (JSON).
        created_at: When (database clock).
    """

    app_name: str
    user_id: str
    session_id: str
    seq: int
    event_id: str
    action: str
    actor: str
    reason: str | None
    original: str
    replacement: str
    created_at: float

    @classmethod
    def from_row(cls, row: Row) -> EventRepair:
        """Maps an ``event_repairs`` row."""
        return cls(
            app_name=row["app_name"],
            user_id=row["user_id"],
            session_id=row["session_id"],
            seq=int(row["seq"]),
            event_id=row["event_id"],
            action=row["action"],
            actor=row["actor"],
            reason=row["reason"],
            original=row["original"],
            replacement=row["replacement"],
            created_at=float(row["created_at"]),
        )


async def unreadable_events(
    sessions: DurableSessionService, *, app_name: str, user_id: str, session_id: str
) -> list[Unreadable]:
    """The events of a session the reader cannot parse, in log order.

    Raises:
        NotFound: No such session.
    """
    check_id("session_id", session_id)
    session = await sessions.get_session(app_name=app_name, user_id=user_id, session_id=session_id)
    if session is None:
        raise errors.NotFound(f"no session {session_id!r} of user {user_id!r} in app {app_name!r}")
    return unreadable_in(session.events)


async def repairs_of(
    sessions: DurableSessionService,
    *,
    app_name: str,
    user_id: str,
    session_id: str,
    limit: int = 100,
) -> list[EventRepair]:
    """The repairs of a session's events, newest first."""
    for name, value in (("app_name", app_name), ("user_id", user_id), ("session_id", session_id)):
        check_id(name, value)
    rows = await sessions.store.fetch(
        "event_repair_list",
        {"app_name": app_name, "user_id": user_id, "session_id": session_id, "limit": limit},
    )
    return [EventRepair.from_row(r) for r in rows]


async def repair_event(
    sessions: DurableSessionService,
    *,
    app_name: str,
    user_id: str,
    session_id: str,
    event_id: str,
    by: str,
    reason: str,
    replacement: Mapping[str, Any] | None = None,
) -> EventRepair:
    """Writes a readable stand-in over an unreadable stored event (see the module docstring).

    Args:
        sessions: The session service (its cache of the session is dropped).
        app_name: The session's app.
        user_id: The session's user.
        session_id: The session.
        event_id: The unreadable event's id.
        by: Who repairs it (recorded).
        reason: Why (recorded, required).
        replacement: The event to write instead, as a JSON object (``id``,
            ``invocation_id``, ``author`` and ``timestamp`` may be left out
            and are the row's; given, they must be the row's). None: drop
            the unreadable content, keeping its calls answered with an error.

    Returns:
        The repair as recorded.

    Raises:
        NotFound: No such session, or no such event in it.
        Conflict: The event is readable, or it was repaired meanwhile
            (nothing changed).
        InvalidArgument: A bad ``by`` or ``reason``, or a replacement that is
            not a readable event of that row, or one past the store's payload
            limits (``PayloadTooDeep``, ``PayloadTooLarge``; nothing changed).
    """
    for name, value in (("app_name", app_name), ("user_id", user_id), ("session_id", session_id)):
        check_id(name, value)
    check_id("by", by)
    if not isinstance(event_id, str) or not event_id:
        raise errors.InvalidArgument("event_id must be a non-empty string")
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON_CHARS:
        raise errors.InvalidArgument(
            f"a repair needs a reason (at most {MAX_REASON_CHARS} characters)"
        )
    if "\x00" in reason:
        raise errors.InvalidArgument("reason cannot hold a NUL character")
    if replacement is not None:  # an event from outside: bounded like every other value
        sessions.store.limits.check(
            replacement, f"the replacement of event {event_id!r}", envelope=EVENT_ENVELOPE
        )
    key = {"app_name": app_name, "user_id": user_id, "session_id": session_id}
    # As stored (the guard below names the stored text), and opened (to read it).
    stored = await sessions.store._fetch("event_repair_target", {**key, "event_id": event_id})
    row = (await open_rows(sessions.store, [dict(r) for r in stored]))[0] if stored else None
    if row is None:
        raise errors.NotFound(
            f"no event {event_id!r} in session {session_id!r} of user {user_id!r} "
            f"in app {app_name!r}"
        )
    try:
        load_event(row["data"])
    except READ_ERRORS as exc:
        why = reason_of(exc)
    else:
        raise errors.Conflict(
            f"event {event_id!r} (#{row['seq']}) of session {session_id!r} is readable: "
            "there is nothing to repair (nothing changed)"
        )
    mark = {"by": by, "reason": reason, "was": why}
    if replacement is None:
        action, stand_in = "drop", _dropped(row, mark)
    else:
        action, stand_in = "replace", _replaced(row, replacement, mark)
    text = stand_in.model_dump_json(exclude_none=True)
    try:
        load_event(text)
    except READ_ERRORS as exc:
        raise errors.InvalidArgument(
            f"the stand-in of event {event_id!r} would not be readable either: {reason_of(exc)} "
            "(nothing changed)"
        ) from None
    store, pk, seq = sessions.store, int(row["pk"]), int(row["seq"])
    audit = (app_name, user_id, session_id, seq, event_id)
    user = (app_name, user_id)
    done = await store.fetchrow(
        "event_repair",
        {
            **key,
            "session_pk": pk,
            "seq": seq,
            "event_id": event_id,
            "stored": stored[0]["data"],
            "data": await seal_value(store, "events", "data", (pk, seq), text, user=user),
            "original": await seal_value(
                store, "event_repairs", "original", audit, row["data"], user=user
            ),
            "replacement": await seal_value(
                store, "event_repairs", "replacement", audit, text, user=user
            ),
            "action": action,
            "actor": by,
            "reason": reason,
        },
    )
    sessions.forget((app_name, user_id, session_id))
    if done is None or "pk" not in done:
        raise errors.Conflict(
            f"event {event_id!r} of session {session_id!r} changed while being repaired "
            "(repaired by someone else?): nothing changed; look again"
        )
    return EventRepair.from_row(done)


def _base(row: Row, mark: Mapping[str, Any]) -> dict[str, Any]:
    """What every stand-in keeps of the row, and its repair mark."""
    return {
        "id": row["event_id"],
        "invocation_id": row["invocation_id"],
        "author": row["author"],
        "timestamp": float(row["timestamp"]),
        "custom_metadata": {REPAIRED_KEY: dict(mark)},
    }


def _stored_delta(row: Row) -> dict[str, Any]:
    try:
        delta = json.loads(row["delta"]) if row["delta"] else {}
    except (ValueError, RecursionError):
        return {}
    return delta if isinstance(delta, dict) else {}


def _dropped(row: Row, mark: Mapping[str, Any]) -> Event:
    """The row's stand-in without its unreadable content; its calls and answers kept by id."""
    loose = _loose_content(row["data"])
    note = f"the stored value could not be read and was dropped by {mark['by']}: {mark['reason']}"
    parts: list[types.Part] = []
    for part in loose.get("parts") or []:
        if not isinstance(part, dict):
            continue
        call, answer = part.get("function_call"), part.get("function_response")
        if isinstance(call, dict) and isinstance(call.get("name"), str):
            parts.append(
                types.Part(
                    function_call=types.FunctionCall(
                        id=_str_or_none(call.get("id")), name=call["name"], args={}
                    )
                )
            )
        elif isinstance(answer, dict) and isinstance(answer.get("name"), str):
            parts.append(
                types.Part(
                    function_response=types.FunctionResponse(
                        id=_str_or_none(answer.get("id")),
                        name=answer["name"],
                        response={"error": note},
                    )
                )
            )
    role = loose.get("role") if isinstance(loose.get("role"), str) else None
    event = Event(**_base(row, {**mark, "action": "drop"}))
    if parts:
        event.content = types.Content(role=role or "user", parts=parts)
    delta = _stored_delta(row)
    if delta:
        event.actions = EventActions()
        event.actions.state_delta = delta
    return event


def _replaced(row: Row, replacement: Mapping[str, Any], mark: Mapping[str, Any]) -> Event:
    """The operator's event, checked to stand for the row."""
    if not isinstance(replacement, Mapping):
        raise errors.InvalidArgument("the replacement must be an event as a JSON object")
    base = _base(row, {**mark, "action": "replace"})
    given = dict(replacement)
    for name in ("id", "invocation_id", "author", "timestamp"):
        if name in given and given[name] != base[name]:
            raise errors.InvalidArgument(
                f"the replacement's {name} must be the stored event's ({base[name]!r}), "
                f"not {given[name]!r} (nothing changed)"
            )
    metadata = given.get("custom_metadata") or {}
    if not isinstance(metadata, Mapping):
        raise errors.InvalidArgument("the replacement's custom_metadata must be an object")
    given.update(
        {k: base[k] for k in ("id", "invocation_id", "author", "timestamp")},
        custom_metadata={**metadata, **base["custom_metadata"]},
    )
    try:
        event = Event.model_validate(given)
    except (pydantic.ValidationError, RecursionError) as exc:
        raise errors.InvalidArgument(
            f"the replacement is not an ADK event: {reason_of(exc)} (nothing changed)"
        ) from None
    written = event.actions.model_dump(mode="json", include={"state_delta"})
    session_delta = split_delta(written.get("state_delta"))[0]
    if dict(session_delta) != _stored_delta(row):
        raise errors.InvalidArgument(
            "the replacement's session-scoped state delta must be the stored one "
            f"({json.dumps(_stored_delta(row))[:200]}): the session's state and snapshots were "
            "folded from it (nothing changed)"
        )
    return event


def _loose_content(data: str) -> dict[str, Any]:
    """The row's ``content``, as Python's JSON parser (deeper than pydantic-core's) reads it."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return {}
    content = value.get("content") if isinstance(value, dict) else None
    return content if isinstance(content, dict) else {}


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
