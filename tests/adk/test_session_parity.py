"""DurableSessionService answers as ADK 2.13's session services do: a differential suite.

Each scenario is one sequence of calls. It runs through ADK's
``InMemorySessionService``, through ADK's ``DatabaseSessionService`` on a
SQLite file (``sqlite+aiosqlite``) and through ``DurableSessionService`` on the
test's backend (SQLite and PostgreSQL), twice: with the per-process cache and
without it (every read then goes to the store, and snapshots are taken every
two events). Every call's result is recorded, normalised (ids, authors,
contents, state, counts; no timestamps), or the type of the error it raised,
and the traces are compared call by call.

Where ADK's two services disagree the scenario says which one ours follows.
Where ours deliberately differs (docs/adk-compat.md, "Sessions") the test
asserts the difference, so it cannot change unnoticed.
"""

from __future__ import annotations

import asyncio
import datetime
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from google.adk.errors import StaleSessionError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.adk.sessions.in_memory_session_service import InMemorySessionService
from google.adk.sessions.session import Session
from google.genai import types

from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.store import Store

APP, USER = "shop", "ana"
T0 = 1_700_000_000.0
"""Event timestamps: fixed, so every implementation gets identical events."""


# ------------------------------------------------------------------ the trace


def error_type(exc: BaseException) -> str:
    """The ADK or built-in class a caller would catch (ours subclass ValueError and the like)."""
    for cls in type(exc).__mro__:
        if cls.__module__.startswith(("google.", "sqlalchemy.")) or cls.__module__ == "builtins":
            return cls.__name__
    return type(exc).__name__


def norm(value: Any) -> Any:
    """A comparable form: sessions and events as plain data, without timestamps."""
    if isinstance(value, Session):
        return {
            "app_name": value.app_name,
            "user_id": value.user_id,
            "id": value.id,
            "state": norm(dict(value.state)),
            "events": [norm(e) for e in value.events],
        }
    if isinstance(value, Event):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, ListSessionsResponse):
        return [norm(s) for s in value.sessions]
    if isinstance(value, dict):
        return {k: norm(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [norm(v) for v in value]
    return value


class Trace:
    """What one implementation answered, step by step."""

    def __init__(self, service: BaseSessionService) -> None:
        self.service = service
        self.steps: list[tuple[str, Any]] = []

    def rec(self, label: str, value: Any) -> None:
        self.steps.append((label, norm(value)))

    async def call(self, label: str, awaitable: Awaitable[Any]) -> Any:
        """Records the result, or the type of the error raised; returns the result (or None)."""
        try:
            result = await awaitable
        except Exception as exc:  # the type is what is compared
            self.steps.append((label, ("raises", error_type(exc))))
            return None
        self.rec(label, result)
        return result

    async def get(self, label: str, session_id: str, **kwargs: Any) -> Session | None:
        return await self.call(  # type: ignore[no-any-return]
            label,
            self.service.get_session(app_name=APP, user_id=USER, session_id=session_id, **kwargs),
        )


Scenario = Callable[[Trace], Awaitable[None]]


def said(n: int, text: str, *, author: str = "user", inv: str = "inv-1", **delta: Any) -> Event:
    """Event number ``n``: its id and timestamp are fixed by ``n``."""
    return Event(
        id=f"e{n}",
        timestamp=T0 + n,
        author=author,
        invocation_id=inv,
        content=types.Content(
            role="user" if author == "user" else "model", parts=[types.Part(text=text)]
        ),
        actions=EventActions(state_delta=dict(delta)),
    )


def turn(n: int, question: str, answer: str, **delta: Any) -> list[Event]:
    """A finished invocation: the user's message and the agent's text answer."""
    inv = f"inv-{n}"
    return [
        said(2 * n, question, inv=inv),
        said(2 * n + 1, answer, author="agent", inv=inv, **delta),
    ]


# ----------------------------------------------------------- implementations


@pytest.fixture(params=["cached", "uncached"])
def durable(request: pytest.FixtureRequest, store: Store) -> DurableSessionService:
    if request.param == "cached":
        return DurableSessionService(store, snapshot_every=3)
    return DurableSessionService(store, snapshot_every=2, cache_sessions=0)


@pytest.fixture
async def adk_database(tmp_path: Path) -> AsyncIterator[DatabaseSessionService]:
    service = DatabaseSessionService(f"sqlite+aiosqlite:///{tmp_path}/adk.db")
    yield service
    await service.close()


async def traces(
    scenario: Scenario, durable: DurableSessionService, adk_database: DatabaseSessionService
) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]], list[tuple[str, Any]]]:
    """The scenario's trace on (ours, ADK in memory, ADK database)."""
    out = []
    for service in (durable, InMemorySessionService(), adk_database):
        trace = Trace(service)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ADK warns when it stringifies state values
            await scenario(trace)
        out.append(trace.steps)
    return out[0], out[1], out[2]


