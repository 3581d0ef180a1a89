"""DurableRunner against ADK's Runner: one scripted run with one tool call.

Run from the repository root::

    .venv/bin/python -m bench.runner            # full run (~1-2 minutes)
    .venv/bin/python -m bench.runner --quick    # smaller run (~30 s)
    .venv/bin/python -m bench.runner --write    # also rewrite its BENCHMARKS.md section
    .venv/bin/python -m bench.runner --growth [--quick]  # one session, 200 (100) turns:
                                                # CPU per run at the last turns over the first

One run = a new session, the user's message, the model calls a Python tool,
the tool answers, the model answers with text (a ScriptedModel of two steps;
a script spans the session, so one model serves every fresh session). Eight
contenders drive the same App (the same agent, tool and script, ADK
resumability on, as DurableRunner requires):

* DurableRunner on SQLite and on PostgreSQL (its DurableSessionService on the
  same store), each with per-event commits (``commits="per_event"``) and
  with barrier commits (the default, docs/runs.md): ledger row, claim, lease
  heartbeat task, fenced appends, finish;
* ADK's Runner with InMemorySessionService (the floor: no durability at all),
  and the same with sync tools on ADK's tool thread pool, as DurableRunner runs
  them (``RunConfig.tool_thread_pool_config``): what that choice costs ADK alone;
* ADK's Runner with DatabaseSessionService on the same database kind
  (``sqlite+aiosqlite`` / ``postgresql+asyncpg``);
* the bounds, per backend: as many raw commits as a run makes; the run's own
  store calls replayed apart (a loop of units, no runner); and the bound the
  targets are judged against, ADK's in-memory Runner making the run's own
  units inline at the points where DurableRunner makes them
  (:class:`UnitsAtTheirPoints`): a runner whose only cost is its units;
  and the physical bound (issue 45, :class:`BareAtTheirPoints`): ADK's
  in-memory Runner with one bare commit of the same bytes (one statement,
  through the driver alone) at each of those points; on SQLite also the rows
  each unit wrote, bare, at those points (:class:`SameRowsAtTheirPoints`:
  what the rows themselves cost, with no check, guard or library code).

Timed: everything a caller does for one run on a new session. ADK's Runner
needs the session to exist (``create_session``, then ``run_async`` drained);
DurableRunner's ``run`` creates it itself, in the unit of work that records and
claims the run (``run_start``). Targets (VS_MEMORY_TARGET, VS_DATABASE_TARGET):
DurableRunner at most 1.25x the in-memory run on SQLite and 1.5x on PostgreSQL,
and DatabaseSessionService at least 7x / 5x DurableRunner.

Contenders run interleaved in small blocks with the order rotated every
block; ratios are the median over rounds of the ratio of round medians.
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import gc
import logging
import pstats
import sys
import tempfile
import time
import uuid
import warnings
from collections import Counter, defaultdict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, ToolThreadPoolConfig
from google.adk.apps import App, ResumabilityConfig
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.genai import types

from bench.common import (
    BareCommits,
    OtherLoad,
    PlacedUnits,
    PreparedReplays,
    Replay,
    SameRows,
    Units,
    analyze_databases,
    argv_flags,
    bench_main,
    fmt_ms,
    fmt_ratio,
    machine_note,
    md_table,
    median,
    percentile,
    profile_async,
    quiet,
    record_store_calls_at,
    rotate,
    server_version,
    unit_bytes,
    verdict,
)
from bench.sessions import (
    Appender,
    RawAsyncpgAppender,
    RawSqliteAppender,
    conversation_event,
)
from durable_adk.adk.commits.barrier import CommitMode
from durable_adk.adk.eventlog.classify import OrphanClass, classify
from durable_adk.adk.runner import DurableRunner, SyncTools
from durable_adk.adk.services.sessions import RUN_METADATA_KEY
from durable_adk.limits import DEFAULT_LIMITS
from durable_adk.store import Store, open_store
from durable_adk.store.queries import load_queries
from durable_adk.testing.pg_cluster import TempPostgres
from durable_adk.testing.scripted_model import Call, Say, ScriptedModel

APP = "bench_runner"
USER = "user_1"
AGENT = "shop_assistant"

# Targets per backend (issue 24, "A durable run at the commit floor").
VS_MEMORY_TARGET = {"sqlite": 1.25, "postgresql": 1.5}
"""DurableRunner at most this many times ADK's in-memory run."""
VS_DATABASE_TARGET = {"sqlite": 7.0, "postgresql": 5.0}
"""DatabaseSessionService's run at least this many times DurableRunner's."""

log = logging.getLogger("bench.runner")


@dataclass(frozen=True)
class Params:
    """How much to measure."""

    rounds: int
    runs_per_round: int
    block: int
    warmup: int
    profiled_runs: int
    breakdown_runs: int

    @classmethod
    def for_mode(cls, quick: bool) -> Params:
        if quick:
            return cls(
                rounds=3,
                runs_per_round=30,
                block=10,
                warmup=5,
                profiled_runs=10,
                breakdown_runs=20,
            )
        return cls(
            rounds=5,
            runs_per_round=60,
            block=10,
            warmup=10,
            profiled_runs=20,
            breakdown_runs=40,
        )


# ----------------------------------------------------------------------- app

_USER_TEXT = "Where is my order A1042? I ordered the blue trail runners last week."
_MODEL_TEXT = (
    "Your order A1042 (blue trail runners, size 43) has shipped: it left the Lyon "
    "warehouse yesterday and should arrive in 2 working days. Tracking number TRK-88231."
)


def lookup_order(order_id: str) -> dict[str, Any]:
    """Looks up an order by id."""
    return {"order_id": order_id, "status": "shipped", "eta_days": 2}


def make_app() -> App:
    """The App every contender drives: one agent, one tool, a two-step script."""
    agent = LlmAgent(
        name=AGENT,
        model=ScriptedModel([Call("lookup_order", {"order_id": "A1042"}), Say(_MODEL_TEXT)]),
        instruction="You help customers of an online shoe shop.",
        tools=[lookup_order],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ADK flags resumability as experimental
        resumable = ResumabilityConfig(is_resumable=True)
    return App(name=APP, root_agent=agent, resumability_config=resumable)


def _message() -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=_USER_TEXT)])


# ---------------------------------------------------------------- contenders


class Contender:
    """One way of running a turn on a new session; ``run_once`` is what is timed."""

    name: str
    backend: str  # "memory" | "sqlite" | "postgresql"
    durable: bool
    service: BaseSessionService
    last_session: str = ""

    async def run_once(self) -> int:
        """One run on a new session; returns the number of events yielded."""
        raise NotImplementedError

    def prepare(self, runs: int) -> None:
        """Work of the bench's own for the next ``runs`` runs, done before they are timed."""


