"""Group commit (``group_commit=True``): units of different runs written in one transaction.

SQLite groups the units submitted in the same turn of the event loop;
PostgreSQL groups the units that wait for a pool connection (here: a store of
one connection, held by a test task until the units are queued). Each unit is
fenced by its own SQL and rolled back alone behind its savepoint.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from google.adk.events.event import Event
from google.genai import types

from durable_adk import errors
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.faults import arm
from durable_adk.store import Store, connect, open_store


def _grouped(store_url: str, **options: Any) -> Any:
    """A store with group commit on (PostgreSQL: one connection, for the test to hold)."""
    if store_url.startswith("postgres"):
        options = {"min_size": 1, "max_size": 1, **options}
    return open_store(store_url, group_commit=True, **options)


async def _session(store: Store) -> int:
    row = await store.fetchrow(
        "create_session",
        {
            "app_name": "app",
            "user_id": "u",
            "session_id": uuid.uuid4().hex,
            "initial_state": "{}",
            "now": 1.0,
            "app_delta": None,
            "user_delta": None,
        },
    )
    assert row is not None
    return int(row["pk"])


def _append(pk: int, *, expected: int = 0, event_id: str | None = None) -> dict[str, Any]:
    return {
        "session_pk": pk,
        "expected_seq": expected,
        "event_id": event_id or uuid.uuid4().hex,
        "invocation_id": "inv",
        "author": "agent",
        "timestamp": 2.0,
        "delta": None,
        "data": '{"content": "hi"}',
        "run_id": None,
        "run_epoch": None,
        "app_name": "app",
        "user_id": "u",
        "app_delta": None,
        "user_delta": None,
        "snapshot": None,
    }


def _batch_with_a_repeated_id(pk: int) -> dict[str, Any]:
    """Two events of one id in one batch: the check passes, the insert violates the key."""
    event = {"invocation_id": "inv", "author": "agent", "timestamp": 2.0, "delta": None}
    events = [
        {**event, "seq": 1, "event_id": "same", "data": "{}"},
        {**event, "seq": 2, "event_id": "same", "data": "{}"},
    ]
    params = _append(pk)
    for name in ("event_id", "invocation_id", "author", "delta", "data", "snapshot"):
        del params[name]
    return {**params, "last_seq": 2, "events": json.dumps(events), "snapshots": "[]"}


async def _count_events(store: Store, pk: int) -> int:
    rows = await store.fetch(
        "load_events_partial", {"session_pk": pk, "from_seq": 0, "after_ts": None}
    )
    return len(rows)


@asynccontextmanager
async def _busy_pool(store: Store) -> AsyncIterator[None]:
    """PostgreSQL: holds the store's one connection, so units queue for it; SQLite: nothing."""
    if store.dialect != "postgresql":
        yield
        return
    release = asyncio.Event()
    held = asyncio.Event()

    async def hold(_conn: Any) -> None:
        held.set()
        await release.wait()

    holder = asyncio.create_task(store._with_connection(hold))  # type: ignore[attr-defined]
    await held.wait()
    try:
        yield
    finally:
        release.set()
        await holder


