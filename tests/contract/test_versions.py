"""Versioned runs on the ledger, both backends: who may claim what.

Leases are expired by moving them back in the database, never by sleeping.
"""

from __future__ import annotations

import pytest

from durable_adk import errors
from durable_adk.store import Store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.versions import Serving


def ledger(store: Store, version: str | None, *compatible: str) -> RunLedger:
    return RunLedger(
        store, serving=Serving.declare(version, fingerprint=f"fp-{version}", compatible=compatible)
    )


async def orphan(led: RunLedger, session: str, owner: str = "dead") -> str:
    """A run of ``led``'s version whose worker died mid-drive (RUNNING, lease expired)."""
    run = await led.submit(app_name="a", user_id="u", session_id=session, request={}, owner=owner)
    claimed = await led.claim_queued(run.run_id, owner)
    assert claimed is not None
    await led.backdate(run.run_id, 3600)
    return run.run_id


async def test_a_run_records_the_version_and_fingerprint_it_was_started_under(
    store: Store,
) -> None:
    v2 = ledger(store, "2.0.0", "1.0.0")
    run = await v2.submit(app_name="a", user_id="u", session_id="s", request={}, owner="w")
    assert (run.app_version, run.app_fingerprint) == ("2.0.0", "fp-2.0.0")
    started = await v2.start(
        app_name="a", user_id="u", session_id="t", request={}, owner="w", now=0.0
    )
    assert started is not None
    assert (started.run.app_version, started.run.app_fingerprint) == ("2.0.0", "fp-2.0.0")
    assert (await v2.get(run.run_id)).app_version == "2.0.0"  # type: ignore[union-attr]


async def test_a_continuation_keeps_the_version_of_its_invocation(store: Store) -> None:
    v1, v2 = ledger(store, "1.0.0"), ledger(store, "2.0.0")
    first = await v1.submit(app_name="a", user_id="u", session_id="s", request={}, owner="w1")
    # A worker of 2.0.0 answers the pause of an invocation started under 1.0.0.
    answer = await v2.submit(
        app_name="a",
        user_id="u",
        session_id="s",
        request={},
        owner="w2",
        invocation_id=first.invocation_id,
        claims=[("call-1", 1)],
    )
    assert (answer.app_version, answer.app_fingerprint) == ("1.0.0", "fp-1.0.0")
    resumed = await v2.submit(
        app_name="a",
        user_id="u",
        session_id="s",
        request={},
        owner="w2",
        invocation_id=first.invocation_id,
    )
    assert resumed.app_version == "1.0.0"
    fresh = await v2.submit(app_name="a", user_id="u", session_id="x", request={}, owner="w2")
    assert fresh.app_version == "2.0.0"


async def test_an_old_worker_claims_none_of_the_newer_runs(store: Store) -> None:
    v1, v2 = ledger(store, "1.0.0"), ledger(store, "2.0.0", "1.0.0")
    newer = {await orphan(v2, f"new-{i}") for i in range(3)}
    older = {await orphan(v1, f"old-{i}") for i in range(2)}
    claimed = await v1.claim_expired("old-worker", limit=10)
    assert {r.run_id for r in claimed} == older
    assert all(r.app_version == "1.0.0" for r in claimed)
    for run_id in newer:  # still RUNNING, lease expired: waiting for their version, not parked
        left = await v1.get(run_id)
        assert left is not None and left.status is RunStatus.RUNNING and left.owner == "dead"
    assert await v1.claim_expired("old-worker", limit=10) == []
    taken = await v2.claim_expired("new-worker", limit=10)
    assert {r.run_id for r in taken} == newer


async def test_pinned_runs_wait_for_their_version_and_compatible_ones_are_continued(
    store: Store,
) -> None:
    v1, v2_pinned, v2_compat = (
        ledger(store, "1.0.0"),
        ledger(store, "2.0.0"),
        ledger(store, "2.0.0", "1.0.0"),
    )
    old = await orphan(v1, "s1")
    assert await v2_pinned.claim_expired("pinned", limit=10) == []
    (taken,) = await v2_compat.claim_expired("compatible", limit=10)
    assert taken.run_id == old and taken.app_version == "1.0.0"  # the run keeps its version


