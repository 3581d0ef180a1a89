"""Journal ownership on both backends: one act per key however many callers, zombies refused.

The outside system is the fake billing service, a real HTTP server in another
process. Every test counts acts (requests made by its act function) and
lookups, and checks the invoices billing holds; billing dedupes by key, so its
record count alone would hide a doubled act.

No test depends on timing: a slow act waits on an event that the test sets
once the second caller is seen waiting (the journal logs each wait), and
leases are expired by moving them back in the database.

A caller that meets an intent held by another attempt asks billing's lookup
first: it waits only when the lookup finds nothing (or there is none), so a
waiter here always costs one lookup, and an effect already in billing is the
answer at once.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from durable_adk import errors
from durable_adk.effect_tables.journal import (
    Attempt,
    Journal,
    JournalBusy,
    JournalStatus,
    OutcomeUnknown,
)
from durable_adk.fencing.fence import FenceToken, RunFence, using_fence
from durable_adk.store import Store, open_store
from durable_adk.tables.ledger import Run, RunLedger, RunStatus
from durable_adk.testing.services import BillingClient, FakeService, request_json

TOOL = "send_invoice"
LEASE = 600.0  # long enough never to run out by itself on a loaded machine


@pytest.fixture(scope="module")
def billing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeService]:
    with FakeService("billing", Path(tmp_path_factory.mktemp("billing")) / "billing.db") as svc:
        yield svc


@pytest.fixture
def waits(caplog: pytest.LogCaptureFixture) -> Callable[[str], int]:
    """How many times a caller began waiting for another's intent of a key."""
    caplog.set_level(logging.DEBUG, logger="durable_adk.journal")

    def count(key: str) -> int:
        return sum(
            1
            for r in caplog.records
            if r.name == "durable_adk.journal"
            and "waits for" in r.getMessage()
            and repr(key) in r.getMessage()
        )

    return count


