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
   far: in the first model call (the session has the user's message:
   MODEL_INFLIGHT), inside the idempotent tool (user message + the model's
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

Throughput = runs / (last worker's end - first worker's start). Targets: at
least 100 runs/s per worker, and two workers at least 1.7x one worker (the
ratio is taken per round, one configuration right after the other, and the
median over rounds reported). CPU use of the workers, of the PostgreSQL
server (postmaster, its live children, and the reaped ones through the
postmaster's cutime/cstime) and of the whole machine (/proc/stat) is read for
each configuration, to tell whether a miss is the 2 cores running out.
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
    CUSTOMERS,
    DIES_IN,
    WorkerDied,
    final_text,
    make_runner,
    request_text,
)
from bench.runner import StoreCalls
from durable_adk.adk.recovery import Sweeper
from durable_adk.adk.session_service import RUN_METADATA_KEY, DurableSessionService
from durable_adk.ledger import RunLedger, RunStatus
from durable_adk.store import open_store
from durable_adk.testing.pg_cluster import TempPostgres

PER_WORKER_TARGET = 100.0  # runs/s, at least
TWO_WORKERS_TARGET = 1.7  # two workers' throughput over one worker's, at least

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
        return DIES_IN[0]  # first model call: MODEL_INFLIGHT, user message only
    if slot < 8:
        return DIES_IN[1]  # the tool: TOOL_UNANSWERED
    return DIES_IN[2]  # second model call: MODEL_INFLIGHT, call answered


def order_id(index: int) -> str:
    return f"A{index:05d}"


# ------------------------------------------------------------------- fixture


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
    verification: Verification

    @property
    def recovered(self) -> int:
        return sum(int(r["recovered"]) for r in self.reports)

    @property
    def wall(self) -> float:
        return max(r["end"] for r in self.reports) - min(r["start"] for r in self.reports)

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
    pg: TempPostgres, template: str, name: str, workers: int, round_no: int, p: Params, logs: Path
) -> ConfigRun:
    """Recovers a fresh copy of the fixture with ``workers`` processes; verifies it."""
    url = pg.create_database(name, template=template)
    ids = [f"{name}-w{k + 1}" for k in range(workers)]
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
    verification = await verify(url)
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
    )


async def profile_recovery(
    pg: TempPostgres, template: str, p: Params
) -> tuple[str, str, int, float]:
    """In-process: store round trips per recovered run, then a cProfile of a few passes."""
    url = pg.create_database("rec_profile", template=template)
    async with open_store(url) as store:
        runner = make_runner(store, "profiler")
        # One run at a time, so a query's time is its own, not its neighbours' too.
        sweeper = Sweeper(runner, batch=p.batch, concurrency=1)
        await sweeper.recover_once()  # warm-up
        with StoreCalls(store) as calls:
            t0 = time.perf_counter()
            counted = 0
            for _ in range(p.profile_passes):
                counted += len(await sweeper.recover_once())
            wall = time.perf_counter() - t0
        table = calls.table(counted, wall)
        per_run = sum(calls.calls.values()) / max(counted, 1)

        profiled: list[int] = []

        async def passes() -> None:
            for _ in range(p.profile_passes):
                profiled.append(len(await sweeper.recover_once()))

        profile = await profile_async(passes, top=18)
    pg.drop_database("rec_profile")
    return table, profile, sum(profiled), per_run


# -------------------------------------------------------------------- report


def config_table(runs: Sequence[ConfigRun], orphans: int, batch: int) -> str:
    rows = []
    for c in runs:
        ids = [str(r["worker"]) for r in c.reports]
        v = c.verification
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


def cpu_per_run(runs: Sequence[ConfigRun], workers: int) -> tuple[float, float]:
    """Median (worker CPU, server CPU) per recovered run, seconds."""
    mine = [c for c in runs if c.workers == workers]
    return (
        median([c.worker_cpu / c.recovered for c in mine]),
        median([c.server_cpu / c.recovered for c in mine]),
    )


# ==================================================================== driver


