"""Session-service benchmarks: ours against ADK's services and the raw commit.

Run from the repository root::

    .venv/bin/python -m bench.sessions            # full run (~8 minutes)
    .venv/bin/python -m bench.sessions --quick    # smaller run (~2 minutes; no 10,000-event read)
    .venv/bin/python -m bench.sessions --write    # also rewrite its BENCHMARKS.md section

Three sections, each on SQLite (a file in a temporary directory) and on
PostgreSQL (a private cluster the bench starts with TempPostgres):

(a) ``append_event`` latency, median and p99, of DurableSessionService, ADK's
    DatabaseSessionService, ADK's SqliteSessionService (SQLite only) and a raw
    single-row INSERT + COMMIT through the same driver and execution pattern
    our store uses. Targets: ours >= 10x faster than DatabaseSessionService and
    <= 3x the raw commit.
(b) ``get_session`` of sessions holding 100, 1,000 and 10,000 events, whole and
    with ``num_recent_events=100``: ours cold (a new service instance per read,
    so the per-process cache is empty) and warm (one cached instance) against
    DatabaseSessionService.
(c) 200 scripted turns on one session through ``Runner``: per-turn time of
    turns 181-200 over turns 1-20. Target for ours: <= 1.5x.

Every comparison is a ratio of medians taken in the same run, contenders
interleaved in small blocks with the order rotated every round.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sqlite3
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.adk.sessions.session import Session
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types

from bench.common import (
    bench_main,
    fmt_ms,
    fmt_ratio,
    machine_note,
    md_table,
    median,
    percentile,
    profile_async,
    quiet,
    rotate,
    server_version,
    verdict,
)
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.store import Store, open_store
from durable_adk.testing.pg_cluster import TempPostgres

APP = "bench"
USER = "user_1"

APPEND_VS_ADK_TARGET = 10.0  # ours at least this many times faster than DatabaseSessionService
APPEND_VS_RAW_TARGET = 3.0  # ours at most this many times the raw commit
TURN_GROWTH_TARGET = 1.5  # turns 181-200 over turns 1-20, at most

log = logging.getLogger("bench.sessions")


@dataclass(frozen=True)
class Params:
    """How much to measure."""

    append_rounds: int
    appends_per_round: int
    append_block: int
    append_warmup: int
    read_sizes: tuple[int, ...]
    read_reps: dict[int, int]
    turns: int
    turn_block: int  # turns compared at each end

    @classmethod
    def for_mode(cls, quick: bool) -> Params:
        if quick:
            return cls(
                append_rounds=3,
                appends_per_round=100,
                append_block=25,
                append_warmup=10,
                read_sizes=(100, 1_000),  # a 10,000-event fixture takes minutes to write
                read_reps={100: 15, 1_000: 7},
                turns=100,
                turn_block=20,
            )
        return cls(
            append_rounds=4,
            appends_per_round=300,
            append_block=50,
            append_warmup=20,
            read_sizes=(100, 1_000, 10_000),
            read_reps={100: 40, 1_000: 15, 10_000: 7},
            turns=200,
            turn_block=20,
        )


# ------------------------------------------------------------------ events

_USER_TEXT = (
    "Can you check whether the blue running shoes I looked at yesterday are still "
    "available in size 43, and what the delivery time to Lyon would be?"
)
_MODEL_TEXT = (
    "The blue trail runners (model TR-4) are in stock in size 43: the Lyon warehouse "
    "has 7 pairs and the central warehouse 31. Standard delivery to Lyon takes 2 to 3 "
    "working days and costs 4.90 EUR; express delivery arrives the next working day "
    "if you order before 15:00 and costs 9.90 EUR. Your loyalty discount of 10% "
    "applies to both, and returns are free for 30 days. Shall I add a pair to your "
    "cart and reserve one from the Lyon stock, or would you like to compare them "
    "with the grey model first?"
)


def conversation_event(index: int) -> Event:
    """The ``index``-th event of a conversation of finished invocations.

    Even indexes are user messages, odd ones the model's text answer to it, in
    the same invocation, with a session-scoped state delta of four keys.
    """
    turn, is_answer = divmod(index, 2)
    invocation_id = f"e-{turn:06d}"
    if not is_answer:
        return Event(
            invocation_id=invocation_id,
            author="user",
            content=types.Content(role="user", parts=[types.Part(text=f"[{turn}] {_USER_TEXT}")]),
        )
    return Event(
        invocation_id=invocation_id,
        author="shop_assistant",
        content=types.Content(role="model", parts=[types.Part(text=_MODEL_TEXT)]),
        actions=EventActions(
            state_delta={
                "turn": turn,
                "last_topic": "shoes",
                "cart": {"items": turn % 5, "total_eur": round(89.9 * (turn % 5), 2)},
                "delivery_city": "Lyon",
            }
        ),
    )


# --------------------------------------------------------------- backends


@dataclass
class Backend:
    """Where one backend's contenders live: a temp dir (SQLite) or a cluster (PostgreSQL)."""

    kind: str  # "sqlite" | "postgresql"
    tmp: Path
    pg: TempPostgres | None = None

    def ours_url(self, name: str) -> str:
        if self.kind == "sqlite":
            return f"sqlite:///{self.tmp / (name + '.db')}"
        assert self.pg is not None
        return self.pg.create_database(name)

    def adk_url(self, name: str) -> str:
        if self.kind == "sqlite":
            return f"sqlite+aiosqlite:///{self.tmp / (name + '.db')}"
        assert self.pg is not None
        return self.pg.create_database(name).replace("postgresql://", "postgresql+asyncpg://", 1)

    def sqlite_path(self, name: str) -> str:
        return str(self.tmp / (name + ".db"))

    def raw_url(self, name: str) -> str:
        assert self.pg is not None
        return self.pg.create_database(name)


