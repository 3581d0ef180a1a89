"""Barrier commits, on both backends: what is durable when, and a batch is fenced as one.

A DurableRunner run writes its events together at barriers (docs/runs.md,
"When events are committed"). These tests look at the store from a second,
cold session service at the moments that matter: when the tool runs (its
function call must be stored), when the caller is handed an event (it must be
stored), and they check that a refused batch writes nothing of itself.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from google.adk.agents import BaseAgent, LlmAgent, SequentialAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.apps import App, ResumabilityConfig
from google.adk.errors import StaleSessionError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.function_tool import FunctionTool
from google.genai import types

from durable_adk import DurableRunner, RunStatus, errors
from durable_adk.adk.commits.barrier import EventBatch, may_look_ahead, using_batch
from durable_adk.adk.services.sessions import RUN_METADATA_KEY, DurableSessionService
from durable_adk.store import Store
from durable_adk.tables.ledger import RunLedger
from durable_adk.testing import Call, Say, ScriptedModel

APP = "barriers"


async def stored(store: Store, session_id: str) -> list[Event]:
    """The session's events as a fresh process would read them."""
    session = await DurableSessionService(store).get_session(
        app_name=APP, user_id="u", session_id=session_id
    )
    return list(session.events) if session else []


def calls_in(events: list[Event]) -> list[str]:
    return [c.id or "" for e in events for c in e.get_function_calls()]


class CountingStore:
    """Counts the named queries a store runs (wraps ``fetch``, which every call goes through)."""

    def __init__(self, store: Store) -> None:
        self.calls: Counter[str] = Counter()
        self._inner = store.fetch
        store.fetch = self._fetch  # type: ignore[method-assign]

    async def _fetch(self, query: str, params: Any = None) -> Any:
        self.calls[query] += 1
        return await self._inner(query, params)


@pytest.mark.parametrize("commits", ["barrier", "per_event"])
async def test_the_call_is_stored_before_the_tool_runs_and_every_event_before_the_caller_sees_it(
    store: Store, commits: Any
) -> None:
    seen_by_tool: list[list[str]] = []

    async def lookup(order: str) -> dict[str, str]:
        """Looks an order up (reads the store as another process would)."""
        seen_by_tool.append(calls_in(await stored(store, "s1")))
        return {"order": order, "status": "shipped"}

    agent = LlmAgent(
        name="clerk",
        model=ScriptedModel([Call("lookup", {"order": "A1"}), Say("It has shipped.")]),
        tools=[lookup],
    )
    runner = DurableRunner(app=agent, app_name=APP, store=store, commits=commits)
    handed = 0
    async for event in runner.run(user_id="u", session_id="s1", message="Where is A1?"):
        handed += 1
        ids = [e.id for e in await stored(store, "s1")]
        assert event.id in ids, f"event {handed} handed to the caller before it was stored"
    events = await stored(store, "s1")
    call_ids = calls_in(events)
    assert len(call_ids) == 1 and seen_by_tool == [call_ids]  # durable before the tool ran
    assert handed == len(events) - 1  # every event but the user's is handed over
    (run,) = await runner.ledger.list_runs()
    assert run.status is RunStatus.DONE


class SeesTheCaller(BasePlugin):
    """Notes, before each model call and tool, whether the caller is still busy with an event."""

    def __init__(self, caller: dict[str, Any]) -> None:
        super().__init__(name="sees_the_caller")
        self.caller = caller
        self.seen: list[tuple[str, bool, int]] = []

    def _note(self, what: str) -> None:
        self.seen.append((what, self.caller["busy"], len(self.caller["received"])))

    async def before_model_callback(self, **_: Any) -> None:
        self._note("model")

    async def before_tool_callback(self, **_: Any) -> None:
        self._note("tool")