class AdkContender(Contender):
    durable = False

    def __init__(
        self,
        name: str,
        backend: str,
        service: BaseSessionService,
        run_config: RunConfig | None = None,
    ) -> None:
        self.name = name
        self.backend = backend
        self.service = service
        self.run_config = run_config
        self.runner = Runner(app=make_app(), session_service=service)

    async def run_once(self) -> int:
        session = await self.service.create_session(app_name=APP, user_id=USER)
        self.last_session = session.id
        n = 0
        async for _ in self.runner.run_async(
            user_id=USER, session_id=session.id, new_message=_message(), run_config=self.run_config
        ):
            n += 1
        return n


class DurableContender(Contender):
    durable = True

    def __init__(
        self, backend: str, store: Store, commits: CommitMode, sync_tools: SyncTools = "pool"
    ) -> None:
        loop = ", sync tools on the loop" if sync_tools == "loop" else ""
        self.name = f"DurableRunner, {COMMITS_LABEL[commits]}{loop} ({backend})"
        self.bounds_of = f"DurableRunner, {COMMITS_LABEL[commits]} ({backend})"
        """The contender whose recorded run the bounds replay (the same units)."""
        self.backend = backend
        self.store = store
        self.commits = commits
        self.sync_tools = sync_tools
        self.commits_per_run = 0  # counted by open_contenders
        self.runner = DurableRunner(
            app=make_app(),
            store=store,
            worker_id=f"bench-{backend}-{commits}-{sync_tools}",
            commits=commits,
            sync_tools=sync_tools,
        )
        self.service = self.runner.sessions

    async def run_once(self) -> int:
        session_id = uuid.uuid4().hex
        self.last_session = session_id
        n = 0
        async for _ in self.runner.run(user_id=USER, session_id=session_id, message=_message()):
            n += 1
        return n


class RawCommitsContender(Contender):
    """The commit floor: as many single-row INSERT + COMMITs as a DurableRunner run makes.

    Uses the raw baselines of ``bench/sessions.py`` (the same driver and
    execution pattern as our store), writing an event-sized JSON text.
    """

    durable = False

    def __init__(self, backend: str, raw: Appender, commits: int) -> None:
        self.name = f"floor: {commits} raw commits ({backend})"
        self.backend = backend
        self.raw = raw
        self.commits = commits
        self._payload = raw.prepare(conversation_event(1))

    async def run_once(self) -> int:
        for _ in range(self.commits):
            await self.raw.append(self._payload)
        return 0


class UnitsReplayContender(Contender):
    """The units alone: a DurableRunner run's store calls, replayed with no runner.

    One run of the DurableRunner contender is recorded (each named query and
    its parameters, in order); each timed run sends the same calls to the
    same store with fresh ids, made before the clock starts
    (:class:`bench.common.PreparedReplays`). What
    it costs is what those units cost: their statements, the pages their
    commits write, the driver. A runner whose only cost is its units (ADK's
    in-memory run plus this) is the bound for the DurableRunner of the same
    units.
    """

    durable = False

    def __init__(self, of: DurableContender, units: Units) -> None:
        self.name = f"floor: its {len(units)} store calls replayed ({of.backend})"
        self.backend = of.backend
        self.store = of.store
        self.of = of.name
        self.units = units

        self.replays = PreparedReplays(of.store, units)

    def prepare(self, runs: int) -> None:
        self.replays.prepare(runs)

    async def run_once(self) -> int:
        await self.replays()
        return 0


class UnitsAtTheirPoints(InMemorySessionService):
    """ADK's in-memory session service, making a DurableRunner run's units as it goes.

    Each unit the recorded run wrote is sent again (fresh ids,
    :class:`bench.common.Replay`) at the point of ADK's run where the
    recorded one wrote it: after as many events of the invocation appended
    (the units placed before any, the run's start, go with its first event).
    This is a runner whose only cost is its units, made inline as
    DurableRunner makes them: ADK's own work then runs between commits (their
    syscalls, the database's pages in the caches), which the units replayed
    apart do not measure. Invocations are kept apart, so many may run at once.
    """

    def __init__(self, store: Store, units: PlacedUnits) -> None:
        super().__init__()
        self.store = store
        self.units = units
        self._last = max((at for _q, _p, at in units), default=0)
        # By invocation: its replay, its calls (fresh ids), the events appended.
        self._runs: dict[str, tuple[Replay, PlacedUnits, int]] = {}
        self._ready: list[tuple[Replay, PlacedUnits]] = []

    def prepare(self, runs: int) -> None:
        """Makes the fresh ids of the next ``runs`` runs' units before they are timed."""
        for _ in range(runs):
            replay = Replay(self.store)
            fresh = replay.fresh([(q, p) for q, p, _at in self.units])
            placed = [(q, p, at) for (q, p), (_q, _p, at) in zip(fresh, self.units, strict=True)]
            self._ready.append((replay, placed))

    async def _send_at(self, replay: Replay, units: PlacedUnits, appended: int) -> None:
        for query, params, at in units:
            if at == appended:
                await replay.send(query, params, fresh=True)

    async def append_event(self, session: Any, event: Any) -> Any:
        if event.partial:
            return await super().append_event(session, event)
        invocation = event.invocation_id
        if invocation not in self._runs:
            if not self._ready:
                self.prepare(1)  # not prepared: the swap is then timed with the run
            replay, units = self._ready.pop()
            self._runs[invocation] = (replay, units, 0)
            await self._send_at(replay, units, 0)
        out = await super().append_event(session, event)
        replay, units, appended = self._runs[invocation]
        appended += 1
        self._runs[invocation] = (replay, units, appended)
        await self._send_at(replay, units, appended)
        if appended >= self._last:
            del self._runs[invocation]  # every unit sent: later events add none
        return out


class BareAtTheirPoints(UnitsAtTheirPoints):
    """ADK's in-memory session service with one bare commit where a recorded run made a unit.

    The physical bound (issue 45): at each point of ADK's run where the
    recorded DurableRunner run wrote a unit, one single-statement commit of
    the same bytes (:func:`bench.common.unit_bytes` of the unit's parameters)
    through the driver alone (:class:`bench.common.BareCommits`): no library
    code, no fence, no indexes but the row's key. The recorded run's reads
    (none on a one-tool run's hot path) are left out.
    """

    def __init__(self, store: Store, units: PlacedUnits, bare: BareCommits) -> None:
        writes = [(q, p, at) for q, p, at in units if store.writes(q)]
        super().__init__(store, writes)
        self.bare = bare
        self._payloads = [(unit_bytes(p), at) for _q, p, at in writes]

    def prepare(self, runs: int) -> None:
        """Nothing to make fresh: a bare commit's bytes are the recorded ones."""
        self._ready.extend((None, self.units) for _ in range(runs))  # type: ignore[misc]

    async def _send_at(self, replay: Replay, units: PlacedUnits, appended: int) -> None:
        for payload, at in self._payloads:
            if at == appended:
                await self.bare.commit(payload)