async def test_unversioned_runs_go_to_any_worker_and_unversioned_workers_take_only_them(
    store: Store,
) -> None:
    plain, v1 = ledger(store, None), ledger(store, "1.0.0")
    legacy = await orphan(plain, "legacy")
    versioned = await orphan(v1, "versioned")
    assert [r.run_id for r in await plain.claim_expired("plain", limit=10)] == [legacy]
    await plain.backdate(legacy, 3600)
    got = {r.run_id for r in await v1.claim_expired("v1", limit=10)}
    assert got == {legacy, versioned}


async def test_the_queue_claim_refuses_a_version_it_does_not_serve_and_hands_it_over(
    store: Store,
) -> None:
    v1, v2 = ledger(store, "1.0.0"), ledger(store, "2.0.0")
    first = await v1.submit(app_name="a", user_id="u", session_id="s", request={}, owner="w1")
    done = await v1.claim_queued(first.run_id, "w1")
    assert done is not None and await v1.finish(done.lease, RunStatus.PAUSED)
    answer = await v2.submit(
        app_name="a",
        user_id="u",
        session_id="s",
        request={},
        owner="w2",
        invocation_id=first.invocation_id,
    )
    assert await v2.claim_queued(answer.run_id, "w2") is None
    handed = await v2.hand_over(answer.lease)
    assert handed is not None and handed.status is RunStatus.QUEUED
    assert await v2.claim_expired("w2", limit=10) == []
    (taken,) = await v1.claim_expired("w1-recovery", limit=10)
    assert taken.run_id == answer.run_id and taken.owner == "w1-recovery"


@pytest.mark.parametrize(
    ("version", "compatible"),
    [
        ("blue", ()),
        ("", ()),
        ("2.0.0", ("green",)),
        ("2.0.0", ("2.0.0",)),
        ("2.0.0", ("3.0.0",)),
        (None, ("1.0.0",)),
    ],
)
def test_a_bad_declaration_is_refused_clearly(
    version: str | None, compatible: tuple[str, ...]
) -> None:
    with pytest.raises(errors.InvalidVersion):
        Serving.declare(version, compatible=compatible)


async def test_sagas_jobs_and_interrupts_record_the_version_of_their_run(store: Store) -> None:
    from durable_adk.effect_tables.jobs import JobTable
    from durable_adk.effect_tables.sagas import SagaLedger
    from durable_adk.tables.interrupts import InterruptKind, InterruptTable

    v1 = ledger(store, "1.0.0")
    run = await v1.submit(app_name="a", user_id="u", session_id="s", request={}, owner="w")
    where = {"app_name": "a", "user_id": "u", "session_id": "s"}
    saga_id = f"{run.invocation_id}/order"
    await SagaLedger(store).begin(
        saga_id=saga_id, name="order", invocation_id=run.invocation_id, **where
    )
    saga = await store.fetchrow("saga_get", {"saga_id": saga_id})
    jobs = JobTable(store)
    await jobs.create("report:q1", tool_name="report", deadline=60)
    await jobs.attach("report:q1", invocation_id=run.invocation_id, function_call_id="c1", **where)
    job = await store.fetchrow("job_get", {"job_id": "report:q1"})
    await InterruptTable(store).open(
        run, call_id="c2", kind=InterruptKind.CONFIRMATION, name="ship", args={}
    )
    (interrupt,) = await store.fetch(
        "interrupt_list",
        {"status": None, "app_name": "a", "session_id": None, "kind": None, "limit": 10},
    )
    for row in (saga, job, interrupt):
        assert row is not None
        assert (row["app_version"], row["app_fingerprint"]) == ("1.0.0", "fp-1.0.0")
