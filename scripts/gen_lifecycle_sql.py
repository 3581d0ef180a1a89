"""Writes the per-table statements of the lifecycle SQL from one table of steps.

Retention's purge and forgetting a user (``durable_adk.lifecycle``) delete a
session's rows table by table, each table by one statement of the same shape;
payload-only retention empties the payload columns of the ledger's tables by
a pick and an update of one shape; the dry run counts every table in one
statement. Those statements of
``src/durable_adk/sql/{sqlite,postgresql}/queries_lifecycle.sql`` are written
here from :data:`STEPS` and :data:`SCRUBS`, for both dialects, in place (the
rest of the files is written by hand and left as it is), so the files stay
plain SQL that EXPLAIN tests and readers see as it runs.

Run it after changing a step::

    python scripts/gen_lifecycle_sql.py          # rewrites the two files
    python scripts/gen_lifecycle_sql.py --check  # exit 1 if they differ

``tests/unit/test_lifecycle_sql.py`` fails when the files and the table
disagree.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = {
    dialect: ROOT / "src" / "durable_adk" / "sql" / dialect / "queries_lifecycle.sql"
    for dialect in ("sqlite", "postgresql")
}

# How a table's rows are reached from the sessions being purged (alias p),
# the row itself aliased x. "task": through the A2A tasks the sessions'
# invocations drove (alias k).
_BY_SESSION = (
    "{a}.app_name = p.app_name AND {a}.user_id = p.user_id AND {a}.session_id = p.session_id"
)
_VIA: dict[str, list[str]] = {
    "session_pk": ["{t} x ON x.session_pk = p.pk"],
    "session": ["{t} x ON " + _BY_SESSION.format(a="x")],
    "run_invocation": [
        "runs r ON " + _BY_SESSION.format(a="r"),
        "{t} x ON x.invocation_id = r.invocation_id",
    ],
    "run_id": ["runs r ON " + _BY_SESSION.format(a="r"), "{t} x ON x.run_id = r.run_id"],
    "saga": ["sagas g ON " + _BY_SESSION.format(a="g"), "{t} x ON x.saga_id = g.saga_id"],
    "task": ["{t} x ON x.task_id = k.task_id"],
}


@dataclass(frozen=True)
class Step:
    """One table a purge deletes from, a batch at a time.

    Attributes:
        table: The table.
        key: Its primary key (the columns a batch names its rows by).
        via: How its rows are reached from the sessions being purged (:data:`_VIA`).
        sizes: The columns whose sizes are reported, each with whether it may be NULL.
        doc: The statement's comment (its lines).
        unless: Conditions (on alias x) that keep a row for a later batch,
            one ``NOT EXISTS`` a line: rows of other tables found through it.
        preview: Whether the dry run counts it (retention keeps the audit).
    """

    table: str
    key: tuple[str, ...]
    via: str
    sizes: tuple[tuple[str, bool], ...]
    doc: tuple[str, ...]
    unless: tuple[str, ...] = ()
    preview: bool = True


@dataclass(frozen=True)
class Scrub:
    """A table payload-only retention empties instead of deleting.

    Attributes:
        table: The table (a :class:`Step` of the same name gives its path and sizes).
        key: The column the picked rows are named by.
        numeric: Whether that column is a number (PostgreSQL casts the JSON text).
        holds: The condition a row still carrying a payload meets, ``{x}`` for the alias.
        empties: The SET clause that drops the payload.
        sizes: The sizes reported, when not the step's (the key stays: not counted).
    """

    table: str
    key: str
    numeric: bool
    holds: str
    empties: str
    sizes: tuple[tuple[str, bool], ...] = ()


def _n(*columns: str) -> tuple[tuple[str, bool], ...]:
    """Sizes of columns that may be NULL."""
    return tuple((c, True) for c in columns)


STEPS: tuple[Step, ...] = (
    Step(
        "events",
        ("session_pk", "seq"),
        "session_pk",
        (("data", False), ("delta", True)),
        ("A batch of the events of the sessions being purged (their primary key: session, seq).",),
    ),
    Step(
        "state_snapshots",
        ("session_pk", "seq"),
        "session_pk",
        (("state", False),),
        ("A batch of their state snapshots.",),
    ),
    Step(
        "event_repairs",
        ("pk",),
        "session",
        (("original", False), ("replacement", False)),
        ("A batch of their event repairs' records (they hold the events as stored).",),
    ),
    Step(
        "artifacts",
        ("app_name", "user_id", "session_id", "filename", "version"),
        "session",
        (("part", False), ("custom_metadata", False)),
        ("A batch of their artifacts (every version; '' sessions are a user's own artifacts).",),
    ),
    Step(
        "journal",
        ("key",),
        "run_invocation",
        (("key", False), ("result", True)),
        ("A batch of the journal entries of their runs' invocations.",),
    ),
    Step(
        "dead_letters",
        ("pk",),
        "run_id",
        (("request", True), ("last_events", True), ("error", False)),
        ("A batch of their runs' dead letters.",),
    ),
    Step(
        "schedule_ticks",
        ("pk",),
        "run_id",
        _n("detail"),
        ("A batch of the schedule firings that started their runs.",),
    ),
    Step(
        "operator_actions",
        ("pk",),
        "run_id",
        _n("reason", "detail"),
        (
            "A batch of the operators' audit lines about their runs (forgetting a user only: "
            "retention keeps the audit).",
        ),
        preview=False,
    ),
    Step(
        "job_calls",
        ("job_id", "app_name", "user_id", "session_id", "function_call_id"),
        "run_invocation",
        (("function_call_id", False),),
        ("A batch of the calls their runs' invocations attached to jobs.",),
    ),
    Step(
        "jobs",
        ("job_id",),
        "session",
        _n("request", "result", "progress", "progress_sent"),
        ("A batch of the jobs of their sessions (a job's other calls go with it).",),
    ),
    Step(
        "saga_steps",
        ("pk",),
        "saga",
        _n("record", "last_error"),
        ("A batch of the steps of their sagas.",),
    ),
    Step("sagas", ("saga_id",), "session", _n("reason"), ("A batch of their sagas.",)),
    Step(
        "interrupts",
        ("pk",),
        "session",
        _n("args", "answer"),
        ("A batch of their interrupts, answered or not.",),
    ),
    Step(
        "answer_claims",
        ("app_name", "user_id", "session_id", "invocation_id", "call_id", "ask"),
        "session",
        (("call_id", False),),
        ("A batch of the claims of their interrupts' answers.",),
    ),
    Step(
        "runs",
        ("pk",),
        "session",
        (("request", False), ("last_error", True)),
        (
            "A batch of their runs whose journal entries, dead letters, schedule firings and job",
            "calls are gone (the batches above find those through the runs: never orphaned).",
        ),
        unless=(
            "SELECT 1 FROM journal j WHERE j.invocation_id = x.invocation_id",
            "SELECT 1 FROM dead_letters l WHERE l.run_id = x.run_id",
            "SELECT 1 FROM schedule_ticks k WHERE k.run_id = x.run_id",
            "SELECT 1 FROM job_calls c WHERE c.invocation_id = x.invocation_id",
        ),
    ),
    Step(
        "a2a_task_events",
        ("task_id", "version"),
        "task",
        (("body", False),),
        (
            "A batch of the events of their A2A tasks (a task is theirs through the "
            "invocations it drove).",
        ),
    ),
    Step(
        "a2a_push_outbox",
        ("pk",),
        "task",
        (("config", False), ("body", False), ("last_error", True)),
        (
            "A batch of their A2A tasks' push outbox rows (sent or dead: a pending push keeps "
            "the session).",
        ),
    ),
    Step(
        "a2a_push_configs",
        ("task_id", "owner", "config_id"),
        "task",
        (("body", False),),
        ("A batch of their A2A tasks' push configs (each holds the client's URL and token).",),
    ),
    Step(
        "a2a_messages",
        ("app_name", "owner", "context_id", "message_id"),
        "task",
        (("message_id", False),),
        ("A batch of the message ids their A2A tasks took.",),
    ),
    Step(
        "a2a_tasks",
        ("task_id",),
        "task",
        (("body", False),),
        (
            "A batch of their A2A tasks whose events, pushes, push configs and message ids "
            "are gone.",
        ),
        unless=(
            "SELECT 1 FROM a2a_task_events e WHERE e.task_id = x.task_id",
            "SELECT 1 FROM a2a_push_outbox o WHERE o.task_id = x.task_id",
            "SELECT 1 FROM a2a_push_configs c WHERE c.task_id = x.task_id",
            "SELECT 1 FROM a2a_messages m WHERE m.task_id = x.task_id",
        ),
    ),
    Step(
        "a2a_task_runs",
        ("task_id", "invocation_id"),
        "session",
        (("invocation_id", False),),
        (
            "Last of the A2A rows: a batch of the links of their sessions' invocations to "
            "tasks that are gone.",
        ),
        unless=("SELECT 1 FROM a2a_tasks t WHERE t.task_id = x.task_id",),
    ),
)
"""Every table a purge deletes from, in the order it drains them (the sessions last,
by hand-written ``purge_sessions``)."""

SCRUBS: tuple[Scrub, ...] = (
    Scrub("journal", "key", False, "{x}result IS NOT NULL", "result = NULL", _n("result")),
    Scrub(
        "dead_letters",
        "pk",
        True,
        "({x}request IS NOT NULL OR {x}last_events IS NOT NULL OR {x}error <> '')",
        "request = NULL, last_events = NULL, error = ''",
    ),
    Scrub(
        "jobs",
        "job_id",
        False,
        "({x}request IS NOT NULL OR {x}result IS NOT NULL OR {x}progress IS NOT NULL\n"
        "        OR {x}progress_sent IS NOT NULL)",
        "request = NULL, result = NULL, progress = NULL, progress_sent = NULL",
    ),
    Scrub(
        "saga_steps",
        "pk",
        True,
        "({x}record IS NOT NULL OR {x}last_error IS NOT NULL)",
        "record = NULL, last_error = NULL",
    ),
    Scrub(
        "interrupts",
        "pk",
        True,
        "({x}args IS NOT NULL OR {x}answer IS NOT NULL)",
        "args = NULL, answer = NULL",
    ),
    Scrub(
        "runs",
        "pk",
        True,
        "({x}request <> '' OR {x}last_error IS NOT NULL)",
        "request = '', last_error = NULL",
    ),
)
"""The ledger's tables payload-only retention empties, in the order it does."""

