"""A caller that meets an intent held by another attempt asks the outside system first.

Both backends, the billing fake (a real HTTP server in another process that
honours idempotency keys and offers lookup). The owner of the intent is live
to the journal (its run RUNNING at its epoch, or outside a run its hold still
running) but may be dead, or in the middle of its act: when billing's lookup
already holds the effect, that is the caller's answer at once, recorded DONE
under the caller's own fence. The caller waits only when the lookup finds
nothing or there is none, and a wait that runs out names the run that holds
the key.

"At once" is shown without timing: the journal logs every wait it begins, and
these tests pass the default 30 s wait and see none begun (the elapsed time
is checked too, against half the wait). Counts are taken on both sides: the
test's own act and lookup functions, and the requests billing received.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_journal_owners import (
    LEASE,
    Billing,
    attempt_of,
    hold_intent,
    new_key,
    running,
    take_over,
    until,
)

from durable_adk import errors
from durable_adk.effect_tables.journal import WAIT_SECONDS, Journal, JournalBusy, JournalStatus
from durable_adk.store import Store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.testing.services import FakeService


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


def served(billing: FakeService, key: str) -> tuple[int, int]:
    """What billing received for ``key``: (creates, lookups)."""
    return (
        billing.acts("invoices", "create", key),
        len(billing.requests("invoices", "lookup", key)),
    )


@pytest.mark.parametrize("owner", ["run", "outside a run"])
async def test_an_owner_that_died_holding_the_intent_is_answered_by_the_lookup_at_once(
    store: Store, billing: FakeService, waits: Callable[[str], int], owner: str
) -> None:
    ledger, journal = RunLedger(store, lease_seconds=LEASE), Journal(store, hold_seconds=600)
    key, invoice = new_key()
    outside = Billing(billing, invoice)
    # The owner wrote its intent, its request created the invoice, and its
    # process died. To the journal it is still live: its run is RUNNING at its
    # epoch with a lease that runs for minutes (outside a run: its hold runs).
    dead_run = await running(ledger, "s-dead") if owner == "run" else None
    await hold_intent(store, key, attempt_of(dead_run, "c-dead"), "dead-holder", hold=600)
    dead = Billing(billing, invoice)
    created = await dead.act(key)
    caller_run = await running(ledger, "s-caller") if owner == "run" else None
    started = time.monotonic()
    result = await journal.execute(
        key, attempt_of(caller_run, "c-caller"), outside.act, outside.lookup, wait=WAIT_SECONDS
    )
    elapsed = time.monotonic() - started
    assert result == created
    assert waits(key) == 0  # answered without beginning to wait...
    assert elapsed < WAIT_SECONDS / 2  # ...so well before the wait would have ended
    assert (outside.acts, outside.lookups, outside.invoices()) == (0, 1, 1)
    assert served(billing, key) == (1, 1)  # the dead owner's create, the caller's lookup
    entry = await journal.get(key)
    assert entry is not None and entry.status is JournalStatus.DONE and entry.result == created
    assert entry.holder is None and entry.function_call_id == "c-caller"
    assert (entry.run_id, entry.run_epoch) == (
        (caller_run.run_id, caller_run.epoch) if caller_run else (None, None)
    )
    # Every later caller, the dead run's own re-drive after a takeover
    # included, gets the stored result: no act, no lookup.
    later = await running(ledger, "s-later") if owner == "run" else None
    assert await journal.execute(key, attempt_of(later, "c-3"), outside.act, None) == created
    if dead_run is not None:
        redrive = await take_over(ledger, dead_run)
        again = await journal.execute(key, attempt_of(redrive, "c-dead"), outside.act, None)
        assert again == created
    assert served(billing, key) == (1, 1) and outside.lookups == 1


async def test_a_live_owner_whose_act_landed_is_not_waited_for_and_keeps_the_stored_answer(
    store: Store, billing: FakeService, waits: Callable[[str], int]
) -> None:
    ledger, journal = RunLedger(store, lease_seconds=LEASE), Journal(store)
    owner_run, caller_run = await running(ledger, "s1"), await running(ledger, "s2")
    key, invoice = new_key()
    outside = Billing(billing, invoice)
    landed, answer = asyncio.Event(), asyncio.Event()

    async def act_then_slow_answer(idem: str) -> dict[str, Any]:
        record = await outside.act(idem)  # the invoice exists...
        landed.set()
        await answer.wait()  # ...and its answer is slow to come back
        return record

    owner = asyncio.create_task(
        journal.execute(key, attempt_of(owner_run, "c-owner"), act_then_slow_answer, outside.lookup)
    )
    await until(landed.is_set, "billing to make the owner's invoice")
    result = await journal.execute(
        key, attempt_of(caller_run, "c-caller"), outside.act, outside.lookup, wait=WAIT_SECONDS
    )
    assert waits(key) == 0 and not owner.done()
    assert result["idempotency_key"] == key
    answer.set()
    # The owner records after the caller did: the entry stays as the caller
    # recorded it, and the owner answers with the stored result.
    assert await owner == result
    entry = await journal.get(key)
    assert entry is not None and entry.status is JournalStatus.DONE
    assert (entry.run_id, entry.function_call_id, entry.result) == (
        caller_run.run_id,
        "c-caller",
        result,
    )
    assert (outside.acts, outside.lookups, outside.invoices()) == (1, 1, 1)
    assert served(billing, key) == (1, 1)


@pytest.mark.parametrize("lookup", ["finds nothing", "none", "unavailable"])
async def test_a_caller_waits_only_when_the_lookup_cannot_answer_and_names_the_holder(
    store: Store, billing: FakeService, waits: Callable[[str], int], lookup: str
) -> None:
    ledger, journal = RunLedger(store, lease_seconds=LEASE), Journal(store)
    dead_run, caller_run = await running(ledger, "s1"), await running(ledger, "s2")
    key, invoice = new_key()
    outside = Billing(billing, invoice)
    # The owner died after writing its intent, before its request left.
    await hold_intent(store, key, attempt_of(dead_run, "c-dead"), "dead-holder")

    async def unavailable(idem: str) -> Any:
        outside.lookups += 1
        raise errors.LookupUnavailable("billing offers no lookup today")

    find = {"finds nothing": outside.lookup, "none": None, "unavailable": unavailable}[lookup]
    with pytest.raises(JournalBusy) as busy:
        await journal.execute(key, attempt_of(caller_run, "c-caller"), outside.act, find, wait=0.2)
    assert waits(key) == 1
    holder = f"run {dead_run.run_id} at epoch {dead_run.epoch} (call c-dead)"
    assert re.search(re.escape(holder), str(busy.value))
    assert "within 0.2s" in str(busy.value)
    assert (busy.value.key, busy.value.run_id, busy.value.run_epoch) == (
        key,
        dead_run.run_id,
        dead_run.epoch,
    )
    assert busy.value.function_call_id == "c-dead"
    assert (outside.entered, outside.lookups) == (0, 0 if find is None else 1)
    assert served(billing, key) == (0, 1 if lookup == "finds nothing" else 0)
    entry = await journal.get(key)  # nothing changed: still the dead owner's intent
    assert entry is not None and entry.status is JournalStatus.INTENT
    assert (entry.run_id, entry.holder) == (dead_run.run_id, "dead-holder")


async def test_the_lookups_answer_is_recorded_under_the_callers_fence(
    store: Store, billing: FakeService
) -> None:
    ledger, journal = RunLedger(store, lease_seconds=LEASE), Journal(store)
    dead_run, caller_run = await running(ledger, "s1"), await running(ledger, "s2")
    key, invoice = new_key()
    outside = Billing(billing, invoice)
    await hold_intent(store, key, attempt_of(dead_run, "c-dead"), "dead-holder")
    await Billing(billing, invoice).act(key)  # the dead owner's request made the invoice

    async def slow_lookup(idem: str) -> dict[str, Any] | None:
        found = await outside.lookup(idem)
        await take_over(ledger, caller_run)  # meanwhile another worker claims the caller's run
        return found

    with pytest.raises(errors.Fenced, match="no longer holds a live lease"):
        await journal.execute(key, attempt_of(caller_run, "c-caller"), outside.act, slow_lookup)
    entry = await journal.get(key)  # a zombie writes nothing, not even a true answer
    assert entry is not None and entry.status is JournalStatus.INTENT
    assert (entry.run_id, entry.holder) == (dead_run.run_id, "dead-holder")
    assert (outside.acts, outside.lookups) == (0, 1)
    # A caller whose run ended is refused before it asks anything.
    ended = await running(ledger, "s3")
    assert await ledger.finish(ended.lease, RunStatus.DONE)
    with pytest.raises(errors.Fenced):
        await journal.execute(key, attempt_of(ended, "c-ended"), outside.act, outside.lookup)
    assert (outside.acts, outside.lookups) == (0, 1)
    assert served(billing, key) == (1, 1)


async def test_a_second_recorder_of_a_found_effect_changes_nothing(
    store: Store, billing: FakeService, waits: Callable[[str], int]
) -> None:
    ledger, journal = RunLedger(store, lease_seconds=LEASE), Journal(store)
    dead_run = await running(ledger, "s0")
    one, two = await running(ledger, "s1"), await running(ledger, "s2")
    key, invoice = new_key()
    outside = Billing(billing, invoice)
    await hold_intent(store, key, attempt_of(dead_run, "c-dead"), "dead-holder")
    created = await Billing(billing, invoice).act(key)
    first_recorded = asyncio.Event()

    async def late_lookup(idem: str) -> dict[str, Any] | None:
        found = await outside.lookup(idem)  # found while the intent was still held...
        await first_recorded.wait()  # ...and recorded only after the first caller did
        return found

    second = asyncio.create_task(
        journal.execute(key, attempt_of(two, "c-two"), outside.act, late_lookup)
    )
    await until(lambda: outside.lookups == 1, "the second caller to look up")
    first = await journal.execute(key, attempt_of(one, "c-one"), outside.act, outside.lookup)
    recorded = await journal.get(key)
    first_recorded.set()
    assert await second == first == created
    assert await journal.get(key) == recorded  # owner, call, result, updated_at: all unchanged
    assert recorded is not None and recorded.function_call_id == "c-one"
    assert waits(key) == 0
    assert (outside.acts, outside.lookups) == (0, 2)
    assert served(billing, key) == (1, 2)
