"""Prepared statements are kept: every named query fits each connection's statement cache.

A statement evicted from the cache is prepared again on its next use: one more
round trip (PostgreSQL) or one more parse (SQLite) before the unit's own.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from durable_adk import errors
from durable_adk.store import Store, open_store
from durable_adk.store.queries import load_queries
from durable_adk.store.sqlite import CONTROL_STATEMENTS, statement_cache_size


async def _prepared(store: Any) -> set[str]:
    async def names(conn: Any) -> set[str]:
        rows = await conn.fetch("SELECT name FROM pg_prepared_statements")
        return {r["name"] for r in rows}

    found: set[str] = await store._with_connection(names)
    return found


async def _run_every_query(store: Store) -> None:
    for name, query in load_queries(store.dialect).items():
        if query.lease:  # another pool
            continue
        # NULL where a value is needed fails, but the statement was prepared all the same.
        with contextlib.suppress(errors.StoreError):
            await store.fetch(name, dict.fromkeys(query.params))


async def test_a_repeated_query_is_not_prepared_again(backend: str, store_url: str) -> None:
    if backend == "sqlite":
        # sqlite3 does not tell its cache's hits; what it can hold is checked instead.
        queries = load_queries("sqlite")
        distinct = {s for q in queries.values() for s in q.statements}
        assert statement_cache_size(queries) >= len(distinct) + len(CONTROL_STATEMENTS)
        assert len(distinct) > 128  # sqlite3's default cache would not hold them
        return
    async with open_store(store_url, min_size=1, max_size=1) as store:
        await store.fetch("db_now")
        await _run_every_query(store)
        before = await _prepared(store)
        # Every query of the main pool is still prepared on its one connection.
        main = sum(1 for q in load_queries("postgresql").values() if not q.lease)
        assert len(before) >= main > 100
        await store.fetch("db_now")
        await store.fetch("run_get", {"run_id": "nope"})
        assert await _prepared(store) == before


@pytest.mark.parametrize("backend", ["postgresql"])
async def test_the_default_cache_would_evict(store_url: str) -> None:
    """The check above can fail: with asyncpg's default cache (100), db_now is prepared again."""
    from durable_adk.store import postgres

    saved = postgres.statement_cache_size
    postgres.statement_cache_size = lambda _queries: 100  # type: ignore[assignment]
    try:
        async with open_store(store_url, min_size=1, max_size=1) as store:
            await store.fetch("db_now")
            await _run_every_query(store)
            before = await _prepared(store)
            await store.fetch("db_now")
            assert await _prepared(store) - before, "db_now was not prepared again"
    finally:
        postgres.statement_cache_size = saved


@pytest.mark.parametrize("backend", ["postgresql"])
async def test_every_statement_a_query_may_send_is_valid_and_reads_each_of_its_parameters(
    store_url: str,
) -> None:
    """Each combination of NULLs a unit's markers answer to is a statement of its own
    (store/queries.py): each one PostgreSQL prepares, with exactly the parameters the
    store binds to it, or a combination seen only in production would fail there."""
    async with open_store(store_url, min_size=1, max_size=1) as store:

        async def prepare_all(conn: Any) -> int:
            checked = 0
            for name, query in load_queries("postgresql").items():
                for nulls, statement, order in query.variants or (
                    (frozenset(), query.statements[0], query.params),
                ):
                    prepared = await conn.prepare(statement)
                    assert len(prepared.get_parameters()) == len(order), (name, sorted(nulls))
                    checked += 1
            return checked

        checked = await store._with_connection(prepare_all)
    queries = load_queries("postgresql")
    assert checked == sum(max(1, len(q.variants)) for q in queries.values()) > len(queries)
