"""Cancel of a running run by its owner, at its next heartbeat, through ADK's abort signal.

Both backends, real parts: the tools and saga stages call fake services that
are processes of their own and log every request, and the asserts are on those
acts. The cancel is asked the way an operator asks it (``cancel_run``: the
ledger row gets ``cancel_requested_at``); the owner learns it from its own
lease renewal, lets the act already under way finish and record its result,
refuses any new one, aborts the invocation and ends the run CANCELLED.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, ToolThreadPoolConfig
from google.adk.tools.function_tool import FunctionTool
from test_saga_agent import release

from durable_adk import errors
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.runs.operators import cancel_run
from durable_adk.adk.tools.journaling import journaled
from durable_adk.adk.tools.saga_agent import SagaSequence, SagaStage
from durable_adk.effect_tables.journal import Journal, JournalStatus
from durable_adk.effect_tables.sagas import SagaLedger, SagaStatus
from durable_adk.store import Store
from durable_adk.tables.ledger import Run, RunStatus
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.services import FakeService, ResourceClient

APP = "cancelling"
LEASE = 9.0  # a heartbeat every 3 s; long enough not to be lost on a loaded machine


@pytest.fixture
def services(tmp_path: Path) -> Iterator[dict[str, FakeService]]:
    with ExitStack() as stack:
        yield {
            n: stack.enter_context(FakeService(n, tmp_path / f"{n}.db"))
            for n in ("billing", "inventory", "payments")
        }


class Gate:
    """Holds an act inside its call to the outside world until the test opens it."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.open = asyncio.Event()

    async def hold(self) -> None:
        self.entered.set()
        await asyncio.wait_for(self.open.wait(), 60)


async def only_run(runner: DurableRunner) -> Run:
    deadline = time.monotonic() + 60
    while not (runs := await runner.ledger.list_runs()):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    (run,) = runs
    return run


async def cancel_seen(runner: DurableRunner, run: Run) -> None:
    """Waits until the owner's heartbeat saw the cancel (its fence was asked to stop)."""
    deadline = time.monotonic() + 60
    while True:
        fence = runner.fence(run.run_id, run.epoch)
        if fence is not None and fence.stopping is not None:
            return
        assert time.monotonic() < deadline, "the owner never saw the cancel"
        await asyncio.sleep(0.02)


async def consume(runner: DurableRunner, session: str = "s") -> None:
    async for _ in runner.run(user_id="u", session_id=session, message="bill them"):
        pass


def invoicing_tool(billing: ResourceClient, gate: Gate) -> FunctionTool:
    @journaled(key="invoice:{invoice_id}", lookup=billing.find)
    async def send_invoice(invoice_id: str, idempotency_key: str) -> dict[str, Any]:
        """Sends an invoice."""
        await gate.hold()
        return await asyncio.to_thread(
            billing.create,
            {"invoice_id": invoice_id, "customer": "c", "amount": 10.0},
            idempotency_key,
        )

    return send_invoice


async def test_cancel_lets_the_act_in_flight_record_its_result_and_acts_no_more(
    store: Store, services: dict[str, FakeService]
) -> None:
    billing = services["billing"]
    gate = Gate()
    model = ScriptedModel(
        {
            "clerk": [
                Call("send_invoice", {"invoice_id": "INV-1"}),
                Call("send_invoice", {"invoice_id": "INV-2"}),
                Say("both sent"),
            ]
        }
    )
    agent = LlmAgent(
        name="clerk", model=model, tools=[invoicing_tool(billing.client("invoices"), gate)]
    )
    runner = DurableRunner(app=agent, app_name=APP, store=store, lease=LEASE)
    driving = asyncio.create_task(consume(runner))
    await asyncio.wait_for(gate.entered.wait(), 60)  # INV-1's act is under way
    run = await only_run(runner)
    asked = await cancel_run(runner.ledger, run.run_id, by="ana", reason="wrong customer")
    assert asked.run.status is RunStatus.RUNNING and "next heartbeat" in asked.message
    await cancel_seen(runner, run)
    gate.open.set()  # the act already under way goes out, and its result is recorded
    with pytest.raises(errors.RunCancelled, match="cancelled by ana: it is CANCELLED"):
        await asyncio.wait_for(driving, 60)

    ended = await runner.ledger.get(run.run_id)
    assert ended is not None and ended.status is RunStatus.CANCELLED
    assert ended.last_error is not None and ended.last_error.startswith("cancelled by ana")
    assert billing.acts("invoices", "create") == 1  # INV-1 once; INV-2 never went out
    journal = Journal(store)
    first = await journal.get("invoice:INV-1")
    assert first is not None and first.status is JournalStatus.DONE
    assert first.result["invoice_id"] == "INV-1"
    assert await journal.get("invoice:INV-2") is None  # not even an intent

    # Recovery never takes a cancelled run up again.
    await runner.ledger.backdate(run.run_id, 3600)
    assert await runner.ledger.claim_expired("another-worker") == []
    assert billing.acts("invoices", "create") == 1