_ONCE = "-- Each row once however many purge at a time: a row another purge holds is skipped."

_SQLITE_PURGING = (
    "(SELECT pk, app_name, user_id, session_id FROM sessions\n"
    "             WHERE app_name = :app_name AND purging_at IS NOT NULL\n"
    "               AND (:user_id IS NULL OR user_id = :user_id)) p"
)

_SQLITE_TASKS = (
    f"(SELECT DISTINCT l.task_id FROM {_SQLITE_PURGING}\n"
    "      CROSS JOIN a2a_task_runs l ON " + _BY_SESSION.format(a="l") + ") k"
)
"""SQLite: the A2A tasks the sessions being purged drove (alias k), a step's source."""

_PG_TASKS = (
    "tasks AS (\n"
    "    SELECT DISTINCT l.task_id FROM purging p\n"
    "      JOIN a2a_task_runs l ON " + _BY_SESSION.format(a="l") + "\n"
    ")"
)
"""PostgreSQL: the same as a CTE after ``purging_sessions``, read as ``tasks k``."""

_PREVIEW_HEAD = {
    "sqlite": """-- name: purge_preview
-- What a purge would delete now, per table, with its size: the sessions it
-- would mark and those already marked, and their rows (a dry run: reads only).
WITH cand AS (
    SELECT s.pk, s.app_name, s.user_id, s.session_id, s.initial_state FROM sessions s
     WHERE
-- use: purge_unneeded
    UNION ALL
    SELECT s.pk, s.app_name, s.user_id, s.session_id, s.initial_state FROM sessions s
     WHERE s.app_name = :app_name AND s.purging_at IS NOT NULL
), k AS (
    SELECT DISTINCT l.task_id FROM cand p
      CROSS JOIN a2a_task_runs l ON {by_session}
)
SELECT 'sessions' AS table_name, COUNT(*) AS row_count,
       COALESCE(SUM(length(CAST(p.initial_state AS BLOB))), 0) AS bytes FROM cand p""",
    "postgresql": """-- name: purge_preview
-- What a purge would delete now, per table, with its size: the sessions it
-- would mark and those already marked, and their rows (a dry run: reads only).
WITH cand AS (
    SELECT s.pk, s.app_name, s.user_id, s.session_id, s.initial_state FROM sessions s
     WHERE
-- use: purge_unneeded
    UNION ALL
    SELECT s.pk, s.app_name, s.user_id, s.session_id, s.initial_state FROM sessions s
     WHERE s.app_name = :app_name::text AND s.purging_at IS NOT NULL
), k AS (
    SELECT DISTINCT l.task_id FROM cand p
      JOIN a2a_task_runs l ON {by_session}
)
SELECT 'sessions' AS table_name, COUNT(*) AS row_count,
       COALESCE(SUM(octet_length(p.initial_state)), 0) AS bytes FROM cand p""",
}
"""The dry run's statement up to the tables of the steps (``{by_session}``: the join
of a table to the candidate sessions)."""


