"""The SQLite store's inline fast path, on real database files.

Units flagged ``inline`` in the SQL run on the event loop's thread, on a second
connection (``store._fast``) with a zero busy timeout; when another connection
holds the write lock they roll back and go to the database thread, which waits
for the lock as every other unit does. These tests watch where each unit ran by
wrapping ``store._run_on`` (every unit passes through it, with the connection
it runs on) and ``store._call`` (every hop to the database thread).

The lock is held by a child process (a plain ``sqlite3`` connection in
``BEGIN IMMEDIATE``), released when the test closes the child's stdin, or
after a safety timeout so that a test that goes wrong cannot hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from google.adk.errors import StaleSessionError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.session import Session
from google.genai import types

from durable_adk import errors
from durable_adk.adk.services.sessions import RUN_METADATA_KEY, DurableSessionService
from durable_adk.store import SqliteStore, check_schema, connect, open_store
from durable_adk.tables.ledger import RunLedger

# Holds the write lock of the database named in argv[1] until stdin is closed
# (or argv[2] seconds have passed), then commits.
_LOCK_HOLDER = """
import select, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
select.select([sys.stdin], [], [], float(sys.argv[2]))
conn.execute("COMMIT")
conn.close()
"""


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


def as_sqlite(store: object) -> SqliteStore:
    assert isinstance(store, SqliteStore)
    return store


class Trace:
    """Where each unit of a store ran, and how many hops went to the database thread."""

    def __init__(self, store: SqliteStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.store = store
        self.units: list[tuple[str, str, int]] = []  # (query, "fast" | "db", thread id)
        self.hops = 0
        run_on = store._run_on
        call = store._call

        def traced_run_on(conn: sqlite3.Connection, query: Any, params: Any, *rest: Any) -> Any:
            where = "fast" if conn is store._fast else "db"
            self.units.append((query.name, where, threading.get_ident()))
            return run_on(conn, query, params, *rest)

        async def counted_call(fn: Callable[[], Any]) -> Any:
            self.hops += 1
            return await call(fn)

        monkeypatch.setattr(store, "_run_on", traced_run_on)
        monkeypatch.setattr(store, "_call", counted_call)

    def where(self) -> list[tuple[str, str]]:
        return [(name, where) for name, where, _ in self.units]

    def clear(self) -> None:
        self.units.clear()
        self.hops = 0


@contextlib.asynccontextmanager
async def lock_held_by_another_process(
    path: Path, *, safety_seconds: float = 10.0
) -> AsyncIterator[Callable[[], None]]:
    """Holds the database's write lock in a child process; yields a function releasing it."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _LOCK_HOLDER,
        str(path),
        str(safety_seconds),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None
    stdin = child.stdin

    def release() -> None:
        if not stdin.is_closing():
            stdin.close()

    try:
        line = await asyncio.wait_for(child.stdout.readline(), timeout=20)
        assert line == b"locked\n", line
        yield release
    finally:
        release()
        await asyncio.wait_for(child.wait(), timeout=20)
    assert child.returncode == 0


def count(path: Path, sql: str, *args: object) -> int:
    """A count read on a connection of its own (sees only committed rows)."""
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(sql, args).fetchone()[0])
    finally:
        conn.close()


def ev(text: str, **delta: Any) -> Event:
    return Event(
        author="user",
        invocation_id="inv-1",
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=dict(delta)),
    )


async def submit(ledger: RunLedger, run_id: str, **request: Any) -> Any:
    return await ledger.submit(
        app_name="a", user_id="u", session_id="s", request=request, owner="w", run_id=run_id
    )


# A write through the public API, and how to count what it left in the database.
Writer = tuple[Callable[[], Awaitable[object]], Callable[[], int]]


async def prepare_write(store: SqliteStore, path: Path, kind: str) -> Writer:
    if kind == "run_submit":
        ledger = RunLedger(store)
        return (
            lambda: submit(ledger, "run-under-lock"),
            lambda: count(path, "SELECT COUNT(*) FROM runs WHERE run_id = 'run-under-lock'"),
        )
    sessions = DurableSessionService(store)
    session = await sessions.create_session(app_name="a", user_id="u", session_id="s")
    return (
        lambda: sessions.append_event(session, ev("under lock", n=1)),
        lambda: count(path, "SELECT COUNT(*) FROM events"),
    )


# ------------------------------------------------------------- where units run


async def test_inline_units_run_on_the_loop_thread_and_reads_on_the_database_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_store(url_of(tmp_path / "durable.db")) as opened:
        store = as_sqlite(opened)
        assert store._fast is not None
        trace = Trace(store, monkeypatch)
        loop_thread = threading.get_ident()

        sessions = DurableSessionService(store)
        session = await sessions.create_session(app_name="a", user_id="u", session_id="s")
        await sessions.append_event(session, ev("hello", n=1))
        run = await submit(RunLedger(store), "run-1")

        assert trace.where() == [
            ("create_session", "fast"),
            ("append_event", "fast"),
            ("run_submit", "fast"),
        ]
        assert {thread for _, _, thread in trace.units} == {loop_thread}
        assert trace.hops == 0, "an inline unit went through the database thread"

        trace.clear()
        rows = await store.fetch(
            "load_session_tail",
            {"app_name": "a", "user_id": "u", "session_id": "s", "since_seq": 0},
        )
        assert [r["seq"] for r in rows] == [1]
        got = await RunLedger(store).get(run.run_id)
        assert got is not None and got.run_id == "run-1"
        assert trace.where() == [("load_session_tail", "db"), ("run_get", "db")]
        assert store._thread_id is not None and store._thread_id != loop_thread
        assert {thread for _, _, thread in trace.units} == {store._thread_id}
        assert trace.hops == 2