@contextlib.asynccontextmanager
async def durable_service(url: str) -> AsyncIterator[tuple[DurableSessionService, Store]]:
    async with open_store(url) as store:
        yield DurableSessionService(store), store


async def _pg_admin(pg: TempPostgres, sql: str) -> None:
    conn = await asyncpg.connect(pg.admin_url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


# ======================================================== (a) append latency


class Appender:
    """One contender of the append bench: ``prepare`` is untimed, ``append`` timed."""

    name: str

    async def open(self) -> None: ...

    async def new_session(self) -> None: ...

    def prepare(self, event: Event) -> Any:
        return event

    async def append(self, payload: Any) -> None:
        raise NotImplementedError

    async def close(self) -> None: ...


class ServiceAppender(Appender):
    def __init__(
        self, name: str, service: BaseSessionService, closer: Callable[[], Awaitable[None]]
    ) -> None:
        self.name = name
        self.service = service
        self._closer = closer
        self.session: Session | None = None

    async def new_session(self) -> None:
        self.session = await self.service.create_session(app_name=APP, user_id=USER)

    async def append(self, payload: Any) -> None:
        assert self.session is not None
        await self.service.append_event(self.session, payload)

    async def close(self) -> None:
        await self._closer()


class RawSqliteAppender(Appender):
    """sqlite3 with WAL + synchronous=FULL, one BEGIN IMMEDIATE + INSERT + COMMIT per append.

    The same execution pattern as SqliteStore's appends: an ``inline`` unit runs
    on the event loop's thread (no hop to the database thread; see
    docs/store.md).
    """

    name = "raw sqlite3 INSERT+COMMIT"

    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None

    async def open(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=True)
        conn.execute("PRAGMA busy_timeout = 0")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("CREATE TABLE IF NOT EXISTS raw (id INTEGER PRIMARY KEY, x TEXT NOT NULL)")
        self._conn = conn

    def prepare(self, event: Event) -> Any:
        return event.model_dump_json(exclude_none=True)

    async def append(self, payload: Any) -> None:
        conn = self._conn
        assert conn is not None
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO raw (x) VALUES (?)", (payload,))
        conn.execute("COMMIT")

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class RawAsyncpgAppender(Appender):
    """asyncpg pool (as PostgresStore opens it), one autocommit INSERT per append."""

    name = "raw asyncpg INSERT (autocommit)"

    def __init__(self, url: str) -> None:
        self.url = url
        self._pool: Any = None

    async def open(self) -> None:
        # PostgresStore passes a reset that sends nothing (no second round trip
        # per pool call); the baseline does the same.
        self._pool = await asyncpg.create_pool(self.url, min_size=1, max_size=10, reset=_no_reset)
        await self._pool.execute(
            "CREATE TABLE IF NOT EXISTS raw (id bigserial PRIMARY KEY, x text NOT NULL)"
        )

    def prepare(self, event: Event) -> Any:
        return event.model_dump_json(exclude_none=True)

    async def append(self, payload: Any) -> None:
        await self._pool.execute("INSERT INTO raw (x) VALUES ($1)", payload)

    async def close(self) -> None:
        await self._pool.close()


async def _no_reset(connection: Any) -> None:
    return None


async def _open_appenders(backend: Backend, stack: contextlib.AsyncExitStack) -> list[Appender]:
    service, _ = await stack.enter_async_context(durable_service(backend.ours_url("a_ours")))
    ours = ServiceAppender("ours: DurableSessionService", service, _noop)
    adk_db = DatabaseSessionService(db_url=backend.adk_url("a_adk"))
    contenders: list[Appender] = [
        ours,
        ServiceAppender("ADK DatabaseSessionService", adk_db, adk_db.close),
    ]
    if backend.kind == "sqlite":
        adk_sqlite = SqliteSessionService(backend.sqlite_path("a_adk_sqlite"))
        contenders.append(ServiceAppender("ADK SqliteSessionService", adk_sqlite, adk_sqlite.close))
        contenders.append(RawSqliteAppender(backend.sqlite_path("a_raw")))
    else:
        contenders.append(RawAsyncpgAppender(backend.raw_url("a_raw")))
    for c in contenders:
        await c.open()
        stack.push_async_callback(c.close)
    return contenders


async def _noop() -> None:
    return None


@dataclass
class AppendResult:
    backend: str
    names: list[str]
    samples: dict[str, list[float]] = field(default_factory=dict)  # pooled over rounds
    round_medians: dict[str, list[float]] = field(default_factory=dict)

    def round_ratio(self, numerator: str, denominator: str) -> float:
        """Median over rounds of (numerator's round median / denominator's)."""
        pairs = zip(self.round_medians[numerator], self.round_medians[denominator], strict=True)
        return median([n / d for n, d in pairs])


async def _append_block(c: Appender, start: int, stop: int, into: list[float]) -> None:
    for i in range(start, stop):
        payload = c.prepare(conversation_event(i))
        t0 = time.perf_counter()
        await c.append(payload)
        into.append(time.perf_counter() - t0)


async def bench_append(backend: Backend, p: Params) -> tuple[AppendResult, str]:
    async with contextlib.AsyncExitStack() as stack:
        contenders = await _open_appenders(backend, stack)
        result = AppendResult(backend.kind, [c.name for c in contenders])
        for c in contenders:  # warm-up: connections, prepared statements, ORM caches
            await c.new_session()
            await _append_block(c, 0, p.append_warmup, [])
        for c in contenders:
            result.samples[c.name] = []
            result.round_medians[c.name] = []
        for rnd in range(p.append_rounds):
            for c in contenders:
                await c.new_session()
            gc.collect()
            this_round: dict[str, list[float]] = {c.name: [] for c in contenders}
            for block_no, start in enumerate(range(0, p.appends_per_round, p.append_block)):
                stop = min(start + p.append_block, p.appends_per_round)
                for c in rotate(contenders, rnd + block_no):
                    await _append_block(c, start, stop, this_round[c.name])
            for name, values in this_round.items():
                result.samples[name].extend(values)
                result.round_medians[name].append(median(values))
        # Where ours spends its time, for the owner (not part of the figures).
        ours = contenders[0]
        await ours.new_session()
        profile = await profile_async(lambda: _append_block(ours, 0, 200, []))
    return result, profile


def append_table(r: AppendResult) -> str:
    ours = r.names[0]
    rows = []
    for name in r.names:
        values = r.samples[name]
        rows.append(
            [
                name,
                len(values),
                fmt_ms(median(values)),
                fmt_ms(percentile(values, 99)),
                fmt_ratio(r.round_ratio(name, ours)),
            ]
        )
    return md_table(["contender", "appends", "median", "p99", "median / ours"], rows)


def append_targets(results: Sequence[AppendResult]) -> tuple[str, list[tuple[str, str, str]]]:
    rows = []
    headline = []
    for r in results:
        ours, adk, raw = r.names[0], r.names[1], r.names[-1]
        speedup = r.round_ratio(adk, ours)
        overhead = r.round_ratio(ours, raw)
        ceiling = r.round_ratio(adk, raw)
        v1 = verdict(speedup, APPEND_VS_ADK_TARGET, at_least=True)
        v2 = verdict(overhead, APPEND_VS_RAW_TARGET, at_least=False)
        rows.append(
            [
                r.backend,
                "DatabaseSessionService / ours",
                fmt_ratio(speedup),
                ">= 10x",
                v1,
                f"DatabaseSessionService / raw commit = {fmt_ratio(ceiling)}",
            ]
        )
        rows.append([r.backend, "ours / raw commit", fmt_ratio(overhead), "<= 3x", v2, ""])
        headline.append(
            (f"{r.backend} append: DatabaseSessionService / ours", fmt_ratio(speedup), v1)
        )
        headline.append((f"{r.backend} append: ours / raw commit", fmt_ratio(overhead), v2))
    table = md_table(
        [
            "backend",
            "ratio (median of per-round medians)",
            "measured",
            "target",
            "verdict",
            "ceiling: the most any store could reach",
        ],
        rows,
    )
    return table, headline


# ========================================================= (b) get_session


async def _load(service: BaseSessionService, session_id: str, events: int) -> None:
    session = await service.create_session(app_name=APP, user_id=USER, session_id=session_id)
    for i in range(events):
        await service.append_event(session, conversation_event(i))


@contextlib.asynccontextmanager
async def _pg_no_fsync(backend: Backend, db_names: Sequence[str]) -> AsyncIterator[None]:
    """``synchronous_commit = off`` on the fixture databases while they are loaded.

    A commit's durability does not change what a later read costs, so the read
    fixtures are written without waiting for the disk; connections opened
    inside this block inherit the setting.
    """
    if backend.kind != "postgresql":
        yield
        return
    assert backend.pg is not None
    for name in db_names:
        await _pg_admin(backend.pg, f"ALTER DATABASE {name} SET synchronous_commit = off")
    try:
        yield
    finally:
        for name in db_names:
            await _pg_admin(backend.pg, f"ALTER DATABASE {name} RESET synchronous_commit")


async def _sqlite_no_fsync(store: Store) -> None:
    """``synchronous = OFF`` on our SQLite loader's connection (private API; load only).

    If the store's internals differ, loading simply runs at full durability.
    """
    conn = getattr(store, "_conn", None)
    call = getattr(store, "_call", None)
    if store.dialect == "sqlite" and conn is not None and call is not None:
        await call(lambda: conn.execute("PRAGMA synchronous = OFF"))


def _adk_loader_sqlite(url: str) -> DatabaseSessionService:
    from sqlalchemy import event as sa_event
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)

    def pragmas(dbapi_connection: Any, _record: object) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=OFF")
        cursor.close()

    sa_event.listen(engine.sync_engine, "connect", pragmas)
    return DatabaseSessionService(db_engine=engine)


