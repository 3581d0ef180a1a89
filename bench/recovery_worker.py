"""One recovery worker process of ``bench/recovery.py``, and the app its orphans belong to.

Run by the bench (from the repository root)::

    .venv/bin/python -m bench.recovery_worker URL WORKER_ID [--batch 20] [--concurrency 4]
    .venv/bin/python -m bench.recovery_worker URL WORKER_ID --mode adk
    .venv/bin/python -m bench.recovery_worker URL WORKER_ID --mode floor \
        --runs 500 --writes 4.1 --reads 1.0

The process opens the store, builds the same app the orphaned runs were started
with (:func:`build_agent`), warms up with one run of its own (user ``warmup``),
prints ``ready`` and waits for a ``go`` line on stdin. It then loops
``Sweeper(runner, batch=...).recover_once()`` until a pass finds nothing to
claim, prints one JSON line (runs recovered, wall-clock start and end, CPU time
of the process) and waits for an ``exit`` line before closing its connections,
so the parent can read the server's CPU use while every backend is still alive.

More modes measure, the same way (warm-up, ``ready``, ``go``, one JSON
line, ``exit``), what bounds a recovery:

* ``--mode steps --concurrency 1``: the recovery loop with each step's CPU
  read around it (:class:`CpuSteps`: claim, session read, classification,
  drive), one run at a time so that nothing else runs meanwhile.
* ``--mode adk`` (:func:`adk_baseline`): ADK's own Runner with an
  InMemorySessionService finishing the same remaining work. Before ``ready``
  it reads every orphan's session from the database (then closes the store)
  and copies its events into an in-memory session; after ``go`` it makes the
  call the durable re-drive makes: ``Runner.run_async`` with the run's
  invocation id and its stored message, over the same App (resumable), the
  same number of runs at a time as the sweeper (a run whose invocation left
  nothing stored starts afresh, as recovery starts it). It checks each session ends
  with the run's final text exactly once and every call answered once.
* ``--mode inline --reads R``: the same, over :class:`RoundTripsInline`,
  which makes a recovery's round trips as the floor's bare statements, each
  where the durable run makes its unit: a runner whose only cost is its round
  trips, measured as a runner.
* ``--mode floor`` (:func:`commit_floor`): a worker whose only cost is its
  round trips: per run, as many single-row autocommit INSERTs (an event-sized
  row) and single-row SELECTs as a recovery makes writing and reading
  statements (fractions spread evenly over the runs), through an asyncpg pool
  opened as PostgresStore opens it, the same number of runs at a time.

The app: one LlmAgent ``order_desk`` with one read-only (idempotent) tool,
``check_order``, and a ScriptedModel of two steps: call the tool for the order
named in the user's message, then answer with :func:`final_text`. Both steps
are computed from the request, so every run's answer is unique and a re-drive
in any process gives the same one. :func:`build_agent` can also build the
*dying* variants the bench uses to leave orphans behind: the worker "dies"
(raises :class:`WorkerDied`, a ``BaseException`` that neither ADK nor
DurableRunner handles, so the run stays RUNNING with the events stored so far)
in the first model call, in the tool, or in the second model call.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import sys
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.events.event import Event
from google.adk.models.llm_request import LlmRequest
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from bench.runner import essential_config, handed_over, store_essentially
from durable_adk.adk.eventlog.classify import classify
from durable_adk.adk.loops.recovery import Sweeper
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.store import Store, open_store
from durable_adk.tables.ledger import Run, RunLedger, RunStatus
from durable_adk.testing.scripted_model import Call, Say, ScriptedModel, Turn

APP = "bench_recovery"
AGENT = "order_desk"
TOOL = "check_order"
CUSTOMERS = "customer-"  # user ids of the orphans start with this
WARMUP_USER = "warmup"

_ORDER_RE = re.compile(r"order (\w+)\?")

DIES_IN = ("first_model_call", "tool", "second_model_call")


class WorkerDied(BaseException):
    """Stands for the worker process being killed at this instant."""


def request_text(order_id: str) -> str:
    """The user's message of the run for ``order_id``."""
    return f"Where is my order {order_id}?"


