"""PostgreSQL backend on asyncpg connections, pooled by :mod:`durable_adk.store.pool`.

asyncpg was chosen over psycopg 3 by measurement (``bench/driver_choice.py``,
figures in BENCHMARKS.md): a single-row durable commit and the fenced append
both cost less per round trip. Every named query is one statement, so each unit
of work is one round trip and atomic on its own; asyncpg prepares and caches
the statements per connection.

Every call is bounded in time, so a hung connection (a network partition, a
frozen server) is noticed: a statement may take at most ``command_timeout``
seconds (default 10), and a wait for a connection fails when no connection
of the pool was given back for ``acquire_timeout`` seconds (default 5; making
a new connection is bounded by it too). Either raises
:class:`~durable_adk.errors.StoreUnavailable`, and the connection whose
statement timed out is terminated, never handed back to the pool in an
unknown state (asyncpg would otherwise wait for the server to confirm a
cancel that a frozen server never sends). A long queue for a pool that keeps
turning over is load, not a fault: its callers wait.

Two pools, so a heartbeat never waits for a connection behind event-stream
readers: the main pool (``pool_size``, default 10) for everything else, and a
small lease pool (``lease_pool_size``, default 2) for the units marked
``lease`` in the SQL (a heartbeat's batched renewal, claims). Claims may hold
all but one of the lease pool's connections, so a heartbeat never waits
behind them either. A worker's heartbeat is one statement per renewal
interval for all its runs (:class:`~durable_adk.fencing.leases.LeaseKeeper`), so two
connections are plenty; the lease pool costs the server ``lease_pool_size``
more connections per worker. In the main pool, units that take new work in
(``intake``: a run submitted) get a connection only when no other unit
waits, so a burst of submissions queues in the process while the runs in
progress keep writing (:mod:`durable_adk.store.lanes`).

With ``notify`` on (the default), a dedicated connection outside both pools
LISTENs on ``durable_adk_turns``: a run that ends while another run of its
session waits QUEUED sends ``pg_notify`` and every worker's waiting runs of
that session try their claim at once. It is only a wake-up: waiting runs poll
at a back-off besides, so ``notify=off`` (CockroachDB, YugabyteDB, a pooler in
transaction mode) loses latency, not correctness; a lost listener connection
is reconnected with a back-off.

Errors are translated by SQLSTATE and by exception type, never by message:
23505 unique violation, 23503 foreign key, 40001/40P01/55P03 busy
(serialization failure, deadlock, lock not available); class 08, 57P01-57P03
(shutdown, crash, cannot connect now), 57014 (statement cancelled), 53300
(too many connections) unavailable. asyncpg's own connection-level errors
(``InterfaceError`` such as "connection is closed" or "another operation is in
progress", ``InternalClientError``, ``OSError`` and timeouts), which are what a
server restart leaves behind on pooled connections, are unavailable too; a
value asyncpg cannot encode (``DataError``) is a plain ``StoreError``, because
retrying it changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from durable_adk import errors
from durable_adk.faults import crash_point
from durable_adk.store.base import (
    Params,
    Row,
    Store,
    held_receipt,
    note_maybe_sent,
    note_sent,
    sent_wanted,
)
from durable_adk.store.groups import DEFAULT_GROUP_MAX, Pending, Queue, groupable
from durable_adk.store.lanes import CLAIM, INTAKE, URGENT, Lane, LaneStalled
from durable_adk.store.outage import DIAGNOSE_TIMEOUT
from durable_adk.store.pool import Pool
from durable_adk.store.queries import Query, load_queries

T = TypeVar("T")

logger = logging.getLogger("durable_adk.store")

_BUSY_STATES = {"40001", "40P01", "55P03"}
_UNAVAILABLE_STATES = {"57P01", "57P02", "57P03", "57014", "53300", "25006"}
# 25006 read_only_sql_transaction: a standby (or a primary being demoted) took the
# write: the database is there but takes no writes, as during a failover.
# Errors asyncpg raises about input it cannot send: deterministic, not transient.
_INPUT_ERRORS = (
    asyncpg.DataError,
    asyncpg.ClientConfigurationError,
    asyncpg.UnsupportedClientFeatureError,
)

DEFAULT_COMMAND_TIMEOUT = 10.0
"""Seconds a statement may take before the store gives up on its connection."""

DEFAULT_ACQUIRE_TIMEOUT = 5.0
"""Seconds a wait for a pooled connection lasts with none given back (or to make a new one)."""

DEFAULT_POOL_SIZE = 10
"""Connections of the main pool (event streams, appends, reads)."""

DEFAULT_LEASE_POOL_SIZE = 2
"""Connections of the lease pool (heartbeats and claims)."""

TURNS_CHANNEL = "durable_adk_turns"
"""The LISTEN/NOTIFY channel of session turns (payload: the session key)."""

URL_OPTIONS = (
    "command_timeout",
    "acquire_timeout",
    "pool_size",
    "lease_pool_size",
    "notify",
    "group_commit",
)
"""Store options that may be given in the URL's query string (removed before connecting)."""