async def test_nothing_runs_before_the_caller_has_taken_every_event_and_asked_for_the_next(
    store: Store,
) -> None:
    # With barrier commits (per-event commits let ADK take its next step while
    # the caller handles the event just handed). A first agent's answer and
    # end marker are held together and handed over at the second agent's
    # barrier (several events in one hand-over): the second agent's model call
    # and its tool run only once the caller has taken them all and asked for
    # the next, even a caller slow with each one.
    caller: dict[str, Any] = {"busy": False, "received": []}
    probe = SeesTheCaller(caller)
    greeter = LlmAgent(name="greeter", model=ScriptedModel([Say("Hello, looking it up.")]))
    clerk = LlmAgent(
        name="clerk",
        model=ScriptedModel([Call("lookup", {"order": "A1"}), Say("It has shipped.")]),
        tools=[lambda_lookup],
    )
    app = App(
        name=APP,
        root_agent=SequentialAgent(name="desk", sub_agents=[greeter, clerk]),
        plugins=[probe],
        resumability_config=ResumabilityConfig(is_resumable=True),
    )
    runner = DurableRunner(app=app, store=store, commits="barrier")
    async for event in runner.run(user_id="u", session_id="lock1", message="Where is A1?"):
        caller["busy"] = True
        caller["received"].append(event.id)
        for _ in range(5):
            await asyncio.sleep(0)  # the caller's own work, which ADK must not overtake
        caller["busy"] = False
    assert [what for what, _, _ in probe.seen] == ["model", "model", "tool", "model"]
    assert not any(busy for _, busy, _ in probe.seen), probe.seen
    # Each step saw every event stored before it in the caller's hands.
    stored_ids = [e.id for e in await stored(store, "lock1") if e.author != "user"]
    for _what, _busy, received in probe.seen:
        assert caller["received"][:received] == stored_ids[:received]
    assert probe.seen[1][2] >= 2  # the greeter's answer and end marker before the clerk's model
    assert caller["received"] == stored_ids


def lambda_lookup(order: str) -> dict[str, str]:
    """Looks an order up."""
    return {"order": order, "status": "shipped"}


def ship(order: str) -> dict[str, str]:
    """Ships an order (a person approves it first)."""
    return {"order": order, "status": "shipped"}


class ProbeBeforeTool(BasePlugin):
    """Another plugin's code before every tool."""

    def __init__(self) -> None:
        super().__init__(name="probe_before_tool")

    async def before_tool_callback(self, **_: Any) -> None:
        return None


@pytest.mark.parametrize(
    ("confirmation", "plugins", "barrier"),
    [
        # ADK's FunctionTool asks for its confirmation without running: no act,
        # no barrier; the call goes with the pause.
        pytest.param(True, [], False, id="asks"),
        # A predicate is app code whose answer is not known before it runs.
        pytest.param(lambda order: True, [], True, id="predicate"),
        # Another plugin's code runs before the tool: it needs the call durable.
        pytest.param(True, [ProbeBeforeTool()], True, id="plugin"),
    ],
)
async def test_a_call_that_only_asks_for_confirmation_goes_with_the_pause(
    store: Store, confirmation: Any, plugins: list[BasePlugin], barrier: bool
) -> None:
    agent = LlmAgent(
        name="clerk",
        model=ScriptedModel([Call("ship", {"order": "A1"}), Say("Shipped.")]),
        tools=[FunctionTool(ship, require_confirmation=confirmation)],
    )
    runner = DurableRunner(app=agent, app_name=APP, store=store, plugins=plugins)
    counting = CountingStore(store)
    async for _ in runner.run(user_id="u", session_id="s1", message="Ship A1"):
        pass
    counting.calls.pop("sweeper_seen", None)
    expected = {"run_start": 1, "append_events_finish": 1}
    if barrier:
        expected["append_events"] = 1  # the user's message and the call, before the tool
    assert dict(counting.calls) == expected
    (run,) = await runner.ledger.list_runs()
    assert run.status is RunStatus.PAUSED
    names = [c.name for e in await stored(store, "s1") for c in e.get_function_calls()]
    assert names == ["ship", "adk_request_confirmation"]


def lookup(order: str) -> dict[str, str]:
    """Looks an order up."""
    return {"order": order, "status": "shipped"}


