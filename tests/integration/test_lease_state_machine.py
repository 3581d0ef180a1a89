"""Hypothesis drives the lease and epoch state machine of the ledger at random.

Workers submit runs, claim their turn, renew, finish and die (their lease is
moved back in the database); sweepers take expired runs over. After every
step the ledger must agree with a model of who holds what, and the invariants
hold: at most one RUNNING run per session; a lease whose epoch is old can
neither renew nor finish nor park; epochs only grow; a finished run is never
claimed again.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from durable_adk.store import SqliteStore, check_schema
from durable_adk.tables.ledger import Lease, RunLedger, RunStatus

SESSIONS = ["s1", "s2"]
WORKERS = ["w1", "w2", "w3"]


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = tempfile.TemporaryDirectory()
        self.store = SqliteStore(str(Path(self.dir.name) / "m.db"))
        self.run(self.store.open())
        self.run(check_schema(self.store))
        self.ledger = RunLedger(self.store, lease_seconds=60, backoff_seconds=0, max_attempts=100)
        self.leases: dict[str, Lease] = {}  # run id -> the newest lease handed out
        self.stale: list[Lease] = []  # leases superseded by a takeover or finish
        self.epochs: dict[str, int] = {}
        self.finished: set[str] = set()

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.store.close())
        self.loop.close()
        self.dir.cleanup()

    @initialize()
    def start(self) -> None:
        pass

    @rule(session=st.sampled_from(SESSIONS), worker=st.sampled_from(WORKERS))
    def submit(self, session: str, worker: str) -> None:
        # Ids in submission order: replays of an example must pick the same runs.
        run_id = f"run-{len(self.epochs):04d}"
        run = self.run(
            self.ledger.submit(
                app_name="a",
                user_id="u",
                session_id=session,
                request={},
                owner=worker,
                run_id=run_id,
            )
        )
        self.leases[run.run_id] = run.lease
        self.epochs[run.run_id] = run.epoch

    @precondition(lambda self: bool(self.leases))
    @rule(data=st.data())
    def claim_turn(self, data: st.DataObject) -> None:
        run_id = data.draw(st.sampled_from(sorted(self.leases)))
        lease = self.leases[run_id]
        claimed = self.run(self.ledger.claim_queued(run_id, lease.owner))
        if claimed is not None:
            assert claimed.epoch == self.epochs[run_id] + 1
            self.stale.append(lease)
            self.leases[run_id] = claimed.lease
            self.epochs[run_id] = claimed.epoch

    @precondition(lambda self: bool(self.leases))
    @rule(
        data=st.data(), status=st.sampled_from([RunStatus.DONE, RunStatus.PAUSED, RunStatus.FAILED])
    )
    def finish(self, data: st.DataObject, status: RunStatus) -> None:
        run_id = data.draw(st.sampled_from(sorted(self.leases)))
        lease = self.leases[run_id]
        before = self.run(self.ledger.get(run_id))
        ok = self.run(self.ledger.finish(lease, status))
        assert ok == (before.status is RunStatus.RUNNING and before.epoch == lease.epoch)
        if ok:
            self.finished.add(run_id)

    @precondition(lambda self: bool(self.leases))
    @rule(data=st.data())
    def worker_dies(self, data: st.DataObject) -> None:
        run_id = data.draw(st.sampled_from(sorted(self.leases)))
        self.run(self.ledger.backdate(run_id, 3600))

    @rule(sweeper=st.sampled_from(WORKERS))
    def sweep(self, sweeper: str) -> None:
        for run in self.run(self.ledger.claim_expired(sweeper, limit=5)):
            assert run.run_id not in self.finished
            assert run.epoch == self.epochs[run.run_id] + 1
            self.stale.append(self.leases[run.run_id])
            self.leases[run.run_id] = run.lease
            self.epochs[run.run_id] = run.epoch

    @precondition(lambda self: bool(self.stale))
    @rule(data=st.data())
    def stale_holder_tries_to_write(self, data: st.DataObject) -> None:
        lease = data.draw(st.sampled_from(self.stale))
        assert not self.run(self.ledger.renew(lease)).ok
        assert not self.run(self.ledger.finish(lease, RunStatus.DONE))
        assert not self.run(self.ledger.park(lease, error="stale"))

    @invariant()
    def ledger_matches_model(self) -> None:
        runs = self.run(self.ledger.list_runs(limit=1000))
        running = [r.session_id for r in runs if r.status is RunStatus.RUNNING]
        assert len(running) == len(set(running)), "two RUNNING runs in one session"
        for r in runs:
            assert r.epoch == self.epochs[r.run_id]
            if r.run_id in self.finished:
                assert r.status in (RunStatus.DONE, RunStatus.PAUSED, RunStatus.FAILED)


LedgerMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("DADK_STATEFUL_EXAMPLES", "40")),
    stateful_step_count=25,
    deadline=None,
)
TestLedgerMachine = LedgerMachine.TestCase
