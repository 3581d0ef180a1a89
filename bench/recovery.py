"""Recovery throughput: 1,000 orphaned runs recovered by one worker process, then by two.

Run from the repository root::

    .venv/bin/python -m bench.recovery            # full run (~3 minutes)
    .venv/bin/python -m bench.recovery --quick    # 500 orphans, 2 rounds (~1.5 minutes)
    .venv/bin/python -m bench.recovery --write    # also rewrite its BENCHMARKS.md section

On PostgreSQL (a private cluster started with TempPostgres, fsync on):

1. A *fixture* database gets 1,000 orphaned runs. Each is a real DurableRunner
   run of the app in ``bench/recovery_worker.py``, started by a worker
   ``dead-worker`` that "dies" (raises a BaseException nothing handles) at
   one of three points, so the run stays RUNNING holding the events stored so
   far: in the first model call (MODEL_INFLIGHT if the user's message is
   stored by then, NOT_STARTED if it is written with a later unit), inside the
   idempotent tool (user message + the model's
   function call: TOOL_UNANSWERED), or in the second model call (the call
   answered: MODEL_INFLIGHT). Mix 30 / 50 / 20 %. Every lease is then moved an
   hour back with ``RunLedger.backdate``.
2. Each round copies the fixture twice (``CREATE DATABASE ... TEMPLATE``) and
   recovers one copy with ONE worker process and the other with TWO
   (``python -m bench.recovery_worker URL WORKER_ID``), in rotated order. A
   worker warms up, waits for the start signal, then loops
   ``Sweeper(runner, batch=20).recover_once()`` until a pass finds nothing.
3. Each recovered copy is checked: every run DONE, with exactly one recovery
   claim (epoch 2 and attempts 2: the dead worker's claim, then ours), each
   invocation's final model text exactly once in its session, each function
   call answered exactly once, no event stamped with another epoch, no dead
   letter.

4. In the same rounds, more processes measure what bounds a recovery
   (``bench/recovery_worker.py`` modes): ADK's own Runner with an
   InMemorySessionService finishing the same remaining work (``--mode adk``:
   each orphan's stored events copied into an in-memory session, then
   ``run_async`` with the run's stored message, under its invocation id when
   the session holds events of it, as the re-drive calls it); a worker whose
   only cost is its round trips (``--mode floor``: per run, the writing and
   reading statements a recovery makes, counted before the rounds, as bare
   single-row autocommit INSERTs and SELECTs); ADK's Runner making those
   statements inline, each where a recovery makes its unit (``--mode inline``:
   the CPU target's bound, a runner whose only cost beyond ADK's is its round
   trips); all the same number of runs at a time as the sweeper. And one run
   at a time: a recovery with each step's CPU read around it (``--mode
   steps``: claim, session read, classification, drive) beside ADK finishing
   the same orphans (``--mode adk``). CPU is measured as the workers measure
   it.

Throughput = runs / (last worker's end - first worker's start). Targets: at
least 100 runs/s per worker; two workers at least 1.7x one worker; one
worker's CPU per recovered run at most 1.3x ADK's in-memory Runner's for the
same remaining work (each ratio taken per round, one configuration right
after the other, and the median over rounds reported). CPU use of the
workers, of the PostgreSQL server (postmaster, its live children, and the
reaped ones through the postmaster's cutime/cstime) and of the whole machine
(/proc/stat) is read for each configuration, to tell whether a miss is the 2
cores running out.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    ROOT,
    analyze_databases,
    bench_main,
    fmt_ms,
    fmt_ratio,
    machine_cpu_seconds,
    machine_note,
    md_table,
    median,
    postgres_cpu_seconds,
    profile_async,
    quiet,
    rotate,
    server_version,
    verdict,
)
from bench.recovery_worker import (
    AGENT,
    CONCURRENCY,
    CUSTOMERS,
    DIES_IN,
    STEP_NAMES,
    WorkerDied,
    final_text,
    make_runner,
    request_text,
)
from bench.runner import StoreCalls
from durable_adk.adk.loops.recovery import Sweeper
from durable_adk.adk.services.sessions import RUN_METADATA_KEY, DurableSessionService
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.testing.pg_cluster import TempPostgres

PER_WORKER_TARGET = 100.0  # runs/s, at least
TWO_WORKERS_TARGET = 1.7  # two workers' throughput over one worker's, at least
CPU_RATIO_TARGET = 1.3  # one worker's CPU per recovered run / ADK in-memory's, at most

# What a configuration's processes do (bench/recovery_worker.py modes).
RECOVER, STEPS, ADK, ADK_ONE, INLINE, BARE, ESSENTIALS, FLOOR = (
    "recover",
    "steps",
    "adk",
    "adk_one",
    "inline",
    "bare",
    "essentials",
    "floor",
)
KINDS = (RECOVER, STEPS, ADK, ADK_ONE, INLINE, BARE, ESSENTIALS, FLOOR)
MODE_ARGS: dict[str, list[str]] = {
    RECOVER: [],
    STEPS: ["--mode", "steps", "--concurrency", "1"],
    ADK: ["--mode", "adk"],
    ADK_ONE: ["--mode", "adk", "--concurrency", "1"],
    INLINE: ["--mode", "inline"],
    # The physical bound (issue 45): a bare commit where a recovery makes a unit
    # (claim, call, answer, finish), the claim reading what it needs itself.
    BARE: ["--mode", "inline", "--reads", "0"],
    # The bound and the work no durable recovery skips (issue 45): the orphan
    # classified, its events serialized, a task and a queue, a heartbeat, its end
    # classified, the tool on ADK's pool.
    ESSENTIALS: ["--mode", "essentials", "--reads", "0"],
    FLOOR: ["--mode", "floor"],
}
KIND_LABEL = {
    RECOVER: "recovery, 1 worker (`Sweeper`)",
    STEPS: "recovery, 1 worker, one run at a time, steps timed",
    ADK: "ADK Runner + InMemorySessionService, same remaining work",
    ADK_ONE: "ADK Runner + InMemorySessionService, same work, one at a time",
    INLINE: "ADK Runner + InMemorySessionService making the round trips at their points",
    BARE: "ADK Runner + InMemorySessionService, a bare commit at each unit's point (no reads)",
    ESSENTIALS: (
        "the same, with a durable recovery's essential work (classified, serialized, a task "
        "and a queue, a heartbeat, the end classified, the tool on the pool)"
    ),
    FLOOR: "round trips only (bare INSERTs and SELECTs)",
}
_READ_PREFIXES = ("load_", "get_", "list_", "find_")
_READS = frozenset({"db_now", "run_get", "run_list", "sweeper_seen"})


def is_read(query: str) -> bool:
    """Whether a named query only reads (the floor makes it a SELECT, not an INSERT)."""
    return query.startswith(_READ_PREFIXES) or query in _READS


log = logging.getLogger("bench.recovery")


@dataclass(frozen=True)
class Params:
    """How much to measure."""

    orphans: int
    rounds: int
    batch: int
    profile_passes: int

    @classmethod
    def for_mode(cls, quick: bool) -> Params:
        if quick:
            return cls(orphans=500, rounds=2, batch=20, profile_passes=3)
        return cls(orphans=1_000, rounds=4, batch=20, profile_passes=5)


def dies_in(index: int) -> str:
    """Where the dead worker died in orphan ``index``: 30 / 50 / 20 %."""
    slot = index % 10
    if slot < 3:
        return DIES_IN[0]  # first model call: MODEL_INFLIGHT or NOT_STARTED (see above)
    if slot < 8:
        return DIES_IN[1]  # the tool: TOOL_UNANSWERED
    return DIES_IN[2]  # second model call: MODEL_INFLIGHT, call answered


def order_id(index: int) -> str:
    return f"A{index:05d}"


# ------------------------------------------------------------------- fixture


def dying_is_quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's exception handler: silent on the fixture's "dead" workers only.

    The drive task of a worker that "died" holds its WorkerDied unretrieved (a
    dead process would not report it either); the loop reports it whenever the
    task is collected. Anything else goes to the default handler.
    """
    if not isinstance(context.get("exception"), WorkerDied):
        loop.default_exception_handler(context)


