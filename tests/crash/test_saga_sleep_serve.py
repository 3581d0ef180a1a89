"""A saga paused on a sleep, through ``durable-adk serve`` workers and a SIGKILL (issue 41).

Worker A serves the user's turn: the saga reserves a lamp at the fake
inventory service, its ``cool_off`` stage sleeps (the timer is stored, the
run is PAUSED, the saga RUNNING), and worker A is SIGKILLed. The timer's due
time is moved past on the database clock; worker B (a fresh process) wakes
it, the saga goes on, its ``ship`` stage fails and the reservation is
released: once, counted at the inventory service.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from children import spawn
from durable_adk.effect_tables.jobs import JobState, JobTable
from durable_adk.effect_tables.sagas import SagaLedger, SagaStatus
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger
from durable_adk.testing.services import FakeService

HERE = Path(__file__).parent
TOKEN = "saga-sleep-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def inventory(tmp_path: Path) -> Iterator[FakeService]:
    with FakeService("inventory", tmp_path / "inventory.db") as service:
        yield service


def serve(
    url: str,
    worker: str,
    inventory: FakeService | None,
    *,
    spec: str = "saga_sleep_app:app",
    extra: tuple[str, ...] = (),
) -> tuple[subprocess.Popen[str], str]:
    """``durable-adk serve SPEC`` in a child process (run from this folder); its URL."""
    command = [
        sys.executable, "-m", "durable_adk.cli", "serve", spec,
        "--db", url, "--port", "0", "--token", TOKEN, "--worker-id", worker,
        "--lease", "2", "--sweep-interval", "0.2", *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), *sys.path])}
    if inventory is not None:
        env["DADK_INVENTORY_URL"] = inventory.url
    process = spawn(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=HERE
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 90
    seen = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        seen.append(line)
        if line.startswith("listening on "):
            # Keep reading its output, so a worker that logs much never blocks on the pipe.
            threading.Thread(target=process.stdout.read, daemon=True).start()
            return process, line.split()[-1]
        if not line:
            break
    process.kill()
    raise AssertionError("serve did not start:\n" + "".join(seen))


async def until(check: object, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.1)
    raise AssertionError("timed out")


async def test_a_saga_asleep_when_its_worker_dies_wakes_on_another_and_compensates_once(
    store_url: str, inventory: FakeService
) -> None:
    first, url = serve(store_url, "worker-A", inventory)
    second = None
    try:
        async with open_store(store_url) as store:
            jobs, ledger, sagas = JobTable(store), RunLedger(store), SagaLedger(store)
            async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=30) as client:
                started = await client.post(
                    "/v1/users/u/sessions/s/runs", json={"message": "order a lamp"}
                )
            assert started.status_code == 202, started.text
            run_id = started.json()["run"]["run_id"]

            async def paused() -> bool:
                run = await ledger.get(run_id)
                return run is not None and run.status.value == "PAUSED"

            await until(paused)
            (timer,) = [j for j in await jobs.list_jobs() if j.timer]
            assert timer.state is JobState.STARTED
            (saga,) = await sagas.list_sagas()
            assert saga.status is SagaStatus.RUNNING
            first.send_signal(signal.SIGKILL)
            assert first.wait(30) == -signal.SIGKILL

            await jobs.backdate(timer.job_id, 601)
            second, _ = serve(store_url, "worker-B", inventory)

            async def compensated() -> bool:
                (row,) = await sagas.list_sagas()
                return row.status is SagaStatus.COMPENSATED

            await until(compensated)
            runs = await ledger.list_runs()

            async def all_done() -> bool:
                return all(r.status.value == "DONE" for r in await ledger.list_runs())

            await until(all_done)
            assert len(runs) == 2
        (held,) = inventory.items("reservations")
        assert held["status"] == "released" and held["releases"] == 1
        assert inventory.acts("reservations", "create") == 1
        assert inventory.acts("reservations", "release") == 1
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(30)
