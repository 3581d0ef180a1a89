"""The SQLite file of one fake service: items and actions keyed by idempotency key.

It also keeps, per run, the highest fencing epoch a request carried
(``fences``), and admits a fenced request (:meth:`Store.admit`) only while its
valid-until has not passed and its epoch is not below that: the check and the
write it guards happen under one lock, so no request slips between them.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from durable_adk.fencing.fence import FenceToken
from durable_adk.testing.fakes.protocol import JsonObject, utc_now

__all__ = ["FencedOff", "NotFound", "Store", "StoreClosed", "StoreError"]


class StoreError(Exception):
    """The database file cannot be used (e.g. it belongs to another service)."""


class StoreClosed(Exception):
    """The service is shutting down; the store takes no more requests."""


class NotFound(Exception):
    """The item addressed does not exist."""


class FencedOff(Exception):
    """A fenced request was refused before anything was done.

    Attributes:
        reason: ``fence_expired`` or ``fence_superseded``
            (:meth:`durable_adk.fencing.fence.FenceToken.refusal`).
        highest_epoch: The highest epoch seen for the run, if any.
    """

    def __init__(self, reason: str, highest_epoch: int | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.highest_epoch = highest_epoch


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS items (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    collection      TEXT NOT NULL,
    id              TEXT NOT NULL UNIQUE,
    idempotency_key TEXT NOT NULL,
    data            TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    UNIQUE (collection, idempotency_key)
);
CREATE TABLE IF NOT EXISTS actions (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    collection      TEXT NOT NULL,
    action          TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    item_id         TEXT NOT NULL,
    response        TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    UNIQUE (collection, action, idempotency_key)
);
CREATE TABLE IF NOT EXISTS fences (
    run_id     TEXT PRIMARY KEY,
    epoch      INTEGER NOT NULL,
    updated_at TEXT NOT NULL
);
"""


