"""Many runs in flight on one worker: DurableRunner against ADK's Runner, side by side.

Run from the repository root::

    .venv/bin/python -m bench.inflight                      # sizes 100, 1000, 5000
    .venv/bin/python -m bench.inflight --sizes 100,1000     # a quicker run
    .venv/bin/python -m bench.inflight --sizes 20 --duration 3 --latency 0.2 --no-workers
    .venv/bin/python -m bench.inflight --sizes 1000 --repeats 3   # the targets, 3 rotations
    .venv/bin/python -m bench.inflight --write              # rewrite its BENCHMARKS.md section

One run = the user's message, the model (a ScriptedModel that awaits
``--latency`` seconds, 1 s by default, before each answer) calls a tool, the
tool answers, the model answers with text: two model calls and one tool.
``N`` runs are kept in flight (a closed loop: a run that ends is replaced by
a new one) for ``--warmup`` + ``--duration`` seconds; what ends in the last
``--duration`` seconds is measured. A share of the slots (``--queued``,
10 % by default) are pairs that run two turns of one session at once: on
DurableRunner the second waits QUEUED for the first (and is woken when it
ends); ADK's Runner has no queue, so the pair's caller runs its two turns
one after the other, as an ADK app must.

Contenders, each in a process of its own (so CPU and RSS are its own), for
each size, in an order rotated between sizes (and ``--repeats N`` times, the
order rotated each time: a ratio between contenders is taken within each
repeat and the targets report the median, as a shared machine's load drifts
between runs by more than the gaps measured):

* DurableRunner on SQLite and on PostgreSQL (one worker: one batched
  heartbeat, lease ``--lease`` seconds so heartbeats happen within the window),
  with group commit off and on (``-group``: the store writes the units of
  different runs that arrive together in one transaction, see
  ``durable_adk/store/groups.py``), side by side;
* ADK's Runner on InMemorySessionService (the floor: nothing durable);
* ADK's Runner on DatabaseSessionService (``sqlite+aiosqlite`` and
  ``postgresql+asyncpg``, as shipped);
* a reference (``inline-sqlite``, ``inline-postgresql``): ADK's Runner on
  InMemorySessionService making a DurableRunner run's own units (recorded
  before the window, fresh ids) inline at the points where DurableRunner
  makes them, as many runs in flight. With no admission its loop is as
  crowded as ADK's, so at high counts it is not a bound; the bound is the
  durable children's units replayed apart after the window, added to ADK's
  CPU per run;
* the physical bound (issue 45): ADK's CPU per run plus one bare commit of
  each unit's bytes (a single autocommit INSERT through the driver alone,
  :class:`bench.common.BareCommits`), timed apart in each durable child after
  the window; and as a reference (``bare-sqlite``, ``bare-postgresql``) ADK's
  Runner making those bare commits inline at the units' points, as many runs
  in flight, with no admission (so, like ``inline-*``, not a bound there).

Reported per contender and size: runs/s; p50/p99 latency *added per event*
(from the moment the model's answer or the tool's result is ready to the
moment the caller receives its event: the session service's write and the
event loop's queueing behind the other runs); database statements per run and
per second (ours: every named query through ``store.fetch``; ADK's: SQLAlchemy
``before_cursor_execute``); our write transactions committed per run
(``store.commits``: a group counts one); heartbeat statements per second; worker CPU per run
(``time.process_time``: all the process's threads) and the part of it the cyclic
garbage collector took (``gc.callbacks``, the collecting thread's CPU): with
hundreds of runs in flight a full collection walks every object of every run,
so it is a share of both contenders' CPU; RSS per run in flight
(peak during the window minus before the runs started, over ``N``); leases lost.
Then two and three DurableRunner worker processes on one PostgreSQL
(``--worker-size`` runs in flight each): runs/s and the database server's CPU
per run (``/proc`` of the server's processes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import gc
import json
import logging
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    OtherLoad,
    PreparedReplays,
    Units,
    fmt_ms,
    fmt_ratio,
    machine_note,
    md_table,
    percentile,
    postgres_cpu_seconds,
    profile_async,
    record_store_calls,
    server_version,
    write_section,
)

APP = "bench_inflight"
USER = "user_1"
AGENT = "shop_assistant"
CONTENDERS = (
    "adk-memory",
    "durable-sqlite",
    "durable-postgresql",
    "durable-sqlite-group",
    "durable-postgresql-group",
    "durable-sqlite-unlimited",
    "durable-postgresql-unlimited",
    "adk-db-sqlite",
    "adk-db-postgresql",
    "inline-sqlite",
    "inline-postgresql",
    "bare-sqlite",
    "bare-postgresql",
    "essentials-sqlite",
    "essentials-postgresql",
)
LABELS = {
    "adk-memory": "ADK Runner + InMemorySessionService",
    "durable-sqlite": "DurableRunner (sqlite)",
    "durable-postgresql": "DurableRunner (postgresql)",
    "durable-sqlite-group": "DurableRunner (sqlite), group commit",
    "durable-postgresql-group": "DurableRunner (postgresql), group commit",
    "durable-sqlite-unlimited": "DurableRunner (sqlite), Admission.unlimited()",
    "durable-postgresql-unlimited": "DurableRunner (postgresql), Admission.unlimited()",
    "adk-db-sqlite": "ADK Runner + DatabaseSessionService (sqlite)",
    "adk-db-postgresql": "ADK Runner + DatabaseSessionService (postgresql)",
    "inline-sqlite": "reference: ADK Runner + InMemorySessionService, our units inline (sqlite)",
    "inline-postgresql": (
        "reference: ADK Runner + InMemorySessionService, our units inline (postgresql)"
    ),
    "bare-sqlite": "bound: ADK Runner + InMemorySessionService, a bare commit per unit (sqlite)",
    "bare-postgresql": (
        "bound: ADK Runner + InMemorySessionService, a bare commit per unit (postgresql)"
    ),
    "essentials-sqlite": (
        "reference: ADK Runner + InMemorySessionService, our units inline and a durable "
        "run's essential work (sqlite)"
    ),
    "essentials-postgresql": (
        "reference: ADK Runner + InMemorySessionService, our units inline and a durable "
        "run's essential work (postgresql)"
    ),
}
HEARTBEATS = frozenset({"run_renew_many", "run_renew"})
UNIT_REPLAYS = 200
"""Replays of a run's store calls whose CPU is the bound's cost of the units."""


def group_commit(contender: str) -> bool:
    """Whether the contender's store writes concurrent units in shared transactions."""
    return contender.endswith("-group")