async def test_barrier_commits_write_fewer_units_than_per_event(store: Store) -> None:
    def runner(commits: Any) -> DurableRunner:
        agent = LlmAgent(
            name="clerk",
            model=ScriptedModel([Call("lookup", {"order": "A1"}), Say("It has shipped.")]),
            tools=[lookup],
        )
        return DurableRunner(app=agent, app_name=APP, store=store, commits=commits)

    counting = CountingStore(store)
    units = {}
    for commits in ("per_event", "barrier"):
        counting.calls.clear()
        async for _ in runner(commits).run(user_id="u", session_id=commits, message="A1?"):
            pass
        units[commits] = dict(counting.calls)
    # A fresh runner asks once whether a recovery sweeper runs anywhere (not per run).
    assert units["per_event"].pop("sweeper_seen") == units["barrier"].pop("sweeper_seen") == 1
    # Per event: user message, call, response, answer, end marker, one unit each.
    assert units["per_event"] == {"run_start": 1, "append_event": 5, "run_finish": 1}
    # Barrier, counted from decisions: the user's message goes with the
    # model's call (before the tool runs), the tool's answer before the next
    # model call, and the answer and the end marker with the run's finish.
    assert units["barrier"] == {
        "run_start": 1,
        "append_events": 1,
        "append_event": 1,
        "append_events_finish": 1,
    }
    assert [e.id for e in await stored(store, "barrier")] != []
    assert len(await stored(store, "barrier")) == len(await stored(store, "per_event")) == 5


class Announcer(BaseAgent):
    """A custom agent: code of the app's own runs between its events."""

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        for n in range(3):
            yield Event(
                invocation_id=ctx.invocation_id,
                author=self.name,
                content=types.Content(role="model", parts=[types.Part(text=f"step {n}")]),
            )


def test_adk_may_run_ahead_only_for_trees_of_adks_own_agents() -> None:
    llm = LlmAgent(name="a", model=ScriptedModel([Say("hi")]))
    assert may_look_ahead(llm)
    assert may_look_ahead(SequentialAgent(name="seq", sub_agents=[llm]))
    custom = Announcer(name="announcer")
    assert not may_look_ahead(custom)
    assert not may_look_ahead(SequentialAgent(name="seq2", sub_agents=[custom]))


async def test_a_custom_agent_is_driven_lock_step_each_event_stored_before_the_next_step(
    store: Store,
) -> None:
    counting = CountingStore(store)
    runner = DurableRunner(
        app=Announcer(name="announcer"), app_name=APP, store=store, commits="barrier"
    )
    texts = []
    async for event in runner.run(user_id="u", session_id="c1", message="go"):
        if event.content and event.content.parts:
            texts.append(event.content.parts[0].text)
            assert event.id in [e.id for e in await stored(store, "c1")]
    assert texts == ["step 0", "step 1", "step 2"]
    # Lock-step: each step written before the agent's next one; the user's
    # message (which the run's request makes again) waits for the first.
    assert counting.calls["append_events"] == 1 and counting.calls["append_event"] >= 2


def stamped(text: str, run_id: str, epoch: int) -> Event:
    event = Event(
        author="user",
        invocation_id="inv-1",
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta={"k": text, "app:last": text, "user:seen": text}),
    )
    event.custom_metadata = {RUN_METADATA_KEY: {"run_id": run_id, "epoch": epoch}}
    return event


async def claimed_run(store: Store, session_id: str) -> tuple[RunLedger, Any]:
    ledger = RunLedger(store)
    run = await ledger.submit(
        app_name=APP, user_id="u", session_id=session_id, request={}, owner="w"
    )
    claimed = await ledger.claim_queued(run.run_id, "w")
    assert claimed is not None
    return ledger, claimed


