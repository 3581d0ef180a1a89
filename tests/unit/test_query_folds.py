"""A check that travels in its write (``-- check travels here``): the same outcome, one
statement fewer when the check passes.

Each packaged append unit is run twice on the same database state, inside a
transaction rolled back after each: once as loaded (the check runs only when
the write wrote nothing or failed) and once as it ran before the check
travelled: the check first, then the write without the check's conditions.
Rows returned, error raised and what the transaction wrote must be the same
for every outcome the check knows.

The units' results are a SELECT of their own after the writes, not a RETURNING
clause (which opens a temporary table each time it runs): the same outcomes
as the clause gave, and no temporary table in the statements a run executes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from durable_adk.store import open_store
from durable_adk.store.queries import Query, list_migrations, load_queries, parse_queries
from durable_adk.store.sqlite import arguments, merge_json, run_unit

APP, USER, SESSION = "app", "u1", "s1"
OWNER, RUN = "w1", "r1"
UNITS = ("append_event", "append_events", "append_events_finish")
TABLES = {
    "events": "*",
    "sessions": "*",
    # Not its times: the database clock moves between the two attempts.
    "runs": "run_id, status, epoch, owner, classification, last_error, finished_at IS NULL",
    "app_state": "*",
    "user_state": "*",
    "state_snapshots": "*",
}


async def _prepare(path: Path) -> None:
    async with open_store(f"sqlite:///{path}") as store:
        rows = await store.fetch(
            "run_start",
            {
                "run_id": RUN,
                "app_name": APP,
                "user_id": USER,
                "session_id": SESSION,
                "invocation_id": "inv1",
                "request": "{}",
                "owner": OWNER,
                "lease": 60.0,
                "backoff": 1.0,
                "app_version": None,
                "app_fingerprint": None,
                "initial_state": "{}",
                "now": 1.0,
            },
        )
        assert rows[0]["status"] == "RUNNING"
        # A first event, so a duplicate of it can be tried.
        pk = rows[0]["created_session_pk"]
        written = await store.fetch("append_event", _one(pk, 0, "e0"))
        assert written[0]["status"] == "ok"


def _one(pk: int, expected: int | None, event_id: str | None, **over: Any) -> dict[str, Any]:
    params = {
        "run_id": RUN,
        "run_epoch": 1,
        "expected_seq": expected,
        "session_pk": pk,
        "event_id": event_id,
        "invocation_id": "inv1",
        "author": "user",
        "timestamp": 2.0,
        "delta": None,
        "data": json.dumps({"id": event_id}),
        "app_delta": None,
        "app_name": APP,
        "user_delta": None,
        "user_id": USER,
        "snapshot": None,
    }
    params.update(over)
    return params


def _batch(pk: int, expected: int | None, ids: list[str], **over: Any) -> dict[str, Any]:
    events = [
        {
            "seq": (expected or 0) + i + 1,
            "event_id": e,
            "invocation_id": "inv1",
            "author": "model",
            "timestamp": 3.0,
            "delta": None,
            "data": json.dumps({"id": e}),
        }
        for i, e in enumerate(ids)
    ]
    params = {
        "owner": OWNER,
        "events": json.dumps(events),
        "session_pk": pk,
        "run_id": RUN,
        "run_epoch": 1,
        "expected_seq": expected,
        "last_seq": (expected or 0) + len(ids),
        "timestamp": 3.0,
        "app_delta": None,
        "app_name": APP,
        "user_delta": None,
        "user_id": USER,
        "snapshots": None,
        "status": "DONE",
        "error": None,
        "classification": None,
        "inbox": None,
    }
    params.update(over)
    return params


Case = Callable[[int], dict[str, Any]]

# The outcomes each unit's check knows, and the errors of a write the check lets through.
CASES: dict[str, Case] = {
    "ok": lambda pk: {"one": _one(pk, 1, "e1"), "batch": _batch(pk, 1, ["e1", "e2"])},
    "stale": lambda pk: {"one": _one(pk, 0, "e1"), "batch": _batch(pk, 0, ["e1"])},
    "missing": lambda pk: {"one": _one(pk + 99, 1, "e1"), "batch": _batch(pk + 99, 1, ["e1"])},
    "duplicate": lambda pk: {"one": _one(pk, 1, "e0"), "batch": _batch(pk, 1, ["e1", "e0"])},
    "duplicate and stale": lambda pk: {"one": _one(pk, 0, "e0"), "batch": _batch(pk, 0, ["e0"])},
    "fenced": lambda pk: {
        "one": _one(pk, 1, "e1", run_epoch=2),
        "batch": _batch(pk, 1, ["e1"], run_epoch=2),
    },
    "no run named": lambda pk: {
        "one": _one(pk, 1, "e1", run_id=None),
        "batch": _batch(pk, 1, ["e1"], run_id=None),
    },
    "another owner": lambda pk: {
        "one": _one(pk, 1, "e1"),
        "batch": _batch(pk, 1, ["e1"], owner="w2"),
    },
    "expected NULL": lambda pk: {"one": _one(pk, None, "e1"), "batch": _batch(pk, None, ["e1"])},
    "event id NULL": lambda pk: {"one": _one(pk, 1, None), "batch": _batch(pk, 1, ["e1"])},
    "twice in the batch": lambda pk: {
        "one": _one(pk, 1, "e1"),
        "batch": _batch(pk, 1, ["e1", "e1"]),
    },
    "empty batch": lambda pk: {"one": _one(pk, 1, "e1"), "batch": _batch(pk, 1, [])},
}


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.create_function("dadk_merge", 2, merge_json, deterministic=True)
    return conn


def _attempt(
    conn: sqlite3.Connection, query: Query, params: dict[str, Any]
) -> tuple[Any, dict[str, list[tuple[Any, ...]]], int]:
    """The unit's rows (or its error), the tables after it, and its statements; rolled back."""
    ran: list[str] = []
    conn.execute("BEGIN IMMEDIATE")
    conn.set_trace_callback(ran.append)
    try:
        outcome: Any = run_unit(conn, query, arguments(query, params))
    except sqlite3.Error as exc:
        outcome = (type(exc).__name__, str(exc))
    finally:
        conn.set_trace_callback(None)
    tables = {
        t: conn.execute(f"SELECT {cols} FROM {t} ORDER BY 1, 2").fetchall()
        for t, cols in TABLES.items()
    }
    conn.execute("ROLLBACK")
    return outcome, tables, len(ran)


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> tuple[sqlite3.Connection, int]:
    path = tmp_path_factory.mktemp("folds") / "folds.db"
    asyncio.run(_prepare(path))
    conn = _connect(path)
    (pk,) = conn.execute("SELECT pk FROM sessions").fetchone()
    return conn, pk


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", UNITS)
def test_the_travelling_check_gives_what_the_check_first_gives(
    database: tuple[sqlite3.Connection, int], name: str, case: str
) -> None:
    conn, pk = database
    folded = load_queries("sqlite")[name]
    assert folded.folds == frozenset({1})
    # The unit as it ran before its check travelled: the check first, then the
    # write with no conditions of its own.
    fence = "\n WHERE EXISTS (SELECT 1 FROM sessions s"
    statements = list(folded.statements)
    assert fence in statements[1]
    statements[1] = statements[1][: statements[1].index(fence)]
    first = dataclasses.replace(folded, folds=frozenset(), statements=tuple(statements))
    params = CASES[case](pk)["one" if name == "append_event" else "batch"]
    got, got_tables, got_ran = _attempt(conn, folded, params)
    want, want_tables, want_ran = _attempt(conn, first, params)
    assert got == want
    assert got_tables == want_tables
    if case == "ok":
        assert got[0]["status"] == "ok"
        assert got_ran == want_ran - 1  # the check did not run
    elif isinstance(want, list) and want and want[0].get("status") not in ("ok", None):
        assert got_ran == want_ran + 1  # the write that wrote nothing, then the check