# Targets of issue 13, item 5, issue 24, item 4, tightened by issue 45, item 6
# (at 1,000 in flight, each against ADK's in-memory Runner at the same
# concurrency in the same run).
STATEMENTS_SPREAD = 0.10  # statements per run at the smallest and largest size within 10 %
RUNS_VS_MEMORY_TARGET = 0.85  # runs/s at least this share of the in-memory Runner's
CPU_VS_MEMORY_TARGET = 1.15  # worker CPU per run vs ADK's in-memory Runner
P99_VS_MEMORY_TARGET = 1.0  # p99 added per event at most the in-memory Runner's own p99

# The run the model and tool of this task belong to: ready times, read by the caller.
_ready: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "bench_inflight_ready", default=None
)


# ======================================================================= child


def _mark_ready() -> None:
    ready = _ready.get()
    if ready is not None:
        ready.append(time.perf_counter())


def lookup_order(order_id: str) -> dict[str, Any]:
    """Looks up an order by id."""
    result = {"order_id": order_id, "status": "shipped", "eta_days": 2}
    _mark_ready()
    return result


def make_app(latency: float) -> Any:
    from google.adk.agents import LlmAgent
    from google.adk.apps import App, ResumabilityConfig

    from durable_adk.testing.scripted_model import Call, Say, ScriptedModel

    class SlowModel(ScriptedModel):
        """A ScriptedModel that waits like a remote model before each answer."""

        async def generate_content_async(
            self, llm_request: Any, stream: bool = False
        ) -> AsyncGenerator[Any, None]:
            await asyncio.sleep(latency)
            async for response in super().generate_content_async(llm_request, stream):
                _mark_ready()
                yield response

    # A script spans the session: enough steps for the turns a session gets.
    model = SlowModel(
        [
            Call("lookup_order", {"order_id": "A1042"}),
            Say("Your order A1042 has shipped and should arrive in 2 working days."),
        ]
        * 4
    )
    agent = LlmAgent(
        name=AGENT,
        model=model,
        instruction="You help customers of an online shoe shop.",
        tools=[lookup_order],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resumable = ResumabilityConfig(is_resumable=True)
    return App(name=APP, root_agent=agent, resumability_config=resumable)


def _message() -> Any:
    from google.genai import types

    return types.Content(role="user", parts=[types.Part(text="Where is my order A1042?")])


def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Statements:
    """Counts database statements: our named queries, or SQLAlchemy's cursor executes."""

    def __init__(self) -> None:
        self.by_name: Counter[str] = Counter()

    def wrap_store(self, store: Any) -> None:
        inner = store.fetch

        async def fetch(query: str, params: Any = None) -> Any:
            self.by_name[query] += 1
            return await inner(query, params)

        store.fetch = fetch

    def hook_engine(self, engine: Any) -> None:
        from sqlalchemy import event

        def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            self.by_name[statement.split(None, 1)[0].upper()] += 1

        event.listen(engine.sync_engine, "before_cursor_execute", count)

    def total(self) -> int:
        return sum(self.by_name.values())

    def heartbeats(self) -> int:
        return sum(n for q, n in self.by_name.items() if q in HEARTBEATS)


class Driver:
    """One contender in this process: runs one turn on a session, counting what it costs."""

    def __init__(self, contender: str, url: str, latency: float, lease: float) -> None:
        self.contender = contender
        self.url = url
        self.latency = latency
        self.lease = lease
        self.statements = Statements()
        self.lost = 0
        self.lost_reasons: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.error_samples: dict[str, str] = {}
        self.added: list[float] = []
        self.measuring = False
        self.done_in_window = 0
        self.done_total = 0  # since the slots started: the drained count
        self._stack = contextlib.AsyncExitStack()
        self.durable = contender.startswith("durable")
        self.store: Any = None
        self.admission: Any = None  # essentials-*: admits ADK's runs as DurableRunner does

    def commits(self) -> int:
        """Write transactions our store committed so far (0 for ADK's services: not counted)."""
        return int(getattr(self.store, "commits", 0))

    async def open(self) -> None:
        app = make_app(self.latency)
        if self.durable:
            from durable_adk.adk.runner import DurableRunner
            from durable_adk.store import open_store

            store = await self._stack.enter_async_context(
                open_store(self.url, group_commit=group_commit(self.contender))
            )
            self.store = store
            self.statements.wrap_store(store)
            from durable_adk.adk.runs.admission import Admission

            runner = DurableRunner(
                app=app,
                store=store,
                worker_id=f"bench-{os.getpid()}",
                lease=self.lease,
                admission=(
                    Admission.unlimited() if self.contender.endswith("-unlimited") else None
                ),
            )
            driver = runner.path.driver
            lose = driver._lose

            def counted_lose(drive: Any, reason: str) -> None:
                if drive.fence.lost is None:
                    self.lost += 1
                    self.lost_reasons[reason] += 1
                lose(drive, reason)

            driver._lose = counted_lose  # type: ignore[method-assign]
            self.runner: Any = runner
            self._stack.push_async_callback(runner.keeper.aclose)
        else:
            from google.adk.runners import Runner
            from google.adk.sessions import InMemorySessionService
            from google.adk.sessions.database_session_service import DatabaseSessionService

            if self.contender == "adk-memory":
                service: Any = InMemorySessionService()
            elif self.contender.startswith(("inline-", "bare-", "essentials-")):
                service = await self._units_inline(app)
            else:
                service = DatabaseSessionService(db_url=self.url)
                self.statements.hook_engine(service.db_engine)
                self._stack.push_async_callback(service.close)
            self.service = service
            self.runner = Runner(app=app, session_service=service)

    async def _units_inline(self, app: Any) -> Any:
        """ADK's in-memory service making our run's units inline (a reference).

        One DurableRunner run on this contender's store is recorded first (not
        timed), each unit placed by the events appended before it; each run
        of ADK's Runner then sends the same units (fresh ids) at the same
        points (:class:`bench.runner.UnitsAtTheirPoints`).
        """
        from bench.common import BareCommits, record_store_calls_at
        from bench.runner import BareAtTheirPoints, EssentialsAtTheirPoints, UnitsAtTheirPoints
        from durable_adk.adk.runner import DurableRunner
        from durable_adk.store import open_store

        store = await self._stack.enter_async_context(open_store(self.url))
        self.store = store
        self.statements.wrap_store(store)
        durable = DurableRunner(
            app=app, store=store, worker_id=f"bench-{os.getpid()}", lease=self.lease
        )
        self._stack.push_async_callback(durable.keeper.aclose)

        async def one() -> None:
            events = durable.run(user_id=USER, session_id=uuid.uuid4().hex, message=_message())
            async with contextlib.aclosing(events) as stream:
                async for _ in stream:
                    pass

        await one()  # warm: the first run also checks once for a sweeper
        placed = await record_store_calls_at(store, one, durable.sessions, skip=HEARTBEATS)
        if self.contender.startswith("bare-"):
            # The physical bound: one bare commit of the same bytes at each unit's point.
            # On a database of its own: on the store's SQLite file its commits
            # would wait (on the loop) for the store's lock, and the store for them.
            own = self.url + ".bare.db" if self.url.startswith("sqlite:///") else self.url
            bare = await BareCommits(own).open()
            self._stack.push_async_callback(bare.close)
            return BareAtTheirPoints(store, placed, bare)
        if self.contender.startswith("essentials-"):
            from durable_adk.adk.runs.admission import Admission

            # Admitted as a DurableRunner's drives are: without it ADK's runs
            # crowd the loop (the inline references' trouble at high counts).
            self.admission = Admission()
            self.admission.pressure = store.take_pressure
            return EssentialsAtTheirPoints(store, placed)
        return UnitsAtTheirPoints(store, placed)

    async def _essentials(self, session_id: str) -> AsyncGenerator[Any, None]:
        """ADK's run with a durable run's essential work, as
        :class:`bench.runner.EssentialsContender`: the run stamped on its events, ADK
        in a task of its own handing its events over through a queue, a heartbeat
        task, the end classified; the sync tool on ADK's pool; ADK's run admitted by
        an :class:`~durable_adk.adk.runs.admission.Admission`, as a drive is."""
        from bench.runner import essential_config, handed_over
        from durable_adk.adk.eventlog.classify import OrphanClass, classify

        events = self.runner.run_async(
            user_id=USER,
            session_id=session_id,
            new_message=_message(),
            run_config=essential_config(uuid.uuid4().hex),
        )
        async for event in handed_over(events, self.admission):
            yield event
        log = self.service.logs.pop(session_id)
        verdict = classify(
            log, log[-1].invocation_id, root_agent_name=AGENT, owner_speaks_first=True
        )
        if verdict.cls is not OrphanClass.ACTUALLY_DONE:
            raise RuntimeError(f"essentials: the run ended {verdict.cls}")

    async def close(self) -> None:
        await self._stack.aclose()

    async def turn(self, session_id: str, *, new: bool) -> None:
        """One run on ``session_id`` (made first for ADK's Runner when ``new``)."""
        ready: list[float] = []
        token = _ready.set(ready)
        received = 0
        try:
            if self.durable:
                events = self.runner.run(user_id=USER, session_id=session_id, message=_message())
            else:
                if new:
                    await self.service.create_session(
                        app_name=APP, user_id=USER, session_id=session_id
                    )
                events = (
                    self._essentials(session_id)
                    if self.contender.startswith("essentials-")
                    else self.runner.run_async(
                        user_id=USER, session_id=session_id, new_message=_message()
                    )
                )
            async with contextlib.aclosing(events) as stream:
                async for event in stream:
                    now = time.perf_counter()
                    if event.author == "user":
                        continue
                    if received < len(ready) and self.measuring:
                        self.added.append(now - ready[received])
                    received += 1
        except Exception as exc:
            self.errors[type(exc).__name__] += 1
            self.error_samples.setdefault(type(exc).__name__, str(exc)[:300])
            return
        finally:
            _ready.reset(token)
        self.done_total += 1
        if self.measuring:
            self.done_in_window += 1


class CollectorClock:
    """CPU seconds the cyclic garbage collector spends (its thread's), while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.spent = 0.0
        self._began = 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.thread_time()
        elif self.on:
            self.spent += time.thread_time() - self._began


async def child_main(args: argparse.Namespace) -> dict[str, Any]:
    logging.basicConfig(level=logging.ERROR)
    warnings.simplefilter("ignore")
    for name in ("durable_adk", "google_adk", "google", "httpx", "asyncio"):
        logging.getLogger(name).setLevel(int(os.environ.get("BENCH_LOG", logging.CRITICAL)))
    driver = Driver(args.contender, args.url, args.latency, args.lease)
    await driver.open()
    size = args.size
    pairs = int(size * args.queued / 2)
    singles = size - 2 * pairs
    stop_at = math.inf
    rng = random.Random(1)

    async def single() -> None:
        while time.perf_counter() < stop_at:
            await driver.turn(uuid.uuid4().hex, new=True)

    async def pair() -> None:
        while time.perf_counter() < stop_at:
            session = uuid.uuid4().hex
            if driver.durable:
                await asyncio.gather(
                    driver.turn(session, new=True), driver.turn(session, new=False)
                )
            else:  # no queue in ADK: the caller orders the two turns itself
                await driver.turn(session, new=True)
                await driver.turn(session, new=False)

    lags: list[float] = []

    async def lag_monitor() -> None:
        """How late the event loop wakes a 0.1 s sleep: the loop's queueing delay."""
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.1)
            lags.append(time.perf_counter() - t - 0.1)

    monitor = asyncio.create_task(lag_monitor())
    # Warm-up of the process: one turn alone first (ADK imports what it needs on
    # first use, blocking the loop for seconds: a lease held then would be lost,
    # rightly), then a batch (connections, prepared statements, caches).
    await driver.turn(uuid.uuid4().hex, new=True)
    units: Units = []
    if driver.durable:  # a warm run's store calls, for the bound (replayed at the end)
        units = await record_store_calls(
            driver.store, lambda: driver.turn(uuid.uuid4().hex, new=True), skip=HEARTBEATS
        )
    driver.lost, driver.errors = 0, Counter()
    driver.lost_reasons.clear()
    await asyncio.gather(*(driver.turn(uuid.uuid4().hex, new=True) for _ in range(min(size, 20))))
    lags.clear()
    rss_before = _rss_bytes()
    if args.start_at:
        await asyncio.sleep(max(0.0, args.start_at - time.time()))
    start = time.perf_counter()
    stop_at = start + args.warmup + args.duration
    s_start, driver.done_total = driver.statements.total(), 0
    k_start = driver.commits()
    slots = [asyncio.create_task(single()) for _ in range(singles)]
    slots += [asyncio.create_task(pair()) for _ in range(pairs)]
    rng.shuffle(slots)
    await asyncio.sleep(args.warmup)
    driver.measuring = True
    collector = CollectorClock()
    collector.on = True
    c0, s0, h0 = time.process_time(), driver.statements.total(), driver.statements.heartbeats()
    k0 = driver.commits()
    t0 = time.perf_counter()
    rss_peak = rss_before

    async def window() -> None:
        nonlocal rss_peak
        while time.perf_counter() < stop_at:
            await asyncio.sleep(0.5)
            rss_peak = max(rss_peak, _rss_bytes())

    profile = ""
    if args.profile:  # the whole window under cProfile (the event-loop thread)
        profile = await profile_async(window, top=args.profile)
    else:
        await window()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    collector.on = False
    statements = driver.statements.total() - s0
    commits = driver.commits() - k0
    heartbeats = driver.statements.heartbeats() - h0
    runs = driver.done_in_window
    driver.measuring = False
    # Statements per run over whole runs: the window's count divides the
    # statements of runs it saw start by the runs it saw end, which differ by
    # up to a generation of runs when runs last longer than the window. So
    # the slots start nothing new now; the runs in flight are waited for (at
    # most --drain seconds), and every statement since the slots started is
    # divided by every run ended since.
    drained = drained_commits = math.nan
    if args.drain > 0:
        _, late = await asyncio.wait(slots, timeout=args.drain)
        if not late:
            drained = (driver.statements.total() - s_start) / max(1, driver.done_total)
            drained_commits = (driver.commits() - k_start) / max(1, driver.done_total)
    monitor.cancel()
    by_name = dict(driver.statements.by_name)
    units_cpu = math.nan
    if units:
        # The bound: what this run's units cost this process alone, replayed with
        # fresh ids and no runner, one after the other once the runs are done.
        replays = PreparedReplays(driver.store, units)
        replays.prepare(UNIT_REPLAYS)  # fresh ids: the bench's own work, not timed
        c1 = time.process_time()
        for _ in range(UNIT_REPLAYS):
            await replays()
        units_cpu = (time.process_time() - c1) / UNIT_REPLAYS
    bare_cpu = math.nan
    if units:
        # The physical bound, apart: one bare commit of each unit's bytes per run.
        bare_cpu = await _bare_cpu(driver, units)
    added = sorted(driver.added)
    return {
        "contender": args.contender,
        "size": size,
        "runs": runs,
        "wall": wall,
        "cpu": cpu,
        "gc_cpu": collector.spent,
        "statements": statements,
        "statements_per_run_drained": drained,
        "commits": commits,
        "commits_per_run_drained": drained_commits,
        "group_commit": group_commit(args.contender),
        "heartbeats": heartbeats,
        "by_name": by_name,
        "added_p50": percentile(added, 50) if added else math.nan,
        "added_p99": percentile(added, 99) if added else math.nan,
        "events": len(added),
        # The sampler may not run at all when the loop lags (5,000 in flight):
        # the process's peak RSS (getrusage) is the fallback.
        "rss_per_run": (max(rss_peak, _maxrss()) - rss_before) / size,
        "rss_before": rss_before,
        "rss_peak": rss_peak,
        "maxrss": _maxrss(),
        "loop_lag_max": max(lags, default=math.nan),
        "loop_lag_p99": percentile(sorted(lags), 99) if lags else math.nan,
        "lost": driver.lost,
        "lost_reasons": dict(driver.lost_reasons),
        "errors": dict(driver.errors),
        "error_samples": driver.error_samples,
        "profile": profile,
        "units": [name for name, _ in units],
        "units_cpu": units_cpu,
        "bare_cpu": bare_cpu,
    }