async def build_fixture(url: str, orphans: int) -> dict[str, float]:
    """Leaves ``orphans`` RUNNING runs with expired leases; returns timings."""
    t0 = time.perf_counter()
    async with open_store(url) as store:
        runners = {where: make_runner(store, "dead-worker", where) for where in DIES_IN}
        for i in range(orphans):
            order = order_id(i)
            try:
                async for _ in runners[dies_in(i)].run(
                    user_id=f"{CUSTOMERS}{i % 100:03d}",
                    session_id=f"order-{order}",
                    message=request_text(order),
                ):
                    pass
            except WorkerDied:
                continue
            raise RuntimeError(f"orphan {i}: the dying worker finished its run")
        built = time.perf_counter() - t0
        ledger = RunLedger(store)
        stuck = await ledger.list_runs(status=RunStatus.RUNNING, limit=orphans + 100)
        if len(stuck) != orphans:
            raise RuntimeError(f"expected {orphans} RUNNING runs, found {len(stuck)}")
        for run in stuck:
            await ledger.backdate(run.run_id, 3600)
    return {"build": built, "total": time.perf_counter() - t0}


# ----------------------------------------------------------------------- CPU


@dataclass
class CpuSnapshot:
    at: float
    server: float
    machine: float
    steal: float

    @classmethod
    def take(cls, pg: TempPostgres) -> CpuSnapshot:
        busy, steal = machine_cpu_seconds()
        return cls(time.perf_counter(), postgres_cpu_seconds(pg.data_dir), busy, steal)


# ------------------------------------------------------------------ recovery


@dataclass
class Verification:
    runs: int = 0
    done: int = 0
    one_claim: int = 0
    final_once: int = 0
    calls_answered_once: int = 0
    foreign_epoch_events: int = 0
    dead_letters: int = 0
    owners: Counter[str] = field(default_factory=Counter)

    def ok(self, expected: int, workers: Sequence[str]) -> bool:
        return (
            self.runs == expected
            and self.done == expected
            and self.one_claim == expected
            and self.final_once == expected
            and self.calls_answered_once == expected
            and self.foreign_epoch_events == 0
            and self.dead_letters == 0
            and set(self.owners) <= set(workers)
        )


