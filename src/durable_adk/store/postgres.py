"""PostgreSQL backend on asyncpg with a connection pool.

asyncpg was chosen over psycopg 3 by measurement (``bench/driver_choice.py``,
figures in BENCHMARKS.md): a single-row durable commit and the fenced append
both cost less per round trip. Every named query is one statement, so each unit
of work is one round trip and atomic on its own; asyncpg prepares and caches
the statements per connection.

Every call is bounded in time, so a hung connection (a network partition, a
frozen server) is noticed: getting a connection takes at most
``acquire_timeout`` seconds (default 5, making a new connection included) and
a statement at most ``command_timeout`` seconds (default 10). Either timeout
raises :class:`~durable_adk.errors.StoreUnavailable`, and the connection whose
statement timed out is terminated, never handed back to the pool in an
unknown state (asyncpg would otherwise wait for the server to confirm a
cancel that a frozen server never sends).

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
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from durable_adk import errors
from durable_adk.store.base import Params, Row, Store
from durable_adk.store.queries import Query, load_queries

T = TypeVar("T")

_BUSY_STATES = {"40001", "40P01", "55P03"}
_UNAVAILABLE_STATES = {"57P01", "57P02", "57P03", "57014", "53300"}
# Errors asyncpg raises about input it cannot send: deterministic, not transient.
_INPUT_ERRORS = (
    asyncpg.DataError,
    asyncpg.ClientConfigurationError,
    asyncpg.UnsupportedClientFeatureError,
)

DEFAULT_COMMAND_TIMEOUT = 10.0
"""Seconds a statement may take before the store gives up on its connection."""

DEFAULT_ACQUIRE_TIMEOUT = 5.0
"""Seconds to wait for a pooled connection (or to make a new one)."""

URL_OPTIONS = ("command_timeout", "acquire_timeout")
"""Store options that may be given in the URL's query string (removed before connecting)."""


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


def split_url_options(url: str) -> tuple[str, dict[str, float]]:
    """Takes the store's own options out of a URL's query string.

    ``postgresql://u@h/db?command_timeout=5&sslmode=disable`` gives
    ``postgresql://u@h/db?sslmode=disable`` and ``{"command_timeout": 5.0}``;
    other parameters are left for asyncpg.

    Raises:
        InvalidArgument: An option's value is not a positive number.
    """
    parts = urlsplit(url)
    kept, options = [], {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name not in URL_OPTIONS:
            kept.append((name, value))
            continue
        try:
            number = float(value)
        except ValueError:
            number = 0.0
        if not number > 0:
            raise errors.InvalidArgument(f"{name} in the store URL must be seconds > 0: {value!r}")
        options[name] = number
    return urlunsplit(parts._replace(query=urlencode(kept))), options


async def _keep_session(connection: Any) -> None:
    """Pool reset that sends nothing.

    asyncpg's default reset runs ``pg_advisory_unlock_all(); CLOSE ALL;
    UNLISTEN *; RESET ALL`` on every release: a second round trip per query.
    We take no advisory locks, open no cursors, listen to nothing and set no
    session state; asyncpg still rolls back a transaction left open.
    """


class PostgresStore(Store):
    """A store on one PostgreSQL database."""

    dialect = "postgresql"

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        command_timeout: float | None = None,
        acquire_timeout: float | None = None,
    ) -> None:
        """Prepares a pool; call :meth:`open` to connect.

        Args:
            url: A ``postgresql://`` URL. Its query string may carry
                ``command_timeout`` and ``acquire_timeout`` (seconds); the
                keyword arguments win over them.
            min_size: Connections kept open.
            max_size: Most connections at once.
            command_timeout: Seconds a statement may take (default 10).
            acquire_timeout: Seconds to get a connection from the pool,
                making a new one included (default 5).

        Raises:
            InvalidArgument: A timeout is not a positive number.
        """
        self.url = url
        self._dsn, from_url = split_url_options(url)
        if command_timeout is None:
            command_timeout = from_url.get("command_timeout", DEFAULT_COMMAND_TIMEOUT)
        if acquire_timeout is None:
            acquire_timeout = from_url.get("acquire_timeout", DEFAULT_ACQUIRE_TIMEOUT)
        command, acquire = command_timeout, acquire_timeout
        if not (command > 0 and acquire > 0):
            raise errors.InvalidArgument("command_timeout and acquire_timeout must be > 0")
        self.command_timeout = float(command)
        self.acquire_timeout = float(acquire)
        self._queries = load_queries("postgresql")
        self._min_size = min_size
        self._max_size = max_size
        self._pool: Any = None

    async def open(self) -> PostgresStore:
        """Connects the pool; returns self."""
        try:
            self._pool = await asyncpg.create_pool(
                self._dsn,
                min_size=self._min_size,
                max_size=self._max_size,
                reset=_keep_session,
                timeout=self.acquire_timeout,
            )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise errors.StoreUnavailable(f"cannot connect to PostgreSQL: {exc}") from exc
        return self

    def _query(self, name: str) -> Query:
        try:
            return self._queries[name]
        except KeyError:
            raise errors.InvalidArgument(f"no query named {name!r}") from None

    async def _with_connection(self, work: Callable[[Any], Awaitable[T]]) -> T:
        """Runs ``work`` on a pooled connection, bounded in time, errors translated.

        A connection whose statement timed out, failed at the connection
        level or was cancelled is terminated before it goes back, so the pool
        makes a new one instead of reusing a connection in an unknown state.
        """
        pool = self._open_pool()
        try:
            conn = await pool.acquire(timeout=self.acquire_timeout)
        except Exception as exc:
            raise translate(exc) from exc
        try:
            return await work(conn)
        except asyncio.CancelledError:
            # The caller gave up (a drive cancelled on lease loss, a timeout
            # around us): drop the connection now rather than wait, inside the
            # release, for a cancel that a frozen server would never confirm.
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
            # A release that fails has terminated the connection: nothing to give back.
            with contextlib.suppress(Exception):
                await pool.release(conn, timeout=self.acquire_timeout)

    async def fetch(self, query: str, params: Params | None = None) -> Sequence[Row]:
        q = self._query(query)
        given = params or {}
        missing = [n for n in q.params if n not in given]
        if missing:
            raise errors.InvalidArgument(f"query {q.name!r} needs {missing}")
        args = [given[name] for name in q.params]
        timeout = self.command_timeout
        records = await self._with_connection(
            lambda conn: conn.fetch(q.statements[0], *args, timeout=timeout)
        )
        return [dict(r) for r in records]

    async def now(self) -> float:
        return float(await self.fetchval("db_now"))

    def _open_pool(self) -> Any:
        if self._pool is None:
            raise errors.StoreUnavailable("the store is closed")
        return self._pool

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

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                # Bounded: a connection stuck on a frozen server would hold a
                # graceful close forever.
                await asyncio.wait_for(pool.close(), self.command_timeout + self.acquire_timeout)
            except Exception:  # a dead or frozen server: drop what is left
                pool.terminate()
