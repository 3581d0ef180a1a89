"""RunLedger.release (a transient fault hands a run back) and retry of FAILED runs."""

from __future__ import annotations

import dataclasses

from durable_adk.store import Store
from durable_adk.tables.ledger import Lease, Run, RunLedger, RunStatus


async def running(ledger: RunLedger, session: str = "s", owner: str = "w1") -> Run:
    run = await ledger.submit(
        app_name="a", user_id="u", session_id=session, request={"parts": []}, owner=owner
    )
    claimed = await ledger.claim_queued(run.run_id, owner)
    assert claimed is not None and claimed.status is RunStatus.RUNNING
    return claimed


async def test_release_expires_the_lease_with_a_back_off_and_recovery_counts_the_attempt(
    store: Store,
) -> None:
    ledger = RunLedger(store, lease_seconds=60, backoff_seconds=20)
    run = await running(ledger)
    assert await ledger.release(run.lease, error="DatabaseBusy: locked")
    after = await ledger.get(run.run_id)
    assert after is not None
    now = await store.now()
    assert after.status is RunStatus.RUNNING and after.owner == "w1" and after.epoch == run.epoch
    assert after.last_error == "DatabaseBusy: locked" and after.attempts == 1
    assert after.lease_until <= now
    assert now + 15 < after.next_attempt_at <= now + 21  # backoff * 2^(attempts - 1)
    assert await ledger.claim_expired("sweeper") == []  # not before the back-off
    await ledger.backdate(run.run_id, 25)
    (taken,) = await ledger.claim_expired("sweeper")
    assert (taken.run_id, taken.epoch, taken.attempts) == (run.run_id, run.epoch + 1, 2)
    # The old holder is fenced: a second release (or any write) changes nothing.
    assert not await ledger.release(run.lease, error="late")
    assert not (await ledger.renew(run.lease)).ok
    # The back-off doubles with each attempt.
    assert await ledger.release(taken.lease, error="again")
    again = await ledger.get(run.run_id)
    now = await store.now()
    assert again is not None and now + 35 < again.next_attempt_at <= now + 41


async def test_release_with_a_stale_lease_returns_false_and_changes_nothing(store: Store) -> None:
    ledger = RunLedger(store)
    run = await running(ledger)
    for stale in (
        dataclasses.replace(run.lease, epoch=run.epoch - 1),
        dataclasses.replace(run.lease, owner="someone-else"),
        Lease(run_id="no-such-run", owner="w1", epoch=run.epoch),
    ):
        assert not await ledger.release(stale, error="zombie")
    assert await ledger.get(run.run_id) == run
    # A finished run cannot be released either.
    assert await ledger.finish(run.lease, RunStatus.DONE)
    done = await ledger.get(run.run_id)
    assert not await ledger.release(run.lease, error="too late")
    assert await ledger.get(run.run_id) == done


async def test_retry_takes_failed_runs_and_leaves_others(store: Store) -> None:
    ledger = RunLedger(store)
    failed = await running(ledger, "s1")
    assert await ledger.finish(failed.lease, RunStatus.FAILED, error="ValueError: bad")
    retried = await ledger.retry(failed.run_id)
    assert retried is not None and retried.status is RunStatus.QUEUED
    assert retried.attempts == 0 and retried.last_error is None and retried.finished_at is None
    assert (await ledger.retry(failed.run_id)) == retried  # twice is harmless
    (taken,) = await ledger.claim_expired("sweeper")
    assert taken.run_id == failed.run_id and taken.epoch == failed.epoch + 1
    done = await running(ledger, "s2")
    assert await ledger.finish(done.lease, RunStatus.DONE)
    before = await ledger.get(done.run_id)
    assert await ledger.retry(done.run_id) == before
    live = await running(ledger, "s3")
    assert await ledger.retry(live.run_id) == live
