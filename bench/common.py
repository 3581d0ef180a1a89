"""Helpers shared by the benchmarks: statistics, tables, profiles, BENCHMARKS.md.

Rules every bench follows (the machine is 2 shared cores, so absolute times
drift by tens of percent between minutes):

* contenders run interleaved, in small blocks, with the order rotated every
  round, so drift hits all of them alike;
* a figure is reported as measured, and a comparison as a ratio of medians
  taken in the same run;
* targets are reported as PASS / MISS, never asserted.
"""

from __future__ import annotations

import contextlib
import cProfile
import dataclasses
import io
import logging
import math
import os
import platform
import pstats
import re
import resource
import sqlite3
import statistics
import sys
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS_MD = ROOT / "BENCHMARKS.md"

T = TypeVar("T")


# ----------------------------------------------------------------- statistics


def median(values: Sequence[float]) -> float:
    """The median (NaN for no values)."""
    return statistics.median(values) if values else math.nan


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile: the smallest value with ``pct`` % of values at or below it."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def rotate(items: Sequence[T], by: int) -> list[T]:
    """``items`` rotated left by ``by`` places (the order of a round)."""
    if not items:
        return []
    k = by % len(items)
    return list(items[k:]) + list(items[:k])


# ------------------------------------------------------------------ formatting


def fmt_ms(seconds: float) -> str:
    """A duration in milliseconds with 3 significant-ish digits."""
    if math.isnan(seconds):
        return "n/a"
    ms = seconds * 1000
    if ms >= 100:
        return f"{ms:.0f} ms"
    if ms >= 10:
        return f"{ms:.1f} ms"
    return f"{ms:.2f} ms"


