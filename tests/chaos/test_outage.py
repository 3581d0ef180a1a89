"""A database outage shorter than the lease costs a run no more than the outage.

Real ``durable-adk serve`` workers on the default 30 s lease, a private
PostgreSQL stopped (``immediate``: every connection broken, new ones refused)
for 3 s while the runs' tools are at work, then started again on the same
port and data directory. The worker holding the runs keeps them: each run
ends DONE within a few seconds of the server's return (not when its lease
would have run out), every effect acted once at the counting services, and
the soak's whole verdict finds nothing. The worker says the outage in two
WARNING lines, and ``/readyz`` answers 503 while the server is down, 200 once
it is back.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from chaos_support import (
    Worker,
    describe,
    fake_services,
    launch,
    outcome,
    prepare,
    ready,
    run_row,
    stop,
    submit,
    wait_marker,
    wait_until,
)

from durable_adk.chaos.check import TERMINAL
from durable_adk.chaos.soak import restart_postgres
from durable_adk.testing.pg_cluster import TempPostgres
from postgres_required import postgres_or_skip

pytestmark = pytest.mark.slow

DEFAULT_LEASE = 30.0
"""``durable-adk serve``'s default lease: what an operator runs."""

AFTER_RETURN = 12.0
"""How long after the server's return every run must have ended: a few seconds of
work left, far below the 25 s a run stalled for when its worker handed it back."""


def readiness(worker: Worker) -> int:
    """The worker's ``/readyz`` status (0: no answer)."""
    try:
        return httpx.get(f"{worker.url}/readyz", timeout=5).status_code
    except httpx.HTTPError:
        return 0


def test_runs_in_flight_across_a_short_outage_finish_soon_after_it(tmp_path: Path) -> None:
    postgres_or_skip()
    markers = tmp_path / "markers"
    markers.mkdir()
    with TempPostgres() as pg, fake_services(tmp_path) as urls:
        db = pg.create_database("outage")
        prepare(db)
        worker = launch(
            db, "holder", urls, tmp_path, tool_seconds=1.0, marker_dir=markers, lease=DEFAULT_LEASE
        )
        try:
            ready(worker)
            runs = [submit(worker, f"s{i}", f"ORD-O{i}") for i in range(3)]
            assert readiness(worker) == 200
            wait_marker(markers, ".charge", worker)  # a charge at work
            restart = threading.Thread(
                target=restart_postgres, args=(pg,), kwargs={"mode": "immediate", "down": 3.0}
            )
            restart.start()
            # An orchestrator sees the worker not ready while the server is down.
            seen = wait_until(lambda: readiness(worker) == 503, 30, "/readyz answering 503")
            restart.join()
            back = time.monotonic()

            def all_ended() -> list[dict[str, object]] | None:
                rows = [run_row(worker, r) for r in runs]
                ended = all(row is not None and row["status"] in TERMINAL for row in rows)
                return [row for row in rows if row is not None] if ended else None

            rows = wait_until(all_ended, 90, "the runs ending")
            took = time.monotonic() - back
            ready_again = wait_until(lambda: readiness(worker) == 200, 30, "/readyz 200 again")
        finally:
            stop(worker)
        result = outcome(db, urls, runs)
        log = worker.log.read_text(errors="replace")
    assert seen and ready_again
    assert [row["status"] for row in rows] == ["DONE"] * 3, describe(result, worker)
    assert took < AFTER_RETURN, f"ended {took:.1f}s after the return\n" + describe(result, worker)
    for i in range(3):
        assert (result.acts(f"charge:ORD-O{i}"), result.acts(f"notify:ORD-O{i}")) == (1, 1)
    assert result.verdict.violations == 0, describe(result, worker)
    # One line when the outage began (naming the host and why it refused), one
    # when it ended; every retry, failed pass and reconnect at DEBUG, no traceback.
    loud = [line for line in log.splitlines() if " WARNING " in line or " ERROR " in line]
    assert len(loud) == 2, log
    assert "the store is unavailable" in loud[0] and "unreachable" in loud[0], log
    assert "the store is back after" in loud[1] and "3 run(s) waited" in loud[1], log
    assert "Traceback" not in log, log
