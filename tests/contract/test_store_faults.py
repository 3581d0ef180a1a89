"""Store faults for real: a restarted PostgreSQL, a frozen backend, a full pool, disk errors.

Every driver error the database can raise after a restart must reach callers
as a :class:`~durable_adk.errors.StoreError` (``StoreUnavailable``), never as a
raw asyncpg error, and a hung connection must be noticed within the store's
timeouts. The PostgreSQL cases run on a private server of their own, so that
restarting or freezing it disturbs no other test.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from test_group_commit import _busy_pool

from durable_adk import errors
from durable_adk.store import PostgresStore, connect, open_store
from durable_adk.store.postgres import split_url_options
from durable_adk.store.postgres import translate as translate_pg
from durable_adk.store.sqlite import translate as translate_sqlite
from durable_adk.testing.pg_cluster import TempPostgres
from postgres_required import postgres_or_skip


@pytest.fixture(scope="module")
def private_pg() -> Iterator[TempPostgres]:
    postgres_or_skip()
    with TempPostgres() as cluster:
        yield cluster


def restart(cluster: TempPostgres, mode: str) -> None:
    """Restarts the server in place (same data, same port): every session is cut."""
    result = cluster._run(
        [
            str(cluster.bin_dir / "pg_ctl"),
            "restart",
            "--pgdata",
            str(cluster.data_dir),
            "--log",
            str(cluster.log_path),
            "--mode",
            mode,
            "--wait",
            "--timeout",
            "60",
            "--silent",
        ],
        timeout=90,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def postmaster_pid(cluster: TempPostgres) -> int:
    return int((cluster.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])


@pytest.fixture
async def pg_url(private_pg: TempPostgres, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    name = f"faults_{os.getpid()}_{abs(hash(request.node.name)) % 10**8}"
    url = private_pg.create_database(name)
    async with open_store(url):  # the schema
        pass
    try:
        yield url
    finally:
        private_pg.drop_database(name)


async def backend_pid(store: PostgresStore) -> int:
    async def pid(conn: Any) -> int:
        return int(await conn.fetchval("SELECT pg_backend_pid()"))

    return await store._with_connection(pid)


async def outcome(store: PostgresStore) -> str:
    """One query after the fault: 'ok', or the name of the StoreError it raised."""
    try:
        await store.now()
        await store.fetch("get_app_state", {"app_name": "a"})
    except errors.StoreError as exc:
        return type(exc).__name__
    return "ok"


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_every_query_after_a_restart_succeeds_or_raises_store_unavailable(
    private_pg: TempPostgres, pg_url: str, mode: str
) -> None:
    async with open_store(pg_url, min_size=4, max_size=4) as store:
        assert isinstance(store, PostgresStore)
        # Four pooled connections, each with prepared statements cached.
        await asyncio.gather(*(store.now() for _ in range(8)))
        before = await backend_pid(store)
        restart(private_pg, mode)
        # Sequential and concurrent callers meet the dead connections.
        seen = [await outcome(store) for _ in range(6)]
        seen += await asyncio.gather(*(outcome(store) for _ in range(12)))
        # Anything other than these two would have raised out of outcome().
        assert set(seen) <= {"ok", "StoreUnavailable"}, seen
        assert "StoreUnavailable" in seen  # the restart was felt ...
        assert seen[-1] == "ok"  # ... and the pool heals with new connections
        assert await backend_pid(store) != before
        assert await store.schema_version() > 0


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_queries_in_flight_across_a_restart_raise_only_store_errors(
    private_pg: TempPostgres, pg_url: str, mode: str
) -> None:
    async with open_store(pg_url, min_size=4, max_size=4) as store:
        assert isinstance(store, PostgresStore)
        seen: list[str] = []
        stop = asyncio.Event()

        async def hammer() -> None:
            while not stop.is_set():
                seen.append(await outcome(store))
                await asyncio.sleep(0)

        callers = [asyncio.create_task(hammer()) for _ in range(8)]
        try:
            await asyncio.to_thread(restart, private_pg, mode)
            after = [await outcome(store) for _ in range(30)]
        finally:
            stop.set()
            # A raw driver error would surface here, out of a caller task.
            await asyncio.gather(*callers)
        assert set(seen + after) <= {"ok", "StoreUnavailable"}, set(seen + after)
        assert "StoreUnavailable" in seen + after
        assert after[-5:] == ["ok"] * 5  # healed with new connections


async def test_run_script_and_schema_version_translate_a_restart(
    private_pg: TempPostgres, pg_url: str
) -> None:
    async with open_store(pg_url, min_size=1, max_size=1) as store:
        await store.now()
        restart(private_pg, "immediate")
        with pytest.raises(errors.StoreUnavailable):
            await store.schema_version()
        assert await store.schema_version() > 0
        restart(private_pg, "immediate")
        with pytest.raises(errors.StoreUnavailable):
            await store.run_script("SELECT 1;")
        await store.run_script("SELECT 1;")


async def test_a_frozen_backend_times_out_as_store_unavailable(pg_url: str) -> None:
    store = await connect(pg_url, min_size=1, max_size=1, command_timeout=1.0)
    assert isinstance(store, PostgresStore)
    try:
        frozen = await backend_pid(store)
        os.kill(frozen, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(errors.StoreUnavailable, match="in time"):
                await store.now()
            took = time.monotonic() - started
            # Within the command timeout (plus a loaded machine's slack), not asyncpg's 60 s.
            assert 0.9 <= took < 1.0 + 4.0, took
            # The timed-out connection is not reused: the next query gets a new backend.
            started = time.monotonic()
            await store.now()
            assert time.monotonic() - started < 5.0
            assert await backend_pid(store) != frozen
        finally:
            os.kill(frozen, signal.SIGCONT)
    finally:
        await store.close()


async def test_a_query_cancelled_on_a_frozen_backend_ends_at_once(pg_url: str) -> None:
    store = await connect(
        pg_url, min_size=1, max_size=1, command_timeout=30.0, acquire_timeout=20.0
    )
    assert isinstance(store, PostgresStore)
    try:
        frozen = await backend_pid(store)
        os.kill(frozen, signal.SIGSTOP)
        try:
            query = asyncio.create_task(store.now())
            await asyncio.sleep(0.2)  # the statement is on the wire, unanswered
            started = time.monotonic()
            query.cancel()
            with pytest.raises(asyncio.CancelledError):
                await query
            # At once, not after the acquire (20 s) or command (30 s) timeout.
            assert time.monotonic() - started < 5.0
            assert await backend_pid(store) != frozen  # the connection was dropped
        finally:
            os.kill(frozen, signal.SIGCONT)
    finally:
        await store.close()


async def test_a_frozen_server_times_out_on_connect_as_store_unavailable(
    private_pg: TempPostgres, pg_url: str
) -> None:
    store = await connect(pg_url, min_size=1, max_size=2, acquire_timeout=1.0)
    assert isinstance(store, PostgresStore)
    try:
        async with _busy_pool(store):  # the pooled connection is busy: a new one is needed
            server = postmaster_pid(private_pg)
            os.kill(server, signal.SIGSTOP)
            try:
                started = time.monotonic()
                with pytest.raises(errors.StoreUnavailable):
                    await store.now()
                assert time.monotonic() - started < 1.0 + 4.0
            finally:
                os.kill(server, signal.SIGCONT)
        await store.now()
    finally:
        await store.close()


async def test_a_full_pool_times_out_as_store_unavailable(pg_url: str) -> None:
    store = await connect(pg_url, min_size=1, max_size=1, acquire_timeout=0.5)
    try:
        async with _busy_pool(store):
            started = time.monotonic()
            with pytest.raises(errors.StoreUnavailable):
                await store.now()
            assert time.monotonic() - started < 0.5 + 4.0
        assert await store.now() > 0
    finally:
        await store.close()


async def _pids(store: PostgresStore, *, lease: bool) -> set[int]:
    """The server processes of every connection of a pool, each held at once."""
    size = store._lease_size if lease else store._max_size
    held, release, pids = asyncio.Event(), asyncio.Event(), set()

    async def hold(conn: asyncpg.Connection) -> None:
        pids.add(int(await conn.fetchval("SELECT pg_backend_pid()")))
        if len(pids) == size:
            held.set()
        await release.wait()

    holders = [asyncio.create_task(store._with_connection(hold, lease=lease)) for _ in range(size)]
    await asyncio.wait_for(held.wait(), 10)
    release.set()
    await asyncio.gather(*holders)
    return pids


async def test_a_connection_given_back_inside_a_transaction_is_not_reused(pg_url: str) -> None:
    async with open_store(pg_url, min_size=1, max_size=1) as store:
        assert isinstance(store, PostgresStore)

        async def leave_open(conn: asyncpg.Connection) -> int:
            await conn.execute("BEGIN")
            await conn.execute("CREATE TEMP TABLE left_behind (x int)")
            return int(await conn.fetchval("SELECT pg_backend_pid()"))

        left = await store._with_connection(leave_open)
        assert await backend_pid(store) != left  # a new connection, not the one in BEGIN
        assert await store.now() > 0


async def test_the_lease_pools_connections_are_opened_again_when_lost(pg_url: str) -> None:
    async with open_store(pg_url + "?lease_pool_size=2") as store:
        assert isinstance(store, PostgresStore)
        first = await _pids(store, lease=True)
        assert len(first) == 2
        killer = await asyncpg.connect(pg_url)
        try:
            for pid in first:
                assert await killer.fetchval("SELECT pg_terminate_backend($1)", pid)
            # No statement of ours ran: the pool saw its idle connections go and
            # opened two new ones in the background.
            deadline = time.monotonic() + 10
            while True:
                alive = {
                    r["pid"]
                    for r in await killer.fetch(
                        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                        " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
                    )
                }
                if len(store._lease_pool._idle) == 2 and not alive & first:
                    break
                assert time.monotonic() < deadline, (alive, first)
                await asyncio.sleep(0.05)
        finally:
            await killer.close()
        again = await _pids(store, lease=True)
        assert len(again) == 2 and not again & first
        renewed = await store.fetch("run_renew_many", {"owner": "w", "leases": "{}", "lease": 30})
        assert renewed == []


async def test_timeouts_come_from_the_url_and_are_checked(pg_url: str) -> None:
    dsn, options = split_url_options(pg_url + "?command_timeout=2.5&sslmode=disable")
    assert options == {"command_timeout": 2.5}
    assert "command_timeout" not in dsn and "sslmode=disable" in dsn
    store = await connect(pg_url + "?command_timeout=2.5&acquire_timeout=1.5")
    try:
        assert isinstance(store, PostgresStore)
        assert (store.command_timeout, store.acquire_timeout) == (2.5, 1.5)
        assert await store.now() > 0  # asyncpg never saw our options
    finally:
        await store.close()
    default = PostgresStore(pg_url)
    assert (default.command_timeout, default.acquire_timeout) == (10.0, 5.0)
    for bad in ("command_timeout=0", "acquire_timeout=soon", "command_timeout=-1"):
        with pytest.raises(errors.InvalidArgument):
            PostgresStore(f"{pg_url}?{bad}")
    with pytest.raises(errors.InvalidArgument):
        PostgresStore(pg_url, command_timeout=0)
    with pytest.raises(errors.InvalidArgument):
        PostgresStore(pg_url, acquire_timeout=-1.0)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (asyncpg.InternalClientError("x"), errors.StoreUnavailable),
        (asyncpg.exceptions.ProtocolError("x"), errors.StoreUnavailable),
        (asyncpg.InterfaceError("another operation is in progress"), errors.StoreUnavailable),
        (asyncpg.ConnectionDoesNotExistError("x"), errors.StoreUnavailable),
        (asyncpg.exceptions.CannotConnectNowError("x"), errors.StoreUnavailable),
        (asyncpg.exceptions.AdminShutdownError("x"), errors.StoreUnavailable),
        (asyncpg.exceptions.QueryCanceledError("x"), errors.StoreUnavailable),
        (asyncpg.exceptions.TooManyConnectionsError("x"), errors.StoreUnavailable),
        # A standby (or a primary in recovery) took the write: a failover under way.
        (asyncpg.exceptions.ReadOnlySQLTransactionError("x"), errors.StoreUnavailable),
        # target_session_attrs=read-write found no host that takes writes.
        (asyncpg.exceptions.TargetServerAttributeNotMatched("x"), errors.StoreUnavailable),
        (ConnectionResetError("x"), errors.StoreUnavailable),
        (ConnectionRefusedError("x"), errors.StoreUnavailable),
        (TimeoutError(), errors.StoreUnavailable),
        (asyncpg.exceptions.SerializationError("x"), errors.DatabaseBusy),
        (asyncpg.exceptions.DeadlockDetectedError("x"), errors.DatabaseBusy),
        (asyncpg.UniqueViolationError("x"), errors.UniqueViolation),
        (asyncpg.ForeignKeyViolationError("x"), errors.ForeignKeyViolation),
        # Deterministic: retrying changes nothing, so not "unavailable".
        (asyncpg.DataError("invalid input for query argument $1"), errors.StoreError),
        (asyncpg.exceptions.UndefinedTableError("x"), errors.StoreError),
    ],
)
def test_asyncpg_errors_map_by_type_and_sqlstate(
    exc: BaseException, expected: type[Exception]
) -> None:
    assert type(translate_pg(exc)) is expected


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (5, errors.DatabaseBusy),  # SQLITE_BUSY
        (517, errors.DatabaseBusy),  # SQLITE_BUSY_SNAPSHOT
        (6, errors.DatabaseBusy),  # SQLITE_LOCKED
        (262, errors.DatabaseBusy),  # SQLITE_LOCKED_SHAREDCACHE
        (10, errors.StoreUnavailable),  # SQLITE_IOERR
        (266, errors.StoreUnavailable),  # SQLITE_IOERR_READ
        (778, errors.StoreUnavailable),  # SQLITE_IOERR_WRITE
        (13, errors.StoreUnavailable),  # SQLITE_FULL
        (14, errors.StoreUnavailable),  # SQLITE_CANTOPEN
        (15, errors.StoreUnavailable),  # SQLITE_PROTOCOL
        (2067, errors.UniqueViolation),
        (1, errors.StoreError),  # SQLITE_ERROR: a bad statement is not transient
    ],
)
def test_sqlite_result_codes_map_by_code(code: int, expected: type[Exception]) -> None:
    exc = sqlite3.OperationalError("whatever the message says")
    exc.sqlite_errorcode = code  # type: ignore[attr-defined]
    error = translate_sqlite(exc)
    assert type(error) is expected


async def test_sqlite_lock_held_by_another_process_is_database_busy(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/busy.db"
    async with open_store(url, busy_timeout_ms=200) as store:
        other = sqlite3.connect(tmp_path / "busy.db", isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # the write lock, held
            with pytest.raises(errors.DatabaseBusy):
                await store.run_script(
                    "INSERT INTO app_state (app_name, state, update_time) VALUES ('x', '{}', 0);"
                )
        finally:
            other.execute("ROLLBACK")
            other.close()
