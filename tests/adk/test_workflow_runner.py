"""DurableRunner on Workflow roots, both backends: nodes and agent nodes' lost calls.

Real ADK runs (google-adk 2.13): a journaled FunctionNode acts once for one
business key across two sessions; a plain FunctionNode that failed after
acting (a transient fault, so the run is handed back for recovery) is never
run again: recovery parks the run with a "node in flight" dead letter. An
agent node whose tool failed after acting (ADK stores an error event after the
call and would, re-driven, end the node with the call unanswered) is answered
first by the recovery: from the journal's lookup (one act), by running an
idempotent tool again, or not at all for an unsafe tool (parked).
"""

from __future__ import annotations

from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.context import Context
from google.adk.tools.function_tool import FunctionTool
from google.adk.workflow import Workflow
from google.genai import types

from durable_adk import errors, idempotent, journaled, journaled_node
from durable_adk.adk.loops.recovery import Sweeper
from durable_adk.adk.runner import DurableRunner
from durable_adk.service.ops import Operations
from durable_adk.store import Store
from durable_adk.tables.ledger import RunStatus
from durable_adk.testing import Call, Say, ScriptedModel


def intake(ctx: Context) -> dict[str, str]:
    """Reads the order into state."""
    ctx.state["order_id"] = "O1"
    return {"order_id": "O1"}


async def drive(runner: DurableRunner, session: str) -> list[Any]:
    outputs = []
    async for event in runner.run(user_id="u", session_id=session, message="go"):
        if event.output is not None:
            outputs.append(event.output)
    return outputs


async def test_a_journaled_node_acts_once_per_business_key(store: Store) -> None:
    acts: list[str] = []

    @journaled_node(key="charge:{order_id}")
    def charge(order_id: str, idempotency_key: str) -> dict[str, Any]:
        acts.append(idempotency_key)
        return {"charged": order_id, "n": len(acts)}

    flow = Workflow(name="flow", edges=[("START", intake, charge)])
    runner = DurableRunner(app=flow, app_name="shop", store=store)
    first = await drive(runner, "s1")
    second = await drive(runner, "s2")
    assert acts == ["charge:O1"]  # the second session's node got the stored result
    assert first[-1] == second[-1] == {"charged": "O1", "n": 1}
    assert [r.status for r in await runner.ledger.list_runs()] == [RunStatus.DONE] * 2


async def test_a_journaled_tool_used_as_a_graph_node_keeps_its_journal(store: Store) -> None:
    acts: list[str] = []

    @journaled(key="ship:{order_id}")
    def ship(order_id: str, idempotency_key: str) -> dict[str, str]:
        acts.append(idempotency_key)
        return {"shipped": order_id}

    flow = Workflow(name="flow", edges=[("START", intake, ship)])
    runner = DurableRunner(app=flow, app_name="shop", store=store)
    await drive(runner, "s1")
    await drive(runner, "s2")
    assert acts == ["ship:O1"]
    assert [r.status for r in await runner.ledger.list_runs()] == [RunStatus.DONE] * 2


async def test_a_plain_node_that_failed_after_acting_is_parked_not_run_again(store: Store) -> None:
    acts: list[str] = []

    def charge(order_id: str) -> dict[str, str]:
        acts.append(order_id)
        if len(acts) == 1:  # the effect happened, then the database went away
            raise errors.StoreUnavailable("injected: a database restart after the charge")
        return {"charged": order_id}

    flow = Workflow(name="flow", edges=[("START", intake, charge)])
    runner = DurableRunner(app=flow, app_name="shop", store=store, backoff=0.01)
    try:
        await drive(runner, "s1")
    except errors.RunInterrupted:
        pass
    else:
        raise AssertionError("a transient fault must hand the run back")
    (run,) = await runner.ledger.list_runs()
    assert run.status is RunStatus.RUNNING  # handed back for recovery
    await runner.ledger.backdate(run.run_id, 3600)
    (recovery,) = await Sweeper(runner).recover_once()
    assert recovery.status is RunStatus.PARKED
    assert "node in flight: flow/charge" in recovery.reason
    assert acts == ["O1"]  # never a second charge
    (letter,) = await runner.ledger.dead_letters()
    assert "node in flight: flow/charge" in letter.error
    assert letter.classification == "NODE_INFLIGHT"
    # The operator's view (runs show, the dashboard) reads the nodes the same way.
    ops = Operations(
        store, root_agent_name=runner.root_agent_name, app_name="shop", nodes=runner.node_kinds
    )
    detail = await ops.run_detail(run.run_id)
    assert detail.finding is not None and detail.finding.cls == "NODE_INFLIGHT"


class Billing:
    """The outside world: charges by key; the first act fails after charging (a restart)."""

    def __init__(self) -> None:
        self.acts: list[str] = []
        self.charges: dict[str, dict[str, str]] = {}

    def charge(self, order: str, key: str) -> dict[str, str]:
        self.acts.append(key)
        self.charges.setdefault(key, {"order": order})
        if len(self.acts) == 1:
            raise errors.StoreUnavailable("injected: the database restarted after the charge")
        return self.charges[key]

    def find(self, key: str) -> dict[str, str] | None:
        return self.charges.get(key)