def final_text(order_id: str) -> str:
    """The model's final answer in the run for ``order_id`` (unique per run)."""
    return f"Order {order_id} has shipped and arrives in 2 days (tracking TRK-{order_id})."


def _order_of(request: LlmRequest) -> str:
    for content in request.contents:
        if content.role != "user":
            continue
        for part in content.parts or ():
            match = _ORDER_RE.search(part.text or "")
            if match:
                return match.group(1)
    raise ValueError("no order id in the request")


def _ask_tool(request: LlmRequest) -> Turn:
    return Call(TOOL, {"order_id": _order_of(request)})


def _answer(request: LlmRequest) -> Turn:
    return Say(final_text(_order_of(request)))


def _die(request: LlmRequest) -> Turn:
    raise WorkerDied("killed during the model call")


def build_agent(dies_in: str | None = None) -> LlmAgent:
    """The app's root agent; ``dies_in`` (one of :data:`DIES_IN`) builds a dying worker's."""
    if dies_in is not None and dies_in not in DIES_IN:
        raise ValueError(f"dies_in must be one of {DIES_IN}")

    def check_order(order_id: str) -> dict[str, Any]:
        """Looks up an order's shipping status (read-only: safe to run again)."""
        if dies_in == "tool":
            raise WorkerDied("killed during the tool call")
        return {"order_id": order_id, "status": "shipped", "eta_days": 2}

    script = [
        _die if dies_in == "first_model_call" else _ask_tool,
        _die if dies_in == "second_model_call" else _answer,
    ]
    return LlmAgent(
        name=AGENT,
        model=ScriptedModel(script),
        instruction="You answer questions about orders.",
        tools=[check_order],
    )


def make_runner(store: Store, worker_id: str, dies_in: str | None = None) -> DurableRunner:
    """The DurableRunner every process of the bench uses (same app name, agent and tools)."""
    return DurableRunner(
        app=build_agent(dies_in),
        app_name=APP,
        store=store,
        worker_id=worker_id,
        idempotent_tools=[TOOL],
    )


CONCURRENCY = 4  # Sweeper's default: runs of a pass recovered side by side


async def _wait_for_go() -> bool:
    """Says ``ready`` and waits for ``go`` (blocking: nothing else runs on the loop)."""
    print("ready", flush=True)
    return sys.stdin.readline().strip() == "go"


def _report(
    worker_id: str, recovered: int, start: float, end: float, cpu: float, **more: Any
) -> None:
    print(
        json.dumps(
            {
                "worker": worker_id,
                "recovered": recovered,
                "passes": 1,
                "largest_pass": recovered,
                "start": start,
                "end": end,
                "cpu": cpu,
                "outcomes": {},
                **more,
            }
        ),
        flush=True,
    )


def adk_app() -> App:
    """The bench's app as ADK's own Runner gets it: the same agent, resumable."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ADK flags resumability as experimental
        resumable = ResumabilityConfig(is_resumable=True)
    return App(name=APP, root_agent=build_agent(), resumability_config=resumable)


async def read_orphans(url: str) -> list[tuple[Run, list[Event]]]:
    """Every orphaned run of the fixture with its session's stored events."""
    async with open_store(url) as store:
        ledger = RunLedger(store)
        sessions = DurableSessionService(store, cache_sessions=0)
        runs = await ledger.list_runs(status=RunStatus.RUNNING, limit=100_000)
        out: list[tuple[Run, list[Event]]] = []
        for run in sorted(runs, key=lambda r: r.run_id):
            if not run.user_id.startswith(CUSTOMERS):
                continue
            session = await sessions.get_session(
                app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
            )
            out.append((run, list(session.events) if session else []))
    return out


