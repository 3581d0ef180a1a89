"""Job completions per second on PostgreSQL, 30 % duplicates, every call resumed exactly once.

Run from the repository root::

    .venv/bin/python -m bench.jobs [--jobs 5000] [--duplicates 0.3] [--senders 8]
        [--resumers 2] [--rounds 3] [--db postgresql://...]

Set-up (not timed): ``--jobs`` jobs are created and attached, each to its own
call. Each round then sends every job's completion once plus duplicates (so
that ``--duplicates`` of all deliveries are repeats), shuffled, from
``--senders`` concurrent senders, each delivery a signed webhook through
:func:`durable_adk.webhooks.handle_job_webhook` (HMAC check, parse, one
conditional update). Meanwhile ``--resumers`` resumers, each on its own
connection pool as separate workers would be, claim ready jobs
(:meth:`JobTable.claim_for_resume`), "deliver" each answer by counting it per
call id (standing in for the ADK run, which the test suite covers) and record
the run with :meth:`JobTable.mark_resumed`.

Reported per round: completions per second (all deliveries, duplicates
included, over the time until the last sender is answered), the time until
every call was resumed, and the checks: exactly ``--jobs`` completions changed
a row, every call was delivered exactly once, and every job has ``resumed_at``.
Target: at least 2,000 completions/s (PASS / MISS, never asserted). Without
``--db`` a private PostgreSQL cluster is started (TempPostgres, fsync on).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from durable_adk.effect_tables.jobs import JobTable
from durable_adk.store import Store, open_store
from durable_adk.testing.pg_cluster import TempPostgres
from durable_adk.webhooks import handle_job_webhook, sign

SECRET = "bench-secret"
TARGET = 2000.0


@dataclass
class Round:
    """One measured round."""

    deliveries: int
    changed: int
    complete_seconds: float
    resumed_seconds: float
    exactly_once: bool

    @property
    def per_second(self) -> float:
        return self.deliveries / self.complete_seconds


async def prepare(store: Store, prefix: str, n: int) -> list[str]:
    jobs = JobTable(store)
    ids = [f"{prefix}:{i}" for i in range(n)]

    async def one(i: int, job_id: str) -> None:
        await jobs.create(job_id, tool_name="start_report", deadline=3600)
        await jobs.attach(
            job_id,
            app_name="bench",
            user_id=f"u{i}",
            session_id=f"s{i}",
            invocation_id=f"{prefix}-e{i}",
            function_call_id=f"{prefix}-c{i}",
        )

    for start in range(0, n, 200):
        await asyncio.gather(*(one(i, ids[i]) for i in range(start, min(n, start + 200))))
    return ids


async def send_all(store: Store, bodies: list[bytes], senders: int) -> tuple[int, float]:
    jobs = JobTable(store)
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    changed = 0

    async def sender() -> None:
        nonlocal changed
        while True:
            try:
                body = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            now = time.time()
            result = await handle_job_webhook(jobs, SECRET, sign(SECRET, body, now), body, now)
            changed += result.changed

    started = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(senders)))
    return changed, time.perf_counter() - started


async def resume_all(
    stores: Sequence[Store], n: int, delivered: Counter[str], done: asyncio.Event
) -> float:
    started = time.perf_counter()
    resumed = 0

    async def resumer(index: int, store: Store) -> None:
        nonlocal resumed
        jobs = JobTable(store)
        owner = f"resumer-{index}"
        runs = 0
        while resumed < n:
            claimed = await jobs.claim_for_resume(owner, app_name="bench", limit=500)
            if not claimed:
                if done.is_set() and resumed >= n:
                    return
                await asyncio.sleep(0.05)  # idle: do not steal the CPU from the senders
                continue
            for job in claimed:
                delivered[job.function_call_id or ""] += 1
            runs += 1
            marked = await jobs.mark_resumed(owner, claimed, f"{owner}-run-{runs}")
            resumed += len(marked)

    await asyncio.gather(*(resumer(i, s) for i, s in enumerate(stores)))
    return time.perf_counter() - started


async def one_round(
    url: str, index: int, n: int, duplicates: float, senders: int, resumers: int
) -> Round:
    async with open_store(url, max_size=20) as store:
        prefix = f"report:r{index}"
        ids = await prepare(store, prefix, n)
        extra = round(n * duplicates / (1 - duplicates))
        rng = random.Random(index)
        chosen = ids + [rng.choice(ids) for _ in range(extra)]
        rng.shuffle(chosen)
        bodies = [
            json.dumps(
                {"job_id": job_id, "state": "SUCCEEDED", "result": {"url": f"https://r/{job_id}"}}
            ).encode()
            for job_id in chosen
        ]
        delivered: Counter[str] = Counter()
        done = asyncio.Event()
        resumer_stores = [await _open(url) for _ in range(resumers)]
        try:
            resuming = asyncio.create_task(resume_all(resumer_stores, n, delivered, done))
            changed, seconds = await send_all(store, bodies, senders)
            done.set()
            resumed_seconds = await resuming
        finally:
            for s in resumer_stores:
                await s.close()
        jobs = JobTable(store)
        marked = [await jobs.get(job_id) for job_id in ids[:: max(1, n // 500)]]
        exactly_once = (
            changed == n
            and len(delivered) == n
            and set(delivered.values()) == {1}
            and all(j is not None and j.resumed_at is not None for j in marked)
        )
        return Round(len(bodies), changed, seconds, resumed_seconds, exactly_once)


async def _open(url: str) -> Store:
    from durable_adk.store import connect

    return await connect(url, max_size=4)


async def run(args: argparse.Namespace) -> list[Round]:
    if args.db:
        return await rounds(args.db, args)
    with TempPostgres() as pg:
        url = pg.create_database("bench_jobs")
        async with open_store(url):
            pass
        return await rounds(url, args)


async def rounds(url: str, args: argparse.Namespace) -> list[Round]:
    found = []
    for index in range(args.rounds):
        r = await one_round(url, index, args.jobs, args.duplicates, args.senders, args.resumers)
        print(
            f"round {index + 1}: {r.deliveries} deliveries ({r.deliveries - r.changed} duplicates)"
            f" in {r.complete_seconds:.2f} s = {r.per_second:,.0f} completions/s; every call"
            f" resumed after {r.resumed_seconds:.2f} s; exactly once: {r.exactly_once}",
            flush=True,
        )
        found.append(r)
    return found


def main(argv: Sequence[str] | None = None) -> None:
    """Runs the rounds and prints the median against the target."""
    parser = argparse.ArgumentParser(prog="python -m bench.jobs")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--duplicates", type=float, default=0.3)
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--resumers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--db", default="", help="a postgresql:// URL (default: a temp cluster)")
    args = parser.parse_args(argv)
    found = asyncio.run(run(args))
    best = statistics.median(r.per_second for r in found)
    verdict = "PASS" if best >= TARGET and all(r.exactly_once for r in found) else "MISS"
    print(
        f"median {best:,.0f} completions/s with {args.duplicates:.0%} duplicates "
        f"(target {TARGET:,.0f}/s, every call resumed exactly once): {verdict}"
    )


if __name__ == "__main__":
    main()
