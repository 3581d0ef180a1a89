"""Saga writes are fenced, the saga sweeper waits its session's turn and renews its claim.

Both backends. The outside system is a real fake inventory service (its own
process and file); compensations are counted at the compensator, which is what
calls the service, and at the service's records.
"""

from __future__ import annotations

import asyncio
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import BaseAgent, LlmAgent, ParallelAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events.event import Event
from google.genai import types
from typing_extensions import override

from durable_adk import errors
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.adk.tools.saga_agent import SagaSequence, SagaStage, SagaSweeper
from durable_adk.effect_tables.sagas import (
    Compensation,
    Fence,
    SagaLedger,
    SagaStatus,
    StepStatus,
    Undo,
)
from durable_adk.store import Store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.services import FakeService, ResourceClient
from saga_support import Releases, reserve_stage

APP = "shop"
USER = "u"
SESSION = "s"
OLD = "e-old-invocation"
SAGA_ID = f"{OLD}/order"


@pytest.fixture
def inventory(tmp_path: Path) -> Iterator[FakeService]:
    with FakeService("inventory", tmp_path / "inventory.db") as service:
        yield service


def order_saga(client: ResourceClient, release: Releases) -> SagaSequence:
    return SagaSequence("order", [reserve_stage(client)], {"reserve": release.__call__})


async def dead_saga(
    store: Store, client: ResourceClient, *, acted: bool = True, fence: Fence | None = None
) -> SagaLedger:
    """A saga of an earlier invocation of the session, died after ``reserve`` (plain ADK)."""
    sessions = DurableSessionService(store)
    session = await sessions.get_session(app_name=APP, user_id=USER, session_id=SESSION)
    if session is None:
        session = await sessions.create_session(app_name=APP, user_id=USER, session_id=SESSION)
    await sessions.append_event(
        session,
        Event(
            invocation_id=OLD,
            author="user",
            content=types.Content(role="user", parts=[types.Part(text="order a lamp")]),
        ),
    )
    ledger = SagaLedger(store)
    await ledger.begin(
        saga_id=SAGA_ID,
        name="order",
        app_name=APP,
        user_id=USER,
        session_id=SESSION,
        invocation_id=OLD,
    )
    key, _ = await ledger.step_pending(SAGA_ID, "reserve", fence=fence or Fence())
    if acted:
        made = await asyncio.to_thread(
            client.create, {"order_id": "O-1", "sku": "LAMP", "quantity": 1}, key
        )
        await ledger.step_done(SAGA_ID, "reserve", {"reservation_id": made["id"]})
    await ledger.backdate(SAGA_ID, 3600)  # quiet for an hour: stuck
    return ledger


