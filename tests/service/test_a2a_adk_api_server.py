"""``adk api_server --a2a`` (ADK's own server) with durable tasks: a kill -9 mid-tool survived.

ADK's server is started as a user starts it (the venv's ``adk`` command) on
an agents folder whose ``services.py`` registers the durable session and
task store URIs; the invoicer (``a2a_app``) is the folder's one app with an
``agent.json`` card. The server is SIGKILLed while the task's tool is
running; the next server on the same database recovers the run, the task
completes (``tasks/get`` with the A2A SDK's client), the billing service
counts one invoice, and the push config given with the message before the
kill gets its completed push once. Bad input is still answered with A2A's
error codes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types import GetTaskRequest, TaskState
from a2a_support import (
    Receiver,
    a2a_client,
    answer_text,
    free_port,
    message,
    meta,
    runs_of,
    send,
    stream,
    wait_for_file,
)
from google.protobuf.json_format import MessageToDict
from test_adk_server_runs import AdkServer

from durable_adk.a2a_tables.outbox import PushOutbox, PushRecord
from durable_adk.store import open_store
from durable_adk.testing.fakes.process import FakeService

pytestmark = pytest.mark.timeout(240)

HERE = Path(__file__).parent
SRC = HERE.parent.parent / "src"
APP = "invoicer"

SERVICES_PY = """
from durable_adk import ServerSettings, register_session_uris
from durable_adk.a2a.registry import register_task_store_uris

register_session_uris(settings=ServerSettings(lease=2.0, sweep_interval=0.2))
register_task_store_uris()
"""


def card(port: int) -> dict[str, Any]:
    """The app's agent.json, as an ADK user writes it for ``adk api_server --a2a``."""
    return {
        "name": APP,
        "description": "Sends invoices",
        "version": "1.0.0",
        "supportedInterfaces": [
            {
                "url": f"http://127.0.0.1:{port}/a2a/{APP}",
                "protocolBinding": "JSONRPC",
                "protocolVersion": "1.0",
            }
        ],
        "capabilities": {"streaming": True},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "invoice", "name": "invoice", "description": "sends", "tags": ["x"]}],
    }


@pytest.fixture
def agents(tmp_path: Path) -> Path:
    folder = tmp_path / "agents"
    (folder / APP).mkdir(parents=True)
    (folder / APP / "__init__.py").write_text("from . import agent\n")
    (folder / APP / "agent.py").write_text("from a2a_app import app\n\nroot_agent = app()\n")
    (folder / "services.py").write_text(SERVICES_PY)
    return folder


class ApiServer(AdkServer):
    """One ``adk api_server --a2a`` child process on the durable URI, ready once its
    agent card answers."""

    def __init__(self, agents: Path, store_url: str, env: dict[str, str], log: Path) -> None:
        port = free_port()
        (agents / APP / "agent.json").write_text(json.dumps(card(port)))
        self.a2a = f"http://127.0.0.1:{port}/a2a/{APP}"
        path = os.pathsep.join([str(SRC), str(HERE), os.environ.get("PYTHONPATH", "")])
        super().__init__(
            agents,
            store_url,
            {**os.environ, **env, "PYTHONPATH": path, "PYTHONWARNINGS": "ignore"},
            log,
            extra=("--a2a",),
            port=port,
            ready=f"/a2a/{APP}/.well-known/agent-card.json",
        )

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)


@pytest.fixture
def servers() -> Iterator[list[ApiServer]]:
    started: list[ApiServer] = []
    yield started
    for server in started:
        server.stop()


def _state(body: dict[str, Any]) -> str | None:
    for kind in ("statusUpdate", "task"):
        if kind in body:
            return str(body[kind]["status"]["state"])
    return None


async def _outbox(db: str) -> list[PushRecord]:
    async with open_store(db) as store:
        return await PushOutbox(store, APP).list_pushes()


def _rpc(url: str, body: Any) -> dict[str, Any]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    got = httpx.post(
        url,
        content=raw,
        headers={"Content-Type": "application/json", "A2A-Version": "1.0"},
        timeout=30,
    )
    assert got.status_code == 200, got.text
    answer: dict[str, Any] = got.json()
    return answer


