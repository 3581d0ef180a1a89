"""DurableRunner on Workflow roots, both backends: journaled nodes and guarded plain nodes.

Real ADK runs (google-adk 2.13): a journaled FunctionNode acts once for one
business key across two sessions; a plain FunctionNode that failed after
acting (a transient fault, so the run is handed back for recovery) is never
run again: recovery parks the run with a "node in flight" dead letter.
"""

from __future__ import annotations

from typing import Any

from google.adk.agents.context import Context
from google.adk.workflow import Workflow

from durable_adk import errors, journaled, journaled_node
from durable_adk.adk.recovery import Sweeper
from durable_adk.adk.runner import DurableRunner
from durable_adk.ledger import RunStatus
from durable_adk.store import Store


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
