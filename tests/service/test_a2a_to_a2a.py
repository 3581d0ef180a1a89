"""``to_a2a(agent, db=...)`` under uvicorn: one call, durable tasks, a kill -9 mid-tool survived."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from a2a.types import GetTaskRequest, TaskState
from a2a_support import (
    a2a_client,
    answer_text,
    message,
    runs_of,
    send,
    start_to_a2a,
    wait_for_file,
)

from durable_adk.testing.fakes.process import FakeService

pytestmark = pytest.mark.timeout(240)


async def test_to_a2a_serves_durable_tasks_across_a_kill(
    store_url: str, tmp_path: Path, billing: FakeService
) -> None:
    go = tmp_path / "go"
    go.mkdir()
    env = {"DADK_BILLING_URL": billing.url, "DADK_GO_DIR": str(go)}
    first, base = start_to_a2a(store_url, env)
    try:
        async with a2a_client(base) as client:
            (go / "T0.go").write_text("go")
            done = await send(client, message("invoice T0"))
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            assert answer_text(done) == "T0 sent"
            task = await send(client, message("invoice T1"), return_immediately=True)
            await asyncio.to_thread(wait_for_file, go / "T1.reached")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    (go / "T1.go").write_text("go")
    second, base = start_to_a2a(store_url, env)
    try:
        async with a2a_client(base) as client:
            deadline = time.monotonic() + 60
            while True:
                got = await client.get_task(GetTaskRequest(id=task.id))
                if got.status.state == TaskState.TASK_STATE_COMPLETED:
                    break
                assert time.monotonic() < deadline, got.status
                await asyncio.sleep(0.3)
            assert answer_text(got) == "T1 sent"
    finally:
        second.terminate()
        second.wait(30)
    assert sorted(r.status.value for r in await runs_of(store_url)) == ["DONE", "DONE"]
    assert billing.acts("invoices", "create") == 2