@dataclass
class ReadResult:
    backend: str
    # (size, read kind) -> contender -> seconds per read
    samples: dict[tuple[int, str], dict[str, list[float]]] = field(default_factory=dict)
    ratios: dict[tuple[int, str], dict[str, float]] = field(default_factory=dict)
    counts: dict[tuple[int, str], dict[str, int]] = field(default_factory=dict)


OURS_COLD, OURS_WARM, ADK_DB = "ours cold", "ours warm", "ADK DatabaseSessionService"


async def bench_reads(backend: Backend, p: Params) -> tuple[ReadResult, str]:
    result = ReadResult(backend.kind)
    ours_url = backend.ours_url("b_ours")
    adk_url = backend.adk_url("b_adk")
    sizes = p.read_sizes
    # Fixtures: one session per size, same events in both services.
    t0 = time.perf_counter()
    async with _pg_no_fsync(backend, ["b_ours", "b_adk"]), open_store(ours_url) as loader:
        await _sqlite_no_fsync(loader)
        ours_loader = DurableSessionService(loader)
        adk_loader = (
            _adk_loader_sqlite(adk_url)
            if backend.kind == "sqlite"
            else DatabaseSessionService(db_url=adk_url)
        )
        try:
            for n in sizes:
                await _load(ours_loader, f"s{n}", n)
                await _load(adk_loader, f"s{n}", n)
        finally:
            await adk_loader.close()
    print(
        f"  [{backend.kind}] read fixtures loaded in {time.perf_counter() - t0:.0f} s", flush=True
    )

    recent = GetSessionConfig(num_recent_events=100)
    profile = ""
    async with open_store(ours_url) as store:
        warm = DurableSessionService(store)
        adk = DatabaseSessionService(db_url=adk_url)
        try:
            for n in sizes:
                sid = f"s{n}"
                for kind, config in (("full", None), ("last 100", recent)):
                    key = (n, kind)

                    def cold(
                        c: GetSessionConfig | None = config, s: str = sid
                    ) -> Awaitable[Session | None]:
                        return DurableSessionService(store).get_session(
                            app_name=APP, user_id=USER, session_id=s, config=c
                        )

                    def hot(
                        c: GetSessionConfig | None = config, s: str = sid
                    ) -> Awaitable[Session | None]:
                        return warm.get_session(app_name=APP, user_id=USER, session_id=s, config=c)

                    def theirs(
                        c: GetSessionConfig | None = config, s: str = sid
                    ) -> Awaitable[Session | None]:
                        return adk.get_session(app_name=APP, user_id=USER, session_id=s, config=c)

                    readers = {OURS_COLD: cold, OURS_WARM: hot, ADK_DB: theirs}
                    # Prime: the warm cache, the ORM, prepared statements; record counts.
                    result.counts[key] = {}
                    for name, read in readers.items():
                        session = await read()
                        assert session is not None
                        result.counts[key][name] = len(session.events)
                    samples: dict[str, list[float]] = {name: [] for name in readers}
                    per_rep: dict[str, list[float]] = {OURS_COLD: [], OURS_WARM: []}
                    names = list(readers)
                    gc.collect()
                    for rep in range(p.read_reps[n]):
                        took: dict[str, float] = {}
                        for name in rotate(names, rep):
                            t = time.perf_counter()
                            await readers[name]()
                            took[name] = time.perf_counter() - t
                            samples[name].append(took[name])
                            await _settle()
                        per_rep[OURS_COLD].append(took[ADK_DB] / took[OURS_COLD])
                        per_rep[OURS_WARM].append(took[ADK_DB] / took[OURS_WARM])
                    result.samples[key] = samples
                    result.ratios[key] = {k: median(v) for k, v in per_rep.items()}
            biggest = max(sizes)
            profile = await profile_async(lambda: _cold_reads(store, f"s{biggest}", 3), top=14)
        finally:
            await adk.close()
    return result, profile