def clerk_flow(tool: Any) -> Workflow:
    script = [Call("charge", {"order": "o-1"}), Say("Charged o-1.")]
    clerk = LlmAgent(name="clerk", model=ScriptedModel({"clerk": script}), tools=[tool])
    return Workflow(name="flow", edges=[("START", clerk)])


async def fail_then_recover(store: Store, flow: Workflow) -> tuple[DurableRunner, Any]:
    runner = DurableRunner(app=flow, app_name="shop", store=store, backoff=0.01)
    with pytest.raises(errors.RunInterrupted):
        await drive(runner, "s1")
    (run,) = await runner.ledger.list_runs()
    await runner.ledger.backdate(run.run_id, 3600)
    (recovery,) = await Sweeper(runner).recover_once()
    return runner, recovery


async def answers(runner: DurableRunner) -> tuple[list[str], set[str], set[str]]:
    session = await runner.sessions.get_session(app_name="shop", user_id="u", session_id="s1")
    assert session is not None
    texts = [
        p.text
        for e in session.events
        if e.author == "clerk" and e.content
        for p in e.content.parts or ()
        if p.text
    ]
    calls = {c.id or "" for e in session.events for c in e.get_function_calls()}
    answered = {r.id or "" for e in session.events for r in e.get_function_responses()}
    return texts, calls, answered


async def test_an_agent_nodes_lost_journaled_call_is_answered_first_and_acts_once(
    store: Store,
) -> None:
    billing = Billing()

    @journaled(key="charge:{order}", lookup=billing.find)
    def charge(order: str, idempotency_key: str) -> dict[str, str]:
        """Charges an order."""
        return billing.charge(order, idempotency_key)

    runner, recovery = await fail_then_recover(store, clerk_flow(charge))
    assert (recovery.found.value, recovery.action, recovery.status) == (
        "TOOL_UNANSWERED",
        "redrive",
        RunStatus.DONE,
    )
    assert billing.acts == ["charge:o-1"]  # the answer came from the lookup
    texts, calls, answered = await answers(runner)
    assert texts == ["Charged o-1."] and calls == answered  # every call answered, one answer


async def test_an_agent_nodes_lost_idempotent_call_runs_again(store: Store) -> None:
    billing = Billing()

    @idempotent
    def charge(order: str) -> dict[str, str]:
        """Charges an order (declared safe to repeat: the service dedupes by key)."""
        return billing.charge(order, f"charge:{order}")

    runner, recovery = await fail_then_recover(store, clerk_flow(charge))
    assert (recovery.found.value, recovery.status) == ("TOOL_UNANSWERED", RunStatus.DONE)
    assert len(billing.acts) >= 2  # run again, as declared harmless
    texts, calls, answered = await answers(runner)
    assert texts == ["Charged o-1."] and calls == answered


async def test_an_agent_nodes_lost_unsafe_call_is_parked_not_run_again(store: Store) -> None:
    billing = Billing()

    def charge(order: str) -> dict[str, str]:
        """Charges an order (no journal, not idempotent)."""
        return billing.charge(order, f"charge:{order}")

    runner, recovery = await fail_then_recover(store, clerk_flow(charge))
    assert recovery.status is RunStatus.PARKED and "outcome unknown" in recovery.reason
    assert billing.acts == ["charge:o-1"]
    texts, _, answered = await answers(runner)
    assert texts == [] and answered == set()


async def test_a_lost_call_reopened_by_its_approval_is_answered_with_that_approval(
    store: Store,
) -> None:
    billing = Billing()

    @idempotent
    def charge(order: str) -> dict[str, str]:
        """Charges an order, once a person approved it."""
        return billing.charge(order, f"charge:{order}")

    flow = clerk_flow(FunctionTool(charge, require_confirmation=True))
    runner = DurableRunner(app=flow, app_name="shop", store=store, backoff=0.01)
    await drive(runner, "s1")
    session = await runner.sessions.get_session(app_name="shop", user_id="u", session_id="s1")
    assert session is not None
    request = next(e for e in session.events if e.long_running_tool_ids)
    approval = types.FunctionResponse(
        id=next(iter(request.long_running_tool_ids or ())),
        name="adk_request_confirmation",
        response={"confirmed": True},
    )
    message = types.Content(role="user", parts=[types.Part(function_response=approval)])
    with pytest.raises(errors.RunInterrupted):  # the approved charge acted, then failed
        async for _ in runner.run(
            user_id="u", session_id="s1", message=message, invocation_id=request.invocation_id
        ):
            pass
    (handed_back,) = [r for r in await runner.ledger.list_runs() if r.status is RunStatus.RUNNING]
    await runner.ledger.backdate(handed_back.run_id, 3600)
    (recovery,) = await Sweeper(runner).recover_once()
    assert (recovery.found.value, recovery.status) == ("TOOL_UNANSWERED", RunStatus.DONE)
    assert billing.acts == ["charge:o-1", "charge:o-1"]  # approved: run again, not asked again
    texts, _, _ = await answers(runner)
    assert texts == ["Charged o-1."]
