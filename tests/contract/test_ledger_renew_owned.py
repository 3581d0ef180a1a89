"""RunLedger.renew_owned: the lease watchdog's renewal of every live lease of a worker.

While the event loop is blocked, a claim that committed leases a run its
keeper holds no lease of yet; the watchdog keeps every lease of the worker
that has not expired, and nothing else: not a run handed back, not a lease
left to lapse, not another worker's, not an ended run's.
"""

from __future__ import annotations

import pytest
from test_ledger_release import running

from durable_adk import errors
from durable_adk.store import Store
from durable_adk.tables.ledger import RunLedger, RunStatus


async def test_only_the_workers_live_leases_are_renewed(store: Store) -> None:
    ledger = RunLedger(store, lease_seconds=60, backoff_seconds=20)
    live = await running(ledger, "live")
    queued = await ledger.submit(
        app_name="a", user_id="u", session_id="live", request={"parts": []}, owner="w1"
    )  # behind `live`, leased to its waiting caller
    handed_back = await running(ledger, "back")
    assert await ledger.release(handed_back.lease, error="DatabaseBusy: locked")
    lapsed = await running(ledger, "lapsed")
    await ledger.backdate(lapsed.run_id, 120)
    others = await running(ledger, "other", owner="w2")
    ended = await running(ledger, "ended")
    assert await ledger.finish(ended.lease, RunStatus.DONE)
    await ledger.backdate(live.run_id, 30)  # half its lease left
    untouched = {r.run_id: await ledger.get(r.run_id) for r in (handed_back, lapsed, others, ended)}

    renewed = await ledger.renew_owned("w1")

    assert set(renewed) == {live.run_id, queued.run_id}
    assert renewed[live.run_id][0] == live.epoch and renewed[live.run_id][1].ok
    now = await store.now()
    for run_id in renewed:
        after = await ledger.get(run_id)
        assert after is not None and now + 55 < after.lease_until <= now + 61
    for run_id, before in untouched.items():
        assert await ledger.get(run_id) == before
    assert await ledger.claim_expired("sweeper", limit=10) != []  # the lapsed one is free
    assert await ledger.renew_owned("nobody") == {}


async def test_a_cancel_request_travels_with_the_renewal(store: Store) -> None:
    ledger = RunLedger(store, lease_seconds=60)
    run = await running(ledger, "s")
    await ledger.cancel(run.run_id, by="ops")
    ((epoch, result),) = (await ledger.renew_owned("w1")).values()
    assert epoch == run.epoch and result.cancel_requested_by == "ops"


@pytest.mark.parametrize("owner", ["", "x" * 1000, "bad\nowner"])
async def test_a_bad_owner_is_refused_and_changes_nothing(store: Store, owner: str) -> None:
    ledger = RunLedger(store, lease_seconds=60)
    run = await running(ledger, "s")
    before = await ledger.get(run.run_id)
    with pytest.raises(errors.InvalidArgument):
        await ledger.renew_owned(owner)
    assert await ledger.get(run.run_id) == before