def assert_same(ours: list[tuple[str, Any]], theirs: list[tuple[str, Any]]) -> None:
    """Step by step, so a failure names the first call that differs."""
    assert [label for label, _ in ours] == [label for label, _ in theirs]
    for (label, mine), (_, adk) in zip(ours, theirs, strict=True):
        assert mine == adk, f"step {label!r} differs"


def step(trace: list[tuple[str, Any]], label: str) -> Any:
    return dict(trace)[label]


# ------------------------------------------------------------------ scenarios


async def create_and_get(t: Trace) -> None:
    s = t.service
    state = {"k": 1, "nested": {"a": [1, 2]}, "app:theme": "dark", "user:lang": "pt", "temp:t": 3}
    await t.call(
        "create", s.create_session(app_name=APP, user_id=USER, session_id="s1", state=state)
    )
    await t.get("get", "s1")
    await t.call("create-no-state", s.create_session(app_name=APP, user_id=USER, session_id="s2"))
    await t.call("create-other-user", s.create_session(app_name=APP, user_id="bo", session_id="s1"))
    await t.call(
        "create-other-app", s.create_session(app_name="other", user_id=USER, session_id="s1")
    )
    await t.call("user-state", s.get_user_state(app_name=APP, user_id=USER))
    await t.call("user-state-nobody", s.get_user_state(app_name=APP, user_id="nobody"))


async def generated_ids(t: Trace) -> None:
    s = t.service
    one = await s.create_session(app_name=APP, user_id=USER, state={"n": 1})
    two = await s.create_session(app_name=APP, user_id=USER)
    t.rec("ids", [isinstance(x.id, str) and len(x.id) > 0 for x in (one, two)])
    t.rec("distinct", one.id != two.id)
    loaded = await s.get_session(app_name=APP, user_id=USER, session_id=one.id)
    t.rec("found", loaded is not None and loaded.id == one.id and loaded.state == {"n": 1})


async def duplicate_id(t: Trace) -> None:
    s = t.service
    await s.create_session(app_name=APP, user_id=USER, session_id="s1", state={"a": 1})
    await t.call(
        "duplicate",
        s.create_session(
            app_name=APP, user_id=USER, session_id="s1", state={"a": 2, "app:x": 9, "user:y": 8}
        ),
    )
    await t.get("unchanged", "s1")
    await t.call("user-state", s.get_user_state(app_name=APP, user_id=USER))
    await t.call(
        "same-id-other-user", s.create_session(app_name=APP, user_id="bo", session_id="s1")
    )


async def missing_sessions(t: Trace) -> None:
    s = t.service
    await t.get("nothing-at-all", "s1")
    await s.create_session(app_name=APP, user_id=USER, session_id="s1")
    await t.get("wrong-id", "s2")
    await t.call("wrong-user", s.get_session(app_name=APP, user_id="bo", session_id="s1"))
    await t.call("wrong-app", s.get_session(app_name="other", user_id=USER, session_id="s1"))
    await t.get("with-config", "s2", config=GetSessionConfig(num_recent_events=1))


async def recent_events_and_after_timestamp(t: Trace) -> None:
    s = t.service
    session = await s.create_session(app_name=APP, user_id=USER, session_id="s1")
    for n in range(4):
        for event in turn(n, f"q{n}", f"a{n}", step=n):
            await s.append_event(session, event)
    configs = {
        "last-3": GetSessionConfig(num_recent_events=3),
        "last-1": GetSessionConfig(num_recent_events=1),
        "last-100": GetSessionConfig(num_recent_events=100),
        "none": GetSessionConfig(num_recent_events=0),
        "after-e5": GetSessionConfig(after_timestamp=T0 + 5),
        "after-e5.5": GetSessionConfig(after_timestamp=T0 + 5.5),
        "after-all": GetSessionConfig(after_timestamp=T0 + 100),
        "after-e2-last-2": GetSessionConfig(after_timestamp=T0 + 2, num_recent_events=2),
        "after-e6-last-5": GetSessionConfig(after_timestamp=T0 + 6, num_recent_events=5),
        "empty-config": GetSessionConfig(),
    }
    for label, config in configs.items():
        await t.get(label, "s1", config=config)
    await t.get("all", "s1")


