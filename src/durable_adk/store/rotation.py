"""Key rotation, key status and crypto-shredding over the encrypted columns.

:func:`rotate` moves every value of :data:`~durable_adk.store.sealing.codec.COLUMNS`
that is in clear or sealed under an older keyring key to the keyring's first
key, in bounded batches that walk each table in its key order (no batch
re-reads what an earlier one passed), while runs keep writing: each value is
replaced by one conditional statement that names the ciphertext it read
(``... WHERE <row> AND <column> = :old``), so a row a run rewrote meanwhile
keeps the run's value (which is already sealed under the first key). Killed
half-way, it is simply run again: what is done is skipped. The shared
``app:``/``user:`` state (:data:`~durable_adk.store.sealing.codec.STATE_COLUMNS`) is
sealed value by value: its rows are swapped whole, each by the same
conditional statement, and a row a run merged into meanwhile is read again
and redone (its other values may still be on an older key). Users' data keys
wrapped under an older key are re-wrapped the same way; the values sealed
under them do not change.

:func:`key_status` counts the values on each key; :func:`shred_user`
destroys a user's data key.

The per-column SQL is made here from the column list for both dialects and
added to the store once (:meth:`~durable_adk.store.base.Store.add_queries`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from durable_adk import errors
from durable_adk.faults import crash_point
from durable_adk.store.base import Store
from durable_adk.store.queries import parse_queries
from durable_adk.store.sealing.codec import (
    COLUMNS,
    MARK,
    STATE_COLUMNS,
    USER_KEY_PREFIX,
    Codec,
    Column,
    open_value,
    state_envelope,
    user_key_id,
)

__all__ = ["CLEAR", "RotationReport", "key_status", "rotate", "shred_user"]

CLEAR = "clear"
"""The key id :func:`key_status` gives values stored in clear."""

_ADDED = "_rotation_queries"


def _qname(kind: str, col: Column) -> str:
    return f"keys_{kind}__{col.table}__{col.column}"


def _key_expr(col: str, dialect: str) -> str:
    n = len(MARK)
    if dialect == "postgresql":
        found = f"split_part({col}, ':', 4)"
    else:
        found = f"substr({col}, {n + 1}, instr(substr({col}, {n + 1}), ':') - 1)"
    return f"CASE WHEN substr({col}, 1, {n}) = '{MARK}' THEN {found} ELSE '{CLEAR}' END"


def _queries_text(dialect: str) -> str:
    parts: list[str] = []
    user_mark = MARK + USER_KEY_PREFIX
    for col in COLUMNS:
        value = f"t.{col.column}"
        order = ", ".join(f"t.{c}" for c in col.order)
        after = ", ".join(f":a{i}" for i in range(len(col.order)))
        keyset = f"({order}) > ({after})" if len(col.order) > 1 else f"{order} > {after}"
        user = f", {col.user[0]} AS u_app, {col.user[1]} AS u_user" if col.user else ""
        picked = ", ".join(dict.fromkeys((*col.order, *col.identity)))
        parts.append(
            f"""-- name: {_qname("count", col)}
SELECT {_key_expr(value, dialect)} AS key_id, COUNT(*) AS n
  FROM {col.table} t WHERE {value} IS NOT NULL GROUP BY 1;

-- name: {_qname("batch", col)}
SELECT {", ".join(f"t.{c}" for c in picked.split(", "))}{user}, {value} AS value
  FROM {col.source}
 WHERE (:first = 1 OR {keyset})
   AND {value} IS NOT NULL
   AND substr({value}, 1, :keep_len) <> :keep
   AND substr({value}, 1, {len(user_mark)}) <> '{user_mark}'
 ORDER BY {order}
 LIMIT :limit;

-- name: {_qname("swap", col)}
UPDATE {col.table} SET {col.column} = :new
 WHERE {" AND ".join(f"{c} = :i{i}" for i, c in enumerate(col.identity))}
   AND {col.column} = :old
