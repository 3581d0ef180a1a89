"""A run's cost does not grow with its conversation's length, on both backends.

Three things a run does per event or per run used to walk the whole session:
the check that an append inside a drive is not an event the session already
holds (a re-append is a no-op), the search for unreadable events when a run
starts, and the classification of the run's invocation when the drive ends.
The first two are answered from the cached log's index (the first when the
session object is the one the service handed out; any other object's own
events are searched, as before); the last reads the log from the
invocation's first event on. What each says must not change: the tests
below pin the no-op after a reload, a copy, a rewind, a partial read and an
append made through another service.
"""

from __future__ import annotations

from typing import Any, SupportsIndex

import pytest
from google.adk.agents import LlmAgent
from google.adk.errors import StaleSessionError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.session import Session
from google.genai import types

from durable_adk import DurableRunner, RunStatus
from durable_adk.adk.commits.barrier import EventBatch, using_batch
from durable_adk.adk.eventlog.classify import Classification
from durable_adk.adk.runs import driver
from durable_adk.adk.services.sessions import RUN_METADATA_KEY, DurableSessionService
from durable_adk.store import Store
from durable_adk.tables.ledger import RunLedger
from durable_adk.testing import Call, Say, ScriptedModel

APP = "long"


class WalkedList(list[Event]):
    """A session's event list that counts the walks over it (iteration, reversal, search)."""

    def __init__(self, events: list[Event]) -> None:
        super().__init__(events)
        self.walks = 0

    def __iter__(self) -> Any:
        self.walks += 1
        return super().__iter__()

    def __reversed__(self) -> Any:
        self.walks += 1
        return super().__reversed__()

    def __contains__(self, item: object) -> bool:
        self.walks += 1
        return super().__contains__(item)

    def index(self, *args: Any) -> int:
        self.walks += 1
        return super().index(*args)

    def count(self, value: Any) -> int:
        self.walks += 1
        return super().count(value)

    def __getitem__(self, item: SupportsIndex | slice) -> Any:
        if isinstance(item, slice):
            self.walks += 1
        return super().__getitem__(item)


def stamped(text: str, run: Any, *, invocation_id: str = "inv-1", **actions: Any) -> Event:
    event = Event(
        author="user",
        invocation_id=invocation_id,
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(**actions),
    )
    event.custom_metadata = {RUN_METADATA_KEY: {"run_id": run.run_id, "epoch": run.epoch}}
    return event


async def claimed_run(store: Store, session_id: str) -> Any:
    ledger = RunLedger(store)
    run = await ledger.submit(
        app_name=APP, user_id="u", session_id=session_id, request={}, owner="w"
    )
    claimed = await ledger.claim_queued(run.run_id, "w")
    assert claimed is not None
    return claimed


async def stored_ids(store: Store, session_id: str) -> list[str]:
    session = await DurableSessionService(store).get_session(
        app_name=APP, user_id="u", session_id=session_id
    )
    return [e.id for e in session.events] if session else []


async def read(svc: DurableSessionService, session_id: str, **config: Any) -> Session:
    session = await svc.get_session(
        app_name=APP,
        user_id="u",
        session_id=session_id,
        config=GetSessionConfig(**config) if config else None,
    )
    assert session is not None
    return session


async def test_an_append_in_a_drive_does_not_walk_the_sessions_log(store: Store) -> None:
    svc = DurableSessionService(store)
    s = await svc.create_session(app_name=APP, user_id="u", session_id="w1")
    run = await claimed_run(store, "w1")
    batch = EventBatch((APP, "u", "w1"), svc)
    first = [stamped(f"e{i}", run) for i in range(30)]
    with using_batch(batch):
        for event in first:
            await svc.append_event(s, event)
        reloaded = await read(svc, "w1")  # a read is a barrier: the 30 are written
        walked = WalkedList(reloaded.events)
        reloaded.events = walked
        new = stamped("new", run)
        await svc.append_event(reloaded, new)
        await svc.append_event(reloaded, first[3])  # stored before: a no-op
        await svc.append_event(reloaded, new)  # buffered: a no-op
        await svc.append_event(reloaded, stamped("newer", run))
        assert walked.walks == 0, "an append walked the session's events"
        assert len(batch.pending) == 2
        await svc.flush_batch(batch)
    ids = await stored_ids(store, "w1")
    assert ids == [e.id for e in first] + [new.id, ids[-1]] and len(set(ids)) == 32


