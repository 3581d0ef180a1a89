"""Retention under load (issue 43): what a purge costs the appends, and a bounded database.

(a) **The purge's cost to appends.** A database holds ``--events`` old events
(default a million: sessions of 100 events, each with a DONE run that ended
two days ago), seeded by named bulk inserts. Appenders keep appending to
sessions of their own through ``DurableSessionService.append_event`` (the
real append path), one coroutine each. Side by side in one run, in
alternating windows of ``--window`` seconds: a window *with* a purge (on a
store, connections and all, of its own, as another worker's purge loop would
be, deleting the old data in batches of at most ``--batch`` rows) and a
window *without*; the purge's statements wait at a gate closed in the
windows without it, until it has deleted everything. Reported: p99 (and
median) append latency in each kind of window, and their ratio (target:
p99 with <= 1.2x p99 without), and the purge's throughput (rows per second
of open windows) at ``--duty`` (the policy's duty cycle,
:mod:`durable_adk.lifecycle.pacing`; 1: flat out).

(b) **A bounded database.** Steady load: sessions are created, get 20
appends, and go idle; the worker's purge (``RetentionPolicy(idle_sessions=...)``
run every second with one pacer for all its passes, as a worker's loop does)
takes them after the idle time.
Sampled every few seconds: events stored and the database's size (SQLite:
pages in use, ``page_count - freelist_count``; PostgreSQL:
``pg_total_relation_size`` of the events table). Flat: the last third's
mean within 15 % of the middle third's.

Run: ``.venv/bin/python -m bench.retention [--events N] [--backend sqlite|postgresql]
[--duty D] [--target S] [--min-batch N] [--checkpoint-rows N] [--skip-cost|--skip-steady]``
(``--target`` and ``--min-batch`` default to the dialect's,
:func:`~durable_adk.lifecycle.pacing.pace_for`).
Reported beside the rates: ``hold_ms_p50_p90_p99``, how long the purge's
statements held the writer each (the store's figure); ``held_share``, the
share of the open windows the purge was billed (its statements' hold of the
writer and its checkpoints), and ``waited_share``, the share its statements
spent waiting for the lock or a connection (not billed; a statement's wait at
the closed gate is left out).
Not part of the test suite; the figures go to BENCHMARKS.md by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from google.adk.events.event import Event
from google.genai import types

from bench.common import percentile
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.lifecycle import RetentionPolicy, purge
from durable_adk.lifecycle.pacing import CHECKPOINT_ROWS, Pacer, pace_for
from durable_adk.lifecycle.policy import DEFAULT_DUTY
from durable_adk.store import Store, open_store
from durable_adk.store.queries import parse_queries
from durable_adk.testing.pg_cluster import TempPostgres

SEED_SQL = {
    "postgresql": """
-- name: bench_seed
-- :count old sessions from :first, each with a DONE run and :per events, written at :at.
WITH s AS (
    INSERT INTO sessions (app_name, user_id, session_id, initial_state, last_seq,
                          create_time, update_time)
    SELECT 'old', 'u' || (g % 1000), 's' || g, '{}', :per::bigint, :at::float8, :at::float8
      FROM generate_series(:first::int, :first::int + :count::int - 1) g
    RETURNING pk, user_id, session_id
), r AS (
    INSERT INTO runs (run_id, app_name, user_id, session_id, invocation_id, request, status,
                      lease_until, created_at, updated_at, finished_at)
    SELECT 'run-' || s.session_id, 'old', s.user_id, s.session_id, 'inv-' || s.session_id,
           '{"role": "user"}', 'DONE', 0, :at::float8, :at::float8, :at::float8
      FROM s
    RETURNING 1
)
INSERT INTO events (session_pk, seq, event_id, invocation_id, author, timestamp, delta, data)
SELECT s.pk, e, 'e' || s.pk || '-' || e, 'inv-' || s.session_id, 'agent', :at::float8, NULL,
       :data::text
  FROM s, generate_series(1, :per::int) e;

-- name: bench_size
SELECT pg_total_relation_size('events') AS bytes, (SELECT COUNT(*) FROM events) AS events;
""",
    "sqlite": """
-- name: bench_seed
-- :count old sessions from :first, each with a DONE run and :per events, written at :at.
INSERT INTO sessions (app_name, user_id, session_id, initial_state, last_seq, create_time,
                      update_time)