async def until(condition: Callable[[], bool], what: str, patience: float = 60.0) -> None:
    """Polls an in-process condition (no database clock to move here)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + patience
    while not condition():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class Billing:
    """Acts and lookups against the billing service, counted here."""

    def __init__(self, service: FakeService, invoice_id: str) -> None:
        self.service = service
        self.client = BillingClient(service.url)
        self.invoice_id = invoice_id
        self.acts = 0
        self.entered = 0
        self.lookups = 0
        self.gate = asyncio.Event()
        self.gate.set()

    def hold_acts(self) -> None:
        """Acts wait (before calling billing) until :meth:`let_go`."""
        self.gate.clear()

    def let_go(self) -> None:
        self.gate.set()

    async def act(self, key: str) -> dict[str, Any]:
        self.entered += 1
        await self.gate.wait()
        self.acts += 1
        return await asyncio.to_thread(self.client.create_invoice, self.invoice_id, "acme", 10, key)

    async def lookup(self, key: str) -> dict[str, Any] | None:
        self.lookups += 1
        return await asyncio.to_thread(self.client.find_invoice, key)

    def invoices(self) -> int:
        return sum(1 for i in self.service.items("invoices") if i["invoice_id"] == self.invoice_id)


def new_key() -> tuple[str, str]:
    invoice = f"INV-{uuid.uuid4().hex[:10]}"
    return f"send-invoice:{invoice}", invoice


async def running(ledger: RunLedger, session_id: str) -> Run:
    run = await ledger.submit(
        app_name="a", user_id="u", session_id=session_id, request={}, owner="w1"
    )
    claimed = await ledger.claim_queued(run.run_id, "w1")
    assert claimed is not None
    return claimed


def attempt_of(run: Run | None, call: str, tool: str = TOOL) -> Attempt:
    return Attempt(
        tool_name=tool,
        run_id=None if run is None else run.run_id,
        run_epoch=None if run is None else run.epoch,
        invocation_id=None if run is None else run.invocation_id,
        function_call_id=call,
    )


async def hold_intent(
    store: Store, key: str, attempt: Attempt, holder: str, hold: float = -1.0
) -> None:
    """Writes an intent as ``attempt`` would just before acting (its process then dies).

    Outside a run, ``hold`` is how long its hold still runs (by default it has
    already run out); inside a run the run's status and epoch decide.
    """
    row = await store.fetchrow(
        "journal_begin",
        {
            "key": key,
            "tool_name": attempt.tool_name,
            "run_id": attempt.run_id,
            "run_epoch": attempt.run_epoch,
            "invocation_id": attempt.invocation_id,
            "function_call_id": attempt.function_call_id,
            "holder": holder,
            "hold": hold,
            "key_template": attempt.key_template,
        },
    )
    assert row is not None and row["status"] == "acquired"


async def take_over(ledger: RunLedger, run: Run) -> Run:
    """Another worker claims the run after its lease ran out: its epoch is bumped."""
    await ledger.backdate(run.run_id, LEASE * 2)
    claimed = [r for r in await ledger.claim_expired("w2", limit=100) if r.run_id == run.run_id]
    assert len(claimed) == 1 and claimed[0].epoch == run.epoch + 1
    return claimed[0]


async def test_two_parallel_calls_of_one_key_in_one_run_make_one_act(
    store: Store, billing: FakeService, waits: Callable[[str], int]
) -> None:
    ledger, journal = RunLedger(store, lease_seconds=LEASE), Journal(store)
    run = await running(ledger, "s1")
    key, invoice = new_key()
    outside = Billing(billing, invoice)
    outside.hold_acts()
    first = asyncio.create_task(
        journal.execute(key, attempt_of(run, "call-a"), outside.act, outside.lookup)
    )
    await until(lambda: outside.entered == 1, "the first call to act")
    second = asyncio.create_task(
        journal.execute(key, attempt_of(run, "call-b"), outside.act, outside.lookup)
    )
    await until(lambda: waits(key) == 1, "the second call to wait")
    assert outside.entered == 1  # the second call did not act while the first is live
    assert outside.lookups == 1  # it asked billing first: nothing there yet, so it waits
    outside.let_go()
    a, b = await asyncio.gather(first, second)
    assert a == b and a["idempotency_key"] == key
    assert (outside.acts, outside.entered, outside.lookups, outside.invoices()) == (1, 1, 1, 1)
    entry = await journal.get(key)
    assert entry is not None and entry.status is JournalStatus.DONE
    assert entry.function_call_id == "call-a" and entry.holder is None


async def test_two_runs_of_two_sessions_on_two_connections_make_one_act(
    store: Store, store_url: str, billing: FakeService, waits: Callable[[str], int]
) -> None:
    async with open_store(store_url) as other_store:  # another worker's connection
        ledger = RunLedger(store, lease_seconds=LEASE)
        one, two = await running(ledger, "s1"), await running(ledger, "s2")
        key, invoice = new_key()
        outside = Billing(billing, invoice)
        outside.hold_acts()
        first = asyncio.create_task(
            Journal(store).execute(key, attempt_of(one, "c1"), outside.act, outside.lookup)
        )
        await until(lambda: outside.entered == 1, "the first run to act")
        second = asyncio.create_task(
            Journal(other_store).execute(key, attempt_of(two, "c2"), outside.act, outside.lookup)
        )
        await until(lambda: waits(key) == 1, "the second run to wait")
        outside.let_go()
        a, b = await asyncio.gather(first, second)
    assert a == b
    assert (outside.acts, outside.lookups, outside.invoices()) == (1, 1, 1)


async def test_many_callers_at_once_make_one_act(store: Store, billing: FakeService) -> None:
    """No gate: whoever wins, every other caller gets the winner's result."""
    ledger, journal = RunLedger(store, lease_seconds=LEASE), Journal(store)
    runs = [await running(ledger, f"s{i}") for i in range(3)]
    key, invoice = new_key()
    outside = Billing(billing, invoice)
    calls = [
        journal.execute(key, attempt_of(run, f"c{i}-{j}"), outside.act, outside.lookup)
        for i, run in enumerate(runs)
        for j in range(2)
    ]
    results = await asyncio.gather(*calls)
    assert all(r == results[0] for r in results)
    assert (outside.acts, outside.invoices(), billing.acts("invoices", "create", key)) == (1, 1, 1)
    assert outside.lookups <= 5  # at most one per caller that met the winner's intent