def _size(dialect: str, column: str, nullable: bool, alias: str) -> str:
    if dialect == "sqlite":
        one = f"length(CAST({alias}{column} AS BLOB))"
    else:
        one = f"octet_length({alias}{column})"
    return f"COALESCE({one}, 0)" if nullable else one


def _sizes(dialect: str, step: Step | Scrub, alias: str) -> str:
    return " + ".join(_size(dialect, c, n, alias) for c, n in step.sizes)


def _joins(dialect: str, step: Step, indent: str) -> str:
    join = "CROSS JOIN" if dialect == "sqlite" else "JOIN"
    return "\n".join(f"{indent}{join} {j.format(t=step.table)}" for j in _VIA[step.via])


def _unless(step: Step) -> str:
    lines = [
        f"     {'WHERE' if i == 0 else '  AND'} NOT EXISTS ({cond})"
        for i, cond in enumerate(step.unless)
    ]
    return "".join(f"\n{line}" for line in lines)


def _head(name: str, doc: tuple[str, ...]) -> str:
    return f"-- name: {name}\n" + "".join(f"-- {line}\n" for line in doc)


def _pairs(key: tuple[str, ...], left: str, right: str) -> str:
    return " AND ".join(f"{left}.{c} = {right}.{c}" for c in key)


def _purge(dialect: str, step: Step) -> str:
    head = _head(f"purge_{step.table}", step.doc) + _ONCE + "\n"
    picked = ", ".join(f"x.{c}" for c in step.key)
    if dialect == "sqlite":
        key = step.key[0] if len(step.key) == 1 else f"({', '.join(step.key)})"
        source = _SQLITE_TASKS if step.via == "task" else _SQLITE_PURGING
        return (
            f"{head}DELETE FROM {step.table} WHERE {key} IN (\n"
            f"    SELECT {picked} FROM {source}\n"
            f"{_joins(dialect, step, '      ')}{_unless(step)}\n"
            "     LIMIT :batch)\n"
            f"RETURNING {_sizes(dialect, step, '')} AS bytes;"
        )
    if step.via == "task":
        first = f"{_PG_TASKS}, doomed AS (\n    SELECT {picked} FROM tasks k\n"
    else:
        first = f"doomed AS (\n    SELECT {picked} FROM purging p\n"
    columns = ", ".join(f"t.{c}" for c in step.key)
    return (
        f"{head}WITH\n-- use: purging_sessions\n{first}"
        f"{_joins(dialect, step, '      ')}{_unless(step)}\n"
        "     LIMIT :batch::int\n"
        ")\n"
        ", locked AS (\n"
        f"    SELECT {columns} FROM {step.table} t JOIN doomed d ON {_pairs(step.key, 't', 'd')}\n"
        "       FOR UPDATE OF t SKIP LOCKED\n"
        ")\n"
        f"DELETE FROM {step.table} t USING locked d WHERE {_pairs(step.key, 't', 'd')}\n"
        f"RETURNING {_sizes(dialect, step, 't.')} AS bytes;"
    )