WITH RECURSIVE g(n) AS (SELECT :first UNION ALL SELECT n + 1 FROM g WHERE n < :first + :count - 1)
SELECT 'old', 'u' || (n % 1000), 's' || n, '{}', :per, :at, :at FROM g;
INSERT INTO runs (run_id, app_name, user_id, session_id, invocation_id, request, status,
                  lease_until, created_at, updated_at, finished_at)
SELECT 'run-' || session_id, 'old', user_id, session_id, 'inv-' || session_id,
       '{"role": "user"}', 'DONE', 0, :at, :at, :at
  FROM sessions WHERE app_name = 'old' AND pk > :after_pk;
INSERT INTO events (session_pk, seq, event_id, invocation_id, author, timestamp, delta, data)
WITH RECURSIVE e(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM e WHERE k < :per)
SELECT s.pk, e.k, 'e' || s.pk || '-' || e.k, 'inv-' || s.session_id, 'agent', :at, NULL, :data
  FROM sessions s, e WHERE s.app_name = 'old' AND s.pk > :after_pk;

-- name: bench_size
SELECT (SELECT page_count FROM pragma_page_count()) * (SELECT page_size FROM pragma_page_size())
       - (SELECT freelist_count FROM pragma_freelist_count())
         * (SELECT page_size FROM pragma_page_size()) AS bytes,
       (SELECT COUNT(*) FROM events) AS events;
""",
}

MAX_PK = """
-- name: bench_max_pk
SELECT COALESCE(MAX(pk), 0) AS pk FROM sessions;
"""

PAYLOAD = (
    '{"author": "agent", "content": {"role": "model", "parts": [{"text": "'
    + ("an old answer nobody needs any more " * 4)
    + '"}]}}'
)
PER_SESSION = 100
args_pause = [0.002]
"""Seconds each appender waits between its appends (``--pause``)."""


def event(n: int) -> Event:
    return Event(
        invocation_id=f"live-{n // 2}",
        author="user" if n % 2 == 0 else "shop",
        content=types.Content(role="user", parts=[types.Part(text=f"message {n} " + "x" * 120)]),
    )


async def seed(store: Store, events: int) -> None:
    store.add_queries(parse_queries(SEED_SQL[store.dialect] + MAX_PK, store.dialect))
    sessions = events // PER_SESSION
    at = float(await store.now()) - 2 * 86400
    chunk = 500
    started = time.monotonic()
    for first in range(0, sessions, chunk):
        after = await store.fetchval("bench_max_pk")
        await store.execute(
            "bench_seed",
            {
                "first": first,
                "count": min(chunk, sessions - first),
                "per": PER_SESSION,
                "at": at,
                "data": PAYLOAD,
                "after_pk": after,
            },
        )
    print(f"seeded {sessions * PER_SESSION:,} events in {time.monotonic() - started:.0f} s")


@dataclass
class Latencies:
    with_purge: list[float] = field(default_factory=list)
    without: list[float] = field(default_factory=list)


async def appender(
    service: DurableSessionService, phase: list[str], out: Latencies, stop: asyncio.Event, n: int
) -> int:
    session = await service.create_session(app_name="live", user_id=f"a{n}")
    count = 0
    while not stop.is_set():
        if count and count % 200 == 0:  # a fresh session now and then: no session grows huge
            session = await service.create_session(app_name="live", user_id=f"a{n}")
        began = time.perf_counter()
        await service.append_event(session, event(count))
        took = time.perf_counter() - began
        (out.with_purge if phase[0] == "with" else out.without).append(took)
        count += 1
        # A hop back to the loop: SQLite's appends may run inline and never yield.
        await asyncio.sleep(args_pause[0])
    return count


class Gated:
    """The purge's store: each statement waits for the gate (open in the windows *with*).

    The pacer bills the time a statement held the writer, as the store measured
    it (``fetch_held``), so a statement held at the closed gate over a window
    *without* is not taken for a slow one.
    """

    def __init__(self, store: Store, gate: asyncio.Event) -> None:
        self._store = store
        self._gate = gate
        self.gate_waited = 0.0
        """Seconds statements waited at the closed gate (the pacer counts them as
        waiting for the lock: the time around a statement, less what it held)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def fetch(self, query: str, params: Any = None) -> Any:
        if not self._gate.is_set():
            began = time.perf_counter()
            await self._gate.wait()
            self.gate_waited += time.perf_counter() - began
        return await self._store.fetch(query, params)

    async def execute(self, query: str, params: Any = None) -> None:
        await self.fetch(query, params)

    async def sleep(self, seconds: float) -> None:
        """The pacer's rest, counted only while the gate is open: a rest begun at the
        end of a window *with* would otherwise go by in the window *without*, and the
        purge would hold the writer more than ``duty`` of the open windows."""
        left = seconds
        while left > 0:
            if not self._gate.is_set():
                await self._gate.wait()
            began = time.perf_counter()
            await asyncio.sleep(min(left, 0.01))
            left -= time.perf_counter() - began