async def test_a_live_owner_is_waited_for_then_taken_over_after_its_epoch_moved(
    store: Store, billing: FakeService, waits: Callable[[str], int]
) -> None:
    ledger, journal = RunLedger(store, lease_seconds=LEASE), Journal(store)
    owner_run, waiter_run = await running(ledger, "s1"), await running(ledger, "s2")
    key, invoice = new_key()
    outside = Billing(billing, invoice)
    hung = asyncio.Event()

    async def lost_on_the_way(idem: str) -> dict[str, Any]:
        outside.entered += 1
        await hung.wait()  # its request never reaches billing
        return {"never": "sent"}

    owner = asyncio.create_task(
        journal.execute(key, attempt_of(owner_run, "c-owner"), lost_on_the_way, outside.lookup)
    )
    await until(lambda: outside.entered == 1, "the owner to act")
    waiter = asyncio.create_task(
        journal.execute(key, attempt_of(waiter_run, "c-waiter"), outside.act, outside.lookup)
    )
    await until(lambda: waits(key) == 1, "the waiter to wait")
    assert (outside.acts, outside.lookups) == (0, 1)  # billing has nothing yet: it waits
    # The owner's lease runs out: still RUNNING at its epoch, so still live (it
    # may be acting right now): a third caller finds nothing in billing either
    # and is told who holds the key, not to act.
    await ledger.backdate(owner_run.run_id, LEASE * 2)
    third = await running(ledger, "s3")
    held_by = f"run {owner_run.run_id} at epoch {owner_run.epoch} (call c-owner)"
    with pytest.raises(JournalBusy, match=re.escape(held_by)) as busy:
        await journal.execute(key, attempt_of(third, "c-3"), outside.act, outside.lookup, wait=0)
    assert (busy.value.key, busy.value.run_id, busy.value.run_epoch) == (
        key,
        owner_run.run_id,
        owner_run.epoch,
    )
    assert not waiter.done() and (outside.acts, outside.lookups) == (0, 2)
    # Another worker claims the run: epoch + 1, the intent is abandoned.
    new_owner = await take_over(ledger, owner_run)
    result = await waiter
    assert result["idempotency_key"] == key
    assert (outside.acts, outside.lookups, outside.invoices()) == (1, 3, 1)  # looked up, acted
    entry = await journal.get(key)
    assert entry is not None and entry.status is JournalStatus.DONE
    assert (entry.run_id, entry.run_epoch, entry.function_call_id) == (
        waiter_run.run_id,
        waiter_run.epoch,
        "c-waiter",
    )
    # The zombie owner wakes up: its DONE is refused, and the new epoch's
    # re-drive of the call gets the stored result without acting.
    hung.set()
    with pytest.raises(errors.Fenced):
        await owner
    again = await journal.execute(key, attempt_of(new_owner, "c-redrive"), outside.act, None)
    assert again == result and (outside.acts, outside.lookups) == (1, 3)
    assert billing.acts("invoices", "create", key) == 1


async def test_a_taker_over_looks_up_then_acts_when_nothing_happened(
    store: Store, billing: FakeService
) -> None:
    ledger, journal = RunLedger(store, lease_seconds=LEASE), Journal(store)
    run = await running(ledger, "s1")
    key, invoice = new_key()
    outside = Billing(billing, invoice)
    # The run's process wrote the intent and died before calling billing.
    await hold_intent(store, key, attempt_of(run, "c1"), "holder-of-a-dead-process")
    new = await take_over(ledger, run)
    await journal.execute(key, attempt_of(new, "c2"), outside.act, outside.lookup)
    assert (outside.acts, outside.lookups, outside.invoices()) == (1, 1, 1)


