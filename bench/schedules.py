"""The schedule poller's cost: one claim statement per worker per poll, whatever the count.

Run from the repository root::

    .venv/bin/python -m bench.schedules [--quick] [--write]

On each backend (SQLite, a file; PostgreSQL, a private TempPostgres cluster)
two apps are set up side by side: one with no schedule, one with 1,000
(hourly crons whose minutes are spread over the hour, none due). Their
pollers (:class:`~durable_adk.adk.loops.scheduler.Scheduler`, each on its own
store, as separate workers would be) poll in interleaved blocks, the order
rotated each round. Reported per app: statements per poll (every named query
the store ran, counted by wrapping ``store.fetch``) and the median and p95
time of one poll. Then 20 of the 1,000 schedules are made due at once (their
next tick moved back in SQL) and one poll fires them: the statements of that
poll per fired tick, its time, and how late the last tick fired after its
time (database clock): the target is within one poll interval (1 s, the
default). On PostgreSQL the claim's plan is shown (it must use the
``schedules_due`` index, not scan the table).

Targets (PASS / MISS, never asserted): one statement per idle poll with
1,000 schedules, as with none; the median idle poll with 1,000 schedules
within 2x of the one with none (noise on 2 shared cores); due ticks fired
within one poll interval.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent

from bench.common import (
    bench_main,
    fmt_ms,
    machine_note,
    md_table,
    median,
    percentile,
    quiet,
    rotate,
    verdict,
)
from durable_adk.adk.loops.scheduler import Scheduler
from durable_adk.adk.runner import DurableRunner
from durable_adk.schedules import Schedule
from durable_adk.store import Store, connect, open_store
from durable_adk.store.queries import load_queries
from durable_adk.testing import Say, ScriptedModel
from durable_adk.testing.pg_cluster import TempPostgres

COUNTS = (0, 1000)
MADE_DUE = 20
POLL_INTERVAL = 1.0


class Counted:
    """A store whose named queries are counted."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.by_name: Counter[str] = Counter()
        inner = store.fetch

        async def fetch(query: str, params: Any = None) -> Any:
            self.by_name[query] += 1
            return await inner(query, params)

        store.fetch = fetch  # type: ignore[method-assign]

    def total(self) -> int:
        return sum(self.by_name.values())


def schedules(count: int) -> list[Schedule]:
    return [
        Schedule(name=f"s{i:04d}", message="tick", user_id="bench", cron=f"{i % 60} * * * *")
        for i in range(count)
    ]


def poller(store: Store, count: int) -> Scheduler:
    agent = LlmAgent(name="root", model=ScriptedModel([Say("done")] * 4))
    runner = DurableRunner(
        app=agent,
        app_name=f"bench-{count}",
        store=store,
        worker_id=f"w-{count}",
        schedules=schedules(count),
        background=False,
    )
    return Scheduler(runner, runner.path.schedules, interval=POLL_INTERVAL, batch=100)