_SECONDS_OPTIONS = ("command_timeout", "acquire_timeout")
_SIZE_OPTIONS = ("pool_size", "lease_pool_size")
_SWITCHES = {"on": True, "true": True, "1": True, "off": False, "false": False, "0": False}


def translate(exc: BaseException) -> errors.StoreError:
    """Maps an asyncpg (or socket) error to ours by SQLSTATE or exception type."""
    if isinstance(exc, asyncpg.PostgresError):
        state = getattr(exc, "sqlstate", None)
        message = f"{exc} (sqlstate {state})"
        if state == "23505":
            return errors.UniqueViolation(message)
        if state == "23503":
            return errors.ForeignKeyViolation(message)
        if state in _BUSY_STATES:
            return errors.DatabaseBusy(message)
        if state in _UNAVAILABLE_STATES or (isinstance(state, str) and state.startswith("08")):
            return errors.StoreUnavailable(message)
        return errors.StoreError(message)
    kind = type(exc).__name__
    if isinstance(exc, TimeoutError):
        return errors.StoreUnavailable(f"PostgreSQL did not answer in time ({kind})")
    if isinstance(exc, _INPUT_ERRORS):
        return errors.StoreError(f"{exc} ({kind})")
    if isinstance(exc, (asyncpg.InterfaceError, asyncpg.InternalClientError, OSError)):
        return errors.StoreUnavailable(f"{exc} ({kind})")
    return errors.StoreError(f"{exc} ({kind})")


def split_url_options(url: str) -> tuple[str, dict[str, Any]]:
    """Takes the store's own options out of a URL's query string.

    ``postgresql://u@h/db?command_timeout=5&sslmode=disable`` gives
    ``postgresql://u@h/db?sslmode=disable`` and ``{"command_timeout": 5.0}``;
    other parameters are left for asyncpg. Timeouts are seconds > 0 (float),
    pool sizes whole numbers >= 1 (int), ``notify`` is on/off (bool).

    Raises:
        InvalidArgument: An option's value is out of its range.
    """
    parts = urlsplit(url)
    kept, options = [], {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name not in URL_OPTIONS:
            kept.append((name, value))
            continue
        options[name] = _option(name, value)
    return urlunsplit(parts._replace(query=urlencode(kept))), options


def statement_cache_size(queries: Mapping[str, Query]) -> int:
    """Prepared statements asyncpg keeps per connection: every statement a named query
    may send (one, or one per combination of NULLs that leaves members out), and room.

    The room (32) is for the store's own statements outside the named queries
    (the schema version's two reads) and for queries added without this
    number being revisited.
    """
    return sum(max(1, len(q.variants)) for q in queries.values()) + 32


def _option(name: str, value: str) -> float | int | bool:
    if name in _SIZE_OPTIONS:
        if not (value.isdigit() and int(value) >= 1):
            raise errors.InvalidArgument(
                f"{name} in the store URL must be a whole number >= 1: {value!r}"
            )
        return int(value)
    if name not in _SECONDS_OPTIONS:
        if value.lower() not in _SWITCHES:
            raise errors.InvalidArgument(f"{name} in the store URL must be on or off: {value!r}")
        return _SWITCHES[value.lower()]
    try:
        number = float(value)
    except ValueError:
        number = 0.0
    if not number > 0:
        raise errors.InvalidArgument(f"{name} in the store URL must be seconds > 0: {value!r}")
    return number


_WRITABLE = "SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off'"
"""Whether the server of a connection takes writes (the outage probe's question)."""

_TIMELINE = (
    "SELECT CASE WHEN pg_is_in_recovery() THEN NULL"
    " ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END"
)
"""The WAL timeline of a primary (a promotion starts a new one), or NULL on a standby."""


def _hosts(dsn: str) -> tuple[str, list[tuple[str, int]], str]:
    """A URL's user part (with its ``@``), its hosts with ports, and what follows them.

    ``postgresql://u@h1:5432,h2/db?x=1`` gives ``("u@", [("h1", 5432), ("h2", 5432)],
    "/db?x=1")``; ``target_session_attrs`` is dropped from what follows (each host
    is looked at on its own).
    """
    parts = urlsplit(dsn)
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    hosts = []
    for item in hostlist.split(","):
        host, _, port = item.rpartition(":") if not item.endswith("]") else (item, "", "")
        if not host or not port.isdigit():
            host, port = item, ""
        hosts.append((host or "localhost", int(port) if port else 5432))
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "target_session_attrs"])
    rest = parts.path + (f"?{query}" if query else "")
    return (f"{userinfo}@" if userinfo else ""), hosts, rest