async def test_a_live_owner_past_the_wait_budget_is_journal_busy(
    store: Store, billing: FakeService, waits: Callable[[str], int]
) -> None:
    ledger, journal = RunLedger(store, lease_seconds=LEASE), Journal(store)
    owner_run, other_run = await running(ledger, "s1"), await running(ledger, "s2")
    key, invoice = new_key()
    outside = Billing(billing, invoice)
    outside.hold_acts()
    owner = asyncio.create_task(
        journal.execute(key, attempt_of(owner_run, "c1"), outside.act, outside.lookup)
    )
    await until(lambda: outside.entered == 1, "the owner to act")
    with pytest.raises(JournalBusy, match="held by a live attempt") as busy:
        await journal.execute(
            key, attempt_of(other_run, "c2"), outside.act, outside.lookup, wait=0.3
        )
    assert isinstance(busy.value, errors.DatabaseBusy)  # transient, by design
    message = str(busy.value)
    assert f"run {owner_run.run_id} at epoch {owner_run.epoch}" in message
    assert "within 0.3s" in message and "lookup did not find the effect" in message
    with pytest.raises(JournalBusy, match="the tool has no lookup"):
        await journal.execute(key, attempt_of(other_run, "c3"), outside.act, None, wait=0)
    assert (outside.entered, outside.lookups) == (1, 1)  # each asked billing once, if it could
    outside.let_go()
    await owner
    assert (outside.acts, outside.invoices()) == (1, 1)
    with pytest.raises(errors.InvalidArgument):
        await journal.execute(key, attempt_of(other_run, "c4"), outside.act, None, wait=-1)


@pytest.mark.parametrize("how", ["lease expired", "epoch bumped", "run finished"])
@pytest.mark.parametrize("entry", ["none", "abandoned intent", "done"])
async def test_a_zombie_is_fenced_before_any_lookup_or_act(
    store: Store, billing: FakeService, how: str, entry: str
) -> None:
    ledger, journal = RunLedger(store, lease_seconds=LEASE), Journal(store)
    zombie_run, other_run = await running(ledger, "s1"), await running(ledger, "s2")
    key, invoice = new_key()
    outside = Billing(billing, invoice)
    if entry == "abandoned intent":  # a lookup would be next for a live caller

        async def raises(idem: str) -> Any:
            raise RuntimeError("no answer")

        with pytest.raises(RuntimeError):
            await journal.execute(key, attempt_of(other_run, "c0"), raises, outside.lookup)
    elif entry == "done":
        await journal.execute(key, attempt_of(other_run, "c0"), outside.act, outside.lookup)
    before = (outside.acts, outside.lookups, await journal.get(key))
    if how == "lease expired":  # frozen past its lease; nobody has taken it over yet
        await ledger.backdate(zombie_run.run_id, LEASE * 2)
    elif how == "epoch bumped":
        await take_over(ledger, zombie_run)
    else:
        assert await ledger.finish(zombie_run.lease, RunStatus.DONE)
    with pytest.raises(errors.Fenced, match="no longer holds a live lease"):
        await journal.execute(key, attempt_of(zombie_run, "cz"), outside.act, outside.lookup)
    assert (outside.acts, outside.lookups, await journal.get(key)) == before


async def test_a_failed_act_releases_the_intent_and_a_retry_in_the_same_run_looks_up(
    store: Store, billing: FakeService
) -> None:
    ledger, journal = RunLedger(store, lease_seconds=LEASE), Journal(store)
    run = await running(ledger, "s1")
    key, invoice = new_key()
    outside = Billing(billing, invoice)

    async def answer_lost(idem: str) -> Any:
        await outside.act(idem)  # the invoice is made, then the answer is lost
        raise ConnectionResetError("connection reset by peer")

    with pytest.raises(ConnectionResetError):
        await journal.execute(key, attempt_of(run, "c1"), answer_lost, outside.lookup)
    entry = await journal.get(key)
    assert entry is not None and entry.status is JournalStatus.INTENT and entry.released
    # Same run, same epoch, a later call: no wait for a holder that is gone.
    with pytest.raises(OutcomeUnknown):
        await journal.execute(key, attempt_of(run, "c2"), outside.act, None, wait=600)
    result = await journal.execute(
        key, attempt_of(run, "c3"), outside.act, outside.lookup, wait=600
    )
    assert result["idempotency_key"] == key
    assert (outside.acts, outside.lookups, outside.invoices()) == (1, 1, 1)