@pytest.mark.parametrize("name", UNITS)
def test_the_cases_reach_every_refusal_and_an_error(
    database: tuple[sqlite3.Connection, int], name: str
) -> None:
    """The cases above meet each status the check knows, and a write's own error."""
    conn, pk = database
    query = load_queries("sqlite")[name]
    seen = set()
    for case in CASES.values():
        params = case(pk)["one" if name == "append_event" else "batch"]
        outcome, _, _ = _attempt(conn, query, params)
        seen.add(outcome[0]["status"] if isinstance(outcome, list) else outcome[0])
    assert {"ok", "stale", "missing", "duplicate", "fenced", "IntegrityError"} <= seen


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            "-- name: q\nSELECT 'ok' AS status;\n-- check travels here\n"
            "INSERT INTO t SELECT 1 WHERE 1;\nSELECT 1;\n",
            "right after it",
        ),
        (
            "-- name: q guarded\nSELECT 'ok' AS status;\nDELETE FROM t;\n"
            "-- check travels here\nINSERT INTO t SELECT 1 WHERE 1;\nSELECT 1;\n",
            "right after it",
        ),
        (
            "-- name: q guarded\nSELECT 'ok' AS status;\n-- check travels here\n"
            "INSERT INTO t SELECT 1 WHERE 1 RETURNING *;\nSELECT 1;\n",
            "a write returning no rows",
        ),
        (
            "-- name: q guarded\nSELECT 'ok' AS status;\n-- check travels here\n"
            "INSERT INTO t SELECT 1 WHERE 1;\nDELETE FROM t;\n",
            "no later statement returns rows",
        ),
        (
            "-- name: q guarded\nSELECT 'ok' AS status;\n-- check travels here\n"
            "-- skip when :x IS NULL\nINSERT INTO t SELECT 1 WHERE :x IS NOT NULL;\nSELECT 1;\n",
            "cannot be skipped",
        ),
    ],
)
def test_a_marker_that_cannot_hold_is_refused_at_load(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_queries(text, "sqlite")


def test_postgresql_refuses_the_marker() -> None:
    with pytest.raises(ValueError):
        parse_queries(
            "-- name: q\n-- check travels here\nINSERT INTO t SELECT 1 WHERE true;\n", "postgresql"
        )


# The units' results as they were written before they became a SELECT of their own:
# a RETURNING clause on the write just before that SELECT.
RETURNING_BEFORE = {
    "append_event": "RETURNING 'ok' AS status, NULL AS dup_seq, last_seq",
    "append_events": "RETURNING 'ok' AS status, last_seq",
    "append_events_finish": (
        "RETURNING 'ok' AS status, :last_seq AS last_seq, app_name, user_id, session_id,"
        " EXISTS (SELECT 1 FROM runs q WHERE q.app_name = runs.app_name"
        " AND q.user_id = runs.user_id AND q.session_id = runs.session_id"
        " AND q.status = 'QUEUED') AS queued_behind"
    ),
}


def _with_returning(unit: Query) -> Query:
    """The unit with its result SELECT folded back into the write before it (RETURNING)."""
    statements = list(unit.statements)
    result = next(
        i
        for i, s in enumerate(statements)
        if "\n".join(line for line in s.splitlines() if not line.lstrip().startswith("--"))
        .lstrip()
        .startswith("SELECT 'ok' AS status")
    )
    write = statements[result - 1].rstrip()
    assert write.startswith("UPDATE ") and "RETURNING" not in write
    statements[result - 1] = f"{write}\n{RETURNING_BEFORE[unit.name]}"
    del statements[result]
    skips = list(unit.skips)
    if skips:
        del skips[result]
    shift = {i if i < result else i - 1 for i in unit.checks}
    return dataclasses.replace(
        unit,
        statements=tuple(statements),
        skips=tuple(skips),
        checks=frozenset(shift),
        folds=frozenset(i if i < result else i - 1 for i in unit.folds),
    )


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", UNITS)
def test_the_result_select_gives_what_returning_gave(
    database: tuple[sqlite3.Connection, int], name: str, case: str
) -> None:
    """A unit's result is a SELECT after its writes (no temporary table for RETURNING):
    the same rows, errors and tables as the write's RETURNING clause, in every case."""
    conn, pk = database
    unit = load_queries("sqlite")[name]
    params = CASES[case](pk)["one" if name == "append_event" else "batch"]
    got, got_tables, _ = _attempt(conn, unit, params)
    want, want_tables, _ = _attempt(conn, _with_returning(unit), params)
    assert got == want
    assert got_tables == want_tables


def test_the_result_select_gives_what_returning_gave_with_a_run_queued(
    database: tuple[sqlite3.Connection, int],
) -> None:
    """The finish's result says a run of the session waits, as its RETURNING said."""
    conn, pk = database
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "INSERT INTO runs (run_id, app_name, user_id, session_id, invocation_id, request,"
            " status, owner, lease_until, created_at, updated_at)"
            " VALUES ('r2', ?, ?, ?, 'inv2', '{}', 'QUEUED', ?, 1.0, 1.0, 1.0)",
            (APP, USER, SESSION, OWNER),
        )
        conn.execute("SAVEPOINT queued")
        unit = load_queries("sqlite")["append_events_finish"]
        params = CASES["ok"](pk)["batch"]
        got = run_unit(conn, unit, arguments(unit, params))
        conn.execute("ROLLBACK TO queued")
        want = run_unit(conn, _with_returning(unit), arguments(unit, params))
    finally:
        conn.execute("ROLLBACK")
    assert got == want
    assert got[0]["queued_behind"] == 1


