"""The store contract on both backends: clock, schema versions, errors, bad input."""

from __future__ import annotations

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


async def test_unique_violation_is_translated(store: Store) -> None:
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
