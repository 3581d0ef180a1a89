"""The ``-- skip when :x IS NULL`` marker, and one statement per PostgreSQL query."""

from __future__ import annotations

import re
import sqlite3

import pytest

from durable_adk.store.queries import expand_fragments, load_queries, parse_queries
from durable_adk.store.sqlite import arguments, run_unit

UNIT = """
-- name: put guarded
SELECT CASE WHEN :key IS NULL THEN 'bad' ELSE 'ok' END AS status;
INSERT INTO kv (key, value) VALUES (:key, :value);
-- skip when :note IS NULL
INSERT INTO notes (key, note) SELECT :key, :note WHERE :note IS NOT NULL;
INSERT INTO tags (key, tag)
-- skip when :tags IS NULL
SELECT :key, value FROM json_each(:tags);
SELECT 'ok' AS status;
"""


def test_the_marker_is_read_per_statement() -> None:
    query = parse_queries(UNIT, "sqlite")["put"]
    assert query.skips == ((), (), ("note",), ("tags",), ())
    assert query.params == ("key", "value", "note", "tags")


def test_a_query_without_markers_has_no_skips() -> None:
    assert parse_queries("-- name: q\nSELECT 1;\nSELECT 2;\n", "sqlite")["q"].skips == ()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            "-- name: q\n-- skip when :x IS NULL\nDELETE FROM t WHERE :x IS NOT NULL;\n",
            "one-statement",
        ),
        (
            "-- name: q guarded\n-- skip when :x IS NULL\n"
            "SELECT 'ok' AS status WHERE :x IS NOT NULL;\nDELETE FROM t;\n",
            "check always runs",
        ),
        (
            "-- name: q\nDELETE FROM t;\n-- skip when :x IS NULL\n"
            "SELECT :x WHERE :x IS NOT NULL;\n",
            "returns rows",
        ),
        (
            "-- name: q\nDELETE FROM t;\n-- skip when :x IS NULL\n"
            "DELETE FROM t WHERE :x IS NOT NULL RETURNING *;\n",
            "returns rows",
        ),
        (
            "-- name: q\nDELETE FROM t;\n-- skip when :x IS NULL\nDELETE FROM t WHERE k = :x;\n",
            "does not gate itself",
        ),
        (
            "-- name: q\nDELETE FROM t;\n-- skip when :x IS NULL\n"
            "DELETE FROM t WHERE :xy IS NOT NULL AND k = :x;\n",
            "does not gate itself",
        ),
        (
            "-- name: q\nDELETE FROM t;\n-- skip when :x IS NULL\n"
            "DELETE FROM t WHERE :x IS NOT NULL;\nSELECT changes() AS n;\n",
            "changes",
        ),
    ],
)
def test_a_marker_that_does_not_hold_is_refused_at_load(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_queries(text, "sqlite")


def test_postgresql_refuses_the_marker() -> None:
    text = "-- name: q\n-- skip when :x IS NULL\nDELETE FROM t WHERE :x IS NOT NULL;\n"
    with pytest.raises(ValueError, match="one-statement"):
        parse_queries(text, "postgresql")


def _db() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.executescript(
        "CREATE TABLE kv (key TEXT, value TEXT); CREATE TABLE notes (key TEXT, note TEXT);"
        "CREATE TABLE tags (key TEXT, tag TEXT);"
    )
    return conn


def test_a_skipped_statement_is_not_run_and_the_others_are() -> None:
    query = parse_queries(UNIT, "sqlite")["put"]
    conn = _db()
    ran: list[str] = []
    conn.set_trace_callback(ran.append)
    rows = run_unit(
        conn, query, arguments(query, {"key": "a", "value": "1", "note": None, "tags": None})
    )
    assert rows == [{"status": "ok"}]
    assert len(ran) == 3  # the check, the kv insert, the result
    conn.set_trace_callback(None)
    assert conn.execute("SELECT count(*) FROM kv").fetchone() == (1,)
    ran.clear()
    conn.set_trace_callback(ran.append)
    run_unit(
        conn, query, arguments(query, {"key": "b", "value": "2", "note": "n", "tags": '["x","y"]'})
    )
    assert len(ran) == 5
    conn.set_trace_callback(None)
    assert conn.execute("SELECT key, note FROM notes").fetchall() == [("b", "n")]
    assert conn.execute("SELECT key, tag FROM tags ORDER BY tag").fetchall() == [
        ("b", "x"),
        ("b", "y"),
    ]


FRAGMENT = """
-- name: tail fragment
-- What a unit appends (its comment stays here).
-- skip when :note IS NULL
INSERT INTO notes (key, note) SELECT :key, :note WHERE :note IS NOT NULL;

-- name: put_with_tail
INSERT INTO kv (key, value) VALUES (:key, :value);
-- use: tail
"""


def test_a_fragment_keeps_its_skip_markers_where_it_is_used() -> None:
    (text,) = expand_fragments([FRAGMENT])
    assert "its comment stays here" not in text
    query = parse_queries(text, "sqlite")["put_with_tail"]
    assert query.skips == ((), ("note",))


@pytest.mark.parametrize("name", ["run_finish", "append_events_finish"])
def test_a_finish_without_an_inbox_runs_none_of_the_inbox_statements(name: str) -> None:
    """The inbox statements (a fragment) are skipped for a run with no pause: most runs."""
    query = load_queries("sqlite")[name]
    code = [re.sub(r"--[^\n]*", "", s) for s in query.statements]
    inbox = [i for i, c in enumerate(code) if ":inbox" in c]
    assert len(inbox) == 3
    assert all(query.skips[i] == ("inbox",) for i in inbox)


def test_a_missing_parameter_is_refused_before_any_sql() -> None:
    query = parse_queries(UNIT, "sqlite")["put"]
    from durable_adk import errors

    with pytest.raises(errors.InvalidArgument, match=r"needs \['tags'\]"):
        arguments(query, {"key": "a", "value": "1", "note": None})


def _code_outside_literals(sql: str) -> str:
    """The SQL with its comments, string literals and dollar-quoted bodies blanked out."""
    sql = re.sub(r"\$(\w*)\$.*?\$\1\$", "''", sql, flags=re.DOTALL)
    sql = re.sub(r"'(?:[^']|'')*'", "''", sql)
    return re.sub(r"--[^\n]*", "", sql)


def test_every_postgresql_query_is_one_statement() -> None:
    """One round trip per unit: a second statement would be a second round trip (or refused)."""
    queries = load_queries("postgresql")
    assert len(queries) > 100
    for name, query in queries.items():
        assert len(query.statements) == 1, name
        assert ";" not in _code_outside_literals(query.statements[0]), (
            f"{name}: a ';' inside the query: more than one statement"
        )


def test_the_literal_blanking_sees_a_hidden_second_statement() -> None:
    # The check above must be able to fail: a second statement on the same
    # line survives the loader's split (which cuts at ';' at a line's end).
    query = parse_queries("-- name: two\nSELECT ';' AS a; SELECT 2;\n", "postgresql")["two"]
    assert ";" in _code_outside_literals(query.statements[0])
    single = parse_queries("-- name: one\nSELECT ';' AS a -- ;\n;\n", "postgresql")["one"]
    assert ";" not in _code_outside_literals(single.statements[0])