HOT_UNITS = ("run_start", "append_event", "append_events", "append_events_finish")


@pytest.mark.parametrize("name", HOT_UNITS)
def test_a_run_s_units_open_no_temporary_table(name: str) -> None:
    """The statements a one-tool run's units execute open no temporary table of their own.

    SQLite opens one (an in-memory database) for the rows of a RETURNING clause
    and for an INSERT ... SELECT that reads its own table, each time the
    statement runs. The CHECK constraints of the schema open one too; they are
    left out (``ignore_check_constraints``): a bare write of the same rows pays
    them. Left out as well: a guarded unit's check (it runs only when the write
    it travels in wrote nothing) and statements skipped when their parameter is
    NULL (an inbox, a snapshot, a shared state delta).
    """
    conn = sqlite3.connect(":memory:")
    conn.create_function("dadk_merge", 2, merge_json, deterministic=True)
    for _version, _name, sql in list_migrations("sqlite"):
        conn.executescript(sql)
    conn.execute("PRAGMA ignore_check_constraints = ON")
    unit = load_queries("sqlite")[name]
    for index, statement in enumerate(unit.statements):
        if index + 1 in unit.folds or (unit.skips and unit.skips[index]):
            continue
        ops = conn.execute("EXPLAIN " + statement, dict.fromkeys(unit.params)).fetchall()
        opened = [op for op in ops if op[1] == "OpenEphemeral"]
        assert not opened, f"{name}, statement {index + 1}: {statement}"


