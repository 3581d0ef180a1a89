"""The fresh worker of a crash test: take over what dead workers left, once.

A test (or the demo) kills a worker with ``os._exit(137)``; a new process then
calls :func:`sweep_as_fresh_worker`. Instead of waiting out the dead worker's
lease it moves that lease back in the database (the database clock still
decides), runs one recovery pass and reports what it found and did.
:func:`clear_of_a_tick` keeps a test that makes a schedule's tick due away
from the next one.
"""

from __future__ import annotations

import asyncio
from typing import Any

from durable_adk.adk.loops.recovery import Sweeper
from durable_adk.adk.runner import DurableRunner
from durable_adk.schedules import Schedule
from durable_adk.store import Store
from durable_adk.tables.ledger import RunStatus


async def sweep_as_fresh_worker(runner: DurableRunner, *, batch: int = 50) -> list[dict[str, Any]]:
    """Expires other workers' leases, sweeps once, returns one dict per recovered run.

    Args:
        runner: This (fresh) worker's runner.
        batch: Most runs to recover.

    Returns:
        ``run``, ``session``, ``found`` (class), ``action``, ``status``,
        ``reason`` and ``error`` (the row's last error, if any) per recovered run.
    """
    for status in (RunStatus.RUNNING, RunStatus.QUEUED):
        for stuck in await runner.ledger.list_runs(status=status, limit=1000):
            if stuck.owner != runner.worker_id:
                await runner.ledger.backdate(stuck.run_id, 3600)
    report = []
    for done in await Sweeper(runner, batch=batch).recover_once():
        row = await runner.ledger.get(done.run_id)
        report.append(
            {
                "run": done.run_id,
                "session": row.session_id if row else "?",
                "found": done.found.value,
                "action": done.action,
                "status": done.status.value,
                "reason": done.reason,
                "error": row.last_error if row else None,
            }
        )
    return report


async def clear_of_a_tick(store: Store, schedule: Schedule, margin: float = 90.0) -> float:
    """Now on the database clock, at least ``margin`` seconds before ``schedule``'s next tick.

    A test that makes the current tick due expects that tick alone; if the
    next one fell due while the test ran (the hour turning), the catch-up
    policy would rightly fire that one instead. Closer than ``margin`` to a
    tick, this waits until the tick has passed.
    """
    now = await store.now()
    ahead = schedule.next_tick(now) - now
    if ahead < margin:
        await asyncio.sleep(ahead + 1.0)
        now = await store.now()
    return now