async def _bare_cpu(driver: Driver, units: Units) -> float:
    """CPU per run of one bare commit of each of a run's units (its bytes, one
    statement, through the driver alone), made one after the other, apart."""
    from bench.common import BareCommits, unit_bytes

    url = driver.url + ".bare.db" if driver.url.startswith("sqlite:///") else driver.url
    bare = await BareCommits(url).open()
    try:
        payloads = [unit_bytes(params) for query, params in units if driver.store.writes(query)]
        c1 = time.process_time()
        for _ in range(UNIT_REPLAYS):
            for payload in payloads:
                await bare.commit(payload)
        return (time.process_time() - c1) / UNIT_REPLAYS
    finally:
        await bare.close()


# ====================================================================== parent


def _child(
    contender: str, url: str, size: int, args: argparse.Namespace, start_at: float = 0.0
) -> subprocess.Popen[str]:
    argv = [
        sys.executable,
        "-m",
        "bench.inflight",
        "--child",
        contender,
        "--url",
        url,
        "--size",
        str(size),
        "--latency",
        str(args.latency),
        "--lease",
        str(args.lease),
        "--warmup",
        str(args.warmup),
        "--duration",
        str(args.duration),
        "--queued",
        str(args.queued),
        "--start-at",
        str(start_at),
        # The drained count is for the targets on our statements per run.
        "--drain",
        str(args.drain if contender.startswith("durable") and not start_at else 0.0),
        "--profile",
        str(args.profile),
    ]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent.parent
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"a bench child failed (exit {proc.returncode})")
    return json.loads(out.strip().splitlines()[-1])