# ---------------------------------------------------- a lock held by another process


@pytest.mark.parametrize("kind", ["run_submit", "append_event"])
async def test_inline_write_under_another_process_lock_waits_on_the_database_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    path = tmp_path / "durable.db"
    async with open_store(url_of(path)) as opened:
        store = as_sqlite(opened)
        write, written = await prepare_write(store, path, kind)
        trace = Trace(store, monkeypatch)
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        async with lock_held_by_another_process(path) as release:
            ticking = asyncio.create_task(ticker())
            await asyncio.sleep(0)
            # The release is the loop's to do: were the loop blocked by the write,
            # the lock would be held until the child's safety timeout.
            timer = asyncio.get_running_loop().call_later(0.5, release)
            before = ticks
            try:
                await write()
            finally:
                timer.cancel()
            ticks_during_write = ticks - before
            stop.set()
            await ticking

        # Tried on the fast connection, refused at once, done on the database thread.
        assert trace.where() == [(kind, "fast"), (kind, "db")]
        assert trace.units[0][2] == threading.get_ident()
        assert trace.units[1][2] == store._thread_id
        assert trace.hops == 1
        # About 50 ticks in 0.5 s; a few prove the loop ran while the write waited.
        assert ticks_during_write >= 5, ticks_during_write
        assert written() == 1
        assert store._fast is not None and not store._fast.in_transaction
        # With the lock free again, the fast path works.
        trace.clear()
        await submit(RunLedger(store), "run-after")
        assert trace.where() == [("run_submit", "fast")]
        assert trace.hops == 0


@pytest.mark.parametrize("kind", ["run_submit", "append_event"])
async def test_a_lock_held_past_the_busy_timeout_raises_database_busy_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    path = tmp_path / "durable.db"
    async with open_store(url_of(path), busy_timeout_ms=100) as opened:
        store = as_sqlite(opened)
        write, written = await prepare_write(store, path, kind)
        trace = Trace(store, monkeypatch)
        async with lock_held_by_another_process(path):
            with pytest.raises(errors.DatabaseBusy):
                await write()
            assert trace.where() == [(kind, "fast"), (kind, "db")]
        assert written() == 0
        assert store._fast is not None and not store._fast.in_transaction
        trace.clear()
        await write()  # the same call, once the lock is free: nothing was half-done
        assert written() == 1
        assert trace.where() == [(kind, "fast")]


# ------------------------------------------------------------ refusals and failures


def stamped(text: str, run_id: str, epoch: int) -> Event:
    event = ev(text)
    event.custom_metadata = {RUN_METADATA_KEY: {"run_id": run_id, "epoch": epoch}}
    return event


@pytest.mark.parametrize("refusal", ["stale", "fenced"])
async def test_a_guarded_inline_unit_that_refuses_writes_nothing_and_leaves_no_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refusal: str
) -> None:
    path = tmp_path / "durable.db"
    async with open_store(url_of(path)) as opened:
        store = as_sqlite(opened)
        sessions = DurableSessionService(store)
        session = await sessions.create_session(app_name="a", user_id="u", session_id="s")
        ledger = RunLedger(store)
        run = await submit(ledger, "run-1")
        claimed = await ledger.claim_queued(run.run_id, "w")
        assert claimed is not None and claimed.epoch == 1

        refused: Session
        event: Event
        expected_error: type[Exception]
        if refusal == "stale":
            loaded = await DurableSessionService(store).get_session(
                app_name="a", user_id="u", session_id="s"
            )
            assert loaded is not None
            refused = loaded
            await sessions.append_event(session, ev("first"))
            event, expected_error = ev("from a stale object", n=1), StaleSessionError
        else:
            refused = session
            event, expected_error = stamped("old epoch", "run-1", 0), errors.Fenced

        trace = Trace(store, monkeypatch)
        with pytest.raises(expected_error):
            await sessions.append_event(refused, event)
        assert trace.where() == [("append_event", "fast")]
        assert trace.hops == 0
        assert store._fast is not None and not store._fast.in_transaction
        stored = 1 if refusal == "stale" else 0
        assert count(path, "SELECT COUNT(*) FROM events") == stored
        assert count(path, "SELECT last_seq FROM sessions") == stored
        assert count(path, "SELECT COUNT(*) FROM events WHERE event_id = ?", event.id) == 0

        # The next inline write goes through, on the fast connection.
        trace.clear()
        await sessions.append_event(session, stamped("current epoch", "run-1", 1))
        assert trace.where() == [("append_event", "fast")]
        assert count(path, "SELECT COUNT(*) FROM events") == stored + 1