async def verify(url: str) -> Verification:
    """Checks that every orphan was recovered exactly once (see the module docstring)."""
    v = Verification()
    async with open_store(url) as store:
        ledger = RunLedger(store)
        sessions = DurableSessionService(store, cache_sessions=0)
        runs = [r for r in await ledger.list_runs(limit=100_000) if r.user_id.startswith(CUSTOMERS)]
        v.runs = len(runs)
        v.dead_letters = len(await ledger.dead_letters(limit=100_000))
        for run in runs:
            v.done += run.status is RunStatus.DONE
            v.one_claim += run.epoch == 2 and run.attempts == 2
            v.owners[run.owner or "?"] += 1
            session = await sessions.get_session(
                app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
            )
            events = session.events if session else []
            answer = final_text(run.session_id.removeprefix("order-"))
            finals = sum(
                1
                for e in events
                if e.author == AGENT
                and e.content
                and any(part.text == answer for part in e.content.parts or ())
            )
            v.final_once += finals == 1
            calls = Counter(c.id for e in events for c in e.get_function_calls())
            answers = Counter(r.id for e in events for r in e.get_function_responses())
            v.calls_answered_once += bool(calls) and all(
                n == 1 and answers[call_id] == 1 for call_id, n in calls.items()
            )
            for e in events:
                stamp = (e.custom_metadata or {}).get(RUN_METADATA_KEY) or {}
                if stamp.get("epoch") not in (1, 2):
                    v.foreign_epoch_events += 1
    return v


@dataclass
class ConfigRun:
    workers: int
    round_no: int
    reports: list[dict[str, Any]]
    interval: float  # parent's clock: start signal to the last report
    server_cpu: float
    machine_cpu: float
    steal: float
    verification: Verification | None  # None: not a recovery (ADK, ADK_ONE, INLINE, FLOOR)
    kind: str = RECOVER

    @property
    def cpu_per_run(self) -> float:
        """The workers' CPU seconds per run."""
        return self.worker_cpu / self.recovered

    @property
    def checked(self) -> int:
        """Runs a baseline or floor process reports checked (RECOVER: see verification)."""
        return sum(int(r.get("checked", 0)) for r in self.reports)

    @property
    def recovered(self) -> int:
        return sum(int(r["recovered"]) for r in self.reports)

    @property
    def wall(self) -> float:
        return float(max(r["end"] for r in self.reports) - min(r["start"] for r in self.reports))

    @property
    def throughput(self) -> float:
        return self.recovered / self.wall

    @property
    def per_worker(self) -> list[float]:
        return [r["recovered"] / (r["end"] - r["start"]) for r in self.reports]

    @property
    def worker_cpu(self) -> float:
        return sum(float(r["cpu"]) for r in self.reports)

    @property
    def others_cpu(self) -> float:
        """CPU seconds the machine spent on anything but our workers and the server."""
        return max(0.0, self.machine_cpu - self.worker_cpu - self.server_cpu)

    @property
    def outcomes(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for r in self.reports:
            total.update(r["outcomes"])
        return total


async def _readline(proc: asyncio.subprocess.Process, limit_s: float, what: str) -> bytes:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), limit_s)
    if not line:
        raise RuntimeError(f"worker {proc.pid} exited before {what}")
    return line


