"""A worker frozen past its lease is taken over and, thawed, writes nothing;
a run killed after pausing on a long-running call is recovered as PAUSED.
Both backends; leases are expired by moving them back in the database.

The tools call real outside processes (a fake inventory service, the report
builder) tagged with their process id, and each case counts those calls: who
made them, and none by the frozen worker after the takeover. The environment
that points the worker's tools at them is set in this process too, so a tool
run by the fresh worker here is counted the same way."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from children import run_child, spawn
from durable_adk.adk.loops.recovery import Sweeper
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.testing import arm
from durable_adk.testing.report_builder import ReportBuilder, ReportBuilderClient
from durable_adk.testing.services import FakeService, RequestRecord

WORKER = Path(__file__).with_name("worker.py")


def load_worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("crash_worker", WORKER)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def session_events(url: str, session_id: str) -> list[str]:
    worker = load_worker()
    async with open_store(url) as store:
        session = await DurableSessionService(store).get_session(
            app_name=worker.APP, user_id=worker.USER, session_id=session_id
        )
    assert session is not None
    return [e.id for e in session.events]


@pytest.fixture
def inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeService]:
    with FakeService("inventory", tmp_path / "inventory.db") as service:
        monkeypatch.setenv("DADK_INVENTORY_URL", service.url)
        yield service


@pytest.fixture
def builder(monkeypatch: pytest.MonkeyPatch) -> Iterator[ReportBuilderClient]:
    # No webhook is ever sent: nothing listens on port 9, and the delay is long.
    with ReportBuilder("http://127.0.0.1:9/hook", "secret", delay=3600) as process:
        monkeypatch.setenv("DADK_BUILDER_URL", process.url)
        yield ReportBuilderClient(process.url)


def callers(records: list[RequestRecord]) -> list[str]:
    """The process ids the requests came from, in order."""
    return [r.caller.get("pid", "?") for r in records]


async def test_frozen_worker_is_taken_over_and_writes_nothing(
    store_url: str, tmp_path: Path, inventory: FakeService
) -> None:
    async with open_store(store_url):
        pass
    marker = tmp_path / "in-tool"
    env = {**os.environ, "DADK_TOOL_MARKER": str(marker), "DADK_TOOL_SLEEP": "2"}
    child = spawn(
        [sys.executable, str(WORKER), "slow", store_url, "s1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the worker never reached its tool"
            await asyncio.sleep(0.05)
        os.kill(child.pid, signal.SIGSTOP)
        frozen_at = inventory.requests()[-1].seq
        worker = load_worker()
        async with open_store(store_url) as store:
            runner = worker.build_runner(store, "slow", "fresh-worker")
            (stuck,) = await runner.ledger.list_runs(status=RunStatus.RUNNING)
            await runner.ledger.backdate(stuck.run_id, 3600)
            (recovery,) = await Sweeper(runner).recover_once()
            assert (recovery.found.value, recovery.status) == ("TOOL_UNANSWERED", RunStatus.DONE)
        after_takeover = await session_events(store_url, "s1")
        taken_over_at = inventory.requests()[-1].seq
        os.kill(child.pid, signal.SIGCONT)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
    assert child.returncode == 3, err  # the thawed worker learned it was fenced
    assert "FENCED" in err
    assert await session_events(store_url, "s1") == after_takeover  # and wrote nothing
    async with open_store(store_url) as store:
        (run,) = await RunLedger(store).list_runs()
    assert run.status is RunStatus.DONE and run.owner == "fresh-worker" and run.epoch == 2
    # The outside world: the frozen worker read once, before it was frozen; the
    # fresh worker ran the idempotent tool again (one more read, expected: the
    # call had no answer); the thawed worker made no call after the takeover.
    me, frozen = str(os.getpid()), str(child.pid)
    lookups = inventory.requests("reservations", "lookup")
    assert callers(lookups) == [frozen, me]
    assert lookups[0].seq <= frozen_at < lookups[1].seq <= taken_over_at
    assert inventory.requests(caller={"pid": frozen}, since=taken_over_at) == []
    assert inventory.acts() == 0  # a read-only tool


async def test_run_killed_after_pausing_is_recovered_as_paused(
    store_url: str, builder: ReportBuilderClient
) -> None:
    async with open_store(store_url):
        pass
    crashed = run_child(
        [sys.executable, str(WORKER), "paused", store_url, "p1"],
        env=arm(dict(os.environ), "runner.before_finish"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert crashed.returncode == 137, crashed.stderr
    worker = load_worker()
    async with open_store(store_url) as store:
        runner = worker.build_runner(store, "paused", "fresh-worker")
        (stuck,) = await runner.ledger.list_runs(status=RunStatus.RUNNING)
        await runner.ledger.backdate(stuck.run_id, 3600)
        (recovery,) = await Sweeper(runner).recover_once()
        assert (recovery.found.value, recovery.action, recovery.status) == (
            "PAUSED",
            "mark_paused",
            RunStatus.PAUSED,
        )
        assert await Sweeper(runner).recover_once() == []
        (run,) = await runner.ledger.list_runs()
        assert run.status is RunStatus.PAUSED and run.classification == "PAUSED"
    # The report was submitted once, by the killed worker; recovering the paused
    # run did not start it again.
    (submit,) = builder.requests("submit")
    assert submit.key == "report:2026-Q3" and submit.caller["pid"] != str(os.getpid())
    assert builder.acts() == 1


async def test_uncrashed_long_running_run_ends_paused(
    store_url: str, builder: ReportBuilderClient
) -> None:
    done = run_child(
        [sys.executable, str(WORKER), "paused", store_url, "p2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    async with open_store(store_url) as store:
        (run,) = await RunLedger(store).list_runs()
    assert run.status is RunStatus.PAUSED
    assert json.loads(run.request)["parts"][0]["text"] == "go"
    assert builder.acts("submit", "report:2026-Q3") == 1 and builder.acts() == 1