async def test_a_batch_is_written_in_one_unit_with_its_sequence_numbers_and_deltas(
    store: Store,
) -> None:
    svc = DurableSessionService(store, snapshot_every=2)
    s = await svc.create_session(app_name=APP, user_id="u", session_id="b1")
    _, run = await claimed_run(store, "b1")
    counting = CountingStore(store)
    batch = EventBatch((APP, "u", "b1"), svc)
    with using_batch(batch):
        for text in ("one", "two", "three"):
            await svc.append_event(s, stamped(text, run.run_id, run.epoch))
        assert counting.calls == {}  # buffered: nothing written yet
        assert await stored(store, "b1") == []
        await svc.flush_batch(batch)
    assert counting.calls["append_events"] == 1 and "append_event" not in counting.calls
    fresh = await DurableSessionService(store).get_session(
        app_name=APP, user_id="u", session_id="b1"
    )
    assert fresh is not None
    assert [e.content.parts[0].text for e in fresh.events if e.content and e.content.parts] == [
        "one",
        "two",
        "three",
    ]
    assert fresh.state["k"] == "three" and fresh.state["app:last"] == "three"
    assert fresh.state["user:seen"] == "three"
    report = await svc.rebuild_state(app_name=APP, user_id="u", session_id="b1")
    assert report.seq == 3 and report.snapshots_consistent and report.snapshots == 1
    # The writer's own object goes on from where the batch left it.
    await svc.append_event(s, stamped("four", run.run_id, run.epoch))
    assert len(await stored(store, "b1")) == 4


async def two_held(
    store: Store, session_id: str
) -> tuple[DurableSessionService, RunLedger, Any, EventBatch]:
    """A service holding two appends of a claimed run in a batch (nothing written yet)."""
    svc = DurableSessionService(store)
    s = await svc.create_session(app_name=APP, user_id="u", session_id=session_id)
    ledger, run = await claimed_run(store, session_id)
    batch = EventBatch((APP, "u", session_id), svc)
    with using_batch(batch):
        await svc.append_event(s, stamped("one", run.run_id, run.epoch))
        await svc.append_event(s, stamped("two", run.run_id, run.epoch))
    return svc, ledger, run, batch


async def test_a_batch_of_a_run_taken_over_writes_nothing(store: Store) -> None:
    svc, ledger, run, batch = await two_held(store, "b2")
    await ledger.backdate(run.run_id, 3600)
    (taken,) = await RunLedger(store).claim_expired("thief")
    assert taken.epoch == run.epoch + 1
    with pytest.raises(errors.Fenced):
        await svc.flush_batch(batch)
    assert await stored(store, "b2") == []
    with pytest.raises(errors.Fenced):  # nothing more of the drive is written
        await svc.flush_batch(batch)


async def test_a_batch_meeting_another_writer_writes_nothing(store: Store) -> None:
    svc, _, run, batch = await two_held(store, "b3")
    other = await DurableSessionService(store).get_session(
        app_name=APP, user_id="u", session_id="b3"
    )
    assert other is not None
    await DurableSessionService(store).append_event(other, stamped("theirs", run.run_id, run.epoch))
    with pytest.raises(StaleSessionError):
        await svc.flush_batch(batch)
    texts = [e.content.parts[0].text for e in await stored(store, "b3") if e.content]
    assert texts == ["theirs"]


async def test_a_read_inside_the_batch_sees_the_batch_and_reappending_is_a_no_op(
    store: Store,
) -> None:
    svc = DurableSessionService(store)
    s = await svc.create_session(app_name=APP, user_id="u", session_id="b4")
    _, run = await claimed_run(store, "b4")
    batch = EventBatch((APP, "u", "b4"), svc)
    event = stamped("one", run.run_id, run.epoch)
    with using_batch(batch):
        await svc.append_event(s, event)
        await svc.append_event(s, event)  # the same event again: nothing more
        read = await svc.get_session(app_name=APP, user_id="u", session_id="b4")
        assert read is not None and [e.id for e in read.events] == [event.id]
        assert [e.id for e in await stored(store, "b4")] == [event.id]  # the read flushed it
        assert batch.pending == []


async def test_an_unknown_commit_mode_is_refused(store: Store) -> None:
    with pytest.raises(errors.InvalidArgument, match="commits"):
        DurableRunner(
            app=LlmAgent(name="a", model=ScriptedModel([Say("hi")])),
            store=store,
            commits="sometimes",  # type: ignore[arg-type]
        )