def _finished_once(events: Sequence[Event], order_id: str) -> bool:
    """The session holds the run's final text exactly once and every call answered once."""
    answer = final_text(order_id)
    finals = sum(
        1
        for e in events
        if e.author == AGENT and e.content and any(p.text == answer for p in e.content.parts or ())
    )
    calls = Counter(c.id for e in events for c in e.get_function_calls())
    answers = Counter(r.id for e in events for r in e.get_function_responses())
    return finals == 1 and bool(calls) and all(answers[c] == 1 for c in calls)


class RoundTripsInline(InMemorySessionService):
    """ADK's in-memory sessions making a recovery's round trips at their points.

    Before a run: the claim (one INSERT) and the session read (``reads``
    SELECTs); then one INSERT when a function call is appended (a recovery
    commits the call, with the events before it, before the tool runs), one
    when a function's answer is, and one when the run has ended (its last
    events and its finish): the units a recovery commits, as the bare
    statements of the floor (:func:`commit_floor`), each awaited where the
    durable run awaits it. The pass's own statements (its beat, its cancel
    look-up: about 0.1 per run) are left out. ``pool`` is None until
    :func:`floor_pool` opened it.
    """

    def __init__(self, essentials: bool = False) -> None:
        super().__init__()
        self.pool: Any = None
        self.payload = ""
        self.first = 0
        self.writes = 0
        self.reads = 0
        self.essentials = essentials
        """Also serialize each event once and check its nesting (``--mode essentials``)."""
        self.logs: dict[str, list[Event]] = {}
        """With ``essentials``: each session's events appended (its end is classified on them)."""

    async def insert(self) -> None:
        if self.pool is not None:
            self.writes += 1
            await self.pool.execute("INSERT INTO floor_rows (x) VALUES ($1)", self.payload)

    async def select(self) -> None:
        if self.pool is not None:
            self.reads += 1
            await self.pool.fetchrow("SELECT x FROM floor_rows WHERE id = $1", self.first)

    async def append_event(self, session: Any, event: Event) -> Event:
        if self.essentials:
            store_essentially(self.logs, session.id, event)
        out = await super().append_event(session, event)
        if not event.partial and (event.get_function_calls() or event.get_function_responses()):
            await self.insert()
        return out


async def in_memory_copies(
    orphans: Sequence[tuple[Run, list[Event]]], service: InMemorySessionService | None = None
) -> Runner:
    """ADK's Runner over an InMemorySessionService holding a copy of each orphan's session."""
    service = service if service is not None else InMemorySessionService()
    runner = Runner(app=adk_app(), session_service=service)
    for run, events in orphans:
        session = await service.create_session(
            app_name=APP, user_id=run.user_id, session_id=run.session_id
        )
        for event in events:
            await service.append_event(session, event)
    return runner


async def finish_in_memory(
    runner: Runner,
    orphans: Sequence[tuple[Run, list[Event]]],
    concurrency: int,
    reads: float = 0.0,
) -> None:
    """Finishes each orphan's remaining work with ADK's Runner, ``concurrency`` at a time.

    The call a recovery's re-drive makes: the run's stored message, under the
    run's invocation id when the session holds events of it (a resume); a run
    whose invocation left nothing stored starts afresh, as recovery starts a
    NOT_STARTED run. Over :class:`RoundTripsInline`, each run first makes its
    claim and ``reads`` (a mean, spread over the runs) session reads.
    """
    slots = asyncio.Semaphore(concurrency)
    service = runner.session_service
    inline = service if isinstance(service, RoundTripsInline) else None

    async def finish(index: int, run: Run, events: list[Event]) -> None:
        message = types.Content.model_validate_json(run.request)
        started = any(e.invocation_id == run.invocation_id for e in events)
        async with slots:
            if inline is not None:
                await inline.insert()
                for _ in range(_spread(reads, index)):
                    await inline.select()
            if inline is not None and inline.essentials:
                await essential_drive(runner, inline, run, events, message, started)
                await inline.insert()  # the run's last events and its finish
                return
            async for _ in runner.run_async(
                user_id=run.user_id,
                session_id=run.session_id,
                invocation_id=run.invocation_id if started else None,
                new_message=message,
            ):
                pass
            if inline is not None:
                await inline.insert()  # the run's last events and its finish

    await asyncio.gather(*(finish(i, run, events) for i, (run, events) in enumerate(orphans)))