class SameRowsAtTheirPoints(UnitsAtTheirPoints):
    """ADK's in-memory session service writing, where a recorded run made a unit, the
    rows that unit wrote, bare (:class:`bench.common.SameRows`; SQLite).

    Between the physical bound (one row of the same bytes per unit) and the
    units themselves: what the rows a durable run needs cost (their tables,
    indexes and pages), with no check, guard or read and no library code.
    """

    def __init__(self, store: Store, units: PlacedUnits, same: SameRows) -> None:
        writes = [(q, p, at) for q, p, at in units if store.writes(q)]
        super().__init__(store, writes)
        self.same = same
        self._at = [at for _q, _p, at in writes]

    def prepare(self, runs: int) -> None:
        """Fresh ids for the next ``runs`` runs' rows, before they are timed."""
        for _ in range(runs):
            rows = self.same.fresh()
            # The run's state is the map of the keys its rows were given.
            placed = [("rows", {"rows": r}, at) for r, at in zip(rows, self._at, strict=True)]
            self._ready.append(({}, placed))  # type: ignore[arg-type]

    async def _send_at(self, replay: Any, units: PlacedUnits, appended: int) -> None:
        for _name, params, at in units:
            if at == appended:
                self.same.write(params["rows"], replay)


class SameRowsAtTheirPointsContender(AdkContender):
    """ADK's in-memory Runner writing each unit's rows bare at its point (SQLite)."""

    def __init__(self, of: DurableContender, units: PlacedUnits, same: SameRows) -> None:
        service = SameRowsAtTheirPoints(of.store, units, same)
        super().__init__(
            f"bound: in-memory, the same rows bare at its units' points ({of.backend})",
            of.backend,
            service,
        )
        self.of = of.name

    def prepare(self, runs: int) -> None:
        assert isinstance(self.service, SameRowsAtTheirPoints)
        self.service.prepare(runs)


class BareAtTheirPointsContender(AdkContender):
    """ADK's in-memory Runner with one bare commit at each point of a unit (the physical bound).

    With ``pool``, ADK's Runner runs the sync tool on its tool thread pool, as
    DurableRunner does by default (``sync_tools="pool"``): the bound of a
    runner whose only cost is its commits, its tools where ours run.
    """

    def __init__(
        self, of: DurableContender, units: PlacedUnits, bare: BareCommits, pool: bool = False
    ) -> None:
        service = BareAtTheirPoints(of.store, units, bare)
        where = ", sync tools on ADK's thread pool" if pool else ""
        super().__init__(
            f"bound: in-memory, {len(service.units)} bare commits at its units' points{where} "
            f"({of.backend})",
            of.backend,
            service,
            RunConfig(tool_thread_pool_config=ToolThreadPoolConfig()) if pool else None,
        )
        self.of = of.name
        self.pool = pool


class UnitsInterleavedContender(AdkContender):
    """ADK's in-memory Runner with a DurableRunner run's units at their points (the bound)."""

    def __init__(self, of: DurableContender, units: PlacedUnits) -> None:
        super().__init__(
            f"floor: in-memory, its {len(units)} store calls at their points ({of.backend})",
            of.backend,
            UnitsAtTheirPoints(of.store, units),
        )
        self.of = of.name

    def prepare(self, runs: int) -> None:
        assert isinstance(self.service, UnitsAtTheirPoints)
        self.service.prepare(runs)

    @staticmethod
    async def record(c: DurableContender) -> PlacedUnits:
        """The store calls of one run of ``c``, each placed by the events appended before it."""
        return await record_store_calls_at(c.store, c.run_once, c.runner.sessions)


def essential_config(run_id: str, epoch: int = 1) -> RunConfig:
    """A durable run's RunConfig: its run stamped on every event (ADK stamps
    ``custom_metadata``), sync tools on ADK's thread pool as DurableRunner runs them."""
    return RunConfig(
        tool_thread_pool_config=ToolThreadPoolConfig(),
        custom_metadata={RUN_METADATA_KEY: {"run_id": run_id, "epoch": epoch}},
    )


def store_essentially(logs: dict[str, list[Any]], session_id: str, event: Any) -> None:
    """What any durable session service does with an event before its row: serializes it
    once and checks its nesting; ``logs`` keeps it (the run's end is classified on them)."""
    if not event.partial:
        DEFAULT_LIMITS.check_event(event.model_dump_json(exclude_none=True), "the event")
        logs.setdefault(session_id, []).append(event)


async def handed_over(
    events: AsyncIterator[Any], admission: Any = None
) -> AsyncGenerator[Any, None]:
    """ADK's ``events`` driven in a task of its own (a run goes on when its caller leaves),
    each handed to the caller through a queue, a heartbeat task beside the drive; with
    ``admission``, the drive admitted by it first, as DurableRunner's drives are."""
    handed: asyncio.Queue[Any] = asyncio.Queue()

    async def pump() -> None:
        admitted = admission is None or await admission.enter()
        try:
            async for event in events:
                handed.put_nowait(event)
        finally:
            if admission is not None and admitted:
                admission.leave()
            handed.put_nowait(None)

    heartbeat = asyncio.create_task(asyncio.sleep(3600))
    drive = asyncio.create_task(pump())
    try:
        while (event := await handed.get()) is not None:
            yield event
        await drive
    finally:
        heartbeat.cancel()


class EssentialsAtTheirPoints(UnitsAtTheirPoints):
    """:class:`UnitsAtTheirPoints` that also stores each event essentially
    (:func:`store_essentially`)."""

    def __init__(self, store: Store, units: PlacedUnits) -> None:
        super().__init__(store, units)
        self.logs: dict[str, list[Any]] = {}
        """Each session's stored events, by session id (what a run's end is classified on)."""

    async def append_event(self, session: Any, event: Any) -> Any:
        store_essentially(self.logs, session.id, event)
        return await super().append_event(session, event)


class EssentialsContender(AdkContender):
    """The least a durable runner over ADK's Runner does beyond its units (issue 45).

    ADK's in-memory Runner with a DurableRunner run's units at their points
    (:class:`UnitsAtTheirPoints`), and what no design of such a runner
    skips: each event serialized once and its nesting checked
    (:class:`EssentialsAtTheirPoints`); the run stamped on every event (ADK
    stamps ``RunConfig.custom_metadata``); ADK driven in a task of its own,
    its events handed to the caller through a queue (a run goes on when its
    caller leaves); the lease's heartbeat task started and stopped; the end
    classified from the run's events; the sync tool on ADK's thread pool, as
    DurableRunner runs it. Not in it: a fence, a cache of the session, the
    ledger's row read back, barriers decided per callback, a hand-over in
    lock-step with the caller, plugins: the parts a rewrite of the run path
    could make cheaper, not drop.
    """

    def __init__(self, of: DurableContender, units: PlacedUnits) -> None:
        super().__init__(
            f"floor: in-memory, its {len(units)} store calls at their points and a durable "
            f"run's essential work ({of.backend})",
            of.backend,
            EssentialsAtTheirPoints(of.store, units),
        )
        self.of = of.name

    def prepare(self, runs: int) -> None:
        assert isinstance(self.service, UnitsAtTheirPoints)
        self.service.prepare(runs)

    async def run_once(self) -> int:
        session = await self.service.create_session(app_name=APP, user_id=USER)
        self.last_session = session.id
        events = self.runner.run_async(
            user_id=USER,
            session_id=session.id,
            new_message=_message(),
            run_config=essential_config(uuid.uuid4().hex),
        )
        n = 0
        async for _ in handed_over(events):
            n += 1
        assert isinstance(self.service, EssentialsAtTheirPoints)
        log = self.service.logs.pop(session.id)
        verdict = classify(
            log, log[-1].invocation_id, root_agent_name=AGENT, owner_speaks_first=True
        )
        assert verdict.cls is OrphanClass.ACTUALLY_DONE, verdict
        return n


