"""DurableSessionService's trusted cache: one read answered without a round trip.

``adopt_created`` and ``trust_next_read`` let exactly the next ``get_session``
of a key answer from the per-process cache; the reads after it go to the store
again. Store round trips are counted by wrapping ``store.fetch`` (every named
query goes through it). On both backends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.errors import StaleSessionError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.session import Session
from google.genai import types

from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.store import Store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.testing import Say, ScriptedModel

KEY = ("a", "u", "s")


class Counter:
    """Records the name of every query sent to the store."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def clear(self) -> None:
        self.queries.clear()


@pytest.fixture
def asked(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter]:
    counter = Counter()
    original = store.fetch

    async def counted(query: str, params: Any = None) -> Any:
        counter.queries.append(query)
        return await original(query, params)

    monkeypatch.setattr(store, "fetch", counted)
    yield counter


def ev(text: str, *, author: str = "user", inv: str = "inv-1", **delta: Any) -> Event:
    return Event(
        author=author,
        invocation_id=inv,
        content=types.Content(
            role="user" if author == "user" else "model", parts=[types.Part(text=text)]
        ),
        actions=EventActions(state_delta=dict(delta)),
    )


async def get(svc: DurableSessionService, config: GetSessionConfig | None = None) -> Session:
    session = await svc.get_session(app_name="a", user_id="u", session_id="s", config=config)
    assert session is not None
    return session


async def cold(store: Store, config: GetSessionConfig | None = None) -> Session:
    """The session as a service with nothing cached reads it."""
    return await get(DurableSessionService(store), config)


def ids(session: Session) -> list[str]:
    return [e.id for e in session.events]


# ------------------------------------------------------------- adopt_created


async def test_an_adopted_session_is_served_once_without_a_read(
    store: Store, asked: Counter
) -> None:
    svc = DurableSessionService(store)
    await svc.create_session(
        app_name="a",
        user_id="u",
        session_id="earlier",
        state={"app:tier": "gold", "user:name": "Ada"},
    )
    now = time.time()
    started = await RunLedger(store).start(
        app_name="a", user_id="u", session_id="s", request={}, owner="w", now=now
    )
    assert started is not None and started.created_session_pk is not None
    fresh = DurableSessionService(store)
    fresh.adopt_created(
        KEY,
        pk=started.created_session_pk,
        app_state=started.app_state,
        user_state=started.user_state,
        created_at=now,
    )
    assert fresh.cached_events(KEY) == []
    asked.clear()
    first = await get(fresh)
    assert asked.queries == []
    assert (first.app_name, first.user_id, first.id) == KEY
    assert first.events == []
    assert first.state == {"app:tier": "gold", "user:name": "Ada"}
    assert first.last_update_time == now
    # Exactly as the store has it.
    reference = await cold(store)
    assert first.state == reference.state
    assert first.last_update_time == reference.last_update_time
    assert first._storage_update_marker == reference._storage_update_marker
    asked.clear()
    second = await get(fresh)
    assert asked.queries == ["load_session_tail"]  # the permission was used up
    assert second.events == [] and second.state == reference.state
    # The adopted object appends like any other (its pk and sequence are right).
    await fresh.append_event(first, ev("hello", x=1))
    stored = await cold(store)
    assert [e.content.parts[0].text for e in stored.events if e.content and e.content.parts] == [
        "hello"
    ]
    assert stored.state["x"] == 1


async def test_a_service_without_a_cache_never_serves_from_it(store: Store, asked: Counter) -> None:
    svc = DurableSessionService(store, cache_sessions=0)
    await svc.create_session(app_name="a", user_id="u", session_id="s")
    svc.adopt_created(KEY, pk=1, app_state=None, user_state=None, created_at=0.0)
    assert svc.cached_events(KEY) is None
    assert svc.trust_next_read(KEY) is False
    asked.clear()
    await get(svc)
    assert asked.queries == ["load_session_tail"]


# ----------------------------------------------------------- trust_next_read


async def test_a_trusted_read_serves_the_cached_log_once(store: Store, asked: Counter) -> None:
    svc = DurableSessionService(store)
    session = await svc.create_session(app_name="a", user_id="u", session_id="s", state={"k": 0})
    for i in range(3):
        await svc.append_event(session, ev(f"m{i}", author="agent", k=i + 1, **{f"n{i}": i}))
    await get(svc)  # the caller has just read it
    assert svc.trust_next_read(KEY) is True
    asked.clear()
    trusted = await get(svc)
    assert asked.queries == []
    reference = await cold(store)
    assert ids(trusted) == ids(reference) == [e.id for e in session.events]
    assert trusted.state == reference.state == {"k": 3, "n0": 0, "n1": 1, "n2": 2}
    assert trusted.last_update_time == reference.last_update_time
    assert trusted._storage_update_marker == reference._storage_update_marker
    asked.clear()
    again = await get(svc)
    assert asked.queries == ["load_session_tail"]
    assert ids(again) == ids(reference)
    # The trusted object is fit for appending: its marker names the right position.
    await svc.append_event(trusted, ev("next", author="agent", k=4))
    assert (await cold(store)).state["k"] == 4


