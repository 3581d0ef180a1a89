"""A saga stage that pauses on a long-running call (issue 41): both backends, counting services.

A stage that sleeps (or starts a job) pauses the saga after the call's tool
ran, as ADK's SequentialAgent does: the timer is stored, the run is PAUSED,
the saga stays RUNNING; the wake-up resumes the saga at that stage, the
stages after it run, and a later failure compensates what came before the
pause, once, counted at the fake inventory service.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from examples.reminders.app import reply_to_sleep
from google.adk.agents import LlmAgent

from durable_adk.adk.loops.resume import Resumer
from durable_adk.adk.loops.sleep import Waker, sleep_tool
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.tools.long_running import long_running_tool
from durable_adk.adk.tools.saga_agent import SagaSequence, SagaStage
from durable_adk.effect_tables.jobs import JobState, JobTable
from durable_adk.effect_tables.sagas import SagaLedger, SagaStatus
from durable_adk.store import Store
from durable_adk.tables.ledger import RunStatus
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.services import FakeService, ResourceClient
from saga_support import Releases, reserve_stage


@pytest.fixture
def inventory(tmp_path: Path) -> Iterator[FakeService]:
    with FakeService("inventory", tmp_path / "inventory.db") as service:
        yield service


def failing_ship() -> SagaStage:
    def ship(state: Any, key: str) -> Any:
        raise RuntimeError("the carrier refused the parcel")

    return SagaStage(name="ship", action=ship, find=lambda key: None, uncompensatable=True)


def order_saga(client: ResourceClient, wait: LlmAgent) -> tuple[SagaSequence, Releases]:
    releases = Releases(client)
    stages = [reserve_stage(client), wait, failing_ship()]
    saga = SagaSequence("order", stages, {"reserve": releases.__call__})
    return saga, releases


async def session_state(runner: DurableRunner) -> dict[str, Any]:
    session = await runner.sessions.get_session(app_name="shop", user_id="u", session_id="s")
    assert session is not None
    return dict(session.state)


async def test_a_saga_paused_on_a_sleep_wakes_continues_and_compensates_once(
    store: Store, inventory: FakeService
) -> None:
    client = ResourceClient(inventory.url, "reservations")
    model = ScriptedModel({"cool_off": [Call("durable_sleep", {"seconds": 600}), reply_to_sleep]})
    wait = LlmAgent(name="cool_off", model=model, tools=[sleep_tool()])
    saga, releases = order_saga(client, wait)
    runner = DurableRunner(app=saga, app_name="shop", store=store, queue_poll=0.02)
    async for _ in runner.run(user_id="u", session_id="s", message="order a lamp"):
        pass
    (paused,) = await runner.ledger.list_runs()
    assert paused.status is RunStatus.PAUSED
    jobs = JobTable(store)
    (timer,) = [j for j in await jobs.list_jobs() if j.timer]  # the tool ran: its timer is stored
    assert timer.state is JobState.STARTED
    (row,) = await SagaLedger(store).list_sagas()
    assert row.status is SagaStatus.RUNNING
    assert inventory.acts("reservations", "create") == 1 and releases.calls == []

    await jobs.backdate(timer.job_id, 601)
    waker = Waker(jobs, resumer=Resumer(runner, jobs, gather=0.0))
    assert [j.job_id for j in await waker.wake_once(wait=True)] == [timer.job_id]

    state = await session_state(runner)
    assert state["saga_status"] == "compensated"
    assert "carrier refused" in state["saga_reason"]
    (held,) = inventory.items("reservations")
    assert held["status"] == "released" and held["releases"] == 1
    assert inventory.acts("reservations", "release") == 1 and len(releases.calls) == 1
    assert inventory.acts("reservations", "create") == 1  # the stage before the pause ran once
    (row,) = await SagaLedger(store).list_sagas()
    assert row.status is SagaStatus.COMPENSATED
    assert sorted(r.status.value for r in await runner.ledger.list_runs()) == ["DONE", "DONE"]


async def test_a_saga_stage_waiting_on_a_job_starts_the_job_before_pausing(
    store: Store, inventory: FakeService
) -> None:
    client = ResourceClient(inventory.url, "reservations")

    def check_credit(customer: str) -> dict[str, str]:
        """Starts a credit check."""
        return {"message": f"checking {customer}"}

    credit = long_running_tool(check_credit, job_key="credit:{customer}", deadline=3600)
    model = ScriptedModel(
        {"credit": [Call("check_credit", {"customer": "c-1"}), Say("checking"), Say("checked")]}
    )
    wait = LlmAgent(name="credit", model=model, tools=[credit])
    saga, releases = order_saga(client, wait)
    runner = DurableRunner(app=saga, app_name="shop", store=store, queue_poll=0.02)
    async for _ in runner.run(user_id="u", session_id="s", message="order a lamp"):
        pass
    assert [r.status for r in await runner.ledger.list_runs()] == [RunStatus.PAUSED]
    jobs = JobTable(store)
    job = await jobs.get("credit:c-1")
    assert job is not None and job.function_call_id  # started and attached to the call
    await jobs.complete("credit:c-1", JobState.SUCCEEDED, {"score": 700})
    await Resumer(runner, jobs, gather=0.0).resume_once(wait=True)
    state = await session_state(runner)
    assert state["saga_status"] == "compensated"
    assert inventory.acts("reservations", "release") == 1 and len(releases.calls) == 1


async def test_a_saga_stage_asking_for_confirmation_pauses_and_goes_on_when_approved(
    store: Store, inventory: FakeService
) -> None:
    from google.adk.tools.function_tool import FunctionTool
    from google.genai import types

    client = ResourceClient(inventory.url, "reservations")
    approved: list[str] = []

    def approve_order(order_id: str) -> dict[str, str]:
        """Approves the order (a person confirms first)."""
        approved.append(order_id)
        return {"approved": order_id}

    model = ScriptedModel({"approval": [Call("approve_order", {"order_id": "O-1"}), Say("ok")]})
    wait = LlmAgent(
        name="approval",
        model=model,
        tools=[FunctionTool(approve_order, require_confirmation=True)],
    )
    saga, releases = order_saga(client, wait)
    runner = DurableRunner(app=saga, app_name="shop", store=store, queue_poll=0.02)
    async for _ in runner.run(user_id="u", session_id="s", message="order a lamp"):
        pass
    (paused,) = await runner.ledger.list_runs()
    assert paused.status is RunStatus.PAUSED and approved == []
    session = await runner.sessions.get_session(app_name="shop", user_id="u", session_id="s")
    assert session is not None
    (request,) = [
        c
        for e in session.events
        for c in e.get_function_calls()
        if c.name == "adk_request_confirmation"
    ]
    approval = types.Content(
        role="user",
        parts=[
            types.Part(
                function_response=types.FunctionResponse(
                    id=request.id, name=request.name, response={"confirmed": True}
                )
            )
        ],
    )
    async for _ in runner.run(
        user_id="u", session_id="s", message=approval, invocation_id=paused.invocation_id
    ):
        pass
    assert approved == ["O-1"]  # the stage went on once approved
    state = await session_state(runner)
    assert state["saga_status"] == "compensated"  # ship failed after it: the lamp is released
    assert inventory.acts("reservations", "release") == 1 and len(releases.calls) == 1
