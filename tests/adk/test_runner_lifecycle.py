"""``async with DurableRunner`` runs the app's background loops; without them it says so.

Both backends. The run "left by a dead worker" is a real ledger row written
by another owner, whose lease is moved back in the database; nothing in the
test sweeps by hand.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import warnings
import weakref
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig

from durable_adk import (
    Admission,
    Background,
    BackgroundSettings,
    DurableRunner,
    RunLedger,
    RunStatus,
    Sweeper,
    idempotent,
)
from durable_adk.metrics import Metrics
from durable_adk.service.settings import ServiceSettings
from durable_adk.service.worker import Worker
from durable_adk.store import Store, open_store
from durable_adk.tables.sweeps import sweepers_seen
from durable_adk.testing import Call, Say, ScriptedModel

APP = "lifecycle"
NO_SWEEPER = "no recovery sweeper runs"
GATE: dict[str, asyncio.Event] = {}


@idempotent
async def look_up(item: str) -> dict[str, Any]:
    """Reads an item (safe to run again); waits for the test's gate when one is set."""
    gate = GATE.get("tool")
    if gate is not None:
        await gate.wait()
    return {"item": item, "found": True}


def agent() -> LlmAgent:
    script = [Call("look_up", {"item": "lamp"}), Say("Found it.")] * 4
    return LlmAgent(name="root", model=ScriptedModel({"root": script}), tools=[look_up])


def runner(store: Store, **options: Any) -> DurableRunner:
    return DurableRunner(app=agent(), app_name=APP, store=store, **options)


FAST = BackgroundSettings(sweep_interval=0.05, resume_interval=0.05, drain_seconds=0.2)


async def left_by_a_dead_worker(store: Store, session: str = "s1") -> str:
    """A run another worker started and never finished (its lease moved back)."""
    ledger = RunLedger(store)
    started = await ledger.start(
        app_name=APP,
        user_id="u",
        session_id=session,
        request={"role": "user", "parts": [{"text": "any lamps?"}]},
        owner="dead-worker",
        now=time.time(),
    )
    assert started is not None and started.run.status is RunStatus.RUNNING
    await ledger.backdate(started.run.run_id, 3600)
    return started.run.run_id


async def status_of(store: Store, run_id: str) -> RunStatus:
    run = await RunLedger(store).get(run_id)
    assert run is not None
    return run.status


async def until_status(store: Store, run_id: str, *wanted: RunStatus) -> None:
    async with asyncio.timeout(120):  # generous: only a hang fails here
        while await status_of(store, run_id) not in wanted:  # noqa: ASYNC110
            await asyncio.sleep(0.05)


# The store's own task (PostgreSQL's LISTEN connection for wake-ups) lives as
# long as the store, which the test holds open past the runner.
STORE_TASKS = frozenset({"durable-adk-listen"})


def loop_tasks() -> list[str]:
    return sorted(
        t.get_name()
        for t in asyncio.all_tasks()
        if t.get_name().startswith("durable-adk")
        and t.get_name() not in STORE_TASKS
        and not t.done()
    )