IN_MEMORY = "ADK Runner + InMemorySessionService"
IN_MEMORY_POOL = "ADK Runner + InMemorySessionService, sync tools on ADK's thread pool"
COMMITS_LABEL: dict[CommitMode, str] = {"per_event": "per-event", "barrier": "barrier"}
WRITE_QUERIES = frozenset(name for name, q in load_queries("sqlite").items() if q.writes)
"""The store's units that write (a commit each): what a run's commits are counted from."""


async def same_rows_of(tmp: Path, units: Units, stack: contextlib.AsyncExitStack) -> SameRows:
    """The rows ``units`` write, bare (SQLite): captured on a database of their own, then
    written into another of the same schema through sqlite3 alone (closed with ``stack``)."""
    async with open_store(f"sqlite:///{tmp / 'runner_capture.db'}") as capture:
        changes = await SameRows.capture(capture, units)
    async with open_store(f"sqlite:///{tmp / 'runner_rows.db'}"):
        pass  # the schema; the rows go in through sqlite3 alone
    same = SameRows(str(tmp / "runner_rows.db"), changes).open()
    stack.callback(same.close)
    return same


@contextlib.asynccontextmanager
async def open_contenders(tmp: Path, pg: TempPostgres) -> AsyncIterator[list[Contender]]:
    async with contextlib.AsyncExitStack() as stack:
        sqlite_store = await stack.enter_async_context(
            open_store(f"sqlite:///{tmp / 'runner_ours.db'}")
        )
        pg_store = await stack.enter_async_context(open_store(pg.create_database("runner_ours")))
        adk_sqlite = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{tmp / 'runner_adk.db'}")
        stack.push_async_callback(adk_sqlite.close)
        adk_pg_url = pg.create_database("runner_adk").replace(
            "postgresql://", "postgresql+asyncpg://", 1
        )
        adk_pg = DatabaseSessionService(db_url=adk_pg_url)
        stack.push_async_callback(adk_pg.close)
        contenders: list[Contender] = [
            DurableContender(backend, backend_store, commits)
            for backend, backend_store in (("sqlite", sqlite_store), ("postgresql", pg_store))
            for commits in ("per_event", "barrier")
        ]
        # DurableRunner(sync_tools="loop"): ADK's own default, no thread hop (issue 45).
        contenders += [
            DurableContender(backend, backend_store, "barrier", "loop")
            for backend, backend_store in (("sqlite", sqlite_store), ("postgresql", pg_store))
        ]
        contenders += [
            AdkContender(IN_MEMORY, "memory", InMemorySessionService()),
            # What DurableRunner's choice to run sync tools off the loop costs ADK alone.
            AdkContender(
                IN_MEMORY_POOL,
                "memory",
                InMemorySessionService(),
                RunConfig(tool_thread_pool_config=ToolThreadPoolConfig()),
            ),
            AdkContender("ADK Runner + DatabaseSessionService (sqlite)", "sqlite", adk_sqlite),
            AdkContender("ADK Runner + DatabaseSessionService (postgresql)", "postgresql", adk_pg),
        ]
        # How many commits a DurableRunner run makes: one counted run per contender.
        for c in contenders:
            if isinstance(c, DurableContender):
                with StoreCalls(c.store) as calls:
                    await c.run_once()
                c.commits_per_run = sum(n for q, n in calls.calls.items() if q in WRITE_QUERIES)
        raws: dict[str, Appender] = {
            "sqlite": RawSqliteAppender(str(tmp / "runner_raw.db")),
            "postgresql": RawAsyncpgAppender(pg.create_database("runner_raw")),
        }
        for raw in raws.values():
            await raw.open()
            stack.push_async_callback(raw.close)
        floors = sorted(
            {(c.backend, c.commits_per_run) for c in contenders if isinstance(c, DurableContender)}
        )
        contenders += [RawCommitsContender(b, raws[b], n) for b, n in floors]
        bares: dict[str, BareCommits] = {
            "sqlite": BareCommits(f"sqlite:///{tmp / 'runner_bare.db'}"),
            "postgresql": BareCommits(pg.create_database("runner_bare")),
        }
        for bare in bares.values():
            await bare.open()
            stack.push_async_callback(bare.close)
        # One recorded run per barrier contender serves the three bounds: its units
        # replayed apart, made inline at their points in ADK's run, and one bare
        # commit of the same bytes at each of those points (the physical bound).
        for c in [c for c in contenders if isinstance(c, DurableContender)]:
            if c.commits == "barrier" and c.sync_tools == "pool":
                placed = await UnitsInterleavedContender.record(c)
                units = [(query, params) for query, params, _at in placed]
                contenders += [
                    UnitsReplayContender(c, units),
                    UnitsInterleavedContender(c, placed),
                    EssentialsContender(c, placed),
                    BareAtTheirPointsContender(c, placed, bares[c.backend]),
                    BareAtTheirPointsContender(c, placed, bares[c.backend], pool=True),
                ]
                if c.backend == "sqlite":
                    same = await same_rows_of(tmp, units, stack)
                    contenders.append(SameRowsAtTheirPointsContender(c, placed, same))
        yield contenders


# ----------------------------------------------------------------- measuring


@dataclass
class RunResult:
    names: list[str]
    samples: dict[str, list[float]] = field(default_factory=dict)  # pooled over rounds
    round_medians: dict[str, list[float]] = field(default_factory=dict)
    events_yielded: dict[str, int] = field(default_factory=dict)
    events_stored: dict[str, int] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)  # process CPU per run, pooled

    def round_ratio(
        self, numerator: str | Sequence[str], denominator: str | Sequence[str]
    ) -> float:
        """Median over rounds of (numerator's round median / denominator's).

        A list of names stands for the sum of their round medians.
        """

        def per_round(names: str | Sequence[str]) -> list[float]:
            names = [names] if isinstance(names, str) else list(names)
            columns = [self.round_medians[n] for n in names]
            return [sum(values) for values in zip(*columns, strict=True)]

        pairs = zip(per_round(numerator), per_round(denominator), strict=True)
        return median([n / d for n, d in pairs])

    def low(self, names: str | Sequence[str]) -> float:
        """The 10th percentile of the pooled samples (summed for a list of names).

        The runs least disturbed by other tenants of the machine: their load
        only ever adds time, so on a saturated machine the low decile shows
        what the code costs better than the median does.
        """
        names = [names] if isinstance(names, str) else list(names)
        return sum(percentile(self.samples[n], 10) for n in names)

    def low_ratio(self, numerator: str | Sequence[str], denominator: str | Sequence[str]) -> float:
        return self.low(numerator) / self.low(denominator)


