"""The reminder example sleeping across the death of every worker, killed for real, both backends.

The worker that ran the user's turn is SIGKILLed while the run sleeps; a
fresh process's recovery pass (what ``durable-adk recover`` runs) wakes
nothing before the due time; the timer's due time is moved past on the
database clock; a recovery process killed (``os._exit(137)``) right after it
woke the timer and queued the answer leaves it to the next fresh process,
which delivers it. The session holds exactly one wake-up answer and one
reminder.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from examples.reminders.app import APP_NAME, REMINDER, SESSION_ID, USER_ID, texts
from google.adk.events.event import Event

from children import run_child, spawn
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.effect_tables.jobs import Job, JobState, JobTable
from durable_adk.store import Store, open_store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.testing import arm

ROOT = Path(__file__).resolve().parents[2]


async def example(*args: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = arm(dict(os.environ), crash_at) if crash_at else dict(os.environ)
    return await asyncio.to_thread(
        run_child,
        [sys.executable, "-m", "examples.reminders.app", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def start_then_kill(url: str) -> dict[str, object]:
    """Runs the user's turn in a live worker, then SIGKILLs it; returns what it printed."""
    child = spawn(
        [sys.executable, "-m", "examples.reminders.app", "start", "--db", url],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 120)
        assert line, child.stderr.read() if child.stderr else ""
        assert child.poll() is None  # still alive: a worker with its loops running
    finally:
        child.send_signal(signal.SIGKILL)
        await asyncio.to_thread(child.wait, 30)
    assert child.returncode == -signal.SIGKILL
    printed: dict[str, object] = json.loads(line)
    return printed


async def events_of(store: Store) -> list[Event]:
    session = await DurableSessionService(store).get_session(
        app_name=APP_NAME, user_id=USER_ID, session_id=SESSION_ID
    )
    assert session is not None
    return list(session.events)


def wakes(events: list[Event]) -> list[str]:
    return [
        r.id or ""
        for e in events
        if e.author == "user"
        for r in e.get_function_responses()
        if (r.response or {}).get("status") == "woke"
    ]


async def the_timer(store: Store) -> Job:
    (timer,) = [j for j in await JobTable(store).list_jobs() if j.timer]
    return timer


@pytest.fixture
async def world(store_url: str) -> tuple[str, Store]:  # type: ignore[misc]
    async with open_store(store_url) as store:
        yield store_url, store


async def test_a_run_sleeping_across_the_death_of_every_worker_wakes_once(
    world: tuple[str, Store],
) -> None:
    url, store = world
    printed = await start_then_kill(url)
    assert printed["status"] == "PAUSED"
    timer = await the_timer(store)
    assert timer.state is JobState.STARTED and printed["due"] == [timer.deadline_at]

    early = await example("recover", "--db", url, "--worker", "worker-B")
    assert early.returncode == 0, early.stderr
    assert json.loads(early.stdout.splitlines()[-1])["woken"] == []
    assert wakes(await events_of(store)) == []

    jobs = JobTable(store)
    await jobs.backdate(timer.job_id, 3601)  # the database clock is past the due time
    killed = await example(
        "recover", "--db", url, "--worker", "worker-C", crash_at="resume.after_submit"
    )
    assert killed.returncode == 137, killed.stderr
    woken = await jobs.get(timer.job_id)
    assert woken is not None and woken.state is JobState.SUCCEEDED
    assert wakes(await events_of(store)) == []  # queued on the ledger, not delivered

    ledger = RunLedger(store)
    for stuck in await ledger.list_runs(status=RunStatus.RUNNING, limit=100):
        await ledger.backdate(stuck.run_id, 3600)  # the dead worker's lease runs out
    for stuck in await ledger.list_runs(status=RunStatus.QUEUED, limit=100):
        await ledger.backdate(stuck.run_id, 3600)
    fresh = await example("recover", "--db", url, "--worker", "worker-D")
    assert fresh.returncode == 0, fresh.stderr
    assert json.loads(fresh.stdout.splitlines()[-1])["woken"] == []  # woken once, before

    events = await events_of(store)
    assert wakes(events) == [timer.function_call_id]
    assert texts(events).count(REMINDER) == 1
    again = await example("recover", "--db", url, "--worker", "worker-E")
    assert json.loads(again.stdout.splitlines()[-1])["resumed"] == []
    assert len(wakes(await events_of(store))) == 1
    statuses = sorted(r.status.value for r in await ledger.list_runs(limit=100))
    assert statuses == ["DONE", "DONE"]