async def list_sessions(t: Trace) -> None:
    s = t.service
    await t.call("empty-app", s.list_sessions(app_name=APP))
    for sid, uid in [("s1", USER), ("s2", USER), ("s3", "bo")]:
        await s.create_session(
            app_name=APP, user_id=uid, session_id=sid, state={"n": sid, f"user:{uid}": 1}
        )
    await s.create_session(app_name="other", user_id=USER, session_id="s9", state={"app:o": 1})
    first = await s.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert first is not None
    # s1 now has events: they must not come back from list_sessions.
    await s.append_event(first, said(1, "hi", note="x", **{"app:seen": True}))
    await t.call("by-user", s.list_sessions(app_name=APP, user_id=USER))
    await t.call("other-user", s.list_sessions(app_name=APP, user_id="bo"))
    await t.call("unknown-user", s.list_sessions(app_name=APP, user_id="nobody"))
    await t.call("all-users", s.list_sessions(app_name=APP, user_id=None))
    await t.call("other-app", s.list_sessions(app_name="other"))


async def list_order_follows_updates(t: Trace) -> None:
    s = t.service
    for sid in ("s1", "s2", "s3"):
        await s.create_session(app_name=APP, user_id=USER, session_id=sid)
    # Event timestamps are long before the creation times: the appended
    # sessions sort first, in the order of their newest event.
    for n, sid in ((2, "s3"), (1, "s1")):
        session = await s.get_session(app_name=APP, user_id=USER, session_id=sid)
        assert session is not None
        await s.append_event(session, said(n, sid))
    listed = await s.list_sessions(app_name=APP)
    t.rec("order", [x.id for x in listed.sessions])
    t.rec("update-times", [x.last_update_time for x in listed.sessions[:2]])


async def delete(t: Trace) -> None:
    s = t.service
    await t.call("missing", s.delete_session(app_name=APP, user_id=USER, session_id="s1"))
    session = await s.create_session(
        app_name=APP, user_id=USER, session_id="s1", state={"app:kept": 1, "user:kept": 2}
    )
    await s.append_event(session, said(1, "hello", x=1))
    await t.call("delete", s.delete_session(app_name=APP, user_id=USER, session_id="s1"))
    await t.get("gone", "s1")
    await t.call("again", s.delete_session(app_name=APP, user_id=USER, session_id="s1"))
    await t.call("append-to-deleted", s.append_event(session, said(2, "ghost")))
    await t.call("listed", s.list_sessions(app_name=APP, user_id=USER))
    await t.call("recreated", s.create_session(app_name=APP, user_id=USER, session_id="s1"))
    await t.get("recreated-read", "s1")


async def state_prefixes_on_append(t: Trace) -> None:
    s = t.service
    one = await s.create_session(app_name=APP, user_id=USER, session_id="s1", state={"c": 0})
    two = await s.create_session(app_name=APP, user_id=USER, session_id="s2")
    bo = await s.create_session(app_name=APP, user_id="bo", session_id="s3")
    event = said(1, "set", c=1, none=None, **{"app:a": 1, "user:u": 2, "temp:t": 3})
    await t.call("append", s.append_event(one, event))
    t.rec("appended-event-delta", event.actions.state_delta)
    t.rec("object-state", one.state)  # temp: visible here, for the invocation
    t.rec("object-events", len(one.events))
    await t.get("reloaded", "s1")  # temp: gone
    await t.get("same-user", "s2")
    await t.call("other-user", s.get_session(app_name=APP, user_id="bo", session_id="s3"))
    t.rec("stale-object-state", two.state)  # objects already held are not updated
    await t.call("append-two", s.append_event(two, said(2, "two", **{"app:a": 10, "user:u": 20})))
    t.rec("two-state", two.state)
    await t.get("one-sees-two", "s1")
    await t.call("append-bo", s.append_event(bo, said(3, "bo", **{"user:u": "bo's"})))
    await t.get("user-scoped", "s1")
    await t.call("user-state", s.get_user_state(app_name=APP, user_id=USER))
    await t.call("bo-state", s.get_user_state(app_name=APP, user_id="bo"))


