"""SQLite backend: one database thread, one hop per unit of work, and a fast path.

All statements of a unit (a named query, possibly several statements) run in a
single call, inside one transaction, so an append costs one fsync. Writes take
the lock up front (``BEGIN IMMEDIATE``) so two processes never deadlock
upgrading a read lock.

Where a unit runs:

* On the database thread (one connection, one thread): every unit by default,
  so a large read or a wait for another process's lock never blocks the event
  loop.
* On the caller's thread: the small units of a run's hot path, marked
  ``inline`` in the SQL (an append, a ledger write, a journal entry). They use
  a second connection with no busy timeout: if another connection holds the
  write lock, the attempt fails at once, rolls back and the unit goes to the
  database thread, which waits for the lock as usual. A thread hop (hand-off,
  wake-up, result back through the loop's self-pipe) measured 0.2-0.3 ms here,
  about as much as the fsync of the commit itself, and a run makes several
  such units. The price: the event loop is busy for the unit's commit (an
  fsync, about 0.3 ms). ``:memory:`` databases have no second connection.

Pragmas, each for a reason:

* ``journal_mode=WAL``: readers do not block the writer and the writer does not
  block readers, so a sweeper can read while a run appends; and a commit is one
  append to the log instead of rewriting pages.
* ``synchronous=FULL``: every commit is fsynced to the WAL before it returns.
  ``NORMAL`` in WAL mode may lose the last commits on power loss, and a lost
  commit is a lost event; durability is the point of this library.
* ``busy_timeout``: another process holding the write lock makes us wait (up to
  the timeout) instead of failing at once with SQLITE_BUSY.
* ``foreign_keys=ON``: deleting a session removes its events and snapshots, and
  an event can never point at a missing session.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from durable_adk import errors
from durable_adk.store.base import Params, Row, Store
from durable_adk.store.queries import Query, load_queries, split_script

T = TypeVar("T")

# Extended result codes (https://www.sqlite.org/rescode.html).
_UNIQUE_CODES = {1555, 2067}  # SQLITE_CONSTRAINT_PRIMARYKEY, _UNIQUE
_FOREIGN_KEY_CODE = 787  # SQLITE_CONSTRAINT_FOREIGNKEY
_BUSY_CODES = {5, 6, 261, 517}  # SQLITE_BUSY, _LOCKED, _BUSY_RECOVERY, _BUSY_SNAPSHOT
_CANTOPEN_CODE = 14
# The database or its disk failed under us, not the statement: SQLITE_NOMEM,
# SQLITE_IOERR (and its extended codes), SQLITE_FULL, SQLITE_CANTOPEN,
# SQLITE_PROTOCOL (a WAL lock race). A retry later may succeed.
_UNAVAILABLE_PRIMARY = {7, 10, 13, _CANTOPEN_CODE, 15}


def merge_json(state: str | None, delta: str | None) -> str | None:
    """Shallow-merges a JSON object into another, as ``dict.update`` does.

    Registered as the SQL function ``dadk_merge``. SQLite's ``json_patch``
    would drop keys set to null and merge nested objects, which is not what an
    ADK state delta means.
    """
    if delta is None:
        return state
    merged = json.loads(state) if state else {}
    merged.update(json.loads(delta))
    return json.dumps(merged, separators=(",", ":"))


def translate(exc: sqlite3.Error) -> errors.StoreError:
    """Maps a sqlite3 error to ours by its extended result code.

    SQLITE_BUSY and SQLITE_LOCKED (with their extended codes) are
    :class:`~durable_adk.errors.DatabaseBusy`; I/O, disk-full, out-of-memory,
    cannot-open and WAL-protocol errors are
    :class:`~durable_adk.errors.StoreUnavailable`; anything else (a constraint,
    a bad statement) is a plain :class:`~durable_adk.errors.StoreError`.
    """
    code = getattr(exc, "sqlite_errorcode", None)
    message = f"{exc} (sqlite code {code})"
    if code in _UNIQUE_CODES:
        return errors.UniqueViolation(message)
    if code == _FOREIGN_KEY_CODE:
        return errors.ForeignKeyViolation(message)
    if code is not None and (code in _BUSY_CODES or code & 0xFF in {5, 6}):
        return errors.DatabaseBusy(message)
    if code is not None and code & 0xFF in _UNAVAILABLE_PRIMARY:
        return errors.StoreUnavailable(message)
    return errors.StoreError(message)


def _rows(cursor: sqlite3.Cursor) -> list[dict[str, Any]]:
    """A cursor's rows as dicts; the column names are read once per cursor."""
    description = cursor.description
    if description is None:
        return []
    names = [d[0] for d in description]
    return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]


