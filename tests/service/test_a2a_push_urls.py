"""Push notification URLs are checked when a config is set: a refused one stores nothing.

Issue 44 (push notifications, bad input): only http/https, a host, no
credentials in the URL, at most 2048 characters, and with
``--a2a-push-hosts`` only the hosts listed. A refused URL is A2A's
InvalidParams (-32602) saying why, before the message id is taken or
anything runs (rows counted); a config stored before its host was taken off
the list is never sent to. Through ``durable-adk serve --a2a`` and
``to_a2a(agent, db=)`` (with ``callers=``: a call without the token is 401),
the SDK's own client, both backends.
"""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
from a2a.client.errors import A2AClientError
from a2a.types import (
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError
from a2a_support import (
    TOKEN,
    Receiver,
    a2a_client,
    message,
    rows,
    runs_of,
    send,
    start_to_a2a,
    workers,
)

from durable_adk.a2a_tables.outbox import PushOutbox, PushRecord
from durable_adk.store import open_store
from durable_adk.testing.fakes.process import FakeService

pytestmark = pytest.mark.timeout(240)

BAD = {
    "ftp://127.0.0.1/push": "scheme must be http or https",
    "file:///etc/passwd": "scheme must be http or https",
    "http:///push": "names no host",
    "http://alice:secret@127.0.0.1/push": "carries credentials",
    "http://token@127.0.0.1/push": "carries credentials",
    "http://127.0.0.1:99999/push": "cannot be parsed",
    "http://127.0.0.1/push?x=" + "a" * 2100: "more than 2048",
    "http://127.0.0.1/a b": "space",
    "": "needs a url|Validation failed",  # the SDK refuses a config without one first
}


async def _refused_everywhere(
    base: str, store_url: str, done: Task, *, also: dict[str, str]
) -> None:
    """Every bad URL, with a message (sent and streamed) and set on a task: refused, no row."""
    before = await rows(store_url)
    async with (
        a2a_client(base) as client,
        a2a_client(base, streaming=True) as streaming,
    ):
        for url, why in {**BAD, **also}.items():
            for each in (client, streaming):
                with pytest.raises(InvalidParamsError, match=why):
                    await send(each, message("invoice X1"), push_url=url)
            with pytest.raises(InvalidParamsError, match=why):
                await client.create_task_push_notification_config(
                    TaskPushNotificationConfig(task_id=done.id, url=url)
                )
    assert await rows(store_url) == before


async def test_serve_refuses_a_bad_push_url_and_keeps_to_its_push_hosts(
    store_url: str, billing: FakeService, receiver: Receiver
) -> None:
    env = {"DADK_BILLING_URL": billing.url}
    hosts = ("--a2a-push-hosts", "127.0.0.1,*.hooks.example")
    with workers(store_url, env, "w1", extra=hosts) as (w1,):
        async with a2a_client(w1.base_url) as client:
            done = await send(client, message("invoice H1"), push_url=receiver.url)
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
        not_listed = {
            "http://localhost/push": "host 'localhost' is not one",
            "https://hooks.example/push": "is not one",  # only hosts under it
            "https://a.hooks.example.evil/push": "is not one",
        }
        await _refused_everywhere(w1.base_url, store_url, done, also=not_listed)
        # a host under *.hooks.example is accepted (its delivery fails: no such host)
        async with a2a_client(w1.base_url) as client:
            config = await client.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=done.id, url="https://x.hooks.example/push")
            )
            assert config.url == "https://x.hooks.example/push"
        deadline = time.monotonic() + 30
        while not receiver.received:  # the listed host got its pushes
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
    assert billing.acts("invoices", "create") == 1


async def test_a_stored_push_url_off_the_list_is_never_sent_to(
    store_url: str, billing: FakeService, receiver: Receiver
) -> None:
    env = {"DADK_BILLING_URL": billing.url}
    receiver.down = True
    with workers(store_url, env, "w1") as (w1,):
        async with a2a_client(w1.base_url) as client:
            done = await send(client, message("invoice H2"), push_url=receiver.url)
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
        deadline = time.monotonic() + 30
        while receiver.refused == 0:  # w1 tried; the receiver was down
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        w1.kill()
    tried = receiver.refused
    receiver.down = False
    # the next worker pushes to another host only: the owed pushes go DEAD, unsent
    with workers(store_url, env, "w2", extra=("--a2a-push-hosts", "hooks.example")):
        deadline = time.monotonic() + 60
        while {p.status for p in await _outbox(store_url)} != {"DEAD"}:
            assert time.monotonic() < deadline, await _outbox(store_url)
            await asyncio.sleep(0.2)
    dead = await _outbox(store_url)
    assert all("not one this server pushes to" in (p.last_error or "") for p in dead)
    assert receiver.received == [] and receiver.refused == tried


async def test_to_a2a_refuses_a_bad_push_url_and_keeps_to_its_push_hosts(
    store_url: str, billing: FakeService, receiver: Receiver
) -> None:
    env = {
        "DADK_BILLING_URL": billing.url,
        "DADK_A2A_PUSH_HOSTS": "127.0.0.1",
        "DADK_A2A_CALLERS": f"carol={TOKEN}",  # to_a2a(callers=): the token is carol's
    }
    process, base = start_to_a2a(store_url, env)
    try:
        before = await rows(store_url)
        async with a2a_client(base, token=None) as anonymous:
            with pytest.raises(A2AClientError, match="401"):
                await send(anonymous, message("invoice H3"), push_url=receiver.url)
        assert await rows(store_url) == before
        async with a2a_client(base) as client:
            done = await send(client, message("invoice H3"), push_url=receiver.url)
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            again = await send(client, message("invoice H4", context_id=done.context_id))
            assert again.status.state == TaskState.TASK_STATE_COMPLETED
        await _refused_everywhere(
            base, store_url, done, also={"http://localhost/push": "is not one"}
        )
        deadline = time.monotonic() + 30
        while not receiver.received:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    assert billing.acts("invoices", "create") == 2
    assert {r.user_id for r in await runs_of(store_url)} == {"carol"}


async def _outbox(db: str) -> list[PushRecord]:
    async with open_store(db) as store:
        return await PushOutbox(store, "invoicer").list_pushes()
