"""The fast path's short wait for a write lock another connection holds (issue 43):
a purge's batch holds SQLite's lock a few tenths of a millisecond, so a unit on the
caller's thread tries again for up to a millisecond before it goes to wait on the
database thread. Real database files; the patience is made long where a test needs
the lock to come free within it (no assertion on a time)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from durable_adk.store import sqlite as lite


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=0)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (n INTEGER)")
    return conn


def test_a_free_lock_is_taken_at_once(tmp_path: Path) -> None:
    conn = connect(tmp_path / "a.db")
    lite.try_write_lock(conn, 0.0)
    assert conn.in_transaction
    conn.execute("INSERT INTO t (n) VALUES (1)")
    conn.execute("COMMIT")


def test_a_lock_freed_within_the_patience_is_taken(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    other, conn = connect(path), connect(path)
    other.execute("BEGIN IMMEDIATE")
    tries = 0
    real = conn.execute

    class Watch:
        """Counts the tries; frees the other connection's lock just before the third."""

        def execute(self, sql: str) -> object:
            nonlocal tries
            if sql == "BEGIN IMMEDIATE":
                tries += 1
                if tries == 3:
                    other.execute("COMMIT")
            return real(sql)

    lite.try_write_lock(Watch(), 30.0)  # type: ignore[arg-type]
    assert tries == 3 and conn.in_transaction  # two refused, the third took it
    conn.execute("ROLLBACK")


def test_a_lock_held_past_the_patience_raises_busy_and_leaves_no_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.db"
    other, conn = connect(path), connect(path)
    other.execute("BEGIN IMMEDIATE")
    naps: list[float] = []
    monkeypatch.setattr(lite.time, "sleep", naps.append)  # no real wait: the clock decides
    clock = iter(range(1000))
    monkeypatch.setattr(lite.time, "monotonic", lambda: next(clock) * 0.0001)
    with pytest.raises(sqlite3.OperationalError) as raised:
        lite.try_write_lock(conn, 0.001)
    assert lite.translate(raised.value).__class__.__name__ == "DatabaseBusy"
    assert not conn.in_transaction
    # Tried again in steps growing from 50 us to at most 0.2 ms, within the patience.
    assert naps[0] == lite.FAST_POLL_FIRST and max(naps) <= lite.FAST_POLL_MOST
    assert naps == sorted(naps) and len(naps) >= 2
    other.execute("COMMIT")
    # Another error is not waited on.
    conn.execute("BEGIN")
    with pytest.raises(sqlite3.OperationalError, match="within a transaction"):
        lite.try_write_lock(conn, 30.0)
    conn.execute("ROLLBACK")