class Databases:
    """Fresh databases for each child: a SQLite file or a PostgreSQL database."""

    def __init__(self, tmp: Path, pg: Any) -> None:
        self.tmp = tmp
        self.pg = pg
        self.n = 0

    async def url(self, contender: str) -> str:
        self.n += 1
        name = f"inflight_{self.n}"
        if contender == "adk-memory":
            return "memory://"
        if contender.startswith(
            ("durable-sqlite", "inline-sqlite", "bare-sqlite", "essentials-sqlite")
        ):
            return f"sqlite:///{self.tmp / name}.db"
        if contender == "adk-db-sqlite":
            return f"sqlite+aiosqlite:///{self.tmp / name}.db"
        url = self.pg.create_database(name)
        if contender.startswith(
            ("durable-postgresql", "inline-postgresql", "bare-postgresql", "essentials-postgresql")
        ):
            from durable_adk.store import open_store

            async with open_store(url):  # the schema, before the timed child
                pass
            return url
        return url.replace("postgresql://", "postgresql+asyncpg://", 1)


async def run_single(args: argparse.Namespace, dbs: Databases) -> list[dict[str, Any]]:
    results = []
    for index, size in enumerate(args.sizes):
        for repeat in range(args.repeats):
            # Rotated between sizes and between repeats: no contender always runs
            # first (on a cold machine) or last (after the others' load).
            shift = (index + repeat) % len(args.contenders)
            order = args.contenders[shift:] + args.contenders[:shift]
            for contender in order:
                url = await dbs.url(contender)
                server0 = postgres_cpu_seconds(dbs.pg.data_dir)
                proc = _child(contender, url, size, args)
                result = _result(proc)
                result["server_cpu"] = postgres_cpu_seconds(dbs.pg.data_dir) - server0
                result["repeat"] = repeat
                results.append(result)
                print(_line(result), flush=True)
    return results