def test_the_batch_columns_read_by_path_are_those_of_each_element() -> None:
    """The events INSERTs read each column from :events by the element's path
    (``j.fullkey || '.seq'``): the same values and types as from the element itself
    (``j.value``), for text that needs escaping, numbers, NULLs and an empty batch."""
    columns = ("seq", "event_id", "invocation_id", "author", "timestamp", "delta", "data")
    tricky = {
        "seq": 7,
        "event_id": "e-\u00e9\u4e2d\U0001f600",
        "invocation_id": 'i "quoted" \\ back\nline',
        "author": "",
        "timestamp": 1796585124.4710631,
        "delta": json.dumps({"k": [1, 2.5, None, "x\u2028y"]}),
        "data": json.dumps({"text": 'a "b" \\ \t \u0000 c', "n": 1e-300}),
    }
    batches = [
        [tricky, {**tricky, "seq": 8, "delta": None, "timestamp": 3}],
        [],
        [{c: None if c == "delta" else tricky[c] for c in columns}],
    ]
    conn = sqlite3.connect(":memory:")
    by_path = ", ".join(f"json_extract(?1, j.fullkey || '.{c}')" for c in columns)
    by_value = ", ".join(f"json_extract(j.value, '$.{c}')" for c in columns)
    for batch in batches:
        text = json.dumps(batch)
        got = conn.execute(f"SELECT {by_path} FROM json_each(?1) AS j", (text,)).fetchall()
        want = conn.execute(f"SELECT {by_value} FROM json_each(?1) AS j", (text,)).fetchall()
        assert got == want
        assert [[type(v) for v in row] for row in got] == [[type(v) for v in r] for r in want]
        assert got == [tuple(e[c] for c in columns) for e in batch]
    for name in ("append_events", "append_events_finish"):
        insert = load_queries("sqlite")[name].statements[1]
        assert all(f"json_extract(:events, j.fullkey || '.{c}')" in insert for c in columns)