async def temp_state_across_one_invocation(t: Trace) -> None:
    s = t.service
    session = await s.create_session(app_name=APP, user_id=USER, session_id="s1")
    await s.append_event(session, said(1, "draft", author="writer", **{"temp:draft": "v1"}))
    await s.append_event(session, said(2, "review", author="reviewer", **{"temp:draft": "v2"}))
    t.rec("object-state", session.state)
    t.rec("object-deltas", [e.actions.state_delta for e in session.events])
    await t.get("reloaded", "s1")


async def partial_events(t: Trace) -> None:
    s = t.service
    session = await s.create_session(app_name=APP, user_id=USER, session_id="s1")
    chunk = said(1, "par", author="agent", x=1, **{"temp:t": 1, "app:a": 1})
    chunk.partial = True
    await t.call("append-partial", s.append_event(session, chunk))
    t.rec("object-after-partial", session)
    await t.call(
        "append-whole", s.append_event(session, said(2, "partial then whole", author="agent"))
    )
    await t.get("stored", "s1")


async def events_with_actions_only(t: Trace) -> None:
    s = t.service
    session = await s.create_session(app_name=APP, user_id=USER, session_id="s1")
    events = [
        Event(id="e1", timestamp=T0 + 1, author="root", invocation_id="inv-1",
              actions=EventActions(transfer_to_agent="helper")),
        Event(id="e2", timestamp=T0 + 2, author="helper", invocation_id="inv-1",
              actions=EventActions(escalate=True, skip_summarization=True)),
        Event(id="e3", timestamp=T0 + 3, author="helper", invocation_id="inv-1",
              actions=EventActions(state_delta={"done": True}, end_of_agent=True)),
        Event(id="e4", timestamp=T0 + 4, author="root", invocation_id="inv-1",
              actions=EventActions(agent_state={"step": 2}, artifact_delta={"f.txt": 1})),
    ]  # fmt: skip
    for event in events:
        await t.call(f"append-{event.id}", s.append_event(session, event))
    t.rec("object", session)
    await t.get("stored", "s1")


async def function_calls_round_trip(t: Trace) -> None:
    s = t.service
    session = await s.create_session(app_name=APP, user_id=USER, session_id="s1")
    call = types.FunctionCall(id="call-1", name="lookup", args={"q": "lamp", "n": 2})
    answer = types.FunctionResponse(id="call-1", name="lookup", response={"found": [1, 2]})
    for n, part in ((1, types.Part(function_call=call)), (2, types.Part(function_response=answer))):
        event = Event(
            id=f"e{n}",
            timestamp=T0 + n,
            author="agent" if n == 1 else "user",
            invocation_id="inv-1",
            content=types.Content(role="model" if n == 1 else "user", parts=[part]),
            long_running_tool_ids={"call-1"} if n == 1 else None,
        )
        await s.append_event(session, event)
    await s.append_event(session, said(3, "found two", author="agent"))
    await t.get("stored", "s1")


async def values_in_state(t: Trace) -> None:
    s = t.service
    state = {
        "when": datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.UTC),
        "pair": (1, 2),
        "deep": {"x": {"y": [None, True, 1.5]}},
        "app:when": datetime.date(2024, 5, 1),
    }
    created = await t.call(
        "create", s.create_session(app_name=APP, user_id=USER, session_id="s1", state=state)
    )
    assert created is not None
    await t.get("reloaded", "s1")
    await s.append_event(created, said(1, "shallow", deep={"z": 1}, pair=None))
    await t.get("replaced-shallowly", "s1")


async def stale_session_objects(t: Trace) -> None:
    s = t.service
    await s.create_session(app_name=APP, user_id=USER, session_id="s1")
    first = await s.get_session(app_name=APP, user_id=USER, session_id="s1")
    second = await s.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert first is not None and second is not None
    await t.call("first", s.append_event(first, said(1, "first", winner="first")))
    await t.call("second", s.append_event(second, said(2, "second", winner="second")))
    await t.get("stored", "s1")
    await t.call("first-again", s.append_event(first, said(3, "first again")))
    fresh = await s.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert fresh is not None
    await t.call("after-reload", s.append_event(fresh, said(4, "after reload")))
    await t.get("final", "s1")