async def _together(store: Store, calls: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Runs the calls at once (one loop turn; queued behind a held connection on PostgreSQL)."""
    async with _busy_pool(store):
        tasks = [asyncio.create_task(call()) for call in calls]  # type: ignore[arg-type, var-type]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    return await asyncio.gather(*tasks, return_exceptions=True)


async def test_concurrent_units_are_committed_in_one_transaction(store_url: str) -> None:
    async with _grouped(store_url) as store:
        pks = [await _session(store) for _ in range(5)]
        before = store.commits
        rows = await _together(
            store, [lambda pk=pk: store.fetchrow("append_event", _append(pk)) for pk in pks]
        )
        assert [r["status"] for r in rows] == ["ok"] * 5
        assert store.commits - before == 1
        assert [await _count_events(store, pk) for pk in pks] == [1] * 5


async def test_without_group_commit_each_unit_commits_alone(store_url: str) -> None:
    options = {"min_size": 1, "max_size": 1} if store_url.startswith("postgres") else {}
    async with open_store(store_url, group_commit=False, **options) as store:
        pks = [await _session(store) for _ in range(4)]
        before = store.commits
        rows = await _together(
            store, [lambda pk=pk: store.fetchrow("append_event", _append(pk)) for pk in pks]
        )
        assert [r["status"] for r in rows] == ["ok"] * 4
        assert store.commits - before == 4


async def test_a_lone_unit_is_written_at_once_not_grouped(store_url: str) -> None:
    async with _grouped(store_url) as store:
        pk = await _session(store)
        queue = store._group  # type: ignore[attr-defined]
        groups, before = queue.groups, store.commits
        row = await store.fetchrow("append_event", _append(pk))
        assert row is not None and row["status"] == "ok"
        assert store.commits - before == 1
        assert queue.groups == groups  # it never waited in a group


async def test_a_fenced_unit_is_refused_alone_while_the_others_commit(store_url: str) -> None:
    async with _grouped(store_url) as store:
        pks = [await _session(store) for _ in range(3)]
        before = store.commits
        rows = await _together(
            store,
            [
                lambda: store.fetchrow("append_event", _append(pks[0])),
                # It names a sequence number the session is not at: refused, writes nothing.
                lambda: store.fetchrow("append_event", _append(pks[1], expected=7)),
                lambda: store.fetchrow("append_event", _append(pks[2])),
            ],
        )
        assert [r["status"] for r in rows] == ["ok", "stale", "ok"]
        assert store.commits - before == 1
        assert [await _count_events(store, pk) for pk in pks] == [1, 0, 1]


async def test_an_erroring_unit_fails_only_its_caller(store_url: str) -> None:
    async with _grouped(store_url) as store:
        pks = [await _session(store) for _ in range(3)]
        before = store.commits
        results = await _together(
            store,
            [
                lambda: store.fetchrow("append_event", _append(pks[0])),
                lambda: store.fetchrow("append_events", _batch_with_a_repeated_id(pks[1])),
                lambda: store.fetchrow("append_event", _append(pks[2])),
            ],
        )
        assert results[0]["status"] == "ok" and results[2]["status"] == "ok"
        assert isinstance(results[1], errors.UniqueViolation)
        assert store.commits - before == 1
        # The failed unit wrote nothing of itself (not even its first event).
        assert [await _count_events(store, pk) for pk in pks] == [1, 0, 1]


async def test_a_cancelled_waiter_does_not_lose_the_others_writes(store_url: str) -> None:
    async with _grouped(store_url) as store:
        pks = [await _session(store) for _ in range(3)]
        async with _busy_pool(store):
            tasks = [asyncio.create_task(store.fetchrow("append_event", _append(pk))) for pk in pks]
            # The three submit in the next turn; the test runs after them in
            # that turn and cancels one before its group is written.
            await asyncio.sleep(0)
            tasks[1].cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(results[1], asyncio.CancelledError)
        assert results[0]["status"] == "ok" and results[2]["status"] == "ok"  # type: ignore[index]
        assert [await _count_events(store, pk) for pk in pks] == [1, 0, 1]


async def test_a_group_larger_than_its_bound_is_split(store_url: str) -> None:
    async with _grouped(store_url, group_max=2) as store:
        pks = [await _session(store) for _ in range(5)]
        before = store.commits
        rows = await _together(
            store, [lambda pk=pk: store.fetchrow("append_event", _append(pk)) for pk in pks]
        )
        assert [r["status"] for r in rows] == ["ok"] * 5
        assert store.commits - before == 3  # 2 + 2 + 1


async def test_a_bad_group_bound_is_refused(store_url: str) -> None:
    for bad in (0, -1, 1.5):
        with pytest.raises(errors.InvalidArgument, match="group_max"):
            await connect(store_url, group_commit=True, group_max=bad)


# A child that submits three appends as one group and is killed (os._exit(137))
# by the armed fault point after the group's first unit ran, before its commit.
_CHILD = """
import asyncio, json, sys
sys.path.insert(0, sys.argv[3])
from test_group_commit import _append, _busy_pool, _grouped
async def main():
    async with _grouped(sys.argv[1]) as store:
        pks = json.loads(sys.argv[2])
        async with _busy_pool(store):
            tasks = [asyncio.create_task(store.fetchrow("append_event", _append(pk))) for pk in pks]
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        print(json.dumps([(await t)["status"] for t in tasks]))
asyncio.run(main())
"""


@pytest.mark.parametrize("armed", [True, False])
async def test_a_crash_in_a_group_writes_none_of_it(store_url: str, armed: bool) -> None:
    async with open_store(store_url) as store:
        pks = [await _session(store) for _ in range(3)]
    from children import run_child  # here: the child imports this module without tests/

    env = arm(dict(os.environ), "store.group_after_first_unit") if armed else None
    here = Path(__file__).parent
    done = await asyncio.to_thread(
        run_child,
        [sys.executable, "-c", _CHILD, store_url, json.dumps(pks), str(here)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    async with open_store(store_url) as store:
        counts = [await _count_events(store, pk) for pk in pks]
    if armed:
        assert done.returncode == 137, done.stderr[-2000:]
        assert counts == [0, 0, 0]  # the first unit ran, but its group never committed
    else:
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout.strip().splitlines()[-1]) == ["ok"] * 3
        assert counts == [1, 1, 1]


async def test_many_runs_appending_at_once_all_land_in_fewer_commits(store_url: str) -> None:
    """40 sessions, each appending 3 events in turn, all at once (PostgreSQL: 2 connections)."""
    options = {"max_size": 2} if store_url.startswith("postgres") else {}
    async with open_store(store_url, group_commit=True, group_max=8, **options) as store:
        pks = [await _session(store) for _ in range(40)]
        before = store.commits

        async def run(pk: int) -> list[str]:
            statuses = []
            for seq in range(3):
                row = await store.fetchrow("append_event", _append(pk, expected=seq))
                assert row is not None
                statuses.append(row["status"])
            return statuses

        results = await asyncio.gather(*(run(pk) for pk in pks))
        assert results == [["ok"] * 3] * 40
        assert [await _count_events(store, pk) for pk in pks] == [3] * 40
        # 120 units; grouped by turn (SQLite) or by connection (PostgreSQL).
        assert store.commits - before < 120


async def test_two_appends_through_one_session_object_are_both_stored_in_order(
    store_url: str,
) -> None:
    """The session service queues appends per object: group commit changes no order."""
    async with _grouped(store_url) as store:
        service = DurableSessionService(store)
        session = await service.create_session(app_name="app", user_id="u", session_id="one")

        def said(text: str) -> Event:
            content = types.Content(role="model", parts=[types.Part(text=text)])
            return Event(id=text, invocation_id="inv", author="agent", content=content)

        async with _busy_pool(store):
            first = asyncio.create_task(service.append_event(session, said("a")))
            second = asyncio.create_task(service.append_event(session, said("b")))
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        results = await asyncio.gather(first, second, return_exceptions=True)
        assert [getattr(r, "id", r) for r in results] == ["a", "b"]
        loaded = await service.get_session(app_name="app", user_id="u", session_id="one")
        assert loaded is not None and [e.id for e in loaded.events] == ["a", "b"]
        assert [e.id for e in session.events] == ["a", "b"]
        assert service._appending == {}  # the queue goes with its last append