def arguments(query: Query, params: Params) -> dict[str, Any]:
    """The named arguments of a unit, or InvalidArgument before any SQL runs."""
    try:
        return {name: params[name] for name in query.params}
    except KeyError:
        missing = [n for n in query.params if n not in params]
        raise errors.InvalidArgument(f"query {query.name!r} needs {missing}") from None


def run_unit(conn: sqlite3.Connection, query: Query, args: dict[str, Any]) -> list[dict[str, Any]]:
    """Runs a unit's statements inside the caller's transaction; returns its rows.

    A guarded unit stops after its check when the check's status is not
    ``'ok'`` (the check's rows are the result); a statement marked
    ``-- skip when :x IS NULL`` is not run when ``x`` is NULL. The result is
    the rows of the last statement that returned rows.
    """
    result: list[dict[str, Any]] = []
    skips = query.skips
    for index, statement in enumerate(query.statements):
        if skips and any(args[name] is None for name in skips[index]):
            continue
        cursor = conn.execute(statement, args)
        if cursor.description is None:
            continue
        result = _rows(cursor)
        if index == 0 and query.guarded and (not result or result[0].get("status") != "ok"):
            break
    return result


def statement_cache_size(queries: Mapping[str, Query]) -> int:
    """How many prepared statements a connection keeps: every one the store may run.

    sqlite3 keeps an LRU cache of prepared statements per connection (128 by
    default); the store's units hold more distinct statements than that, so a
    rarely used unit (a sweep, an operator's query) would evict a hot one,
    which is then prepared again. Every statement of every unit, plus the
    transaction control statements and 64 more (the store's own reads of its
    schema version, a migration's DDL), fits.
    """
    distinct = {s for q in queries.values() for s in q.statements}
    return len(distinct) + len(CONTROL_STATEMENTS) + 64


CONTROL_STATEMENTS = (
    "BEGIN",
    "BEGIN IMMEDIATE",
    "COMMIT",
    "ROLLBACK",
)
"""The transaction control statements a unit may run besides its own."""