RETURNING 1 AS ok;
"""
        )
    for col in STATE_COLUMNS:
        parts.append(_state_queries_text(col, dialect))
    return "\n".join(parts)


_SWAP_TRIES = 5
"""How often a shared-state row a run keeps merging into is read again before
the rotation leaves it for its next run (counted in ``raced``)."""


def _state_queries_text(col: Column, dialect: str) -> str:
    """The queries of a keyed column (one JSON object of sealed values a row)."""
    user_mark = MARK + USER_KEY_PREFIX
    names = [c for c in col.identity if c != "key"]
    order = ", ".join(f"t.{c}" for c in col.order)
    after = ", ".join(f":a{i}" for i in range(len(col.order)))
    keyset = f"({order}) > ({after})" if len(col.order) > 1 else f"{order} > {after}"
    user = f", {col.user[0]} AS u_app, {col.user[1]} AS u_user" if col.user else ""
    where = " AND ".join(f"{c} = :i{i}" for i, c in enumerate(names))
    if dialect == "postgresql":
        each = f"jsonb_each(t.{col.column}) j"
        text = "(j.value #>> '{}')"
        is_text = "jsonb_typeof(j.value) = 'string'"
        value = f"t.{col.column}::text"
        new, old = ":new::jsonb", ":old::jsonb"
    else:
        each = f"json_each(t.{col.column}) j"
        text = "j.value"
        is_text = "j.type = 'text'"
        value = f"t.{col.column}"
        new, old = ":new", ":old"
    return f"""-- name: {_qname("count", col)}
SELECT CASE WHEN {is_text} THEN {_key_expr(text, dialect)} ELSE '{CLEAR}' END AS key_id,
       COUNT(*) AS n
  FROM {col.table} t, {each} GROUP BY 1;

-- name: {_qname("batch", col)}
SELECT {", ".join(f"t.{c}" for c in names)}{user}, {value} AS value
  FROM {col.source}
 WHERE (:first = 1 OR {keyset})
   AND EXISTS (SELECT 1 FROM {each}
                WHERE NOT ({is_text})
                   OR (substr({text}, 1, :keep_len) <> :keep
                       AND substr({text}, 1, {len(user_mark)}) <> '{user_mark}'))
 ORDER BY {order}
 LIMIT :limit;

-- name: {_qname("row", col)}
SELECT {", ".join(f"t.{c}" for c in names)}{user}, {value} AS value
  FROM {col.source}
 WHERE {" AND ".join(f"t.{c} = :i{i}" for i, c in enumerate(names))};

-- name: {_qname("swap", col)}
UPDATE {col.table} SET {col.column} = {new}
 WHERE {where} AND {col.column} = {old}
