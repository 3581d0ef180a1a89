"""``durable-adk serve --a2a``: A2A tasks as durable runs, through the SDK's own client.

Real worker processes on 127.0.0.1 (both backends), a counting billing
service for the outside act, real SIGKILLs. Each test says the case of
issue 44 it reproduces.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types import (
    GetTaskRequest,
    Message,
    Part,
    Role,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import UnsupportedOperationError
from a2a_support import (
    TOKEN,
    a2a_client,
    answer_text,
    cli,
    message,
    meta,
    runs_of,
    send,
    stream,
    wait_for_file,
    workers,
)
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value

from durable_adk.testing.fakes.process import FakeService

pytestmark = pytest.mark.timeout(240)


async def test_a_task_is_a_run_and_a_resent_message_id_starts_nothing(
    store_url: str, tmp_path: Path, billing: FakeService
) -> None:
    with workers(store_url, {"DADK_BILLING_URL": billing.url}, "w1") as (w1,):
        async with a2a_client(w1.base_url) as client:
            first = message("invoice A1")
            task = await send(client, first)
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert answer_text(task) == "A1 sent"
            run_id = meta(task, "durable_adk_run_id")
            invocation_id = meta(task, "durable_adk_invocation_id")
            (run,) = await runs_of(store_url)
            assert (run.run_id, run.invocation_id, run.session_id) == (
                run_id,
                invocation_id,
                task.context_id,
            )
            assert run.status.value == "DONE"
            # the run names its task: durable-adk runs show
            shown = await asyncio.to_thread(
                cli, "runs", "show", run.run_id, "--db", store_url, "--json"
            )
            assert json.loads(shown.stdout)["a2a_tasks"] == [task.id], shown.stderr
            # the same message id again: the task it started, nothing run again
            again = await send(client, first)
            assert again.id == task.id and again.status.state == TaskState.TASK_STATE_COMPLETED
            assert len(await runs_of(store_url)) == 1
            assert billing.acts("invoices", "create") == 1
            got = await client.get_task(GetTaskRequest(id=task.id))
            assert got.status.state == TaskState.TASK_STATE_COMPLETED
            assert answer_text(got) == "A1 sent"
        # a second turn in the same context, streamed: submitted, working, the answer, completed
        async with a2a_client(w1.base_url, streaming=True) as client:
            events = await stream(client, message("invoice A2", context_id=task.context_id))
            states = [e.status_update.status.state for e in events if e.HasField("status_update")]
            assert states[-1] == TaskState.TASK_STATE_COMPLETED
            assert TaskState.TASK_STATE_WORKING in states
            artifacts = [e.artifact_update for e in events if e.HasField("artifact_update")]
            assert [p.text for a in artifacts for p in a.artifact.parts] == ["A2 sent"]
        runs = await runs_of(store_url)
        assert len(runs) == 2 and {r.session_id for r in runs} == {task.context_id}
        assert billing.acts("invoices", "create") == 2


async def test_a_worker_killed_mid_tool_its_task_ends_on_another_worker(
    store_url: str, tmp_path: Path, billing: FakeService
) -> None:
    go = tmp_path / "go"
    go.mkdir()
    env = {"DADK_BILLING_URL": billing.url, "DADK_GO_DIR": str(go)}
    with workers(store_url, env, "w1", "w2") as (w1, w2):
        async with (
            a2a_client(w1.base_url) as on_w1,
            a2a_client(w2.base_url, streaming=True) as on_w2,
        ):
            task = await send(on_w1, message("invoice K1"), return_immediately=True)
            await asyncio.to_thread(wait_for_file, go / "K1.reached")
            seen = await on_w2.get_task(GetTaskRequest(id=task.id))
            assert seen.status.state == TaskState.TASK_STATE_WORKING
            # w2 follows the task from where it stands; w1 dies in the middle of the tool
            followed: list[object] = []
            subscribed = asyncio.Event()

            async def follow() -> None:
                async for response in on_w2.subscribe(SubscribeToTaskRequest(id=task.id)):
                    followed.append(response)
                    subscribed.set()

            follower = asyncio.create_task(follow())
            # w2 answers the subscribe with the task as it stands: then it follows
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(subscribed.wait(), 0.5)
            w1.kill()
            (go / "K1.go").write_text("go")
            await asyncio.wait_for(follower, 60)
            done = await on_w2.get_task(GetTaskRequest(id=task.id))
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            assert answer_text(done) == "K1 sent"
    states = [
        r.status_update.status.state
        for r in followed
        if r.HasField("status_update")  # type: ignore[attr-defined]
    ]
    assert states[-1] == TaskState.TASK_STATE_COMPLETED and len(states) == len(set(states))
    arts = [r for r in followed if r.HasField("artifact_update")]  # type: ignore[attr-defined]
    assert len(arts) == 1
    (run,) = await runs_of(store_url)
    assert run.status.value == "DONE" and run.owner == "w2" and run.attempts >= 2
    assert billing.acts("invoices", "create") == 1


async def test_cancel_from_another_worker_stops_the_run_before_it_acts(
    store_url: str, tmp_path: Path, billing: FakeService
) -> None:
    go = tmp_path / "go"
    go.mkdir()
    env = {"DADK_BILLING_URL": billing.url, "DADK_GO_DIR": str(go)}
    with workers(store_url, env, "w1", "w2") as (w1, w2):
        async with a2a_client(w1.base_url) as on_w1, a2a_client(w2.base_url) as on_w2:
            task = await send(on_w1, message("slow invoice C1"), return_immediately=True)
            await asyncio.to_thread(wait_for_file, go / "C1.reached")
            cancelled = await on_w2.cancel_task(_cancel(task.id))
            assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
            # the step under way may finish (cancel_grace); the act after it is refused
            await asyncio.sleep(1.0)
            (go / "C1.go").write_text("go")
            deadline = time.monotonic() + 30
            while (await runs_of(store_url))[0].status.value != "CANCELLED":
                assert time.monotonic() < deadline, "".join([*w1.lines, "----\n", *w2.lines])
                await asyncio.sleep(0.2)
            for client in (on_w1, on_w2):
                seen = await client.get_task(GetTaskRequest(id=task.id))
                assert seen.status.state == TaskState.TASK_STATE_CANCELED, await _events(
                    store_url, task.id
                )
            # a message for the canceled task is refused, and nothing runs
            with pytest.raises(UnsupportedOperationError):
                late = message("invoice C1", task_id=task.id, context_id=task.context_id)
                await send(on_w2, late)
    assert billing.acts("invoices", "create") == 0
    assert [r.status.value for r in await runs_of(store_url)] == ["CANCELLED"]


async def _events(db: str, task_id: str) -> str:
    from durable_adk.a2a_tables.tasks import A2aTable
    from durable_adk.store import open_store

    async with open_store(db) as store:
        found = await A2aTable(store, "invoicer").events_after(task_id, 0)
    return "\n".join(f"{v}: {b[:300]}" for v, b in found)


def _cancel(task_id: str):  # type: ignore[no-untyped-def]
    from a2a.types import CancelTaskRequest

    return CancelTaskRequest(id=task_id)


async def test_bad_input_gets_the_a2a_error_and_changes_nothing(
    store_url: str, tmp_path: Path, billing: FakeService
) -> None:
    with workers(store_url, {"DADK_BILLING_URL": billing.url}, "w1") as (w1,):
        async with a2a_client(w1.base_url) as client:
            done = await send(client, message("invoice B1"))
        rpc = f"{w1.base_url}/a2a"
        before = len(await runs_of(store_url))
        async with httpx.AsyncClient(
            timeout=30, headers={"Authorization": f"Bearer {TOKEN}"}
        ) as http:

            async def call(body: object, **kwargs: object) -> httpx.Response:
                return await http.post(rpc, json=body, headers={"A2A-Version": "1.0"}, **kwargs)  # type: ignore[arg-type]

            unknown = await call(
                {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "no-such"}}
            )
            assert unknown.json()["error"]["code"] == -32001  # TaskNotFoundError
            malformed = await http.post(
                rpc, content=b"{not json", headers={"Content-Type": "application/json"}
            )
            assert malformed.json()["error"]["code"] == -32700  # JSON parse error
            no_method = await call({"jsonrpc": "2.0", "id": 2, "method": "NoSuch", "params": {}})
            assert no_method.json()["error"]["code"] == -32601
            too_big = await http.post(
                rpc, content=b"x" * 70_000, headers={"Content-Type": "application/json"}
            )
            assert too_big.status_code == 413
            to_done = await call(
                {
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "SendMessage",
                    "params": {
                        "message": {
                            "messageId": "late-1",
                            "role": "ROLE_USER",
                            "taskId": done.id,
                            "contextId": done.context_id,
                            "parts": [{"text": "invoice B2"}],
                        }
                    },
                }
            )
            assert "error" in to_done.json(), to_done.json()
        assert len(await runs_of(store_url)) == before
        assert billing.acts("invoices", "create") == 1


def _confirmation_call(task: Task) -> dict[str, Any]:
    """The adk_request_confirmation call the input-required task asks about."""
    for part in task.status.message.parts:
        if part.HasField("data"):
            data = MessageToDict(part.data)
            if data.get("name") == "adk_request_confirmation":
                return dict(data)
    raise AssertionError(f"no confirmation asked in {task.status}")


def _confirm(task: Task, call: dict[str, Any], message_id: str) -> Message:
    data = Value()
    ParseDict({"id": call["id"], "name": call["name"], "response": {"confirmed": True}}, data)
    return Message(
        message_id=message_id,
        role=Role.ROLE_USER,
        task_id=task.id,
        context_id=task.context_id,
        parts=[Part(data=data, metadata={"adk_type": "function_response"})],
    )


async def test_input_required_is_answered_once_across_a_restart(
    store_url: str, tmp_path: Path, billing: FakeService
) -> None:
    env = {"DADK_BILLING_URL": billing.url}
    with workers(store_url, env, "w1") as (w1,):
        async with a2a_client(w1.base_url) as client:
            asked = await send(client, message("approve P1"))
        assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        call = _confirmation_call(asked)
        w1.kill()
    assert [r.status.value for r in await runs_of(store_url)] == ["PAUSED"]
    with workers(store_url, env, "w2") as (w2,):
        async with a2a_client(w2.base_url) as client:
            answer = _confirm(asked, call, "answer-1")
            done = await send(client, answer)
            assert done.id == asked.id
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            assert answer_text(done) == "P1 approved"
            # the same answer again (its message id taken): the task as it stands
            again = await send(client, answer)
            assert again.id == asked.id
            assert again.status.state == TaskState.TASK_STATE_COMPLETED
    runs = await runs_of(store_url)
    assert sorted(r.status.value for r in runs) == ["DONE", "DONE"]
    assert {r.invocation_id for r in runs} == {meta(asked, "durable_adk_invocation_id")}
    assert billing.acts("invoices", "create") == 1


async def test_a_second_message_while_the_context_works_queues_as_the_next_turn(
    store_url: str, tmp_path: Path, billing: FakeService
) -> None:
    go = tmp_path / "go"
    go.mkdir()
    env = {"DADK_BILLING_URL": billing.url, "DADK_GO_DIR": str(go)}
    with workers(store_url, env, "w1") as (w1,):
        async with a2a_client(w1.base_url) as client:
            first = await send(client, message("slow invoice Q1"), return_immediately=True)
            await asyncio.to_thread(wait_for_file, go / "Q1.reached")
            second = await send(
                client, message("invoice Q2", context_id=first.context_id), return_immediately=True
            )
            assert second.id != first.id
            waiting = await client.get_task(GetTaskRequest(id=second.id))
            assert waiting.status.state == TaskState.TASK_STATE_SUBMITTED
            assert sorted(r.status.value for r in await runs_of(store_url)) == [
                "QUEUED",
                "RUNNING",
            ]
            (go / "Q1.go").write_text("go")
            (go / "Q2.go").write_text("go")
            for task, answer in ((first, "Q1 sent"), (second, "Q2 sent")):
                deadline = time.monotonic() + 60
                while True:
                    got = await client.get_task(GetTaskRequest(id=task.id))
                    if got.status.state == TaskState.TASK_STATE_COMPLETED:
                        break
                    assert time.monotonic() < deadline, got.status
                    await asyncio.sleep(0.2)
                assert answer_text(got) == answer
    assert [r.status.value for r in await runs_of(store_url)] == ["DONE", "DONE"]
    assert billing.acts("invoices", "create") == 2


async def test_auth_and_input_required_tasks_are_canceled_with_their_runs(
    store_url: str, tmp_path: Path, billing: FakeService
) -> None:
    env = {"DADK_BILLING_URL": billing.url}
    with workers(store_url, env, "w1", "w2") as (w1, w2):
        async with a2a_client(w1.base_url) as on_w1, a2a_client(w2.base_url) as on_w2:
            auth = await send(on_w1, message("ledger L1"))
            assert auth.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
            asked = await send(on_w1, message("approve P2"))
            assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            call = _confirmation_call(asked)
            assert sorted(r.status.value for r in await runs_of(store_url)) == [
                "PAUSED",
                "PAUSED",
            ]
            for task in (auth, asked):
                done = await on_w2.cancel_task(_cancel(task.id))
                assert done.status.state == TaskState.TASK_STATE_CANCELED
            assert [r.status.value for r in await runs_of(store_url)] == [
                "CANCELLED",
                "CANCELLED",
            ]
            # the answer after the cancel is refused and acts on nothing
            with pytest.raises(UnsupportedOperationError):
                await send(on_w1, _confirm(asked, call, "late-answer"))
            got = await on_w1.get_task(GetTaskRequest(id=asked.id))
            assert got.status.state == TaskState.TASK_STATE_CANCELED
    assert billing.acts("invoices", "create") == 0


async def test_sigterm_mid_task_drains_the_a2a_drive_and_another_worker_ends_it(
    store_url: str, tmp_path: Path, billing: FakeService
) -> None:
    go = tmp_path / "go"
    go.mkdir()
    env = {"DADK_BILLING_URL": billing.url, "DADK_GO_DIR": str(go)}
    with workers(store_url, env, "w1", "w2") as (w1, w2):
        async with a2a_client(w1.base_url) as on_w1:
            task = await send(on_w1, message("invoice G1"), return_immediately=True)
        await asyncio.to_thread(wait_for_file, go / "G1.reached")
        await asyncio.to_thread(w1.stop)  # SIGTERM: the drive gets drain_seconds, then hands back
        assert w1.process.returncode == 0
        assert "the store is closed" not in "".join(w1.lines), "".join(w1.lines)
        (go / "G1.go").write_text("go")
        async with a2a_client(w2.base_url) as on_w2:
            deadline = time.monotonic() + 60
            while True:
                got = await on_w2.get_task(GetTaskRequest(id=task.id))
                if got.status.state == TaskState.TASK_STATE_COMPLETED:
                    break
                assert time.monotonic() < deadline, got.status
                await asyncio.sleep(0.3)
            assert answer_text(got) == "G1 sent"
    (run,) = await runs_of(store_url)
    assert run.status.value == "DONE" and run.owner == "w2"
    assert billing.acts("invoices", "create") == 1


async def test_an_input_required_task_follows_answers_and_cancels_made_outside_a2a(
    store_url: str, tmp_path: Path, billing: FakeService
) -> None:
    """A task waits for its client (input-required), but the pause is answered by an
    operator through the inbox (the CLI through the worker), or the run is cancelled
    with `runs cancel`: the task follows its run (completed, canceled), each once."""
    from a2a_support import TOKEN

    from durable_adk.store import open_store
    from durable_adk.tables.interrupts import InterruptTable

    env = {"DADK_BILLING_URL": billing.url}
    with workers(store_url, env, "w1") as (w1,):
        async with a2a_client(w1.base_url) as client:
            answered = await send(client, message("approve P7"))
            cancelled = await send(client, message("approve P8"))
            for task in (answered, cancelled):
                assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            async with open_store(store_url) as store:
                (interrupt,) = await InterruptTable(store).list_interrupts(
                    session_id=answered.context_id
                )
            by_inbox = await asyncio.to_thread(
                cli, "interrupts", "answer", interrupt.call_id, "--approve", "--by", "ana",
                "--url", w1.base_url, "--token", TOKEN,
            )  # fmt: skip
            assert by_inbox.returncode == 0, by_inbox.stdout + by_inbox.stderr
            run_id = meta(cancelled, "durable_adk_run_id")
            by_cli = await asyncio.to_thread(
                cli, "runs", "cancel", run_id, "--by", "ana", "--db", store_url
            )
            assert by_cli.returncode == 0, by_cli.stdout + by_cli.stderr
            for task, state in (
                (answered, TaskState.TASK_STATE_COMPLETED),
                (cancelled, TaskState.TASK_STATE_CANCELED),
            ):
                deadline = time.monotonic() + 30
                while True:
                    got = await client.get_task(GetTaskRequest(id=task.id))
                    if got.status.state == state:
                        break
                    assert time.monotonic() < deadline, got.status
                    await asyncio.sleep(0.2)
            done = await client.get_task(GetTaskRequest(id=answered.id))
            assert answer_text(done) == "P7 approved"
            await asyncio.sleep(2.5)  # the sync's later passes publish nothing more
            for task in (answered, cancelled):
                ends = [
                    line
                    for line in (await _events(store_url, task.id)).splitlines()
                    if "TASK_STATE_COMPLETED" in line or "TASK_STATE_CANCELED" in line
                ]
                assert len(ends) == 1, ends
    assert sorted(r.status.value for r in await runs_of(store_url)) == [
        "CANCELLED",
        "DONE",
        "DONE",
    ]
    assert billing.acts("invoices", "create") == 1