def per_run_cpu(r: dict[str, Any]) -> float:
    return float(r["cpu"] / r["runs"])


def runs_per_s(r: dict[str, Any]) -> float:
    return float(r["runs"] / r["wall"])


def per_run_commits(r: dict[str, Any]) -> float:
    return float(r["commits"] / r["runs"])


def added_p99(r: dict[str, Any]) -> float:
    return float(r["added_p99"])


def over_repeats(found: tuple[float, list[float]]) -> str:
    """A ratio, with each repeat's when there were several."""
    value, values = found
    if len(values) < 2:
        return fmt_ratio(value)
    each = ", ".join(fmt_ratio(v) for v in values)
    return f"{fmt_ratio(value)} (median of {len(values)}: {each})"


def ratio_over_repeats(
    results: list[dict[str, Any]],
    size: int,
    top: str,
    bottom: str,
    figure: Callable[[dict[str, Any]], float],
) -> tuple[float, list[float]]:
    """``figure`` of contender ``top`` over ``bottom``'s at ``size``, in each repeat that
    has both, and the median of those ratios (NaN when none has).

    A ratio is taken within one repeat, whose contenders ran one after the
    other: a shared machine's drift between repeats then moves both sides.
    """

    def ratio(t: dict[str, Any], b: dict[str, Any]) -> float:
        below = figure(b)
        return figure(t) / below if below else math.nan

    return over_pairs(results, size, top, bottom, ratio)


def over_pairs(
    results: list[dict[str, Any]],
    size: int,
    top: str,
    bottom: str,
    of: Callable[[dict[str, Any], dict[str, Any]], float],
) -> tuple[float, list[float]]:
    """``of(top's result, bottom's)`` at ``size`` in each repeat that has both (NaN
    values left out), and their median (NaN when there is none)."""
    values = []
    for repeat in sorted({r.get("repeat", 0) for r in results}):
        found = {
            r["contender"]: r
            for r in results
            if r["size"] == size and r.get("repeat", 0) == repeat and r["runs"]
        }
        if top in found and bottom in found:
            value = of(found[top], found[bottom])
            if not math.isnan(value):
                values.append(value)
    if not values:
        return math.nan, []
    return statistics.median(values), values


def bounds(
    apart: tuple[float, list[float]],
    inline: tuple[float, list[float]],
    bare: tuple[float, list[float]] = (math.nan, []),
    bare_inline: tuple[float, list[float]] = (math.nan, []),
    essentials: tuple[float, list[float]] = (math.nan, []),
) -> str:
    """The bound column: the physical bound (ADK's work plus a bare commit per unit,
    added apart; and, as a reference, ADK's Runner making them inline), our units
    replayed apart, and ADK's Runner making them inline."""
    parts = []
    if bare[1]:
        parts.append(f"physical bound, ADK + a bare commit per unit, apart: {over_repeats(bare)}")
    if bare_inline[1]:
        parts.append(
            f"reference, ADK's Runner with the bare commits inline: {over_repeats(bare_inline)}"
        )
    if apart[1]:
        parts.append(f"units replayed apart: {over_repeats(apart)}")
    if inline[1]:
        parts.append(f"reference, ADK's Runner with our units inline: {over_repeats(inline)}")
    if essentials[1]:
        parts.append(
            f"reference, the same with a durable run's essential work: {over_repeats(essentials)}"
        )
    return "; ".join(parts)