RETURNING 1 AS ok;
"""


def _ensure_queries(store: Store) -> None:
    if store.__dict__.get(_ADDED):
        return
    store.add_queries(parse_queries(_queries_text(store.dialect), store.dialect))
    store.__dict__[_ADDED] = True


async def key_status(store: Store) -> dict[str, dict[str, int]]:
    """Values on each key: ``{key id: {"table.column": rows}}`` (``clear`` for clear values).

    The shared state (``app_state.state``, ``user_state.state``) counts each
    value of its objects: its values are sealed one by one.

    Users' data keys are counted as the column values sealed under them
    (ids ``u-...``); ``user_keys`` (under ``"user_keys"``) counts the users'
    data keys by the keyring key that wraps them.
    """
    _ensure_queries(store)
    found: dict[str, dict[str, int]] = {}
    for col in (*COLUMNS, *STATE_COLUMNS):
        for row in await store.fetch(_qname("count", col)):
            key_id = str(row["key_id"])
            if key_id.startswith(USER_KEY_PREFIX):
                key_id = "user keys"
            by_col = found.setdefault(key_id, {})
            by_col[col.name] = by_col.get(col.name, 0) + int(row["n"])
    for row in await store.fetch("user_keys_by_wrap"):
        found.setdefault(str(row["wrap_key"]), {})["user_keys"] = int(row["n"])
    return found


@dataclass
class RotationReport:
    """What one :func:`rotate` did.

    Attributes:
        primary: The key everything was moved to.
        moved: Values re-sealed, per column.
        raced: Values a writer changed between the read and the swap (left
            as the writer wrote them), per column.
        unreadable: Values that did not open (their key is not held), per
            column: left as they are; ``keys status`` still shows them.
        rewrapped: Users' data keys re-wrapped.
    """

    primary: str
    moved: dict[str, int] = field(default_factory=dict)
    raced: dict[str, int] = field(default_factory=dict)
    unreadable: dict[str, int] = field(default_factory=dict)
    rewrapped: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.moved.values())


async def rotate(
    store: Store,
    *,
    batch: int = 200,
    columns: tuple[str, ...] | None = None,
    before_swap: Callable[[str, dict[str, Any]], Awaitable[None]] | None = None,
) -> RotationReport:
    """Re-seals every clear or older-key value under the keyring's first key.

    Args:
        store: A store opened with the keyring (new key first).
        batch: Rows read per statement (1-10000).
        columns: Only these ``table.column`` names (default: all).
        before_swap: Awaited before each value is swapped, with the column
            and the row as read (tests write the row there, as a run would).

    Raises:
        InvalidArgument: The store has no keyring, or ``batch`` is out of range.
    """
    codec = store.codec
    if codec is None:
        raise errors.InvalidArgument(
            "keys rotate needs the keys: give a key file (--key-file or DURABLE_ADK_KEY_FILE)"
        )
    if not 1 <= batch <= 10000:
        raise errors.InvalidArgument("batch takes 1 to 10000 rows")
    if columns is not None:
        unknown = set(columns) - {c.name for c in (*COLUMNS, *STATE_COLUMNS)}
        if unknown:
            raise errors.InvalidArgument(f"not encrypted columns: {sorted(unknown)}")
    _ensure_queries(store)
    report = RotationReport(primary=codec.keyring.primary)
    report.rewrapped = await _rewrap_users(store, codec, batch)
    keep = f"{MARK}{codec.keyring.primary}:"
    for col in COLUMNS:
        if columns is not None and col.name not in columns:
            continue
        await _rotate_column(store, codec, col, keep, batch, report, before_swap)
    for col in STATE_COLUMNS:
        if columns is not None and col.name not in columns:
            continue
        await _rotate_state(store, codec, col, keep, batch, report, before_swap)
    return report


def _page(first: int, keep: str, batch: int, after: list[Any]) -> dict[str, Any]:
    """The parameters of one batch: rows not on ``keep`` after the key ``after``."""
    return {
        "first": first,
        "keep": keep,
        "keep_len": len(keep),
        "limit": batch,
        **{f"a{i}": v for i, v in enumerate(after)},
    }


async def _rotate_column(
    store: Store,
    codec: Codec,
    col: Column,
    keep: str,
    batch: int,
    report: RotationReport,
    before_swap: Callable[[str, dict[str, Any]], Awaitable[None]] | None,
) -> None:
    after: list[Any] = [None] * len(col.order)
    first = 1
    while True:
        params = _page(first, keep, batch, after)
        # As stored: the swap names the ciphertext it read (fetch would open it).
        rows = await store._fetch(_qname("batch", col), params)
        moved = 0
        for row in rows:
            identity = [row[c] for c in col.identity]
            old = row["value"]
            try:
                clear = await open_value(store, col.table, col.column, identity, old)
            except errors.KeyUnavailable as exc:
                report.unreadable[col.name] = report.unreadable.get(col.name, 0) + 1
                if len(report.errors) < 5:
                    report.errors.append(str(exc))
                continue
            key_id = None
            if codec.per_user and col.user and row["u_user"] is not None:
                key_id = await user_key_id(store, codec, str(row["u_app"]), str(row["u_user"]))
            new = codec.seal(clear, col, identity, key_id=key_id)
            swap = {"new": new, "old": old, **{f"i{i}": v for i, v in enumerate(identity)}}
            if before_swap is not None:
                await before_swap(col.name, dict(row))
            if await store.fetch(_qname("swap", col), swap):
                moved += 1
                crash_point("keys.rotate.swapped")
            else:
                report.raced[col.name] = report.raced.get(col.name, 0) + 1
        if moved:
            report.moved[col.name] = report.moved.get(col.name, 0) + moved
        if len(rows) < batch:
            return
        first = 0
        after = [rows[-1][c] for c in col.order]


async def _rewrap_users(store: Store, codec: Codec, batch: int) -> int:
    done = 0
    primary = codec.keyring.primary
    while True:
        rows = await store.fetch("user_keys_stale", {"primary": primary, "limit": batch})
        progressed = 0
        for row in rows:
            ref, app, user = str(row["key_ref"]), str(row["app_name"]), str(row["user_id"])
            secret = codec.unwrap(ref, app, user, str(row["wrap_key"]), str(row["wrapped"]))
            wrap_key, wrapped = codec.wrap(ref, app, user, secret)
            changed = await store.fetch(
                "user_key_rewrap",
                {
                    "app_name": app,
                    "user_id": user,
                    "wrap_key": wrap_key,
                    "wrapped": wrapped,
                    "old": row["wrapped"],
                },
            )
            progressed += 1
            done += 1 if changed else 0
        if len(rows) < batch or not progressed:
            return done


async def shred_user(store: Store, app_name: str, user_id: str) -> str | None:
    """Destroys a user's data key: every value sealed under it is unreadable from now on.

    Values sealed under it stay where they are (in the database and in every
    backup) and can never be opened again: reading one raises
    :class:`~durable_adk.errors.KeyUnavailable` naming the key. Idempotent:
    a second call finds no key and returns None. Other processes drop the
    key from memory when they restart; stop them (or let "forget a user"
    delete the rows too) for the forgetting to be immediate everywhere.

    Returns:
        The id of the key destroyed, or None when the user had none.
    """
    if not isinstance(app_name, str) or not isinstance(user_id, str) or not app_name:
        raise errors.InvalidArgument("shred_user takes an app name and a user id")
    row = await store.fetchrow("user_key_delete", {"app_name": app_name, "user_id": user_id})
    if store.codec is not None:
        store.codec.forget(app_name, user_id)
    return None if row is None else str(row["key_ref"])


async def _rotate_state(
    store: Store,
    codec: Codec,
    col: Column,
    keep: str,
    batch: int,
    report: RotationReport,
    before_swap: Callable[[str, dict[str, Any]], Awaitable[None]] | None,
) -> None:
    """Re-seals a keyed column's values, a row (one JSON object) at a time."""
    names = [c for c in col.identity if c != "key"]
    after: list[Any] = [None] * len(col.order)
    first = 1
    while True:
        params = _page(first, keep, batch, after)
        rows = await store._fetch(_qname("batch", col), params)
        for row in rows:
            where = {f"i{i}": row[c] for i, c in enumerate(names)}
            current: dict[str, Any] | None = dict(row)
            for _ in range(_SWAP_TRIES):
                assert current is not None
                new, moved = await _reseal_state(store, codec, col, keep, current, report)
                if not moved:
                    break
                if before_swap is not None:
                    await before_swap(col.name, dict(current))
                swap = {"new": new, "old": current["value"], **where}
                if await store.fetch(_qname("swap", col), swap):
                    report.moved[col.name] = report.moved.get(col.name, 0) + moved
                    crash_point("keys.rotate.swapped")
                    break
                # A run merged a delta in meanwhile: read the row again and redo it.
                found = await store._fetch(_qname("row", col), where)
                current = dict(found[0]) if found else None
                if current is None:
                    break
            else:
                report.raced[col.name] = report.raced.get(col.name, 0) + 1
        if len(rows) < batch:
            return
        first = 0
        after = [rows[-1][c] for c in col.order]


async def _reseal_state(
    store: Store,
    codec: Codec,
    col: Column,
    keep: str,
    row: dict[str, Any],
    report: RotationReport,
) -> tuple[str, int]:
    """(the row's object with every value to move re-sealed, how many were moved)."""
    owner = [row[c] for c in col.identity if c != "key"]
    values = json.loads(row["value"])
    key_id = None
    if codec.per_user and col.user and row.get("u_user") is not None:
        key_id = await user_key_id(store, codec, str(row["u_app"]), str(row["u_user"]))
    moved = 0
    out: dict[str, Any] = {}
    for k, v in values.items():
        sealed = state_envelope(v, col)
        if sealed and (v.startswith(keep) or v.startswith(MARK + USER_KEY_PREFIX)):
            out[k] = v
            continue
        clear = _json(v)
        if sealed:
            try:
                clear = await open_value(store, col.table, col.column, (*owner, k), v)
            except errors.KeyUnavailable as exc:
                report.unreadable[col.name] = report.unreadable.get(col.name, 0) + 1
                if len(report.errors) < 5:
                    report.errors.append(str(exc))
                out[k] = v
                continue
        out[k] = codec.seal(clear, col, (*owner, k), key_id=key_id)
        moved += 1
    return _json(out), moved


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
