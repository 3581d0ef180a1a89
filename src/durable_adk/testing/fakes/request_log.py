"""The request log of a fake service: every request it received, in order, with its outcome.

A service dedupes by idempotency key, so its items say how many effects there
are, not how many times a caller tried to cause one. The log says the latter:
a row is written when a request arrives, before it is handled, and completed
with its outcome when the answer is ready. A request that was refused, failed
on purpose, was answered from an earlier one with the same key, or never got
an answer because the service died, is in the log all the same.

The log lives in the service's SQLite file (table ``requests``), so it
survives a restart and a ``kill -9`` of the service like the items do, or in
memory for a service that keeps nothing on disk (the report builder).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any, Final

from durable_adk.testing.fakes.protocol import (
    MAX_LOG_PAGE,
    REQUESTS_PATH,
    JsonObject,
    Outcome,
    RequestRecord,
)
from durable_adk.testing.fakes.storage import StoreClosed, StoreError

__all__ = ["IN_MEMORY", "RequestLog"]

IN_MEMORY: Final = ":memory:"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    method      TEXT NOT NULL,
    path        TEXT NOT NULL,
    collection  TEXT,
    action      TEXT,
    item_id     TEXT,
    idempotency_key TEXT,
    mutating    INTEGER NOT NULL,
    caller      TEXT NOT NULL,
    outcome     TEXT,
    status      INTEGER,
    reason      TEXT,
    received_at REAL NOT NULL,
    answered_at REAL,
    fence       TEXT NOT NULL DEFAULT '{}'
);
"""

_PAGE = (
    "SELECT seq, method, path, collection, action, item_id, idempotency_key, mutating, caller,"
    " outcome, status, reason, received_at, answered_at, fence"
    " FROM requests WHERE seq > ? ORDER BY seq LIMIT ?"
)

_MAX_TEXT: Final = 1024  # longer paths and header values are cut: the log stays small


def _cut(value: str | None) -> str | None:
    return None if value is None else value[:_MAX_TEXT]


class RequestLog:
    """Appends received requests and their outcomes; reads them back in order.

    Its own connection (and lock) to the service's file, beside the
    :class:`~durable_adk.testing.fakes.storage.Store`'s, with
    ``synchronous=NORMAL``: in WAL mode a commit is in the WAL before it
    returns and so survives a ``kill -9`` of the service; only an OS crash,
    which no test causes, could lose the last records, and a request costs no
    extra fsync. Its writes are short single-row transactions; the 10 s busy
    timeout covers the store's writes to the same file.

    Args:
        path: The service's SQLite file, or :data:`IN_MEMORY`.

    Raises:
        StoreError: The file is not usable.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._lock = threading.Lock()
        where = os.fspath(path)
        try:
            conn = sqlite3.connect(where, isolation_level=None, check_same_thread=False, timeout=10)
        except sqlite3.Error as err:
            raise StoreError(f"cannot open {where!r} for the request log: {err}") from err
        try:
            if where != IN_MEMORY:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
            columns = {row[1] for row in conn.execute("PRAGMA table_info(requests)")}
            if "fence" not in columns:  # a log written before requests carried fences
                conn.execute("ALTER TABLE requests ADD COLUMN fence TEXT NOT NULL DEFAULT '{}'")
        except sqlite3.Error as err:
            conn.close()
            raise StoreError(f"cannot keep a request log in {where!r}: {err}") from err
        self._conn: sqlite3.Connection | None = conn

    def close(self) -> None:
        """Closes the log; later calls raise :class:`StoreClosed`."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _open(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreClosed
        return self._conn

    def received(
        self,
        *,
        method: str,
        path: str,
        collection: str | None,
        action: str | None,
        item_id: str | None,
        key: str | None,
        mutating: bool,
        caller: Mapping[str, str],
        fence: Mapping[str, str] | None = None,
    ) -> int:
        """Logs a request that has just arrived; returns its ``seq``.

        Raises:
            StoreClosed: The log is closed (the service is stopping).
        """
        params = (
            method[:16],
            _cut(path),
            _cut(collection),
            _cut(action),
            _cut(item_id),
            _cut(key),
            int(mutating),
            json.dumps({k[:64]: v[:_MAX_TEXT] for k, v in caller.items()}),
            time.time(),
            json.dumps({k[:64]: v[:_MAX_TEXT] for k, v in (fence or {}).items()}),
        )
        with self._lock:
            cursor = self._open().execute(
                "INSERT INTO requests (method, path, collection, action, item_id,"
                " idempotency_key, mutating, caller, received_at, fence)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                params,
            )
        seq = cursor.lastrowid
        assert seq is not None
        return seq

    def answered(self, seq: int, outcome: Outcome, status: int, reason: str | None) -> None:
        """Records how the request ``seq`` ended.

        Raises:
            StoreClosed: The log is closed.
        """
        with self._lock:
            self._open().execute(
                "UPDATE requests SET outcome = ?, status = ?, reason = ?, answered_at = ?"
                " WHERE seq = ?",
                (outcome, status, _cut(reason), time.time(), seq),
            )

    def page(self, since: int, limit: int) -> list[RequestRecord]:
        """Up to ``limit`` records with ``seq`` greater than ``since``, oldest first.

        Raises:
            StoreClosed: The log is closed.
        """
        with self._lock:
            rows = self._open().execute(_PAGE, (since, limit)).fetchall()
        return [_record(row) for row in rows]

    def answer(self, query: str) -> JsonObject:
        """The body of ``GET /_requests?<query>``: ``{"requests": [...], "more": bool}``.

        Raises:
            ValueError: The query is not ``since=<seq>`` and ``limit=<1..1000>``.
            StoreClosed: The log is closed.
        """
        since, limit = 0, MAX_LOG_PAGE
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
        for name, value in pairs:
            if name not in ("since", "limit") or not (value.isascii() and value.isdigit()):
                raise ValueError(
                    f"{REQUESTS_PATH} takes since=<seq> and limit=<1..{MAX_LOG_PAGE}>,"
                    f" as non-negative integers; got {name}={value!r}"
                )
            if name == "since":
                since = int(value)
            else:
                limit = int(value)
        if not 1 <= limit <= MAX_LOG_PAGE:
            raise ValueError(f"limit must be between 1 and {MAX_LOG_PAGE}, got {limit}")
        records = self.page(since, limit + 1)
        return {"requests": [r.to_json() for r in records[:limit]], "more": len(records) > limit}


def _record(row: tuple[Any, ...]) -> RequestRecord:
    (seq, method, path, collection, action, item_id, key, mutating, caller, *rest) = row
    outcome, status, reason, received_at, answered_at, fence = rest
    return RequestRecord(
        seq=seq,
        method=method,
        path=path,
        collection=collection,
        action=action,
        item_id=item_id,
        key=key,
        mutating=bool(mutating),
        caller=json.loads(caller),
        outcome=outcome,
        status=status,
        reason=reason,
        received_at=received_at,
        answered_at=answered_at,
        fence=json.loads(fence),
    )