def _scrub_pick(dialect: str, scrub: Scrub, step: Step) -> str:
    head = _head(
        f"scrub_pick_{scrub.table}",
        (
            f"Payload-only retention: a batch of {scrub.table} rows of the sessions being "
            "purged that still",
            "carry a payload, with its size (the skeleton stays).",
        ),
    )
    sized = scrub if scrub.sizes else step
    columns = f"x.{scrub.key} AS key, {_sizes(dialect, sized, 'x.')} AS bytes"
    holds = scrub.holds.format(x="x.")
    if dialect == "sqlite":
        return (
            f"{head}SELECT {columns} FROM {_SQLITE_PURGING}\n"
            f"{_joins(dialect, step, '      ')}\n"
            f" WHERE {holds}\n"
            " LIMIT :batch;"
        )
    return (
        f"{head}WITH\n-- use: purging_sessions\npicked AS (\n"
        f"    SELECT {columns} FROM purging p\n"
        f"{_joins(dialect, step, '      ')}\n"
        f"     WHERE {holds}\n"
        "     LIMIT :batch::int\n"
        ")\n"
        "SELECT key, bytes FROM picked;"
    )


def _scrub(dialect: str, scrub: Scrub) -> str:
    head = _head(
        f"scrub_{scrub.table}",
        (
            f"Drops the payload of the {scrub.table} rows picked (:keys, a JSON array) that "
            "still carry",
            "one: a row two purges picked is counted by the one whose update changed it.",
        ),
    )
    if dialect == "sqlite":
        keys = "SELECT value FROM json_each(:keys)"
    else:
        cast = "::bigint" if scrub.numeric else ""
        keys = f"SELECT value{cast} FROM json_array_elements_text(:keys::json)"
    return (
        f"{head}UPDATE {scrub.table} SET {scrub.empties}\n"
        f" WHERE {scrub.key} IN ({keys})\n"
        f"   AND {scrub.holds.format(x='')}\n"
        f"RETURNING {scrub.key} AS key;"
    )


