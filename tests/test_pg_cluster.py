"""Tests for durable_adk.testing.pg_cluster.TempPostgres against a real server.

Skipped when no PostgreSQL server binaries are installed, unless
DURABLE_ADK_REQUIRE_POSTGRES=1 (as in CI), which turns the skip into a failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from durable_adk.testing.pg_cluster import (
    TempPostgres,
    TempPostgresNotFound,
    validate_database_name,
)

pytestmark = pytest.mark.postgres


def _require_postgres() -> None:
    if TempPostgres.is_available():
        return
    reason = "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found"
    if os.environ.get("DURABLE_ADK_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"{reason}, and DURABLE_ADK_REQUIRE_POSTGRES=1")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def cluster() -> Iterator[TempPostgres]:
    _require_postgres()
    with TempPostgres() as pg:
        yield pg


async def _fetchval(url: str, query: str) -> object:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(query)
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_lifecycle_two_isolated_databases() -> None:
    _require_postgres()
    pg = TempPostgres().start()
    try:
        assert pg.running
        base_dir, data_dir = pg.base_dir, pg.data_dir
        assert (data_dir / "PG_VERSION").is_file()
        assert pg.admin_url == f"postgresql://postgres@127.0.0.1:{pg.port}/postgres"

        url_one = pg.create_database("alpha_db")
        url_two = pg.create_database("beta_db")
        assert url_one == f"postgresql://postgres@127.0.0.1:{pg.port}/alpha_db"
        assert url_two == f"postgresql://postgres@127.0.0.1:{pg.port}/beta_db"

        one = await asyncpg.connect(url_one)
        two = await asyncpg.connect(url_two)
        try:
            assert await one.fetchval("SELECT 1") == 1
            assert await two.fetchval("SELECT 1") == 1
            assert await one.fetchval("SELECT current_database()") == "alpha_db"
            assert await two.fetchval("SELECT current_database()") == "beta_db"

            # Isolation: a table and its rows in one database are invisible in the other.
            await one.execute("CREATE TABLE only_here (id int PRIMARY KEY, note text)")
            await one.execute("INSERT INTO only_here VALUES (1, 'alpha')")
            assert await one.fetchval("SELECT note FROM only_here WHERE id = 1") == "alpha"
            assert await two.fetchval("SELECT to_regclass('public.only_here')") is None
            with pytest.raises(asyncpg.UndefinedTableError):
                await two.fetchval("SELECT count(*) FROM only_here")
        finally:
            await one.close()
            await two.close()
        assert {"alpha_db", "beta_db"} <= set(pg.list_databases())

        # Dropping closes sessions still open on the database instead of failing.
        lingering = await asyncpg.connect(url_two)
        try:
            pg.drop_database("beta_db")
        finally:
            lingering.terminate()
        assert "beta_db" not in pg.list_databases()
        assert "alpha_db" in pg.list_databases()
        with pytest.raises(asyncpg.InvalidCatalogNameError):
            await asyncpg.connect(url_two)
        assert await _fetchval(url_one, "SELECT count(*) FROM only_here") == 1
    finally:
        pg.stop()

    assert not pg.running
    assert not data_dir.exists()
    assert not base_dir.exists()
    pg.stop()  # a second stop is a no-op


@pytest.mark.parametrize(
    "name",
    [
        "",
        "Upper",
        "1starts_with_digit",
        "has-dash",
        "has space",
        "semi;colon",
        'quote"d',
        "drop_me; DROP DATABASE postgres",
        "trailing_newline\n",
        "nul\x00byte",
        "ümlaut",
        "a" * 64,
    ],
)
def test_invalid_database_name_raises_and_creates_nothing(cluster: TempPostgres, name: str) -> None:
    before = cluster.list_databases()
    with pytest.raises(ValueError):
        cluster.create_database(name)
    with pytest.raises(ValueError):
        cluster.create_database("valid_name_for_bad_template", template=name)
    with pytest.raises(ValueError):
        cluster.drop_database(name)
    assert cluster.list_databases() == before


def test_valid_name_limits() -> None:
    assert validate_database_name("a" * 63) == "a" * 63
    assert validate_database_name("_x9") == "_x9"
    with pytest.raises(ValueError):
        validate_database_name(123)


def test_protected_databases_cannot_be_dropped(cluster: TempPostgres) -> None:
    for name in ("postgres", "template0", "template1"):
        with pytest.raises(ValueError):
            cluster.drop_database(name)
    assert {"postgres", "template0", "template1"} <= set(cluster.list_databases())
    cluster.drop_database("never_created")  # missing database: no error


@pytest.mark.asyncio
async def test_create_from_template_copies_schema(cluster: TempPostgres) -> None:
    template_url = cluster.create_database("schema_template", template="template0")
    conn = await asyncpg.connect(template_url)
    try:
        await conn.execute("CREATE TABLE events (id bigint PRIMARY KEY, body jsonb NOT NULL)")
        await conn.execute("""INSERT INTO events VALUES (1, '{"k": 1}')""")
    finally:
        await conn.close()
    # Cloned right after the template's connection closed: the server may not
    # have let go of it yet, which create_database waits out.
    clone_url = cluster.create_database("schema_clone", template="schema_template")
    assert await _fetchval(clone_url, "SELECT count(*) FROM events") == 1
    cluster.drop_database("schema_clone")
    cluster.drop_database("schema_template")


def test_missing_binaries_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DURABLE_ADK_PG_BIN", str(tmp_path))
    assert not TempPostgres.is_available()
    with pytest.raises(TempPostgresNotFound):
        TempPostgres().start()


def test_server_stopped_at_exit_without_stop(tmp_path: Path) -> None:
    _require_postgres()
    script = textwrap.dedent(
        """
        import sys
        from durable_adk.testing.pg_cluster import TempPostgres
        pg = TempPostgres(base_dir=sys.argv[1]).start()
        print(pg.base_dir, flush=True)
        raise SystemExit(3)  # exits without calling stop()
        """
    )
    # tmp_path itself may not be reachable by the server's OS user when the
    # tests run as root, so the cluster goes under the system temp dir.
    parent = Path(os.environ.get("TMPDIR", "/tmp"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    result = subprocess.run(
        [sys.executable, "-c", script, str(parent)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert result.returncode == 3, result.stderr
    base_dir = Path(result.stdout.strip())
    assert base_dir.name.startswith("durable_adk_pg_")
    assert not base_dir.exists()