async def test_reappending_stays_a_no_op_whatever_object_holds_the_session(
    store: Store,
) -> None:
    svc = DurableSessionService(store)
    s = await svc.create_session(app_name=APP, user_id="u", session_id="w2")
    run = await claimed_run(store, "w2")
    batch = EventBatch((APP, "u", "w2"), svc)
    one, two = stamped("one", run), stamped("two", run)
    with using_batch(batch):
        await svc.append_event(s, one)
        await svc.append_event(s, two)
        await svc.append_event(s, one)  # in the batch still: a no-op
        assert [p.event.id for p in batch.pending] == [one.id, two.id]
        # A reload (the cache's log), then a copy of it (its own event objects).
        reloaded = await read(svc, "w2")
        await svc.append_event(reloaded, one)
        copy = reloaded.model_copy(deep=True)
        await svc.append_event(copy, two)
        assert batch.pending == []
        # A rewind of the invocation: the session object still holds its events.
        rewind = stamped("rewind", run, invocation_id="inv-2", rewind_before_invocation_id="inv-1")
        rewind.content = None
        await svc.append_event(reloaded, rewind)
        await svc.append_event(reloaded, one)
        assert [p.event.id for p in batch.pending] == [rewind.id]
        await svc.flush_batch(batch)
        # An event appended to the object through another service: this
        # service's cache has not seen it, the object has.
        other = stamped("other", run)
        with using_batch(None):
            await DurableSessionService(store).append_event(reloaded, other)
        await svc.append_event(reloaded, other)
        assert batch.pending == []
    assert await stored_ids(store, "w2") == [one.id, two.id, rewind.id, other.id]


async def test_a_partial_session_does_not_hold_what_it_did_not_read(store: Store) -> None:
    svc = DurableSessionService(store)
    s = await svc.create_session(app_name=APP, user_id="u", session_id="w3")
    run = await claimed_run(store, "w3")
    batch = EventBatch((APP, "u", "w3"), svc)
    one, two = stamped("one", run, invocation_id="inv-0"), stamped("two", run)
    with using_batch(batch):
        await svc.append_event(s, one)
        await svc.append_event(s, two)
        recent = await read(svc, "w3", num_recent_events=1)
        assert [e.id for e in recent.events] == [two.id]
        await svc.append_event(recent, one)  # not in this object: buffered, as before
        assert [p.event.id for p in batch.pending] == [one.id]
        with pytest.raises(StaleSessionError, match="already stored"):
            await svc.flush_batch(batch)
    assert await stored_ids(store, "w3") == [one.id, two.id]


def lookup(order: str) -> dict[str, str]:
    """Looks an order up."""
    return {"order": order, "status": "shipped"}


async def test_a_drives_end_classifies_its_invocation_not_the_whole_session(
    store: Store,
) -> None:
    turns = 4
    agent_model = ScriptedModel([Call("lookup", {"order": "A1"}), Say("It has shipped.")] * turns)
    agent = LlmAgent(name="clerk", model=agent_model, tools=[lookup])
    runner = DurableRunner(app=agent, app_name=APP, store=store)
    given: list[tuple[int, Classification]] = []
    classify = runner.path.classify

    def spy(events: Any, invocation_id: str | None) -> Classification:
        found = classify(events, invocation_id)
        given.append((len(events), found))
        return found

    runner.path.classify = spy  # type: ignore[method-assign]
    for _ in range(turns):
        async for _event in runner.run(user_id="u", session_id="c1", message="Where is A1?"):
            pass
    session = await read(DurableSessionService(store), "c1")
    runs = sorted(await runner.ledger.list_runs(), key=lambda r: r.created_at)
    assert [r.status for r in runs] == [RunStatus.DONE] * turns
    per_invocation = [sum(e.invocation_id == r.invocation_id for e in session.events) for r in runs]
    assert [n for n, _ in given] == per_invocation  # each end read its invocation's events only
    assert len(session.events) == sum(per_invocation) > per_invocation[-1]
    assert [found.invocation_id for _, found in given] == [r.invocation_id for r in runs]
    assert all(found.cls == "ACTUALLY_DONE" for _, found in given)


async def test_a_runs_start_looks_up_unreadable_events_without_walking_the_session(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    turns = 3
    model = ScriptedModel([Call("lookup", {"order": "A1"}), Say("It has shipped.")] * turns)
    runner = DurableRunner(
        app=LlmAgent(name="clerk", model=model, tools=[lookup]), app_name=APP, store=store
    )
    looked_at: list[int] = []
    decide = driver.unreadable_ending

    def spy(run: Any, events: Any) -> Any:
        looked_at.append(len(events))
        return decide(run, events)

    monkeypatch.setattr(driver, "unreadable_ending", spy)
    for _ in range(turns):
        async for _event in runner.run(user_id="u", session_id="c2", message="Where is A1?"):
            pass
    # Each start was handed the log's unreadable events (none), not the log.
    assert looked_at == [0] * turns
    runs = await runner.ledger.list_runs()
    assert [r.status for r in runs] == [RunStatus.DONE] * turns
