"""Who may call ``durable-adk serve --a2a``: bearer tokens, and each caller's own tasks.

Issue 44, "a wrong owner": the A2A routes take the worker's token (the
caller with no name) or a named caller's (``--a2a-caller NAME=TOKEN``); a
call without one, or with a wrong one, is HTTP 401 and changes nothing
(rows counted); the card stays public and says a bearer token is needed.
One caller's tasks and push configs are not another's: not read, listed,
canceled, subscribed to or continued. Real workers, the SDK's own client
(its AuthInterceptor sends the token the card asks for), both backends.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from a2a.client.errors import A2AClientError
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError
from a2a_support import (
    TOKEN,
    Receiver,
    a2a_client,
    message,
    rows,
    runs_of,
    send,
    workers,
)

from durable_adk.testing.fakes.process import FakeService

pytestmark = pytest.mark.timeout(240)

ALICE = "alice-token-0001"
BOB = "bob-token-0002"
CALLERS = ("--a2a-caller", f"alice={ALICE}", "--a2a-caller", f"bob={BOB}")


async def test_a2a_calls_need_a_token_and_a_refused_call_changes_nothing(
    store_url: str, billing: FakeService, receiver: Receiver
) -> None:
    with workers(store_url, {"DADK_BILLING_URL": billing.url}, "w1", extra=CALLERS) as (w1,):
        # the card is public and says every call needs a bearer token
        got = await asyncio.to_thread(
            httpx.get, f"{w1.base_url}/.well-known/agent-card.json", timeout=10
        )
        assert got.status_code == 200
        card = got.json()
        assert list(card["securitySchemes"]) == ["bearer"]
        assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
        assert card["securityRequirements"] == [{"schemes": {"bearer": {}}}]
        before = await rows(store_url)
        for token in (None, "wrong-token-9999", f"{ALICE}x"):
            for streaming in (False, True):
                async with a2a_client(w1.base_url, token=token, streaming=streaming) as client:
                    with pytest.raises(A2AClientError, match="401"):
                        await send(client, message("invoice U1"), push_url=receiver.url)
                    with pytest.raises(A2AClientError, match="401"):
                        await client.get_task(GetTaskRequest(id="any"))
                    with pytest.raises(A2AClientError, match="401"):
                        await client.list_tasks(ListTasksRequest())
        # on the wire: 401 with a Bearer challenge, before the body is read
        async with httpx.AsyncClient(timeout=30) as http:
            bare = await http.post(
                f"{w1.base_url}/a2a",
                json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}},
                headers={"A2A-Version": "1.0"},
            )
            assert bare.status_code == 401
            assert bare.headers["WWW-Authenticate"].startswith("Bearer")
            assert bare.json()["error"]["message"].startswith("unauthorized")
            basic = await http.post(
                f"{w1.base_url}/a2a",
                content=b"{not json",
                headers={"Authorization": f"Basic {ALICE}"},
            )
            assert basic.status_code == 401
            # a named caller's token opens the A2A routes only, never the run API
            runs_api = await http.get(
                f"{w1.base_url}/v1/runs", headers={"Authorization": f"Bearer {ALICE}"}
            )
            assert runs_api.status_code == 401
        assert await rows(store_url) == before
        assert billing.acts("invoices", "create") == 0
        assert receiver.received == [] and receiver.refused == 0
        # the right tokens: the worker's and a named caller's
        for token in (TOKEN, ALICE):
            async with a2a_client(w1.base_url, token=token) as client:
                done = await send(client, message(f"invoice R{token[:3]}"))
                assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert billing.acts("invoices", "create") == 2
    # the named caller's run is ADK's user "alice"; the worker's token runs as A2A_USER_<context>
    users = sorted(r.user_id for r in await runs_of(store_url))
    assert users[0].startswith("A2A_USER_") and users[1] == "alice"


async def test_a_callers_tasks_and_push_configs_are_not_another_callers(
    store_url: str, billing: FakeService, receiver: Receiver
) -> None:
    env = {"DADK_BILLING_URL": billing.url}
    with workers(store_url, env, "w1", "w2", extra=CALLERS) as (w1, w2):
        async with a2a_client(w1.base_url, token=ALICE) as alice:
            done = await send(alice, message("invoice O1"), push_url=receiver.url)
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            asked = await send(alice, message("approve O2"))
            assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            (config,) = (
                await alice.list_task_push_notification_configs(
                    ListTaskPushNotificationConfigsRequest(task_id=done.id)
                )
            ).configs
            assert config.url == receiver.url
        before = await rows(store_url)
        # bob, and the worker's own token, on either worker: not found, nothing changed
        for base, token in ((w1.base_url, BOB), (w2.base_url, BOB), (w2.base_url, TOKEN)):
            async with (
                a2a_client(base, token=token) as other,
                a2a_client(base, token=token, streaming=True) as streaming,
            ):
                for task in (done, asked):
                    with pytest.raises(TaskNotFoundError):
                        await other.get_task(GetTaskRequest(id=task.id))
                    with pytest.raises(TaskNotFoundError):
                        await other.cancel_task(CancelTaskRequest(id=task.id))
                    with pytest.raises(TaskNotFoundError):
                        await other.list_task_push_notification_configs(
                            ListTaskPushNotificationConfigsRequest(task_id=task.id)
                        )
                    with pytest.raises(TaskNotFoundError):
                        await other.get_task_push_notification_config(
                            GetTaskPushNotificationConfigRequest(task_id=task.id, id=config.id)
                        )
                    with pytest.raises(TaskNotFoundError):
                        await other.delete_task_push_notification_config(
                            DeleteTaskPushNotificationConfigRequest(task_id=task.id, id=config.id)
                        )
                    with pytest.raises(TaskNotFoundError):
                        await other.create_task_push_notification_config(
                            TaskPushNotificationConfig(task_id=task.id, url=receiver.url)
                        )
                    with pytest.raises(TaskNotFoundError):
                        await send(
                            other,
                            message("approve O2", task_id=task.id, context_id=task.context_id),
                        )
                    with pytest.raises(TaskNotFoundError):
                        async for _ in streaming.subscribe(SubscribeToTaskRequest(id=asked.id)):
                            pass
                listed = await other.list_tasks(ListTasksRequest())
                assert {t.id for t in listed.tasks}.isdisjoint({done.id, asked.id})
        assert await rows(store_url) == before
        assert sorted(r.status.value for r in await runs_of(store_url)) == ["DONE", "PAUSED"]
        # alice, on the other worker, reads and cancels her own
        async with a2a_client(w2.base_url, token=ALICE) as alice:
            listed = await alice.list_tasks(ListTasksRequest())
            assert {t.id for t in listed.tasks} == {done.id, asked.id}
            got = await alice.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=done.id, id=config.id)
            )
            assert got.url == receiver.url
            canceled = await alice.cancel_task(CancelTaskRequest(id=asked.id))
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert sorted(r.status.value for r in await runs_of(store_url)) == ["CANCELLED", "DONE"]
    assert billing.acts("invoices", "create") == 1
