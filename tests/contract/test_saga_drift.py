"""A compensator the new code lacks: nothing is undone half-way, the saga waits for code that can.

Both backends. A saga of version 1.0 reserved a lamp at a real fake inventory
service (its own process; every reservation and release counted there), with a
compensator for the reservation. Version 1.1 declares 1.0 compatible but marks
the reservation stage uncompensatable (no compensator). Through the drive (an
answer continuing the saga's paused run) the run is parked with the missing
compensator named, before the model or any step runs; through the saga
sweeper (the saga's run is gone) the 1.1 sweeper undoes nothing, tells a
person once however many passes meet it, and leaves the saga to a worker of
1.0, which releases the lamp once. A pinned 1.2 sweeper never claims it.
Quiet times move back in the database, never by sleeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.genai import types

from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.runs.drift import RecordedStep, RunDrifted, drift
from durable_adk.adk.runs.fingerprint import Known
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.adk.tools.saga_agent import SagaSequence, SagaStage, SagaSweeper
from durable_adk.effect_tables.sagas import (
    Compensation,
    SagaDrifted,
    SagaLedger,
    SagaStatus,
    StepStatus,
    Undo,
)
from durable_adk.store import Store
from durable_adk.tables.ledger import RunStatus
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.services import FakeService, ResourceClient
from durable_adk.versions import Serving
from saga_support import Releases, reserve_stage

APP = "shop"


@pytest.fixture
def inventory(tmp_path: Path) -> Iterator[FakeService]:
    with FakeService("inventory", tmp_path / "inventory.db") as service:
        yield service


def approve_order(order_id: str) -> dict[str, Any]:
    """Asks a person to approve the order."""
    return {"status": "waiting for a person", "order_id": order_id}


def order_saga(
    client: ResourceClient, release: Releases | None, *, with_approval: bool = True
) -> tuple[SagaSequence, ScriptedModel]:
    """reserve (undone by ``release``; uncompensatable when it is None), then an approval."""
    reserve = reserve_stage(client, uncompensatable=release is None)
    model = ScriptedModel(
        {"approver": [Call("approve_order", {"order_id": "O-1"}), Say("Waiting."), Say("Done.")]}
    )
    approver = LlmAgent(
        name="approver", model=model, tools=[LongRunningFunctionTool(approve_order)]
    )
    stages = [reserve, approver] if with_approval else [reserve]
    compensators = {"reserve": release.__call__} if release is not None else {}
    return SagaSequence("order", stages, compensators), model


def runner(store: Store, worker: str, saga: SagaSequence, version: str, *compatible: str) -> Any:
    return DurableRunner(
        app=saga,
        app_name=APP,
        store=store,
        worker_id=worker,
        version=version,
        compatible_versions=compatible,
        background=False,
    )


async def paused_saga_of_1_0(
    store: Store, client: ResourceClient, release: Releases
) -> tuple[str, str]:
    """A 1.0 run whose saga reserved the lamp and waits for approval: (invocation, call id)."""
    saga, _ = order_saga(client, release)
    old = runner(store, "w-1.0", saga, "1.0")
    calls = []
    async for event in old.run(user_id="u", session_id="s", message="Order a lamp."):
        calls.extend(c.id for c in event.get_function_calls())
    (run,) = await old.ledger.list_runs()
    assert run.status is RunStatus.PAUSED and run.app_version == "1.0"
    return str(run.invocation_id), str(calls[-1])


async def test_the_ledger_keeps_whether_a_step_could_be_undone_and_drift_compares_it(
    store: Store,
) -> None:
    ledger = SagaLedger(store)
    await ledger.begin(
        saga_id="inv-1/order", name="order", app_name=APP, user_id="u", session_id="s",
        invocation_id="inv-1",
    )  # fmt: skip
    await ledger.step_pending("inv-1/order", "reserve", compensatable=True)
    await ledger.step_pending("inv-1/order", "bill", compensatable=True)
    await ledger.step_undone("inv-1/order", "bill", StepStatus.COMPENSATED, attempts=1)
    await ledger.step_pending("inv-1/order", "ship", compensatable=False)
    await ledger.step_pending("inv-1/order", "legacy")  # recorded before it was kept
    rows = await store.fetch(
        "saga_steps_of_invocation", {"app_name": APP, "invocation_id": "inv-1"}
    )
    recorded = [RecordedStep.from_row(r) for r in rows]
    assert [(r.step, r.status, r.compensatable) for r in recorded] == [
        ("reserve", "PENDING", True),
        ("bill", "COMPENSATED", True),
        ("ship", "PENDING", False),
        ("legacy", "PENDING", None),
    ]
    (pending,) = [s for s in await ledger.steps("inv-1/order") if s.step == "reserve"]
    assert pending.compensatable is True

    def stage(name: str, *, undo: bool) -> SagaStage:
        return SagaStage(name=name, action=lambda state, key: {"id": key}, uncompensatable=not undo)

    def undo(record: dict[str, Any], key: str) -> None:
        """Undoes a step."""

    same = SagaSequence(
        "order",
        [stage(n, undo=n != "ship") for n in ("reserve", "bill", "legacy", "ship")],
        {"reserve": undo, "bill": undo, "legacy": undo},
    )
    assert drift([], "inv-1", Known.of(same), recorded) == []
    # 1.1 gave up undoing reserve and bill (and legacy): only reserve is still to undo
    # and was begun undoable; bill was undone already, legacy's promise was not kept.
    lost = SagaSequence(
        "order",
        [stage(n, undo=False) for n in ("reserve", "bill", "legacy", "ship")],
    )
    assert drift([], "inv-1", Known.of(lost), recorded) == [
        "compensator of saga step 'order'/'reserve'"
    ]
    steps = await ledger.steps("inv-1/order")
    engine = Compensation(ledger, {"reserve": Undo(compensate=None, find=None, record_of=dict)})
    assert engine.lacking(steps) == ["reserve"]
    saga = await ledger.get("inv-1/order")
    assert saga is not None
    with pytest.raises(SagaDrifted) as raised:
        await engine.run(saga, "denied")
    assert raised.value.steps == ("reserve",)
    after = await ledger.get("inv-1/order")
    assert after is not None and after.status is SagaStatus.RUNNING  # nothing written


async def test_an_answer_to_a_saga_whose_compensator_the_new_code_lacks_parks_before_acting(
    store: Store, inventory: FakeService
) -> None:
    client = ResourceClient(inventory.url, "reservations")
    release = Releases(client)
    invocation, call_id = await paused_saga_of_1_0(store, client, release)
    assert inventory.count("reservations") == 1
    saga, model = order_saga(client, None)  # 1.1: the reservation can no longer be undone
    new = runner(store, "w-1.1", saga, "1.1", "1.0")
    denial = types.FunctionResponse(id=call_id, name="approve_order", response={"ok": False})
    answer = types.Content(role="user", parts=[types.Part(function_response=denial)])
    with pytest.raises(RunDrifted) as raised:
        async for _ in new.run(
            user_id="u", session_id="s", message=answer, invocation_id=invocation
        ):
            pass
    assert "compensator of saga step 'order'/'reserve'" in str(raised.value)
    assert model.calls == []
    runs = await new.ledger.list_runs()
    (run,) = [r for r in runs if r.status is RunStatus.PARKED and r.request and "parts" in r.request
              and "function_response" in r.request]  # fmt: skip
    (letter,) = await new.ledger.dead_letters(run_id=run.run_id)
    # The run paused on the approval ends with its parked answer, naming it.
    (paused,) = [r for r in runs if r.run_id != run.run_id]
    assert paused.status is RunStatus.PARKED and run.run_id in (paused.last_error or "")
    assert letter.error is not None and "compensator of saga step" in letter.error
    assert inventory.count("reservations") == 1
    assert inventory.acts("reservations", "release") == 0 and release.calls == []
    (recorded,) = await SagaLedger(store).steps(f"{invocation}/order")
    assert recorded.status is StepStatus.DONE


async def test_the_saga_sweeper_leaves_a_saga_it_cannot_undo_to_code_that_can(
    store: Store, inventory: FakeService
) -> None:
    client = ResourceClient(inventory.url, "reservations")
    release = Releases(client)
    invocation, _ = await paused_saga_of_1_0(store, client, release)
    saga_id = f"{invocation}/order"
    ledger = SagaLedger(store)
    sessions = DurableSessionService(store)
    # An operator cancels the paused run: it is no longer live, so the saga
    # sweepers take its saga (to roll it back).
    runs = runner(store, "ops", order_saga(client, release)[0], "1.0").ledger
    (run,) = await runs.list_runs()
    await runs.cancel(run.run_id, by="ops", reason="customer called")
    await ledger.backdate(saga_id, 3600)

    def sweeper(code: SagaSequence, worker: str, serving: Serving) -> SagaSweeper:
        return SagaSweeper(
            code, sessions, app_name=APP, owner=worker, quiet_for=60, serving=serving
        )

    pinned = sweeper(order_saga(client, release)[0], "w-1.2", Serving.declare("1.2"))
    assert await pinned.sweep_once() == []  # 1.0's saga is not 1.2's to take
    lacking = order_saga(client, None)[0]
    newer = sweeper(lacking, "w-1.1", Serving.declare("1.1", compatible=["1.0"]))
    for _ in range(2):
        assert await newer.sweep_once() == []
        await ledger.backdate(saga_id, 3600)
    left = await ledger.get(saga_id)
    assert left is not None and left.status is SagaStatus.RUNNING  # nothing written
    assert inventory.acts("reservations", "release") == 0 and release.calls == []
    letters = await runs.dead_letters()
    drifted = [d for d in letters if "drift" in str(d.classification)]
    assert len(drifted) == 1 and "'reserve'" in str(drifted[0].error)  # told once
    older = sweeper(order_saga(client, release)[0], "w-1.0", Serving.declare("1.0"))
    (finished,) = await asyncio.wait_for(older.sweep_once(), 60)
    assert finished.status is SagaStatus.COMPENSATED
    assert inventory.acts("reservations", "release") == 1 and len(release.calls) == 1