async def test_a_cancelled_run_waiting_in_a_tool_is_aborted_and_refuses_later_acts(
    store: Store, services: dict[str, FakeService]
) -> None:
    billing = services["billing"]
    gate = Gate()

    async def think(topic: str) -> dict[str, Any]:
        """Thinks for a long time (no outside effect)."""
        await gate.hold()
        return {"topic": topic}

    model = ScriptedModel(
        {
            "clerk": [
                Call("think", {"topic": "which invoice"}),
                Call("send_invoice", {"invoice_id": "INV-3"}),
                Say("sent"),
            ]
        }
    )
    agent = LlmAgent(
        name="clerk",
        model=model,
        tools=[think, invoicing_tool(billing.client("invoices"), Gate())],
    )
    runner = DurableRunner(app=agent, app_name=APP, store=store, lease=LEASE)
    driving = asyncio.create_task(consume(runner))
    await asyncio.wait_for(gate.entered.wait(), 60)
    run = await only_run(runner)
    await cancel_run(runner.ledger, run.run_id, by="bo")
    # Nothing outside is under way: ADK's abort stops the thinking tool at once.
    with pytest.raises(errors.RunCancelled):
        await asyncio.wait_for(driving, 60)
    ended = await runner.ledger.get(run.run_id)
    assert ended is not None and ended.status is RunStatus.CANCELLED
    assert billing.acts("invoices", "create") == 0
    assert await Journal(store).get("invoice:INV-3") is None
    session = await runner.sessions.get_session(app_name=APP, user_id="u", session_id="s")
    assert session is not None
    # ADK sealed the open call with its abort answer, so nothing replays it.
    sealed = [
        r
        for e in session.events
        for r in e.get_function_responses()
        if r.name == "think" and "aborted" in str(r.response)
    ]
    assert len(sealed) == 1


