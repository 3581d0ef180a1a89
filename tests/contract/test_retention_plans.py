"""Every statement of the purge and of forgetting a user finds its rows on an index, both backends.

The plans are read from the databases themselves (``EXPLAIN``; nothing runs).
PostgreSQL is asked with sequential scans priced out (``enable_seqscan =
off``): it still scans a table when no index can serve the access, so a
``Seq Scan`` left in a plan is an access no index serves. SQLite's
``EXPLAIN QUERY PLAN`` says ``SCAN <table>`` for a full scan and ``SEARCH``
(or ``SCAN ... USING INDEX`` of a partial index) for an indexed one. The
tables a batch reads are all the big ones (events, runs, journal, jobs...);
only the schedule firings' open index and the small per-key tables may be
read whole.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any

import asyncpg

from durable_adk.lifecycle.purge import DELETE_STEPS, SCRUB_STEPS
from durable_adk.store import Store

PURGE_QUERIES = sorted(
    [
        "purge_mark",
        "purge_preview",
        "purge_holding",
        "purge_sessions",
        "purge_oldest",
        "lifecycle_apps",
        "forget_live_runs",
        "forget_mark",
        "forget_user_state",
        *(f"purge_{t}" for t in DELETE_STEPS),
        *(f"scrub{kind}_{t}" for t in SCRUB_STEPS for kind in ("", "_pick")),
    ]
)

PARAMS: dict[str, Any] = {
    "app_name": "app",
    "user_id": "u",
    "batch": 100,
    "keep_skeleton": False,
    "keys": "[]",
    "before": 1.0,
    "idle_before": 1.0,
    "done_before": 1.0,
    "failed_before": 1.0,
    "cancelled_before": 1.0,
    "parked_before": 1.0,
    "abandoned_before": 1.0,
}


def _pg_args(query: Any) -> list[Any]:
    return [PARAMS[name] for name in query.params]


async def _pg_plans(conn: asyncpg.Connection, store: Store, name: str) -> list[str]:
    query = store._queries[name]  # the packaged SQL, as the store runs it
    plans = []
    for statement in query.statements:
        rows = await conn.fetch("EXPLAIN " + statement, *_pg_args(query))
        plans.append("\n".join(r[0] for r in rows))
    return plans


def _sqlite_plans(conn: sqlite3.Connection, store: Store, name: str) -> list[str]:
    query = store._queries[name]
    plans = []
    for statement in query.statements:
        used = {k: PARAMS[k] for k in re.findall(r"(?<![:\w]):([a-z_]+)", statement)}
        rows = conn.execute("EXPLAIN QUERY PLAN " + statement, used).fetchall()
        plans.append("\n".join(str(r[-1]) for r in rows))
    return plans


async def _scans(conn: Any, store: Store, name: str) -> tuple[list[str], list[str]]:
    if store.dialect == "postgresql":
        plans = await _pg_plans(conn, store, name)
        scans = [line.strip() for p in plans for line in p.splitlines() if "Seq Scan" in line]
    else:
        plans = _sqlite_plans(conn, store, name)
        scans = [
            line.strip()
            for p in plans
            for line in p.splitlines()
            if re.match(r"\s*SCAN (?!CONSTANT)", line)
            and "USING" not in line
            # the marked sessions (a subquery on sessions_purging), their A2A tasks (k),
            # CTEs, JSON arrays
            and not re.match(r"\s*SCAN (p|picked|doomed|json_each|a|b|cand|named|n|k)\b", line)
        ]
    return scans, plans


async def test_no_statement_of_the_purge_scans_a_table(store: Store) -> None:
    found = {}
    if store.dialect == "postgresql":
        conn: Any = await asyncpg.connect(store.url)
        await conn.execute("SET enable_seqscan = off")
    else:
        conn = sqlite3.connect(store.url.removeprefix("sqlite:///").partition("?")[0])
    try:
        for name in PURGE_QUERIES:
            scans, plans = await _scans(conn, store, name)
            if scans:
                found[name] = (scans, "\n\n".join(plans))
    finally:
        await conn.close() if store.dialect == "postgresql" else conn.close()
    assert {n: s for n, (s, _) in found.items()} == {}, "\n\n".join(
        f"{n}:\n{p}" for n, (_, p) in found.items()
    )