async def marker_less_session_objects(t: Trace) -> None:
    s = t.service
    session = await s.create_session(app_name=APP, user_id=USER, session_id="s1")
    await s.append_event(session, said(1, "one"))
    handmade = Session(app_name=APP, user_id=USER, id="s1", events=list(session.events))
    await t.call("up-to-date", s.append_event(handmade, said(2, "two")))
    behind = Session(app_name=APP, user_id=USER, id="s1")
    await t.call("behind", s.append_event(behind, said(3, "three")))
    nowhere = Session(app_name=APP, user_id=USER, id="nope")
    await t.call("missing", s.append_event(nowhere, said(4, "four")))
    await t.get("stored", "s1")


async def last_update_time(t: Trace) -> None:
    s = t.service
    created = await s.create_session(app_name=APP, user_id=USER, session_id="s1")
    t.rec("created-positive", created.last_update_time > 0)
    loaded = await s.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert loaded is not None
    t.rec("read-equals-created", abs(loaded.last_update_time - created.last_update_time) < 1e-3)
    event = said(1, "x")
    await s.append_event(loaded, event)
    t.rec("object-moves-to-event", loaded.last_update_time)
    again = await s.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert again is not None
    t.rec("read-is-newest-event", again.last_update_time)
    chunk = said(2, "partial")
    chunk.partial = True
    await s.append_event(again, chunk)
    t.rec("partial-leaves-it", again.last_update_time)
    listed = await s.list_sessions(app_name=APP, user_id=USER)
    t.rec("listed", [x.last_update_time for x in listed.sessions])


async def reappend_equal_event(t: Trace) -> None:
    s = t.service
    session = await s.create_session(app_name=APP, user_id=USER, session_id="s1")
    event = said(1, "once", hits=1, **{"app:hits": 1})
    await s.append_event(session, event)
    await t.call("retry", s.append_event(session, event.model_copy(deep=True)))
    t.rec("object-events", len(session.events))
    await t.get("stored", "s1")


SAME_AS_BOTH = [
    create_and_get,
    generated_ids,
    duplicate_id,
    missing_sessions,
    recent_events_and_after_timestamp,
    list_sessions,
    list_order_follows_updates,
    delete,
    state_prefixes_on_append,
    temp_state_across_one_invocation,
    partial_events,
    events_with_actions_only,
    function_calls_round_trip,
    last_update_time,
]


@pytest.mark.parametrize("scenario", SAME_AS_BOTH, ids=lambda f: f.__name__)
async def test_same_as_both_adk_services(
    scenario: Scenario, durable: DurableSessionService, adk_database: DatabaseSessionService
) -> None:
    ours, memory, database = await traces(scenario, durable, adk_database)
    assert_same(memory, database)  # the scenario is one ADK itself agrees on
    assert_same(ours, memory)


async def test_state_values_are_stored_as_json_like_the_database_service(
    durable: DurableSessionService, adk_database: DatabaseSessionService
) -> None:
    """Values JSON has no type for come back as JSON gives them (ISO strings, lists).

    ADK's in-memory service keeps the Python objects; its database service and
    ours store JSON.
    """
    ours, memory, database = await traces(values_in_state, durable, adk_database)
    assert_same(ours, database)
    assert step(memory, "create")["state"]["pair"] == [1, 2]  # norm() lists it; the datetime:
    assert step(memory, "create")["state"]["when"] != step(database, "create")["state"]["when"]


async def test_stale_session_objects_are_refused_like_the_database_service(
    durable: DurableSessionService, adk_database: DatabaseSessionService
) -> None:
    """An append through an object loaded before another append raises StaleSessionError.

    ADK's in-memory service accepts it (it has no revision check);
    its database service refuses it, as ours does.
    """
    ours, memory, database = await traces(stale_session_objects, durable, adk_database)
    assert_same(ours, database)
    assert step(ours, "second") == ("raises", "StaleSessionError")
    assert step(memory, "second") != ("raises", "StaleSessionError")