async def _send(proc: asyncio.subprocess.Process, text: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(text.encode() + b"\n")
    await proc.stdin.drain()


async def run_config(
    pg: TempPostgres,
    template: str,
    name: str,
    workers: int,
    round_no: int,
    p: Params,
    logs: Path,
    kind: str = RECOVER,
    extra: Sequence[str] = (),
) -> ConfigRun:
    """Recovers a fresh copy of the fixture with ``workers`` processes; verifies it.

    ``kind`` (one of :data:`KINDS`) says what the processes do: ADK and
    ADK_ONE run the in-memory baseline on a copy of the fixture, FLOOR the round
    trips alone on an empty database (``extra``: its arguments).
    """
    url = pg.create_database(name, template=None if kind == FLOOR else template)
    ids = [f"{name}-w{k + 1}" for k in range(workers)]
    mode = [*MODE_ARGS[kind], *extra]
    procs: list[asyncio.subprocess.Process] = []
    try:
        for wid in ids:
            with (logs / f"{wid}.stderr").open("wb") as err:
                procs.append(
                    await asyncio.create_subprocess_exec(
                        sys.executable,
                        "-m",
                        "bench.recovery_worker",
                        url,
                        wid,
                        "--batch",
                        str(p.batch),
                        *mode,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=err,
                        cwd=ROOT,
                    )
                )
        for proc in procs:
            line = await _readline(proc, 300, "ready")
            if line.strip() != b"ready":
                raise RuntimeError(f"worker {proc.pid} said {line!r} instead of ready")
        before = CpuSnapshot.take(pg)
        for proc in procs:
            await _send(proc, "go")
        reports = [json.loads(await _readline(proc, 1200, "its report")) for proc in procs]
        after = CpuSnapshot.take(pg)
        for proc in procs:
            await _send(proc, "exit")
        for proc in procs:
            await asyncio.wait_for(proc.wait(), 60)
    except BaseException:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()  # only the workers this function started, by pid
        tails = [(logs / f"{wid}.stderr").read_text()[-2000:] for wid in ids]
        print("worker stderr tails:\n" + "\n---\n".join(tails), flush=True)
        raise
    verification = await verify(url) if kind in (RECOVER, STEPS) else None
    pg.drop_database(name)
    return ConfigRun(
        workers=workers,
        round_no=round_no,
        reports=reports,
        interval=after.at - before.at,
        server_cpu=after.server - before.server,
        machine_cpu=after.machine - before.machine,
        steal=after.steal - before.steal,
        verification=verification,
        kind=kind,
    )


@dataclass
class RoundTrips:
    """Store round trips per recovered run, by named query (one run at a time)."""

    table: str
    per_run: float
    writes: float
    reads: float


async def round_trips(pg: TempPostgres, template: str, p: Params) -> RoundTrips:
    """In-process: the store's named queries per recovered run, over a few passes."""
    url = pg.create_database("rec_calls", template=template)
    async with open_store(url) as store:
        runner = make_runner(store, "counter")
        # One run at a time, so a query's time is its own, not its neighbours' too.
        sweeper = Sweeper(runner, batch=p.batch, concurrency=1)
        await sweeper.recover_once()  # warm-up
        with StoreCalls(store) as calls:
            t0 = time.perf_counter()
            counted = 0
            for _ in range(p.profile_passes):
                counted += len(await sweeper.recover_once())
            wall = time.perf_counter() - t0
    pg.drop_database("rec_calls")
    runs = max(counted, 1)
    reads = sum(n for q, n in calls.calls.items() if is_read(q)) / runs
    total = sum(calls.calls.values()) / runs
    return RoundTrips(calls.table(counted, wall), total, total - reads, reads)


async def profile_recovery(pg: TempPostgres, template: str, p: Params) -> str:
    """In-process: a cProfile of a few passes, one run at a time."""
    url = pg.create_database("rec_profile", template=template)
    async with open_store(url) as store:
        runner = make_runner(store, "profiler")
        sweeper = Sweeper(runner, batch=p.batch, concurrency=1)
        await sweeper.recover_once()  # warm-up

        async def passes() -> None:
            for _ in range(p.profile_passes):
                await sweeper.recover_once()

        cprofile = await profile_async(passes, top=18)
    pg.drop_database("rec_profile")
    return cprofile


def split_table(steps: Sequence[ConfigRun], adk_one: Sequence[ConfigRun]) -> tuple[str, float]:
    """CPU per recovered run by step, and ADK's for the same work, one at a time (medians).

    Returns the table and the ratio drive alone / ADK.
    """

    def step(name: str) -> float:
        return median([float(c.reports[0]["steps"].get(name, 0.0)) / c.recovered for c in steps])

    total = median([c.cpu_per_run for c in steps])
    adk = median([c.cpu_per_run for c in adk_one])
    parts = {name: step(name) for name in STEP_NAMES}
    rest = total - sum(parts.values())
    what = {
        "claim": "`claim_expired` (and the pass's `cancel_expired`): our ledger, the store",
        "session read": "the session read before classifying: a round trip and the events "
        "built from its rows (ADK's read in the drive is served from it)",
        "classify": "the classifier, on the events read",
        "drive": "`run_to_end`: ADK re-driving the invocation, plus the driver, the barrier "
        "plugin, the session service's appends and the run's finish (store round trips)",
    }
    rows = [[name, what[name], fmt_ms(parts[name])] for name in STEP_NAMES]
    rows.append(["rest", "the pass loop, tasks, span, logs, the request's parse", fmt_ms(rest)])
    rows.append(["**total**", "one worker, one run at a time", f"**{fmt_ms(total)}**"])
    rows.append(["ADK", KIND_LABEL[ADK] + ", one at a time", fmt_ms(adk)])
    drive_ratio = parts["drive"] / adk
    rows.append(
        [
            "ratios",
            "total / ADK; drive alone / ADK (what no change outside the drive goes below)",
            f"{fmt_ratio(total / adk)}; {fmt_ratio(drive_ratio)}",
        ]
    )
    return md_table(["step", "what", "process CPU per run (median over rounds)"], rows), drive_ratio


# -------------------------------------------------------------------- report


def config_table(runs: Sequence[ConfigRun], orphans: int, batch: int) -> str:
    rows = []
    for c in runs:
        ids = [str(r["worker"]) for r in c.reports]
        v = c.verification
        assert v is not None  # recoveries only
        rows.append(
            [
                c.round_no + 1,
                c.workers,
                c.recovered,
                f"{c.wall:.2f} s",
                f"{c.throughput:.0f}",
                " / ".join(f"{x:.0f}" for x in c.per_worker),
                " / ".join(str(r["recovered"]) for r in c.reports),
                " / ".join(
                    f"{r['recovered'] / max(r['passes'], 1):.0f} / {r['largest_pass']}"
                    for r in c.reports
                ),
                f"{c.worker_cpu / c.interval:.2f}",
                f"{c.server_cpu / c.interval:.2f}",
                f"{c.machine_cpu / c.interval:.2f}",
                f"{c.others_cpu / c.interval:.2f}",
                f"{c.steal / c.interval:.2f}",
                "OK" if v.ok(orphans, ids) else "FAILED",
            ]
        )
    return md_table(
        [
            "round",
            "workers",
            "runs recovered",
            "wall",
            "runs/s",
            "runs/s per worker",
            "runs per worker",
            f"runs per pass, mean / max (batch={batch})",
            "workers' CPU (cores)",
            "server CPU (cores)",
            "machine busy (cores of 2)",
            "other processes (cores)",
            "steal (cores)",
            "checks",
        ],
        rows,
    )


def verification_table(runs: Sequence[ConfigRun], orphans: int) -> str:
    rows = []
    for c in runs:
        v = c.verification
        assert v is not None  # recoveries only
        rows.append(
            [
                f"round {c.round_no + 1}, {c.workers} worker{'s' if c.workers > 1 else ''}",
                f"{v.runs}",
                f"{v.done}",
                f"{v.one_claim}",
                f"{v.final_once}",
                f"{v.calls_answered_once}",
                f"{v.foreign_epoch_events}",
                f"{v.dead_letters}",
                ", ".join(f"{k}: {n}" for k, n in sorted(v.owners.items())),
            ]
        )
    return md_table(
        [
            "configuration",
            "orphan runs",
            "DONE",
            "one recovery claim (epoch 2, attempts 2)",
            "final text exactly once",
            "every call answered exactly once",
            "events with another epoch",
            "dead letters",
            "runs per owner",
        ],
        rows,
    )


def bounds_table(runs: Sequence[ConfigRun], orphans: int) -> str:
    """One worker's recovery beside the baseline and the floor, round by round."""
    rows = []
    for c in sorted(runs, key=lambda c: (c.round_no, KINDS.index(c.kind))):
        if c.verification is not None:
            ids = [str(r["worker"]) for r in c.reports]
            assert c.verification is not None
            ok = c.verification.ok(orphans, ids)
        else:
            ok = c.checked == orphans
        rows.append(
            [
                c.round_no + 1,
                KIND_LABEL[c.kind],
                c.recovered,
                f"{c.wall:.2f} s",
                f"{c.throughput:.0f}",
                fmt_ms(c.cpu_per_run),
                fmt_ms(c.server_cpu / c.recovered),
                f"{c.worker_cpu / c.interval:.2f}",
                f"{c.machine_cpu / c.interval:.2f}",
                f"{c.others_cpu / c.interval:.2f}",
                "OK" if ok else "FAILED",
            ]
        )
    return md_table(
        [
            "round",
            "process",
            "runs",
            "wall",
            "runs/s",
            "process CPU per run",
            "server CPU per run",
            "process CPU (cores)",
            "machine busy (cores of 2)",
            "other processes (cores)",
            "checks",
        ],
        rows,
    )


def cpu_per_run(runs: Sequence[ConfigRun], workers: int) -> tuple[float, float]:
    """Median (worker CPU, server CPU) per recovered run, seconds."""
    mine = [c for c in runs if c.workers == workers and c.kind == RECOVER]
    return (
        median([c.worker_cpu / c.recovered for c in mine]),
        median([c.server_cpu / c.recovered for c in mine]),
    )


# ==================================================================== driver


async def run(quick: bool = False) -> str:
    """Runs the bench; prints its tables; returns the Markdown section."""
    p = Params.for_mode(quick)
    started = time.perf_counter()
    asyncio.get_running_loop().set_exception_handler(dying_is_quiet)
    results: list[ConfigRun] = []
    with tempfile.TemporaryDirectory(prefix="dadk-bench-recovery-") as tmp, TempPostgres() as pg:
        logs = Path(tmp)
        pg_version = await server_version(pg.admin_url)
        fixture_url = pg.create_database("rec_fixture")
        timings = await build_fixture(fixture_url, p.orphans)
        analyze_databases(pg)  # the copies keep its statistics, as autovacuum would have made
        print(
            f"  fixture: {p.orphans} orphans built in {timings['build']:.0f} s "
            f"(+ backdated: {timings['total']:.0f} s)",
            flush=True,
        )
        trips = await round_trips(pg, "rec_fixture", p)
        print(
            f"  round trips per recovered run: {trips.per_run:.1f} ({trips.writes:.1f} "
            f"writing, {trips.reads:.1f} reading)",
            flush=True,
        )
        floor_args = [
            "--runs",
            str(p.orphans),
            "--writes",
            f"{trips.writes:.4f}",
            "--reads",
            f"{trips.reads:.4f}",
        ]
        configs = [
            (RECOVER, 1),
            (RECOVER, 2),
            (ADK, 1),
            (INLINE, 1),
            (BARE, 1),
            (ESSENTIALS, 1),
            (FLOOR, 1),
            (STEPS, 1),
            (ADK_ONE, 1),
        ]
        extra = {FLOOR: floor_args, INLINE: ["--reads", f"{trips.reads:.4f}"]}
        for rnd in range(p.rounds):
            for kind, workers in rotate(configs, rnd):
                name = f"rec_r{rnd}_{workers}w" if kind == RECOVER else f"rec_r{rnd}_{kind}"
                res = await run_config(
                    pg,
                    "rec_fixture",
                    name,
                    workers,
                    rnd,
                    p,
                    logs,
                    kind,
                    extra.get(kind, ()),
                )
                results.append(res)
                if res.verification is not None:
                    ids = [str(r["worker"]) for r in res.reports]
                    ok = res.verification.ok(p.orphans, ids)
                else:
                    ok = res.checked == p.orphans
                what = f"{workers} worker(s)" if kind == RECOVER else KIND_LABEL[kind]
                print(
                    f"  round {rnd + 1}: {what}: {res.recovered} runs in "
                    f"{res.wall:.2f} s = {res.throughput:.0f} runs/s "
                    f"(per worker {', '.join(f'{x:.0f}' for x in res.per_worker)}), "
                    f"{fmt_ms(res.cpu_per_run)} CPU per run; checks {'OK' if ok else 'FAILED'}",
                    flush=True,
                )
        cprofile = await profile_recovery(pg, "rec_fixture", p)
    elapsed = time.perf_counter() - started

    recoveries = [c for c in results if c.kind == RECOVER]
    one = [c for c in recoveries if c.workers == 1]
    two = [c for c in recoveries if c.workers == 2]
    adk = {c.round_no: c for c in results if c.kind == ADK}
    floor = {c.round_no: c for c in results if c.kind == FLOOR}
    inline = {c.round_no: c for c in results if c.kind == INLINE}
    bare = {c.round_no: c for c in results if c.kind == BARE}
    essentials = {c.round_no: c for c in results if c.kind == ESSENTIALS}
    ratios = [b.throughput / a.throughput for a, b in zip(one, two, strict=True)]
    speedup = median(ratios)
    one_rate = median([c.throughput for c in one])
    two_per_worker = median([median(c.per_worker) for c in two])
    all_ok = all(
        c.checked == p.orphans
        if c.verification is None
        else c.verification.ok(p.orphans, [str(r["worker"]) for r in c.reports])
        for c in results
    )
    # One worker's CPU per run against ADK's for the same work, per round.
    cpu_ratio = median([c.cpu_per_run / adk[c.round_no].cpu_per_run for c in one])
    # A worker whose CPU is ADK's plus its round trips' (the floor) and nothing else.
    apart_bound = median(
        [(adk[r].cpu_per_run + floor[r].cpu_per_run) / adk[r].cpu_per_run for r in adk]
    )
    # The same worker measured as one: ADK's Runner making those round trips inline.
    ratio_bound = median([inline[r].cpu_per_run / adk[r].cpu_per_run for r in adk])
    # The physical bound (issue 45): a bare commit at each unit's point, no separate read.
    bare_bound = median([bare[r].cpu_per_run / adk[r].cpu_per_run for r in adk])
    vs_bare = median([c.cpu_per_run / bare[c.round_no].cpu_per_run for c in one])
    essential_bound = median([essentials[r].cpu_per_run / adk[r].cpu_per_run for r in adk])
    essential_vs_bare = median([essentials[r].cpu_per_run / bare[r].cpu_per_run for r in adk])
    inline_trips = {
        what: median(
            [sum(x["statements"][what] for x in c.reports) / c.recovered for c in inline.values()]
        )
        for what in ("writes", "reads")
    }
    adk_cpu = median([c.cpu_per_run for c in adk.values()])
    floor_cpu = median([c.cpu_per_run for c in floor.values()])
    adk_rate = median([c.throughput for c in adk.values()])
    floor_rate = median([c.throughput for c in floor.values()])
    core_bound = 1 / (adk_cpu + floor_cpu)  # ADK's work and the round trips on a whole core
    steps_table, drive_ratio = split_table(
        [c for c in results if c.kind == STEPS], [c for c in results if c.kind == ADK_ONE]
    )
    v_one = verdict(one_rate, PER_WORKER_TARGET, at_least=True)
    v_two = verdict(two_per_worker, PER_WORKER_TARGET, at_least=True)
    v_speedup = verdict(speedup, TWO_WORKERS_TARGET, at_least=True)
    v_cpu = verdict(cpu_ratio, CPU_RATIO_TARGET, at_least=False)
    if v_cpu == "MISS" and bare_bound > CPU_RATIO_TARGET:
        v_cpu = "MISS, forbidden"  # by the physical bound (issue 45), in the same rounds
    elif v_cpu == "MISS" and essential_bound > CPU_RATIO_TARGET:
        # By the bound and the work no durable recovery skips, in the same rounds.
        v_cpu = "MISS, forbidden with the essential work"
    capacity = median([c.recovered / c.worker_cpu for c in one])
    others = median([c.others_cpu / c.interval for c in results])
    w1_cpu, s1_cpu = cpu_per_run(results, 1)
    w2_cpu, s2_cpu = cpu_per_run(results, 2)
    cores = os.cpu_count() or 2
    cpu_bound = cores / (w2_cpu + s2_cpu)  # runs/s if every core did nothing but this
    if v_speedup == "MISS" and cpu_bound / one_rate < TWO_WORKERS_TARGET:
        v_speedup = "MISS, forbidden"  # the machine's cores cannot give two workers more
    headline = [
        (
            "1 worker: runs/s",
            f"{one_rate:.0f}",
            ">= 100",
            v_one,
            f"round trips only: {floor_rate:.0f} runs/s; ADK's work + those round trips on "
            f"a whole core: {core_bound:.0f} runs/s; ours on a whole core: {capacity:.0f}",
        ),
        (
            "1 worker: runs per CPU-second of the worker (its rate with a whole core, "
            "not counting waits)",
            f"{capacity:.0f}",
            "",
            "(no target)",
            f"ADK in-memory: {1 / adk_cpu:.0f}",
        ),
        (
            "1 worker: worker CPU per recovered run / ADK in-memory Runner's for the same "
            "remaining work",
            f"{fmt_ratio(cpu_ratio)} ({fmt_ms(w1_cpu)} / {fmt_ms(adk_cpu)})",
            f"<= {CPU_RATIO_TARGET}x",
            v_cpu,
            f"physical bound, ADK with a bare commit at each unit's point / ADK: "
            f"{fmt_ratio(bare_bound)}, ours / it {fmt_ratio(vs_bare)}; "
            f"with a durable recovery's essential work / ADK: {fmt_ratio(essential_bound)}, "
            f"/ the physical bound {fmt_ratio(essential_vs_bare)}; "
            f"ADK making the round trips at their points / ADK: {fmt_ratio(ratio_bound)} "
            f"(added apart: {fmt_ratio(apart_bound)}); profile, one at a time: drive alone "
            f"/ ADK {fmt_ratio(drive_ratio)}",
        ),
        ("2 workers: runs/s per worker", f"{two_per_worker:.0f}", ">= 100", v_two, ""),
        (
            "2 workers / 1 worker (throughput)",
            fmt_ratio(speedup),
            ">= 1.7x",
            v_speedup,
            f"{cores} cores / total CPU per run: {fmt_ratio(cpu_bound / one_rate)}",
        ),
        (
            "no run driven twice (all checks, every configuration; the baselines finished "
            "every run once)",
            "yes" if all_ok else "NO",
            "yes",
            "PASS" if all_ok else "MISS",
            "",
        ),
    ]
    head_table = md_table(
        ["figure", "measured (median over rounds)", "target", "verdict", "bound (same run)"],
        headline,
    )
    runs_table = config_table(recoveries, p.orphans, p.batch)
    checks_table = verification_table(recoveries, p.orphans)
    base_table = bounds_table([c for c in results if c.workers == 1], p.orphans)
    outcomes = Counter[str]()
    for c in one[:1]:
        outcomes = c.outcomes
    one_worker_cores = median([c.worker_cpu / c.interval for c in one])
    one_busy = median([c.machine_cpu / c.interval for c in one])
    two_busy = median([c.machine_cpu / c.interval for c in two])
    cpu_rows = [
        [
            "1",
            fmt_ms(w1_cpu),
            fmt_ms(s1_cpu),
            fmt_ms(w1_cpu + s1_cpu),
            f"{one_busy:.2f}",
        ],
        [
            "2",
            fmt_ms(w2_cpu),
            fmt_ms(s2_cpu),
            fmt_ms(w2_cpu + s2_cpu),
            f"{two_busy:.2f}",
        ],
    ]
    cpu_table = md_table(
        [
            "workers",
            "workers' CPU per run",
            "server CPU per run",
            "total CPU per run",
            "machine busy (cores of 2)",
        ],
        cpu_rows,
    )
    print(
        f"\n{head_table}\n\n{runs_table}\n\n{checks_table}\n\n{base_table}\n\n"
        f"{cpu_table}\n\n{steps_table}\n\n{trips.table}\n",
        flush=True,
    )
    print(f"recovery bench finished in {elapsed:.0f} s", flush=True)

    mode = "quick (`--quick`)" if quick else "full"
    out: list[str] = []
    out.append("## Recovery (`bench/recovery.py`)")
    out.append(
        f"Run: {mode}, {time.strftime('%Y-%m-%d %H:%M %Z')}, {elapsed:.0f} s. "
        f"Machine: {machine_note(f'PostgreSQL {pg_version} (TempPostgres, fsync on)')}."
    )
    out.append("### Headline")
    out.append(
        f"Other processes kept {others:.2f} of {cores} cores busy during the median "
        "configuration (last column but two of the table below): "
        + (
            "the machine was largely someone else's, so the rates below are low and the "
            "two-worker ratio compares configurations that met different loads."
            if others > 0.5
            else "the figures are mostly our own."
        )
    )
    out.append(head_table)
    out.append(f"### (b) recovering {p.orphans:,} orphaned runs with one and two worker processes")
    out.append(
        f"Fixture: {p.orphans:,} orphaned runs of the app in `bench/recovery_worker.py` (one "
        "LlmAgent, one idempotent tool, a two-step ScriptedModel whose final text names the "
        "order, so it is unique per run). Each orphan is a real DurableRunner run by a worker "
        "that dies (a BaseException nothing handles) in the first model call (30 %: "
        "MODEL_INFLIGHT if the user's message is stored by then, NOT_STARTED if the run path "
        "writes it with a later unit), in the tool (50 %: the model's "
        "function call is stored, unanswered; TOOL_UNANSWERED) or in the second model call "
        "(20 %: the call is answered; MODEL_INFLIGHT); the run stays RUNNING (epoch 1, "
        "attempts 1) and its lease is moved an hour back with `RunLedger.backdate`. Built in "
        f"{timings['total']:.0f} s. Each round copies it (`CREATE DATABASE ... TEMPLATE`) for "
        "each of its configurations, in rotated order: one copy recovered by one worker "
        "process, another by two, and the four measurements of the last two sections "
        f"({p.rounds} round{'s' if p.rounds > 1 else ''}). A worker "
        "(`python -m bench.recovery_worker URL WORKER_ID`) imports, opens its store, makes "
        "one warm-up run, waits for the start signal, then loops "
        f"`Sweeper(runner, batch={p.batch}).recover_once()` (default concurrency: 4 runs of a "
        "pass recovered side by side) until a pass claims nothing. "
        "*runs/s* = runs / (last worker's end - first worker's start); per worker = its runs "
        "/ its own span. CPU: the workers' own process time; the server's from /proc "
        "(postmaster with reaped children, plus live children: backends, WAL writer, "
        "checkpointer); *machine busy* is every process on the VM (other tenants' work "
        "included) from /proc/stat, and *other processes* what is left of it after the "
        "workers and the server: another tenant's load, which slows a configuration down "
        "for reasons that are not ours. All as cores = CPU seconds / wall seconds."
    )
    out.append(runs_table)
    out.append(
        "What recovery found and did (one configuration; every configuration recovers the "
        "same fixture): "
        + ", ".join(f"{k.replace('->', ' → ')}: {n}" for k, n in sorted(outcomes.items()))
        + "."
    )
    out.append("Checks after each configuration (from the ledger and the stored sessions):")
    out.append(checks_table)
    out.append("### What bounds the rate: CPU")
    out.append(
        "CPU per recovered run (median over rounds). A recovery is CPU work in the worker "
        "(ADK re-driving the invocation, our session service and ledger, the driver) plus "
        f"CPU in the PostgreSQL server ({trips.per_run:.1f} statements per run, most of them "
        f"commits). One worker keeps {one_worker_cores:.2f} of a core busy"
        + (
            " (it recovers several runs of a pass side by side, so one run's round trips "
            "overlap another's work): it is bound by its own CPU."
            if one_worker_cores > 0.85
            else ": the rest of the time it waits for its round trips."
        )
        + " Per worker, the rate cannot exceed 1 / worker CPU per run = 1 / "
        f"{fmt_ms(w1_cpu)} = **{1 / w1_cpu:.0f} runs/s** even with a whole core and no "
        "wait, so >= 100 runs/s per worker needs the worker's CPU per run below 10 ms. With "
        f"{cores} cores shared by the workers and the server, the machine cannot exceed "
        "cores / total CPU per run (two-worker figures) = "
        f"{cores} / {fmt_ms(w2_cpu + s2_cpu)} = **{cpu_bound:.0f} runs/s**, "
        f"**{cpu_bound / one_rate:.2f}x** the one-worker rate: that bounds the two-worker "
        "ratio on this machine, whatever the code. The faster one worker is, the lower this "
        "bound: one worker and its share of the server already use "
        f"{one_worker_cores + s1_cpu * one_rate:.2f} of the {cores} cores."
    )
    out.append(cpu_table)
    out.append("### What bounds the CPU per run: ADK's own work and the round trips")
    out.append(
        "In the same rounds, one process finishes every orphan's remaining work with ADK's "
        "own Runner and an InMemorySessionService (`--mode adk`: each orphan's stored events "
        "copied into an in-memory session before the start signal, then `run_async` with the "
        "run's stored message, under its invocation id when the session holds events of it, "
        "the call the re-drive makes, over the "
        f"same App, {CONCURRENCY} at a time; checks: the final text exactly once in each "
        "session and every call answered once), and another makes only the round trips of "
        f"a recovery (`--mode floor`: {trips.writes:.2f} single-row autocommit INSERTs of an "
        f"event-sized row and {trips.reads:.2f} single-row SELECTs per run, the writing and "
        "reading statements counted below, through an asyncpg pool opened as PostgresStore "
        f"opens it, {CONCURRENCY} runs at a time), and a third is both in one: ADK's Runner "
        "as in `--mode adk`, its in-memory session service making the same bare statements "
        "each where a recovery makes its unit and awaiting it there (`--mode inline`: before "
        "a run its claim, an INSERT, and its session read, a SELECT; then an INSERT when a "
        "function call is appended, one when its answer is, and one when the run has ended: "
        f"{inline_trips['writes']:.2f} INSERTs and {inline_trips['reads']:.2f} SELECTs per "
        f"run). CPU is each process's own, measured as the workers'. The CPU target's bound "
        "is that runner, whose only cost beyond ADK's is its round trips: "
        f"**{fmt_ratio(ratio_bound)}** of ADK's (ADK's CPU and the floor's added apart: "
        f"{fmt_ratio(apart_bound)}; a round trip awaited inside ADK's run also slows ADK's "
        "own work between them, which the sum apart does not count). The physical bound "
        "(issue 45, `--mode inline --reads 0`): the same runner making only a bare commit "
        "where a recovery makes a unit (its claim, the call, the answer, the end), no "
        f"session read (a claim could return what it needs): **{fmt_ratio(bare_bound)}** of "
        f"ADK's; one worker's recovery is {fmt_ratio(vs_bare)} of it. The rate's "
        f"bounds are the floor's rate (**{floor_rate:.0f} runs/s**: waits for the round trips "
        "alone) and 1 / (ADK's CPU + the floor's CPU) per run (**"
        f"{core_bound:.0f} runs/s** with a whole core). ADK alone, without a database, "
        f"finished {adk_rate:.0f} runs/s."
    )
    out.append(base_table)
    out.append("### Where a recovery spends its time")
    out.append(
        "In the same rounds, one worker process recovers a copy of the fixture one run at a "
        "time (`--mode steps --concurrency 1`), reading its CPU around each step of a "
        "recovery (nothing else is in flight meanwhile), and another finishes the same "
        "orphans with ADK's in-memory Runner one at a time (`--mode adk --concurrency 1`). "
        "One at a time costs more CPU per run than 4 side by side (each wait for a round "
        "trip is a trip through the event loop); the ratios are what the table is for. "
        "*drive alone / ADK* is what no change to the claim, the session read, the "
        "classification or the pass loop (recovery's own steps) can go below."
    )
    out.append(steps_table)
    out.append(
        f"In-process (no subprocess), on other copies of the fixture, one run at a time: "
        f"store round trips per recovered run over {p.profile_passes} passes of {p.batch}, "
        "by named query (counted before the rounds, so a query's time is its own; the floor "
        "makes these statements), then a cProfile of "
        f"{p.profile_passes} passes (event-loop thread only)."
    )
    out.append(trips.table)
    out.append(
        f"<details><summary>{p.profile_passes} recover_once passes of {p.batch} runs</summary>"
        f"\n\n```\n{cprofile}\n```\n\n</details>"
    )
    return "\n\n".join(out)


def collect(quick: bool = False) -> str:
    """Runs the bench (printing its tables) and returns its BENCHMARKS.md section."""
    with quiet():
        return asyncio.run(run(quick))


def main(argv: Sequence[str] | None = None) -> None:
    bench_main("recovery", collect, argv)


if __name__ == "__main__":
    main()
