"""A journaled tool's function call and its intent are one unit, on both backends.

docs/runs.md, "When events are committed"; docs/journal.md. With barrier
commits, the barrier before a journaled tool is left to the journal: the
model's call (with the user's message buffered before it) is written in the
same unit as the journal's intent, so no crash leaves a call stored without
its intent or an intent without its call. These tests check:

* one unit fewer per journaled call, counted in commits;
* atomicity: an intent that fails inside the unit (a trigger on the journal)
  writes neither the call nor the user's message, and nothing acts;
* app code before the tool (the agent's ``before_tool_callback`` or another
  plugin's) still sees the call durable first: the merge is skipped there;
* with one unit per event nothing changes (the call is stored alone first).

The crash matrix in tests/crash/test_invoicing.py (W3) kills a real process
at the intent: with barrier commits the call is lost with it and the model is
asked again; with one unit per event it is recovered TOOL_UNANSWERED.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext

from durable_adk import DurableRunner, errors, journaled
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.effect_tables.journal import Journal
from durable_adk.store import Store
from durable_adk.testing import Call, Say, ScriptedModel
from refusals import refuse

APP = "intent"
ACTS: list[str] = []


@journaled("ship:{order}")
def ship(order: str, idempotency_key: str) -> dict[str, str]:
    """Ships an order."""
    ACTS.append(idempotency_key)
    return {"order": order, "status": "shipped"}


def shipper(order: str = "A1", **extra: Any) -> LlmAgent:
    return LlmAgent(
        name="shipper",
        model=ScriptedModel([Call("ship", {"order": order}), Say("Shipped.")]),
        tools=[ship],
        **extra,
    )


@pytest.fixture(autouse=True)
def _no_acts() -> None:
    ACTS.clear()


async def stored(store: Store, session_id: str) -> list[Event]:
    session = await DurableSessionService(store).get_session(
        app_name=APP, user_id="u", session_id=session_id
    )
    return list(session.events) if session else []


def calls(events: list[Event]) -> list[str]:
    return [c.name or "" for e in events for c in e.get_function_calls()]


async def run_once(runner: DurableRunner, session_id: str) -> list[Event]:
    return [e async for e in runner.run(user_id="u", session_id=session_id, message="Ship A1.")]


async def test_the_call_and_its_intent_are_one_unit_one_fewer_per_call(store: Store) -> None:
    merged = DurableRunner(app=shipper(), app_name=APP, store=store)
    before = store.commits
    await run_once(merged, "s1")
    merged_units = store.commits - before
    alone = DurableRunner(app=shipper("A2"), app_name=APP, store=store, plugins=[BeforeTool()])
    before = store.commits
    await run_once(alone, "s2")
    alone_units = store.commits - before
    # run_start; user message + call + intent; the journal's DONE; the answer;
    # the final answer with the finish. Alone, the call is written first.
    assert (merged_units, alone_units) == (5, 6)
    assert ACTS == ["ship:A1", "ship:A2"]
    entry = await Journal(store).get("ship:A1")
    assert entry is not None and entry.status.value == "DONE"
    events = await stored(store, "s1")
    assert calls(events) == ["ship"]
    assert [r.name for e in events for r in e.get_function_responses()] == ["ship"]


async def refuse_intents(store: Store, backend: str) -> None:
    """Makes every new journal intent fail inside its unit (a trigger on the journal)."""
    await refuse(store, backend, "refuse_intent", "INSERT ON journal")


async def test_an_intent_refused_inside_the_unit_writes_no_call_and_nothing_acts(
    store: Store, backend: str
) -> None:
    await refuse_intents(store, backend)
    runner = DurableRunner(app=shipper(), app_name=APP, store=store, backoff=0.01)
    with pytest.raises(errors.DurableError):
        await run_once(runner, "s1")
    # Neither the call nor the user's message buffered before it was written.
    assert await stored(store, "s1") == []
    assert ACTS == []
    assert await Journal(store).get("ship:A1") is None


class BeforeTool(BasePlugin):
    """Another plugin with code before every tool: it must see the call stored."""

    def __init__(self, store: Store | None = None) -> None:
        super().__init__(name="before_tool_probe")
        self.store = store
        self.seen: list[list[str]] = []

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        if self.store is not None:
            self.seen.append(calls(await stored(self.store, tool_context.session.id)))
        return None


async def test_app_code_before_the_tool_sees_the_call_stored(store: Store) -> None:
    probe = BeforeTool(store)
    runner = DurableRunner(app=shipper(), app_name=APP, store=store, plugins=[probe])
    await run_once(runner, "s1")
    assert probe.seen == [["ship"]]

    seen: list[list[str]] = []

    async def agent_callback(
        tool: BaseTool, args: dict[str, Any], tool_context: ToolContext
    ) -> None:
        seen.append(calls(await stored(store, tool_context.session.id)))

    runner = DurableRunner(
        app=shipper(before_tool_callback=agent_callback), app_name=APP, store=store
    )
    await run_once(runner, "s2")
    assert seen == [["ship"]]
    assert ACTS == ["ship:A1"]  # the second run found the first one's effect


async def test_one_unit_per_event_stores_the_call_alone_first(store: Store) -> None:
    runner = DurableRunner(app=shipper(), app_name=APP, store=store, commits="per_event")
    await run_once(runner, "s1")
    assert calls(await stored(store, "s1")) == ["ship"]
    assert ACTS == ["ship:A1"]
