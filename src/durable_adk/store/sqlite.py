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
  write lock, the unit tries again for up to a millisecond
  (:func:`try_write_lock`: a purge's batch holds it a few tenths of one; a
  holder of this process wakes it as it ends, :class:`Releases`), then
  gives up and goes to the database thread, which waits for the lock as
  usual. A thread hop (hand-off, wake-up, result back through the loop's
  self-pipe) measured 0.2-0.3 ms here, about as much as the fsync of the
  commit itself, and a run makes several such units. The price: the event
  loop is busy for the unit's commit (an fsync, about 0.3 ms), and up to a
  millisecond more while another connection holds the lock. ``:memory:``
  databases have no second connection.

Pragmas, each for a reason:

* ``journal_mode=WAL``: readers do not block the writer and the writer does not
  block readers, so a sweeper can read while a run appends; and a commit is one
  append to the log instead of rewriting pages.
* ``synchronous=FULL``: every commit is fsynced to the WAL before it returns.
  ``NORMAL`` in WAL mode may lose the last commits on power loss, and a lost
  commit is a lost event; durability is the point of this library.
* ``busy_timeout``: another process holding the write lock makes us wait (up to
  the timeout) instead of failing at once with SQLITE_BUSY. For the write lock
  itself (``BEGIN IMMEDIATE`` on the database thread) the store waits on its
  own, trying again every 0.2-2 ms (:func:`take_write_lock`): SQLite's busy
  handler sleeps 1, 2, 5, 10, ... up to 100 ms between its tries, so a unit
  that met a 3 ms transaction of another connection (a purge's batch) waited
  8 ms, and one that met a stream of short ones (the appends of live runs,
  taking the lock at once on their fast path) could wait seconds.
* ``synchronous`` is set to ``NORMAL`` for the one transaction of a unit run
  with ``sync=False`` (:func:`~durable_adk.store.base.fetch_held`: a purge's
  batch), and back to ``FULL`` after it: its commit writes the log but does not
  wait for the disk, so the write lock is held for the batch's own work (a
  batch of 20-50 events: 0.1-0.3 ms) instead of that plus an fsync (0.3-1 ms
  here, more on a busy disk). Its pages reach the disk with the next commit
  that syncs the log (the appends' commits sync the whole file) or the purge's
  checkpoint; a power cut before that undoes the batch, which a later pass
  deletes again. A process killed loses nothing: the log is in the OS's hands.
* ``foreign_keys=ON``: deleting a session removes its events and snapshots, and
  an event can never point at a missing session.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from durable_adk import errors
from durable_adk.faults import crash_point
from durable_adk.store.base import (
    Params,
    Row,
    Store,
    held_receipt,
    note_maybe_sent,
    unsynced_commit,
)
from durable_adk.store.groups import (
    DEFAULT_GROUP_MAX,
    Pending,
    Queue,
    groupable,
    nothing_else_ready,
)
from durable_adk.store.queries import CHECK, FOLDED, TRAVELS, Query, load_queries, split_script

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


def _busy(exc: sqlite3.Error) -> bool:
    """Whether SQLite refused for another connection's lock: SQLITE_BUSY or SQLITE_LOCKED."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and (code in _BUSY_CODES or code & 0xFF in {5, 6})


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
    if _busy(exc):
        return errors.DatabaseBusy(message)
    if code is not None and code & 0xFF in _UNAVAILABLE_PRIMARY:
        return errors.StoreUnavailable(message)
    return errors.StoreError(message)


def _fail(group: list[Pending], exc: BaseException) -> None:
    """The group's transaction failed: every unit of it fails, none was written."""
    for pending in group:
        if isinstance(exc, sqlite3.Error):
            error = translate(exc)
        elif isinstance(exc, errors.StoreError):
            error = type(exc)(str(exc))
        else:
            error = errors.StoreError(f"{exc} ({type(exc).__name__})")
        error.__cause__ = exc
        pending.settle(error)


def _hand_out(group: list[Pending], outcomes: list[list[dict[str, Any]] | sqlite3.Error]) -> None:
    for pending, outcome in zip(group, outcomes, strict=True):
        if isinstance(outcome, sqlite3.Error):
            error = translate(outcome)
            error.__cause__ = outcome
            pending.settle(error)
        else:
            pending.settle(outcome)


def _settle(group: list[Pending], done: asyncio.Future[Any]) -> None:
    """Hands out a group written on the database thread."""
    if done.cancelled():
        _fail(group, errors.StoreUnavailable("the store closed before the group was written"))
    elif done.exception() is not None:
        _fail(group, done.exception() or Exception())
    else:
        _hand_out(group, done.result())


def _journal_in_wal(conn: sqlite3.Connection, patience: float) -> None:
    """Puts the file in WAL mode, waiting up to ``patience`` seconds for other openers.

    Switching a new file to WAL takes an exclusive lock, and SQLite answers
    SQLITE_BUSY at once, without its busy handler, while another connection
    holds a write lock on the file (another opener switching it, say). So the
    pragma is tried again until the file is in WAL (set by whichever opener
    won) or the patience runs out.
    """
    deadline = time.monotonic() + patience
    pause = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if not _busy(exc):
                raise
            if time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


LOCK_POLL_FIRST = 0.0002
"""Seconds before the first new try for a write lock another connection holds."""

LOCK_POLL_MOST = 0.002
"""The most seconds between two tries for the write lock (the pause grows 1.5x a try)."""


FAST_PATIENCE = 0.001
"""Seconds a unit on the caller's thread keeps trying for a write lock another
connection holds (in steps of :data:`FAST_POLL_FIRST` growing to
:data:`FAST_POLL_MOST`) before it goes to wait on the database thread."""

FAST_POLL_FIRST = 0.00005
"""Seconds before the caller's thread tries the write lock again."""

FAST_POLL_MOST = 0.0002
"""The most seconds between two of the caller's thread's tries."""


class Releases:
    """The write lock of one database file given up by a connection of this process.

    A unit that finds the lock taken waits for it in short pauses (another
    process's holder can only be polled for); a holder of this process (a
    purge's batch on the database thread, while an append waits on the
    caller's thread) wakes it as soon as its transaction ends, instead of at
    the end of its pause (up to :data:`FAST_POLL_MOST`, a sizeable part of a
    0.3 ms batch). Shared by every store of this process on the same file
    (:func:`releases_of`). A wake-up only shortens a wait: the waiter tries
    ``BEGIN IMMEDIATE`` again, and a lost one costs the pause it would have
    waited anyway.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._ends = 0
        self._waiting = 0

    def seen(self) -> int:
        """How many transactions ended so far (read before trying for the lock)."""
        return self._ends

    def wait(self, seen: int, timeout: float) -> None:
        """Sleeps up to ``timeout`` seconds, less when a transaction ends after ``seen``."""
        with self._cond:
            if self._ends != seen:
                return
            self._waiting += 1
            try:
                self._cond.wait(timeout)
            finally:
                self._waiting -= 1

    def ended(self) -> None:
        """A write transaction of this process on the file ended: wakes its waiters."""
        if self._waiting:  # read without the lock: a waiter just arriving has its pause
            with self._cond:
                self._ends += 1
                self._cond.notify_all()
        else:
            self._ends += 1


_RELEASES: dict[str, Releases] = {}
_RELEASES_LOCK = threading.Lock()


def releases_of(path: str) -> Releases | None:
    """The :class:`Releases` of a database file, one per file in this process
    (None for a private ``:memory:`` database, which has one connection)."""
    if path == ":memory:":
        return None
    key = os.path.realpath(path)
    with _RELEASES_LOCK:
        found = _RELEASES.get(key)
        if found is None:
            found = _RELEASES[key] = Releases()
        return found


def try_write_lock(
    conn: sqlite3.Connection, patience: float, releases: Releases | None = None
) -> None:
    """``BEGIN IMMEDIATE`` on a connection with no busy timeout, tried again for up to
    ``patience`` seconds in steps of :data:`FAST_POLL_FIRST` to :data:`FAST_POLL_MOST`;
    raises SQLITE_BUSY once the patience is spent.

    For the caller's thread (an event loop): a purge's batch holds the lock a few
    tenths of a millisecond (:mod:`durable_adk.lifecycle.pacing`), less than a
    hand-off to the database thread and its tries (0.2 ms, then 0.3, 0.45, ...)
    cost, and while this thread sleeps it leaves the GIL to a purge of the same
    process that holds the lock (and is woken when it gives it up, ``releases``).
    A lock held longer (another process's long unit) costs the loop at most
    ``patience``, then the unit waits on the database thread as before.
    """
    _begin_within(conn, patience, FAST_POLL_FIRST, FAST_POLL_MOST, releases)


def take_write_lock(
    conn: sqlite3.Connection, patience_ms: int, releases: Releases | None = None
) -> None:
    """``BEGIN IMMEDIATE``, waiting up to ``patience_ms`` for another connection's
    write lock in steps of :data:`LOCK_POLL_FIRST` to :data:`LOCK_POLL_MOST`
    seconds (instead of SQLite's busy handler's coarser ones); raises SQLITE_BUSY
    once the patience is spent. The connection's ``busy_timeout`` is set back
    (to ``patience_ms``) for the statements that follow."""
    if patience_ms <= 0:
        conn.execute("BEGIN IMMEDIATE")
        return
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        _begin_within(conn, patience_ms / 1000, LOCK_POLL_FIRST, LOCK_POLL_MOST, releases)
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(patience_ms)}")


def _begin_within(
    conn: sqlite3.Connection,
    patience: float,
    first: float,
    most: float,
    releases: Releases | None = None,
) -> None:
    """``BEGIN IMMEDIATE`` on a connection that does not wait (busy timeout 0), tried
    again after ``first`` seconds, the pause growing 1.5x a try up to ``most``, until
    ``patience`` seconds are spent; then SQLITE_BUSY is raised. With ``releases``,
    a pause ends early when a connection of this process gives the lock up."""
    deadline = time.monotonic() + patience
    pause = first
    while True:
        seen = releases.seen() if releases is not None else 0
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if not _busy(exc) or time.monotonic() + pause > deadline:
                raise
        if releases is None:
            time.sleep(pause)
        else:
            releases.wait(seen, pause)
        pause = min(pause * 1.5, most)


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


def run_unit(conn: sqlite3.Connection, query: Query, args: Params) -> list[dict[str, Any]]:
    """Runs a unit's statements inside the caller's transaction; returns its rows.

    A unit stops after a check (the first statement of a guarded unit, or
    of a guarded part of a unit made of others) whose status is not
    ``'ok'`` (the check's rows are the result); a statement marked
    ``-- skip when :x IS NULL`` is not run when ``x`` is NULL; a check that
    travels in the next statement (``-- check travels here``) runs only when
    that statement wrote nothing or failed on a constraint. The result is
    the rows of the last statement that returned rows (``args``: at least its names).
    """
    result: list[dict[str, Any]] = []
    for statement, skip, role, check in query.plan:
        if skip and any(args[name] is None for name in skip):
            continue
        if role == TRAVELS:
            continue  # the check travels in the next statement's WHERE
        if role == FOLDED:
            # The check runs only when the write did not pass it: its rows are
            # then what they would have been had it run first.
            try:
                written = conn.execute(statement, args).rowcount
            except sqlite3.IntegrityError:
                checked = _rows(conn.execute(check, args))
                if not checked or checked[0].get("status") != "ok":
                    return checked
                raise
            if written == 0:
                result = _rows(conn.execute(check, args))
                if not result or result[0].get("status") != "ok":
                    return result
            continue
        cursor = conn.execute(statement, args)
        if cursor.description is None:
            continue
        result = _rows(cursor)
        if role == CHECK and (not result or result[0].get("status") != "ok"):
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

    def __init__(
        self,
        path: str,
        *,
        busy_timeout_ms: int = 10_000,
        mode: str = "rwc",
        group_commit: bool = False,
        group_max: int = DEFAULT_GROUP_MAX,
    ) -> None:
        """Opens (creating if needed) the database file.

        Args:
            path: The database file, or ``:memory:`` for a private in-memory one.
            busy_timeout_ms: How long to wait for another process's write lock.
            mode: ``rwc`` (read and write, create the file if missing), ``rw``
                (an existing file only) or ``ro`` (an existing file, read-only:
                every write fails with SQLITE_READONLY, a StoreError).
            group_commit: Write the units of different runs submitted in the
                same turn of the event loop in one transaction
                (:mod:`durable_adk.store.groups`).
            group_max: Most units in one group.
        """
        if mode not in ("ro", "rw", "rwc") or (mode != "rwc" and path == ":memory:"):
            raise errors.UnsupportedUrl(f"SQLite mode {mode!r} cannot apply to {path!r}")
        if not isinstance(group_max, int) or group_max < 1:
            raise errors.InvalidArgument(f"group_max must be a whole number >= 1: {group_max!r}")
        self.group_commit = bool(group_commit)
        self._group = Queue(group_max)
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
        self._releases = releases_of(path)

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
            _journal_in_wal(conn, self._busy_timeout_ms / 1000)
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

    def _run(
        self,
        query: Query,
        params: Params,
        held: list[float] | None = None,
        unsynced: bool = False,
    ) -> list[dict[str, Any]]:
        assert self._conn is not None, "store not opened"
        if unsynced and query.writes:
            self._conn.execute("PRAGMA synchronous = NORMAL")
            try:
                return self._run_on(self._conn, query, params, held)
            finally:
                self._conn.execute("PRAGMA synchronous = FULL")
        return self._run_on(self._conn, query, params, held)

    def _run_on(
        self,
        conn: sqlite3.Connection,
        query: Query,
        params: Params,
        held: list[float] | None = None,
    ) -> list[dict[str, Any]]:
        """Runs a unit in a transaction of its own; appends to ``held`` (when given)
        the seconds from the write lock granted to the commit done (a unit that
        writes nothing: its whole run), never the wait for the lock."""
        # The caller's dict as it is when it holds every name (a statement reads its own).
        args = (
            params
            if type(params) is dict and query.needs <= params.keys()
            else arguments(query, params)
        )
        if len(query.statements) == 1 and not query.writes:
            began = time.perf_counter()
            rows = _rows(conn.execute(query.statements[0], args))
            if held is not None:
                held.append(time.perf_counter() - began)
            return rows
        if query.writes:
            self._lock(conn)
        else:
            conn.execute("BEGIN")
        began = 0.0 if held is None else time.perf_counter()  # the lock is ours
        try:
            result = run_unit(conn, query, args)
            conn.execute("COMMIT")
            if held is not None:
                held.append(time.perf_counter() - began)
            if query.writes:
                self.commits += 1
            return result
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            if query.writes and self._releases is not None:
                self._releases.ended()

    def _lock(self, conn: sqlite3.Connection) -> None:
        """Takes the write lock: within :data:`FAST_PATIENCE` or not at all on the fast
        connection, waiting up to the busy timeout in short steps on the database
        thread's."""
        if conn is self._fast:
            try_write_lock(conn, FAST_PATIENCE, self._releases)
        else:
            take_write_lock(conn, self._busy_timeout_ms, self._releases)

    def _on_fast_path(self, query: Query) -> bool:
        return (
            query.inline
            and self._fast is not None
            and not self._closed
            and threading.get_ident() == self._fast_thread
        )

    async def _fetch(self, query: str, params: Params | None = None) -> Sequence[Row]:
        q = self._query(query)
        if not self._closed:
            note_maybe_sent()  # it reaches the file from here: a failed write may have acted
        held = held_receipt()  # taken here: the database thread does not see our context
        unsynced = unsynced_commit()
        if self._on_fast_path(q) and not unsynced:
            if self.group_commit and groupable(q):
                loop = asyncio.get_running_loop()
                if self._group or not nothing_else_ready(loop):
                    return await self._grouped(q, params or {}, loop)
            assert self._fast is not None
            try:
                return self._run_on(self._fast, q, params or {}, held)
            except sqlite3.Error as exc:
                error = translate(exc)
                if not isinstance(error, errors.DatabaseBusy):
                    raise error from exc
                # Another connection holds the lock: wait for it on the database thread.
        return await self._call(lambda: self._run(q, params or {}, held, unsynced))

    # ------------------------------------------------------------ group commit

    async def _grouped(
        self, query: Query, params: Params, loop: asyncio.AbstractEventLoop
    ) -> list[dict[str, Any]]:
        """Queues a unit for this turn's group; returns its rows or raises its error."""
        pending = self._group.add(query, arguments(query, params))
        if len(self._group) == 1:
            loop.call_soon(self._flush_group)
        rows: list[dict[str, Any]] = await pending.future
        return rows

    def _flush_group(self) -> None:
        """Writes the units of this turn (a loop callback): on the caller's
        connection, or on the database thread when another holds the lock."""
        group = self._group.take()
        if self._group:
            asyncio.get_running_loop().call_soon(self._flush_group)
        if not group:
            return
        if self._closed or self._fast is None:
            for pending in group:
                pending.settle(errors.StoreUnavailable("the store is closed"))
            return
        try:
            outcomes = self._write_group(self._fast, group)
        except Exception as exc:
            if not (
                isinstance(exc, sqlite3.Error) and isinstance(translate(exc), errors.DatabaseBusy)
            ):
                _fail(group, exc)
                return
            # Another connection holds the write lock: the database thread
            # waits for it, as for any unit (nothing of the group was written).
            conn = self._conn
            assert conn is not None
            waiting = asyncio.get_running_loop().run_in_executor(
                self._executor, lambda: self._write_group(conn, group)
            )
            waiting.add_done_callback(lambda done: _settle(group, done))
            return
        _hand_out(group, outcomes)

    def _write_group(
        self, conn: sqlite3.Connection, group: list[Pending]
    ) -> list[list[dict[str, Any]] | sqlite3.Error]:
        """One transaction for the group, each unit behind a savepoint of its own.

        Returns each unit's rows, or the error that rolled it (alone) back.
        Raises when the transaction itself failed: then nothing was written.
        """
        self._lock(conn)
        try:
            outcomes: list[list[dict[str, Any]] | sqlite3.Error] = []
            if len(group) == 1:  # alone: no savepoint needed, its error is the group's
                outcomes.append(run_unit(conn, group[0].query, group[0].args))
            for index, pending in enumerate(group if len(group) > 1 else ()):
                conn.execute("SAVEPOINT unit")
                try:
                    outcomes.append(run_unit(conn, pending.query, pending.args))
                except sqlite3.Error as exc:
                    if not conn.in_transaction:  # the error ended the transaction
                        raise
                    conn.execute("ROLLBACK TO unit")
                    outcomes.append(exc)
                conn.execute("RELEASE unit")
                if index == 0:
                    crash_point("store.group_after_first_unit")
            conn.execute("COMMIT")
            self.commits += 1
            return outcomes
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            if self._releases is not None:
                self._releases.ended()

    def describe(self) -> str:
        return f"SQLite {self.path}"

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
        await self._close_health()

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