async def essential_drive(
    runner: Runner,
    service: RoundTripsInline,
    run: Run,
    stored: list[Event],
    message: types.Content,
    started: bool,
) -> None:
    """ADK's re-drive of an orphan with the work no durable recovery skips (issue 45).

    The orphan classified from its stored events (what its claim read), the
    run stamped on its events, ADK driven in a task of its own handing its
    events over through a queue, a heartbeat task, each event serialized once
    (:class:`RoundTripsInline` with ``essentials``), the end classified, the
    tool on ADK's thread pool as a durable worker runs it.
    """
    classify(stored, run.invocation_id, root_agent_name=AGENT, owner_speaks_first=True)
    events = runner.run_async(
        user_id=run.user_id,
        session_id=run.session_id,
        invocation_id=run.invocation_id if started else None,
        new_message=message,
        run_config=essential_config(run.run_id, run.epoch + 1),
    )
    async for _ in handed_over(events):
        pass
    new = service.logs.pop(run.session_id, [])
    # A run that had stored nothing of its invocation went again as a new one (ADK named it).
    invocation = run.invocation_id if started or not new else new[-1].invocation_id
    # Its cost, not its verdict: that the run finished once is checked as for ADK's
    # own baseline (finished_once), over the same sessions.
    classify([*stored, *new], invocation, root_agent_name=AGENT, owner_speaks_first=True)


async def finished_once(runner: Runner, runs: Sequence[Run]) -> int:
    """How many runs' sessions hold the final text once and every call answered once."""
    checked = 0
    for run in runs:
        session = await runner.session_service.get_session(
            app_name=APP, user_id=run.user_id, session_id=run.session_id
        )
        order = run.session_id.removeprefix("order-")
        checked += session is not None and _finished_once(session.events, order)
    return checked


async def adk_baseline(
    url: str,
    worker_id: str,
    concurrency: int,
    inline: bool = False,
    reads: float = 0.0,
    essentials: bool = False,
) -> None:
    """ADK's Runner + InMemorySessionService finishing each orphan's remaining work.

    ``inline``: over :class:`RoundTripsInline`, making a recovery's round
    trips (``reads`` session reads per run) to the database at ``url``;
    ``essentials``: that, with a durable recovery's essential work
    (:func:`essential_drive`).
    """
    orphans = await read_orphans(url)  # the store is closed again: the timed part has none
    service = RoundTripsInline(essentials) if inline or essentials else InMemorySessionService()
    runner = await in_memory_copies(orphans, service)
    runs = [run for run, _ in orphans]
    # Warm-up: imports, ADK's first-run caches.
    await runner.session_service.create_session(
        app_name=APP, user_id=WARMUP_USER, session_id="warmup"
    )
    warm = types.Content(role="user", parts=[types.Part(text=request_text("W_adk"))])
    async for _ in runner.run_async(user_id=WARMUP_USER, session_id="warmup", new_message=warm):
        pass
    pool = None
    if isinstance(service, RoundTripsInline):  # after the warm-up: it makes no statements
        pool = await floor_pool(url)
        service.pool, service.payload, service.first = pool
    try:
        if not await _wait_for_go():
            return
        start = time.time()
        cpu0 = time.process_time()
        await finish_in_memory(runner, orphans, concurrency, reads)
        cpu = time.process_time() - cpu0
        end = time.time()
        statements = (
            {"writes": service.writes, "reads": service.reads}
            if isinstance(service, RoundTripsInline)
            else None
        )
        _report(
            worker_id,
            len(runs),
            start,
            end,
            cpu,
            checked=await finished_once(runner, runs),
            statements=statements,
        )
        sys.stdin.readline()  # "exit"
    finally:
        if pool is not None:
            await pool[0].close()