async def _settle() -> None:
    """Lets the loop drop the last read's buffers before the next read is timed.

    Without it the rows of a 10,000-event read are freed during the next read
    (the executor future keeps them until the loop's next pass), charging a
    following warm read with ~4 ms that are not its own.
    """
    for _ in range(3):
        await asyncio.sleep(0)


async def _cold_reads(store: Store, session_id: str, times: int) -> None:
    for _ in range(times):
        await DurableSessionService(store).get_session(
            app_name=APP, user_id=USER, session_id=session_id
        )


def read_table(r: ReadResult) -> str:
    rows = []
    for (n, kind), samples in r.samples.items():
        counts = r.counts[(n, kind)]
        ratios = r.ratios[(n, kind)]
        count_note = "/".join(str(counts[k]) for k in (OURS_COLD, OURS_WARM, ADK_DB))
        rows.append(
            [
                f"{n:,}",
                kind,
                count_note,
                fmt_ms(median(samples[OURS_COLD])),
                fmt_ms(median(samples[OURS_WARM])),
                fmt_ms(median(samples[ADK_DB])),
                fmt_ratio(ratios[OURS_COLD]),
                fmt_ratio(ratios[OURS_WARM]),
            ]
        )
    return md_table(
        [
            "events",
            "read",
            "events returned (cold/warm/ADK)",
            "ours cold",
            "ours warm",
            "ADK DatabaseSessionService",
            "ADK / ours cold",
            "ADK / ours warm",
        ],
        rows,
    )