async def test_session_objects_built_by_hand_like_the_database_service(
    durable: DurableSessionService, adk_database: DatabaseSessionService
) -> None:
    ours, memory, database = await traces(marker_less_session_objects, durable, adk_database)
    assert_same(ours, database)
    assert step(ours, "behind") == ("raises", "StaleSessionError")
    assert step(memory, "behind") != ("raises", "StaleSessionError")


async def test_reappending_an_equal_event_is_a_no_op_like_the_in_memory_service(
    durable: DurableSessionService, adk_database: DatabaseSessionService
) -> None:
    """A retried append of an event already stored changes nothing.

    ADK's database service fails on its primary key (IntegrityError); its
    in-memory service returns the event and stores nothing, as ours does.
    """
    ours, memory, database = await traces(reappend_equal_event, durable, adk_database)
    assert_same(ours, memory)
    assert step(database, "retry") == ("raises", "IntegrityError")


# ------------------------------------------------ deliberate differences
# Each is listed in docs/adk-compat.md ("Sessions") with its reason.


async def distinct_event_under_a_stored_id(t: Trace) -> None:
    s = t.service
    session = await s.create_session(app_name=APP, user_id=USER, session_id="s1")
    await s.append_event(session, said(1, "one", x=1))
    await t.call("other-event-same-id", s.append_event(session, said(1, "other", x=2)))
    t.rec("object-events", len(session.events))
    await t.get("stored", "s1")


async def test_a_different_event_under_a_stored_id_is_refused(
    durable: DurableSessionService, adk_database: DatabaseSessionService
) -> None:
    """ADK's in-memory service stores both, its database service fails on its key."""
    ours, memory, database = await traces(distinct_event_under_a_stored_id, durable, adk_database)
    assert step(ours, "other-event-same-id") == ("raises", "AlreadyExistsError")
    assert step(database, "other-event-same-id") == ("raises", "IntegrityError")
    assert step(ours, "stored") == step(database, "stored")  # nothing written
    assert step(ours, "object-events") == 1
    assert len(step(memory, "stored")["events"]) == 2


async def ids(t: Trace) -> None:
    s = t.service
    for label, sid in [("slash", "a/b"), ("long", "x" * 600), ("control", "s\x01")]:
        await t.call(label, s.create_session(app_name=APP, user_id=USER, session_id=sid))
    await t.call("empty-app", s.create_session(app_name="", user_id=USER, session_id="s"))
    await t.get("get-empty", "")
    await t.call("delete-empty", s.delete_session(app_name=APP, user_id=USER, session_id=""))
    await t.call("list-empty-user", s.list_sessions(app_name=APP, user_id=""))
    padded = await s.create_session(app_name=APP, user_id=USER, session_id=" s1 ")
    t.rec("padded-id", padded.id)
    empty = await s.create_session(app_name=APP, user_id=USER, session_id="")
    t.rec("empty-id-generated", len(empty.id) > 0)


async def test_ids_outside_the_id_rule_are_refused(
    durable: DurableSessionService, adk_database: DatabaseSessionService
) -> None:
    """1 to 512 characters, no '/', no control character: ADK takes any string."""
    ours, memory, database = await traces(ids, durable, adk_database)
    for label in ("slash", "long", "control", "empty-app"):
        assert step(ours, label) == ("raises", "ValueError")
        assert step(memory, label) != ("raises", "ValueError")
    for label in ("get-empty", "delete-empty", "list-empty-user"):
        assert step(ours, label) == ("raises", "ValueError")
        assert step(database, label) in (None, [])
    # Surrounding blanks are kept, as the database service keeps them (the
    # in-memory one strips them); an empty id gets a generated one, as the
    # in-memory one does (the database service stores "").
    assert step(ours, "padded-id") == step(database, "padded-id") == " s1 "
    assert step(memory, "padded-id") == "s1"
    assert step(ours, "empty-id-generated") is step(memory, "empty-id-generated") is True
    assert step(database, "empty-id-generated") is False