def fmt_ratio(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"


def verdict(value: float, target: float, *, at_least: bool) -> str:
    """PASS or MISS for a ratio against its target."""
    if math.isnan(value):
        return "MISS (no data)"
    ok = value >= target if at_least else value <= target
    return "PASS" if ok else "MISS"


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table, padded so it also reads well in a terminal."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), sep, *(line(r) for r in cells[1:])])


# ------------------------------------------------------------------- machine


def cpu_model() -> str:
    try:
        for text_line in Path("/proc/cpuinfo").read_text().splitlines():
            if text_line.startswith("model name"):
                return text_line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine_note(extra: str = "") -> str:
    """One line describing where the figures were taken."""
    import google.adk

    note = (
        f"{os.cpu_count()} cores ({cpu_model()}), shared and noisy VM; "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"google-adk {google.adk.__version__}; {platform.system()} {platform.release()}"
    )
    return note + (f"; {extra}" if extra else "")


# ------------------------------------------------------------- CPU (/proc)

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(pid: int | str) -> list[str] | None:
    """Fields 3.. of /proc/PID/stat (after the command name), or None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def postgres_cpu_seconds(data_dir: Path) -> float:
    """CPU seconds of a PostgreSQL server so far (NaN if unknown).

    The postmaster's own time and that of its reaped children (cutime, cstime:
    backends that exited), plus every live child: backends, WAL writer,
    checkpointer.
    """
    try:
        postmaster = int((data_dir / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return math.nan
    fields = _stat_fields(postmaster)
    if fields is None:
        return math.nan
    ticks = sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    with os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit():
                child = _stat_fields(entry.name)
                if child is not None and int(child[1]) == postmaster:
                    ticks += int(child[11]) + int(child[12])
    return ticks / _TICK


def machine_cpu_seconds() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine since boot, from /proc/stat."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return math.nan, math.nan
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in first[1:9])
    return (user + nice + system + irq + softirq) / _TICK, steal / _TICK


class OtherLoad:
    """How busy the machine was with other work while a bench ran.

    ``with OtherLoad(pg_data_dir) as load: ...`` then ``load.note()``: the
    machine's busy CPU minus this process's (its reaped child processes
    included) and the PostgreSQL server's, in cores (CPU seconds per wall
    second).
    """

    def __init__(self, pg_data_dir: Path | None = None) -> None:
        self.pg_data_dir = pg_data_dir
        self.wall = self.machine = self.own = self.server = math.nan

    def _server(self) -> float:
        return postgres_cpu_seconds(self.pg_data_dir) if self.pg_data_dir else 0.0

    @staticmethod
    def _own() -> float:
        """This process's CPU and its reaped children's (the contenders a bench ran)."""
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.process_time() + children.ru_utime + children.ru_stime

    def __enter__(self) -> OtherLoad:
        self._t0 = time.perf_counter()
        self._m0 = machine_cpu_seconds()[0]
        self._p0 = self._own()
        self._s0 = self._server()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._t0
        self.machine = machine_cpu_seconds()[0] - self._m0
        self.own = self._own() - self._p0
        self.server = self._server() - self._s0

    @property
    def others_cores(self) -> float:
        return max(0.0, self.machine - self.own - self.server) / self.wall

    def note(self) -> str:
        cores = os.cpu_count() or 0
        return (
            f"while it ran, the machine was {self.machine / self.wall:.2f} of {cores} cores "
            f"busy, {self.others_cores:.2f} of them with other processes (not this bench "
            "or its PostgreSQL server)"
        )


# ------------------------------------------------------------------- profiles


async def profile_async(
    make: Callable[[], Awaitable[Any]], *, top: int = 14, focus: str = "durable_adk"
) -> str:
    """cProfile of one awaited call: the top functions by own time, then ours by cumulative.

    Only the event-loop thread is profiled: time a SQLite hop spends on the
    database thread shows up as the loop waiting (``select.epoll.poll``).
    """
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        await make()
    finally:
        profiler.disable()
    dump = os.environ.get("BENCH_PSTATS")  # a path: the whole profile, for pstats
    if dump:
        profiler.dump_stats(dump)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    own = _trim_pstats(out.getvalue(), top)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(focus, top)
    ours = _trim_pstats(out.getvalue(), top)
    return f"By own time (tottime):\n{own}\n\n{focus} by cumulative time:\n{ours}"


_SITE = re.compile(r"\S*/site-packages/")


def _trim_pstats(text: str, top: int) -> str:
    """Keeps the header line and the rows of a pstats listing, with short paths."""
    lines = text.splitlines()
    start = next((i for i, s in enumerate(lines) if s.strip().startswith("ncalls")), None)
    if start is None:
        return text.strip()
    rows = [s for s in lines[start : start + top + 1] if s.strip()]
    prefix = str(ROOT) + "/"
    py_lib = os.path.dirname(os.__file__) + "/"
    return "\n".join(
        _SITE.sub("", s.replace(prefix, "").replace(py_lib, "")).rstrip() for s in rows
    )


# --------------------------------------------------------------- BENCHMARKS.md


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"


_DETAILS = re.compile(r"<details>.*?</details>\n?", re.DOTALL)


def write_section(name: str, body: str, path: Path = BENCHMARKS_MD) -> None:
    """Replaces the section ``name`` of BENCHMARKS.md (appending it if absent).

    Profiles (the body's ``<details>`` blocks) are not kept in BENCHMARKS.md,
    which holds the figures: they go to ``bench/profiles/<name>.md``, in
    place of that file's previous content, and the section links to it. A
    body without any leaves an earlier profile file alone.
    """
    begin, end = _markers(name)
    profiles = _DETAILS.findall(body)
    if profiles:
        where = f"bench/profiles/{name}.md"
        target = path.parent / where
        target.parent.mkdir(parents=True, exist_ok=True)
        lines = body.strip().splitlines()
        heading = lines[0].lstrip("# ").strip()
        run = next((line for line in lines if line.startswith("Run:")), "")
        target.write_text(
            f"# Profiles: {heading}\n\n{run}\n\nWritten with the section `{name}` of "
            "BENCHMARKS.md, which holds this run's figures.\n\n"
            + "\n".join(p.strip() + "\n" for p in profiles)
        )
        link = f"Profiles of this run: [{where}]({where}).\n"
        body = _DETAILS.sub("", _DETAILS.sub(link, body, count=1))  # the link where the first was
    block = f"{begin}\n{body.strip()}\n{end}"
    text = path.read_text() if path.exists() else ""
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + block
    path.write_text(text.rstrip() + "\n")


def argv_flags(argv: Sequence[str] | None) -> tuple[bool, bool]:
    """(--quick, --write) from a command line."""
    args = list(sys.argv[1:] if argv is None else argv)
    unknown = [a for a in args if a not in ("--quick", "--write")]
    if unknown:
        raise SystemExit(f"unknown arguments {unknown}; use [--quick] [--write]")
    return "--quick" in args, "--write" in args


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silences warnings and log records below ERROR (ADK warns on every run)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(previous)


async def server_version(admin_url: str) -> str:
    """The PostgreSQL server's version, for the machine note."""
    import asyncpg  # only the benches that start PostgreSQL need it

    conn = await asyncpg.connect(admin_url)
    try:
        return str(await conn.fetchval("SHOW server_version"))
    finally:
        await conn.close()


def bench_main(name: str, collect: Callable[[bool], str], argv: Sequence[str] | None) -> None:
    """A bench's command line: run it (``--quick``), and with ``--write`` rewrite its section."""
    quick, write = argv_flags(argv)
    body = collect(quick)
    if write:
        write_section(name, body)
        print(f"BENCHMARKS.md: section {name!r} rewritten")


# ------------------------------------------------------------ units replayed

Units = list[tuple[str, dict[str, Any]]]
"""A run's store calls in order: each named query and its parameters."""

_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}")


