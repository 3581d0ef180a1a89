"""SagaSequence in one process: pivot rule, soft aborts, parallel stages, metrics.

The outside systems are real fake services (processes with their own files);
crashes and recovery are in tests/crash/test_order_saga.py.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent, ParallelAgent
from google.adk.runners import Runner
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.tools.saga_agent import SagaFailed, SagaSequence, SagaStage
from durable_adk.effect_tables.sagas import SagaLedger
from durable_adk.metrics import Metrics
from durable_adk.store import Store
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.services import FakeService, ResourceClient, ServiceError


@pytest.fixture
def services(tmp_path: Path) -> Iterator[dict[str, FakeService]]:
    with ExitStack() as stack:
        yield {
            n: stack.enter_context(FakeService(n, tmp_path / f"{n}.db"))
            for n in ("inventory", "payments")
        }


def reserve_stage(inventory: ResourceClient, name: str = "reserve", sku: str = "LAMP") -> SagaStage:
    return SagaStage(
        name=name,
        action=lambda state, key: inventory.create(
            {"order_id": "O-1", "sku": sku, "quantity": 1}, key
        ),
        find=inventory.find,
        undo_of=lambda r: {"reservation_id": r["id"]},
    )


def release(inventory: ResourceClient) -> Any:
    def undo(record: dict[str, Any], key: str) -> None:
        try:
            inventory.act(record["reservation_id"], "release", key)
        except ServiceError as exc:
            if exc.status not in (404, 409):
                raise

    return undo


def charge_stage(payments: ResourceClient) -> SagaStage:
    return SagaStage(
        name="charge",
        action=lambda state, key: payments.create(
            {"order_id": "O-1", "customer": "c", "amount": 5.0}, key
        ),
        find=payments.find,
        undo_of=lambda r: {"charge_id": r["id"]},
    )


async def drive(store: Store, saga: SagaSequence, session: str = "s") -> dict[str, Any]:
    runner = DurableRunner(app=saga, app_name="shop", store=store)
    async for _ in runner.run(user_id="u", session_id=session, message="go"):
        pass
    loaded = await runner.sessions.get_session(app_name="shop", user_id="u", session_id=session)
    assert loaded is not None
    return dict(loaded.state)


def test_pivot_rule_refuses_an_undoable_stage_after_an_irreversible_one(tmp_path: Path) -> None:
    inventory = ResourceClient("http://127.0.0.1:9", "reservations")

    def email() -> SagaStage:  # an agent has one parent: a fresh one per saga
        return SagaStage(name="email", action=lambda s, k: {"id": "e"}, uncompensatable=True)

    with pytest.raises(ValueError, match="pivot rule"):
        SagaSequence("bad", [email(), reserve_stage(inventory)], {"reserve": release(inventory)})
    ok = SagaSequence(
        "risky",
        [email(), reserve_stage(inventory)],
        {"reserve": release(inventory)},
        allow_unsafe_order=True,
    )
    assert [s.name for s in ok.stages] == ["email", "reserve"]
    with pytest.raises(ValueError, match="no compensator"):
        SagaSequence("missing", [reserve_stage(inventory)], {})


async def test_soft_failure_via_saga_abort_rolls_back(
    store: Store, services: dict[str, FakeService]
) -> None:
    inventory = ResourceClient(services["inventory"].url, "reservations")

    def reject(reason: str, tool_context: ToolContext) -> dict[str, str]:
        """Rejects the order."""
        tool_context.state["saga_abort"] = reason
        return {"rejected": reason}

    judge = LlmAgent(
        name="judge",
        model=ScriptedModel(
            {"judge": [Call("reject", {"reason": "fraud suspected"}), Say("Rejected.")]}
        ),
        tools=[reject],
    )
    saga = SagaSequence("order", [reserve_stage(inventory), judge], {"reserve": release(inventory)})
    state = await drive(store, saga)
    assert state["saga_status"] == "compensated" and state["saga_reason"] == "fraud suspected"
    assert [r["status"] for r in services["inventory"].items("reservations")] == ["released"]


async def test_parallel_branches_record_their_compensations(
    store: Store, services: dict[str, FakeService]
) -> None:
    inventory = ResourceClient(services["inventory"].url, "reservations")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        both = ParallelAgent(
            name="hold_both",
            sub_agents=[
                reserve_stage(inventory, "hold_lamp", "LAMP"),
                reserve_stage(inventory, "hold_desk", "DESK"),
            ],
        )

    def fail(state: Any, key: str) -> Any:
        raise RuntimeError("the warehouse is on fire")

    boom = SagaStage(name="boom", action=fail, find=lambda key: None, uncompensatable=True)
    saga = SagaSequence(
        "order", [both, boom], {"hold_lamp": release(inventory), "hold_desk": release(inventory)}
    )
    state = await drive(store, saga)
    assert state["saga_status"] == "compensated"
    assert set(state) >= {"comp:hold_lamp", "comp:hold_desk"}
    held = services["inventory"].items("reservations")
    assert sorted(r["sku"] for r in held) == ["DESK", "LAMP"]
    assert all(r["status"] == "released" and r["releases"] == 1 for r in held)


async def test_raise_on_failure_and_metrics(store: Store, services: dict[str, FakeService]) -> None:
    inventory = ResourceClient(services["inventory"].url, "reservations")
    payments = ResourceClient(services["payments"].url, "charges")
    metrics = Metrics()

    def fail(state: Any, key: str) -> Any:
        raise RuntimeError("carrier down")

    saga = SagaSequence(
        "order",
        [
            reserve_stage(inventory),
            charge_stage(payments),
            SagaStage(name="ship", action=fail, find=lambda key: None, uncompensatable=True),
        ],
        {
            "reserve": release(inventory),
            "charge": lambda r, k: payments.act(r["charge_id"], "refund", k),
        },
        raise_on_failure=True,
        metrics=metrics,
    )
    with pytest.raises(Exception) as raised:
        await drive(store, saga)
    assert "carrier down" in str(raised.value) or isinstance(raised.value, SagaFailed)
    text = metrics.exposition().decode()
    assert 'durable_adk_saga_outcomes_total{status="compensated"} 1.0' in text
    assert "durable_adk_compensation_seconds_count 1.0" in text
    (saga_row,) = await SagaLedger(store).list_sagas()
    steps = await SagaLedger(store).steps(saga_row.saga_id)
    assert [s.step for s in steps] == ["ship", "charge", "reserve"]  # newest first
    assert [s.status.value for s in steps] == ["COMPENSATED", "COMPENSATED", "COMPENSATED"]
    assert steps[0].last_error == "the action never happened"
    assert steps[1].action_key != steps[1].comp_key


async def test_saga_outside_a_durable_store_is_refused(services: dict[str, FakeService]) -> None:
    from google.adk.sessions.in_memory_session_service import InMemorySessionService

    inventory = ResourceClient(services["inventory"].url, "reservations")
    saga = SagaSequence("order", [reserve_stage(inventory)], {"reserve": release(inventory)})
    sessions = InMemorySessionService()
    await sessions.create_session(app_name="shop", user_id="u", session_id="s")
    runner = Runner(app_name="shop", agent=saga, session_service=sessions)
    with pytest.raises(Exception, match="DurableSessionService"):
        async for _ in runner.run_async(
            user_id="u",
            session_id="s",
            new_message=types.Content(role="user", parts=[types.Part(text="go")]),
        ):
            pass
    assert services["inventory"].count("reservations") == 0


async def test_a_store_outage_in_a_stage_hands_the_run_back_and_does_not_roll_the_saga_back(
    store: Store, services: dict[str, FakeService]
) -> None:
    """A stage that meets the store unreachable (an error the run's retry policy calls
    transient) has not failed: the saga is not compensated, the run is handed back,
    and recovery goes on at that stage, which acts once."""
    from durable_adk import Sweeper
    from durable_adk.errors import RunInterrupted, StoreUnavailable

    payments = ResourceClient(services["payments"].url, "charges")
    outages = [StoreUnavailable("the store went away mid-stage")]

    def take_payment(state: dict[str, Any], key: str) -> dict[str, Any]:
        if outages:
            raise outages.pop()
        return payments.create({"order_id": "O-1", "customer": "c", "amount": 5.0}, key)

    charge = SagaStage(
        name="charge",
        action=take_payment,
        find=payments.find,
        undo_of=lambda r: {"charge_id": r["id"]},
    )
    refunds: list[str] = []
    saga = SagaSequence("order", [charge], {"charge": lambda record, key: refunds.append(key)})
    runner = DurableRunner(app=saga, app_name="shop", store=store, backoff=0.0)
    with pytest.raises(RunInterrupted):
        async for _ in runner.run(user_id="u", session_id="s", message="go"):
            pass
    (run,) = await runner.ledger.list_runs()
    assert run.status.value == "RUNNING" and "went away" in (run.last_error or "")
    (row,) = await SagaLedger(store).list_sagas()
    assert row.status.value == "RUNNING"  # not compensated
    assert services["payments"].count("charges") == 0

    (recovery,) = await Sweeper(runner).recover_once()
    assert recovery.status.value == "DONE"
    assert (await SagaLedger(store).get(row.saga_id)).status.value == "COMMITTED"  # type: ignore[union-attr]
    assert services["payments"].count("charges") == 1 and refunds == []
    await runner.aclose()
