"""The store contract on both backends: clock, schema versions, errors, bad input."""

from __future__ import annotations

import os
import time

import pytest

from durable_adk import errors
from durable_adk.store import Store, connect, latest_version, open_store, upgrade


async def test_database_clock_is_close_to_wall_clock(store: Store) -> None:
    before = time.time()
    now = await store.now()
    assert before - 5 < now < time.time() + 5
    assert await store.now() >= now


async def test_fresh_database_gets_current_schema(store: Store) -> None:
    assert await store.schema_version() == latest_version(store.dialect)


async def test_unknown_query_name_is_rejected(store: Store) -> None:
    with pytest.raises(errors.InvalidArgument, match="no query named"):
        await store.fetch("drop_everything")


async def test_missing_parameter_is_rejected_before_sql(store: Store) -> None:
    with pytest.raises(errors.InvalidArgument, match="needs"):
        await store.fetch("get_app_state", {})


def _run_start(run_id: str) -> dict[str, object]:
    return {
        "run_id": run_id,
        "app_name": "a",
        "user_id": "u",
        "session_id": "s",
        "invocation_id": "i",
        "request": "{}",
        "owner": "w",
        "lease": 30.0,
        "backoff": 1.0,
        "app_version": None,
        "app_fingerprint": None,
        "initial_state": "{}",
        "now": 1.0,
    }


async def test_a_write_missing_a_parameter_is_rejected_and_writes_nothing(store: Store) -> None:
    """A hot write (SQLite: on the caller's thread, its arguments bound as given) still
    names what it misses before any SQL runs; names it does not use are ignored."""
    params = _run_start("r1")
    del params["initial_state"]
    with pytest.raises(errors.InvalidArgument, match=r"needs \['initial_state'\]"):
        await store.fetch("run_start", params)
    assert await store.fetchrow("run_get", {"run_id": "r1"}) is None
    rows = await store.fetch("run_start", {**_run_start("r1"), "not_a_parameter": object()})
    assert rows[0]["status"] == "RUNNING"
    assert (await store.fetchrow("run_get", {"run_id": "r1"}) or {})["status"] == "RUNNING"


async def test_create_session_reports_an_existing_id(store: Store) -> None:
    params = {
        "app_name": "a",
        "user_id": "u",
        "session_id": "s",
        "initial_state": "{}",
        "now": 1.0,
        "app_delta": None,
        "user_delta": None,
    }
    first = await store.fetchrow("create_session", params)
    second = await store.fetchrow("create_session", params)
    assert first is not None and first["status"] == "ok"
    assert second is not None and second["status"] == "exists"


async def test_schema_behind_names_the_upgrade_command(store_url: str) -> None:
    async with open_store(store_url):
        pass
    store = await connect(store_url)
    try:
        # Pretend the database predates the newest migration.
        await store.run_script("DELETE FROM schema_version;")
        await store.run_script(
            "INSERT INTO schema_version (version, name, applied_at) VALUES (0, 'old', 0);"
        )
    finally:
        await store.close()
    # An all-zero version reads as "empty" only when the table is missing; here it exists.
    with pytest.raises(errors.SchemaBehind, match="durable-adk db upgrade"):
        async with open_store(store_url, create_if_empty=False):
            pass


async def test_upgrade_of_current_database_applies_nothing(store: Store) -> None:
    assert await upgrade(store) == []


async def test_unsupported_url_is_rejected() -> None:
    with pytest.raises(errors.UnsupportedUrl):
        await connect("mysql://localhost/db")
    with pytest.raises(errors.UnsupportedUrl):
        await connect("sqlite:///")


async def test_many_openers_of_an_empty_database(
    backend: str, tmp_path: object, request: pytest.FixtureRequest
) -> None:
    import asyncio

    if backend == "sqlite":
        url = f"sqlite:///{tmp_path}/race.db"
    else:
        url = request.getfixturevalue("pg_cluster").create_database(
            f"race_{os.getpid()}_{id(request) % 10**6}"
        )

    async def opener() -> int:
        async with open_store(url) as store:
            return await store.schema_version()

    assert set(await asyncio.gather(*(opener() for _ in range(4)))) == {latest_version(backend)}


async def test_an_opener_waits_for_a_writer_holding_a_new_sqlite_file(tmp_path: object) -> None:
    # A second connection's write transaction on a fresh (rollback-journal) file:
    # SQLite refuses the switch to WAL at once, without its busy handler; the
    # store tries again within its busy timeout instead of failing the open.
    import sqlite3
    import threading

    path = f"{tmp_path}/held.db"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    threading.Timer(0.3, lambda: other.execute("COMMIT")).start()
    started = time.monotonic()
    async with open_store(f"sqlite:///{path}") as store:
        assert await store.schema_version() == latest_version("sqlite")
    assert time.monotonic() - started >= 0.25  # it waited for the writer
    other.close()


async def test_unreachable_sqlite_folder_is_store_unavailable(tmp_path: object) -> None:
    blocker = f"{tmp_path}/file"
    with open(blocker, "w") as handle:
        handle.write("not a folder")
    with pytest.raises(errors.StoreUnavailable):
        await connect(f"sqlite:///{blocker}/sub/db.sqlite")


def test_postgres_queries_must_be_single_statements() -> None:
    from durable_adk.store.queries import parse_queries

    with pytest.raises(ValueError, match="one statement"):
        parse_queries("-- name: two\nSELECT 1;\nSELECT 2;\n", "postgresql")
    assert (
        len(parse_queries("-- name: two\nSELECT 1;\nSELECT 2;\n", "sqlite")["two"].statements) == 2
    )
