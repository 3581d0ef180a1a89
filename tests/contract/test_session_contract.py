"""One contract for ADK session services.

The behaviours every persistent ADK session service should share run against
DurableSessionService on SQLite and on PostgreSQL and against ADK's own
DatabaseSessionService. Behaviours where durable-adk deliberately goes further
(append order, idempotent re-append, fenced appends from partial reads, open
invocations kept whole) are in test_session_durable.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.genai import types

from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.store import open_store

IMPLEMENTATIONS = ["durable-sqlite", "durable-postgresql", "adk-database"]


@pytest.fixture(params=IMPLEMENTATIONS)
async def service(
    request: pytest.FixtureRequest, tmp_path: object
) -> AsyncIterator[BaseSessionService]:
    kind = str(request.param)
    if kind == "adk-database":
        adk = DatabaseSessionService(f"sqlite+aiosqlite:///{tmp_path}/adk.db")
        yield adk
        await adk.close()
        return
    backend = kind.removeprefix("durable-")
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path}/durable.db"
        async with open_store(url) as store:
            yield DurableSessionService(store, snapshot_every=4)
        return
    cluster = request.getfixturevalue("pg_cluster")
    name = f"c{abs(hash(request.node.nodeid)) % 10**12}"
    url = cluster.create_database(name, template="dadk_template")
    try:
        async with open_store(url) as store:
            yield DurableSessionService(store, snapshot_every=4)
    finally:
        cluster.drop_database(name)


def text_event(
    text: str, *, author: str = "user", invocation: str = "inv-1", **delta: object
) -> Event:
    return Event(
        author=author,
        invocation_id=invocation,
        content=types.Content(
            role="user" if author == "user" else "model", parts=[types.Part(text=text)]
        ),
        actions=EventActions(state_delta=dict(delta)),
    )


async def test_create_get_round_trip(service: BaseSessionService) -> None:
    created = await service.create_session(
        app_name="app", user_id="u1", session_id="s1", state={"k": "v"}
    )
    assert created.id == "s1" and created.state == {"k": "v"} and created.events == []
    loaded = await service.get_session(app_name="app", user_id="u1", session_id="s1")
    assert loaded is not None
    assert loaded.state == {"k": "v"}
    assert loaded.events == []


async def test_generated_session_id(service: BaseSessionService) -> None:
    created = await service.create_session(app_name="app", user_id="u1")
    assert created.id
    assert await service.get_session(app_name="app", user_id="u1", session_id=created.id)


async def test_duplicate_session_id_is_rejected_and_changes_nothing(
    service: BaseSessionService,
) -> None:
    await service.create_session(app_name="app", user_id="u1", session_id="s1", state={"a": 1})
    with pytest.raises(AlreadyExistsError):
        await service.create_session(
            app_name="app", user_id="u1", session_id="s1", state={"a": 2, "app:x": 9}
        )
    loaded = await service.get_session(app_name="app", user_id="u1", session_id="s1")
    assert loaded is not None and loaded.state == {"a": 1}


async def test_missing_session_is_none(service: BaseSessionService) -> None:
    assert await service.get_session(app_name="app", user_id="u1", session_id="nope") is None


async def test_events_and_state_survive_reload(service: BaseSessionService) -> None:
    session = await service.create_session(app_name="app", user_id="u1", session_id="s1")
    for i in range(10):
        await service.append_event(session, text_event(f"m{i}", count=i))
    loaded = await service.get_session(app_name="app", user_id="u1", session_id="s1")
    assert loaded is not None
    assert [e.content.parts[0].text for e in loaded.events if e.content and e.content.parts] == [
        f"m{i}" for i in range(10)
    ]
    assert loaded.state["count"] == 9
    assert [e.id for e in loaded.events] == [e.id for e in session.events]


async def test_state_prefixes(service: BaseSessionService) -> None:
    one = await service.create_session(
        app_name="app", user_id="u1", session_id="s1", state={"app:a": 1, "user:b": 2, "c": 3}
    )
    await service.append_event(one, text_event("x", **{"app:a": 10, "user:b": 20, "temp:t": 1}))
    assert one.state["temp:t"] == 1  # temp keys live in memory for the invocation
    two = await service.create_session(app_name="app", user_id="u1", session_id="s2")
    other_user = await service.create_session(app_name="app", user_id="u2", session_id="s3")
    assert two.state == {"app:a": 10, "user:b": 20}
    assert other_user.state == {"app:a": 10}
    reloaded = await service.get_session(app_name="app", user_id="u1", session_id="s1")
    assert reloaded is not None
    assert reloaded.state == {"app:a": 10, "user:b": 20, "c": 3}
    stored_event = reloaded.events[-1]
    assert "temp:t" not in stored_event.actions.state_delta


async def test_list_sessions(service: BaseSessionService) -> None:
    for sid, uid in [("s1", "u1"), ("s2", "u1"), ("s3", "u2")]:
        await service.create_session(app_name="app", user_id=uid, session_id=sid, state={"n": sid})
    await service.create_session(app_name="other", user_id="u1", session_id="s9")
    mine = await service.list_sessions(app_name="app", user_id="u1")
    assert sorted(s.id for s in mine.sessions) == ["s1", "s2"]
    assert all(not s.events for s in mine.sessions)
    assert {s.id: s.state["n"] for s in mine.sessions} == {"s1": "s1", "s2": "s2"}
    everyone = await service.list_sessions(app_name="app")
    assert sorted(s.id for s in everyone.sessions) == ["s1", "s2", "s3"]


async def test_list_sessions_reports_folded_state(service: BaseSessionService) -> None:
    session = await service.create_session(app_name="app", user_id="u1", session_id="s1")
    for i in range(9):
        await service.append_event(session, text_event(f"m{i}", step=i, **{f"k{i % 3}": i}))
    listed = await service.list_sessions(app_name="app", user_id="u1")
    assert listed.sessions[0].state == {"step": 8, "k0": 6, "k1": 7, "k2": 8}


async def test_delete_session(service: BaseSessionService) -> None:
    session = await service.create_session(app_name="app", user_id="u1", session_id="s1")
    await service.append_event(session, text_event("hello"))
    await service.delete_session(app_name="app", user_id="u1", session_id="s1")
    assert await service.get_session(app_name="app", user_id="u1", session_id="s1") is None
    again = await service.create_session(app_name="app", user_id="u1", session_id="s1")
    assert again.events == []
    loaded = await service.get_session(app_name="app", user_id="u1", session_id="s1")
    assert loaded is not None and loaded.events == []


async def test_stale_writer_is_rejected_and_writes_nothing(service: BaseSessionService) -> None:
    await service.create_session(app_name="app", user_id="u1", session_id="s1")
    first = await service.get_session(app_name="app", user_id="u1", session_id="s1")
    second = await service.get_session(app_name="app", user_id="u1", session_id="s1")
    assert first is not None and second is not None
    await service.append_event(first, text_event("from first", winner="first"))
    await asyncio.sleep(0.01)  # ADK's own service compares timestamps
    with pytest.raises(StaleSessionError):
        await service.append_event(second, text_event("from second", winner="second"))
    loaded = await service.get_session(app_name="app", user_id="u1", session_id="s1")
    assert loaded is not None
    assert [e.author for e in loaded.events] == ["user"]
    assert loaded.state["winner"] == "first"


async def test_partial_events_are_not_stored(service: BaseSessionService) -> None:
    session = await service.create_session(app_name="app", user_id="u1", session_id="s1")
    chunk = text_event("partial", author="agent")
    chunk.partial = True
    await service.append_event(session, chunk)
    await service.append_event(session, text_event("whole", author="agent"))
    loaded = await service.get_session(app_name="app", user_id="u1", session_id="s1")
    assert loaded is not None
    assert [e.content.parts[0].text for e in loaded.events] == ["whole"]


async def test_num_recent_events_on_a_finished_invocation(service: BaseSessionService) -> None:
    session = await service.create_session(app_name="app", user_id="u1", session_id="s1")
    for i in range(6):
        await service.append_event(session, text_event(f"q{i}", invocation=f"inv-{i}"))
        await service.append_event(
            session, text_event(f"a{i}", author="agent", invocation=f"inv-{i}")
        )
    loaded = await service.get_session(
        app_name="app", user_id="u1", session_id="s1", config=GetSessionConfig(num_recent_events=3)
    )
    assert loaded is not None
    assert [e.content.parts[0].text for e in loaded.events] == ["a4", "q5", "a5"]


async def test_get_user_state(service: BaseSessionService) -> None:
    await service.create_session(
        app_name="app", user_id="u1", session_id="s1", state={"user:lang": "fr", "x": 1}
    )
    assert await service.get_user_state(app_name="app", user_id="u1") == {"lang": "fr"}
    assert await service.get_user_state(app_name="app", user_id="nobody") == {}
