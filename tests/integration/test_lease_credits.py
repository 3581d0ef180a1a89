"""The lease watchdog's credits: a lease renewed before its holding existed.

A claim whose answer waited for a blocked event loop is held late; the
watchdog renewed it meanwhile (RunLedger.renew_owned) and keeps a credit.
The keeper applies it when the lease is held, at the epoch renewed only, and
once. End to end (a real blocked loop, a second worker sweeping) in
tests/adk/test_barrier_shapes.py.
"""

from __future__ import annotations

import time

from durable_adk.fencing.fence import RunFence
from durable_adk.fencing.leases import LeaseKeeper, trust_from
from durable_adk.store import Store
from durable_adk.tables.ledger import Lease, RenewResult, RunLedger

LEASE = 30.0


def past_its_deadline(run_id: str, epoch: int) -> RunFence:
    return RunFence(run_id, epoch, trusted_until=time.monotonic() - 1)


async def test_a_credit_is_applied_at_its_epoch_once(store: Store) -> None:
    keeper = LeaseKeeper(RunLedger(store, lease_seconds=LEASE), "w1")
    sent = time.monotonic()
    kept = keeper.watchdog._keep_credits([], {"r1": (2, RenewResult(ok=True))}, sent)
    assert kept == 1 and keeper.watchdog.credited_at == sent
    assert keeper.unheld_until() >= sent + LEASE

    older = past_its_deadline("r1", 1)  # a lease of an earlier epoch gets nothing
    keeper.drop(keeper.hold(Lease("r1", "w1", 1), older, lambda _: None))
    assert not older.trusted()

    fence = past_its_deadline("r1", 2)
    keeper.drop(keeper.hold(Lease("r1", "w1", 2), fence, lambda _: None))
    assert fence.trusted_until == trust_from(sent, LEASE)
    assert keeper.watchdog.credit(Lease("r1", "w1", 2)) is None  # taken once
    await keeper.aclose()


async def test_only_renewed_unheld_leases_earn_credits_and_old_ones_fade(store: Store) -> None:
    keeper = LeaseKeeper(RunLedger(store, lease_seconds=LEASE), "w1")
    watchdog = keeper.watchdog
    long_ago = time.monotonic() - 2 * LEASE
    assert watchdog._keep_credits([], {"old": (1, RenewResult(ok=True))}, long_ago) == 1
    fresh = {"lost": (1, RenewResult(ok=False)), "new": (1, RenewResult(ok=True))}
    assert watchdog._keep_credits([], fresh, time.monotonic()) == 1
    assert watchdog.credit(Lease("lost", "w1", 1)) is None  # not renewed: no credit
    assert watchdog.credit(Lease("old", "w1", 1)) is None  # older than a lease: dropped
    assert watchdog.credit(Lease("new", "w1", 1)) is not None
    await keeper.aclose()


async def test_a_lease_held_while_the_renewal_was_out_has_its_fence_moved(store: Store) -> None:
    keeper = LeaseKeeper(RunLedger(store, lease_seconds=LEASE), "w1")
    fence = past_its_deadline("r1", 1)
    other = past_its_deadline("r2", 1)
    holdings = [
        keeper.hold(Lease("r1", "w1", 1), fence, lambda _: None),
        keeper.hold(Lease("r2", "w1", 1), other, lambda _: None),
    ]
    sent = time.monotonic()  # renewed after both were held, the batch taken before
    renewed = {"r1": (1, RenewResult(ok=True)), "r2": (2, RenewResult(ok=True))}
    assert keeper.watchdog._keep_credits([], renewed, sent) == 2
    assert fence.trusted_until == trust_from(sent, LEASE)  # moved at once
    assert keeper.watchdog.credit(Lease("r1", "w1", 1)) is None  # and not kept twice
    assert not other.trusted()  # another epoch's renewal: kept as a credit, not applied
    assert keeper.watchdog.credit(Lease("r2", "w1", 2)) == sent
    for holding in holdings:
        keeper.drop(holding)
    await keeper.aclose()