async def open_invocation_window(t: Trace) -> None:
    s = t.service
    session = await s.create_session(app_name=APP, user_id=USER, session_id="s1")
    for event in turn(0, "q0", "a0"):
        await s.append_event(session, event)
    await s.append_event(session, said(2, "q1", inv="inv-1"))
    call = types.FunctionCall(id="c1", name="stock", args={})
    await s.append_event(
        session,
        Event(
            id="e3",
            timestamp=T0 + 3,
            author="agent",
            invocation_id="inv-1",
            content=types.Content(role="model", parts=[types.Part(function_call=call)]),
        ),
    )
    for label, config in {
        "last-1": GetSessionConfig(num_recent_events=1),
        "after-e3": GetSessionConfig(after_timestamp=T0 + 3),
        "none": GetSessionConfig(num_recent_events=0),
    }.items():
        loaded = await s.get_session(app_name=APP, user_id=USER, session_id="s1", config=config)
        assert loaded is not None
        t.rec(label, [e.id for e in loaded.events])


async def test_an_open_invocation_comes_back_whole(
    durable: DurableSessionService, adk_database: DatabaseSessionService
) -> None:
    """ADK's resume reads the events of the invocation it continues: a window never cuts it."""
    ours, memory, database = await traces(open_invocation_window, durable, adk_database)
    assert_same(memory, database)
    assert step(memory, "last-1") == step(memory, "after-e3") == ["e3"]
    assert step(ours, "last-1") == step(ours, "after-e3") == ["e2", "e3"]
    assert step(ours, "none") == step(memory, "none") == []


async def timestamps_out_of_order(t: Trace) -> None:
    s = t.service
    session = await s.create_session(app_name=APP, user_id=USER, session_id="s1")
    for n, ts in [(1, 30), (2, 10), (3, 20), (4, 20)]:
        event = said(n, f"m{n}", author="agent")
        event.timestamp = T0 + ts
        await s.append_event(session, event)
    for label, config in {
        "all": None,
        "last-2": GetSessionConfig(num_recent_events=2),
        "after-15": GetSessionConfig(after_timestamp=T0 + 15),
    }.items():
        loaded = await s.get_session(app_name=APP, user_id=USER, session_id="s1", config=config)
        assert loaded is not None
        t.rec(label, [e.id for e in loaded.events])
    await t.get("state-and-contents", "s1")


async def test_events_come_back_in_append_order(
    durable: DurableSessionService, adk_database: DatabaseSessionService
) -> None:
    """As the in-memory service keeps them; the database service sorts by timestamp.

    ``after_timestamp`` keeps every event at or after the time, in append
    order (the in-memory service keeps only those after the last earlier one).
    """
    ours, memory, database = await traces(timestamps_out_of_order, durable, adk_database)
    assert step(ours, "all") == step(memory, "all") == ["e1", "e2", "e3", "e4"]
    assert step(database, "all") == ["e2", "e3", "e4", "e1"]
    assert step(ours, "last-2") == step(memory, "last-2") == ["e3", "e4"]
    assert step(ours, "after-15") == ["e1", "e3", "e4"]
    assert step(memory, "after-15") == ["e3", "e4"]
    assert step(database, "after-15") == ["e3", "e4", "e1"]
    assert step(ours, "state-and-contents") == step(memory, "state-and-contents")


async def values_json_cannot_hold(t: Trace) -> None:
    s = t.service
    await t.call(
        "object",
        s.create_session(app_name=APP, user_id=USER, session_id="s1", state={"f": object()}),
    )
    await t.call(
        "nul-shared",
        s.create_session(app_name=APP, user_id=USER, session_id="s2", state={"app:f": "a\x00b"}),
    )
    await t.call(
        "nul-session",
        s.create_session(app_name=APP, user_id=USER, session_id="s3", state={"f": "a\x00b"}),
    )
    session = await s.get_session(app_name=APP, user_id=USER, session_id="s3")
    assert session is not None
    await t.call("nul-user-delta", s.append_event(session, said(1, "x", **{"user:x": "a\x00"})))
    t.rec("object-events", len(session.events))
    await t.call("listed", s.list_sessions(app_name=APP))
    await t.call("app-and-user-state", s.get_user_state(app_name=APP, user_id=USER))


