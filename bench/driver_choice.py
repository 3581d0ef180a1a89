"""asyncpg against psycopg 3 on the same PostgreSQL: which driver should the store use?

Run from the repository root::

    .venv/bin/python -m bench.driver_choice [--quick] [--write]

Both drivers get a pool of the same size (asyncpg ``create_pool`` with its default
``reset``, and with a no-op ``reset`` as PostgresStore opens it; psycopg
``psycopg_pool.AsyncConnectionPool`` if installed, else one
``AsyncConnection``) on one private PostgreSQL cluster (TempPostgres, fsync
on), and run, interleaved in blocks with the order rotated:

* a durable single-row ``INSERT`` committed on its own (autocommit), with an
  event-sized JSON text payload: latency median and p99;
* a ``SELECT`` of 100 rows shaped like stored events (the way a session is
  loaded), each row turned into a dict as the store does: median and p99.

The comparison is the ratio of medians, per block, against asyncpg's pool with its
default ``reset`` (how PostgresStore opened it before it passed a no-op one).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg

from bench.common import (
    bench_main,
    fmt_ms,
    fmt_ratio,
    machine_note,
    md_table,
    median,
    percentile,
    rotate,
)
from durable_adk.testing.pg_cluster import TempPostgres

SELECT_100 = (
    "SELECT seq, event_id, invocation_id, author, timestamp, delta, data "
    "FROM sample WHERE session_pk = {} ORDER BY seq LIMIT 100"
)
PAYLOAD = (
    '{"invocationId":"e-000042","author":"shop_assistant","actions":{"stateDelta":'
    '{"turn":42,"last_topic":"shoes","cart":{"items":2,"total_eur":179.8}}},'
    '"content":{"role":"model","parts":[{"text":"'
    + "The blue trail runners are in stock. " * 18
    + '"}]}}'
)


class Driver:
    name: str

    async def insert(self, payload: str) -> None:
        raise NotImplementedError

    async def select(self, session_pk: int) -> list[dict[str, Any]]:
        raise NotImplementedError


class Asyncpg(Driver):
    def __init__(self, pool: Any, name: str) -> None:
        self.pool = pool
        self.name = name
        self._sql = SELECT_100.format("$1")

    async def insert(self, payload: str) -> None:
        await self.pool.execute("INSERT INTO raw (x) VALUES ($1)", payload)

    async def select(self, session_pk: int) -> list[dict[str, Any]]:
        return [dict(r) for r in await self.pool.fetch(self._sql, session_pk)]


class Psycopg(Driver):
    def __init__(self, pool: Any, conn: Any) -> None:
        self.pool = pool
        self.conn = conn
        self.name = "psycopg 3 (pool)" if pool is not None else "psycopg 3 (one connection)"
        self._sql = SELECT_100.format("%s")

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Any]:
        if self.pool is not None:
            async with self.pool.connection() as conn:
                yield conn
        else:
            yield self.conn

    async def insert(self, payload: str) -> None:
        async with self._connection() as conn:
            await conn.execute("INSERT INTO raw (x) VALUES (%s)", (payload,))

    async def select(self, session_pk: int) -> list[dict[str, Any]]:
        async with self._connection() as conn:
            cursor = await conn.execute(self._sql, (session_pk,))
            return list(await cursor.fetchall())


async def _no_reset(conn: Any) -> None:
    return None


@contextlib.asynccontextmanager
async def open_drivers(url: str) -> AsyncIterator[list[Driver]]:
    import psycopg
    from psycopg.rows import dict_row

    pool = await asyncpg.create_pool(url, min_size=1, max_size=10)
    # asyncpg's pool sends a reset query (advisory unlock, CLOSE ALL, UNLISTEN,
    # RESET ALL) on every release: one more round trip per pool call. A no-op
    # reset skips it (an open transaction is still rolled back on release).
    no_reset = await asyncpg.create_pool(url, min_size=1, max_size=10, reset=_no_reset)
    pg_pool: Any = None
    pg_conn: Any = None
    try:
        try:
            from psycopg_pool import AsyncConnectionPool

            pg_pool = AsyncConnectionPool(
                url,
                min_size=1,
                max_size=10,
                kwargs={"autocommit": True, "row_factory": dict_row},
                open=False,
            )
            await pg_pool.open(wait=True)
        except ImportError:
            pg_conn = await psycopg.AsyncConnection.connect(
                url, autocommit=True, row_factory=dict_row
            )
        yield [
            Asyncpg(pool, "asyncpg (pool, default reset)"),
            Asyncpg(no_reset, "asyncpg (pool, reset=no-op: as PostgresStore opens it)"),
            Psycopg(pg_pool, pg_conn),
        ]
    finally:
        await pool.close()
        await no_reset.close()
        if pg_pool is not None:
            await pg_pool.close()
        if pg_conn is not None:
            await pg_conn.close()


async def _setup(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            """
            CREATE TABLE raw (id bigserial PRIMARY KEY, x text NOT NULL);
            CREATE TABLE sample (
                session_pk bigint NOT NULL, seq bigint NOT NULL, event_id text NOT NULL,
                invocation_id text NOT NULL, author text NOT NULL,
                timestamp float8 NOT NULL, delta text, data text NOT NULL,
                PRIMARY KEY (session_pk, seq));
            """
        )
        rows = [
            (
                pk,
                seq,
                f"ev-{pk}-{seq}",
                f"e-{seq // 2:06d}",
                "user" if seq % 2 else "model",
                1.7e9 + seq,
                None if seq % 2 else '{"turn":1}',
                PAYLOAD,
            )
            for pk in range(1, 11)
            for seq in range(1, 201)
        ]
        await conn.copy_records_to_table("sample", records=rows)
        await conn.execute("ANALYZE sample")
    finally:
        await conn.close()


async def run(quick: bool = False) -> str:
    rounds = 3 if quick else 8
    inserts, selects, block = (150, 150, 25) if quick else (400, 400, 50)
    started = time.perf_counter()
    with TempPostgres() as pg:
        url = pg.create_database("drivers")
        await _setup(url)
        version_conn = await asyncpg.connect(url)
        pg_version = await version_conn.fetchval("SHOW server_version")
        await version_conn.close()
        async with open_drivers(url) as drivers:
            for d in drivers:  # warm-up: connections, prepared statements
                for i in range(20):
                    await d.insert(PAYLOAD)
                    assert len(await d.select(1 + i % 10)) == 100
            ins: dict[str, list[float]] = {d.name: [] for d in drivers}
            sel: dict[str, list[float]] = {d.name: [] for d in drivers}
            ins_blocks: dict[str, list[float]] = {d.name: [] for d in drivers}
            sel_blocks: dict[str, list[float]] = {d.name: [] for d in drivers}
            for rnd in range(rounds):
                gc.collect()
                for b, start in enumerate(range(0, inserts, block)):
                    for d in rotate(drivers, rnd + b):
                        took = []
                        for _ in range(start, min(start + block, inserts)):
                            t0 = time.perf_counter()
                            await d.insert(PAYLOAD)
                            took.append(time.perf_counter() - t0)
                        ins[d.name] += took
                        ins_blocks[d.name].append(median(took))
                for b, start in enumerate(range(0, selects, block)):
                    for d in rotate(drivers, rnd + b):
                        took = []
                        for i in range(start, min(start + block, selects)):
                            t0 = time.perf_counter()
                            await d.select(1 + i % 10)
                            took.append(time.perf_counter() - t0)
                        sel[d.name] += took
                        sel_blocks[d.name].append(median(took))
    elapsed = time.perf_counter() - started
    names = [d.name for d in drivers]
    base = names[0]

    def block_ratio(blocks: dict[str, list[float]], name: str) -> float:
        pairs = zip(blocks[name], blocks[base], strict=True)
        return median([a / b for a, b in pairs])

    rows = []
    for name in names:
        rows.append(
            [
                name,
                fmt_ms(median(ins[name])),
                fmt_ms(percentile(ins[name], 99)),
                fmt_ratio(block_ratio(ins_blocks, name)),
                fmt_ms(median(sel[name])),
                fmt_ms(percentile(sel[name], 99)),
                fmt_ratio(block_ratio(sel_blocks, name)),
            ]
        )
    table = md_table(
        [
            "driver",
            "INSERT+COMMIT median",
            "p99",
            "vs asyncpg default",
            "SELECT 100 rows median",
            "p99",
            "vs asyncpg default",
        ],
        rows,
    )
    print(table, flush=True)
    print(f"driver_choice bench finished in {elapsed:.0f} s", flush=True)
    mode = "quick (`--quick`)" if quick else "full"
    return "\n\n".join(
        [
            "## Driver choice (`bench/driver_choice.py`)",
            f"Run: {mode}, {time.strftime('%Y-%m-%d %H:%M %Z')}, {elapsed:.0f} s. Machine: "
            f"{machine_note(f'PostgreSQL {pg_version} (TempPostgres, fsync on)')}.",
            f"Same database, pools of 1..10 connections, autocommit. {rounds} rounds of "
            f"{inserts} single-row INSERTs (a {len(PAYLOAD)}-byte JSON text) and {selects} "
            f"SELECTs of 100 event-shaped rows (returned as dicts), in blocks of {block} "
            "alternating between the drivers, order rotated; 'vs asyncpg default' is the "
            "median of per-block ratios of medians against asyncpg's pool with its default "
            "`reset` (asyncpg runs `SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; "
            "RESET ALL;` on every release, i.e. a second round trip per pool call); the "
            "second asyncpg row passes a no-op `reset=`, as PostgresStore now does.",
            table,
        ]
    )


def collect(quick: bool = False) -> str:
    """Runs the bench (printing its table) and returns its BENCHMARKS.md section."""
    return asyncio.run(run(quick))


def main(argv: Sequence[str] | None = None) -> None:
    bench_main("driver_choice", collect, argv)


if __name__ == "__main__":
    main()