def _unit_error(exc: asyncpg.PostgresError) -> errors.StoreError:
    error = translate(exc)
    error.__cause__ = exc
    return error


class PostgresStore(Store):
    """A store on one PostgreSQL database."""

    dialect = "postgresql"

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int | None = None,
        command_timeout: float | None = None,
        acquire_timeout: float | None = None,
        lease_pool_size: int | None = None,
        notify: bool | None = None,
        group_commit: bool | None = None,
        group_max: int = DEFAULT_GROUP_MAX,
    ) -> None:
        """Prepares the pools; call :meth:`open` to connect.

        Args:
            url: A ``postgresql://`` URL. Its query string may carry the
                options of :data:`URL_OPTIONS`; the keyword arguments win
                over them.
            min_size: Connections the main pool keeps open.
            max_size: Most connections of the main pool (URL ``pool_size``,
                default 10).
            command_timeout: Seconds a statement may take (default 10).
            acquire_timeout: Seconds a wait for a connection of either pool
                may last while none is given back, and to make a new one
                (default 5).
            lease_pool_size: Connections of the lease pool for heartbeats and
                claims (default 2).
            notify: LISTEN/NOTIFY wake-ups of queued runs (default on).
            group_commit: Write the units of different runs that wait for a
                connection together, in one transaction
                (:mod:`durable_adk.store.groups`; URL ``group_commit``,
                default off).
            group_max: Most units in one group.

        Raises:
            InvalidArgument: A timeout is not a positive number, or a size < 1.
        """
        self.url = url
        self._dsn, from_url = split_url_options(url)
        if command_timeout is None:
            command_timeout = from_url.get("command_timeout", DEFAULT_COMMAND_TIMEOUT)
        if acquire_timeout is None:
            acquire_timeout = from_url.get("acquire_timeout", DEFAULT_ACQUIRE_TIMEOUT)
        if max_size is None:
            max_size = int(from_url.get("pool_size", DEFAULT_POOL_SIZE))
        if lease_pool_size is None:
            lease_pool_size = int(from_url.get("lease_pool_size", DEFAULT_LEASE_POOL_SIZE))
        command, acquire = command_timeout, acquire_timeout
        if not (command > 0 and acquire > 0):
            raise errors.InvalidArgument("command_timeout and acquire_timeout must be > 0")
        if max_size < 1 or lease_pool_size < 1:
            raise errors.InvalidArgument("pool_size and lease_pool_size must be >= 1")
        self.command_timeout = float(command)
        self.acquire_timeout = float(acquire)
        self._wait_peak = 0.0  # the longest wait for a main-pool connection since take_pressure
        self.notify = bool(from_url.get("notify", True) if notify is None else notify)
        if group_commit is None:
            group_commit = bool(from_url.get("group_commit", False))
        if not isinstance(group_max, int) or group_max < 1:
            raise errors.InvalidArgument(f"group_max must be a whole number >= 1: {group_max!r}")
        self.group_commit = group_commit
        self._group = Queue(group_max)
        self._takers: set[asyncio.Task[None]] = set()  # held: the loop keeps weak references
        self._takers_waiting = 0  # takers not yet holding a connection
        self._queries = load_queries("postgresql")
        # Per connection, the lease-taking statements prepared on it (_prepared_on);
        # forgotten when the connection is closed or terminated (each statement
        # holds its connection, so a weak map would never let one go).
        self._prepared: dict[Any, dict[str, Any]] = {}
        self._min_size = min(min_size, max_size)
        self._max_size = max_size
        self._lease_size = lease_pool_size
        self._pool: Pool | None = None
        self._lease_pool: Pool | None = None
        self._lane = Lane(max_size)
        # Claims leave one connection of the lease pool to the heartbeat.
        self._lease_lane = Lane(lease_pool_size, caps={CLAIM: max(1, lease_pool_size - 1)})
        self._listener: asyncio.Task[None] | None = None
        self.listening = asyncio.Event()  # set while the LISTEN connection is up (tests wait on it)

    async def open(self) -> PostgresStore:
        """Connects both pools (and the listener, with ``notify`` on); returns self."""
        try:
            self._pool = await Pool(self._lane, self._connect, self._min_size).open()
            # All kept open: a renewal must not wait for a new connection.
            self._lease_pool = await Pool(self._lease_lane, self._connect, self._lease_size).open()
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            if self._pool is not None:
                self._pool.terminate()
                self._pool = None
            raise errors.StoreUnavailable(f"cannot connect to PostgreSQL: {exc}") from exc
        if self.notify:
            self._listener = asyncio.create_task(self._listen(), name="durable-adk-listen")
        with contextlib.suppress(errors.StoreError):  # a read-only server: said at first use
            self.health.identity = await self.probe()
            await self.note_history(self.health.identity)
        return self

    async def _connect(self) -> Any:
        return await asyncpg.connect(
            self._dsn,
            timeout=self.acquire_timeout,
            # asyncpg caches 100 prepared statements per connection for 300 s
            # by default: fewer than the store's named queries, so a rarely
            # used one (a sweep, an operator's read) would evict a hot one, and
            # every statement would be prepared again each five minutes. Each
            # prepare is one more round trip before the unit's own.
            statement_cache_size=statement_cache_size(self._queries),
            max_cached_statement_lifetime=0,
        )

    async def _listen(self) -> None:
        """Keeps a LISTEN connection up, outside the pools; reconnects with a back-off."""
        delay = 0.5
        was_lost = False
        while True:
            lost = asyncio.Event()
            conn: Any = None
            try:
                conn = await asyncpg.connect(self._dsn, timeout=self.acquire_timeout)
                conn.add_termination_listener(lambda _c, lost=lost: lost.set())
                await conn.add_listener(TURNS_CHANNEL, self._on_notification)
            except asyncpg.FeatureNotSupportedError as exc:
                logger.warning("no LISTEN on this database (%s): queued runs poll only", exc)
                if conn is not None:
                    conn.terminate()
                return
            except Exception as exc:
                # Said at DEBUG: an outage has its own line (store.health), and queued
                # runs poll meanwhile.
                logger.debug("LISTEN failed (%s); retrying in %.1fs", exc, delay)
                if conn is not None:
                    conn.terminate()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
                continue
            delay = 0.5
            if was_lost:
                logger.info("the LISTEN connection is back: queued runs are woken again")
                # A reconnect may reach another server than before (a promoted standby)
                # without any statement of ours failing: the pool reconnects quietly.
                with contextlib.suppress(Exception):
                    self.health.seen(await self.probe(pooled=False))
            was_lost = False
            self.listening.set()
            try:
                await lost.wait()
            finally:
                self.listening.clear()
                conn.terminate()
            was_lost = True
            logger.info("the LISTEN connection was lost; reconnecting (queued runs poll meanwhile)")

    def _on_notification(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self.wakeups.notify(payload)

    async def wake(self, key: str, *, others_waiting: bool = True) -> None:
        self.wakeups.notify(key)
        if self.notify and others_waiting:
            await self.execute("turn_notify", {"session": key})

    def _query(self, name: str) -> Query:
        try:
            return self._queries[name]
        except KeyError:
            raise errors.InvalidArgument(f"no query named {name!r}") from None

    async def _with_connection(
        self, work: Callable[[Any], Awaitable[T]], *, lease: bool = False, kind: str = URGENT
    ) -> T:
        """Runs ``work`` on a pooled connection, bounded in time, errors translated.

        The connection is taken through the pool's :class:`Lane`: units of
        work in progress before intake, claims capped below the lease pool's
        size, and a wait that fails only when no connection was given back
        for ``acquire_timeout`` seconds.

        A connection whose statement timed out, failed at the connection
        level or was cancelled is terminated before it goes back, so the pool
        makes a new one instead of reusing a connection in an unknown state.
        """
        pool = self._open_pool(lease=lease)
        lane = self._lease_lane if lease else self._lane
        try:
            waited = 0.0 if lane.try_take(kind) else await lane.take(self.acquire_timeout, kind)
        except LaneStalled as exc:
            if not lease:
                self._wait_peak = max(self._wait_peak, self.acquire_timeout)
            size = self._lease_size if lease else self._max_size
            raise errors.StoreUnavailable(
                f"no connection of the {'lease' if lease else 'main'} pool ({size}) was given "
                f"back within acquire_timeout ({self.acquire_timeout:g} s): every one is held "
                "by a statement that has not ended"
            ) from exc
        try:
            if not lease and kind != INTAKE:  # the drives' own wait: admission's signal
                self._wait_peak = max(self._wait_peak, waited)
            try:
                conn = pool.try_take()
                if conn is None:
                    conn = await pool.take()
            except TimeoutError as exc:
                # The lane had a slot, so the pool had to open a connection.
                raise errors.StoreUnavailable(
                    f"no new connection of the {'lease' if lease else 'main'} pool could be "
                    f"opened within acquire_timeout ({self.acquire_timeout:g} s)"
                ) from exc
            except Exception as exc:
                raise translate(exc) from exc
            try:
                return await work(conn)
            except asyncio.CancelledError:
                # The caller gave up (a drive cancelled on lease loss, a timeout
                # around us): drop the connection now rather than wait for a cancel
                # that a frozen server would never confirm, or reuse it mid-statement.
                conn.terminate()
                raise
            except Exception as exc:
                error = translate(exc)
                if isinstance(error, errors.StoreUnavailable) and not isinstance(
                    exc, asyncpg.PostgresError
                ):
                    conn.terminate()
                raise error from exc
            finally:
                pool.give_back(conn)
        finally:
            lane.give_back(kind)

    def take_pressure(self) -> float:
        peak, self._wait_peak = self._wait_peak, 0.0
        return peak

    async def _fetch(self, query: str, params: Params | None = None) -> Sequence[Row]:
        q = self._query(query)
        given = params or {}
        if not q.needs <= given.keys():
            missing = [n for n in q.params if n not in given]
            raise errors.InvalidArgument(f"query {q.name!r} needs {missing}")
        statement, args = q.bind(given)
        if self.group_commit and groupable(q) and (self._group or not self._lane.idle(q.lane)):
            # Every connection is busy (or units already wait for one): wait
            # with the others, and the connection that frees up takes them all.
            note_maybe_sent()  # the group's writer sends it: it may act without us seeing
            pending = self._group.add(q, args, statement)
            self._start_takers()
            rows: list[dict[str, Any]] = await pending.future
            return rows
        timeout = self.command_timeout
        held = held_receipt()

        async def send(fetch: Callable[..., Awaitable[Any]], *head: str) -> Any:
            note_sent()  # the connection is ours (and the statement prepared): it leaves now
            began = time.perf_counter()
            records = await fetch(*head, *args, timeout=timeout)
            if held is not None:  # the statement's own time, not the wait for a connection
                held.append(time.perf_counter() - began)
            return records

        async def run(conn: Any) -> Any:
            if not sent_wanted():
                return await send(conn.fetch, statement)
            # A lease it takes runs from the note: no round trip of the driver's after it.
            try:
                return await send((await self._prepared_on(conn, statement)).fetch)
            except asyncpg.exceptions.InvalidCachedStatementError:
                # The statement's tables changed shape since it was prepared (a
                # deploy migrated them): the server refused it before it ran.
                # Prepared again, once. (A changed type, OutdatedSchemaCacheError,
                # is raised on the answer, after the statement ran: never sent
                # again; it fails the call and the connection is dropped.)
                self._prepared.get(conn, {}).pop(statement, None)
                return await send((await self._prepared_on(conn, statement)).fetch)

        records = await self._with_connection(run, lease=q.lease, kind=q.lane)
        if q.writes:
            self.commits += 1
        return list(map(dict, records))

    async def _prepared_on(self, conn: Any, statement: str) -> Any:
        """The statement prepared on ``conn``, for a caller that notes its send (a claim's
        lease runs from it); prepared now, in a round trip of its own, if new.

        ``conn.fetch`` prepares a statement new to the connection in a round
        trip of its own (and may look up types in more) before it sends the
        statement itself: a note taken before it would be early by those round
        trips, and by however long the event loop is blocked between them (a
        sync tool on the loop). The lease would then be trusted for less than
        it is held, and lost on the claim's answer though nobody took it. So
        the statement is prepared first and kept per connection, and the note
        is taken as it is sent.
        """
        prepared = self._prepared.get(conn)
        if prepared is None:
            prepared = self._prepared[conn] = {}
            conn.add_termination_listener(self._forget_prepared)
        ready = prepared.get(statement)
        if ready is None:
            ready = prepared[statement] = await conn.prepare(
                statement, timeout=self.command_timeout
            )
        return ready

    def _forget_prepared(self, conn: Any) -> None:
        """A connection closed or terminated: its prepared statements go with it."""
        self._prepared.pop(conn, None)

    # ------------------------------------------------------------ group commit

    def _start_takers(self) -> None:
        """Enough takers waiting for a connection for the waiting units (a group each)."""
        while self._takers_waiting * self._group.group_max < len(self._group):
            self._takers_waiting += 1
            # It writes the units of many runs: in a context of its own, not
            # that of the run whose unit happened to start it.
            taker = asyncio.create_task(
                self._take_group(), name="durable-adk-group", context=contextvars.Context()
            )
            self._takers.add(taker)
            taker.add_done_callback(self._taker_done)

    def _taker_done(self, taker: asyncio.Task[None]) -> None:
        self._takers.discard(taker)
        if self._group and self._pool is not None:
            self._start_takers()

    async def _take_group(self) -> None:
        """Waits for a main-pool connection, then writes the units waiting by then."""
        group: list[Pending] = []
        waiting = True

        async def work(conn: Any) -> None:
            nonlocal waiting
            waiting = False
            self._takers_waiting -= 1
            group.extend(self._group.take())
            if group:
                await self._write_group(conn, group)

        try:
            await self._with_connection(work)
        except BaseException as exc:
            if waiting:
                self._takers_waiting -= 1
            # No connection came (a stalled pool, a closed store): the units
            # that would have been next fail as they would have alone. A
            # group whose transaction failed: none of it was written, unless
            # the connection died at the commit (as for one statement alone).
            failed = group or self._group.take()
            for pending in failed:
                error = exc if isinstance(exc, errors.StoreError) else errors.StoreUnavailable()
                pending.settle(type(error)(str(error)))
            if not isinstance(exc, Exception):
                raise

    async def _write_group(self, conn: Any, group: list[Pending]) -> None:
        """Writes the group in one transaction; a unit that fails takes only itself out.

        No savepoint per unit: each would cost two more round trips per unit
        (``SAVEPOINT``, and ``ROLLBACK TO`` on failure), as many as the units
        themselves. Instead a unit that fails with a PostgreSQL error rolls
        the whole transaction back (nothing of the group is written), its
        caller gets the error, and the other units run again in a new
        transaction; their fences are read again there, so each unit's
        outcome is what it would have been alone. Any other failure (the
        connection, a timeout, the commit) is the whole group's and raises.
        """
        timeout = self.command_timeout
        left = list(group)
        while len(left) > 1:
            outcomes: list[list[dict[str, Any]]] = []
            failed: asyncpg.PostgresError | None = None
            await conn.execute("BEGIN", timeout=timeout)
            try:
                for pending in left:
                    try:
                        records = await conn.fetch(
                            pending.statement, *pending.args, timeout=timeout
                        )
                    except asyncpg.PostgresError as exc:
                        failed = exc
                        break
                    outcomes.append([dict(r) for r in records])
                    if len(outcomes) == 1:
                        crash_point("store.group_after_first_unit")
                await conn.execute("ROLLBACK" if failed else "COMMIT", timeout=timeout)
            except BaseException:
                if not conn.is_closed() and conn.is_in_transaction():
                    try:
                        await conn.execute("ROLLBACK", timeout=timeout)
                    except Exception:
                        conn.terminate()
                raise
            if failed is None:
                self.commits += 1
                for pending, rows in zip(left, outcomes, strict=True):
                    pending.settle(rows)
                return
            culprit = left.pop(len(outcomes))
            culprit.settle(_unit_error(failed))
        for only in left:  # alone: one statement, as without grouping
            try:
                records = await conn.fetch(only.statement, *only.args, timeout=timeout)
            except asyncpg.PostgresError as exc:
                only.settle(_unit_error(exc))
                return
            self.commits += 1
            only.settle([dict(r) for r in records])

    async def now(self) -> float:
        return float(await self.fetchval("db_now"))

    def _open_pool(self, *, lease: bool = False) -> Pool:
        pool = self._lease_pool if lease else self._pool
        if pool is None:
            raise errors.StoreUnavailable("the store is closed")
        return pool

    async def schema_version(self) -> int:
        timeout = self.command_timeout

        async def read(conn: Any) -> int:
            exists = "SELECT to_regclass('schema_version') IS NOT NULL"
            if not await conn.fetchval(exists, timeout=timeout):
                return 0
            latest = "SELECT COALESCE(MAX(version), 0) FROM schema_version"
            return int(await conn.fetchval(latest, timeout=timeout))

        return await self._with_connection(read)

    async def run_script(self, sql: str) -> None:
        # No statement timeout (the pool sets no default one; each call passes
        # its own): a migration over a large table may rightly take long.
        async def run(conn: Any) -> None:
            async with conn.transaction():
                await conn.execute(sql)

        await self._with_connection(run)

    def describe(self) -> str:
        return "PostgreSQL " + ",".join(f"{h}:{p}" for h, p in _hosts(self._dsn)[1])

    async def probe(self, *, pooled: bool = True) -> str | None:
        """Raises StoreUnavailable unless the URL reaches a server that takes writes; returns
        its WAL timeline (a failover to a promoted standby changes it).

        ``pooled`` False asks on a connection of its own (the outage's probe: the
        pools are left to find their broken connections as their statements do).
        """
        timeout = min(self.command_timeout, DIAGNOSE_TIMEOUT)

        async def ask(conn: Any) -> tuple[bool, str | None]:
            writable = bool(await conn.fetchval(_WRITABLE, timeout=timeout))
            timeline = await conn.fetchval(_TIMELINE, timeout=timeout) if writable else None
            return writable, timeline

        if pooled:
            writable, timeline = await self._with_connection(ask)
        else:
            conn: Any = None
            try:
                conn = await asyncpg.connect(self._dsn, timeout=self.acquire_timeout)
                writable, timeline = await ask(conn)
            except Exception as exc:
                raise translate(exc) from exc
            finally:
                if conn is not None:
                    conn.terminate()
        if not writable:
            raise errors.StoreUnavailable("the server is read-only (a standby, or in recovery)")
        return None if timeline is None else f"timeline {timeline}"

    async def diagnose(self) -> list[str]:
        """Each host of the URL on its own: reachable and writable, or why not."""
        userinfo, hosts, rest = _hosts(self._dsn)
        looks = [self._look(f"postgresql://{userinfo}{h}:{p}{rest}", h, p) for h, p in hosts]
        return list(await asyncio.gather(*looks))

    async def _look(self, dsn: str, host: str, port: int) -> str:
        conn: Any = None
        try:
            conn = await asyncpg.connect(dsn, timeout=DIAGNOSE_TIMEOUT)
            writable = await conn.fetchval(_WRITABLE, timeout=DIAGNOSE_TIMEOUT)
            state = "takes writes" if writable else "read-only (a standby, or in recovery)"
        except (
            asyncpg.InvalidPasswordError,
            asyncpg.InvalidAuthorizationSpecificationError,
        ) as exc:
            state = f"auth refused ({type(exc).__name__})"
        except (OSError, TimeoutError, asyncpg.CannotConnectNowError) as exc:
            state = f"unreachable ({type(exc).__name__}: {exc})"
        except Exception as exc:
            state = f"refused ({type(exc).__name__}: {exc})"
        finally:
            if conn is not None:
                conn.terminate()
        return f"{host}:{port} {state}"

    async def close(self) -> None:
        await self._close_health()
        for taker in list(self._takers):
            taker.cancel()
        if self._listener is not None:
            listener, self._listener = self._listener, None
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
        pools, self._pool, self._lease_pool = (self._pool, self._lease_pool), None, None
        for pool in pools:
            if pool is None:
                continue
            try:
                # Bounded: a connection stuck on a frozen server would hold a
                # graceful close forever.
                await asyncio.wait_for(pool.close(), self.command_timeout + self.acquire_timeout)
            except Exception:  # a dead or frozen server: drop what is left
                pool.terminate()
