"""Named SQL queries, loaded from ``sql/<dialect>/queries.sql``.

Each query sits in the file under a ``-- name: <name>`` line; the same names
exist in every dialect, so code asks for a query by name and never builds SQL
text. Parameters are written ``:name`` in both dialects. For PostgreSQL they are
rewritten once, at load time, into ``$1, $2, ...`` with a fixed order, so a call
passes a dict and gets the positional tuple it needs.

A query may hold several statements (SQLite cannot modify two tables in one
statement). ``-- name: x guarded`` marks a unit whose first statement is a check
returning a ``status`` column: the remaining statements run, in the same
transaction, only when that status is ``'ok'``. The result is the check's row
when it refused, else the rows of the last statement that returns rows.

A SQLite unit may be made of other units, run one after the other in one
transaction: its body is only ``-- include: <name>`` lines. Each part keeps
its own check (the unit stops at the first check that refuses, and returns
that check's rows) and its ``-- skip when`` markers. The parts may come from
any queries file of the dialect. PostgreSQL, whose units are one statement
each, writes such a unit by hand under the same name.

Text several hand-written units share (PostgreSQL's append of a batch of
events, in each unit that writes events with something else) is written once,
as ``-- name: x fragment``: not a query, only text, put where a unit's line
``-- use: x`` stands when the files are loaded. A fragment may be used from
any file of the dialect; one that is missing, defined twice or never used is
refused.

``-- name: x inline`` marks a small unit on the hot path of a run (an append, a
ledger write) that SQLite may run on the caller's thread instead of handing it
to the database thread (see :mod:`durable_adk.store.sqlite`); PostgreSQL
ignores it.

``-- name: x lease`` marks a unit that keeps or takes a lease (a heartbeat's
renewal, a claim): PostgreSQL runs it on a small pool of its own, so it never
waits behind event-stream readers for a connection (see
:mod:`durable_adk.store.postgres`); SQLite ignores it. ``claim`` adds that
it takes a lease rather than renewing one: claims may hold all but one of
that pool's connections, so a heartbeat never waits behind them.

``-- name: x intake`` marks a unit that takes new work in (a run submitted):
PostgreSQL gives it a connection only when no other unit waits for one, so a
burst of submissions waits in the process instead of starving the runs in
progress (:mod:`durable_adk.store.lanes`); SQLite ignores it.

A statement of a multi-statement unit may carry the line
``-- skip when :x IS NULL``: the store does not run it when the parameter
``x`` is NULL (SQLite: one statement less in the unit, which is most calls of
an append with no ``app:`` delta). The marker states what the SQL already
does, so skipping changes nothing but the cost: the statement must gate
itself on the parameter (``WHERE :x IS NOT NULL``, or rows from
``json_each(:x)``, which has none for NULL), must not return rows, must not
be a guarded unit's check, and must not come before a statement that reads
``changes()`` or ``last_insert_rowid()``. A marker that breaks one of these rules, or
sits in a one-statement SQLite unit, is refused when the file is loaded.

A PostgreSQL unit is one statement, so a marker there stands before a member of
its ``WITH`` instead (``-- skip when :x IS NULL`` on the line before
``name AS (`` or ``), name AS (``): the store sends the statement without that
member when ``x`` is NULL (each combination of such NULLs is a statement of its
own, prepared once per connection). Its rules are the same: the member gates
itself on the parameter (``:x IS NOT NULL``, or rows from
``json_array_elements(:x)``, ``jsonb_array_elements_text(:x ...)``,
``json_to_recordset(:x)`` and their kin, which have none for NULL), and no other part of the
statement names it (a data-modifying member runs whether it is read or not,
so a member nothing reads can go). A member executes and costs its share of the
plan even when its rows are none: in a finish with no inbox and no state
delta, the members left out were a sixth of the statement's time.

The statement right after a check may carry the line ``-- check travels
here``: its own WHERE holds the check's conditions for 'ok' (the same
conditions, NULLs included), so SQLite runs it without the check first and
runs the check only when it wrote nothing or failed on a constraint (the
check's refusal is then the unit's result, as if the check had run first; a
check that passes re-raises the constraint's error, as the write would have
raised it). One statement fewer per unit on the path where the check passes.
Its conditions and the check's must say the same: what the statement's WHERE
cannot say (a duplicate key) must be a constraint of the table that makes it
fail. The statement must write, must not return rows, must not be skipped,
and a later statement must return rows (the unit's result when the check
passed without running).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from durable_adk.store.lanes import CLAIM, INTAKE, URGENT

_NAME_LINE = re.compile(r"^--\s*name:\s*(?P<name>[a-z_][a-z0-9_]*)(?P<flags>(\s+[a-z]+)*)\s*$")
_SKIP_LINE = re.compile(
    r"^--\s*skip when\s+:(?P<name>[a-z_][a-z0-9_]*)\s+IS\s+NULL\s*$", re.IGNORECASE
)
# A parameter is ':name' not preceded by another ':' (so PostgreSQL casts such
# as '::jsonb' stay as they are).
_PARAM = re.compile(r"(?<![:\w]):(?P<name>[a-z_][a-z0-9_]*)")
_INCLUDE_LINE = re.compile(r"^--\s*include:\s*(?P<name>[a-z_][a-z0-9_]*)\s*$")
_USE_LINE = re.compile(r"^--\s*use:\s*(?P<name>[a-z_][a-z0-9_]*)\s*$")
_FOLD_LINE = re.compile(r"^--\s*check travels here\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Query:
    """One named unit of SQL.

    Attributes:
        name: The name the code asks for.
        statements: The SQL statements, in order (usually one).
        params: Parameter names in positional order (PostgreSQL) or as written.
        guarded: Whether the first statement is a check that gates the rest.
        writes: Whether the unit modifies the database.
        inline: Whether the unit is small enough to run on the caller's thread.
        lease: Whether the unit keeps or takes a lease (PostgreSQL's lease pool).
        lane: Its class in PostgreSQL's pool lanes (:mod:`durable_adk.store.lanes`):
            ``intake`` (takes new work in: served after every other unit),
            ``claim`` (a lease unit that takes a lease: capped below the
            pool's size), or ``urgent`` (the rest).
        skips: For each statement, the parameters whose NULL value skips it
            (``-- skip when :x IS NULL``); empty when it always runs.
        checks: The statements that are checks gating the rest of the unit
            (the first of a guarded unit; the first of each guarded part of
            a unit made of others).
        folds: The statements that carry the check before them in their own
            WHERE (``-- check travels here``): SQLite runs that check only
            when such a statement writes nothing or fails on a constraint.
    """

    name: str
    statements: tuple[str, ...]
    params: tuple[str, ...]
    guarded: bool
    writes: bool
    inline: bool = False
    lease: bool = False
    lane: str = URGENT
    skips: tuple[tuple[str, ...], ...] = ()
    checks: frozenset[int] = frozenset()
    folds: frozenset[int] = frozenset()
    parts: tuple[str, ...] = ()
    """The units this one is made of (``-- include:``), resolved by :func:`load_queries`."""
    variants: tuple[tuple[frozenset[str], str, tuple[str, ...]], ...] = ()
    """PostgreSQL: for each set of the parameters whose NULL leaves a member of the
    statement out (``-- skip when``), the statement without those members and its
    parameters in positional order; empty when no member can be left out."""
    needs: frozenset[str] = field(init=False, repr=False, compare=False)  # params, as a set
    plan: tuple[tuple[str, tuple[str, ...], int, str], ...] = field(
        init=False, repr=False, compare=False
    )
    """Each statement as SQLite runs it: (it, the names whose NULL skip it, role, check)."""

    _by_nulls: dict[frozenset[str], tuple[str, tuple[str, ...]]] = field(
        init=False, repr=False, compare=False
    )
    _skippable: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "needs", frozenset(self.params))
        by_nulls = {nulls: (statement, order) for nulls, statement, order in self.variants}
        object.__setattr__(self, "_by_nulls", by_nulls)
        object.__setattr__(self, "_skippable", frozenset().union(*by_nulls))
        plan = []
        for i, statement in enumerate(self.statements):
            role = TRAVELS if i + 1 in self.folds else FOLDED if i in self.folds else RUN
            role = CHECK if role == RUN and i in self.checks else role
            carried = self.statements[i - 1] if role == FOLDED else ""
            plan.append((statement, self.skips[i] if self.skips else (), role, carried))
        object.__setattr__(self, "plan", tuple(plan))

    def bind(self, given: Mapping[str, Any]) -> tuple[str, list[Any]]:
        """PostgreSQL: the statement to send for ``given`` (the one without the members
        its NULL parameters leave out) and its positional arguments."""
        if self._by_nulls:
            nulls = frozenset(n for n in self._skippable if given[n] is None)
            statement, order = self._by_nulls[nulls]
        else:
            statement, order = self.statements[0], self.params
        return statement, list(map(given.__getitem__, order))


RUN, CHECK, TRAVELS, FOLDED = range(4)  # a statement's role in :attr:`Query.plan`


def _split_statements(body: str) -> list[str]:
    # Statements end with ';' at the end of a line; our SQL has no ';' inside
    # string literals, which keeps this split exact.
    parts = re.split(r";\s*$", body, flags=re.MULTILINE)
    return [p.strip() for p in parts if p.strip() and not _only_comments(p)]


def split_script(sql: str) -> list[str]:
    """Splits a trusted, packaged SQL file (schema or migration) into statements."""
    return _split_statements(sql)


def _only_comments(text: str) -> bool:
    return all(not line.strip() or line.strip().startswith("--") for line in text.splitlines())


def _code(statement: str) -> str:
    """A statement without its comment lines."""
    return "\n".join(line for line in statement.splitlines() if not line.strip().startswith("--"))


def _writes(statements: list[str]) -> bool:
    for statement in statements:
        if re.search(r"\b(INSERT|UPDATE|DELETE|CREATE|DROP|ALTER)\b", _code(statement).upper()):
            return True
    return False


def _skips(name: str, statements: list[str], guarded: bool) -> tuple[tuple[str, ...], ...]:
    """Reads each statement's ``-- skip when :x IS NULL`` lines, refusing a marker that lies."""
    found: list[tuple[str, ...]] = []
    for index, statement in enumerate(statements):
        params = tuple(
            m.group("name")
            for m in (_SKIP_LINE.match(line.strip()) for line in statement.splitlines())
            if m
        )
        found.append(params)
        if not params:
            continue
        code = _code(statement)
        where = f"query {name!r}, statement {index + 1}"
        if len(statements) == 1:
            raise ValueError(f"{where}: a one-statement unit cannot skip its statement")
        if guarded and index == 0:
            raise ValueError(f"{where}: a guarded unit's check always runs")
        if re.match(r"\s*(SELECT|VALUES|WITH)\b", code, re.IGNORECASE) or re.search(
            r"\bRETURNING\b", code, re.IGNORECASE
        ):
            raise ValueError(f"{where}: a statement that returns rows cannot be skipped")
        later = " ".join(_code(s) for s in statements[index + 1 :])
        if re.search(r"\b(changes|last_insert_rowid)\s*\(", later, re.IGNORECASE):
            raise ValueError(
                f"{where}: a later statement reads changes() or last_insert_rowid(), "
                "which would read another statement's count when this one is skipped"
            )
        for param in params:
            if not _gates_itself(code, param, "sqlite"):
                raise ValueError(
                    f"{where}: skipped when :{param} is NULL, but it does not gate itself on "
                    f"it (':{param} IS NOT NULL' or 'json_each(:{param})')"
                )
    return tuple(found) if any(found) else ()


_GATES = {
    "sqlite": (r"(?<![:\w]):{p}\s+IS\s+NOT\s+NULL\b|\bjson_each\(\s*:{p}\s*\)"),
    "postgresql": (
        r"(?<![:\w]):{p}\b(::\w+)?\)?(::\w+)?\s+IS\s+NOT\s+NULL\b"
        r"|\b(jsonb?_array_elements(_text)?|jsonb?_to_recordset)\(\s*\(*\s*:{p}\b"
    ),
}
"""What a statement (SQLite) or a member (PostgreSQL) left out when ``:p`` is NULL must
hold: a condition on it, or rows only from it (a function that has none for NULL)."""


def _gates_itself(code: str, param: str, dialect: str) -> bool:
    return re.search(_GATES[dialect].format(p=param), code, re.IGNORECASE) is not None


def _returns_rows(statement: str) -> bool:
    code = _code(statement)
    return bool(
        re.match(r"\s*(SELECT|VALUES|WITH)\b", code, re.IGNORECASE)
        or re.search(r"\bRETURNING\b", code, re.IGNORECASE)
    )


def _folds(
    name: str, statements: list[str], guarded: bool, skips: tuple[tuple[str, ...], ...]
) -> frozenset[int]:
    """Reads each statement's ``-- check travels here`` line, refusing one that cannot hold."""
    found = set()
    for index, statement in enumerate(statements):
        if not any(_FOLD_LINE.match(line.strip()) for line in statement.splitlines()):
            continue
        where = f"query {name!r}, statement {index + 1}"
        if not guarded or index != 1:
            raise ValueError(f"{where}: a check travels only in the statement right after it")
        if skips and skips[index]:
            raise ValueError(f"{where}: a statement the check travels in cannot be skipped")
        if _returns_rows(statement) or not _writes([statement]):
            raise ValueError(f"{where}: the check travels only in a write returning no rows")
        if not any(_returns_rows(s) for s in statements[index + 1 :]):
            raise ValueError(
                f"{where}: no later statement returns rows (the result when the check passed)"
            )
        found.add(index)
    return frozenset(found)


_MEMBER = re.compile(r"(?P<name>[a-z_][a-z0-9_]*)\s+AS\s+\(", re.IGNORECASE)


def _member_end(text: str, opening: int) -> int:
    """The offset just after the parenthesis that closes the one at ``opening``."""
    depth = 0
    i = opening
    while i < len(text):
        ch = text[i]
        if ch == "'":  # a string literal: its parentheses do not count
            i = text.index("'", i + 1)
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("unbalanced parentheses")


def _pg_members(name: str, statement: str) -> list[tuple[tuple[str, ...], int, int]]:
    """A PostgreSQL statement's members that ``-- skip when :x IS NULL`` marks: for
    each, its parameters and the span to cut (with the comma that joins it),
    refusing a marker that lies."""
    found: list[tuple[tuple[str, ...], int, int]] = []
    params: list[str] = []
    offset = 0
    for line in statement.splitlines(keepends=True):
        start, offset = offset, offset + len(line)
        stripped = line.strip()
        marker = _SKIP_LINE.match(stripped)
        if marker:
            params.append(marker.group("name"))
            continue
        if not params or not stripped or stripped.startswith("--"):
            continue
        member = _MEMBER.search(statement, start, offset)
        where = f"query {name!r}"
        if member is None:
            raise ValueError(f"{where}: '-- skip when' must stand before a member of its WITH")
        end = _member_end(statement, member.end() - 1)
        before = statement[: member.start()].rstrip()
        if before.endswith(","):
            cut = (len(before) - 1, end)
        else:  # the first member: the comma after it goes with it
            after = re.match(r"\s*,", statement[end:])
            if after is None:
                raise ValueError(f"{where}: the statement's only member cannot be left out")
            cut = (member.start(), end + after.end())
        body = _code(statement[member.start() : end])
        for param in params:
            if not _gates_itself(body, param, "postgresql"):
                raise ValueError(
                    f"{where}: member {member.group('name')!r} is left out when :{param} is "
                    f"NULL, but it does not gate itself on it"
                )
        rest = _code(statement[: cut[0]] + statement[cut[1] :])
        if re.search(rf"\b{member.group('name')}\b", rest):
            raise ValueError(
                f"{where}: member {member.group('name')!r} may be left out, but the statement "
                "reads it elsewhere"
            )
        found.append((tuple(params), *cut))
        params = []
    if params:
        raise ValueError(f"query {name!r}: '-- skip when' with no member after it")
    return found


def _pg_variants(
    name: str, statement: str
) -> tuple[tuple[frozenset[str], str, tuple[str, ...]], ...]:
    """Every combination of NULLs the statement's marked members answer to: the
    statement without the members they leave out, in ``$n`` form, with its order."""
    members = _pg_members(name, statement)
    if not members:
        return ()
    names = sorted({p for params, _a, _b in members for p in params})
    out = []
    for mask in range(2 ** len(names)):
        nulls = frozenset(n for i, n in enumerate(names) if mask >> i & 1)
        text = statement
        for params, start, end in reversed(members):
            if nulls & set(params):
                text = text[:start] + text[end:]
        order: list[str] = []
        # Without its comment lines: a parameter they name (a marker's, say) would
        # count among the statement's own as ``$n``, and be one it never reads.
        out.append((nulls, _to_positional(_code(text), order), tuple(order)))
    return tuple(out)


def _to_positional(statement: str, order: list[str]) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in order:
            order.append(name)
        return f"${order.index(name) + 1}"

    return _PARAM.sub(replace, statement)


def parse_queries(text: str, dialect: str) -> dict[str, Query]:
    """Parses a queries file into named queries.

    Args:
        text: The file's content.
        dialect: ``"sqlite"`` or ``"postgresql"``; PostgreSQL gets ``$n``
            placeholders.

    Returns:
        The queries by name.

    Raises:
        ValueError: A name is defined twice, or a query is empty.
    """
    queries: dict[str, Query] = {}
    current: str | None = None
    flags: set[str] = set()
    lines: list[str] = []

    def flush() -> None:
        if current is None:
            return
        included = [m.group("name") for m in map(_INCLUDE_LINE.match, map(str.strip, lines)) if m]
        if included:
            _made_of(current, flags, lines, included)
            return
        statements = _split_statements("\n".join(lines))
        if not statements:
            raise ValueError(f"query {current!r} is empty")
        if current in queries:
            raise ValueError(f"query {current!r} is defined twice")
        if dialect == "postgresql" and (len(statements) > 1 or "guarded" in flags):
            raise ValueError(f"PostgreSQL query {current!r} must be one statement, unguarded")
        skips = () if dialect == "postgresql" else _skips(current, statements, "guarded" in flags)
        folds = _folds(current, statements, "guarded" in flags, skips)
        if folds and dialect == "postgresql":
            raise ValueError(f"PostgreSQL query {current!r}: a check cannot travel")
        order: list[str] = []
        variants: tuple[tuple[frozenset[str], str, tuple[str, ...]], ...] = ()
        if dialect == "postgresql":
            variants = _pg_variants(current, statements[0])
            if variants:  # the first leaves nothing out: it is the whole statement
                _nulls, whole, whole_order = variants[0]
                statements, order = [whole], list(whole_order)
            else:
                statements = [_to_positional(statements[0], order)]
        else:
            for s in statements:
                for m in _PARAM.finditer(s):
                    if m.group("name") not in order:
                        order.append(m.group("name"))
        queries[current] = Query(
            name=current,
            statements=tuple(statements),
            params=tuple(order),
            guarded="guarded" in flags,
            writes=_writes(statements),
            inline="inline" in flags,
            lease="lease" in flags,
            lane=INTAKE if "intake" in flags else CLAIM if "claim" in flags else URGENT,
            skips=skips,
            checks=frozenset({0}) if "guarded" in flags else frozenset(),
            folds=folds,
            variants=variants,
        )
        unknown = flags - {"guarded", "inline", "lease", "claim", "intake"}
        if unknown:
            raise ValueError(f"query {current!r} has unknown flags {sorted(unknown)}")
        if ("claim" in flags and "lease" not in flags) or {"intake", "lease"} <= flags:
            raise ValueError(f"query {current!r}: claim needs lease; intake excludes lease")

    def _made_of(name: str, flags: set[str], body: list[str], parts: list[str]) -> None:
        if dialect == "postgresql":
            raise ValueError(f"PostgreSQL query {name!r} must be one statement, not made of others")
        if _split_statements(
            "\n".join(line for line in body if not _INCLUDE_LINE.match(line.strip()))
        ):
            raise ValueError(f"query {name!r} is made of others: it holds only include lines")
        if flags - {"inline"}:
            raise ValueError(f"query {name!r} is made of others: its only flag may be inline")
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name] = Query(
            name=name,
            statements=(),
            params=(),
            guarded=False,
            writes=False,
            inline="inline" in flags,
            parts=tuple(parts),
        )

    for line in text.splitlines():
        match = _NAME_LINE.match(line.strip())
        if match:
            flush()
            current = match.group("name")
            flags = set(match.group("flags").split())
            lines = []
        elif current is not None:
            lines.append(line)
    flush()
    return queries


def _sql_root(dialect: str, package: str = "durable_adk") -> Traversable:
    if dialect not in ("sqlite", "postgresql"):
        raise ValueError(f"unknown SQL dialect {dialect!r}")
    return resources.files(package).joinpath("sql").joinpath(dialect)


def load_queries(dialect: str, package: str = "durable_adk") -> dict[str, Query]:
    """Loads the packaged queries of a dialect: ``queries.sql`` and every ``queries_*.sql``.

    Each feature keeps its queries in a file of its own; a name defined in two
    files is an error. ``package`` names whose ``sql/<dialect>/`` folder is
    read: the library's by default; a package that ships SQL of its own (the
    chaos soak) loads it the same way and adds it with
    :meth:`~durable_adk.store.base.Store.add_queries`.
    """
    root = _sql_root(dialect, package)
    files = sorted(
        (
            entry
            for entry in root.iterdir()
            if re.fullmatch(r"queries(_[a-z0-9_]+)?\.sql", entry.name)
        ),
        key=lambda entry: entry.name,
    )
    merged: dict[str, Query] = {}
    texts = expand_fragments([entry.read_text() for entry in files])
    for text in texts:
        for name, query in parse_queries(text, dialect).items():
            if name in merged:
                raise ValueError(f"query {name!r} is defined in two files of {dialect}")
            merged[name] = query
    return resolve_includes(merged)


def expand_fragments(texts: list[str]) -> list[str]:
    """Takes the fragments (``-- name: x fragment``) out of the files' texts and puts
    each where a ``-- use: x`` line names it.

    Raises:
        ValueError: A fragment is defined twice, carries other flags, is used
            but not defined, or is defined but never used.
    """
    fragments: dict[str, list[str]] = {}
    kept: list[list[str]] = []
    for text in texts:
        lines: list[str] = []
        into: list[str] | None = None  # the fragment being read, if any
        for line in text.splitlines():
            match = _NAME_LINE.match(line.strip())
            if match:
                flags = set(match.group("flags").split())
                into = None
                if "fragment" in flags:
                    name = match.group("name")
                    if flags != {"fragment"}:
                        raise ValueError(f"fragment {name!r} takes no other flag")
                    if name in fragments:
                        raise ValueError(f"fragment {name!r} is defined twice")
                    into = fragments[name] = []
                    continue
            (lines if into is None else into).append(line)
        kept.append(lines)
    used: set[str] = set()

    def expand(lines: list[str]) -> str:
        out: list[str] = []
        for line in lines:
            match = _USE_LINE.match(line.strip())
            if match is None:
                out.append(line)
                continue
            name = match.group("name")
            if name not in fragments:
                raise ValueError(f"no fragment named {name!r}")
            used.add(name)
            # Its comments document it where it is defined, not in each unit; its
            # ``-- skip when`` markers are not comments but part of its statements.
            out.extend(
                f
                for f in fragments[name]
                if not f.strip().startswith("--") or _SKIP_LINE.match(f.strip())
            )
        return "\n".join(out)

    expanded = [expand(lines) for lines in kept]
    if unused := sorted(set(fragments) - used):
        raise ValueError(f"fragments never used: {unused}")
    return expanded


def resolve_includes(queries: dict[str, Query]) -> dict[str, Query]:
    """Resolves the units made of others (``-- include:``) among ``queries``.

    Raises:
        ValueError: A unit includes one that is missing or itself made of others.
    """
    return {name: _compose(q, queries) if q.parts else q for name, q in queries.items()}


def _compose(unit: Query, queries: dict[str, Query]) -> Query:
    """A unit made of others: their statements in order, each part's checks and skips kept."""
    statements: list[str] = []
    params: list[str] = []
    skips: list[tuple[str, ...]] = []
    checks: set[int] = set()
    folds: set[int] = set()
    for name in unit.parts:
        part = queries.get(name)
        if part is None or part.parts:
            raise ValueError(f"query {unit.name!r} includes {name!r}, which is not a plain unit")
        checks.update(index + len(statements) for index in part.checks)
        folds.update(index + len(statements) for index in part.folds)
        skips.extend(part.skips or [()] * len(part.statements))
        statements.extend(part.statements)
        params.extend(p for p in part.params if p not in params)
    return Query(
        name=unit.name,
        statements=tuple(statements),
        params=tuple(params),
        guarded=0 in checks,
        writes=any(queries[name].writes for name in unit.parts),
        inline=unit.inline,
        skips=tuple(skips) if any(skips) else (),
        checks=frozenset(checks),
        folds=frozenset(folds),
        parts=unit.parts,
    )


def load_sql_file(dialect: str, *parts: str, package: str = "durable_adk") -> str:
    """Reads a packaged SQL file such as ``schema.sql`` (of ``package``'s ``sql/<dialect>/``)."""
    node = _sql_root(dialect, package)
    for part in parts:
        node = node.joinpath(part)
    return node.read_text()


def list_migrations(dialect: str) -> list[tuple[int, str, str]]:
    """Lists the packaged migrations of a dialect as (version, name, sql), in order."""
    folder = _sql_root(dialect).joinpath("migrations")
    found: list[tuple[int, str, str]] = []
    for entry in folder.iterdir():
        match = re.fullmatch(r"(\d{4})_([a-z0-9_]+)\.sql", entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text()))
    found.sort()
    versions = [v for v, _, _ in found]
    if versions != list(range(1, len(found) + 1)):
        raise ValueError(f"migrations of {dialect} are not numbered 1..n: {versions}")
    return found
