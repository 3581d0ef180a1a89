"""The flags of named queries (``-- name: x guarded inline``) and their use in the packaged SQL."""

from __future__ import annotations

import re
import sqlite3

import pytest

from durable_adk.store.queries import (
    expand_fragments,
    load_queries,
    parse_queries,
    resolve_includes,
)
from durable_adk.store.sqlite import run_unit

DIALECTS = ["sqlite", "postgresql"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_unknown_flag_is_rejected_by_name(dialect: str) -> None:
    text = "-- name: fine inline\nSELECT 1;\n\n-- name: odd inline frobnicate\nSELECT 2;\n"
    with pytest.raises(ValueError, match=r"'odd'.*frobnicate"):
        parse_queries(text, dialect)


def test_a_misspelt_flag_is_not_taken_for_another() -> None:
    with pytest.raises(ValueError, match="inlined"):
        parse_queries("-- name: q inlined\nSELECT 1;\n", "sqlite")


def test_flags_are_parsed_in_any_order() -> None:
    text = """
-- name: plain
SELECT 1 AS one;

-- name: fast inline
INSERT INTO t (x) VALUES (:x);

-- name: checked guarded
SELECT 'ok' AS status;
DELETE FROM t WHERE x = :x;

-- name: both guarded inline
SELECT 'ok' AS status;
INSERT INTO t (x) VALUES (:x);

-- name: reversed inline guarded
SELECT 'ok' AS status;
INSERT INTO t (x) VALUES (:x);
"""
    queries = parse_queries(text, "sqlite")
    flags = {name: (q.guarded, q.inline) for name, q in queries.items()}
    assert flags == {
        "plain": (False, False),
        "fast": (False, True),
        "checked": (True, False),
        "both": (True, True),
        "reversed": (True, True),
    }
    assert queries["both"].statements == ("SELECT 'ok' AS status", "INSERT INTO t (x) VALUES (:x)")
    assert queries["fast"].writes and not queries["plain"].writes


def test_postgresql_keeps_the_inline_flag_and_rewrites_parameters() -> None:
    queries = parse_queries(
        "-- name: fast inline\nINSERT INTO t (x, y) VALUES (:x, :y);\n", "postgresql"
    )
    fast = queries["fast"]
    assert fast.inline and not fast.guarded
    assert fast.statements == ("INSERT INTO t (x, y) VALUES ($1, $2)",)
    assert fast.params == ("x", "y")


def test_inline_queries_are_the_same_in_both_dialects() -> None:
    by_dialect = {dialect: load_queries(dialect) for dialect in DIALECTS}
    inline = {
        dialect: {name for name, q in queries.items() if q.inline}
        for dialect, queries in by_dialect.items()
    }
    assert {"append_event", "run_submit", "run_start", "run_finish", "journal_begin"} <= inline[
        "sqlite"
    ]
    for dialect, other in [("sqlite", "postgresql"), ("postgresql", "sqlite")]:
        for name in inline[dialect]:
            assert name in by_dialect[other], f"{dialect} {name!r} is missing from {other}"
            assert by_dialect[other][name].inline, f"{name!r} is inline in {dialect} only"


def test_every_sqlite_inline_query_is_a_write() -> None:
    # Reads stay on the database thread (docs/store.md): one may be large.
    reads = [name for name, q in load_queries("sqlite").items() if q.inline and not q.writes]
    assert reads == []


MADE_OF = """
-- name: check_then_write guarded inline
SELECT CASE WHEN :x > 0 THEN 'ok' ELSE 'negative' END AS status;
INSERT INTO t (x) VALUES (:x);

-- name: note
-- skip when :note IS NULL
INSERT INTO notes (n) SELECT :note WHERE :note IS NOT NULL;
SELECT :y AS y;

-- name: both inline
-- include: check_then_write
-- include: note
"""


def test_a_unit_made_of_others_keeps_each_parts_checks_and_skips() -> None:
    both = resolve_includes(parse_queries(MADE_OF, "sqlite"))["both"]
    assert len(both.statements) == 4
    assert both.checks == frozenset({0}) and both.guarded
    assert both.skips == ((), (), ("note",), ())
    assert both.params == ("x", "note", "y")
    assert both.writes and both.inline and both.parts == ("check_then_write", "note")


def test_a_unit_made_of_others_runs_in_one_transaction_and_stops_at_a_refusing_check() -> None:
    both = resolve_includes(parse_queries(MADE_OF, "sqlite"))["both"]
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("CREATE TABLE notes (n)")
    assert run_unit(conn, both, {"x": -1, "note": "n", "y": 7}) == [{"status": "negative"}]
    assert run_unit(conn, both, {"x": 2, "note": None, "y": 7}) == [{"y": 7}]
    assert conn.execute("SELECT x FROM t").fetchall() == [(2,)]
    assert conn.execute("SELECT count(*) FROM notes").fetchone() == (0,)


@pytest.mark.parametrize(
    ("text", "dialect", "error"),
    [
        ("-- name: a\n-- include: b\n", "postgresql", "one statement"),
        ("-- name: a\n-- include: b\nSELECT 1;\n", "sqlite", "only include lines"),
        ("-- name: a guarded\n-- include: b\n", "sqlite", "only flag may be inline"),
    ],
)
def test_a_unit_made_of_others_is_refused_when_malformed(
    text: str, dialect: str, error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        parse_queries(text, dialect)


def test_an_include_of_a_missing_unit_is_refused_by_name() -> None:
    queries = parse_queries("-- name: a\n-- include: nowhere\n", "sqlite")
    with pytest.raises(ValueError, match="'a' includes 'nowhere'"):
        resolve_includes(queries)


def test_the_call_with_its_intent_is_one_statement_on_postgresql_and_two_parts_on_sqlite() -> None:
    sqlite = load_queries("sqlite")
    unit = sqlite["append_events_journal_begin"]
    assert unit.parts == ("append_events", "journal_begin")
    assert (
        unit.statements == sqlite["append_events"].statements + sqlite["journal_begin"].statements
    )
    assert len(load_queries("postgresql")["append_events_journal_begin"].statements) == 1


FRAGMENTS = [
    """
-- name: shared fragment
-- documented here, not copied into each unit
x AS (SELECT :a::int AS a),

-- name: first
WITH
-- use: shared
y AS (SELECT a + 1 AS b FROM x)
SELECT b FROM y;
""",
    """
-- name: second
WITH
-- use: shared
z AS (SELECT a * 2 AS c FROM x)
SELECT c FROM z;
""",
]


def test_a_fragment_is_put_where_units_of_any_file_use_it() -> None:
    texts = expand_fragments(FRAGMENTS)
    queries = {n: q for text in texts for n, q in parse_queries(text, "postgresql").items()}
    assert set(queries) == {"first", "second"}  # the fragment is not a query
    for name in ("first", "second"):
        statement = " ".join(queries[name].statements[0].split())
        assert statement.startswith("WITH x AS (SELECT $1::int AS a),")
        assert "documented here" not in statement
        assert queries[name].params == ("a",)


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        (["-- name: f fragment\nx AS (SELECT 1),\n-- name: f fragment\nx,\n"], "defined twice"),
        (["-- name: f fragment inline\nx AS (SELECT 1),\n"], "no other flag"),
        (["-- name: q\nWITH\n-- use: missing\nSELECT 1;\n"], "no fragment named 'missing'"),
        (["-- name: f fragment\nx AS (SELECT 1),\n-- name: q\nSELECT 1;\n"], "never used"),
    ],
)
def test_a_bad_fragment_is_refused_when_loaded(texts: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        expand_fragments(texts)


def test_every_unit_writing_a_batch_of_events_shares_one_text_on_postgresql() -> None:
    queries = load_queries("postgresql")

    def named(name: str) -> str:
        """The unit's statement, its $n placeholders named again, whitespace collapsed."""
        query = queries[name]
        text = re.sub(
            r"\$(\d+)", lambda m: ":" + query.params[int(m.group(1)) - 1], query.statements[0]
        )
        return " ".join(text.split())

    shared = named("append_events").split(" SELECT v.status,")[0]
    shared = shared[shared.index("WITH s AS (") :]
    for name in ("append_events_journal_begin", "append_events_job_start"):
        assert shared in named(name), name