async def _run_block(
    c: Contender, runs: int, into: list[float], cpu: list[float] | None = None
) -> int:
    """``runs`` runs; appends each one's wall time to ``into`` and its CPU time to ``cpu``."""
    yielded = 0
    c.prepare(runs)
    for _ in range(runs):
        c0 = time.process_time()
        t0 = time.perf_counter()
        yielded = await c.run_once()
        into.append(time.perf_counter() - t0)
        if cpu is not None:
            cpu.append(time.process_time() - c0)
    return yielded


async def settled(contenders: Sequence[Contender], p: Params, pg: TempPostgres) -> None:
    """The PostgreSQL databases as a worker in service finds them: the runs the
    timed rounds will add made first (untimed), then analyzed, as autovacuum
    would have (:func:`bench.common.analyze_databases`)."""
    for c in contenders:
        if isinstance(c, DurableContender) and c.backend == "postgresql":
            await _run_block(c, p.rounds * p.runs_per_round, [])
    analyze_databases(pg)


async def measure(
    contenders: Sequence[Contender],
    p: Params,
    settle: Callable[[], Awaitable[None]] | None = None,
) -> RunResult:
    """Warms every contender up, awaits ``settle`` (if given), then times the rounds."""
    result = RunResult([c.name for c in contenders])
    for c in contenders:  # warm-up: connections, prepared statements, ORM and ADK caches
        result.events_yielded[c.name] = await _run_block(c, p.warmup, [])
        result.samples[c.name] = []
        result.cpu[c.name] = []
        result.round_medians[c.name] = []
    if settle is not None:
        await settle()
    for rnd in range(p.rounds):
        gc.collect()
        this_round: dict[str, list[float]] = {c.name: [] for c in contenders}
        for block_no, start in enumerate(range(0, p.runs_per_round, p.block)):
            runs = min(p.block, p.runs_per_round - start)
            for c in rotate(contenders, rnd + block_no):
                await _run_block(c, runs, this_round[c.name], result.cpu[c.name])
        for name, values in this_round.items():
            result.samples[name].extend(values)
            result.round_medians[name].append(median(values))
        print(f"  round {rnd + 1}/{p.rounds} done", flush=True)
    for c in contenders:
        if isinstance(c, (RawCommitsContender, UnitsReplayContender)):
            continue
        session = await c.service.get_session(app_name=APP, user_id=USER, session_id=c.last_session)
        result.events_stored[c.name] = len(session.events) if session else -1
    return result


