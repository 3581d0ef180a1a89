"""A durable caller (DurableRemoteA2aAgent) and a durable served agent (serve --a2a), end to end.

The served worker is SIGKILLed in the middle of the task's tool and started
again at the same address: the caller, still waiting, sees the same task
complete; the message was sent once, the invoice made once.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from a2a_support import TOKEN, runs_of, start_worker, wait_for_file

from children import spawn
from durable_adk.a2a_tables.tasks import A2aTable
from durable_adk.store import open_store
from durable_adk.testing.fakes.process import FakeService

CALLER = Path(__file__).parents[1] / "crash" / "a2a_caller.py"
pytestmark = pytest.mark.timeout(240)


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_caller_waits_through_a_kill_of_the_served_worker_and_the_work_happens_once(
    store_url: str, tmp_path: Path, billing: FakeService
) -> None:
    go = tmp_path / "go"
    go.mkdir()
    env = {"DADK_BILLING_URL": billing.url, "DADK_GO_DIR": str(go)}
    port = _port()
    served = start_worker(store_url, "served-1", env, port=port)
    caller = spawn(
        [sys.executable, str(CALLER), "run", store_url, "s1",
         f"http://127.0.0.1:{port}/.well-known/agent-card.json"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore", "DADK_A2A_TOKEN": TOKEN},
    )  # fmt: skip
    restarted = None
    try:
        # the caller's message says "research tides, please": the invoicer invoices "please"
        await asyncio.to_thread(wait_for_file, go / "please.reached")
        served.kill()
        (go / "please.go").write_text("go")
        restarted = start_worker(store_url, "served-2", env, port=port)
        out, _ = await asyncio.to_thread(caller.communicate, timeout=120)
        assert caller.returncode == 0, out
        assert "ANSWER please sent" in out, out
    finally:
        if caller.poll() is None:
            caller.kill()
            caller.wait(30)
        if restarted is not None:
            restarted.stop()
        served.stop()
    (run,) = await runs_of(store_url)  # one run on the served side: one message
    assert run.status.value == "DONE" and run.owner == "served-2"
    async with open_store(store_url) as store:
        assert len(await A2aTable(store, "invoicer").tasks_of_invocation(run.invocation_id)) == 1
    assert billing.acts("invoices", "create") == 1