# ============================================================ (c) long runs


def lookup_order(order_id: str) -> dict[str, Any]:
    """Looks up an order by id."""
    return {"order_id": order_id, "status": "shipped", "eta_days": 2}


def _script(turns: int) -> list[Any]:
    from durable_adk.testing.scripted_model import Call, Say

    steps: list[Any] = []
    for t in range(turns):
        if t % 5 == 4:  # one tool call every five turns
            steps.append(Call("lookup_order", {"order_id": f"A{t:04d}"}))
        steps.append(Say(f"Turn {t}: " + _MODEL_TEXT))
    return steps


@dataclass
class TurnRunner:
    """One session service driven by its own Runner, on a long session and a fresh one.

    Records whole-turn times and the time spent inside the service's
    ``get_session`` and ``append_event`` during each turn.
    """

    name: str
    runner: Runner
    session_id: str
    fresh_session_id: str
    ours: bool = False
    times: list[float] = field(default_factory=list)
    service_times: list[float] = field(default_factory=list)
    fresh_times: list[float] = field(default_factory=list)
    fresh_service_times: list[float] = field(default_factory=list)
    _in_service: float = 0.0

    def instrument(self, service: BaseSessionService) -> None:
        """Counts the time spent inside the service's get_session and append_event."""
        for method in ("get_session", "append_event"):
            setattr(service, method, self._timed(getattr(service, method)))

    def _timed(self, call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await call(*args, **kwargs)
            finally:
                self._in_service += time.perf_counter() - t0

        return timed

    async def _run(self, session_id: str, t: int) -> tuple[float, float]:
        message = types.Content(role="user", parts=[types.Part(text=f"[{t}] {_USER_TEXT}")])
        self._in_service = 0.0
        t0 = time.perf_counter()
        async for _ in self.runner.run_async(
            user_id=USER, session_id=session_id, new_message=message
        ):
            pass
        return time.perf_counter() - t0, self._in_service

    async def turn(self, t: int, *, record: bool = True) -> None:
        took, in_service = await self._run(self.session_id, t)
        if record:
            self.times.append(took)
            self.service_times.append(in_service)

    async def fresh_turn(self, t: int) -> None:
        took, in_service = await self._run(self.fresh_session_id, t)
        self.fresh_times.append(took)
        self.fresh_service_times.append(in_service)


async def _make_turn_runner(
    name: str, service: BaseSessionService, turns: int, *, ours: bool
) -> TurnRunner:
    from durable_adk.testing.scripted_model import ScriptedModel

    agent = LlmAgent(
        name="shop_assistant",
        model=ScriptedModel(_script(turns)),
        instruction="You help customers of an online shoe shop.",
        tools=[lookup_order],
    )
    runner = Runner(app=App(name=APP, root_agent=agent), session_service=service)
    session = await service.create_session(app_name=APP, user_id=USER)
    fresh = await service.create_session(app_name=APP, user_id=USER)
    tr = TurnRunner(name, runner, session.id, fresh.id, ours=ours)
    tr.instrument(service)
    return tr


@dataclass
class TurnResult:
    turns: int
    block: int
    runners: list[TurnRunner]
    final_events: dict[str, int]

    def first(self, values: Sequence[float]) -> float:
        return median(values[: self.block])

    def last(self, values: Sequence[float]) -> float:
        return median(values[-self.block :])

    def sequential_growth(self, values: Sequence[float]) -> float:
        """Last block over first block of the long session (minutes apart)."""
        return self.last(values) / self.first(values)

    @staticmethod
    def side_by_side_growth(tr: TurnRunner) -> float:
        """Last block of the long session over the fresh session's first turns, run alongside."""
        return median(tr.times[-len(tr.fresh_times) :]) / median(tr.fresh_times)


async def bench_turns(backends: Sequence[Backend], p: Params) -> tuple[TurnResult, str]:
    extra_turns = 6  # profiled after the measured ones
    async with contextlib.AsyncExitStack() as stack:
        runners: list[TurnRunner] = []
        for backend in backends:
            service, _ = await stack.enter_async_context(
                durable_service(backend.ours_url("c_ours"))
            )
            runners.append(
                await _make_turn_runner(
                    f"ours ({backend.kind})", service, p.turns + extra_turns, ours=True
                )
            )
        for backend in backends:
            adk = DatabaseSessionService(db_url=backend.adk_url("c_adk"))
            stack.push_async_callback(adk.close)
            runners.append(
                await _make_turn_runner(
                    f"ADK DatabaseSessionService ({backend.kind})", adk, p.turns, ours=False
                )
            )
        runners.append(
            await _make_turn_runner(
                "ADK InMemorySessionService (reference)",
                InMemorySessionService(),
                p.turns,
                ours=False,
            )
        )
        gc.collect()
        side_by_side_from = p.turns - p.turn_block
        for t in range(p.turns):
            for tr in rotate(runners, t):
                if t < side_by_side_from:
                    await tr.turn(t)
                    continue
                # The last block: each long-session turn next to a fresh-session
                # turn of the first block, alternating which goes first.
                fresh_t = t - side_by_side_from
                if t % 2:
                    await tr.fresh_turn(fresh_t)
                    await tr.turn(t)
                else:
                    await tr.turn(t)
                    await tr.fresh_turn(fresh_t)
            if (t + 1) % 50 == 0:
                print(f"  turn {t + 1}/{p.turns}", flush=True)
        final = {}
        for tr in runners:
            s = await tr.runner.session_service.get_session(
                app_name=APP, user_id=USER, session_id=tr.session_id
            )
            final[tr.name] = len(s.events) if s else -1
        first = runners[0]

        async def more_turns() -> None:
            for t in range(p.turns, p.turns + extra_turns):
                await first.turn(t, record=False)

        profile = await profile_async(more_turns, top=16)
    return TurnResult(p.turns, p.turn_block, runners, final), profile


def turn_table(r: TurnResult) -> tuple[str, list[tuple[str, str, str]]]:
    rows = []
    service_rows = []
    headline = []
    n, b = r.turns, r.block
    last_label = f"turns {n - b + 1}-{n}"
    for tr in r.runners:
        seq = r.sequential_growth(tr.times)
        side = r.side_by_side_growth(tr)
        v = verdict(side, TURN_GROWTH_TARGET, at_least=False) if tr.ours else "(no target)"
        rows.append(
            [
                tr.name,
                r.final_events[tr.name],
                fmt_ms(r.first(tr.times)),
                fmt_ms(median(tr.fresh_times)),
                fmt_ms(r.last(tr.times)),
                fmt_ratio(side),
                fmt_ratio(seq),
                "<= 1.5x" if tr.ours else "",
                v,
            ]
        )
        service_rows.append(
            [
                tr.name,
                fmt_ms(r.first(tr.service_times)),
                fmt_ms(median(tr.fresh_service_times)),
                fmt_ms(r.last(tr.service_times)),
                fmt_ratio(r.last(tr.service_times) / median(tr.fresh_service_times)),
                f"{r.last(tr.service_times) / r.last(tr.times):.0%}",
            ]
        )
        if tr.ours:
            headline.append((f"Runner {last_label} / turns 1-{b}, {tr.name}", fmt_ratio(side), v))
    table = md_table(
        [
            "session service",
            "events at end",
            f"turns 1-{b} (at start)",
            f"turns 1-{b} (fresh session, alongside)",
            last_label,
            "growth (side by side)",
            "growth (vs start)",
            "target",
            "verdict",
        ],
        rows,
    )
    service_table = md_table(
        [
            "session service",
            f"in service, turns 1-{b} (at start)",
            f"turns 1-{b} (fresh, alongside)",
            last_label,
            "growth (side by side)",
            f"share of a turn, {last_label}",
        ],
        service_rows,
    )
    return (
        table
        + "\n\nTime inside the session service (get_session + append_event) per turn:\n\n"
        + service_table,
        headline,
    )


# ================================================================== driver


async def run(quick: bool = False) -> str:
    """Runs every section on both backends; prints tables; returns the Markdown section."""
    p = Params.for_mode(quick)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dadk-bench-") as tmp, TempPostgres() as pg:
        sqlite = Backend("sqlite", Path(tmp) / "sqlite")
        sqlite.tmp.mkdir()
        postgres = Backend("postgresql", Path(tmp) / "pg", pg)
        backends = [sqlite, postgres]
        pg_version = await server_version(pg.admin_url)

        print("== (a) append_event latency", flush=True)
        appends: list[AppendResult] = []
        append_profiles: dict[str, str] = {}
        for backend in backends:
            res, prof = await bench_append(backend, p)
            appends.append(res)
            append_profiles[backend.kind] = prof
            print(f"\n[{backend.kind}]\n{append_table(res)}\n", flush=True)
        append_target_table, headline = append_targets(appends)
        print(append_target_table + "\n", flush=True)

        print("== (b) get_session", flush=True)
        reads: list[ReadResult] = []
        read_profiles: dict[str, str] = {}
        for backend in backends:
            res_b, prof_b = await bench_reads(backend, p)
            reads.append(res_b)
            read_profiles[backend.kind] = prof_b
            print(f"\n[{backend.kind}]\n{read_table(res_b)}\n", flush=True)
            n = max(p.read_sizes)
            for kind in ("full", "last 100"):
                for who in (OURS_COLD, OURS_WARM):
                    headline.append(
                        (
                            f"{backend.kind} get_session, {n:,} events, {kind}: ADK / {who}",
                            fmt_ratio(res_b.ratios[(n, kind)][who]),
                            "(no target)",
                        )
                    )

        print(f"== (c) {p.turns} scripted turns through Runner", flush=True)
        turns, turn_profile = await bench_turns(backends, p)
        turn_tab, turn_headline = turn_table(turns)
        headline += turn_headline
        print(f"\n{turn_tab}\n", flush=True)
    elapsed = time.perf_counter() - started
    print(f"sessions bench finished in {elapsed:.0f} s", flush=True)

    return _markdown(
        quick=quick,
        p=p,
        pg_version=pg_version,
        elapsed=elapsed,
        appends=appends,
        append_target_table=append_target_table,
        reads=reads,
        turns=turns,
        turn_tab=turn_tab,
        headline=headline,
        profiles={
            **{f"append_event x200, ours on {k}": v for k, v in append_profiles.items()},
            **{
                f"cold full get_session x3 at {max(p.read_sizes):,} events, ours on {k}": v
                for k, v in read_profiles.items()
            },
            f"6 Runner turns after turn {p.turns}, ours on sqlite": turn_profile,
        },
    )


def _markdown(
    *,
    quick: bool,
    p: Params,
    pg_version: str,
    elapsed: float,
    appends: Sequence[AppendResult],
    append_target_table: str,
    reads: Sequence[ReadResult],
    turns: TurnResult,
    turn_tab: str,
    headline: Sequence[tuple[str, str, str]],
    profiles: dict[str, str],
) -> str:
    mode = "quick (`--quick`)" if quick else "full"
    reps = ", ".join(f"{n:,} events: {k}" for n, k in p.read_reps.items() if n in p.read_sizes)
    out: list[str] = []
    out.append("## Session service (`bench/sessions.py`)")
    out.append(
        f"Run: {mode}, {time.strftime('%Y-%m-%d %H:%M %Z')}, {elapsed:.0f} s. "
        f"Machine: {machine_note(f'PostgreSQL {pg_version} (TempPostgres, fsync on)')}."
    )
    out.append("### Headline")
    out.append(md_table(["ratio", "measured", "verdict"], headline))
    out.append("### (a) append_event latency")
    out.append(
        f"Each contender appends to a fresh session {p.appends_per_round} events per round "
        f"(alternating a user text event and a model text event with a 4-key state delta, "
        f"~{len(conversation_event(1).model_dump_json(exclude_none=True))} bytes of JSON), "
        f"{p.append_rounds} rounds, in blocks of {p.append_block} interleaved between "
        f"contenders with the order rotated every block; {p.append_warmup} warm-up appends "
        "first. Each contender has its own database file (SQLite, same directory) or "
        "database (same PostgreSQL server). Ratios are the median over rounds of the "
        "ratio of round medians. ADK's services run as shipped: DatabaseSessionService "
        "on SQLite uses SQLite's default rollback journal, ours and the raw baseline use "
        "WAL + synchronous=FULL. The raw baseline writes the same event JSON: "
        "SQLite via sqlite3 on the event loop's thread (BEGIN IMMEDIATE + INSERT + COMMIT, "
        "as SqliteStore runs an append: an `inline` unit, docs/store.md); PostgreSQL via "
        "an asyncpg pool, one autocommit INSERT."
    )
    for r in appends:
        out.append(f"**{r.backend}**\n\n{append_table(r)}")
    out.append("Targets:\n\n" + append_target_table)
    out.append("### (b) get_session")
    out.append(
        "One session per size, built from finished invocations (a user text event then "
        "the model's text answer, same invocation id), identical events in both services. "
        "Fixtures are written with fsync off (reads do not depend on it). *cold*: a new "
        "DurableSessionService per read (empty per-process cache; the store and its "
        "connections are shared); *warm*: one instance whose cache already holds the "
        "session. *last 100*: `GetSessionConfig(num_recent_events=100)`. Reads per "
        f"contender: {reps}, "
        "interleaved with the order rotated, the loop allowed to free the previous read's "
        "buffers before each timed read; ratio = median of per-repetition ratios."
    )
    for rb in reads:
        out.append(f"**{rb.backend}**\n\n{read_table(rb)}")
    out.append(f"### (c) {turns.turns} scripted turns through Runner")
    out.append(
        "One LlmAgent with a ScriptedModel (a text answer every turn, a tool call before "
        "it every fifth turn) per service, each service with its own Runner and session; "
        "the services take turns (one turn each, order rotated). *growth (vs start)* is "
        f"the brief's figure: median of the last {turns.block} turns over the median of "
        f"turns 1-{turns.block}, which ran minutes earlier. Because this machine's speed "
        "drifts by tens of percent over minutes, each of the last turns also runs next to "
        f"a turn of a fresh session (turns 1-{turns.block} of a second session, "
        "alternating which goes first): *growth (side by side)* compares those, and the "
        "verdict uses it. InMemorySessionService is ADK's own floor: its growth is what "
        "ADK's per-turn work (building the model request from the whole history, "
        "deep-copying the session) adds whatever the store. The second table counts only "
        "the time spent inside the service's get_session and append_event."
    )
    out.append(turn_tab)
    out.append("### Where ours spends time (cProfile)")
    out.append(
        "Event-loop thread only. SQLite appends run on that thread (`inline` units: their "
        "commits show up as `sqlite3.Connection.execute`); a read's time on the database "
        "thread appears as `select.epoll.poll` (waiting). Paths shortened."
    )
    for title, text in profiles.items():
        out.append(f"<details><summary>{title}</summary>\n\n```\n{text}\n```\n\n</details>")
    return "\n\n".join(out)


def collect(quick: bool = False) -> str:
    """Runs the bench (printing its tables) and returns its BENCHMARKS.md section."""
    with quiet():
        return asyncio.run(run(quick))


def main(argv: Sequence[str] | None = None) -> None:
    bench_main("sessions", collect, argv)


if __name__ == "__main__":
    main()