class StoreCalls:
    """Counts the named queries a store runs, and the time spent in each.

    Wraps ``store.fetch`` (every other call of the Store API goes through it).
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.calls: Counter[str] = Counter()
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self._inner = store.fetch

    async def _fetch(self, query: str, params: Any = None) -> Any:
        t0 = time.perf_counter()
        try:
            return await self._inner(query, params)
        finally:
            self.calls[query] += 1
            self.seconds[query] += time.perf_counter() - t0

    def __enter__(self) -> StoreCalls:
        self.store.fetch = self._fetch  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        del self.store.fetch  # back to the class's method

    def table(self, runs: int, wall: float) -> str:
        total_s = sum(self.seconds.values())
        rows = [
            [
                f"`{q}`",
                f"{self.calls[q] / runs:.1f}",
                fmt_ms(self.seconds[q] / self.calls[q]),
                fmt_ms(self.seconds[q] / runs),
            ]
            for q in sorted(self.calls, key=lambda q: -self.seconds[q])
        ]
        rows.append(
            [
                "**all store calls**",
                f"{sum(self.calls.values()) / runs:.1f}",
                "",
                f"{fmt_ms(total_s / runs)} of {fmt_ms(wall / runs)} per run ({total_s / wall:.0%})",
            ]
        )
        return md_table(["query", "calls per run", "mean per call", "per run"], rows)


async def breakdown(c: DurableContender, runs: int) -> str:
    """Round trips of DurableRunner per run, by query (a separate, untimed-for-ratios pass)."""
    with StoreCalls(c.store) as calls:
        t0 = time.perf_counter()
        await _run_block(c, runs, [])
        wall = time.perf_counter() - t0
    return calls.table(runs, wall)


# -------------------------------------------------------------------- report


def run_table(r: RunResult) -> str:
    rows = []
    for name in r.names:
        values = r.samples[name]
        rows.append(
            [
                name,
                len(values),
                r.events_yielded[name] if name in r.events_stored else "",
                r.events_stored.get(name, ""),
                fmt_ms(median(values)),
                fmt_ms(percentile(values, 99)),
                fmt_ratio(r.round_ratio(name, IN_MEMORY)),
                fmt_ms(r.low(name)),
                fmt_ratio(r.low_ratio(name, IN_MEMORY)),
                fmt_ms(median(r.cpu[name])),
                fmt_ratio(median(r.cpu[name]) / median(r.cpu[IN_MEMORY])),
            ]
        )
    return md_table(
        [
            "contender",
            "runs",
            "events yielded",
            "events stored",
            "median",
            "p99",
            "median / in-memory",
            "p10",
            "p10 / in-memory",
            "process CPU per run",
            "CPU / in-memory",
        ],
        rows,
    )


def target_rows(
    r: RunResult, contenders: Sequence[Contender]
) -> tuple[list[list[str]], list[tuple[str, str, str, str, str]]]:
    rows: list[list[str]] = []
    headline: list[tuple[str, str, str, str, str]] = []
    for c in contenders:
        if not isinstance(c, DurableContender):
            continue
        backend, ours, of = c.backend, c.name, c.bounds_of
        adk = next(
            a
            for a in contenders
            if isinstance(a, AdkContender)
            and not isinstance(
                a,
                (
                    UnitsInterleavedContender,
                    BareAtTheirPointsContender,
                    SameRowsAtTheirPointsContender,
                    EssentialsContender,
                ),
            )
            and a.backend == backend
        )
        raw = next(
            w
            for w in contenders
            if isinstance(w, RawCommitsContender)
            and w.backend == backend
            and w.commits == c.commits_per_run
        )
        floor = [IN_MEMORY, raw.name]
        replay = next(
            (u for u in contenders if isinstance(u, UnitsReplayContender) and u.of == of), None
        )
        units = [IN_MEMORY, replay.name] if replay is not None else None
        inline = next(
            (u for u in contenders if isinstance(u, UnitsInterleavedContender) and u.of == of),
            None,
        )
        bares = {
            u.pool: u
            for u in contenders
            if isinstance(u, BareAtTheirPointsContender) and u.of == of
        }
        bare = bares.get(False)
        # The bound with the sync tool where ours runs it (for the loop: the first).
        bare_pool = bares.get(True) if c.sync_tools == "pool" else None
        same = next(
            (u for u in contenders if isinstance(u, SameRowsAtTheirPointsContender) and u.of == of),
            None,
        )
        essentials = next(
            (u for u in contenders if isinstance(u, EssentialsContender) and u.of == of), None
        )
        for label, target, at_least, bound in (
            (
                "DurableRunner / in-memory",
                VS_MEMORY_TARGET[backend],
                False,
                (f"(in-memory + {raw.commits} raw commits) / in-memory", floor, IN_MEMORY),
            ),
            (
                "DatabaseSessionService / DurableRunner",
                VS_DATABASE_TARGET[backend],
                True,
                (
                    f"DatabaseSessionService / (in-memory + {raw.commits} raw commits)",
                    adk.name,
                    floor,
                ),
            ),
        ):

            def against(
                bound: str | Sequence[str], at_least: bool = at_least, adk_name: str = adk.name
            ) -> str:
                """A bound's ratio, read the way this target reads ours."""
                if at_least:
                    return fmt_ratio(r.round_ratio(adk_name, bound))
                return fmt_ratio(r.round_ratio(bound, IN_MEMORY))

            num, den = (ours, IN_MEMORY) if not at_least else (adk.name, ours)
            mid, low = r.round_ratio(num, den), r.low_ratio(num, den)
            v_mid = verdict(mid, target, at_least=at_least)
            v_low = verdict(low, target, at_least=at_least)
            bound_label, bound_num, bound_den = bound
            rows.append(
                [
                    ours,
                    f"{c.commits_per_run}",
                    label,
                    f"{'>=' if at_least else '<='} {target:g}x",
                    fmt_ratio(mid),
                    v_mid,
                    fmt_ratio(low),
                    v_low,
                    f"{bound_label} = {fmt_ratio(r.round_ratio(bound_num, bound_den))} "
                    f"(p10: {fmt_ratio(r.low_ratio(bound_num, bound_den))})"
                    + (
                        ""
                        if units is None
                        else "; with its own units replayed instead: " + against(units)
                    )
                    + (
                        ""
                        if inline is None
                        else "; **its own units at their points in ADK's run: "
                        + against(inline.name)
                        + "**"
                    )
                    + (
                        ""
                        if bare is None
                        else "; physical bound, one bare commit at each unit's point: "
                        + against(bare.name)
                        + f", ours / it {fmt_ratio(r.round_ratio(ours, bare.name))}"
                        f" (p10 {fmt_ratio(r.low_ratio(ours, bare.name))})"
                    )
                    + (
                        ""
                        if bare_pool is None
                        else "; the same, sync tools on ADK's thread pool as ours: "
                        + against(bare_pool.name)
                        + f", ours / it {fmt_ratio(r.round_ratio(ours, bare_pool.name))}"
                        f" (p10 {fmt_ratio(r.low_ratio(ours, bare_pool.name))})"
                    )
                    + (
                        ""
                        if essentials is None or bare is None
                        else "; its units at their points with a durable run's essential work "
                        "(events serialized, a task and a queue, a heartbeat, the end "
                        "classified, the tool on the pool): "
                        + against(essentials.name)
                        + f", it / the physical bound "
                        f"{fmt_ratio(r.round_ratio(essentials.name, bare.name))}"
                        f" (p10 {fmt_ratio(r.low_ratio(essentials.name, bare.name))})"
                    )
                    + (
                        ""
                        if same is None
                        else "; the same rows bare at each unit's point: "
                        + against(same.name)
                        + f", ours / it {fmt_ratio(r.round_ratio(ours, same.name))}"
                        f" (p10 {fmt_ratio(r.low_ratio(ours, same.name))})"
                    ),
                ]
            )
            what = (
                f"{ours} / in-memory run"
                if not at_least
                else f"DatabaseSessionService ({backend}) run / {ours}"
            )
            headline.append((what, fmt_ratio(mid), v_mid, fmt_ratio(low), v_low))
    return rows, headline


# ==================================================================== driver