def _spread(per_run: float, index: int) -> int:
    """How many of ``per_run`` (a mean, maybe fractional) statements run ``index`` makes."""
    return math.floor((index + 1) * per_run) - math.floor(index * per_run)


async def floor_pool(url: str) -> tuple[Any, str, int]:
    """An asyncpg pool opened as PostgresStore opens it, with the floor's table, warmed up.

    Returns the pool, an event-sized row and the id of a row to read.
    """
    import asyncpg  # the floor talks to PostgreSQL as PostgresStore does, without our layers

    async def no_reset(connection: Any) -> None:
        return None  # as PostgresStore: no second round trip per pool call

    pool = await asyncpg.create_pool(url, min_size=1, max_size=10, reset=no_reset)
    await pool.execute(
        "CREATE TABLE IF NOT EXISTS floor_rows (id bigserial PRIMARY KEY, x text NOT NULL)"
    )
    payload = Event(
        invocation_id="e-floor",
        author=AGENT,
        content=types.Content(role="model", parts=[types.Part(text=final_text("A00000"))]),
    ).model_dump_json(exclude_none=True)
    first = await pool.fetchval("INSERT INTO floor_rows (x) VALUES ($1) RETURNING id", payload)
    for _ in range(20):  # warm-up: connections, prepared statements
        await pool.execute("INSERT INTO floor_rows (x) VALUES ($1)", payload)
        await pool.fetchrow("SELECT x FROM floor_rows WHERE id = $1", first)
    return pool, payload, first


async def commit_floor(
    url: str, worker_id: str, runs: int, writes: float, reads: float, concurrency: int
) -> None:
    """Only the round trips of ``runs`` recoveries: autocommit INSERTs and SELECTs."""
    pool, payload, first = await floor_pool(url)
    try:
        if not await _wait_for_go():
            return
        slots = asyncio.Semaphore(concurrency)

        async def one(index: int) -> None:
            async with slots:
                for _ in range(_spread(reads, index)):
                    await pool.fetchrow("SELECT x FROM floor_rows WHERE id = $1", first)
                for _ in range(_spread(writes, index)):
                    await pool.execute("INSERT INTO floor_rows (x) VALUES ($1)", payload)

        start = time.time()
        cpu0 = time.process_time()
        await asyncio.gather(*(one(i) for i in range(runs)))
        cpu = time.process_time() - cpu0
        end = time.time()
        _report(worker_id, runs, start, end, cpu, checked=runs)
        sys.stdin.readline()  # "exit": the parent has read the server's CPU use
    finally:
        await pool.close()


STEP_NAMES = ("claim", "session read", "classify", "drive")


class CpuSteps:
    """CPU of a recovery's steps, one run at a time: wrappers on the sweeper's objects.

    Each step's process CPU is read around it; with one run in flight nothing
    else runs meanwhile. A session read or classification inside the drive
    counts as the drive's.
    """

    def __init__(self, sweeper: Sweeper) -> None:
        self.seconds: dict[str, float] = dict.fromkeys(STEP_NAMES, 0.0)
        self._in_drive = False
        path = sweeper.runner
        self._wrap(sweeper.ledger, "claim_expired", "claim")
        self._wrap(sweeper.ledger, "cancel_expired", "claim")
        self._wrap(path.sessions, "get_session", "session read")
        self._wrap(path.sessions, "adopt_read", "session read")  # what the claim read
        self._wrap_sync(path, "classify", "classify")
        self._wrap(path, "run_to_end", "drive")

    def _charge(self, step: str, cpu0: float) -> None:
        if step == "drive" or not self._in_drive:
            self.seconds[step] += time.process_time() - cpu0

    def _wrap(self, obj: object, name: str, step: str) -> None:
        inner = getattr(obj, name)

        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            cpu0 = time.process_time()
            if step == "drive":
                self._in_drive = True
            try:
                return await inner(*args, **kwargs)
            finally:
                self._charge(step, cpu0)
                if step == "drive":
                    self._in_drive = False

        setattr(obj, name, wrapped)

    def _wrap_sync(self, obj: object, name: str, step: str) -> None:
        inner = getattr(obj, name)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            cpu0 = time.process_time()
            try:
                return inner(*args, **kwargs)
            finally:
                self._charge(step, cpu0)

        setattr(obj, name, wrapped)