async def test_adk_api_server_a2a_task_survives_a_kill_mid_tool_with_its_push(
    store_url: str,
    agents: Path,
    tmp_path: Path,
    billing: FakeService,
    receiver: Receiver,
    servers: list[ApiServer],
) -> None:
    go = tmp_path / "go"
    go.mkdir()
    env = {"DADK_BILLING_URL": billing.url, "DADK_GO_DIR": str(go)}
    first = ApiServer(agents, store_url, env, tmp_path / "first.log")
    servers.append(first)
    served = (
        await asyncio.to_thread(httpx.get, f"{first.a2a}/.well-known/agent-card.json", timeout=10)
    ).json()
    assert served["capabilities"]["pushNotifications"] is True, served  # told truly
    async with a2a_client(first.a2a, token=None) as client:
        task = await send(
            client, message("invoice K1"), return_immediately=True, push_url=receiver.url
        )
        await asyncio.to_thread(wait_for_file, go / "K1.reached")
    first.kill()
    assert billing.acts("invoices", "create") == 0
    [orphan] = await runs_of(store_url)
    assert orphan.status.value == "RUNNING"

    (go / "K1.go").write_text("go")
    second = ApiServer(agents, store_url, env, tmp_path / "second.log")
    servers.append(second)
    async with a2a_client(second.a2a, token=None) as client:
        deadline = time.monotonic() + 60
        while True:
            got = await client.get_task(GetTaskRequest(id=task.id))
            if got.status.state == TaskState.TASK_STATE_COMPLETED:
                break
            assert time.monotonic() < deadline, (got.status, second.output())
            await asyncio.sleep(0.3)
    assert answer_text(got) == "K1 sent"
    assert meta(got, "durable_adk_run_id") == orphan.run_id
    assert [r.status.value for r in await runs_of(store_url)] == ["DONE"]
    assert billing.acts("invoices", "create") == 1

    def completed() -> list[dict[str, Any]]:
        return [
            body
            for headers, body in receiver.received
            if _state(body) == "TASK_STATE_COMPLETED"
            and headers["Idempotency-Key"].startswith(f"{task.id}:")
        ]

    deadline = time.monotonic() + 30
    while not completed():
        assert time.monotonic() < deadline, (receiver.received, second.output())
        await asyncio.sleep(0.2)
    deadline = time.monotonic() + 30
    while {r.status for r in await _outbox(store_url)} != {"SENT"}:  # nothing left to send
        assert time.monotonic() < deadline, await _outbox(store_url)
        await asyncio.sleep(0.1)
    assert len(completed()) == 1
    assert all(h["X-A2A-Notification-Token"] == "t" for h, _ in receiver.received)

    # Bad input: A2A's error codes, nothing changed.
    unknown = _rpc(
        second.a2a,
        {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "no-such-task"}},
    )
    assert unknown["error"]["code"] == -32001, unknown
    malformed = _rpc(second.a2a, b"{not json")
    assert malformed["error"]["code"] == -32700, malformed
    for_done = _rpc(
        second.a2a,
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": "m-late",
                    "role": "ROLE_USER",
                    "taskId": task.id,
                    "contextId": task.context_id,
                    "parts": [{"text": "invoice K2"}],
                }
            },
        },
    )
    assert for_done["error"]["code"] == -32004, for_done
    assert billing.acts("invoices", "create") == 1
    assert [r.status.value for r in await runs_of(store_url)] == ["DONE"]

    # message/stream and a re-sent message id, through the same routes.
    (go / "K2.go").write_text("go")
    streamed = message("invoice K2")
    async with a2a_client(second.a2a, streaming=True, token=None) as client:
        responses = await stream(client, streamed)
        again = await send(client, streamed)  # the same message id: the task it started
    states = [_state(MessageToDict(r)) for r in responses]
    assert states[-1] == "TASK_STATE_COMPLETED", states
    assert again.id == responses[0].task.id
    assert again.status.state == TaskState.TASK_STATE_COMPLETED
    assert answer_text(again) == "K2 sent"
    assert billing.acts("invoices", "create") == 2
    assert len(await runs_of(store_url)) == 2
