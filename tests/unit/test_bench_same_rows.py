"""The bench bound "a bare commit of the same rows" (bench/common.py ``SameRows``).

It is only honest if it writes what our units write: the same rows in the
same tables (so the same pages and indexes), each unit's rows in one commit,
with ids of their own so that a replay is never refused or made smaller.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

from bench.common import (
    BareCommits,
    DriverOnlyReplays,
    PgSameRows,
    PreparedReplays,
    SameRows,
    record_store_calls,
)
from bench.runner import (
    BareAtTheirPointsContender,
    DurableContender,
    SameRowsAtTheirPointsContender,
    UnitsInterleavedContender,
)

from durable_adk.store import open_store


def _counts(path: Path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return {t: int(conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]) for t in tables}


def _grown(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {t: after[t] - before[t] for t in after if after[t] != before[t]}


async def test_the_same_rows_grow_each_table_as_our_units_do(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path / 'ours.db'}") as store:
        ours = DurableContender("sqlite", store, "barrier")
        await ours.run_once()
        calls = await record_store_calls(store, ours.run_once)
        replays = PreparedReplays(store, calls)
        before = _counts(tmp_path / "ours.db")
        for _ in range(2):
            await replays()
        ours_grew = _grown(before, _counts(tmp_path / "ours.db"))
        async with open_store(f"sqlite:///{tmp_path / 'capture.db'}") as capture:
            changes = await SameRows.capture(capture, calls)
    assert len(changes) == sum(1 for q, _p in calls if store.writes(q))
    async with open_store(f"sqlite:///{tmp_path / 'rows.db'}"):
        pass
    same = SameRows(str(tmp_path / "rows.db"), changes).open()
    try:
        before = _counts(tmp_path / "rows.db")
        same.prepare(1)
        for _ in range(2):  # one prepared, one made when it runs
            await same()
        assert same.commits == 2 * len(changes)
        assert _grown(before, _counts(tmp_path / "rows.db")) == ours_grew
        assert ours_grew["events"] > 0 and ours_grew["runs"] == 2
    finally:
        same.close()


async def test_updated_columns_land_on_the_rows_this_replay_inserted(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path / 'capture.db'}") as store:
        ours = DurableContender("sqlite", store, "barrier")
        await ours.run_once()
        calls = await record_store_calls(store, ours.run_once)
    async with open_store(f"sqlite:///{tmp_path / 'capture2.db'}") as capture:
        changes = await SameRows.capture(capture, calls)
    updates = [c for unit in changes for c in unit if c.key is not None]
    assert {c.table for c in updates} >= {"sessions", "runs"}
    async with open_store(f"sqlite:///{tmp_path / 'rows.db'}"):
        pass
    same = SameRows(str(tmp_path / "rows.db"), changes).open()
    try:
        await same()
    finally:
        same.close()
    with contextlib.closing(sqlite3.connect(tmp_path / "rows.db")) as conn:
        status, last_seq = conn.execute(
            "SELECT r.status, s.last_seq FROM runs r JOIN sessions s"
            " ON s.app_name = r.app_name AND s.user_id = r.user_id"
            " AND s.session_id = r.session_id"
        ).fetchone()
        events = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    assert status == "DONE" and last_seq == events > 0


async def test_the_bounds_at_their_points_write_once_per_unit_of_each_run(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path / 'ours.db'}") as store:
        ours = DurableContender("sqlite", store, "barrier")
        await ours.run_once()
        placed = await UnitsInterleavedContender.record(ours)
        writes = sum(1 for q, _p, _at in placed if store.writes(q))
        async with open_store(f"sqlite:///{tmp_path / 'capture.db'}") as capture:
            changes = await SameRows.capture(capture, [(q, p) for q, p, _at in placed])
        async with open_store(f"sqlite:///{tmp_path / 'rows.db'}"):
            pass
        same = SameRows(str(tmp_path / "rows.db"), changes).open()
        bare = await BareCommits(f"sqlite:///{tmp_path / 'bare.db'}").open()
        try:
            rows_bound = SameRowsAtTheirPointsContender(ours, placed, same)
            bare_bound = BareAtTheirPointsContender(ours, placed, bare)
            for prepared in (2, 0, 0):  # two made before, the third while it runs
                for bound in (rows_bound, bare_bound):
                    bound.prepare(prepared)
                    assert await bound.run_once() > 0
            assert same.commits == bare.commits == 3 * writes
            counts = _counts(tmp_path / "rows.db")
            assert counts["runs"] == 3 and counts["events"] > 0
        finally:
            same.close()
            await bare.close()


async def _pg_counts(url: str) -> dict[str, int]:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        tables = [
            r["tablename"]
            for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        ]
        return {t: int(await conn.fetchval(f'SELECT count(*) FROM "{t}"')) for t in tables}
    finally:
        await conn.close()


async def test_on_postgresql_the_same_rows_grow_each_table_as_our_units_do(
    pg_clones: Any,
) -> None:
    names = [pg_clones.take() for _ in range(3)]
    ours_url, capture_url, rows_url = (pg_clones.cluster.url(n) for n in names)
    try:
        async with open_store(ours_url) as store:
            ours = DurableContender("postgresql", store, "barrier")
            await ours.run_once()
            calls = await record_store_calls(store, ours.run_once)
            replays = PreparedReplays(store, calls)
            before = await _pg_counts(ours_url)
            for _ in range(2):
                await replays()
            ours_grew = _grown(before, await _pg_counts(ours_url))
        async with open_store(capture_url) as capture:
            changes = await PgSameRows.capture(capture, capture_url, calls)
        assert len(changes) == sum(1 for q, _p in calls if store.writes(q))
        assert {c.table for unit in changes for c in unit if c.key is not None} >= {
            "sessions",
            "runs",
        }
        same = await PgSameRows(rows_url, changes).open()
        try:
            before = await _pg_counts(rows_url)
            same.prepare(1)
            for _ in range(2):  # one prepared, one made when it runs
                await same()
            assert same.commits == 2 * len(changes)
        finally:
            await same.close()
        assert _grown(before, await _pg_counts(rows_url)) == ours_grew
        assert ours_grew["events"] > 0 and ours_grew["runs"] == 2
        import asyncpg

        conn = await asyncpg.connect(rows_url)
        try:
            ended = await conn.fetch(
                "SELECT r.status, s.last_seq,"
                " (SELECT count(*) FROM events e WHERE e.session_pk = s.pk) AS events"
                " FROM runs r JOIN sessions s ON s.app_name = r.app_name"
                " AND s.user_id = r.user_id AND s.session_id = r.session_id"
            )
        finally:
            await conn.close()
        # Each replay's updates landed on the rows it inserted itself.
        assert len(ended) == 2
        assert all(r["status"] == "DONE" and r["last_seq"] == r["events"] > 0 for r in ended)
    finally:
        for n in names:
            pg_clones.give_back(n)


async def test_our_statements_through_asyncpg_alone_write_what_our_units_write(
    pg_clones: Any,
) -> None:
    # DriverOnlyReplays: the store's own statements and arguments, sent without the
    # store; each replay is a new run that ends DONE, as a replay through the store.
    import asyncpg

    name = pg_clones.take()
    url = pg_clones.cluster.url(name)
    try:
        async with open_store(url) as store:
            ours = DurableContender("postgresql", store, "barrier")
            await ours.run_once()
            calls = await record_store_calls(store, ours.run_once)
            replays = PreparedReplays(store, calls)
            before = await _pg_counts(url)
            await replays()
            by_store = _grown(before, await _pg_counts(url))
            conn = await asyncpg.connect(url)
            try:
                alone = DriverOnlyReplays(store, calls, conn)
                alone.prepare(1)
                before = await _pg_counts(url)
                await alone()
                assert _grown(before, await _pg_counts(url)) == by_store
                done = await conn.fetchval("SELECT count(*) FROM runs WHERE status = 'DONE'")
            finally:
                await conn.close()
        assert by_store["runs"] == 1 and done == 4  # two runs of ours, two replays
    finally:
        pg_clones.give_back(name)
