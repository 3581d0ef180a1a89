"""The ``-- skip when :x IS NULL`` marker, and one statement per PostgreSQL query."""

from __future__ import annotations

import re
import sqlite3
from typing import Any

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


PG_UNIT = """
-- name: put
WITH kv AS (
    INSERT INTO kv (key, value) VALUES (:key::text, :value::text) RETURNING key
-- skip when :note IS NULL
), note AS (
    INSERT INTO notes (key, note) SELECT key, :note::text FROM kv WHERE :note::text IS NOT NULL
-- skip when :tags IS NULL
), tag AS (
    INSERT INTO tags (key, tag)
    SELECT kv.key, t FROM kv, json_array_elements_text(:tags::json) AS t
)
SELECT 'ok' AS status, (SELECT key FROM kv) AS key;
"""


def test_postgresql_sends_the_statement_without_the_members_its_nulls_leave_out() -> None:
    query = parse_queries(PG_UNIT, "postgresql")["put"]
    assert {nulls for nulls, _s, _o in query.variants} == {
        frozenset(),
        frozenset({"note"}),
        frozenset({"tags"}),
        frozenset({"note", "tags"}),
    }
    full, args = query.bind({"key": "a", "value": "1", "note": "n", "tags": "[]"})
    assert full == query.statements[0] and args == ["a", "1", "n", "[]"]
    assert "notes" in full and "tags" in full and "skip when" not in full
    bare, args = query.bind({"key": "a", "value": "1", "note": None, "tags": None})
    assert "INSERT INTO notes" not in bare and "INSERT INTO tags" not in bare
    assert args == ["a", "1"] and "$3" not in bare  # numbered again: no parameter it never reads
    no_tags, args = query.bind({"key": "a", "value": "1", "note": "n", "tags": None})
    assert "INSERT INTO notes" in no_tags and "INSERT INTO tags" not in no_tags
    assert args == ["a", "1", "n"]


def test_postgresql_refuses_a_marker_that_is_not_before_a_member_of_its_with() -> None:
    text = "-- name: q\n-- skip when :x IS NULL\nDELETE FROM t WHERE :x IS NOT NULL;\n"
    with pytest.raises(ValueError, match="member of its WITH"):
        parse_queries(text, "postgresql")


def test_postgresql_refuses_a_member_that_does_not_gate_itself_on_the_parameter() -> None:
    text = PG_UNIT.replace("FROM kv WHERE :note::text IS NOT NULL", "FROM kv")
    with pytest.raises(ValueError, match="does not gate itself"):
        parse_queries(text, "postgresql")


def test_postgresql_refuses_leaving_out_a_member_the_statement_reads() -> None:
    text = (
        PG_UNIT.replace(
            "(SELECT key FROM kv) AS key", "(SELECT key FROM kv) AS key, (SELECT 1 FROM note) AS n"
        )
        .replace("FROM kv WHERE :note", "FROM kv WHERE :note")
        .replace("WHERE :note::text IS NOT NULL", "WHERE :note::text IS NOT NULL RETURNING 1")
    )
    with pytest.raises(ValueError, match="reads it elsewhere"):
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


async def test_on_postgresql_each_variant_writes_what_the_whole_statement_writes(
    pg_clones: Any,
) -> None:
    import asyncpg

    query = parse_queries(PG_UNIT, "postgresql")["put"]
    name = pg_clones.take()
    conn = await asyncpg.connect(pg_clones.cluster.url(name))
    try:
        await conn.execute(
            "CREATE TABLE kv (key text, value text); CREATE TABLE notes (key text, note text);"
            "CREATE TABLE tags (key text, tag text)"
        )
        full = query.statements[0]
        for note in ("n", None):
            for tags in ('["a", "b"]', None):
                given = {"key": "k", "value": "v", "note": note, "tags": tags}
                seen = []
                for statement, args in (
                    query.bind(given),
                    (full, [given[p] for p in query.params]),
                ):
                    async with conn.transaction():
                        rows = [dict(r) for r in await conn.fetch(statement, *args)]
                        tables = [
                            sorted(tuple(r) for r in await conn.fetch(f"SELECT * FROM {t}"))
                            for t in ("kv", "notes", "tags")
                        ]
                        await conn.execute("DELETE FROM kv; DELETE FROM notes; DELETE FROM tags")
                    seen.append((rows, tables))
                assert seen[0] == seen[1], given
                assert (seen[0][1][1] != []) == (note is not None)
                assert (seen[0][1][2] != []) == (tags is not None)
    finally:
        await conn.close()
        pg_clones.give_back(name)