def _fresh_like(found: str) -> str:
    new = uuid.uuid4()
    return str(new) if "-" in found else new.hex


async def record_store_calls(
    store: Any, action: Callable[[], Awaitable[Any]], *, skip: frozenset[str] = frozenset()
) -> Units:
    """The calls ``action`` makes through ``store.fetch``, in order (``skip``: names left out)."""
    placed = await record_store_calls_at(store, action, skip=skip)
    return [(query, params) for query, params, _at in placed]


PlacedUnits = list[tuple[str, dict[str, Any], int]]
"""A run's store calls in order, each with how many events had been appended before it."""


async def record_store_calls_at(
    store: Any,
    action: Callable[[], Awaitable[Any]],
    service: Any = None,
    *,
    skip: frozenset[str] = frozenset(),
) -> PlacedUnits:
    """The calls ``action`` makes through ``store.fetch``, in order, each placed by the
    events appended before it (``skip``: names left out).

    ``service`` is the session service the run appends through (None: every
    call is placed at 0); partial events (never stored) are not counted.
    """
    placed: PlacedUnits = []
    appended = 0
    inner_fetch = store.fetch
    inner_append = service.append_event if service is not None else None

    async def fetch(query: str, params: Any = None) -> Any:
        if query not in skip:
            placed.append((query, dict(params or {}), appended))
        return await inner_fetch(query, params)

    async def append_event(session: Any, event: Any) -> Any:
        nonlocal appended
        assert inner_append is not None
        out = await inner_append(session, event)
        if not event.partial:
            appended += 1
        return out

    store.fetch = fetch
    if service is not None:
        service.append_event = append_event
    try:
        await action()
    finally:
        store.fetch = inner_fetch
        if service is not None:
            service.append_event = inner_append
    return placed