async def test_a_waiter_whose_owner_fails_looks_up_instead_of_waiting_forever(
    store: Store, billing: FakeService, waits: Callable[[str], int]
) -> None:
    ledger, journal = RunLedger(store, lease_seconds=LEASE), Journal(store)
    run = await running(ledger, "s1")
    key, invoice = new_key()
    outside = Billing(billing, invoice)
    outside.hold_acts()

    async def fails_after_acting(idem: str) -> Any:
        await outside.act(idem)  # held until the waiter waits, then the invoice is made
        raise TimeoutError("billing did not answer")

    owner = asyncio.create_task(
        journal.execute(key, attempt_of(run, "c1"), fails_after_acting, outside.lookup)
    )
    await until(lambda: outside.entered == 1, "the owner to act")
    waiter = asyncio.create_task(
        journal.execute(key, attempt_of(run, "c2"), outside.act, outside.lookup, wait=600)
    )
    await until(lambda: waits(key) == 1, "the parallel call to wait")
    assert outside.lookups == 1  # billing had nothing yet
    outside.let_go()
    with pytest.raises(TimeoutError):
        await owner
    result = await asyncio.wait_for(waiter, 60)
    assert result["idempotency_key"] == key
    assert (outside.acts, outside.lookups, outside.invoices()) == (1, 2, 1)


@pytest.mark.parametrize("existing", ["done", "intent"])
async def test_a_key_reused_by_another_tool_is_refused_and_nothing_written(
    store: Store, billing: FakeService, existing: str
) -> None:
    ledger, journal = RunLedger(store, lease_seconds=LEASE), Journal(store)
    run = await running(ledger, "s1")
    key, invoice = new_key()
    outside = Billing(billing, invoice)
    if existing == "done":
        await journal.execute(key, attempt_of(run, "c1"), outside.act, outside.lookup)
    else:
        outside.hold_acts()
        owner = asyncio.create_task(
            journal.execute(key, attempt_of(run, "c1"), outside.act, outside.lookup)
        )
        await until(lambda: outside.entered == 1, "the owner to act")
    before = await journal.get(key)
    with pytest.raises(errors.InvalidArgument, match="belongs to the tool 'send_invoice'"):
        await journal.execute(
            key, attempt_of(run, "c2", tool="send_refund"), outside.act, outside.lookup
        )
    assert await journal.get(key) == before
    if existing == "intent":
        outside.let_go()
        await owner
    assert (outside.entered, outside.acts, outside.lookups, outside.invoices()) == (1, 1, 0, 1)


async def test_outside_a_run_parallel_calls_make_one_act_and_a_dead_holder_is_taken_over(
    store: Store, billing: FakeService, waits: Callable[[str], int]
) -> None:
    journal = Journal(store, hold_seconds=600)
    key, invoice = new_key()
    outside = Billing(billing, invoice)
    outside.hold_acts()
    first = asyncio.create_task(journal.execute(key, attempt_of(None, "c1"), outside.act, None))
    await until(lambda: outside.entered == 1, "the first call to act")
    second = asyncio.create_task(journal.execute(key, attempt_of(None, "c2"), outside.act, None))
    await until(lambda: waits(key) == 1, "the second call to wait")
    outside.let_go()
    a, b = await asyncio.gather(first, second)
    assert a == b and (outside.acts, outside.invoices()) == (1, 1)

    # A holder outside any run that died: its hold runs out (moved back in the
    # database), and the next caller takes the intent over, lookup first.
    key2, invoice2 = new_key()
    dead = Billing(billing, invoice2)
    await dead.act(key2)
    await hold_intent(store, key2, attempt_of(None, "c-dead"), "dead-holder")
    found = await journal.execute(key2, attempt_of(None, "c3"), dead.act, dead.lookup)
    assert found["idempotency_key"] == key2
    assert (dead.acts, dead.lookups, dead.invoices()) == (1, 1, 1)