class Store:
    """One service's SQLite file: items and actions keyed by idempotency key.

    One connection shared by the request threads, with one lock around every
    use of it; every write is its own ``BEGIN IMMEDIATE`` transaction that is
    committed (and, with ``synchronous=FULL``, synced) before it returns.

    Args:
        path: The database file; created if missing.
        service: The service name; a file made by another service is refused.

    Raises:
        StoreError: The file belongs to another service or is not usable.
    """

    def __init__(self, path: str | os.PathLike[str], service: str) -> None:
        self._lock = threading.Lock()
        try:
            conn = sqlite3.connect(
                os.fspath(path), isolation_level=None, check_same_thread=False, timeout=10.0
            )
        except sqlite3.Error as err:
            raise StoreError(f"cannot open {os.fspath(path)!r}: {err}") from err
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"cannot switch {os.fspath(path)!r} to WAL (got {mode})")
            conn.execute("PRAGMA synchronous=FULL")
            conn.executescript(_SCHEMA)
            conn.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('service', ?)", (service,)
            )
            owner = conn.execute("SELECT value FROM meta WHERE key = 'service'").fetchone()[0]
        except sqlite3.Error as err:
            conn.close()
            raise StoreError(f"cannot use {os.fspath(path)!r}: {err}") from err
        except StoreError:
            conn.close()
            raise
        if owner != service:
            conn.close()
            raise StoreError(f"{os.fspath(path)!r} belongs to service {owner!r}, not {service!r}")
        self._conn: sqlite3.Connection | None = conn

    def close(self) -> None:
        """Waits for the write in progress, if any, then closes the file."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _open(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreClosed
        return self._conn

    def _write(
        self, conn: sqlite3.Connection, statements: Sequence[tuple[str, tuple[Any, ...]]]
    ) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for sql, params in statements:
                conn.execute(sql, params)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _admit(self, conn: sqlite3.Connection, fence: FenceToken | None) -> None:
        """Refuses a stale fence; records a newer epoch. Called under the lock."""
        if fence is None:
            return
        row = conn.execute("SELECT epoch FROM fences WHERE run_id = ?", (fence.run_id,)).fetchone()
        highest = None if row is None else int(row[0])
        reason = fence.refusal(now=time.time(), highest_epoch=highest)
        if reason is not None:
            raise FencedOff(reason, highest)
        if highest is None or fence.epoch > highest:
            upsert = (
                "INSERT INTO fences (run_id, epoch, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT (run_id) DO UPDATE SET epoch = excluded.epoch,"
                " updated_at = excluded.updated_at"
            )
            self._write(conn, [(upsert, (fence.run_id, fence.epoch, utc_now()))])

    def admit(self, fence: FenceToken | None) -> None:
        """Checks a fenced read (no effect to guard): refuses it or records its epoch.

        Raises:
            FencedOff: Its valid-until has passed, or a later epoch of its run was seen.
        """
        with self._lock:
            self._admit(self._open(), fence)

    def highest_epoch(self, run_id: str) -> int | None:
        """The highest fencing epoch a request of ``run_id`` was admitted with, or None."""
        with self._lock:
            row = (
                self._open()
                .execute("SELECT epoch FROM fences WHERE run_id = ?", (run_id,))
                .fetchone()
            )
        return None if row is None else int(row[0])

    def create(
        self,
        collection: str,
        key: str,
        build: Callable[[], JsonObject],
        fence: FenceToken | None = None,
    ) -> tuple[JsonObject, bool]:
        """Returns the item stored under ``key``, creating it with ``build`` if there is none.

        A fenced request is admitted first, under the same lock as the write.

        Returns:
            The item and whether it was created by this call.

        Raises:
            FencedOff: The fence was refused; nothing was read or written.
        """
        with self._lock:
            conn = self._open()
            self._admit(conn, fence)
            row = conn.execute(
                "SELECT data FROM items WHERE collection = ? AND idempotency_key = ?",
                (collection, key),
            ).fetchone()
            if row is not None:
                return _load_object(row[0]), False
            item = build()
            insert = (
                "INSERT INTO items (collection, id, idempotency_key, data, created_at)"
                " VALUES (?, ?, ?, ?, ?)"
            )
            params = (collection, item["id"], key, json.dumps(item), item["created_at"])
            self._write(conn, [(insert, params)])
            return item, True

    def act(
        self,
        collection: str,
        item_id: str,
        action: str,
        key: str,
        apply: Callable[[JsonObject], JsonObject],
        fence: FenceToken | None = None,
    ) -> tuple[JsonObject, bool]:
        """Applies an action to an item once per ``key`` (a fenced one admitted first).

        Returns:
            The answer (the changed item) and whether this call applied it; a
            repeated key returns the first answer, whichever item it names.

        Raises:
            FencedOff: The fence was refused; nothing was read or written.
            NotFound: No item has this id.
            Rejected: ``apply`` refused.
        """
        with self._lock:
            conn = self._open()
            self._admit(conn, fence)
            row = conn.execute(
                "SELECT response FROM actions"
                " WHERE collection = ? AND action = ? AND idempotency_key = ?",
                (collection, action, key),
            ).fetchone()
            if row is not None:
                return _load_object(row[0]), False
            current = self._get(conn, collection, item_id)
            if current is None:
                raise NotFound
            updated = apply(dict(current))
            for kept in ("id", "idempotency_key", "created_at"):
                updated[kept] = current[kept]
            data = json.dumps(updated)
            insert = (
                "INSERT INTO actions"
                " (collection, action, idempotency_key, item_id, response, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)"
            )
            self._write(
                conn,
                [
                    ("UPDATE items SET data = ? WHERE id = ?", (data, item_id)),
                    (insert, (collection, action, key, item_id, data, utc_now())),
                ],
            )
            return updated, True

    @staticmethod
    def _get(conn: sqlite3.Connection, collection: str, item_id: str) -> JsonObject | None:
        row = conn.execute(
            "SELECT data FROM items WHERE collection = ? AND id = ?", (collection, item_id)
        ).fetchone()
        return None if row is None else _load_object(row[0])

    def get(self, collection: str, item_id: str) -> JsonObject | None:
        """The item with this id, or None."""
        with self._lock:
            return self._get(self._open(), collection, item_id)

    def by_key(self, collection: str, key: str) -> JsonObject | None:
        """The item created under this idempotency key, or None."""
        with self._lock:
            row = (
                self._open()
                .execute(
                    "SELECT data FROM items WHERE collection = ? AND idempotency_key = ?",
                    (collection, key),
                )
                .fetchone()
            )
        return None if row is None else _load_object(row[0])

    def count(self, collection: str) -> int:
        """How many items the collection holds."""
        with self._lock:
            row = (
                self._open()
                .execute("SELECT COUNT(*) FROM items WHERE collection = ?", (collection,))
                .fetchone()
            )
        return int(row[0])

    def items(self, collection: str) -> list[JsonObject]:
        """Every item of the collection, oldest first."""
        with self._lock:
            rows = (
                self._open()
                .execute("SELECT data FROM items WHERE collection = ? ORDER BY seq", (collection,))
                .fetchall()
            )
        return [_load_object(r[0]) for r in rows]


def _load_object(text: str) -> JsonObject:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("stored data is not a JSON object")
    return value
