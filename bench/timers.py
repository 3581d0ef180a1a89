"""The cost of durable sleep: one indexed wake statement per poll, whatever the number of sleepers.

Run from the repository root::

    .venv/bin/python -m bench.timers            # 10,000 sleeping timers
    .venv/bin/python -m bench.timers --quick    # 2,000 sleeping timers, shorter polls

On each backend (SQLite, and PostgreSQL in a private TempPostgres cluster,
fsync on), side by side in one run:

1. **Poll cost.** A waker's poll (:meth:`durable_adk.adk.loops.sleep.Waker.wake_due`,
   the statement every worker runs once per poll interval) against a store
   with 0 sleeping timers, then against the same store holding ``N`` timers
   due later. Reported: store statements per poll (counted by name, by
   wrapping ``Store.fetch``) and the median poll time; the ratio of the
   median with ``N`` timers to the median with none.
2. **Lateness.** ``K`` timers come due at spread times over the next few
   seconds among the ``N`` sleepers while one waker polls every ``interval``
   seconds; each woken timer's ``woke_at - due`` (both on the database clock,
   read from its result) must stay within one poll interval.

Targets: one statement per poll with ``N`` sleepers, a poll-time ratio below
3x, every wake-up within one poll interval (PASS / MISS, never asserted).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory

from bench.common import bench_main, fmt_ms, fmt_ratio, md_table, quiet, verdict
from bench.runner import StoreCalls
from durable_adk.adk.loops.sleep import Waker
from durable_adk.effect_tables.jobs import JobTable
from durable_adk.store import Store, open_store
from durable_adk.testing.pg_cluster import TempPostgres


@dataclass(frozen=True)
class Params:
    """The bench's sizes."""

    sleepers: int
    polls: int
    due: int
    interval: float
    spread: float

    @classmethod
    def for_mode(cls, quick: bool) -> Params:
        if quick:
            return cls(sleepers=2000, polls=50, due=40, interval=0.2, spread=1.5)
        return cls(sleepers=10_000, polls=200, due=200, interval=0.5, spread=5.0)


@dataclass(frozen=True)
class Result:
    """One backend's numbers."""

    backend: str
    statements_empty: float
    statements_full: float
    median_empty: float
    median_full: float
    lateness: list[float]
    woken: int
    expected: int

    @property
    def ratio(self) -> float:
        return self.median_full / self.median_empty


async def _polls(store: Store, polls: int) -> tuple[float, float]:
    """Statements per poll and the median poll time of ``polls`` wake passes."""
    waker = Waker(JobTable(store))
    times = []
    with StoreCalls(store) as calls:
        for _ in range(polls):
            t0 = time.perf_counter()
            woken = await waker.wake_due()
            times.append(time.perf_counter() - t0)
            assert woken == [], "nothing is due while the cost is measured"
    return sum(calls.calls.values()) / polls, statistics.median(times)


async def _sleepers(jobs: JobTable, n: int, prefix: str, seconds: float) -> None:
    batch = 200
    for start in range(0, n, batch):
        await asyncio.gather(
            *(
                jobs.create_timer(
                    f"{prefix}:{i}", tool_name="durable_sleep", seconds=seconds + i % 3600
                )
                for i in range(start, min(n, start + batch))
            )
        )


async def _lateness(store: Store, p: Params) -> tuple[list[float], int]:
    jobs = JobTable(store)
    step = p.spread / p.due
    await asyncio.gather(
        *(
            jobs.create_timer(f"due:{i}", tool_name="durable_sleep", seconds=0.5 + i * step)
            for i in range(p.due)
        )
    )
    waker = Waker(jobs)
    late: list[float] = []
    end = time.monotonic() + 0.5 + p.spread + 3 * p.interval
    while time.monotonic() < end and len(late) < p.due:
        t0 = time.monotonic()
        for job in await waker.wake_due():
            late.append(float(job.result["woke_at"]) - float(job.result["due"]))
        await asyncio.sleep(max(0.0, p.interval - (time.monotonic() - t0)))
    return late, len(late)


async def _one(backend: str, url: str, p: Params) -> Result:
    async with open_store(url) as store:
        s_empty, m_empty = await _polls(store, p.polls)
        await _sleepers(JobTable(store), p.sleepers, "sleeper", 3600.0)
        s_full, m_full = await _polls(store, p.polls)
        late, woken = await _lateness(store, p)
    return Result(backend, s_empty, s_full, m_empty, m_full, late, woken, p.due)


async def run(quick: bool = False) -> str:
    """Runs the bench on both backends; prints and returns its BENCHMARKS.md section."""
    p = Params.for_mode(quick)
    results = []
    with TemporaryDirectory() as tmp:
        results.append(await _one("sqlite", f"sqlite:///{Path(tmp) / 'timers.db'}", p))
    with TempPostgres() as pg:
        results.append(await _one("postgresql", pg.create_database("bench_timers"), p))
    rows = []
    for r in results:
        worst = max(r.lateness) if r.lateness else float("inf")
        rows.append(
            [
                r.backend,
                f"{r.statements_empty:.1f}",
                f"{r.statements_full:.1f}",
                fmt_ms(r.median_empty),
                fmt_ms(r.median_full),
                fmt_ratio(r.ratio),
                verdict(r.ratio, 3.0, at_least=False),
                f"{r.woken}/{r.expected}",
                fmt_ms(statistics.median(r.lateness)) if r.lateness else "-",
                fmt_ms(worst),
                verdict(worst, p.interval, at_least=False)
                if r.woken == r.expected
                else "MISS (not all woke)",
            ]
        )
    mode = "quick (`--quick`)" if quick else "full"
    table = md_table(
        [
            "backend",
            "stmts/poll, 0 sleepers",
            f"stmts/poll, {p.sleepers:,} sleepers",
            "poll, 0",
            f"poll, {p.sleepers:,}",
            "ratio",
            "< 3x",
            "woken",
            "lateness p50",
            "lateness max",
            f"<= {p.interval:g} s poll",
        ],
        rows,
    )
    body = "\n\n".join(
        [
            "## Durable sleep: wake cost per poll (bench/timers.py)",
            f"Mode: {mode}. {p.polls} polls per column; {p.due} timers due over "
            f"{p.spread:g} s among the sleepers, one waker polling every {p.interval:g} s.",
            table,
        ]
    )
    print(body)
    return body


def collect(quick: bool = False) -> str:
    """Runs the bench (printing its tables) and returns its BENCHMARKS.md section."""
    with quiet():
        return asyncio.run(run(quick))


def main(argv: Sequence[str] | None = None) -> None:
    bench_main("timers", collect, argv)


if __name__ == "__main__":
    main()