def clerk_app(entered: asyncio.Event, gate: asyncio.Event) -> LlmAgent:
    async def wait_for_approval(order_id: str) -> dict[str, str]:
        """Waits for a person to approve the order."""
        entered.set()
        await gate.wait()
        return {"order_id": order_id, "approved": "yes"}

    model = ScriptedModel(
        {"clerk": [Call("wait_for_approval", {"order_id": "O-2"}), Say("Approved.")]}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return LlmAgent(name="clerk", model=model, tools=[wait_for_approval])


async def until(predicate: Any, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not await predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


# ---------------------------------------------------------------- the session's queue


async def test_saga_sweeper_beside_a_live_run(store: Store, inventory: FakeService) -> None:
    client = ResourceClient(inventory.url, "reservations")
    release = Releases(client)
    await dead_saga(store, client)
    entered, gate = asyncio.Event(), asyncio.Event()
    runner = DurableRunner(app=clerk_app(entered, gate), app_name=APP, store=store)

    async def live_turn() -> None:
        async for _ in runner.run(user_id=USER, session_id=SESSION, message="approve O-2"):
            pass

    live = asyncio.create_task(live_turn())
    await entered.wait()  # the live run holds the session, its tool at work
    sweeper = SagaSweeper(
        order_saga(client, release),
        DurableSessionService(store),
        app_name=APP,
        owner="saga-sweeper",
        queue_poll=0.05,
    )
    sweep = asyncio.create_task(sweeper.sweep_once())

    async def released() -> bool:
        return [r["status"] for r in inventory.items("reservations")] == ["released"]

    await until(released)  # compensation does not wait for the live run
    await asyncio.sleep(0.3)
    assert not sweep.done()  # its outcome event waits for the session's turn
    statuses = sorted(r.status.value for r in await runner.ledger.list_runs())
    assert statuses == ["QUEUED", "RUNNING"]
    gate.set()
    await asyncio.wait_for(live, 60)
    (ended,) = await asyncio.wait_for(sweep, 60)
    assert ended.status is SagaStatus.COMPENSATED

    runs = await runner.ledger.list_runs()
    assert [r.status for r in runs] == [RunStatus.DONE, RunStatus.DONE]  # none FAILED or stale
    session = await runner.sessions.get_session(app_name=APP, user_id=USER, session_id=SESSION)
    assert session is not None
    texts = [
        (e.author, "".join(p.text or "" for p in (e.content.parts or [])))
        for e in session.events
        if e.content
    ]
    assert texts[-2] == ("clerk", "Approved.")  # the live run's answer, whole
    assert texts[-1][0] == "order" and texts[-1][1].startswith("order: compensated")
    assert session.events[-1].invocation_id == OLD
    assert session.state["saga_status"] == "compensated"
    # Acts: one compensation call, one release request, one release applied.
    assert len(release.calls) == 1
    assert inventory.acts("reservations", "release") == 1
    (reservation,) = inventory.items("reservations")
    assert reservation["releases"] == 1
    assert await sweeper.sweep_once() == []  # nothing owed any more
    assert len(release.calls) == 1 and inventory.acts("reservations", "release") == 1


async def test_outcome_owed_by_a_dead_sweeper_is_recorded_once(
    store: Store, inventory: FakeService
) -> None:
    """A sweeper that finished a saga but died before its event: the next one records it."""
    client = ResourceClient(inventory.url, "reservations")
    release = Releases(client)
    ledger = await dead_saga(store, client)
    (claimed,) = await ledger.claim_stuck("dead-sweeper", name="order", app_name=APP, quiet_for=60)
    saga = order_saga(client, release)
    result = await saga.compensation(ledger).run(claimed, "died", fence=Fence(owner="dead-sweeper"))
    assert result.status is SagaStatus.COMPENSATED
    await ledger.backdate(SAGA_ID, 3600)  # its claim runs out: the sweeper is gone
    sweeper = SagaSweeper(saga, DurableSessionService(store), app_name=APP, owner="next")
    (ended,) = await sweeper.sweep_once()
    assert ended.status is SagaStatus.COMPENSATED
    assert len(release.calls) == 1  # not compensated again
    assert inventory.acts("reservations", "release") == 1
    sessions = DurableSessionService(store)
    session = await sessions.get_session(app_name=APP, user_id=USER, session_id=SESSION)
    assert session is not None and session.state["saga_status"] == "compensated"
    outcome = [e for e in session.events if e.author == "order"]
    assert len(outcome) == 1
    assert await sweeper.sweep_once() == []


# ---------------------------------------------------------------- fenced step writes


async def test_step_writes_are_fenced_by_the_run_epoch(store: Store) -> None:
    runs = RunLedger(store, lease_seconds=30.0)
    started = await runs.start(
        app_name=APP, user_id=USER, session_id=SESSION, request={}, owner="w1", now=time.time()
    )
    assert started is not None and started.run.status is RunStatus.RUNNING
    run = started.run
    old = Fence(run_id=run.run_id, run_epoch=run.epoch)
    ledger = SagaLedger(store)
    await ledger.begin(
        saga_id=SAGA_ID,
        name="order",
        app_name=APP,
        user_id=USER,
        session_id=SESSION,
        invocation_id=run.invocation_id,
    )
    await ledger.step_pending(SAGA_ID, "reserve", fence=old)
    await runs.backdate(run.run_id, 3600)
    (taken,) = await runs.claim_expired("w2")
    assert taken.epoch == run.epoch + 1
    with pytest.raises(errors.Fenced):
        await ledger.step_done(SAGA_ID, "reserve", {"reservation_id": "R-1"}, fence=old)
    with pytest.raises(errors.Fenced):
        await ledger.step_pending(SAGA_ID, "charge", fence=old)
    with pytest.raises(errors.Fenced):
        await ledger.finish(SAGA_ID, SagaStatus.COMMITTED, fence=old)
    with pytest.raises(errors.Fenced):
        await ledger.compensating(SAGA_ID, "zombie", fence=old)
    (step,) = await ledger.steps(SAGA_ID)  # nothing the zombie wrote is there
    assert (step.status, step.record, step.run_epoch) == (StepStatus.PENDING, None, run.epoch)
    assert (await ledger.get(SAGA_ID)).status is SagaStatus.RUNNING  # type: ignore[union-attr]
    new = Fence(run_id=taken.run_id, run_epoch=taken.epoch)
    await ledger.step_pending(SAGA_ID, "reserve", fence=new)  # the re-drive becomes its writer
    await ledger.step_done(SAGA_ID, "reserve", {"reservation_id": "R-1"}, fence=new)
    (step,) = await ledger.steps(SAGA_ID)
    assert (step.status, step.run_epoch) == (StepStatus.DONE, taken.epoch)
    assert await runs.finish(taken.lease, RunStatus.DONE)
    with pytest.raises(errors.Fenced):  # a finished run writes nothing either
        await ledger.step_undone(SAGA_ID, "reserve", StepStatus.COMPENSATED, attempts=1, fence=new)


async def test_sweeper_writes_are_fenced_by_its_claim(store: Store) -> None:
    ledger = SagaLedger(store)
    await ledger.begin(
        saga_id=SAGA_ID,
        name="order",
        app_name=APP,
        user_id=USER,
        session_id=SESSION,
        invocation_id=OLD,
    )
    await ledger.step_pending(SAGA_ID, "reserve")
    await ledger.backdate(SAGA_ID, 3600)
    assert await ledger.claim_stuck("A", name="order", app_name=APP, quiet_for=60, lease=60)
    await ledger.backdate(SAGA_ID, 3600)  # A stalled past its claim: B takes the saga
    assert await ledger.claim_stuck("B", name="order", app_name=APP, quiet_for=60, lease=60)
    assert not await ledger.renew(SAGA_ID, "A", lease=60)
    for write in (
        ledger.compensating(SAGA_ID, "A", fence=Fence(owner="A")),
        ledger.step_undone(
            SAGA_ID, "reserve", StepStatus.COMPENSATED, attempts=1, fence=Fence(owner="A")
        ),
        ledger.finish(SAGA_ID, SagaStatus.COMPENSATED, fence=Fence(owner="A")),
    ):
        with pytest.raises(errors.Fenced):
            await write
    assert (await ledger.get(SAGA_ID)).status is SagaStatus.RUNNING  # type: ignore[union-attr]
    assert await ledger.renew(SAGA_ID, "B", lease=60)
    assert await ledger.compensating(SAGA_ID, "B", fence=Fence(owner="B")) is not None


class TakeOver(BaseAgent):
    """Another worker takes the run over while this one is between stages (a zombie)."""

    runs: Any

    @override
    async def _run_async_impl(self, ctx: InvocationContext) -> Any:
        stamp = (ctx.run_config.custom_metadata or {})["durable_adk"]  # type: ignore[union-attr]
        await self.runs.backdate(stamp["run_id"], 3600)
        assert await self.runs.claim_expired("another-worker")
        return
        yield


async def test_a_zombie_stage_acts_not(store: Store, inventory: FakeService) -> None:
    client = ResourceClient(inventory.url, "reservations")
    release = Releases(client)
    reserve = SagaStage(
        name="reserve",
        action=lambda state, key: client.create(
            {"order_id": "O-1", "sku": "LAMP", "quantity": 1}, key
        ),
        find=client.find,
        undo_of=lambda r: {"reservation_id": r["id"]},
    )
    saga = SagaSequence(
        "order",
        [TakeOver(name="takeover", runs=RunLedger(store)), reserve],
        {"reserve": release.__call__},
    )
    runner = DurableRunner(app=saga, app_name=APP, store=store)
    with pytest.raises(errors.Fenced):
        async for _ in runner.run(user_id=USER, session_id=SESSION, message="go"):
            pass
    assert inventory.count("reservations") == 0  # refused before it called out
    assert inventory.acts() == 0
    assert release.calls == []  # and it did not roll back either
    (row,) = await SagaLedger(store).list_sagas()
    assert row.status is SagaStatus.RUNNING and await SagaLedger(store).steps(row.saga_id) == []


# ---------------------------------------------------------------- the sweeper's claim


async def test_two_sweepers_and_a_slow_compensator(store: Store, inventory: FakeService) -> None:
    client = ResourceClient(inventory.url, "reservations")
    lease = 3.0
    second_tries: list[list[Any]] = []
    second: list[SagaSweeper] = []

    async def slow() -> None:
        # Longer than a whole claim, and the saga is quiet long enough for the
        # second sweeper (quiet_for=0.5): only the heartbeat keeps the claim.
        # Meanwhile the second sweeper keeps trying.
        deadline = time.monotonic() + lease * 1.6
        while time.monotonic() < deadline:
            second_tries.append(await second[0].sweep_once())
            await asyncio.sleep(0.2)

    first_release = Releases(client, before=slow)
    second_release = Releases(client)
    await dead_saga(store, client)
    sessions = DurableSessionService(store)
    first = SagaSweeper(
        order_saga(client, first_release),
        sessions,
        app_name=APP,
        owner="A",
        lease=lease,
        quiet_for=0.5,
    )
    second.append(
        SagaSweeper(
            order_saga(client, second_release),
            sessions,
            app_name=APP,
            owner="B",
            lease=lease,
            quiet_for=0.5,
        )
    )
    (ended,) = await first.sweep_once()
    assert ended.status is SagaStatus.COMPENSATED
    assert len(second_tries) >= 5 and all(t == [] for t in second_tries)
    assert len(first_release.calls) == 1 and second_release.calls == []
    assert inventory.acts("reservations", "release") == 1  # one compensation request in all
    (reservation,) = inventory.items("reservations")
    assert reservation["status"] == "released" and reservation["releases"] == 1


# ---------------------------------------------------------------- PENDING steps


@pytest.mark.parametrize("ends", ["finished", "taken_over", "lease_expired"])
async def test_a_pending_step_waits_while_its_run_may_act(
    store: Store, inventory: FakeService, ends: str
) -> None:
    client = ResourceClient(inventory.url, "reservations")
    release = Releases(client)
    runs = RunLedger(store, lease_seconds=30.0)
    # The saga's earlier run was parked; the saga sweeper claimed the saga; then
    # an operator retried the run, whose re-drive recorded the step and is now
    # calling out (nothing at the service yet).
    await dead_saga(store, client, acted=False)
    ledger = SagaLedger(store)
    (claimed,) = await ledger.claim_stuck("sweeper", name="order", app_name=APP, quiet_for=60)
    run = await runs.submit(
        app_name=APP, user_id=USER, session_id=SESSION, request={}, owner="w", invocation_id=OLD
    )
    live = await runs.claim_queued(run.run_id, "w")
    assert live is not None
    await ledger.step_pending(SAGA_ID, "reserve", fence=Fence(live.run_id, live.epoch))
    undo = {
        "reserve": Undo(compensate=release, find=lambda key: asyncio.to_thread(client.find, key))
    }
    compensation = Compensation(ledger, undo, backoff=0.0)

    waited = await compensation.run(claimed, "died", fence=Fence(owner="sweeper"))
    assert waited.status is SagaStatus.COMPENSATING and waited.waiting == ("reserve",)
    (step,) = await ledger.steps(SAGA_ID)
    assert step.status is StepStatus.PENDING  # not concluded "never happened"
    assert (await ledger.get(SAGA_ID)).status is SagaStatus.COMPENSATING  # type: ignore[union-attr]

    if ends == "finished":
        assert await runs.finish(live.lease, RunStatus.DONE)
    elif ends == "taken_over":
        await runs.backdate(live.run_id, 3600)
        assert await runs.claim_expired("another")
    else:
        await runs.backdate(live.run_id, 3600)  # expired, nobody took it yet
    done = await compensation.run(claimed, "died", fence=Fence(owner="sweeper"))
    assert done.status is SagaStatus.COMPENSATED and done.waiting == ()
    (step,) = await ledger.steps(SAGA_ID)
    assert (step.status, step.last_error) == (StepStatus.COMPENSATED, "the action never happened")
    assert release.calls == [] and inventory.acts() == 0


async def test_the_sweeper_leaves_a_waiting_saga_for_a_later_pass(
    store: Store, inventory: FakeService
) -> None:
    client = ResourceClient(inventory.url, "reservations")
    release = Releases(client)
    runs = RunLedger(store, lease_seconds=30.0)
    # The step's writer is a live run elsewhere (another session's run, so the
    # claim's "no live run of the invocation" rule does not hide it).
    other = await runs.start(
        app_name=APP, user_id=USER, session_id="other", request={}, owner="w", now=time.time()
    )
    assert other is not None
    live = other.run
    await dead_saga(store, client, acted=False, fence=Fence(live.run_id, live.epoch))
    sweeper = SagaSweeper(
        order_saga(client, release), DurableSessionService(store), app_name=APP, owner="sw"
    )
    assert await sweeper.sweep_once() == []  # waits: the step may still act
    ledger = SagaLedger(store)
    saga = await ledger.get(SAGA_ID)
    assert saga is not None and saga.status is SagaStatus.COMPENSATING and saga.owner is None
    assert await runs.finish(live.lease, RunStatus.DONE)
    await ledger.backdate(SAGA_ID, 3600)
    (ended,) = await sweeper.sweep_once()
    assert ended.status is SagaStatus.COMPENSATED
    (step,) = await ledger.steps(SAGA_ID)
    assert step.last_error == "the action never happened" and release.calls == []
    assert inventory.acts() == 0


# ---------------------------------------------------------------- parallel branches


async def test_a_branch_cancelled_mid_call_is_compensated(
    store: Store, inventory: FakeService
) -> None:
    """One branch fails while the other's call is out: that call ends, then it is undone."""
    client = ResourceClient(inventory.url, "reservations")
    release = Releases(client)
    failed = threading.Event()

    def fail(state: Any, key: str) -> Any:
        failed.set()
        raise RuntimeError("the desk is out of stock")

    def slow_lamp(state: Any, key: str) -> Any:
        assert failed.wait(30)
        time.sleep(0.5)  # still out when ParallelAgent cancels this branch
        return client.create({"order_id": "O-1", "sku": "LAMP", "quantity": 1}, key)

    lamp = SagaStage(
        name="lamp",
        action=slow_lamp,
        find=client.find,
        undo_of=lambda r: {"reservation_id": r["id"]},
    )
    desk = SagaStage(name="desk", action=fail, find=client.find, uncompensatable=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        both = ParallelAgent(name="both", sub_agents=[lamp, desk])
    saga = SagaSequence("order", [both], {"lamp": release.__call__})
    runner = DurableRunner(app=saga, app_name=APP, store=store)
    async for _ in runner.run(user_id=USER, session_id=SESSION, message="go"):
        pass
    session = await runner.sessions.get_session(app_name=APP, user_id=USER, session_id=SESSION)
    assert session is not None and session.state["saga_status"] == "compensated"
    (reservation,) = inventory.items("reservations")
    assert reservation["status"] == "released" and reservation["releases"] == 1
    assert inventory.acts("reservations", "create") == 1
    assert inventory.acts("reservations", "release") == 1