async def serve(
    url: str, worker_id: str, batch: int, concurrency: int = CONCURRENCY, steps: bool = False
) -> None:
    async with open_store(url) as store:
        runner = make_runner(store, worker_id)
        # Warm-up: imports, ADK's first-run caches, prepared statements.
        async for _ in runner.run(
            user_id=WARMUP_USER,
            session_id=f"warmup-{worker_id}",
            message=request_text("W_" + re.sub(r"\W", "_", worker_id)),
        ):
            pass
        sweeper = Sweeper(runner, batch=batch, concurrency=concurrency)
        split = CpuSteps(sweeper) if steps else None
        print("ready", flush=True)
        # Blocking reads on purpose: nothing else runs on the loop while we wait.
        if sys.stdin.readline().strip() != "go":
            return
        start = time.time()
        cpu0 = time.process_time()
        recovered = 0
        passes = 0
        largest = 0  # the most runs one pass claimed (the batch asks for at most `batch`)
        end = start
        outcomes: Counter[str] = Counter()
        while True:
            done = await sweeper.recover_once()
            if not done:
                break
            passes += 1
            recovered += len(done)
            largest = max(largest, len(done))
            outcomes.update(f"{r.found.value}->{r.status.value}" for r in done)
            end = time.time()
        cpu = time.process_time() - cpu0
        print(
            json.dumps(
                {
                    "worker": worker_id,
                    "recovered": recovered,
                    "passes": passes,
                    "largest_pass": largest,
                    "start": start,
                    "end": end,
                    "cpu": cpu,
                    "outcomes": dict(outcomes),
                    "steps": split.seconds if split is not None else {},
                }
            ),
            flush=True,
        )
        sys.stdin.readline()  # "exit": the parent has read the server's CPU use


USAGE = (
    "usage: python -m bench.recovery_worker URL WORKER_ID [--batch N] "
    "[--mode recover|steps|adk|inline|essentials|floor] [--runs N --writes W --reads R] "
    "[--concurrency N]"
)


def _option(args: list[str], name: str, default: str) -> str:
    """Removes ``name VALUE`` from ``args``; returns VALUE (or ``default``)."""
    if name not in args:
        return default
    i = args.index(name)
    if i + 1 >= len(args):
        raise SystemExit(USAGE)
    value = args[i + 1]
    del args[i : i + 2]
    return value


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    batch = int(_option(args, "--batch", "20"))
    mode = _option(args, "--mode", "recover")
    runs = int(_option(args, "--runs", "0"))
    writes = float(_option(args, "--writes", "0"))
    reads = float(_option(args, "--reads", "0"))
    concurrency = int(_option(args, "--concurrency", str(CONCURRENCY)))
    if len(args) != 2 or mode not in ("recover", "steps", "adk", "inline", "essentials", "floor"):
        raise SystemExit(USAGE)
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    url, worker_id = args
    if mode in ("adk", "inline", "essentials"):
        inline, essentials = mode == "inline", mode == "essentials"
        asyncio.run(adk_baseline(url, worker_id, concurrency, inline, reads, essentials))
    elif mode == "floor":
        asyncio.run(commit_floor(url, worker_id, runs, writes, reads, concurrency))
    else:
        asyncio.run(serve(url, worker_id, batch, concurrency, steps=mode == "steps"))


if __name__ == "__main__":
    main()