async def run(quick: bool = False) -> str:
    """Runs the bench; prints its tables; returns the Markdown section."""
    p = Params.for_mode(quick)
    started = time.perf_counter()
    results: list[ConfigRun] = []
    with tempfile.TemporaryDirectory(prefix="dadk-bench-recovery-") as tmp, TempPostgres() as pg:
        logs = Path(tmp)
        pg_version = await server_version(pg.admin_url)
        fixture_url = pg.create_database("rec_fixture")
        timings = await build_fixture(fixture_url, p.orphans)
        print(
            f"  fixture: {p.orphans} orphans built in {timings['build']:.0f} s "
            f"(+ backdated: {timings['total']:.0f} s)",
            flush=True,
        )
        for rnd in range(p.rounds):
            for workers in rotate([1, 2], rnd):
                res = await run_config(
                    pg, "rec_fixture", f"rec_r{rnd}_{workers}w", workers, rnd, p, logs
                )
                results.append(res)
                ok = res.verification.ok(p.orphans, [str(r["worker"]) for r in res.reports])
                print(
                    f"  round {rnd + 1}: {workers} worker(s): {res.recovered} runs in "
                    f"{res.wall:.2f} s = {res.throughput:.0f} runs/s "
                    f"(per worker {', '.join(f'{x:.0f}' for x in res.per_worker)}); "
                    f"checks {'OK' if ok else 'FAILED'}",
                    flush=True,
                )
        breakdown, profile, profiled, calls_per_run = await profile_recovery(pg, "rec_fixture", p)
    elapsed = time.perf_counter() - started

    one = [c for c in results if c.workers == 1]
    two = [c for c in results if c.workers == 2]
    ratios = [b.throughput / a.throughput for a, b in zip(one, two, strict=True)]
    speedup = median(ratios)
    one_rate = median([c.throughput for c in one])
    two_per_worker = median([median(c.per_worker) for c in two])
    all_ok = all(
        c.verification.ok(p.orphans, [str(r["worker"]) for r in c.reports]) for c in results
    )
    v_one = verdict(one_rate, PER_WORKER_TARGET, at_least=True)
    v_two = verdict(two_per_worker, PER_WORKER_TARGET, at_least=True)
    v_speedup = verdict(speedup, TWO_WORKERS_TARGET, at_least=True)
    capacity = median([c.recovered / c.worker_cpu for c in one])
    others = median([c.others_cpu / c.interval for c in results])
    headline = [
        ("1 worker: runs/s", f"{one_rate:.0f}", ">= 100", v_one),
        (
            "1 worker: runs per CPU-second of the worker (its rate with a whole core, "
            "not counting waits)",
            f"{capacity:.0f}",
            "",
            "(no target)",
        ),
        ("2 workers: runs/s per worker", f"{two_per_worker:.0f}", ">= 100", v_two),
        ("2 workers / 1 worker (throughput)", fmt_ratio(speedup), ">= 1.7x", v_speedup),
        (
            "no run driven twice (all checks, every configuration)",
            "yes" if all_ok else "NO",
            "yes",
            "PASS" if all_ok else "MISS",
        ),
    ]
    head_table = md_table(
        ["figure", "measured (median over rounds)", "target", "verdict"], headline
    )
    runs_table = config_table(results, p.orphans, p.batch)
    checks_table = verification_table(results, p.orphans)
    outcomes = Counter[str]()
    for c in one[:1]:
        outcomes = c.outcomes
    w1_cpu, s1_cpu = cpu_per_run(results, 1)
    w2_cpu, s2_cpu = cpu_per_run(results, 2)
    cores = os.cpu_count() or 2
    cpu_bound = cores / (w2_cpu + s2_cpu)  # runs/s if every core did nothing but this
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
        f"\n{head_table}\n\n{runs_table}\n\n{checks_table}\n\n{cpu_table}\n\n{breakdown}\n",
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
        "that dies (a BaseException nothing handles) in the first model call (30 %: the "
        "session holds the user's message; MODEL_INFLIGHT), in the tool (50 %: the model's "
        "function call is stored, unanswered; TOOL_UNANSWERED) or in the second model call "
        "(20 %: the call is answered; MODEL_INFLIGHT); the run stays RUNNING (epoch 1, "
        "attempts 1) and its lease is moved an hour back with `RunLedger.backdate`. Built in "
        f"{timings['total']:.0f} s. Each round copies it twice (`CREATE DATABASE ... TEMPLATE`) "
        "and recovers one copy with one worker process and the other with two, in rotated "
        f"order ({p.rounds} round{'s' if p.rounds > 1 else ''}). A worker "
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
        f"CPU in the PostgreSQL server ({calls_per_run:.1f} statements per run, most of them "
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
    out.append("### Where a recovery spends its time")
    out.append(
        f"In-process (no subprocess), on another copy of the fixture, with one run at a time "
        f"(`concurrency=1`, so a query's time is not shared with its neighbours): store round "
        f"trips per recovered run over {p.profile_passes} passes of {p.batch}, by named query; "
        f"then a cProfile of {p.profile_passes} more passes ({profiled} runs). Event-loop "
        "thread only."
    )
    out.append(breakdown)
    out.append(
        f"<details><summary>{p.profile_passes} recover_once passes of {p.batch} runs</summary>"
        f"\n\n```\n{profile}\n```\n\n</details>"
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