async def test_a_trusted_read_after_an_own_append_has_the_new_event(
    store: Store, asked: Counter
) -> None:
    svc = DurableSessionService(store)
    session = await svc.create_session(app_name="a", user_id="u", session_id="s")
    await svc.append_event(session, ev("one", k=1))
    await svc.append_event(session, ev("two", author="agent", k=2, j="x"))
    assert svc.trust_next_read(KEY) is True  # the caller has just written it
    asked.clear()
    trusted = await get(svc)
    assert asked.queries == []
    reference = await cold(store)
    assert ids(trusted) == ids(reference) and len(ids(trusted)) == 2
    assert trusted.state == reference.state == {"k": 2, "j": "x"}
    assert trusted.last_update_time == reference.last_update_time
    assert trusted._storage_update_marker == reference._storage_update_marker


async def test_a_trusted_read_after_an_own_append_has_the_new_shared_state(
    store: Store, asked: Counter
) -> None:
    """app: and user: keys written through the service are part of what a read returns."""
    svc = DurableSessionService(store)
    session = await svc.create_session(
        app_name="a", user_id="u", session_id="s", state={"app:plan": "free"}
    )
    await get(svc)
    await svc.append_event(session, ev("upgrade", **{"app:plan": "gold", "user:lang": "nb"}))
    assert svc.trust_next_read(KEY) is True
    asked.clear()
    trusted = await get(svc)
    assert asked.queries == []
    reference = await cold(store)
    assert reference.state == {"app:plan": "gold", "user:lang": "nb"}
    assert trusted.state == reference.state


async def test_distrust_withdraws_an_unused_trust(store: Store, asked: Counter) -> None:
    svc = DurableSessionService(store)
    session = await svc.create_session(app_name="a", user_id="u", session_id="s")
    await svc.append_event(session, ev("one"))
    assert svc.trust_next_read(KEY) is True
    svc.distrust(KEY)
    asked.clear()
    await get(svc)
    assert asked.queries == ["load_session_tail"]
    # Also after adopt_created, and harmless for a key that is not cached.
    svc.adopt_created(("a", "u", "other"), pk=999, app_state=None, user_state=None, created_at=1.0)
    svc.distrust(("a", "u", "other"))
    svc.distrust(("a", "u", "never-seen"))
    asked.clear()
    assert await svc.get_session(app_name="a", user_id="u", session_id="other") is None
    assert asked.queries == ["load_session_tail"]  # it read, and found no such row
    assert svc.cached_events(("a", "u", "other")) is None  # the unread entry is dropped


async def test_trust_next_read_needs_a_cached_session(store: Store, asked: Counter) -> None:
    writer = DurableSessionService(store)
    await writer.create_session(app_name="a", user_id="u", session_id="s")
    reader = DurableSessionService(store)
    assert reader.trust_next_read(KEY) is False
    asked.clear()
    await get(reader)
    assert asked.queries == ["load_session_tail"]  # no trust was recorded
    assert reader.trust_next_read(KEY) is True  # cached now
    # A deleted session leaves the cache: nothing to trust.
    await writer.delete_session(app_name="a", user_id="u", session_id="s")
    assert writer.trust_next_read(KEY) is False
    assert reader.trust_next_read(("a", "u", "nobody")) is False


# ------------------------------------------------------------ cached_events


async def test_cached_events_reflect_appends(store: Store) -> None:
    svc = DurableSessionService(store)
    assert svc.cached_events(KEY) is None
    session = await svc.create_session(app_name="a", user_id="u", session_id="s")
    assert svc.cached_events(KEY) == []
    appended = []
    for i in range(4):
        appended.append(await svc.append_event(session, ev(f"m{i}", inv=f"inv-{i // 2}")))
        cached = svc.cached_events(KEY)
        assert cached is not None and [e.id for e in cached] == [e.id for e in appended]
    # A copy: changing it changes nothing cached.
    copy = svc.cached_events(KEY)
    assert copy is not None
    copy.clear()
    assert [e.id for e in svc.cached_events(KEY) or []] == [e.id for e in appended]
    # Partial events are never stored, nor cached.
    await svc.append_event(session, Event(author="agent", invocation_id="inv-1", partial=True))
    assert len(svc.cached_events(KEY) or []) == 4
    # It is what the store holds.
    assert [e.id for e in (await cold(store)).events] == [e.id for e in appended]


async def test_cached_events_follow_a_read_of_another_writers_events(store: Store) -> None:
    mine = DurableSessionService(store)
    session = await mine.create_session(app_name="a", user_id="u", session_id="s")
    await mine.append_event(session, ev("mine"))
    other = DurableSessionService(store)
    theirs = await get(other)
    await other.append_event(theirs, ev("theirs"))
    # Not seen yet: the cache holds what this service last read or wrote.
    assert [e.id for e in mine.cached_events(KEY) or []] == [session.events[0].id]
    # An append from the stale object is refused and leaves no wrong log cached.
    with pytest.raises(StaleSessionError):
        await mine.append_event(session, ev("late"))
    cached = mine.cached_events(KEY)
    assert cached is None or [e.id for e in cached] == [session.events[0].id]
    reread = await get(mine)
    assert [e.id for e in mine.cached_events(KEY) or []] == ids(reread)
    assert len(ids(reread)) == 2