async def measure(url: str, backend: str, polls: int, block: int) -> tuple[list[list[Any]], str]:
    """Idle polls side by side, then one poll firing due ticks; rows of the table and a note."""
    stores = [await connect(url) for _ in COUNTS]
    try:
        counted = [Counted(s) for s in stores]
        pollers = [poller(s, n) for s, n in zip(stores, COUNTS, strict=True)]
        for p in pollers:
            await p.sync()
            await p.poll_once()  # warm-up: connections, prepared statements
        times: dict[int, list[float]] = {n: [] for n in COUNTS}
        statements: dict[int, int] = dict.fromkeys(COUNTS, 0)
        for round_index in range(polls // block):
            for index in rotate(range(len(COUNTS)), round_index):
                n, p, c = COUNTS[index], pollers[index], counted[index]
                before = c.total()
                for _ in range(block):
                    started = time.perf_counter()
                    fired = await p.poll_once()
                    times[n].append(time.perf_counter() - started)
                    assert not fired, "an idle poll fired a tick"
                statements[n] += c.total() - before
        rows = [
            [
                backend,
                f"{n:,}",
                f"{statements[n] / len(times[n]):.2f}",
                fmt_ms(median(times[n])),
                fmt_ms(percentile(times[n], 95)),
            ]
            for n in COUNTS
        ]
        due = await fire_due(pollers[-1], counted[-1])
        plan = await claim_plan(stores[-1]) if backend == "postgresql" else ""
        base, many = median(times[COUNTS[0]]), median(times[COUNTS[-1]])
        per_poll = statements[COUNTS[-1]] / len(times[COUNTS[-1]])
        note = (
            f"{backend}: idle poll with {COUNTS[-1]:,} schedules {many / base:.2f}x the one with "
            f"none ({verdict(many / base, 2.0, at_least=False)}); "
            f"{per_poll:.2f} statement(s) per idle poll "
            f"({verdict(per_poll, 1.0, at_least=False)}, target 1). {due}"
            + (f"\n\nclaim plan: `{plan}`" if plan else "")
        )
        for p in pollers:
            await p.path.aclose()
        return rows, note
    finally:
        for s in stores:
            await s.close()


async def fire_due(sched: Scheduler, counted: Counted) -> str:
    """Makes ``MADE_DUE`` schedules due at once and fires them in one poll."""
    now = await sched.table.store.now()
    names = [f"s{i:04d}" for i in range(MADE_DUE)]
    rows = {r.name: r for r in await sched.table.list_schedules()}
    for name in names:
        tick = rows[name].schedule.next_tick(now - 3600)  # its last tick, already due
        await sched.table.rewind(name, next_tick_at=tick, next_fire_at=now - 0.001)
    before = counted.total()
    started = time.perf_counter()
    fired = await sched.poll_once()
    took = time.perf_counter() - started
    used = counted.total() - before
    await sched.wait()
    # How late, by the database clock, the last run was on the ledger after the
    # ticks came due (their next look was put at ``now``).
    runs = await sched.path.ledger.list_runs(limit=MADE_DUE + 10)
    late = max(r.created_at for r in runs) - now
    ok = len(fired) == MADE_DUE and late <= POLL_INTERVAL
    return (
        f"{MADE_DUE} due ticks fired in one poll of {fmt_ms(took)} with {used} statements "
        f"({used / max(1, len(fired)):.1f} per tick: record, open ticks, previous run, submit, "
        f"mark); each fired within {fmt_ms(late)} of coming due "
        f"({'PASS' if ok else 'MISS'}: target within one poll interval, {POLL_INTERVAL:g} s)."
    )


async def claim_plan(store: Store) -> str:
    """PostgreSQL's plan of the claim statement (must use the ``schedules_due`` index)."""
    import asyncpg

    query = load_queries("postgresql")["schedule_claim"]
    values = {"app_name": "bench-1000", "owner": "explain", "lease": 30.0, "batch": 100}
    conn = await asyncpg.connect(store.url)
    try:
        async with conn.transaction():
            rows = await conn.fetch(
                "EXPLAIN " + query.statements[0], *[values[p] for p in query.params]
            )
            raise _Rollback([r[0] for r in rows])
    except _Rollback as done:
        lines = done.lines
    finally:
        await conn.close()
    index = [line.strip() for line in lines if "schedules_due" in line]
    return index[0] if index else " / ".join(line.strip() for line in lines[:4])


class _Rollback(Exception):
    def __init__(self, lines: list[str]) -> None:
        super().__init__("rollback")
        self.lines = lines


async def run(quick: bool) -> str:
    polls, block = (40, 10) if quick else (400, 20)
    rows: list[list[Any]] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'schedules.db'}"
        async with open_store(url):
            pass
        found, note = await measure(url, "sqlite", polls, block)
        rows += found
        notes.append(note)
    with TempPostgres() as pg:
        url = pg.create_database("bench_schedules")
        async with open_store(url):
            pass
        found, note = await measure(url, "postgresql", polls, block)
        rows += found
        notes.append(note)
    table = md_table(["backend", "schedules", "statements / poll", "poll p50", "poll p95"], rows)
    return (
        "## Schedules: the poller's cost with 0 and 1,000 schedules\n\n"
        f"{polls} idle polls per app, interleaved in blocks of {block}"
        f"{' (--quick)' if quick else ''}.\n\n"
        + table
        + "\n\n"
        + "\n\n".join(notes)
        + "\n\n"
        + machine_note()
    )


def collect(quick: bool) -> str:
    with quiet():
        body = asyncio.run(run(quick))
    print(body)
    return body


def main(argv: Sequence[str] | None = None) -> None:
    """Runs the bench (``--quick``) and with ``--write`` rewrites its BENCHMARKS.md section."""
    bench_main("schedules", collect, argv)


if __name__ == "__main__":
    main()