class Traced(Pacer):
    """A pacer that keeps what each statement held the writer (the store's figure)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.holds: list[float] = []

    async def rest(
        self, began: float, full: bool, held: float | None = None, upkeep: float = 0.0
    ) -> None:
        if held is not None:
            self.holds.append(held)
        await super().rest(began, full, held, upkeep)


def bench_pacer(
    dialect: str, policy: RetentionPolicy, args: argparse.Namespace, sleep: Any
) -> Traced:
    """The dialect's pacer (:func:`~durable_adk.lifecycle.pacing.pace_for`), or the
    ``--target``, ``--min-batch`` and ``--checkpoint-rows`` given."""
    target, min_batch = pace_for(dialect)
    return Traced(
        policy.duty,
        policy.batch,
        target=target if args.target is None else args.target,
        min_batch=min_batch if args.min_batch is None else args.min_batch,
        sleep=sleep,
        checkpoint_rows=args.checkpoint_rows,
    )


async def cost_to_appends(url: str, args: argparse.Namespace) -> dict[str, Any]:
    async with open_store(url) as store, open_store(url) as purge_store:
        await seed(store, args.events)
        service = DurableSessionService(store)
        out = Latencies()
        phase = ["without"]
        stop = asyncio.Event()
        gate = asyncio.Event()
        tasks = [
            asyncio.create_task(appender(service, phase, out, stop, n))
            for n in range(args.appenders)
        ]
        policy = RetentionPolicy(
            done=86400, failed=86400, cancelled=86400, parked=86400, abandoned=86400,
            batch=args.batch, duty=args.duty,
        )  # fmt: skip
        await asyncio.sleep(args.window)  # warm up, not counted
        out.without.clear()
        # Another worker's purge: a store (connections) of its own, gated between statements.
        gated = Gated(purge_store, gate)
        pacer = bench_pacer(store.dialect, policy, args, gated.sleep)
        target, min_batch = pacer.target, pacer.min_batch
        purging = asyncio.create_task(purge(gated, "old", policy, pacer=pacer))  # type: ignore[arg-type]
        started = time.monotonic()
        with_s = 0.0
        windows = 0
        while not purging.done():
            phase[0] = "without"
            gate.clear()
            await asyncio.sleep(args.window)
            phase[0] = "with"
            gate.set()
            began = time.monotonic()
            await asyncio.wait({purging}, timeout=args.window)
            with_s += time.monotonic() - began
            windows += 1
        gate.set()
        report = await purging
        waited = gated.gate_waited
        holds = pacer.holds or [0.0]
        phase[0] = "without"
        await asyncio.sleep(args.window)
        stop.set()
        appended = sum(await asyncio.gather(*tasks))
        left = await store.fetchrow("bench_size")
        assert left is not None
        return {
            "events": args.events,
            "batch": args.batch,
            "duty": args.duty,
            "target": target,
            "min_batch": min_batch,
            "checkpoint_rows": args.checkpoint_rows,
            "last_batch": pacer.batch,
            "held_share": round(pacer.busy / max(with_s, 1e-9), 3),
            "waited_share": round(max(0.0, pacer.waited - waited) / max(with_s, 1e-9), 3),
            "hold_ms_p50_p90_p99": [round(percentile(holds, q) * 1000, 3) for q in (50, 90, 99)],
            "rows_per_s": round(report.rows / max(with_s, 1e-9)),
            "windows": windows,
            "purging_s": round(with_s, 1),
            "wall_s": round(time.monotonic() - started, 1),
            "appended": appended,
            "p99_without_ms": round(percentile(out.without, 99) * 1000, 2),
            "p99_with_ms": round(percentile(out.with_purge, 99) * 1000, 2),
            "p99_ratio": round(percentile(out.with_purge, 99) / percentile(out.without, 99), 2),
            "p50_without_ms": round(percentile(out.without, 50) * 1000, 2),
            "p50_with_ms": round(percentile(out.with_purge, 50) * 1000, 2),
            "n_without": len(out.without),
            "n_with": len(out.with_purge),
            "events_purged": report.tables["events"].rows,
            "rows_purged": report.rows,
            "events_left": int(left["events"]),
        }


async def bounded(url: str, args: argparse.Namespace) -> dict[str, Any]:
    async with open_store(url) as store:
        store.add_queries(parse_queries(SEED_SQL[store.dialect] + MAX_PK, store.dialect))
        service = DurableSessionService(store)
        policy = RetentionPolicy(idle_sessions=args.idle, batch=args.batch, duty=args.duty)
        appended = [0]
        stop = asyncio.Event()

        async def load(n: int) -> None:
            count = 0
            while not stop.is_set():
                session = await service.create_session(app_name="steady", user_id=f"b{n}")
                for _ in range(20):
                    await service.append_event(session, event(count))
                    count += 1
                    appended[0] += 1
                    await asyncio.sleep(args_pause[0])

        # One pacer for every pass, as a worker's Background keeps (its learned batch).
        pacer = bench_pacer(store.dialect, policy, args, asyncio.sleep)

        async def purge_loop() -> None:
            while not stop.is_set():
                await purge(store, "steady", policy, must_exist=False, pacer=pacer)
                await asyncio.sleep(1.0)

        tasks = [asyncio.create_task(load(n)) for n in range(args.appenders)]
        tasks.append(asyncio.create_task(purge_loop()))
        samples: list[tuple[float, int, int]] = []
        started = time.monotonic()
        while time.monotonic() - started < args.steady:
            await asyncio.sleep(args.steady / 12)
            row = await store.fetchrow("bench_size")
            assert row is not None
            samples.append((time.monotonic() - started, int(row["bytes"]), int(row["events"])))
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        third = len(samples) // 3
        middle = samples[third : 2 * third]
        last = samples[2 * third :]

        def mean(values: list[int]) -> float:
            return sum(values) / len(values)

        return {
            "duty": args.duty,
            "appends_per_s": round(appended[0] / (time.monotonic() - started)),
            "samples": samples,
            "size_growth": mean([s[1] for s in last]) / mean([s[1] for s in middle]),
            "events_growth": mean([s[2] for s in last]) / mean([s[2] for s in middle]),
        }


async def main(args: argparse.Namespace) -> None:
    for backend in args.backend:
        with tempfile.TemporaryDirectory(prefix="bench-retention-") as tmp:
            cluster = None
            if backend == "postgresql":
                cluster = TempPostgres()
                cluster.start()
                url = cluster.create_database("bench")
                url2 = cluster.create_database("bench2")
            else:
                url = f"sqlite:///{tmp}/bench.db"
                url2 = f"sqlite:///{tmp}/bench2.db"
            try:
                if not args.skip_cost:
                    cost = await cost_to_appends(url, args)
                    print(backend, "cost to appends:", cost, flush=True)
                if not args.skip_steady:
                    size = await bounded(url2, args)
                    print(backend, "bounded:", size, flush=True)
            finally:
                if cluster is not None:
                    cluster.stop()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--duty", type=float, default=DEFAULT_DUTY)
    parser.add_argument("--target", type=float, default=None, help="default: the dialect's")
    parser.add_argument("--min-batch", type=int, default=None, help="default: the dialect's")
    parser.add_argument("--checkpoint-rows", type=int, default=CHECKPOINT_ROWS)
    parser.add_argument("--skip-steady", action="store_true")
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--appenders", type=int, default=4)
    parser.add_argument("--window", type=float, default=2.0)
    parser.add_argument("--idle", type=float, default=3.0)
    parser.add_argument("--steady", type=float, default=60.0)
    parser.add_argument("--pause", type=float, default=0.002)
    parser.add_argument(
        "--backend", action="append", choices=("sqlite", "postgresql"), default=None
    )
    args = parser.parse_args(argv)
    args.backend = args.backend or ["sqlite", "postgresql"]
    args_pause[0] = args.pause
    return args


if __name__ == "__main__":
    asyncio.run(main(parse()))