async def test_values_json_cannot_hold_are_refused_before_writing(
    durable: DurableSessionService, adk_database: DatabaseSessionService
) -> None:
    """ADK stores an unserializable value as its string form, and NUL where SQLite takes it."""
    ours, _, database = await traces(values_json_cannot_hold, durable, adk_database)
    for label in ("object", "nul-shared", "nul-user-delta"):
        assert step(ours, label) == ("raises", "ValueError")
        assert step(database, label) != ("raises", "ValueError")
    # Session-scoped state takes NUL (the database service's also holds its app:f).
    assert step(ours, "nul-session")["state"] == {"f": "a\x00b"}
    assert step(database, "nul-session")["state"]["f"] == "a\x00b"
    assert step(ours, "object-events") == 0
    assert [x["id"] for x in step(ours, "listed")] == ["s3"]
    assert step(ours, "app-and-user-state") == {}


async def recreated_under_the_same_id(t: Trace) -> None:
    s = t.service
    old = await s.create_session(app_name=APP, user_id=USER, session_id="s1")
    await s.delete_session(app_name=APP, user_id=USER, session_id="s1")
    await s.create_session(app_name=APP, user_id=USER, session_id="s1", state={"new": True})
    await t.call("old-object", s.append_event(old, said(1, "into the new session?")))
    await t.get("stored", "s1")


async def test_an_object_of_a_deleted_session_is_not_found(
    durable: DurableSessionService, adk_database: DatabaseSessionService
) -> None:
    """Even when a new session took its id: that is another conversation.

    ADK's database service raises StaleSessionError; its in-memory service
    appends to the new session.
    """
    ours, memory, database = await traces(recreated_under_the_same_id, durable, adk_database)
    assert step(ours, "old-object") == ("raises", "SessionNotFoundError")
    assert step(database, "old-object") == ("raises", "StaleSessionError")
    assert step(ours, "stored") == step(database, "stored")
    assert len(step(memory, "stored")["events"]) == 1


async def two_appends_at_once(t: Trace) -> None:
    s = t.service
    session = await s.create_session(app_name=APP, user_id=USER, session_id="s1")
    results = await asyncio.gather(
        s.append_event(session, said(1, "a", author="agent")),
        s.append_event(session, said(2, "b", author="agent")),
        return_exceptions=True,
    )
    t.rec("results", [error_type(r) if isinstance(r, BaseException) else r.id for r in results])
    loaded = await s.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert loaded is not None
    t.rec("stored", [e.id for e in loaded.events])


async def test_two_appends_at_once_through_one_object(
    durable: DurableSessionService, adk_database: DatabaseSessionService, backend: str
) -> None:
    """Both are stored, in the order they were sent, as ADK's services store them.

    The fence alone cannot tell them from two writers holding copies of one
    object: the service queues appends per object, so the second reads the
    place in the log the first moved the object to.
    """
    ours, memory, database = await traces(two_appends_at_once, durable, adk_database)
    assert step(memory, "results") == step(database, "results") == ["e1", "e2"]
    assert_same(ours, memory)


# ------------------------------------------- the service as ADK's callers hold it

ADK_STALE = "modified in storage"
"""What callers of ADK's database service match a stale append's message on."""


async def test_async_with_and_the_stale_message_read_as_the_database_services(
    durable: DurableSessionService, adk_database: DatabaseSessionService
) -> None:
    """``async with service:`` works, and a stale append says what ADK's says.

    Both services give the same error type and the words ADK's callers look
    for, through an object loaded before another append and through one built
    by hand behind the log. Leaving the block closes ADK's engine; ours leaves
    the caller's store open.
    """
    for service in (durable, adk_database):
        async with service as entered:
            assert entered is service
            await service.create_session(app_name=APP, user_id=USER, session_id="s1")
            first = await service.get_session(app_name=APP, user_id=USER, session_id="s1")
            second = await service.get_session(app_name=APP, user_id=USER, session_id="s1")
            assert first is not None and second is not None
            await service.append_event(first, said(1, "first"))
            with pytest.raises(StaleSessionError, match=ADK_STALE):
                await service.append_event(second, said(2, "second"))
            stored = await service.get_session(app_name=APP, user_id=USER, session_id="s1")
            assert stored is not None
            await service.append_event(stored, said(3, "third"))
            behind = Session(app_name=APP, user_id=USER, id="s1", events=[said(9, "never stored")])
            with pytest.raises(StaleSessionError, match=ADK_STALE):
                await service.append_event(behind, said(4, "fourth"))
    after = await durable.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert after is not None
    assert [e.content.parts[0].text for e in after.events if e.content and e.content.parts] == [
        "first",
        "third",
    ]