class LocalFence:
    """A caller's local lease view: trusted for ``trusted_for`` confirmations, then lost."""

    def __init__(self, trusted_for: int) -> None:
        self.trusted_for = trusted_for
        self.confirms = 0

    async def confirm(self) -> None:
        self.confirms += 1
        if self.confirms > self.trusted_for:
            raise errors.Fenced("the lease was not renewed in time")


async def test_a_local_fence_that_lost_the_lease_stops_the_act_before_it_calls_out(
    store: Store, billing: FakeService
) -> None:
    ledger, journal = RunLedger(store, lease_seconds=LEASE), Journal(store)
    run = await running(ledger, "s1")
    key, invoice = new_key()
    outside = Billing(billing, invoice)
    lost = LocalFence(trusted_for=0)
    with pytest.raises(errors.Fenced, match="not renewed in time"):
        await journal.execute(key, attempt_of(run, "c1"), outside.act, outside.lookup, fence=lost)
    assert (lost.confirms, outside.entered, outside.lookups) == (1, 0, 0)
    assert await journal.get(key) is None  # lost before anything: not even an intent
    # Lost between the intent and the act: the intent stays, released.
    late = LocalFence(trusted_for=1)
    with pytest.raises(errors.Fenced, match="not renewed in time"):
        await journal.execute(key, attempt_of(run, "c2"), outside.act, outside.lookup, fence=late)
    assert (late.confirms, outside.entered, outside.lookups) == (2, 0, 0)
    entry = await journal.get(key)
    assert entry is not None and entry.released  # nobody acting: the next caller looks up
    fine = LocalFence(trusted_for=99)
    await journal.execute(key, attempt_of(run, "c3"), outside.act, outside.lookup, fence=fine)
    assert fine.confirms == 3  # at the start, before the lookup and before the act
    assert (outside.acts, outside.lookups, outside.invoices()) == (1, 1, 1)


async def test_a_cancelled_run_begins_no_act_and_finishes_the_one_under_way(
    store: Store, billing: FakeService
) -> None:
    ledger, journal = RunLedger(store, lease_seconds=LEASE), Journal(store)
    run = await running(ledger, "s1")
    fence = RunFence(run.run_id, run.epoch, trusted_until=time.monotonic() + LEASE)
    key, invoice = new_key()
    outside = Billing(billing, invoice)
    outside.hold_acts()
    under_way = asyncio.create_task(
        journal.execute(key, attempt_of(run, "c1"), outside.act, outside.lookup, fence=fence)
    )
    while not outside.entered:  # noqa: ASYNC110 - Billing counts, it has no event
        await asyncio.sleep(0.01)
    fence.stop("cancelled by ana")  # the owner's heartbeat saw the cancel
    idle = asyncio.create_task(fence.idle())
    await asyncio.sleep(0.05)
    assert not idle.done()  # the act under way holds the abort back
    later_key, later_invoice = new_key()
    later = Billing(billing, later_invoice)
    with pytest.raises(errors.RunCancelled, match="cancelled by ana"):
        await journal.execute(
            later_key, attempt_of(run, "c2"), later.act, later.lookup, fence=fence
        )
    assert (later.entered, later.lookups) == (0, 0) and await journal.get(later_key) is None
    outside.let_go()
    result = await asyncio.wait_for(under_way, 30)
    await asyncio.wait_for(idle, 30)
    entry = await journal.get(key)
    assert entry is not None and entry.status is JournalStatus.DONE and entry.result == result
    assert (outside.acts, outside.invoices(), later.invoices()) == (1, 1, 0)