async def test_a_worker_killed_before_storing_the_timer_leaves_a_sleep_that_still_wakes_once(
    world: tuple[str, Store],
) -> None:
    url, store = world
    env = arm(dict(os.environ), "sleep.before_timer")
    killed = await asyncio.to_thread(
        run_child,
        [sys.executable, "-m", "examples.reminders.app", "start", "--db", url],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == 137, killed.stderr
    jobs = JobTable(store)
    assert [j for j in await jobs.list_jobs() if j.timer] == []  # died before the timer
    ledger = RunLedger(store)
    for stuck in await ledger.list_runs(status=RunStatus.RUNNING, limit=100):
        await ledger.backdate(stuck.run_id, 3600)
    fresh = await example("recover", "--db", url, "--worker", "worker-B")
    assert fresh.returncode == 0, fresh.stderr
    timer = await the_timer(store)
    # The recovered run paused on the stored call; its timer was re-attached.
    assert json.loads(fresh.stdout.splitlines()[-1])["reattached"] == [timer.job_id]
    assert timer.state is JobState.STARTED and timer.function_call_id
    assert wakes(await events_of(store)) == []
    await jobs.backdate(timer.job_id, 3601)
    waking = await example("recover", "--db", url, "--worker", "worker-C")
    assert json.loads(waking.stdout.splitlines()[-1])["woken"] == [timer.job_id]
    events = await events_of(store)
    assert wakes(events) == [timer.function_call_id] and texts(events).count(REMINDER) == 1
    again = await example("recover", "--db", url, "--worker", "worker-D")
    assert json.loads(again.stdout.splitlines()[-1])["woken"] == []
    assert len(wakes(await events_of(store))) == 1


async def test_durable_adk_recover_alone_stores_the_timer_a_killed_worker_never_stored(
    world: tuple[str, Store],
) -> None:
    """The CLI's pass re-attaches the open sleep call of the run it recovers to PAUSED."""
    url, store = world
    killed = await example("start", "--db", url, crash_at="sleep.before_timer")
    assert killed.returncode == 137, killed.stderr
    jobs = JobTable(store)
    assert [j for j in await jobs.list_jobs() if j.timer] == []
    ledger = RunLedger(store)
    for stuck in await ledger.list_runs(status=RunStatus.RUNNING, limit=100):
        await ledger.backdate(stuck.run_id, 3600)
    command = [str(Path(sys.executable).with_name("durable-adk")), "recover"]
    spec = ["examples.reminders.app:app", "--db", url, "--json", "--worker-id", "cli-B"]
    passed = await asyncio.to_thread(
        subprocess.run, [*command, *spec], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert passed.returncode == 0, passed.stderr
    summary = json.loads(passed.stdout)
    timer = await the_timer(store)
    (run,) = summary["runs"]
    assert run["status"] == "PAUSED" and run["reattached"] == [timer.job_id]
    assert timer.state is JobState.STARTED and timer.function_call_id
    await jobs.backdate(timer.job_id, 3601)
    woke = await asyncio.to_thread(
        subprocess.run, [*command, *spec], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert woke.returncode == 0, woke.stderr
    assert json.loads(woke.stdout)["timers_woken"] == [timer.job_id]
    events = await events_of(store)
    assert wakes(events) == [timer.function_call_id] and texts(events).count(REMINDER) == 1