# ---------------------------------------------------------- GetSessionConfig


async def three_closed_invocations(svc: DurableSessionService) -> list[Event]:
    session = await svc.create_session(app_name="a", user_id="u", session_id="s")
    events = []
    for i in range(3):
        question = ev(f"q{i}", inv=f"inv-{i}")
        question.timestamp = 1000.0 + 10 * i
        answer = ev(f"a{i}", author="agent", inv=f"inv-{i}")
        answer.timestamp = 1000.0 + 10 * i + 1
        events.append(await svc.append_event(session, question))
        events.append(await svc.append_event(session, answer))
    return events


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (GetSessionConfig(num_recent_events=2), [4, 5]),
        (GetSessionConfig(num_recent_events=3), [3, 4, 5]),
        (GetSessionConfig(num_recent_events=0), []),
        (GetSessionConfig(num_recent_events=100), [0, 1, 2, 3, 4, 5]),
        (GetSessionConfig(after_timestamp=1011.0), [3, 4, 5]),
        (GetSessionConfig(after_timestamp=1011.0, num_recent_events=1), [5]),
        (GetSessionConfig(), [0, 1, 2, 3, 4, 5]),
    ],
    ids=["recent-2", "recent-3", "recent-0", "recent-100", "after", "after-recent-1", "empty"],
)
async def test_a_trusted_read_honours_get_session_config(
    store: Store, asked: Counter, config: GetSessionConfig, expected: list[int]
) -> None:
    svc = DurableSessionService(store)
    events = await three_closed_invocations(svc)
    assert svc.trust_next_read(KEY) is True
    asked.clear()
    trusted = await get(svc, config)
    assert asked.queries == []
    assert ids(trusted) == [events[i].id for i in expected]
    assert ids(trusted) == ids(await cold(store, config))
    # The window shaped that answer only: the cache still has the whole log.
    assert [e.id for e in svc.cached_events(KEY) or []] == [e.id for e in events]
    asked.clear()
    full = await get(svc)
    assert asked.queries == ["load_session_tail"]
    assert ids(full) == [e.id for e in events]


async def test_a_trusted_windowed_read_keeps_an_open_invocation_whole(
    store: Store, asked: Counter
) -> None:
    svc = DurableSessionService(store)
    events = await three_closed_invocations(svc)
    session = await get(svc)
    # A fourth invocation, still open: the user's message and a call awaiting its answer.
    call = Event(
        author="agent",
        invocation_id="inv-3",
        content=types.Content(
            role="model",
            parts=[types.Part(function_call=types.FunctionCall(id="c1", name="f", args={}))],
        ),
    )
    events.append(await svc.append_event(session, ev("q3", inv="inv-3")))
    events.append(await svc.append_event(session, call))
    assert svc.trust_next_read(KEY) is True
    asked.clear()
    trusted = await get(svc, GetSessionConfig(num_recent_events=1))
    assert asked.queries == []
    assert ids(trusted) == [events[6].id, events[7].id]
    assert ids(trusted) == ids(await cold(store, GetSessionConfig(num_recent_events=1)))


# ---------------------------------------------------------------- the runner


async def test_a_new_conversation_reads_its_session_from_the_store_not_at_all(
    store: Store, asked: Counter
) -> None:
    """submit adopts the session start made; ADK's first read and the end-of-run
    classification are served from the cache."""
    agent = LlmAgent(name="assistant", model=ScriptedModel({"assistant": [Say("hi there")]}))
    runner = DurableRunner(app=agent, app_name="shop", store=store, worker_id="w1")
    asked.clear()
    async for _ in runner.run(user_id="u", session_id="s", message="hello"):
        pass
    assert asked.queries.count("run_start") == 1
    assert "load_session_tail" not in asked.queries
    assert "run_claim_queued" not in asked.queries
    assert "run_get" not in asked.queries
    (run,) = await runner.ledger.list_runs()
    assert run.status is RunStatus.DONE
    stored = await DurableSessionService(store).get_session(
        app_name="shop", user_id="u", session_id="s"
    )
    assert stored is not None
    assert [e.content.parts[0].text for e in stored.events if e.content and e.content.parts] == [
        "hello",
        "hi there",
    ]
    # The service's cache ends the run with exactly what the store holds.
    assert [e.id for e in runner.sessions.cached_events(("shop", "u", "s")) or []] == [
        e.id for e in stored.events
    ]
    # No trust outlives the run: the next read goes to the store.
    asked.clear()
    await runner.sessions.get_session(app_name="shop", user_id="u", session_id="s")
    assert asked.queries == ["load_session_tail"]