class SqliteStore(Store):
    """A store on one SQLite file."""

    dialect = "sqlite"

    def __init__(self, path: str, *, busy_timeout_ms: int = 10_000, mode: str = "rwc") -> None:
        """Opens (creating if needed) the database file.

        Args:
            path: The database file, or ``:memory:`` for a private in-memory one.
            busy_timeout_ms: How long to wait for another process's write lock.
            mode: ``rwc`` (read and write, create the file if missing), ``rw``
                (an existing file only) or ``ro`` (an existing file, read-only:
                every write fails with SQLITE_READONLY, a StoreError).
        """
        if mode not in ("ro", "rw", "rwc") or (mode != "rwc" and path == ":memory:"):
            raise errors.UnsupportedUrl(f"SQLite mode {mode!r} cannot apply to {path!r}")
        self.path = path
        self.mode = mode
        self.url = f"sqlite:///{path}" + ("" if mode == "rwc" else f"?mode={mode}")
        self._queries = load_queries("sqlite")
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="durable-adk-sqlite")
        self._busy_timeout_ms = busy_timeout_ms
        self._conn: sqlite3.Connection | None = None
        self._fast: sqlite3.Connection | None = None
        self._fast_thread: int | None = None
        self._closed = False
        self._thread_id: int | None = None

    async def open(self) -> SqliteStore:
        """Connects and applies the pragmas; returns self."""
        await self._call(self._connect)
        if self.path != ":memory:":
            try:
                # Used only from the thread that opened the store (an event loop
                # in another thread goes through the database thread), but
                # closable from any.
                self._fast = self._connection(busy_timeout_ms=0, same_thread=False)
            except sqlite3.Error as exc:
                raise translate(exc) from exc
            self._fast_thread = threading.get_ident()
        return self

    def _connection(self, *, busy_timeout_ms: int, same_thread: bool = True) -> sqlite3.Connection:
        cache = statement_cache_size(self._queries)
        if self.mode == "rwc":
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=same_thread,
                cached_statements=cache,
            )
        else:
            # A URI filename is the only way to open without creating, or read-only.
            target = f"file:{quote(str(Path(self.path).absolute()))}?mode={self.mode}"
            conn = sqlite3.connect(
                target,
                uri=True,
                isolation_level=None,
                check_same_thread=same_thread,
                cached_statements=cache,
            )
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        if self.mode != "ro":  # a reader takes the file's journal mode as it is
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.create_function("dadk_merge", 2, merge_json, deterministic=True)
        return conn

    def _connect(self) -> None:
        if self.path != ":memory:" and self.mode == "rwc":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._conn = self._connection(busy_timeout_ms=self._busy_timeout_ms)
        self._thread_id = threading.get_ident()

    async def _call(self, fn: Callable[[], T]) -> T:
        if self._closed:
            raise errors.StoreUnavailable("the store is closed")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn)
        except sqlite3.Error as exc:
            raise translate(exc) from exc
        except OSError as exc:  # e.g. the database's folder cannot be created
            raise errors.StoreUnavailable(f"cannot open {self.path}: {exc}") from exc

    def _query(self, name: str) -> Query:
        try:
            return self._queries[name]
        except KeyError:
            raise errors.InvalidArgument(f"no query named {name!r}") from None

    def _run(self, query: Query, params: Params) -> list[dict[str, Any]]:
        assert self._conn is not None, "store not opened"
        return self._run_on(self._conn, query, params)

    def _run_on(
        self, conn: sqlite3.Connection, query: Query, params: Params
    ) -> list[dict[str, Any]]:
        args = arguments(query, params)
        if len(query.statements) == 1 and not query.writes:
            return _rows(conn.execute(query.statements[0], args))
        conn.execute("BEGIN IMMEDIATE" if query.writes else "BEGIN")
        try:
            result = run_unit(conn, query, args)
            conn.execute("COMMIT")
            return result
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    async def fetch(self, query: str, params: Params | None = None) -> Sequence[Row]:
        q = self._query(query)
        if (
            q.inline
            and self._fast is not None
            and not self._closed
            and threading.get_ident() == self._fast_thread
        ):
            try:
                return self._run_on(self._fast, q, params or {})
            except sqlite3.Error as exc:
                error = translate(exc)
                if not isinstance(error, errors.DatabaseBusy):
                    raise error from exc
                # Another connection holds the lock: wait for it on the database thread.
        return await self._call(lambda: self._run(q, params or {}))

    async def now(self) -> float:
        value = await self.fetchval("db_now")
        return float(value)

    async def schema_version(self) -> int:
        def read() -> int:
            conn = self._conn
            assert conn is not None
            exists = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
            ).fetchone()
            if not exists:
                return 0
            row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
            return int(row[0])

        return await self._call(read)

    async def run_script(self, sql: str) -> None:
        statements = split_script(sql)

        def run() -> None:
            conn = self._conn
            assert conn is not None
            conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in statements:
                    conn.execute(statement)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

        await self._call(run)

    async def close(self) -> None:
        if self._closed:
            return

        def shut() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        if self._fast is not None:
            self._fast.close()
            self._fast = None

        await asyncio.get_running_loop().run_in_executor(self._executor, shut)
        self._closed = True
        self._executor.shutdown(wait=True)
