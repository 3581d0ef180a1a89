"""The hourly shipment checker (examples/shipment_checker) killed inside a tick's firing;
a fresh process fires it: one run, finished, one check at the carrier.

Both backends. The child is killed for real (``os._exit(137)`` at a crash
point: right after its claim, after the tick is recorded, after the run is
submitted); the database clock decides when the claim and the run's lease
run out, and the test moves them back in SQL instead of waiting. A fresh
process then runs one pass of every background loop (``durable-adk
recover``'s pass): the tick's run exists exactly once and ends DONE.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from children import run_child, spawn
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.schedules import TickState
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.tables.schedules import ScheduleTable
from durable_adk.testing.crash import EXIT_CODE, arm
from durable_adk.testing.harness import clear_of_a_tick
from durable_adk.testing.services import FakeService

WORKER = Path(__file__).with_name("schedule_worker.py")
ROOT = Path(__file__).resolve().parents[2]  # the example's package lives here


def child_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the repository on the path (the worker imports examples/)."""
    paths = [str(ROOT), *filter(None, [env.get("PYTHONPATH")])]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


@pytest.fixture
def carrier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeService]:
    """The carrier the checker looks shipments up at (a real HTTP service that counts)."""
    with FakeService("carrier", tmp_path / "carrier.db") as service:
        monkeypatch.setenv("DADK_CARRIER_URL", service.url)
        yield service


def load_worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("schedule_worker", WORKER)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def child(mode: str, url: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_child(
        [sys.executable, str(WORKER), mode, url],
        env=child_env(env),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "point", ["schedule.after_claim", "schedule.after_record", "schedule.after_submit"]
)
async def test_a_tick_killed_mid_fire_runs_once_after_a_fresh_process(
    store_url: str, point: str, carrier: FakeService
) -> None:
    worker = load_worker()
    schedule = worker.SCHEDULE
    async with open_store(store_url) as store:
        table = ScheduleTable(store, worker.APP)
        await table.sync([schedule])
        now = await clear_of_a_tick(store, schedule)
        due = schedule.next_tick(now - 3600)  # the hour's tick, already due
        await table.rewind(schedule.name, next_tick_at=due, next_fire_at=due)

    killed = child("poll", store_url, arm(dict(os.environ), point))
    assert killed.returncode == EXIT_CODE, killed.stderr[-2000:]
    assert f"crash point {point!r} fired" in killed.stderr

    async with open_store(store_url) as store:
        table = ScheduleTable(store, worker.APP)
        ledger = RunLedger(store)
        (row,) = await table.list_schedules()
        # Whatever the dead worker held runs out now (database clock, moved in SQL).
        await table.rewind(schedule.name, next_tick_at=row.next_tick_at, next_fire_at=now - 1)
        for run in await ledger.list_runs(limit=10):
            await ledger.backdate(run.run_id, 3600)

    fresh = child("recover", store_url, dict(os.environ))
    assert fresh.returncode == 0, fresh.stderr[-2000:]

    async with open_store(store_url) as store:
        table = ScheduleTable(store, worker.APP)
        ticks = await table.recent_ticks(schedule.name)
        assert [(t.tick_at, t.state) for t in ticks] == [(due, TickState.SUBMITTED)]
        runs = await RunLedger(store).list_runs(limit=10)
        assert [(r.run_id, r.status) for r in runs] == [(ticks[0].run_id, RunStatus.DONE)]
        session = await DurableSessionService(store).get_session(
            app_name=worker.APP, user_id="logistics", session_id=ticks[0].session_id
        )
        assert session is not None
        texts = [
            (e.author, e.content.parts[0].text)
            for e in session.events
            if e.content and e.content.parts and e.content.parts[0].text
        ]
        assert texts == [
            ("user", "Has shipment SHIP-1 landed?"),
            ("checker", "Shipment SHIP-1 has not landed yet."),
        ]
        (row,) = await table.list_schedules()
        assert row.next_tick_at == due + 3600 and row.last_run_id == ticks[0].run_id
    printed = [json.loads(line) for line in fresh.stdout.splitlines() if line.startswith("{")]
    if point == "schedule.after_claim":
        assert [p["state"] for p in printed if "state" in p] == ["SUBMITTED"]
    # The outside world: one check at the carrier, by the fresh process.
    (pid,) = [p["pid"] for p in printed if "pid" in p]
    lookups = carrier.requests("shipments", "lookup")
    assert [r.caller.get("pid") for r in lookups] == [str(pid)]


async def test_three_worker_processes_racing_for_one_tick_start_one_run(
    store_url: str, tmp_path: Path, carrier: FakeService
) -> None:
    worker = load_worker()
    schedule = worker.SCHEDULE
    async with open_store(store_url) as store:
        table = ScheduleTable(store, worker.APP)
        await table.sync([schedule])
        due = schedule.next_tick(await clear_of_a_tick(store, schedule) - 3600)
        await table.rewind(schedule.name, next_tick_at=due, next_fire_at=due)
    go = tmp_path / "go"
    children = []
    for index in range(3):
        ready = str(tmp_path / f"ready{index}")
        env = child_env({**os.environ, "DADK_READY": ready, "DADK_GO": str(go)})
        children.append(
            spawn(
                [sys.executable, str(WORKER), "poll", store_url],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready{i}").exists() for i in range(3)):
        assert time.monotonic() < deadline, "the workers did not start"
        assert all(c.poll() is None for c in children), [c.communicate() for c in children]
        await asyncio.sleep(0.02)
    go.write_text("go")  # all three poll at once
    outputs = [c.communicate(timeout=120) for c in children]
    assert [c.returncode for c in children] == [0, 0, 0], [err[-2000:] for _, err in outputs]
    printed = [json.loads(line) for out, _ in outputs for line in out.splitlines()]
    fired = [p for p in printed if "state" in p]
    assert [f["state"] for f in fired] == ["SUBMITTED"]  # one process fired it, once
    assert len(carrier.requests("shipments", "lookup")) == 1  # and checked once
    async with open_store(store_url) as store:
        runs = await RunLedger(store).list_runs(limit=10)
        assert [(r.run_id, r.status) for r in runs] == [(fired[0]["run"], RunStatus.DONE)]
        ticks = await ScheduleTable(store, worker.APP).recent_ticks(schedule.name)
        assert [(t.tick_at, t.run_id) for t in ticks] == [(due, fired[0]["run"])]