async def run(quick: bool = False) -> str:
    """Runs the bench; prints its tables; returns the Markdown section."""
    p = Params.for_mode(quick)
    started = time.perf_counter()
    profiles: dict[str, str] = {}
    breakdowns: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="dadk-bench-runner-") as tmp, TempPostgres() as pg:
        pg_version = await server_version(pg.admin_url)
        async with open_contenders(Path(tmp), pg) as contenders:
            with OtherLoad(pg.data_dir) as load:
                result = await measure(contenders, p, lambda: settled(contenders, p, pg))
            for c in contenders:
                if isinstance(c, DurableContender):
                    breakdowns[c.name] = await breakdown(c, p.breakdown_runs)
            for c in contenders:
                if isinstance(c, DurableContender):

                    async def profiled(c: DurableContender = c) -> None:
                        await _run_block(c, p.profiled_runs, [])

                    profiles[c.name] = await profile_async(profiled, top=16)
    elapsed = time.perf_counter() - started
    table = run_table(result)
    targets, headline = target_rows(result, contenders)
    target_table = md_table(
        [
            "contender",
            "commits per run",
            "ratio",
            "target",
            "measured (median)",
            "verdict (median)",
            "measured (p10)",
            "verdict (p10)",
            "bound: the same ratio for a runner with no cost but its commits",
        ],
        targets,
    )
    print(f"\n{table}\n\n{target_table}\n", flush=True)
    for name, text in breakdowns.items():
        print(f"[{name}] store calls per run\n{text}\n", flush=True)
    print(f"timed rounds: {load.note()}", flush=True)
    print(f"runner bench finished in {elapsed:.0f} s", flush=True)

    mode = "quick (`--quick`)" if quick else "full"
    out: list[str] = []
    out.append("## DurableRunner (`bench/runner.py`)")
    out.append(
        f"Run: {mode}, {time.strftime('%Y-%m-%d %H:%M %Z')}, {elapsed:.0f} s. "
        f"Machine: {machine_note(f'PostgreSQL {pg_version} (TempPostgres, fsync on)')}. "
        f"Timed rounds: {load.note()}."
    )
    out.append("### Headline")
    out.append(
        md_table(
            ["ratio", "measured (median)", "verdict", "measured (p10)", "verdict (p10)"],
            headline,
        )
    )
    out.append("### (a) one scripted run with one tool call")
    out.append(
        "One run = a new session, the user's message, the model calls a Python tool, the tool "
        "answers, the model answers with text: a ScriptedModel of two steps (a script spans "
        "the session, so one model serves every new session). All contenders drive the "
        "same App (same agent, tool and script, ADK resumability on, as DurableRunner "
        "requires), each with its own database file (SQLite, same directory) or database "
        "(same PostgreSQL server). Timed: all a caller does for one run on a new session: "
        "ADK's Runner needs the session first (`create_session`, then `run_async` drained); "
        "`DurableRunner.run` creates it itself in the unit that writes and claims the ledger "
        "row (`run_start`), starts the lease heartbeat, appends fenced events, classifies "
        "the end (from its session cache) and finishes the row. *per-event*: one unit per "
        'stored event (`DurableRunner(commits="per_event")`); *barrier* (the default): a '
        "run's events written together at barriers (before an agent starts or ends, a model "
        "call or a tool, before the caller sees them, at the end; docs/runs.md). "
        f"{p.rounds} rounds of {p.runs_per_round} runs per contender, in blocks of {p.block} "
        f"interleaved between contenders with the order rotated every block; {p.warmup} "
        "warm-up runs first. Ratios are the median over rounds of the ratio of round medians; "
        "*p10* ratios compare the 10th percentiles of the pooled runs (the runs least "
        "disturbed by other tenants: their load only adds time). "
        "ADK's DatabaseSessionService runs as shipped (on SQLite: the default rollback "
        "journal); ours uses WAL + synchronous=FULL, and PostgreSQL runs with fsync on. "
        "*floor* rows: as many single-row INSERT + COMMITs as one DurableRunner run makes "
        "(counted: `run_start`, each `append_event` or `append_events`, `run_finish`), through "
        "the raw baselines of `bench/sessions.py` "
        "(same driver and execution pattern as our store), interleaved like the others: "
        "*in-memory + floor* is what a runner whose only cost is its commits would take, "
        "which bounds both targets (last column of the targets table). *bound: ... bare "
        "commits at its units' points*: the physical bound (issue 45), ADK's in-memory Runner "
        "with one bare commit (a single autocommit INSERT of the unit's text parameters, "
        "through sqlite3 or asyncpg alone) at each point of its run where DurableRunner "
        "makes a unit. *process CPU per run*: "
        "`time.process_time()` over the run (every thread of the process; the PostgreSQL "
        "server's CPU is not in it)."
    )
    out.append(table)
    out.append("Targets:\n\n" + target_table)
    out.append("### Where DurableRunner's time goes")
    out.append(
        f"Store round trips per run, by named query, over {p.breakdown_runs} more runs per "
        "backend after the timed rounds (`store.fetch` wrapped with a timer; a query's time "
        "includes waiting for the event loop). The rest of a run is ADK's own work (about the "
        "in-memory run) plus our Python around the store calls."
    )
    for name, text in breakdowns.items():
        out.append(f"**{name}**\n\n{text}")
    out.append(
        "cProfile of DurableRunner runs (event-loop thread only; SQLite's appends and ledger "
        "writes run on that thread, as `inline` units, so their commits show up as "
        "`sqlite3.Connection.execute`). Paths shortened."
    )
    for name, text in profiles.items():
        out.append(
            f"<details><summary>{p.profiled_runs} runs of {name}</summary>"
            f"\n\n```\n{text}\n```\n\n</details>"
        )
    return "\n\n".join(out)


def collect(quick: bool = False) -> str:
    """Runs the bench (printing its tables) and returns its BENCHMARKS.md section."""
    with quiet():
        return asyncio.run(run(quick))


# ------------------------------------------------------------------ growth

GROWTH_WINDOW = 20
"""How many turns each end of the growth figure takes its medians over."""


GROWTH_PROFILED = 10
"""How many more turns of ours are profiled at each end of the growth figure."""


async def _own_time(turn: Callable[[], Awaitable[None]], runs: int) -> float:
    """The time per run spent in durable_adk's own functions (cProfile's tottime).

    The scripted model (``durable_adk.testing``) is left out: ADK's Runner
    calls it as much, and it reads each request whole.
    """
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        for _ in range(runs):
            await turn()
    finally:
        profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total = sum(
        tottime
        for (filename, _line, _name), (_cc, _nc, tottime, _ct, _callers) in stats.items()
        if "/durable_adk/" in filename and "/durable_adk/testing/" not in filename
    )
    return float(total) / runs


def _growth_app(turns: int) -> App:
    """The bench's App with a script for ``turns`` turns of one session (call, then text)."""
    app = make_app()
    agent = app.root_agent
    assert isinstance(agent, LlmAgent)
    steps = [Call("lookup_order", {"order_id": "A1042"}), Say(_MODEL_TEXT)] * (
        turns + 2 * GROWTH_PROFILED
    )
    agent.model = ScriptedModel(steps)
    return app


