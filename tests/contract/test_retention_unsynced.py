"""A paced purge's batches commit without waiting for the disk, and it checkpoints
every so many rows (issue 43), both backends: SQLite runs a unit asked for with
``sync=False`` under ``synchronous = NORMAL`` and puts ``FULL`` back after it
(whatever the unit did); every other unit, and a flat-out purge, stays synced;
PostgreSQL ignores the ask. The purge deletes the same rows either way."""

from __future__ import annotations

from typing import Any

import pytest
from test_retention_pacing import seed

from durable_adk import errors
from durable_adk.lifecycle import RetentionPolicy, purge
from durable_adk.lifecycle.pacing import Pacer
from durable_adk.store import Store
from durable_adk.store.base import fetch_held
from durable_adk.store.queries import parse_queries

SQL = {
    "sqlite": """
-- name: t_sync_write
-- A unit that writes, and says how its commit will sync (2: FULL, 1: NORMAL).
CREATE TEMP TABLE IF NOT EXISTS t_sync (n INTEGER);
INSERT INTO t_sync (n) VALUES (1);
SELECT synchronous AS level FROM pragma_synchronous();

-- name: t_sync_fail
-- A unit that writes, then fails on a constraint.
CREATE TEMP TABLE IF NOT EXISTS t_sync_once (n INTEGER PRIMARY KEY);
INSERT INTO t_sync_once (n) VALUES (1);
INSERT INTO t_sync_once (n) VALUES (1);

-- name: t_sync_level
SELECT synchronous AS level FROM pragma_synchronous();
""",
    "postgresql": """
-- name: t_sync_write
SELECT 2 AS level;

-- name: t_sync_fail
SELECT 1 / 0 AS level;

-- name: t_sync_level
SELECT 2 AS level;
""",
}


async def level(store: Store) -> int:
    return int((await store.fetch("t_sync_level"))[0]["level"])


async def test_a_unit_asked_unsynced_commits_with_normal_and_puts_full_back(
    store: Store,
) -> None:
    store.add_queries(parse_queries(SQL[store.dialect], store.dialect))
    rows, held = await fetch_held(store, "t_sync_write")
    assert rows[0]["level"] == 2 and held is not None
    rows, held = await fetch_held(store, "t_sync_write", sync=False)
    expected = 1 if store.dialect == "sqlite" else 2
    assert rows[0]["level"] == expected and held is not None
    assert await level(store) == 2  # put back for every unit after it
    rows = await store.fetch("t_sync_write")  # no ask: synced
    assert rows[0]["level"] == 2
    with pytest.raises(errors.StoreError):
        await fetch_held(store, "t_sync_fail", sync=False)
    assert await level(store) == 2  # put back after a unit that failed too


class Counting:
    """The store, noting each unit's name and, for a purge's deletes, the rows it deleted."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.log: list[tuple[str, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def fetch(self, query: str, params: Any = None) -> Any:
        rows = await self._store.fetch(query, params)
        self.log.append((query, len(rows)))
        return rows


async def sleep(seconds: float) -> None:
    return None


async def test_a_paced_purge_checkpoints_every_so_many_rows_and_after_its_last(
    store: Store,
) -> None:
    await seed(store, sessions=5, events=9)
    policy = RetentionPolicy(idle_sessions=0, batch=7, duty=0.05)
    pacer = Pacer(policy.duty, policy.batch, min_batch=7, sleep=sleep, checkpoint_rows=20)
    counting = Counting(store)
    report = await purge(counting, "old", policy, pacer=pacer)  # type: ignore[arg-type]
    assert (report.tables["events"].rows, report.tables["sessions"].rows) == (45, 5)
    since = 0
    checkpoints = 0
    for name, rows in counting.log:
        if name == "purge_checkpoint":
            assert since > 0, counting.log  # only after rows were deleted
            since = 0
            checkpoints += 1
        elif name.startswith("purge_") and name not in ("purge_mark", "purge_oldest"):
            assert since < 20, counting.log  # 20 rows since the last: it came at once
            since += rows
    assert since == 0  # the last rows deleted were checkpointed before the pass ended
    assert 2 <= checkpoints <= 50 // 20 + 1
    # Flat out: after every batch that deleted rows, as before.
    await seed(store, sessions=2, events=3)
    flat = Counting(store)
    policy = RetentionPolicy(idle_sessions=0, batch=2, duty=1.0)
    await purge(flat, "old", policy, pacer=Pacer(1.0, 2, sleep=sleep))  # type: ignore[arg-type]
    names = [n for n, rows in flat.log if rows or n == "purge_checkpoint"]
    deletes = [i for i, n in enumerate(names) if n in ("purge_events", "purge_sessions")]
    assert deletes and all(names[i + 1] == "purge_checkpoint" for i in deletes), names


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # PostgreSQL has no such setting
async def test_a_paced_purge_asks_its_batches_unsynced_and_a_flat_out_one_does_not(
    store: Store,
) -> None:
    await seed(store, sessions=2, events=4)
    store.add_queries(parse_queries(SQL[store.dialect], store.dialect))
    seen: list[tuple[str, int]] = []
    run_on = store._run_on  # type: ignore[attr-defined]

    def watching(c: Any, query: Any, params: Any, held: Any = None) -> Any:
        if query.writes:
            seen.append((query.name, int(c.execute("PRAGMA synchronous").fetchone()[0])))
        return run_on(c, query, params, held)

    store._run_on = watching  # type: ignore[attr-defined]
    try:
        policy = RetentionPolicy(idle_sessions=0, batch=3, duty=0.05)
        await purge(store, "old", policy, pacer=Pacer(0.05, 3, min_batch=3, sleep=sleep))
        paced = {name: lvl for name, lvl in seen if name.startswith("purge_")}
        assert paced["purge_mark"] == 1 and paced["purge_events"] == 1
        assert paced["purge_sessions"] == 1
        assert await level(store) == 2
        await seed(store, sessions=1, events=2)
        seen.clear()
        policy = RetentionPolicy(idle_sessions=0, batch=3, duty=1.0)
        await purge(store, "old", policy, pacer=Pacer(1.0, 3, sleep=sleep))
        assert seen and all(lvl == 2 for name, lvl in seen if name.startswith("purge_"))
    finally:
        del store._run_on  # type: ignore[attr-defined]
