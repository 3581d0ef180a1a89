"""Push notifications of ``durable-adk serve --a2a``: a durable outbox, sent after a crash.

The receiver is a real HTTP server on 127.0.0.1 that counts every request;
it answers 503 while it is down.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from a2a.types import TaskPushNotificationConfig, TaskState
from a2a_support import TOKEN, Receiver, a2a_client, cli, message, workers

from durable_adk.a2a_tables.outbox import PushOutbox, PushRecord
from durable_adk.a2a_tables.tasks import A2aTable
from durable_adk.store import open_store
from durable_adk.testing.fakes.process import FakeService

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver()
    try:
        yield started
    finally:
        started.close()


async def test_pushes_owed_by_a_killed_worker_reach_a_receiver_that_was_down(
    store_url: str, billing: FakeService, receiver: Receiver
) -> None:
    from a2a.types import SendMessageConfiguration, SendMessageRequest

    env = {"DADK_BILLING_URL": billing.url}
    with workers(store_url, env, "w1") as (w1,):
        async with a2a_client(w1.base_url) as client:
            got = await asyncio.to_thread(
                httpx.get, f"{w1.base_url}/.well-known/agent-card.json", timeout=10
            )
            card = got.json()
            assert card["capabilities"]["pushNotifications"] is True
            request = SendMessageRequest(
                message=message("invoice N1"),
                configuration=SendMessageConfiguration(
                    task_push_notification_config=TaskPushNotificationConfig(
                        url=receiver.url, token="client-token"
                    )
                ),
            )
            task = None
            async for response in client.send_message(request):
                if response.HasField("task"):
                    task = response.task
            assert task is not None and task.status.state == TaskState.TASK_STATE_COMPLETED
        deadline = time.monotonic() + 30
        while receiver.refused == 0:  # w1 tried, the receiver was down
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        w1.kill()
    receiver.down = False
    with workers(store_url, env, "w2") as (w2,):
        stored = await _event_versions(store_url, task.id)
        deadline = time.monotonic() + 60
        while _pushed(receiver, task.id) != stored:  # every stored event, at least once
            assert time.monotonic() < deadline, (_pushed(receiver, task.id), stored)
            await asyncio.sleep(0.2)
        assert any(_state(body) == "TASK_STATE_COMPLETED" for _, body in receiver.received)
        assert all(h["X-A2A-Notification-Token"] == "client-token" for h, _ in receiver.received)
        # the last push the receiver took is marked SENT just after (w2 still runs)
        deadline = time.monotonic() + 30
        while {r.status for r in await _outbox(store_url)} != {"SENT"}:
            assert time.monotonic() < deadline, await _outbox(store_url)
            await asyncio.sleep(0.1)
        # What an operator sees, the same on the database and through a worker
        # (whose one app needs no --app).
        by_url, refused, by_db, dead = await asyncio.to_thread(
            lambda: [
                _pushes_cli("--url", w2.base_url, "--token", TOKEN, "--status", "all"),
                _pushes_cli("--url", w2.base_url, "--token", TOKEN, "--status", "gone"),
                _pushes_cli("--app", "invoicer", "--db", store_url, "--status", "all"),
                _pushes_cli("--app", "invoicer", "--status", "dead", "--db", store_url),
            ]
        )
    items = json.loads(by_db.stdout)["items"]
    assert {(i["task_id"], i["status"]) for i in items} == {(task.id, "SENT")}, by_db.stderr
    assert json.loads(by_url.stdout) == json.loads(by_db.stdout), by_url.stderr
    assert refused.returncode == 2 and "--status takes" in refused.stdout + refused.stderr
    assert json.loads(dead.stdout)["items"] == []
    assert billing.acts("invoices", "create") == 1


def _pushes_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return cli("dead-letters", "pushes", "--json", *args)


def _state(body: dict[str, Any]) -> str | None:
    for kind in ("statusUpdate", "task"):
        if kind in body:
            return str(body[kind]["status"]["state"])
    return None


def _pushed(receiver: Receiver, task_id: str) -> set[int]:
    keys = [headers["Idempotency-Key"] for headers, _ in receiver.received]
    assert all(k.startswith(f"{task_id}:") for k in keys)
    return {int(k.split(":")[1]) for k in keys}


async def _event_versions(db: str, task_id: str) -> set[int]:
    async with open_store(db) as store:
        return {v for v, _ in await A2aTable(store, "invoicer").events_after(task_id, 0)}


async def _outbox(db: str) -> list[PushRecord]:
    async with open_store(db) as store:
        return await PushOutbox(store, "invoicer").list_pushes()