async def growth(turns: int) -> str:
    """Per-run CPU at the first and last turns of one long session, ours beside ADK's.

    Two sessions, one per contender (ADK's Runner with InMemorySessionService,
    DurableRunner with barrier commits on SQLite), each driven for ``turns``
    one-tool turns; the contenders alternate turn by turn, the order rotated
    each turn. Each run's process CPU (``time.process_time()``) is taken;
    the figure is the median of the first and of the last
    :data:`GROWTH_WINDOW` turns. What a run costs that grows with the
    conversation's length shows as the last window over the first; ADK's
    own growth (it builds each model request from the whole session, and its
    in-memory service copies the session on every read) is the reference.
    """
    cpu: dict[str, list[float]] = {IN_MEMORY: [], "DurableRunner (sqlite)": []}
    own: list[float] = []
    events: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="dadk-bench-growth-") as tmp:
        async with open_store(f"sqlite:///{Path(tmp) / 'growth.db'}") as store:
            memory = InMemorySessionService()
            adk = Runner(app=_growth_app(turns), session_service=memory)
            adk_session = (await memory.create_session(app_name=APP, user_id=USER)).id
            ours = DurableRunner(
                app=_growth_app(turns), store=store, worker_id="bench-growth", commits="barrier"
            )
            our_session = uuid.uuid4().hex

            async def adk_turn() -> None:
                async for _ in adk.run_async(
                    user_id=USER, session_id=adk_session, new_message=_message()
                ):
                    pass

            async def our_turn() -> None:
                async for _ in ours.run(user_id=USER, session_id=our_session, message=_message()):
                    pass

            turns_of = {IN_MEMORY: adk_turn, "DurableRunner (sqlite)": our_turn}
            w = min(GROWTH_WINDOW, turns // 2)
            for turn in range(turns):
                for name in rotate(list(turns_of), turn):
                    c0 = time.process_time()
                    await turns_of[name]()
                    cpu[name].append(time.process_time() - c0)
                if turn == w - 1 or turn == turns - 1:
                    # Our own code's time (cProfile's tottime of durable_adk's
                    # functions) over a few more turns of ours, at this end.
                    own.append(await _own_time(our_turn, GROWTH_PROFILED))
                if turn % 50 == 49:
                    print(f"  turn {turn + 1}/{turns}", flush=True)
            adk_stored = await memory.get_session(
                app_name=APP, user_id=USER, session_id=adk_session
            )
            our_stored = await ours.sessions.get_session(
                app_name=APP, user_id=USER, session_id=our_session
            )
            events[IN_MEMORY] = len(adk_stored.events) if adk_stored else -1
            events["DurableRunner (sqlite)"] = len(our_stored.events) if our_stored else -1
    first = {n: median(v[:w]) for n, v in cpu.items()}
    last = {n: median(v[-w:]) for n, v in cpu.items()}
    ours_name = "DurableRunner (sqlite)"
    rows = [
        [
            n,
            fmt_ms(first[n]),
            fmt_ms(last[n]),
            fmt_ratio(last[n] / first[n]),
            str(events[n]),
        ]
        for n in cpu
    ]
    rows.append(
        [
            f"durable_adk's own time, the model aside (cProfile, {GROWTH_PROFILED} more runs)",
            fmt_ms(own[0]),
            fmt_ms(own[1]),
            fmt_ratio(own[1] / own[0]),
            "",
        ]
    )
    rows.append(
        [
            "ours / ADK's",
            fmt_ratio(first[ours_name] / first[IN_MEMORY]),
            fmt_ratio(last[ours_name] / last[IN_MEMORY]),
            "",
            "",
        ]
    )
    table = md_table(
        [
            "contender",
            f"CPU per run, turns 1-{w}",
            f"CPU per run, turns {turns - w + 1}-{turns}",
            "last / first",
            "events stored",
        ],
        rows,
    )
    print(f"\n{table}\n", flush=True)
    return table


BOUNDS_ROUNDS = 6
"""Rounds of ``--bounds`` (100 runs of each contender a round; 3 with ``--quick``)."""


BOUNDS_STEPS = (
    (BareAtTheirPointsContender, ""),
    (SameRowsAtTheirPointsContender, "the rows a durable run writes, over one bare row a unit"),
    (UnitsInterleavedContender, "our statements and store calls, over those rows"),
    (
        EssentialsContender,
        "what a durable run cannot skip: events serialized, a task and a queue, a heartbeat "
        "task, the end classified, the tool on the pool",
    ),
    (DurableContender, "the rest of our run: driver, session service, barrier, ledger, plugins"),
)
"""``--bounds``'s SQLite contenders from the bound to DurableRunner, each with what it adds."""


def _is_step(c: Contender, kind: type[Contender]) -> bool:
    """Whether ``c`` is the SQLite contender of ``kind`` that ``--bounds`` times: of
    DurableRunner's default (barrier, sync tools on the pool), its tools where ADK's run them."""
    if type(c) is not kind or c.backend != "sqlite":
        return False
    if isinstance(c, DurableContender):
        return c.commits == "barrier" and c.sync_tools == "pool"
    return not getattr(c, "pool", False)


@contextlib.asynccontextmanager
async def open_bounds_steps(tmp: Path) -> AsyncIterator[list[Contender]]:
    """``--bounds``'s seven SQLite contenders, in order: ADK's in-memory run, then each
    step of :data:`BOUNDS_STEPS` from the bound to DurableRunner (no PostgreSQL).

    The bounds replay one recorded run of the DurableRunner contender, as in
    :func:`open_contenders`.
    """
    async with contextlib.AsyncExitStack() as stack:
        store = await stack.enter_async_context(open_store(f"sqlite:///{tmp / 'runner_ours.db'}"))
        ours = DurableContender("sqlite", store, "barrier")
        bare = BareCommits(f"sqlite:///{tmp / 'runner_bare.db'}")
        await bare.open()
        stack.push_async_callback(bare.close)
        await ours.run_once()  # the first run on a store also reads what later ones have cached
        placed = await UnitsInterleavedContender.record(ours)
        units = [(query, params) for query, params, _at in placed]
        same = await same_rows_of(tmp, units, stack)
        steps: list[Contender] = [
            BareAtTheirPointsContender(ours, placed, bare),
            SameRowsAtTheirPointsContender(ours, placed, same),
            UnitsInterleavedContender(ours, placed),
            EssentialsContender(ours, placed),
            ours,
        ]
        assert all(_is_step(c, kind) for c, (kind, _) in zip(steps, BOUNDS_STEPS, strict=True))
        yield [AdkContender(IN_MEMORY, "memory", InMemorySessionService()), *steps]


async def bounds(rounds: int) -> str:
    """Where a one-tool run's CPU goes over its physical bound, SQLite (issue 45).

    Six contenders interleaved as in :func:`measure`, ``rounds`` x 100 runs
    each: ADK's in-memory run; with one bare commit at each unit's point (the
    bound); with the same rows bare there; with our own units there, through
    our store; with the work no durable runner skips added
    (:class:`EssentialsContender`); DurableRunner. Each step's difference from
    the one before is what it adds (:data:`BOUNDS_STEPS`).
    """
    p = Params(
        rounds=rounds, runs_per_round=100, block=10, warmup=10, profiled_runs=0, breakdown_runs=0
    )
    with tempfile.TemporaryDirectory(prefix="dadk-bench-bounds-") as tmp:
        async with open_bounds_steps(Path(tmp)) as chosen:
            result = await measure(chosen, p)
    names = [c.name for c in chosen]
    cpu = [median(result.cpu[name]) for name in names]
    wall = [median(result.samples[name]) for name in names]
    adds = ["", *(what for _kind, what in BOUNDS_STEPS)]
    lines = [
        [
            name,
            fmt_ms(cpu[i]),
            fmt_ratio(cpu[i] / cpu[1]),  # [1]: the bound
            fmt_ms(wall[i]),
            fmt_ratio(wall[i] / wall[1]),
            f"{adds[i]}: {fmt_ms(cpu[i] - cpu[i - 1])}" if adds[i] else "",
        ]
        for i, name in enumerate(names)
    ]
    text = md_table(
        [
            "contender (SQLite)",
            "CPU per run",
            "CPU / bound",
            "wall per run",
            "wall / bound",
            "CPU added by",
        ],
        lines,
    )
    return f"{text}\n\n{rounds} x 100 runs of each, interleaved; medians.\n"


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--bounds" in args:
        # A one-tool run's CPU over its bound, step by step (SQLite; no --write).
        args.remove("--bounds")
        quick, _write = argv_flags(args)
        with quiet():
            print(asyncio.run(bounds(3 if quick else BOUNDS_ROUNDS)))
        return
    if "--growth" in args:
        # Growth with a conversation's length: one session, many turns (no --write).
        args.remove("--growth")
        quick, _write = argv_flags(args)
        with quiet():
            asyncio.run(growth(100 if quick else 200))
        return
    bench_main("runner", collect, argv)


if __name__ == "__main__":
    main()
