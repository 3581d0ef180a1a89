"""PostgreSQL backend on asyncpg with a connection pool.

asyncpg was chosen over psycopg 3 by measurement (``bench/driver_choice.py``,
figures in BENCHMARKS.md): a single-row durable commit and the fenced append
both cost less per round trip. Every named query is one statement, so each unit
of work is one round trip and atomic on its own; asyncpg prepares and caches
the statements per connection.

Errors are translated by SQLSTATE: 23505 unique violation, 23503 foreign key,
40001/40P01/55P03 busy (serialization failure, deadlock, lock not available),
class 08 and 57P0x unavailable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from durable_adk import errors
from durable_adk.store.base import Params, Row, Store
from durable_adk.store.queries import Query, load_queries

_BUSY_STATES = {"40001", "40P01", "55P03"}
_UNAVAILABLE_STATES = {"57P01", "57P02", "57P03"}


def translate(exc: Exception) -> errors.StoreError:
    """Maps an asyncpg error to ours by SQLSTATE."""
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

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 10) -> None:
        """Prepares a pool; call :meth:`open` to connect.

        Args:
            url: A ``postgresql://`` URL.
            min_size: Connections kept open.
            max_size: Most connections at once.
        """
        self.url = url
        self._queries = load_queries("postgresql")
        self._min_size = min_size
        self._max_size = max_size
        self._pool: Any = None

    async def open(self) -> PostgresStore:
        """Connects the pool; returns self."""
        try:
            self._pool = await asyncpg.create_pool(
                self.url, min_size=self._min_size, max_size=self._max_size, reset=_keep_session
            )
        except (OSError, asyncpg.PostgresError) as exc:
            raise errors.StoreUnavailable(f"cannot connect to PostgreSQL: {exc}") from exc
        return self

    def _query(self, name: str) -> Query:
        try:
            return self._queries[name]
        except KeyError:
            raise errors.InvalidArgument(f"no query named {name!r}") from None

    async def fetch(self, query: str, params: Params | None = None) -> Sequence[Row]:
        q = self._query(query)
        given = params or {}
        missing = [n for n in q.params if n not in given]
        if missing:
            raise errors.InvalidArgument(f"query {q.name!r} needs {missing}")
        args = [given[name] for name in q.params]
        pool = self._open_pool()
        try:
            records = await pool.fetch(q.statements[0], *args)
        except asyncpg.PostgresError as exc:
            raise translate(exc) from exc
        except (OSError, asyncpg.InterfaceError) as exc:
            raise errors.StoreUnavailable(str(exc)) from exc
        return [dict(r) for r in records]

    async def now(self) -> float:
        return float(await self.fetchval("db_now"))

    def _open_pool(self) -> Any:
        if self._pool is None:
            raise errors.StoreUnavailable("the store is closed")
        return self._pool

    async def schema_version(self) -> int:
        pool = self._open_pool()
        try:
            if not await pool.fetchval("SELECT to_regclass('schema_version') IS NOT NULL"):
                return 0
            return int(await pool.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_version"))
        except asyncpg.PostgresError as exc:
            raise translate(exc) from exc

    async def run_script(self, sql: str) -> None:
        pool = self._open_pool()
        try:
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute(sql)
        except asyncpg.PostgresError as exc:
            raise translate(exc) from exc

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