async def test_a_sync_tool_in_adks_thread_pool_cannot_be_stopped_but_cannot_act_after_the_cancel(
    store: Store, services: dict[str, FakeService]
) -> None:
    # Python cannot stop a thread: ADK's abort leaves the tool's thread running.
    # The run ends CANCELLED all the same, and what the thread does next is
    # refused before it goes out: its fence (inherited by ADK's worker thread)
    # says the run was cancelled.
    billing = services["billing"].client("invoices")
    entered, release_thread = threading.Event(), threading.Event()
    late: list[BaseException] = []

    def send_late_invoice(invoice_id: str) -> dict[str, Any]:
        """Prepares for a long time, then sends an invoice (a plain sync tool)."""
        entered.set()
        release_thread.wait(60)
        try:  # the client's last check before sending (fence_headers) refuses
            return billing.create(
                {"invoice_id": invoice_id, "customer": "c", "amount": 1.0}, f"late:{invoice_id}"
            )
        except BaseException as exc:
            late.append(exc)
            raise

    model = ScriptedModel({"clerk": [Call("send_late_invoice", {"invoice_id": "L-1"}), Say("x")]})
    agent = LlmAgent(name="clerk", model=model, tools=[send_late_invoice])
    runner = DurableRunner(app=agent, app_name=APP, store=store, lease=LEASE)
    pool = RunConfig(tool_thread_pool_config=ToolThreadPoolConfig(max_workers=2))

    async def drive() -> None:
        async for _ in runner.run(user_id="u", session_id="s", message="bill", run_config=pool):
            pass

    driving = asyncio.create_task(drive())
    assert await asyncio.to_thread(entered.wait, 60)  # the tool runs in ADK's worker thread
    run = await only_run(runner)
    await cancel_run(runner.ledger, run.run_id, by="cy")
    with pytest.raises(errors.RunCancelled):
        await asyncio.wait_for(driving, 60)  # ended while the thread still runs
    ended = await runner.ledger.get(run.run_id)
    assert ended is not None and ended.status is RunStatus.CANCELLED
    release_thread.set()
    deadline = time.monotonic() + 30
    while not late:
        assert time.monotonic() < deadline, "the tool's thread never tried to act"
        await asyncio.sleep(0.05)
    assert isinstance(late[0], errors.Fenced | errors.RunCancelled)
    assert services["billing"].acts("invoices", "create") == 0


def refund(payments: ResourceClient) -> Any:
    def undo(record: dict[str, Any], key: str) -> None:
        payments.act(record["charge_id"], "refund", key)

    return undo


async def test_a_cancelled_saga_compensates_what_it_did_once(
    store: Store, services: dict[str, FakeService]
) -> None:
    inventory = services["inventory"].client("reservations")
    payments = services["payments"].client("charges")
    gate = Gate()

    async def reserve(state: dict[str, Any], key: str) -> Any:
        await gate.hold()  # the reservation is being made when the cancel comes
        return await asyncio.to_thread(
            inventory.create, {"order_id": "O-1", "sku": "LAMP", "quantity": 1}, key
        )

    saga = SagaSequence(
        "order",
        [
            SagaStage(
                name="reserve",
                action=reserve,
                find=inventory.find,
                undo_of=lambda r: {"reservation_id": r["id"]},
            ),
            SagaStage(
                name="charge",
                action=lambda state, key: payments.create(
                    {"order_id": "O-1", "customer": "c", "amount": 5.0}, key
                ),
                find=payments.find,
                undo_of=lambda r: {"charge_id": r["id"]},
            ),
        ],
        {"reserve": release(inventory), "charge": refund(payments)},
    )
    runner = DurableRunner(app=saga, app_name="shop", store=store, lease=LEASE)
    driving = asyncio.create_task(consume(runner))
    await asyncio.wait_for(gate.entered.wait(), 60)
    run = await only_run(runner)
    await cancel_run(runner.ledger, run.run_id, by="ana", reason="customer called")
    await cancel_seen(runner, run)
    gate.open.set()
    with pytest.raises(errors.RunCancelled):
        await asyncio.wait_for(driving, 60)

    ended = await runner.ledger.get(run.run_id)
    assert ended is not None and ended.status is RunStatus.CANCELLED
    (record,) = await SagaLedger(store).list_sagas()
    assert record.status is SagaStatus.COMPENSATED
    assert record.reason is not None and "cancelled by ana" in record.reason
    # The reservation went out once and was released once; the charge never went out.
    assert services["inventory"].acts("reservations", "create") == 1
    assert services["inventory"].acts("reservations", "release") == 1
    assert services["payments"].acts("charges", "create") == 0
    (held,) = services["inventory"].items("reservations")
    assert held["status"] == "released" and held["releases"] == 1
    session = await runner.sessions.get_session(app_name="shop", user_id="u", session_id="s")
    assert session is not None and session.state.get("saga_status") == "compensated"

    # Nothing runs it again: not recovery, not a second look.
    await runner.ledger.backdate(run.run_id, 3600)
    assert await runner.ledger.claim_expired("another-worker") == []
    assert services["inventory"].acts("reservations", "create") == 1
    assert services["inventory"].acts("reservations", "release") == 1