def _preview(dialect: str) -> str:
    parts = [_PREVIEW_HEAD[dialect].format(by_session=_BY_SESSION.format(a="l"))]
    for step in STEPS:
        if not step.preview:
            continue
        source = "k" if step.via == "task" else "cand p"
        parts.append(
            "UNION ALL\n"
            f"SELECT '{step.table}', COUNT(*), COALESCE(SUM({_sizes(dialect, step, 'x.')}), 0)"
            f" FROM {source}\n{_joins(dialect, step, '  ')}"
        )
    return "\n".join(parts) + ";"


_HOLDING_DOC = (
    "Which tables hold rows of the sessions being purged, one flag a table (a read:",
    "no write lock). A drain deletes only from those: on SQLite each DELETE is a",
    "write of its own, lock and all, and most tables hold nothing for most sessions.",
    "A row added after this read waits for the next pass (the sessions go last,",
    "only once nothing is left of them).",
)


def _holding(dialect: str) -> str:
    """One row: for each step's table, whether the sessions being purged have rows there."""
    head = _head("purge_holding", _HOLDING_DOC)
    flags = []
    for step in STEPS:
        if dialect == "sqlite":
            source = _SQLITE_TASKS if step.via == "task" else _SQLITE_PURGING
        else:
            source = "tasks k" if step.via == "task" else "purging p"
        joins = _joins(dialect, step, "              ")
        flags.append(f"       EXISTS (SELECT 1 FROM {source}\n{joins}) AS {step.table}")
    body = ",\n".join(flags)
    if dialect == "sqlite":
        return f"{head}SELECT\n{body};"
    return f"{head}WITH\n-- use: purging_sessions\n{_PG_TASKS}\nSELECT\n{body};"


def statements(dialect: str) -> dict[str, str]:
    """Every generated statement of ``dialect`` by name, as the file holds it."""
    found = {f"purge_{s.table}": _purge(dialect, s) for s in STEPS}
    found["purge_holding"] = _holding(dialect)
    by_table = {s.table: s for s in STEPS}
    for scrub in SCRUBS:
        found[f"scrub_pick_{scrub.table}"] = _scrub_pick(dialect, scrub, by_table[scrub.table])
        found[f"scrub_{scrub.table}"] = _scrub(dialect, scrub)
    found["purge_preview"] = _preview(dialect)
    return found


_NAME = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)", re.MULTILINE)


def rewrite(text: str, generated: dict[str, str]) -> str:
    """``text`` with each generated statement's block replaced (every name must be there)."""
    starts = [m.start() for m in _NAME.finditer(text)]
    if not starts:
        raise ValueError("no '-- name:' lines")
    chunks = [text[: starts[0]]] + [
        text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)
    ]
    seen: set[str] = set()
    out = [chunks[0]]
    for chunk in chunks[1:]:
        match = _NAME.match(chunk)
        assert match is not None
        name = match.group(1)
        if name in generated:
            body = chunk.rstrip("\n")
            chunk = generated[name] + chunk[len(body) :]
            seen.add(name)
        out.append(chunk)
    missing = sorted(set(generated) - seen)
    if missing:
        raise ValueError(f"the file has no statement {missing}: add a '-- name:' block for each")
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if stale")
    args = parser.parse_args(argv)
    stale = []
    for dialect, path in FILES.items():
        text = path.read_text()
        new = rewrite(text, statements(dialect))
        if new != text:
            stale.append(path)
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print("stale: " + ", ".join(str(p) for p in stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