async def test_two_takers_of_one_abandoned_intent_one_wins_the_other_waits(
    store: Store, store_url: str, billing: FakeService
) -> None:
    ledger = RunLedger(store, lease_seconds=LEASE)
    run, other = await running(ledger, "s1"), await running(ledger, "s2")
    key, invoice = new_key()
    outside = Billing(billing, invoice)
    await hold_intent(store, key, attempt_of(run, "c-dead"), "holder-of-a-dead-process")
    new = await take_over(ledger, run)
    async with open_store(store_url) as other_store:
        a, b = await asyncio.gather(
            Journal(store).execute(key, attempt_of(new, "c1"), outside.act, outside.lookup),
            Journal(other_store).execute(key, attempt_of(other, "c2"), outside.act, outside.lookup),
        )
    assert a == b
    assert (outside.acts, outside.invoices(), billing.acts("invoices", "create", key)) == (1, 1, 1)
    # The winner looks up before acting; the loser, meeting its intent, may
    # ask billing too.
    assert outside.lookups in (1, 2)


def seen_by_billing(billing: FakeService, run_id: str, epoch: int) -> None:
    """Billing admits a request of ``epoch`` of the run: lower epochs are refused from now on."""
    headers = FenceToken(run_id, epoch, time.time() + 60).headers()
    status, _, _ = request_json("GET", f"{billing.url}/invoices/count", headers=headers)
    assert status == 200


async def test_an_act_refused_by_the_services_fence_is_forgotten_and_needs_no_lookup(
    store: Store, billing: FakeService
) -> None:
    ledger, journal = RunLedger(store, lease_seconds=LEASE), Journal(store)
    run = await running(ledger, "s1")
    key, invoice = new_key()
    outside = Billing(billing, invoice)
    # The request of this epoch reaches billing after a later epoch's did (it
    # was late, the run was taken over meanwhile): billing refuses it unacted.
    seen_by_billing(billing, run.run_id, run.epoch + 1)
    late = RunFence(run.run_id, run.epoch, trusted_until=time.monotonic() + LEASE)
    with using_fence(late), pytest.raises(errors.FenceRefused):
        await journal.execute(key, attempt_of(run, "c1"), outside.act, None)
    assert outside.entered == 1 and outside.invoices() == 0
    assert await journal.get(key) is None  # our own intent, refused: as if never written
    assert billing.acts("invoices", "create", key) == 0
    assert len(billing.requests("invoices", "create", key, outcome="fenced")) == 1
    # No lookup, yet no "outcome unknown": the next caller simply acts, once.
    result = await journal.execute(key, attempt_of(run, "c2"), outside.act, None)
    assert result["idempotency_key"] == key
    assert (outside.acts, outside.invoices(), billing.acts("invoices", "create", key)) == (2, 1, 1)
    entry = await journal.get(key)
    assert entry is not None and entry.status is JournalStatus.DONE


async def test_a_taken_over_intent_whose_act_is_refused_stays_released_for_a_lookup(
    store: Store, billing: FakeService
) -> None:
    ledger, journal = RunLedger(store, lease_seconds=LEASE), Journal(store)
    run = await running(ledger, "s1")
    key, invoice = new_key()
    outside = Billing(billing, invoice)
    await hold_intent(store, key, attempt_of(run, "c-dead"), "holder-of-a-dead-process")
    new = await take_over(ledger, run)
    seen_by_billing(billing, new.run_id, new.epoch + 1)
    late = RunFence(new.run_id, new.epoch, trusted_until=time.monotonic() + LEASE)
    with using_fence(late), pytest.raises(errors.FenceRefused):  # the lookup is refused first
        await journal.execute(key, attempt_of(new, "c1"), outside.act, outside.lookup)
    assert (outside.lookups, outside.entered) == (1, 0)
    entry = await journal.get(key)
    # The first owner may have acted: the intent stays, released, for the next lookup.
    assert entry is not None and entry.status is JournalStatus.INTENT and entry.released
    with pytest.raises(OutcomeUnknown):
        await journal.execute(key, attempt_of(new, "c2"), outside.act, None)
    assert outside.invoices() == 0
