"""A failover to a synchronous standby costs the runs in flight no more than the failover.

A private PostgreSQL primary with a synchronous streaming standby
(:class:`~durable_adk.chaos.failover.ReplicatedPostgres`: ``pg_basebackup -R``,
``synchronous_standby_names`` on the primary), two ``durable-adk serve``
workers on the two-host URL (``target_session_attrs=read-write``) with the
default 30 s lease, runs in flight with journaled tools. The primary is
SIGKILLed (every process of it) while a charge is at work, and the standby is
promoted a second later. Every run ends DONE soon after the promotion (the
workers find the new primary by themselves; their runs are not left to their
leases), every effect acted once at the counting services, the soak's verdict
finds nothing; while neither host takes writes ``/readyz`` answers 503 and
names each host's refusal (the dead one unreachable, the standby read-only),
and each worker says the outage in two WARNING lines, the second naming the
failover (the database came back on a new timeline).
"""

from __future__ import annotations

import asyncio
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
from durable_adk.chaos.failover import ReplicatedPostgres
from durable_adk.store import open_store
from postgres_required import postgres_or_skip

pytestmark = pytest.mark.slow

DEFAULT_LEASE = 30.0
RUNS = 8
PROMOTE_AFTER = 1.0
"""Seconds between the primary's death and the standby's promotion (an operator's or a
failover manager's reaction)."""

AFTER_PROMOTION = 10.0
"""How long after the promotion every run must have ended: the target is 5 s (docs/postgres.md
has the measured figure); the bound leaves room for a loaded test machine, and is far below
the 25 s a run stalled for when its worker handed it back to wait out its lease."""


def readyz(worker: Worker) -> tuple[int, str]:
    try:
        answer = httpx.get(f"{worker.url}/readyz", timeout=5)
    except httpx.HTTPError as exc:
        return 0, str(exc)
    return answer.status_code, str(answer.json().get("reason", ""))


async def failover_recorded(db: str) -> float | None:
    """When the database's history last changed, as its workers recorded it."""
    async with open_store(db) as store:
        return store.failed_over_at


def test_a_failover_to_a_synchronous_standby_ends_every_run_soon_after_the_promotion(
    tmp_path: Path,
) -> None:
    postgres_or_skip()
    markers = tmp_path / "markers"
    markers.mkdir()
    with ReplicatedPostgres() as pair, fake_services(tmp_path) as urls:
        pair.create_database("failover")
        db = pair.url("failover")
        prepare(db)
        workers = [
            launch(db, f"w{i}", urls, tmp_path, tool_seconds=1.0, marker_dir=markers,
                   lease=DEFAULT_LEASE)
            for i in range(2)
        ]  # fmt: skip
        try:
            ready(*workers)
            runs = [submit(workers[i % 2], f"s{i}", f"ORD-F{i}") for i in range(RUNS)]
            wait_marker(markers, ".charge", workers[0])  # a charge at work
            pair.kill_primary()
            time.sleep(PROMOTE_AFTER)
            refused = [
                wait_until(lambda w=w: (s := readyz(w))[0] == 503 and s, 20, "/readyz 503")
                for w in workers
            ]
            promoted = pair.promote()

            def all_ended() -> list[dict[str, object]] | None:
                rows = [run_row(workers[0], r) for r in runs]
                ended = all(row is not None and row["status"] in TERMINAL for row in rows)
                return [row for row in rows if row is not None] if ended else None

            rows = wait_until(all_ended, 120, "the runs ending")
            took = time.monotonic() - promoted
            for w in workers:
                wait_until(lambda w=w: readyz(w)[0] == 200, 30, "/readyz 200 again")
            settled = time.time()
        finally:
            stop(*workers)
        result = outcome(db, urls, runs)
        failed_over_at = asyncio.run(failover_recorded(db))
        logs = [w.log.read_text(errors="replace") for w in workers]
    print(f"failover: every run ended {took:.2f}s after the promotion")
    evidence = describe(result, *workers)
    assert [row["status"] for row in rows] == ["DONE"] * RUNS, evidence
    assert took < AFTER_PROMOTION, f"{took:.1f}s after the promotion\n{evidence}"
    for i in range(RUNS):
        assert (result.acts(f"charge:ORD-F{i}"), result.acts(f"notify:ORD-F{i}")) == (1, 1)
    assert result.verdict.violations == 0, evidence
    # The workers recorded the new history as they met it (a store opened only
    # now would record it at now): for a day, new journal intents ask first.
    assert failed_over_at is not None and failed_over_at < settled, (failed_over_at, settled)
    for _status, reason in refused:
        assert "unavailable" in reason, refused
    for log in logs:
        loud = [line for line in log.splitlines() if " WARNING " in line or " ERROR " in line]
        assert len(loud) == 2, log
        assert "unreachable" in loud[0] and "read-only" in loud[0], log
        assert "the store is back after" in loud[1] and "on a new primary" in loud[1], log
        assert "Traceback" not in log, log