def cpu_bound(ours: dict[str, Any], adk: dict[str, Any]) -> float:
    """CPU per run of a runner whose only cost is its units, over ADK's in-memory Runner's:
    ADK's CPU per run plus our run's store calls replayed (same repeat)."""
    units = float(ours.get("units_cpu", math.nan))
    return (per_run_cpu(adk) + units) / per_run_cpu(adk)


def bare_cpu_bound(ours: dict[str, Any], adk: dict[str, Any]) -> float:
    """The physical bound's CPU per run over ADK's: ADK's CPU per run plus one bare
    commit per unit of our run (same repeat)."""
    bare = float(ours.get("bare_cpu", math.nan))
    return (per_run_cpu(adk) + bare) / per_run_cpu(adk)


def bare_rate_bound(ours: dict[str, Any], adk: dict[str, Any]) -> float:
    """The physical bound's runs/s over ADK's: ADK's work and one bare commit per unit
    on the one core a loop has, and no faster than ADK's Runner."""
    bare = float(ours.get("bare_cpu", math.nan))
    return min(1.0, 1.0 / (per_run_cpu(adk) + bare) / runs_per_s(adk))


def rate_bound(ours: dict[str, Any], adk: dict[str, Any]) -> float:
    """Runs/s of a runner whose only cost is its units, over ADK's in-memory Runner's.

    Its event loop is one thread: at most one core of CPU per second, spent
    on ADK's work and the units' (their statements run on that thread on
    SQLite, their driver's work on PostgreSQL); it cannot go faster than
    ADK's Runner either.
    """
    units = float(ours.get("units_cpu", math.nan))
    one_core = 1.0 / (per_run_cpu(adk) + units)
    return min(1.0, one_core / runs_per_s(adk))


async def run_workers(args: argparse.Namespace, dbs: Databases) -> list[dict[str, Any]]:
    results = []
    for workers in (1, 2, 3):
        url = await dbs.url("durable-postgresql")
        server0 = postgres_cpu_seconds(dbs.pg.data_dir)
        start_at = time.time() + 8.0  # every child imported and warmed up by then
        procs = [
            _child("durable-postgresql", url, args.worker_size, args, start_at)
            for _ in range(workers)
        ]
        each = [_result(p) for p in procs]
        server = postgres_cpu_seconds(dbs.pg.data_dir) - server0
        runs = sum(r["runs"] for r in each)
        wall = max(r["wall"] for r in each)
        results.append(
            {
                "workers": workers,
                "size": args.worker_size,
                "runs": runs,
                "runs_per_s": runs / wall,
                # The server's CPU over the whole child lifetime (warm-up and drain
                # included), per run measured: an upper bound.
                "server_cpu_per_run": server / max(1, runs),
                "worker_cpu_per_run": sum(r["cpu"] for r in each) / max(1, runs),
                "lost": sum(r["lost"] for r in each),
                "errors": sum(sum(r["errors"].values()) for r in each),
                "heartbeats_per_s": sum(r["heartbeats"] for r in each) / wall / workers,
            }
        )
        print(json.dumps(results[-1]), flush=True)
    return results


def _line(r: dict[str, Any]) -> str:
    return (
        f"{LABELS[r['contender']]:<50} N={r['size']:<5} runs={r['runs']:<6} "
        f"{r['runs'] / r['wall']:.1f} runs/s  added p50 {fmt_ms(r['added_p50'])} "
        f"p99 {fmt_ms(r['added_p99'])}  stmts/run {r['statements'] / max(1, r['runs']):.2f} "
        f"(drained {r.get('statements_per_run_drained', math.nan):.2f})  "
        f"commits/run {r.get('commits', 0) / max(1, r['runs']):.2f}  "
        f"hb/s {r['heartbeats'] / r['wall']:.2f}  cpu/run {fmt_ms(r['cpu'] / max(1, r['runs']))}  "
        f"rss/run {r['rss_per_run'] / 1024:.0f} KiB  lag p99 {fmt_ms(r['loop_lag_p99'])}  "
        f"lost {r['lost']}  errors {r['errors']}"
    )


def single_table(results: list[dict[str, Any]]) -> str:
    rows = []
    # Each row is set against the in-memory Runner of its own size and repeat.
    memory = {(r["size"], r.get("repeat", 0)): r for r in results if r["contender"] == "adk-memory"}
    repeats = len({r.get("repeat", 0) for r in results}) > 1
    for r in sorted(
        results,
        key=lambda r: (r["size"], r.get("repeat", 0), CONTENDERS.index(r["contender"])),
    ):
        runs = r["runs"]
        base = memory.get((r["size"], r.get("repeat", 0)))
        durable = r["contender"].startswith("durable")
        database = r["contender"] != "adk-memory"

        def per_run(value: str, when: bool = True, runs: int = runs) -> str:
            """A per-run figure, or n/a when no run ended in the window."""
            return "" if not when else value if runs else "n/a"

        cpu = r["cpu"] / runs if runs else math.nan
        vs = cpu / (base["cpu"] / base["runs"]) if base and base["runs"] and runs else math.nan
        errors = ", ".join(f"{n} {k}" for k, n in sorted(r["errors"].items()))
        rows.append(
            [
                LABELS[r["contender"]] + (f" (repeat {r.get('repeat', 0) + 1})" if repeats else ""),
                r["size"],
                runs,
                f"{runs / r['wall']:.1f}",
                fmt_ms(r["added_p50"]),
                fmt_ms(r["added_p99"]),
                "on" if r.get("group_commit") else ("off" if durable else ""),
                per_run(f"{r.get('commits', 0) / max(1, runs):.2f}", durable),
                per_run(f"{r['statements'] / max(1, runs):.2f}", database),
                _drained(r),
                f"{r['statements'] / r['wall']:.0f}" if database else "",
                f"{r['heartbeats'] / r['wall']:.2f}" if durable else "",
                per_run(fmt_ms(cpu)),
                per_run(f"{r.get('gc_cpu', math.nan) / max(1, runs) * 1000:.2f} ms"),
                per_run(fmt_ratio(vs)),
                per_run(
                    f"{r['server_cpu'] / max(1, runs) * 1000:.2f} ms",
                    "postgresql" in r["contender"],
                ),
                f"{r['rss_per_run'] / 1024:.0f} KiB",
                fmt_ms(r["loop_lag_p99"]),
                r["lost"] if durable else "",
                errors,
            ]
        )
    return md_table(
        [
            "contender",
            "in flight",
            "runs measured",
            "runs/s",
            "added per event p50",
            "p99",
            "group commit",
            "commits per run",
            "statements per run",
            "drained: statements per run",
            "statements/s",
            "heartbeat statements/s",
            "worker CPU per run",
            "of it, the collector",
            "CPU / in-memory",
            "PostgreSQL CPU per run",
            "RSS per run in flight",
            "event-loop lag p99",
            "leases lost",
            "errors",
        ],
        rows,
    )