async def test_a_unique_violation_in_an_inline_unit_raises_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "durable.db"
    async with open_store(url_of(path)) as opened:
        store = as_sqlite(opened)
        ledger = RunLedger(store)
        await submit(ledger, "run-1", attempt="first")
        trace = Trace(store, monkeypatch)
        with pytest.raises(errors.UniqueViolation):
            await submit(ledger, "run-1", attempt="second")
        # Raised from the fast path, not retried on the database thread.
        assert trace.where() == [("run_submit", "fast")]
        assert trace.hops == 0
        assert store._fast is not None and not store._fast.in_transaction
        assert count(path, "SELECT COUNT(*) FROM runs") == 1
        got = await ledger.get("run-1")
        assert got is not None and got.request == '{"attempt": "first"}'
        await submit(ledger, "run-2")
        assert count(path, "SELECT COUNT(*) FROM runs") == 2


async def test_a_failure_after_the_first_statements_rolls_the_whole_unit_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # append_event inserts the event, moves the session and the app state, and
    # writes the snapshot last: a snapshot row already there fails that last
    # statement, after the others ran on the fast connection.
    path = tmp_path / "durable.db"
    async with open_store(url_of(path)) as opened:
        store = as_sqlite(opened)
        sessions = DurableSessionService(store, snapshot_every=1)
        session = await sessions.create_session(app_name="a", user_id="u", session_id="s")
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute(
                "INSERT INTO state_snapshots (session_pk, seq, state)"
                " SELECT pk, 1, '{}' FROM sessions"
            )
        finally:
            conn.close()
        trace = Trace(store, monkeypatch)
        with pytest.raises(errors.UniqueViolation):
            await sessions.append_event(session, ev("doomed", n=1, **{"app:hits": 1}))
        assert trace.where() == [("append_event", "fast")]
        assert trace.hops == 0
        assert store._fast is not None and not store._fast.in_transaction
        assert count(path, "SELECT COUNT(*) FROM events") == 0
        assert count(path, "SELECT last_seq FROM sessions") == 0
        assert count(path, "SELECT COUNT(*) FROM app_state") == 0
        assert count(path, "SELECT COUNT(*) FROM state_snapshots") == 1


# ------------------------------------------------------------ :memory: and close


async def test_a_memory_store_has_no_fast_connection_and_runs_inline_units_on_its_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with open_store("sqlite:///:memory:") as opened:
        store = as_sqlite(opened)
        assert store._fast is None
        trace = Trace(store, monkeypatch)
        sessions = DurableSessionService(store)
        session = await sessions.create_session(app_name="a", user_id="u", session_id="s")
        await sessions.append_event(session, ev("hello", n=1))
        run = await submit(RunLedger(store), "run-1")
        assert run.run_id == "run-1"
        assert trace.where() == [
            ("create_session", "db"),
            ("append_event", "db"),
            ("run_submit", "db"),
        ]
        assert trace.hops == 3
        loaded = await DurableSessionService(store).get_session(
            app_name="a", user_id="u", session_id="s"
        )
        assert loaded is not None and loaded.state == {"n": 1} and len(loaded.events) == 1
        with pytest.raises(errors.UniqueViolation):
            await submit(RunLedger(store), "run-1")


async def test_a_closed_store_refuses_every_unit(tmp_path: Path) -> None:
    async with open_store(url_of(tmp_path / "durable.db")) as opened:
        store = as_sqlite(opened)
        fast = store._fast
        assert fast is not None
        await submit(RunLedger(store), "run-1")
    assert store._fast is None
    with pytest.raises(sqlite3.ProgrammingError):  # the fast connection was closed too
        fast.execute("SELECT 1")
    with pytest.raises(errors.StoreUnavailable):
        await store.fetch("run_get", {"run_id": "run-1"})
    with pytest.raises(errors.StoreUnavailable):
        await submit(RunLedger(store), "run-2")
    with pytest.raises(errors.StoreUnavailable):
        await DurableSessionService(store).create_session(app_name="a", user_id="u", session_id="s")
    await store.close()  # closing twice is harmless


# ------------------------------------------------------------ a store used from another thread


def test_a_store_opened_in_one_thread_serves_an_event_loop_in_another(tmp_path: Path) -> None:
    # ADK's synchronous Runner.run drives run_async in a thread of its own, with
    # its own event loop, over services built (and stores opened) elsewhere.
    async def opened() -> SqliteStore:
        store = await connect(url_of(tmp_path / "durable.db"))
        await check_schema(store)
        return as_sqlite(store)

    store = asyncio.run(opened())
    outcome: dict[str, object] = {}

    def worker() -> None:
        try:
            outcome["run"] = asyncio.run(submit(RunLedger(store), "run-1"))
        except Exception as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(timeout=20)
    asyncio.run(store.close())
    assert "error" not in outcome, outcome.get("error")
    assert count(tmp_path / "durable.db", "SELECT COUNT(*) FROM runs") == 1
