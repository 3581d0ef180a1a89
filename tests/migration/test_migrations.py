"""schema.sql must equal every migration applied in order, on both backends."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from children import run_child
from durable_adk import errors
from durable_adk.store import Store, connect, latest_version, open_store, upgrade
from durable_adk.store.migrate import check_schema
from durable_adk.store.queries import list_migrations, load_queries


async def catalog(store: Any) -> list[tuple[Any, ...]]:
    """Tables, columns and indexes, read from the database's own catalog."""
    if store.dialect == "sqlite":

        def read() -> list[tuple[Any, ...]]:
            conn = store._conn
            rows: list[tuple[Any, ...]] = []
            tables = conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            ).fetchall()
            for (table,) in tables:
                for col in conn.execute("SELECT * FROM pragma_table_info(?)", (table,)).fetchall():
                    rows.append(("column", table, *col))
                for idx in conn.execute("SELECT * FROM pragma_index_list(?)", (table,)).fetchall():
                    cols = conn.execute(
                        "SELECT name FROM pragma_index_info(?)", (idx[1],)
                    ).fetchall()
                    rows.append(("index", table, idx[1], idx[2], tuple(cols)))
            return sorted(rows, key=repr)

        return await store._call(read)

    async def read_pg(conn: Any) -> list[tuple[Any, ...]]:
        cols = await conn.fetch(
            "SELECT table_name, column_name, data_type, is_nullable, column_default"
            " FROM information_schema.columns WHERE table_schema = 'public'"
            " ORDER BY table_name, column_name"
        )
        idx = await conn.fetch(
            "SELECT tablename, indexname, indexdef FROM pg_indexes"
            " WHERE schemaname = 'public' ORDER BY indexname"
        )
        return [tuple(r) for r in cols] + [tuple(r) for r in idx]

    return await store._with_connection(read_pg)


async def test_schema_equals_migrations(
    backend: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    if backend == "sqlite":
        urls = [f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db"]
    else:
        cluster = request.getfixturevalue("pg_cluster")
        urls = [
            cluster.create_database(f"mig_a_{id(request) % 10**8}"),
            cluster.create_database(f"mig_b_{id(request) % 10**8}"),
        ]
    async with open_store(urls[0]) as from_schema:
        schema_catalog = await catalog(from_schema)
    migrated = await connect(urls[1])
    try:
        applied = await upgrade(migrated)
        assert applied == list(range(1, latest_version(migrated.dialect) + 1))
        assert await check_schema(migrated, create_if_empty=False) == latest_version(
            migrated.dialect
        )
        assert await catalog(migrated) == schema_catalog
        assert await upgrade(migrated) == []
    finally:
        await migrated.close()


def test_both_dialects_define_the_same_queries_and_migrations() -> None:
    assert set(load_queries("sqlite")) == set(load_queries("postgresql"))
    assert [(n, name) for n, name, _ in list_migrations("sqlite")] == [
        (n, name) for n, name, _ in list_migrations("postgresql")
    ]


async def test_schema_ahead_is_refused(store: Store) -> None:
    await store.run_script(
        "INSERT INTO schema_version (version, name, applied_at) VALUES (999, 'future', 0);"
    )
    with pytest.raises(errors.SchemaAhead):
        await check_schema(store)


def test_cli_upgrade_on_an_empty_database(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/cli.db"
    run = run_child(
        [sys.executable, "-m", "durable_adk.cli", "db", "upgrade", "--db", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    expected = list(range(1, latest_version("sqlite") + 1))
    # The output wraps at the terminal's width: compare it with its whitespace collapsed.
    assert f"applied migrations {expected}" in " ".join(run.stdout.split())
    again = run_child(
        [sys.executable, "-m", "durable_adk.cli", "db", "version", "--db", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "current" in again.stdout
    bad = run_child(
        [sys.executable, "-m", "durable_adk.cli", "db", "upgrade", "--db", "oracle://x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2 and "unsupported store URL" in bad.stdout


def test_cli_version_of_a_missing_database_creates_nothing(tmp_path: Any) -> None:
    path = f"{tmp_path}/absent.db"
    run = run_child(
        [sys.executable, "-m", "durable_adk.cli", "db", "version", "--db", f"sqlite:///{path}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2 and "no database" in run.stdout
    import os

    assert not os.path.exists(path)