async def test_async_with_recovers_without_wiring_and_stops_cleanly(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    GATE.clear()
    run_id = await left_by_a_dead_worker(store)
    caplog.set_level(logging.INFO, logger="durable_adk")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with runner(store, background=FAST) as durable:
            assert durable.background is not None and durable.background.running
            assert {"durable-adk-sweeper", "durable-adk-resumer", "durable-adk-expiry"} <= set(
                loop_tasks()
            )
            await until_status(store, run_id, RunStatus.DONE)
            # It serves runs too, and does not warn: its own sweeper runs.
            async for _event in durable.run(user_id="u", session_id="s2", message="lamps?"):
                pass
        assert durable.background is None
        assert loop_tasks() == []
        gc.collect()
    assert [str(w.message) for w in caught] == []
    assert not [r for r in caplog.records if NO_SWEEPER in r.getMessage()]
    seen = await sweepers_seen(store, app_name=APP)
    assert seen.alive == 1 and seen.last_sweep_at is not None


async def test_exit_cancels_a_recovery_still_in_progress_after_the_drain_time(
    store: Store,
) -> None:
    GATE["tool"] = asyncio.Event()  # the re-driven tool never returns by itself
    try:
        run_id = await left_by_a_dead_worker(store)
        async with runner(store, background=FAST, lease=30.0) as durable:
            async with asyncio.timeout(120):
                while not durable.detached_runs and not durable.path.driver._drives:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
        assert loop_tasks() == []  # the drive was cancelled, its heartbeat with it
        # Nothing was written for its end: its lease runs out and a sweeper takes over.
        assert await status_of(store, run_id) is RunStatus.RUNNING
    finally:
        GATE.clear()
    async with runner(store, background=FAST) as again:
        await RunLedger(store).backdate(run_id, 3600)
        await until_status(store, run_id, RunStatus.DONE)
        assert again.background is not None


async def test_background_false_runs_no_loops_and_warns_once(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    GATE.clear()
    caplog.set_level(logging.INFO, logger="durable_adk")
    async with runner(store, background=False) as submitter:
        assert submitter.background is None and loop_tasks() == []
        for session in ("a", "b"):
            async for _event in submitter.run(user_id="u", session_id=session, message="lamps?"):
                pass
    warned = [r for r in caplog.records if NO_SWEEPER in r.getMessage()]
    assert len(warned) == 1  # once per runner
    assert warned[0].levelno == logging.WARNING
    text = warned[0].getMessage()
    assert APP in text and "last sweep: never" in text and "durable-adk recover" in text
    seen = await sweepers_seen(store, app_name=APP)
    assert (seen.alive, seen.last_sweep_at) == (0, None)


@pytest.mark.parametrize("one_off", [False, True])
async def test_no_warning_once_a_sweeper_ran_for_the_app(
    store: Store, caplog: pytest.LogCaptureFixture, one_off: bool
) -> None:
    GATE.clear()
    # A sweeper somewhere else on the database (another process's; here, one pass).
    await Sweeper(
        runner(store, background=False, worker_id="elsewhere"), one_off=one_off
    ).recover_once()
    caplog.set_level(logging.INFO, logger="durable_adk")
    submitter = runner(store, background=False)
    async for _event in submitter.run(user_id="u", session_id="c", message="lamps?"):
        pass
    assert not [r for r in caplog.records if NO_SWEEPER in r.getMessage()]
    # Another app on the same database has no sweeper: it is warned about.
    other = DurableRunner(app=agent(), app_name="other_app", store=store, background=False)
    assert await other.warn_if_no_sweeper() is True
    assert await other.warn_if_no_sweeper() is False  # once


async def test_the_worker_runs_the_same_loops(store: Store, store_url: str) -> None:
    GATE.clear()
    run_id = await left_by_a_dead_worker(store)
    settings = ServiceSettings(
        db=store_url, token="t" * 16, sweep_interval=0.05, resume_interval=0.05, drain_seconds=0.2
    )
    app = App(
        name=APP, root_agent=agent(), resumability_config=ResumabilityConfig(is_resumable=True)
    )
    worker = Worker(app=app, store=store, settings=settings, metrics=Metrics())
    assert isinstance(worker.background, Background)
    async with worker.running():
        assert worker.runner.background is worker.background and worker.background.running
        await until_status(store, run_id, RunStatus.DONE)
    assert worker.runner.background is None and loop_tasks() == []


async def test_a_finished_drive_is_freed_at_once_without_the_garbage_collector(
    tmp_path: Path,
) -> None:
    """A drive holds events, a queue, a lock, its fence and its task: once its
    run has ended nothing of ours keeps it, neither a reference cycle (left to
    the cyclic collector, which at hundreds of runs in flight would keep every
    ended drive until a full collection) nor a task or timer started inside it
    (the lease keeper, the lease's deadline, the watchdog's tick and the
    admission sampler run in contexts of their own, not the drive's).

    SQLite only: on PostgreSQL, asyncpg's own timers of the drive's last
    statements (the command timeout of each) keep their context until
    they fall due, seconds after the drive, outside our code.
    """
    GATE.clear()
    async with open_store(f"sqlite:///{tmp_path}/freed.db") as store:
        # min_active=1: the admission sampler starts with the first drive too.
        durable = runner(store, background=False, admission=Admission(min_active=1))
        driver = durable.path.driver
        drives: list[weakref.ref[Any]] = []
        new_drive = driver.new_drive

        def watched(run: Any) -> Any:
            drive = new_drive(run)
            drives.append(weakref.ref(drive))
            return drive

        driver.new_drive = watched  # type: ignore[method-assign]
        gc.collect()
        gc.disable()
        try:
            for session in ("first", "second"):  # the first starts the keeper and sampler
                events = [
                    e async for e in durable.run(user_id="u", session_id=session, message="lamps?")
                ]
                assert any(
                    e.content and e.content.parts and e.content.parts[0].text for e in events
                )
            for _ in range(5):  # the drives' tasks hand their ends over and finish
                await asyncio.sleep(0)
            assert len(drives) == 2
            assert [d() for d in drives] == [None, None]
        finally:
            gc.enable()
        await durable.keeper.aclose()
        await durable.admission.aclose()


def test_bad_background_settings_are_refused() -> None:
    from durable_adk import InvalidArgument

    with pytest.raises(InvalidArgument, match="sweep_interval"):
        BackgroundSettings(sweep_interval=0)
    with pytest.raises(InvalidArgument, match="drain_seconds"):
        BackgroundSettings(drain_seconds=-1)