class Replay:
    """One replay of recorded calls, every id in them fresh (so each replay is a new run).

    Ids (UUIDs, with or without dashes) are swapped consistently within the
    replay; the session's primary key is the one the replay's ``run_start``
    created.
    """

    def __init__(self, store: Any) -> None:
        self.store = store
        self._fresh: dict[str, str] = {}
        self._session_pk: Any = None

    def _swap(self, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        return _ID.sub(lambda m: self._fresh.setdefault(m.group(), _fresh_like(m.group())), value)

    def fresh(self, calls: Units) -> Units:
        """The calls with this replay's fresh ids, ready for :meth:`send` with ``fresh=True``.

        Swapping ids is the bench's own work (about 0.2 ms for a one-tool
        run's four units): a timed replay prepares its calls before the clock
        starts, as a bare commit's payload is built before it.
        """
        return [(query, {k: self._swap(v) for k, v in params.items()}) for query, params in calls]

    async def send(self, query: str, params: dict[str, Any], *, fresh: bool = False) -> None:
        """Sends one recorded call; raises if a replayed append was refused.

        ``fresh``: ``params`` already hold this replay's ids (:meth:`fresh`).
        """
        args = dict(params) if fresh else {k: self._swap(v) for k, v in params.items()}
        if self._session_pk is not None and "session_pk" in args:
            args["session_pk"] = self._session_pk
        rows = await self.store.fetch(query, args)
        status = rows[0]["status"] if query.startswith("append_") and rows else "ok"
        if status != "ok":
            # A refused unit costs less than a written one: the bound would lie.
            raise RuntimeError(f"replayed {query!r} was refused ({status}): {args}")
        if query == "run_start" and rows:
            self._session_pk = rows[0]["created_session_pk"]


class PreparedReplays:
    """Timed replays of recorded calls whose fresh ids are made before the clock starts.

    Call :meth:`prepare` with the number of replays about to be timed (outside
    the timed region), then await the object once per replay.
    """

    def __init__(self, store: Any, calls: Units) -> None:
        self.store = store
        self.calls = calls
        self._ready: list[tuple[Replay, Units]] = []

    def prepare(self, runs: int) -> None:
        """Makes ``runs`` replays' calls, each with ids of its own."""
        for _ in range(runs):
            replay = Replay(self.store)
            self._ready.append((replay, replay.fresh(self.calls)))

    async def __call__(self) -> None:
        if not self._ready:
            self.prepare(1)  # not prepared: the swap is then timed with it
        replay, calls = self._ready.pop()
        for query, params in calls:
            await replay.send(query, params, fresh=True)


class DriverOnlyReplays(PreparedReplays):
    """A replay's units as our store sends them, through asyncpg alone (PostgreSQL).

    The same statement and positional arguments our store binds for each unit
    (bound before the clock starts, with the other prepared work), sent on
    one asyncpg connection with ``fetch``: one round trip, the statement
    prepared once per connection (asyncpg's cache), its rows returned and
    decoded, as a unit must read its status. None of our store's layers (its
    outage patience, lanes, pool, timer, error translation, rows made into
    dicts): what a unit costs the client with no library code, the bound a
    leaner store call could reach.
    """

    def __init__(self, store: Any, calls: Units, conn: Any) -> None:
        super().__init__(store, calls)
        self.conn = conn
        self._bound: list[list[tuple[str, str, list[Any], int | None]]] = []

    def prepare(self, runs: int) -> None:
        super().prepare(runs)
        while self._ready:
            _replay, calls = self._ready.pop()
            units = []
            for query, params in calls:
                named = self.store._query(query)
                statement, args = named.bind(params)
                # The names in the order bound (the same variant: the same NULLs).
                order = named.bind({k: None if v is None else k for k, v in params.items()})[1]
                # Where the session's key goes: known once the replay's run_start created it.
                at = order.index("session_pk") if "session_pk" in order else None
                units.append((query, statement, args, at))
            self._bound.append(units)

    async def __call__(self) -> None:
        if not self._bound:
            self.prepare(1)
        session_pk = None
        for query, statement, args, at in self._bound.pop():
            if at is not None and session_pk is not None:
                args[at] = session_pk
            rows = await self.conn.fetch(statement, *args)
            if query == "run_start" and rows:
                session_pk = rows[0]["created_session_pk"]
            elif query.startswith("append_") and rows and rows[0]["status"] != "ok":
                raise RuntimeError(f"replayed {query!r} was refused ({rows[0]['status']})")


def analyze_databases(pg: Any) -> list[str]:
    """Runs ``ANALYZE`` in every database of a bench's PostgreSQL cluster (after warm-up).

    A bench's databases are minutes old at most, and autovacuum analyzes a
    table a minute (its naptime) after its first fifty rows: never, here. A
    never-analyzed table has no statistics, so the planner guesses: it read
    ``run_start``'s "is the session busy" check through ``runs_by_version``
    and filtered every run of the app (a run's cost then grows with the runs
    before it), and a fence check through the partial index of the RUNNING
    runs. A production database is analyzed; the benches time that state.

    Call it once the tables hold about as many rows as the timed part will
    leave: from the statistics of a table of twenty runs the planner makes a
    sequential scan the cached plan of a lookup by run id, which the table
    then outgrows (autovacuum analyzes again as it grows; a bench would not).

    Returns:
        The databases analyzed.
    """
    import psycopg

    names = [n for n in pg.list_databases() if n not in ("template0", "template1")]
    for name in names:
        with psycopg.connect(pg.url(name), autocommit=True) as conn:
            conn.execute("ANALYZE")
    return names


# ------------------------------------------------ the physical bound (issue 45)


def unit_bytes(params: dict[str, Any]) -> str:
    """The bytes a recorded unit carries to the database: its text parameters, joined.

    Event JSON, state deltas, the run's request, ids: what a bare commit of
    "the same bytes" writes in one row (numbers and NULLs are a few bytes
    and left out).
    """
    return "\n".join(v for v in params.values() if isinstance(v, str))


class BareCommits:
    """One bare commit per call: a single autocommit INSERT of a text, through the
    driver alone (no library code), as durable as our store's units.

    SQLite: ``sqlite3`` in autocommit mode (one statement is its own
    transaction), WAL + synchronous=FULL as SqliteStore opens its files, on
    the caller's thread as SqliteStore's ``inline`` units run. PostgreSQL: an
    asyncpg pool opened as PostgresStore opens it (no reset round trip), one
    ``execute``. Its table is ``bare_rows``; on SQLite open it on a file of
    its own (on the store's, its commits would wait for the store's lock).
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.commits = 0
        self._sqlite: sqlite3.Connection | None = None
        self._pool: Any = None

    async def open(self) -> BareCommits:
        create = "CREATE TABLE IF NOT EXISTS bare_rows (id {pk}, x TEXT NOT NULL)"
        if self.url.startswith("sqlite:///"):
            conn = sqlite3.connect(self.url.removeprefix("sqlite:///"), isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 10000")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute(create.format(pk="INTEGER PRIMARY KEY"))
            self._sqlite = conn
        else:
            import asyncpg  # only the benches that start PostgreSQL need it

            async def no_reset(connection: Any) -> None:
                return None

            self._pool = await asyncpg.create_pool(
                self.url, min_size=1, max_size=10, reset=no_reset
            )
            await self._pool.execute(create.format(pk="bigserial PRIMARY KEY"))
        return self

    async def commit(self, payload: str) -> None:
        """One statement, committed before it returns."""
        self.commits += 1
        if self._sqlite is not None:
            self._sqlite.execute("INSERT INTO bare_rows (x) VALUES (?)", (payload,))
        else:
            await self._pool.execute("INSERT INTO bare_rows (x) VALUES ($1)", payload)

    async def close(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()
            self._sqlite = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


def changed_rows(
    old: dict[Any, dict[str, Any]], new: dict[Any, dict[str, Any]]
) -> Iterator[tuple[Any, dict[str, Any], list[str] | None]]:
    """A table's rows (by key) that a unit wrote: each row of ``new`` that ``old`` did
    not hold (columns None: inserted) or held otherwise (the columns that changed)."""
    for key, row in new.items():
        was = old.get(key)
        if was is None:
            yield key, row, None
        elif was != row:
            yield key, row, [c for c in row if row[c] != was[c]]


# --------------------------------------- the same rows, bare (PostgreSQL)


@dataclass(frozen=True)
class PgRowChange:
    """One row a unit wrote on PostgreSQL: inserted (``key`` None) or updated
    (``key``: the values of its primary key's columns, as recorded)."""

    table: str
    columns: tuple[str, ...]
    values: tuple[Any, ...]
    key: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class _PgTable:
    name: str
    primary: tuple[str, ...]  # the primary key's columns
    identity: str | None  # a column the database numbers (GENERATED ... AS IDENTITY)
    refs: dict[str, str]  # column -> the table whose identity column it names


async def _pg_tables(conn: Any) -> dict[str, _PgTable]:
    names = [
        r["tablename"]
        for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    ]
    out: dict[str, _PgTable] = {}
    for name in names:
        primary = tuple(
            r["attname"]
            for r in await conn.fetch(
                """SELECT a.attname FROM pg_index i
                     JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
                    WHERE i.indrelid = $1::regclass AND i.indisprimary
                    ORDER BY array_position(i.indkey, a.attnum)""",
                f'"{name}"',
            )
        )
        identity = await conn.fetchval(
            """SELECT column_name FROM information_schema.columns
                WHERE table_schema = 'public' AND table_name = $1 AND is_identity = 'YES'""",
            name,
        )
        refs = {
            r["col"]: r["parent"]
            for r in await conn.fetch(
                """SELECT a.attname AS col, c.confrelid::regclass::text AS parent
                     FROM pg_constraint c
                     JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
                    WHERE c.conrelid = $1::regclass AND c.contype = 'f'
                      AND array_length(c.conkey, 1) = 1""",
                f'"{name}"',
            )
        }
        out[name] = _PgTable(name, primary, identity, refs)
    return out


async def _pg_rows(conn: Any, table: _PgTable) -> dict[tuple[Any, ...], dict[str, Any]]:
    rows = await conn.fetch(f'SELECT * FROM "{table.name}"')
    return {tuple(r[c] for c in table.primary): dict(r.items()) for r in rows}


class PgSameRows:
    """The physical bound of a unit that writes several rows (issue 45, item 6: "a
    unit at most 1.2x a bare commit of the same rows"), on PostgreSQL.

    As :class:`SameRows` on SQLite: :meth:`capture` replays a run's units one
    by one on a database of our schema and notes the rows each wrote (a row
    inserted, or the columns it changed of a row). A timed replay writes those
    rows again, with fresh ids, into another database of the same schema
    (tables, indexes, foreign keys), each unit as one statement of plain
    ``INSERT``s and ``UPDATE``s (one data-modifying ``WITH`` per row), sent
    with its values through asyncpg alone and committed on its own: one round
    trip, as our unit is, with none of its checks, guards or reads. Numbers
    the database assigns (identity columns) are given by the replay instead,
    from a range of its own, and the columns that refer to them follow.
    """

    def __init__(self, url: str, units: list[list[PgRowChange]]) -> None:
        self.url = url
        self.units = units
        self.commits = 0
        self._conn: Any = None
        self._tables: dict[str, _PgTable] = {}
        self._sql: list[str] = []
        self._ready: list[list[list[PgRowChange]]] = []
        self._next_number = 10**12  # above any number the capture saw

    @staticmethod
    async def capture(store: Any, url: str, calls: Units) -> list[list[PgRowChange]]:
        """The rows each of ``calls`` writes, replayed one by one on ``store`` (at ``url``)."""
        import asyncpg  # only the benches that start PostgreSQL need it

        conn = await asyncpg.connect(url)
        try:
            tables = await _pg_tables(conn)
            replay = Replay(store)
            out: list[list[PgRowChange]] = []
            for query, params in calls:
                if not store.writes(query):
                    continue
                before = {t: await _pg_rows(conn, tables[t]) for t in tables}
                await replay.send(query, params)
                changes: list[PgRowChange] = []
                for name, old in before.items():
                    after = await _pg_rows(conn, tables[name])
                    for key, row, changed in changed_rows(old, after):
                        if changed is None:
                            changes.append(PgRowChange(name, tuple(row), tuple(row.values())))
                        else:
                            values = tuple(row[c] for c in changed)
                            changes.append(PgRowChange(name, tuple(changed), values, key))
                out.append(changes)
            return out
        finally:
            await conn.close()

    async def open(self) -> PgSameRows:
        import asyncpg

        self._conn = await asyncpg.connect(self.url)
        self._tables = await _pg_tables(self._conn)
        self._sql = [self._statement(unit) for unit in self.units]
        return self

    def _statement(self, unit: list[PgRowChange]) -> str:
        """One unit's rows as one statement (its values are ``$n`` in the order
        :meth:`_values` gives them)."""
        parts: list[str] = []
        n = 0
        for i, c in enumerate(unit):
            if c.key is None:
                cols = ", ".join(f'"{col}"' for col in c.columns)
                marks = ", ".join(f"${n + j + 1}" for j in range(len(c.columns)))
                n += len(c.columns)
                override = (
                    " OVERRIDING SYSTEM VALUE"
                    if self._tables[c.table].identity in c.columns
                    else ""
                )
                parts.append(
                    f'w{i} AS (INSERT INTO "{c.table}" ({cols}){override} VALUES ({marks}))'
                )
            else:
                sets = ", ".join(f'"{col}" = ${n + j + 1}' for j, col in enumerate(c.columns))
                n += len(c.columns)
                primary = self._tables[c.table].primary
                where = " AND ".join(f'"{col}" = ${n + j + 1}' for j, col in enumerate(primary))
                n += len(primary)
                parts.append(f'w{i} AS (UPDATE "{c.table}" SET {sets} WHERE {where})')
        return "WITH " + ", ".join(parts) + " SELECT 1"

    def fresh(self) -> list[list[PgRowChange]]:
        """One replay's rows: every id fresh, every number the database assigned new
        (the bench's own work, not timed)."""
        swap = Replay(None)._swap
        numbers: dict[tuple[str, Any], int] = {}

        def number(table: str, old: Any) -> Any:
            if (table, old) not in numbers:
                numbers[(table, old)] = self._next_number
                self._next_number += 1
            return numbers[(table, old)]

        def renumbered(table: str, col: str, value: Any) -> Any:
            t = self._tables[table]
            if col == t.identity:
                return number(table, value)
            parent = t.refs.get(col)
            if parent is not None and self._tables[parent].identity is not None:
                return number(parent, value)
            return swap(value)

        out = []
        for unit in self.units:
            rows = []
            for c in unit:
                values = tuple(
                    renumbered(c.table, col, v) for col, v in zip(c.columns, c.values, strict=True)
                )
                key = (
                    None
                    if c.key is None
                    else tuple(
                        renumbered(c.table, col, v)
                        for col, v in zip(self._tables[c.table].primary, c.key, strict=True)
                    )
                )
                rows.append(dataclasses.replace(c, values=values, key=key))
            out.append(rows)
        return out

    def prepare(self, runs: int) -> None:
        """The next ``runs`` replays' rows, each with ids of its own (not timed)."""
        self._ready.extend(self.fresh() for _ in range(runs))

    async def __call__(self) -> None:
        """One replay: each unit's rows in one statement, committed on its own."""
        if not self._ready:
            self.prepare(1)
        for sql, unit in zip(self._sql, self._ready.pop(), strict=True):
            await self._conn.execute(sql, *self._values(unit))
            self.commits += 1

    @staticmethod
    def _values(unit: list[PgRowChange]) -> list[Any]:
        out: list[Any] = []
        for c in unit:
            out.extend(c.values)
            if c.key is not None:
                out.extend(c.key)
        return out

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None


# ------------------------------------------- the same rows, bare (SQLite)


@dataclass(frozen=True)
class RowChange:
    """One row a unit wrote: inserted (``key`` None) or updated (``key``: its rowid)."""

    table: str
    columns: tuple[str, ...]
    values: tuple[Any, ...]
    key: int | None = None
    rowid: int | None = None  # as recorded (None: a WITHOUT ROWID table's row)


def _tables(conn: sqlite3.Connection) -> list[str]:
    return [
        name
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    ]


def _rows(conn: sqlite3.Connection, table: str) -> dict[Any, dict[str, Any]]:
    """A table's rows by rowid (a ``WITHOUT ROWID`` table's: by primary key)."""
    pks = [
        r[1]
        for r in sorted(conn.execute(f'PRAGMA table_info("{table}")'), key=lambda r: r[5])
        if r[5]
    ]
    try:
        cur = conn.execute(f'SELECT rowid AS "__rowid", * FROM "{table}"')
    except sqlite3.OperationalError:  # WITHOUT ROWID
        cur = conn.execute(f'SELECT NULL AS "__rowid", * FROM "{table}"')
    names = [d[0] for d in cur.description][1:]
    out: dict[Any, dict[str, Any]] = {}
    for row in cur:
        values = dict(zip(names, row[1:], strict=True))
        out[row[0] if row[0] is not None else tuple(values[c] for c in pks)] = values
    return out


class SameRows:
    """The physical bound of a unit that writes several rows (issue 45, item 6: "a
    unit at most 1.2x a bare commit of the same rows"), on SQLite.

    :meth:`capture` replays a run's units one by one on a database of our
    schema and notes the rows each wrote (inserted, or the columns it changed
    of a row). A timed replay then writes those rows again, with fresh ids,
    into another database of the same schema (same tables, indexes and
    foreign keys), one ``BEGIN IMMEDIATE`` ... ``COMMIT`` per unit of plain
    ``INSERT`` and ``UPDATE`` statements through ``sqlite3`` alone (WAL,
    synchronous=FULL, on the caller's thread, as our store's inline units):
    the rows' own cost (their pages, indexes, the commit), with none of a
    unit's checks, guards or reads. Keys that the database assigns (an
    ``INTEGER PRIMARY KEY``) are assigned again, and the foreign keys that
    name them follow.
    """

    def __init__(self, path: str, units: list[list[RowChange]]) -> None:
        self.path = path
        self.units = units
        self.commits = 0
        self._conn: sqlite3.Connection | None = None
        self._ready: list[list[list[RowChange]]] = []
        self._alias: dict[str, str | None] = {}
        self._refs: dict[str, dict[str, str]] = {}

    @staticmethod
    async def capture(store: Any, calls: Units) -> list[list[RowChange]]:
        """The rows each of ``calls`` writes, replayed one by one on ``store`` (SQLite)."""
        conn = sqlite3.connect(store.path)
        try:
            replay = Replay(store)
            out: list[list[RowChange]] = []
            for query, params in calls:
                if not store.writes(query):
                    continue
                before = {t: _rows(conn, t) for t in _tables(conn)}
                await replay.send(query, params)
                changes: list[RowChange] = []
                for table, old in before.items():
                    for rowid, row, changed in changed_rows(old, _rows(conn, table)):
                        if changed is None:
                            changes.append(
                                RowChange(
                                    table,
                                    tuple(row),
                                    tuple(row.values()),
                                    rowid=rowid if isinstance(rowid, int) else None,
                                )
                            )
                        else:
                            if not isinstance(rowid, int):
                                raise NotImplementedError(f"an update of {table} (WITHOUT ROWID)")
                            changes.append(
                                RowChange(
                                    table,
                                    tuple(changed),
                                    tuple(row[c] for c in changed),
                                    key=rowid,
                                    rowid=rowid,
                                )
                            )
                out.append(changes)
            return out
        finally:
            conn.close()

    def open(self) -> SameRows:
        conn = sqlite3.connect(self.path, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 10000")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        for table in _tables(conn):
            pks = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")') if r[5]]
            typed = {r[1]: r[2].upper() for r in conn.execute(f'PRAGMA table_info("{table}")')}
            # An INTEGER PRIMARY KEY is the rowid: the database assigns it.
            one = pks[0] if len(pks) == 1 and typed[pks[0]] == "INTEGER" else None
            self._alias[table] = one
            self._refs[table] = {
                r[3]: r[2] for r in conn.execute(f'PRAGMA foreign_key_list("{table}")')
            }
        self._conn = conn
        return self

    def fresh(self) -> list[list[RowChange]]:
        """One replay's rows, every id in them fresh (the bench's own work, not timed)."""
        swap = Replay(None)._swap
        return [
            [dataclasses.replace(c, values=tuple(swap(v) for v in c.values)) for c in unit]
            for unit in self.units
        ]

    def prepare(self, runs: int) -> None:
        """The next ``runs`` replays' rows, each with ids of its own (not timed)."""
        self._ready.extend(self.fresh() for _ in range(runs))

    async def __call__(self) -> None:
        """One replay: each unit's rows in a transaction of their own."""
        if not self._ready:
            self.prepare(1)
        assigned: dict[tuple[str, Any], Any] = {}
        for unit in self._ready.pop():
            self.write(unit, assigned)

    def write(self, unit: list[RowChange], assigned: dict[tuple[str, Any], Any]) -> None:
        """One unit's rows, committed; ``assigned`` maps the replay's recorded keys to
        the keys the database gave its rows (a replay's units share it)."""
        conn = self._conn
        assert conn is not None
        conn.execute("BEGIN IMMEDIATE")
        for c in unit:
            alias = self._alias[c.table]
            refs = self._refs[c.table]
            pairs = [
                (col, assigned.get((refs[col], val), val) if col in refs else val)
                for col, val in zip(c.columns, c.values, strict=True)
                if col != alias
            ]
            if c.key is None:
                cols = ", ".join(f'"{col}"' for col, _ in pairs)
                marks = ", ".join("?" for _ in pairs)
                cur = conn.execute(
                    f'INSERT INTO "{c.table}" ({cols}) VALUES ({marks})', [v for _, v in pairs]
                )
                if c.rowid is not None:
                    assigned[(c.table, c.rowid)] = cur.lastrowid
            else:
                sets = ", ".join(f'"{col}" = ?' for col, _ in pairs)
                conn.execute(
                    f'UPDATE "{c.table}" SET {sets} WHERE rowid = ?',
                    [*(v for _, v in pairs), assigned.get((c.table, c.key), c.key)],
                )
        conn.execute("COMMIT")
        self.commits += 1

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