def _drained(r: dict[str, Any]) -> str:
    """Statements per run over whole runs (every run in flight waited for), or blank."""
    value = r.get("statements_per_run_drained", math.nan)
    return "" if value is None or math.isnan(value) else f"{value:.2f}"


def _per_run_statements(r: dict[str, Any]) -> float:
    """The drained count when there is one, else the window's."""
    value = r.get("statements_per_run_drained", math.nan)
    if value is not None and not math.isnan(value):
        return float(value)
    return float(r["statements"] / max(1, r["runs"]))


def workers_table(results: list[dict[str, Any]]) -> str:
    rows = [
        [
            r["workers"],
            r["size"],
            r["runs"],
            f"{r['runs_per_s']:.1f}",
            f"{r['server_cpu_per_run'] * 1000:.2f} ms",
            f"{r['worker_cpu_per_run'] * 1000:.2f} ms",
            f"{r['heartbeats_per_s']:.2f}",
            r["lost"],
            r["errors"] or "",
        ]
        for r in results
    ]
    return md_table(
        [
            "worker processes",
            "in flight per worker",
            "runs measured",
            "runs/s (all workers)",
            "PostgreSQL CPU per run",
            "worker CPU per run",
            "heartbeat statements/s per worker",
            "leases lost",
            "errors",
        ],
        rows,
    )


def most_heartbeats(r: dict[str, Any], lease: float) -> int:
    """The most heartbeat statements a window may hold at one per renewal interval.

    A window of ``k`` whole intervals (and a part of one) holds ``k``
    renewals, or one more when a renewal falls at its very start.
    """
    return math.floor(r["wall"] / (lease / 3)) + 1


def heartbeats_ok(r: dict[str, Any], lease: float) -> bool:
    """At most one heartbeat statement per renewal interval (a third of the lease)."""
    return int(r["heartbeats"]) <= most_heartbeats(r, lease)


def heartbeats_seen(r: dict[str, Any], lease: float) -> str:
    most = most_heartbeats(r, lease)
    return f"{r['heartbeats']} in {r['wall']:.1f} s (at most {most}, one per {lease / 3:g} s)"


