"""A paced purge on a real database, both backends (issue 43): it rests after its
statements (the rest measured by an injected sleep, so nothing here waits),
sizes them under the policy's batch, and still deletes every row once; it is
billed the time a statement held the writer, as the store measured it, not its
wait for the lock."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time

from google.adk.events.event import Event
from google.genai import types
from typer.testing import CliRunner

from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.cli import app
from durable_adk.lifecycle import RetentionPolicy, purge
from durable_adk.lifecycle.pacing import Pacer
from durable_adk.store import Store, open_store
from durable_adk.store.base import fetch_held


class Ticks:
    """A clock that moves 1 ms each time it is read; ``sleep`` records the rests."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        self.now += 0.001
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


async def seed(store: Store, sessions: int, events: int) -> None:
    """Sessions last updated a minute ago: idle by any policy's clock, whatever its
    resolution (SQLite's clock reads whole milliseconds, an event's timestamp
    microseconds: a session just written could look newer than the purge's now)."""
    service = DurableSessionService(store)
    written = time.time() - 60
    for n in range(sessions):
        session = await service.create_session(app_name="old", user_id=f"u{n % 3}")
        for k in range(events):
            await service.append_event(
                session,
                Event(
                    invocation_id=f"i{k}",
                    author="user",
                    content=types.Content(role="user", parts=[types.Part(text=f"m{k}")]),
                    timestamp=written,
                ),
            )


async def test_a_paced_purge_rests_at_its_duty_and_deletes_everything_once(
    store: Store,
) -> None:
    await seed(store, sessions=6, events=12)
    policy = RetentionPolicy(idle_sessions=0, batch=40, duty=0.2)
    ticks = Ticks()
    # Every statement "takes" 1 ms on this clock, under the 4 ms target: batches grow.
    pacer = Pacer(policy.duty, policy.batch, min_batch=5, clock=ticks, sleep=ticks.sleep)
    pacer.batch = 5
    report = await purge(store, "old", policy, pacer=pacer)
    assert report.tables["events"].rows == 72
    assert report.tables["sessions"].rows == 6
    assert ticks.slept and all(abs(s - 0.004) < 1e-9 for s in ticks.slept)  # 1 ms * 0.8/0.2
    assert pacer.batch == 40  # grew from 5 to the policy's batch, never past it
    assert abs(pacer.busy / (pacer.busy + pacer.rested) - 0.2) < 1e-9
    again = await purge(store, "old", policy, pacer=pacer, must_exist=False)
    assert again.rows == 0


async def test_a_purge_paced_on_the_stores_figure_rests_at_its_duty(store: Store) -> None:
    await seed(store, sessions=4, events=10)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    policy = RetentionPolicy(idle_sessions=0, batch=40, duty=0.5)
    pacer = Pacer(policy.duty, policy.batch, min_batch=5, sleep=sleep)
    assert not pacer.by_clock
    report = await purge(store, "old", policy, pacer=pacer)
    assert (report.tables["events"].rows, report.tables["sessions"].rows) == (40, 4)
    assert slept and pacer.busy > 0  # every statement gave a figure, and it rested on it
    assert abs(pacer.rested - pacer.busy) < 1e-9  # duty 0.5: as long a rest as held


async def test_the_time_held_leaves_out_the_wait_for_another_connections_lock(
    store: Store,
) -> None:
    """SQLite: a unit that waited 0.4 s for another connection's write lock is billed only
    from the lock granted to its commit (the purge rested for the appends' load before)."""
    if store.dialect != "sqlite":
        rows, held = await fetch_held(store, "db_now")
        assert rows and held is not None and held >= 0  # the statement's own time
        return
    await seed(store, sessions=1, events=2)
    path = store.url.removeprefix("sqlite:///")
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.4, lambda: other.execute("COMMIT"))
    params = {"app_name": "old", **RetentionPolicy(idle_sessions=0).cutoffs(await store.now())}
    began = time.perf_counter()  # before the timer starts: the unit waits at least its 0.4 s
    release.start()
    try:
        marked, held = await fetch_held(store, "purge_mark", {**params, "batch": 10})
        took = time.perf_counter() - began
    finally:
        release.join()
        other.close()
    assert len(marked) == 1 and took >= 0.4
    assert held is not None and 0 < held < took - 0.3, (held, took)


async def test_an_operators_flat_out_purge_never_rests(store: Store) -> None:
    await seed(store, sessions=3, events=5)
    policy = RetentionPolicy(idle_sessions=0, batch=2, duty=1.0)
    ticks = Ticks()
    pacer = Pacer(policy.duty, policy.batch, clock=ticks, sleep=ticks.sleep)
    report = await purge(store, "old", policy, pacer=pacer)
    assert (report.tables["events"].rows, report.tables["sessions"].rows) == (15, 3)
    assert ticks.slept == [] and pacer.batch == 2


def test_the_cli_takes_a_duty_refuses_a_bad_one_and_purges_flat_out_with_duty_one(
    store_url: str,
) -> None:
    async def seeded() -> int:
        async with open_store(store_url) as store:
            await seed(store, sessions=2, events=3)
            return await count_events(store)

    async def left() -> int:
        async with open_store(store_url) as store:
            return await count_events(store)

    assert asyncio.run(seeded()) == 6
    for bad in ("0", "1.5", "-1"):
        code, out = cli("purge", "--retention", "idle=0", "--duty", bad, "--db", store_url)
        assert code == 2 and "duty must be a share of the time" in out, out
    assert asyncio.run(left()) == 6  # bad input changes nothing
    code, out = cli(
        "purge", "--retention", "idle=0", "--duty", "1", "--db", store_url, "--app", "old",
        "--json",
    )  # fmt: skip
    assert code == 0, out
    (report,) = json.loads(out)["items"]
    assert report["tables"]["events"]["rows"] == 6 and report["app_name"] == "old"
    assert asyncio.run(left()) == 0


async def count_events(store: Store) -> int:
    rows = await DurableSessionService(store).list_sessions(app_name="old")
    total = 0
    for listed in rows.sessions:
        session = await DurableSessionService(store).get_session(
            app_name="old", user_id=listed.user_id, session_id=listed.id
        )
        total += len(session.events) if session else 0
    return total


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})
    return result.exit_code, result.output
