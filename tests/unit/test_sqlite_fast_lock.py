"""The fast path's short wait for a write lock another connection holds (issue 43):
a purge's batch holds SQLite's lock a few tenths of a millisecond, so a unit on the
caller's thread tries again for up to a millisecond before it goes to wait on the
database thread. Real database files; the patience is made long where a test needs
the lock to come free within it (no assertion on a time)."""

from __future__ import annotations

import sqlite3
import threading
import time
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


def test_a_waiter_is_woken_when_a_connection_of_this_process_gives_the_lock_up(
    tmp_path: Path,
) -> None:
    """A pause far longer than the test ends early: the holder's end wakes the waiter."""
    path = tmp_path / "d.db"
    other, conn = connect(path), connect(path)
    releases = lite.releases_of(str(path))
    assert releases is not None
    other.execute("BEGIN IMMEDIATE")
    took: list[bool] = []

    def wait() -> None:
        lite._begin_within(conn, 3600.0, 600.0, 600.0, releases)  # one try, then a 10-minute pause
        took.append(conn.in_transaction)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    while not releases._waiting:  # the waiter found the lock taken and sleeps on it
        time.sleep(0.001)
    other.execute("COMMIT")
    releases.ended()
    waiter.join(timeout=60)
    assert not waiter.is_alive() and took == [True]
    conn.execute("ROLLBACK")


def test_one_releases_per_file_and_none_in_memory(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    assert lite.releases_of(str(path)) is lite.releases_of(str(tmp_path / "." / "e.db"))
    assert lite.releases_of(str(path)) is not lite.releases_of(str(tmp_path / "f.db"))
    assert lite.releases_of(":memory:") is None


async def test_a_stores_write_wakes_another_store_on_the_same_file(tmp_path: Path) -> None:
    """Two stores of this process on one file share the file's releases, and a
    store's write transaction, once ended, counts for the other's waiters."""
    from durable_adk.store import open_store

    url = f"sqlite:///{tmp_path / 'g.db'}"
    async with open_store(url) as one, open_store(url) as two:
        assert one._releases is two._releases is not None  # type: ignore[attr-defined]
        before = one._releases.seen()  # type: ignore[attr-defined]
        await two.fetch("db_now")  # a read ends no write transaction
        assert one._releases.seen() == before  # type: ignore[attr-defined]
        params = {"app_name": "a", "user_id": "u", "initial_state": "{}", "now": 1.0}
        params.update(session_id="s", app_delta=None, user_delta=None)
        await two.fetch("create_session", params)  # inline: on the caller's thread
        assert one._releases.seen() == before + 1  # type: ignore[attr-defined]
        await two.fetch("create_session", params)  # refused ('exists'): the transaction ends too
        assert one._releases.seen() == before + 2  # type: ignore[attr-defined]