def target_table(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    rows: list[list[str]] = []
    # Per-contender figures from the first repeat; the ratios at 1,000 in flight
    # and group commit's comparisons from every repeat (median).
    by = {(r["contender"], r["size"]): r for r in results if r.get("repeat", 0) == 0}
    sizes = sorted(args.sizes)
    small, large = sizes[0], sizes[-1]
    for backend in ("sqlite", "postgresql"):
        name = f"durable-{backend}"

        def add(
            target: str,
            measured: str,
            goal: str,
            ok: bool,
            bound: str = "",
            backend: str = backend,
        ) -> None:
            rows.append([backend, target, measured, goal, "PASS" if ok else "MISS", bound])

        a, b = by.get((name, small)), by.get((name, large))
        if a and b and a["runs"] and b["runs"] and small != large:
            pa, pb = _per_run_statements(a), _per_run_statements(b)
            spread = abs(pb - pa) / pa
            add(
                f"statements per run (drained) at {small} and {large} in flight",
                f"{pa:.2f} and {pb:.2f} ({spread:.1%} apart)",
                "within 10 %",
                spread <= STATEMENTS_SPREAD,
            )
            add(
                f"heartbeat statements at {small} and {large} in flight",
                f"{heartbeats_seen(a, args.lease)} and {heartbeats_seen(b, args.lease)}",
                "one per renewal interval (lease/3), whatever the run count",
                heartbeats_ok(a, args.lease) and heartbeats_ok(b, args.lease),
            )
        group = f"{name}-group"
        for size in (s for s in sizes if s == 1000):  # the targets are at 1,000
            cpu = ratio_over_repeats(results, size, name, "adk-memory", per_run_cpu)
            rate = ratio_over_repeats(results, size, name, "adk-memory", runs_per_s)
            p99 = ratio_over_repeats(results, size, name, "adk-memory", added_p99)
            if not cpu[1]:
                continue
            cpu_floor = over_pairs(results, size, name, "adk-memory", cpu_bound)
            rate_floor = over_pairs(results, size, name, "adk-memory", rate_bound)
            # A reference: ADK's Runner making our units inline (no admission).
            inline = f"inline-{name.removeprefix('durable-')}"
            cpu_inline = ratio_over_repeats(results, size, inline, "adk-memory", per_run_cpu)
            rate_inline = ratio_over_repeats(results, size, inline, "adk-memory", runs_per_s)
            # The physical bound: ADK's Runner with one bare commit at each unit's point.
            bare = f"bare-{name.removeprefix('durable-')}"
            cpu_bare = ratio_over_repeats(results, size, bare, "adk-memory", per_run_cpu)
            rate_bare = ratio_over_repeats(results, size, bare, "adk-memory", runs_per_s)
            essentials = f"essentials-{name.removeprefix('durable-')}"
            cpu_ess = ratio_over_repeats(results, size, essentials, "adk-memory", per_run_cpu)
            rate_ess = ratio_over_repeats(results, size, essentials, "adk-memory", runs_per_s)
            cpu_bare_apart = over_pairs(results, size, name, "adk-memory", bare_cpu_bound)
            rate_bare_apart = over_pairs(results, size, name, "adk-memory", bare_rate_bound)
            add(
                f"worker CPU per run / in-memory Runner's at {size} in flight",
                over_repeats(cpu),
                f"<= {CPU_VS_MEMORY_TARGET:g}x",
                cpu[0] <= CPU_VS_MEMORY_TARGET,
                bounds(cpu_floor, cpu_inline, cpu_bare_apart, cpu_bare, cpu_ess),
            )
            add(
                f"runs/s / in-memory Runner's at {size} in flight",
                over_repeats(rate),
                f">= {RUNS_VS_MEMORY_TARGET:g}x",
                rate[0] >= RUNS_VS_MEMORY_TARGET,
                bounds(rate_floor, rate_inline, rate_bare_apart, rate_bare, rate_ess),
            )
            add(
                f"p99 added per event at {size} in flight, ours / the in-memory Runner's",
                over_repeats(p99),
                "no higher",
                p99[0] <= P99_VS_MEMORY_TARGET,
            )
        for size in sizes:
            commits = ratio_over_repeats(results, size, group, name, per_run_commits)
            rate = ratio_over_repeats(results, size, group, name, runs_per_s)
            p99 = ratio_over_repeats(results, size, group, name, added_p99)
            if not commits[1]:
                continue
            add(
                f"group commit at {size} in flight: commits per run, on / off",
                over_repeats(commits),
                "fewer",
                commits[0] < 1,
            )
            add(
                f"group commit at {size} in flight: runs/s, on / off",
                over_repeats(rate),
                "more (within 5 %)",
                rate[0] >= 0.95,
            )
            add(
                f"group commit at {size} in flight: p99 added per event, on / off",
                over_repeats(p99),
                "no higher (within 10 %)",
                p99[0] <= 1.1,
            )
        big = by.get((name, 5000))
        if big:
            add("leases lost at 5,000 in flight", str(big["lost"]), "0", big["lost"] == 0)
    return md_table(
        [
            "backend",
            "target",
            "measured",
            "target",
            "verdict",
            "bound: ADK's in-memory Runner + our run's store calls replayed (same run)",
        ],
        rows,
    )


async def parent_main(args: argparse.Namespace) -> str:
    from durable_adk.testing.pg_cluster import TempPostgres

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dadk-bench-inflight-") as tmp, TempPostgres() as pg:
        pg_version = await server_version(pg.admin_url)
        dbs = Databases(Path(tmp), pg)
        with OtherLoad(pg.data_dir) as load:
            single = await run_single(args, dbs)
            workers = await run_workers(args, dbs) if args.workers else []
    elapsed = time.perf_counter() - started
    out = [
        "## Runs in flight (`bench/inflight.py`)",
        f"Run: `--sizes {','.join(map(str, args.sizes))} --latency {args.latency} "
        f"--lease {args.lease} --warmup {args.warmup} --duration {args.duration} "
        f"--queued {args.queued}`, {time.strftime('%Y-%m-%d %H:%M %Z')}, {elapsed:.0f} s. "
        f"Machine: {machine_note(f'PostgreSQL {pg_version} (TempPostgres, fsync on)')}. "
        f"{load.note().capitalize()}.",
        "### One worker, N runs in flight",
        single_table(single),
        "### Targets",
        target_table(single, args),
    ]
    if workers:
        out += ["### Worker processes on one PostgreSQL", workers_table(workers)]
    if args.json:
        raw = json.dumps({"single": single, "workers": workers})
        await asyncio.to_thread(Path(args.json).write_text, raw)
    text = "\n\n".join(out)
    print("\n" + text, flush=True)
    return text


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench.inflight", description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="100,1000,5000", help="runs in flight, comma-separated")
    p.add_argument("--latency", type=float, default=1.0, help="seconds each model call awaits")
    p.add_argument("--lease", type=float, default=30.0, help="DurableRunner's lease (seconds)")
    p.add_argument("--warmup", type=float, default=4.0, help="seconds before measuring")
    p.add_argument("--duration", type=float, default=30.0, help="seconds measured")
    p.add_argument("--queued", type=float, default=0.1, help="share of runs queued behind another")
    p.add_argument(
        "--drain",
        type=float,
        default=180.0,
        help="seconds to wait for the runs in flight after the window (0: no drained count)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="times each size is run, contenders rotated each time; ratios are the median",
    )
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--worker-size", type=int, default=300, help="runs in flight per worker")
    p.add_argument("--no-workers", dest="workers", action="store_false")
    p.add_argument("--write", action="store_true", help="rewrite the BENCHMARKS.md section")
    p.add_argument("--json", help="also write the raw results to this file")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--size", type=int, help=argparse.SUPPRESS)
    p.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--profile", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.sizes = [int(s) for s in str(args.sizes).split(",") if s]
    args.contenders = [c for c in str(args.contenders).split(",") if c]
    unknown = set(args.contenders) - set(CONTENDERS)
    if unknown or not args.sizes or min(args.sizes) < 1 or not 0 <= args.queued <= 1:
        p.error(f"bad --sizes, --queued or --contenders (unknown: {sorted(unknown)})")
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1, not {args.repeats}")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    if args.child:
        args.contender = args.child
        loop = asyncio.new_event_loop()
        result = loop.run_until_complete(child_main(args))
        print(json.dumps(result), flush=True)
        os._exit(0)  # the runs still in flight are abandoned with the process
    text = asyncio.run(parent_main(args))
    if args.write:
        write_section("inflight", text)
        print("BENCHMARKS.md: section 'inflight' rewritten")


if __name__ == "__main__":
    main()
