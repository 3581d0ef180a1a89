"""A2A tasks across deploys and durable sleeps, through ``durable-adk serve --a2a`` (issue 44).

Real worker processes of two versions on one database (both backends), the
A2A SDK's own client, a counting billing service for the outside act, real
SIGKILLs and SIGTERM drains. A version 1.0 worker holds a task whose tool
waits (``$DADK_GO_DIR``); a 2.0 worker starts beside it (a rolling deploy)
and 1.0 goes away. What the client sees follows the deploy rules
(docs/deploying.md): a compatible 2.0 finishes the task; a pinned 2.0 leaves
it working, saying it waits for a worker of 1.0; code that drifted parks the
run and the task says so until an operator's action ends it. A task whose run
sleeps (``durable_sleep``) is working until the run wakes, on any worker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2a.client.client import Client
from a2a.types import (
    GetTaskRequest,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a_support import (
    A2aWorker,
    Receiver,
    a2a_client,
    answer_text,
    cli,
    message,
    meta,
    runs_of,
    send,
    start_worker,
    wait_for_file,
    workers,
)

from durable_adk.effect_tables.jobs import JobTable
from durable_adk.store import open_store

pytestmark = pytest.mark.timeout(240)

V1 = ("--app-version", "1.0")
V2_COMPATIBLE = ("--app-version", "2.0", "--compatible-version", "1.0")
V2_PINNED = ("--app-version", "2.0")
DRIFTED_KEY = {"DADK_INVOICE_KEY": "invoice:{invoice_id}:v2"}
"""2.0's code keys send_invoice otherwise: a re-drive would act again under the new key."""


DB: list[str] = [""]


def _status_text(task: Task) -> str:
    return "".join(p.text for p in task.status.message.parts)


async def _until(client: Client, task_id: str, what: str, check: Any, within: float = 60.0) -> Task:
    """Polls tasks/get until ``check(task)``; fails naming ``what``."""
    deadline = time.monotonic() + within
    while True:
        got = await client.get_task(GetTaskRequest(id=task_id))
        if check(got):
            return got
        if time.monotonic() > deadline:
            runs = [(r.run_id, r.status.value, r.last_error) for r in await runs_of(DB[0])]
            raise AssertionError(f"not within {within} s: {what}; task: {got.status}; runs {runs}")
        await asyncio.sleep(0.2)


def _states(followed: list[Any]) -> list[int]:
    return [r.status_update.status.state for r in followed if r.HasField("status_update")]


@contextlib.contextmanager
def fleet(db: str, env: dict[str, str], **versions: tuple[str, ...]) -> Iterator[list[A2aWorker]]:
    """Starts workers of several versions side by side (name: its ``serve`` arguments)."""
    started: list[A2aWorker] = []
    try:
        with concurrent.futures.ThreadPoolExecutor(len(versions)) as pool:
            futures = [
                pool.submit(start_worker, db, name.replace("_", "-"), env, extra=args)
                for name, args in versions.items()
            ]
            for future in futures:
                started.append(future.result())
        yield started
    finally:
        with concurrent.futures.ThreadPoolExecutor(max(1, len(started))) as pool:
            list(pool.map(A2aWorker.stop, started))


async def _held_mid_tool(old: list[A2aWorker], go: Path, names: tuple[str, ...]) -> list[Task]:
    """Sends ``invoice N`` to each old worker in turn; returns once each is inside its tool."""
    tasks = []
    for worker, name in zip(old, names, strict=True):
        async with a2a_client(worker.base_url) as client:
            tasks.append(await send(client, message(f"invoice {name}"), return_immediately=True))
    for name in names:
        await asyncio.to_thread(wait_for_file, go / f"{name}.reached")
    return tasks


async def _kill_and_drain(killed: A2aWorker, drained: A2aWorker) -> None:
    """SIGKILL one old worker and SIGTERM (drain) the other, at the same time."""
    await asyncio.gather(asyncio.to_thread(killed.kill), asyncio.to_thread(drained.stop))
    assert drained.process.returncode == 0, "".join(drained.lines)


async def test_a_compatible_deploy_finishes_the_tasks_the_old_workers_held(
    store_url: str, tmp_path: Path, billing: Any
) -> None:
    """(a) Two 1.0 workers each hold a task mid-tool while 2.0 (declaring 1.0
    compatible) runs beside them; one 1.0 is SIGKILLed, the other drained with SIGTERM.
    2.0 recovers both runs and both tasks complete; a client resubscribed on 2.0 gets
    each ending once (no gap, no duplicate), and each invoice is sent once."""
    go = tmp_path / "go"
    go.mkdir()
    env = {"DADK_BILLING_URL": billing.url, "DADK_GO_DIR": str(go)}
    with fleet(store_url, env, w_1_0a=V1, w_1_0b=V1, w_2_0=V2_COMPATIBLE) as (a, b, new):
        tasks = await _held_mid_tool([a, b], go, ("D1", "D2"))
        async with a2a_client(new.base_url, streaming=True) as on_new:
            followed: dict[str, list[Any]] = {t.id: [] for t in tasks}

            async def follow(task_id: str) -> None:
                async for response in on_new.subscribe(SubscribeToTaskRequest(id=task_id)):
                    followed[task_id].append(response)

            followers = [asyncio.create_task(follow(t.id)) for t in tasks]
            await asyncio.sleep(0.5)  # subscribed: the task as it stands, then what follows
            await _kill_and_drain(a, b)
            for name in ("D1", "D2"):
                (go / f"{name}.go").write_text("go")
            await asyncio.wait_for(asyncio.gather(*followers), 60)
            for task, name in zip(tasks, ("D1", "D2"), strict=True):
                done = await on_new.get_task(GetTaskRequest(id=task.id))
                assert done.status.state == TaskState.TASK_STATE_COMPLETED, done.status
                assert answer_text(done) == f"{name} sent"
                states = _states(followed[task.id])
                assert states[-1] == TaskState.TASK_STATE_COMPLETED, states
                assert states.count(states[-1]) == 1, states
                arts = [r for r in followed[task.id] if r.HasField("artifact_update")]
                assert len(arts) == 1, followed[task.id]
    runs = await runs_of(store_url)
    assert sorted((r.status.value, r.owner, r.app_version) for r in runs) == [
        ("DONE", "w-2-0", "1.0"),
        ("DONE", "w-2-0", "1.0"),
    ]
    assert billing.acts("invoices", "create") == 2


async def test_a_pinned_deploy_leaves_the_tasks_waiting_for_their_version(
    store_url: str, tmp_path: Path, billing: Any
) -> None:
    """(b) 2.0 is pinned: once both 1.0 workers are gone (one SIGKILLed, one drained),
    their runs wait for a 1.0 worker; each task stays working with a status message
    saying so (on 2.0); a restarted 1.0 worker finishes both, each invoice sent once."""
    go = tmp_path / "go"
    go.mkdir()
    env = {"DADK_BILLING_URL": billing.url, "DADK_GO_DIR": str(go)}
    with fleet(store_url, env, w_1_0a=V1, w_1_0b=V1, w_2_0=V2_PINNED) as (a, b, new):
        tasks = await _held_mid_tool([a, b], go, ("P1", "P2"))
        await _kill_and_drain(a, b)
        for name in ("P1", "P2"):
            (go / f"{name}.go").write_text("go")
        async with a2a_client(new.base_url) as on_new:
            for task in tasks:
                waiting = await _until(
                    on_new,
                    task.id,
                    "the task says it waits for 1.0",
                    lambda t: "waiting for a worker of version 1.0" in _status_text(t),
                )
                assert waiting.status.state == TaskState.TASK_STATE_WORKING
                assert meta(waiting, "durable_adk_run_status") == "RUNNING"
            runs = await runs_of(store_url)
            assert [(r.status.value, r.app_version) for r in runs] == [("RUNNING", "1.0")] * 2
            assert billing.acts("invoices", "create") == 0  # 2.0 never drove them
            with fleet(store_url, env, w_1_0c=V1):
                for task, name in zip(tasks, ("P1", "P2"), strict=True):
                    done = await _until(
                        on_new,
                        task.id,
                        "the restarted 1.0 worker finishes it",
                        _ended(TaskState.TASK_STATE_COMPLETED),
                    )
                    assert answer_text(done) == f"{name} sent"
    runs = await runs_of(store_url)
    assert [(r.status.value, r.owner) for r in runs] == [("DONE", "w-1-0c")] * 2
    assert billing.acts("invoices", "create") == 2


async def test_drift_parks_the_task_truthfully_and_the_operator_ends_it(
    store_url: str, tmp_path: Path, billing: Any
) -> None:
    """(c) 2.0 declares 1.0 compatible but keys send_invoice otherwise: 2.0's recovery
    parks the four runs 1.0 left mid-tool. Each task stays working with the park's
    reason; then the operator's CLI moves each to its real end: abandon -> failed,
    cancel -> canceled; on a fixed deploy (2.1, 1.0's code), resolve -> completed and
    retry -> completed. The retried one's invoice is sent once, the others never."""
    go = tmp_path / "go"
    go.mkdir()
    env = {"DADK_BILLING_URL": billing.url, "DADK_GO_DIR": str(go)}
    names = ("F1", "F2", "F3", "F4")
    DB[0] = store_url
    with workers(store_url, env, "w-1.0", extra=V1) as (old,):
        async with a2a_client(old.base_url) as on_old:
            tasks = {
                n: await send(on_old, message(f"invoice {n}"), return_immediately=True)
                for n in names
            }
        for n in names:
            await asyncio.to_thread(wait_for_file, go / f"{n}.reached")
        old.kill()
    for n in names:
        (go / f"{n}.go").write_text("go")
    with workers(store_url, {**env, **DRIFTED_KEY}, "w-2.0", extra=V2_COMPATIBLE) as (new,):
        async with a2a_client(new.base_url) as on_new:
            parked = {
                n: await _until(
                    on_new,
                    tasks[n].id,
                    f"{n}'s task shows its park",
                    lambda t: meta(t, "durable_adk_run_status") == "PARKED",
                )
                for n in names
            }
            for task in parked.values():
                text = _status_text(task)
                assert task.status.state == TaskState.TASK_STATE_WORKING, task.status
                assert "parked for an operator" in text and "drift" in text, text
                assert "'invoice:{invoice_id}:v2'" in text, text
            runs = {n: meta(parked[n], "durable_adk_run_id") for n in names}
            assert all(runs.values()), runs
            assert billing.acts("invoices", "create") == 0
            db = ("--db", store_url, "--by", "ana")
            for args in (
                ("runs", "abandon", runs["F1"], "--reason", "sent by hand", *db),
                ("runs", "cancel", runs["F2"], *db),
            ):
                done = await asyncio.to_thread(cli, *args)
                assert done.returncode == 0, done.stdout + done.stderr
            failed = await _until(
                on_new, tasks["F1"].id, "abandon fails F1", _ended(TaskState.TASK_STATE_FAILED)
            )
            assert "sent by hand" in _status_text(failed), failed.status
            await _until(
                on_new, tasks["F2"].id, "cancel ends F2", _ended(TaskState.TASK_STATE_CANCELED)
            )
    # the fix is deployed (2.1: 1.0's code, declaring 1.0 compatible), 2.0 is gone
    fixed = ("--app-version", "2.1", "--compatible-version", "1.0")
    with workers(store_url, env, "w-2.1", extra=fixed) as (repaired,):
        for args in (
            ("runs", "resolve", runs["F3"], "--result", '{"invoice": "manual"}', *db),
            ("runs", "retry", runs["F4"], *db),
        ):
            done = await asyncio.to_thread(cli, *args)
            assert done.returncode == 0, done.stdout + done.stderr
        async with a2a_client(repaired.base_url) as on_fixed:
            for n in ("F3", "F4"):
                ended = await _until(
                    on_fixed,
                    tasks[n].id,
                    f"the operator's action completes {n}",
                    _ended(TaskState.TASK_STATE_COMPLETED),
                )
                assert answer_text(ended) == f"{n} sent"
            # each task's end is published once: no status after the terminal one
            for n, state in (
                ("F1", TaskState.TASK_STATE_FAILED),
                ("F2", TaskState.TASK_STATE_CANCELED),
                ("F3", TaskState.TASK_STATE_COMPLETED),
                ("F4", TaskState.TASK_STATE_COMPLETED),
            ):
                events = await _stored_states(store_url, tasks[n].id)
                assert events[-1] == state and events.count(state) == 1, (n, events)
    statuses = {r.invocation_id: r.status.value for r in await runs_of(store_url)}
    assert sorted(statuses.values()) == ["CANCELLED", "DONE", "DONE", "FAILED"], statuses
    assert billing.acts("invoices", "create") == 1  # F4 on the fixed code; F3 resolved by hand


def _ended(state: int) -> Any:
    return lambda t: t.status.state == state


async def _stored_states(db: str, task_id: str) -> list[int]:
    """The status states of the task's stored events, in order."""
    from a2a.types import StreamResponse
    from google.protobuf.json_format import Parse

    from durable_adk.a2a_tables.tasks import A2aTable

    async with open_store(db) as store:
        found = await A2aTable(store, "invoicer").events_after(task_id, 0)
    states = []
    for _, body in found:
        event = Parse(body, StreamResponse(), ignore_unknown_fields=True)
        if event.HasField("status_update"):
            states.append(event.status_update.status.state)
        elif event.HasField("task"):
            states.append(event.task.status.state)
    return states


async def _timer_of(db: str) -> str:
    async with open_store(db) as store:
        found = await JobTable(store).list_jobs()
    (timer,) = [j for j in found if j.job_id.startswith("sleep:")]
    return timer.job_id


async def test_a_sleeping_task_is_working_and_ends_once_on_another_worker(
    store_url: str, tmp_path: Path, billing: Any, receiver: Receiver
) -> None:
    """A tool sleeps for an hour (durable_sleep): the task is working while the run
    sleeps (nobody is asked anything; it is not input-required), saying when it wakes.
    The worker is SIGKILLed while the run sleeps; at its time another worker wakes the
    run and the task completes: the poller and the push receiver each see the end once."""
    env = {"DADK_BILLING_URL": billing.url}
    with workers(store_url, env, "w1", "w2") as (w1, w2):
        async with a2a_client(w1.base_url) as on_w1:
            request = SendMessageRequest(
                message=message("remind R1"),
                configuration=SendMessageConfiguration(
                    task_push_notification_config=TaskPushNotificationConfig(
                        url=receiver.url, token="client-token"
                    )
                ),
            )
            task = None
            async for response in on_w1.send_message(request):
                if response.HasField("task"):
                    task = response.task
            assert task is not None
        async with a2a_client(w2.base_url) as on_w2:
            asleep = await _until(
                on_w2, task.id, "the drive ends", lambda t: "durable_adk_run_status" in t.metadata
            )
        assert asleep.status.state == TaskState.TASK_STATE_WORKING, asleep.status
        assert "sleeping until" in _status_text(asleep), asleep.status
        assert meta(asleep, "durable_adk_run_status") == "PAUSED"
        assert meta(asleep, "durable_adk_wakes_at")
        (run,) = await runs_of(store_url)
        assert run.status.value == "PAUSED"
        w1.kill()
        async with a2a_client(w2.base_url) as on_w2:
            # still asleep on the other worker: working, nothing published for it again
            await asyncio.sleep(3)
            still = await on_w2.get_task(GetTaskRequest(id=task.id))
            assert still.status.state == TaskState.TASK_STATE_WORKING, still.status
            timer = await _timer_of(store_url)
            async with open_store(store_url) as store:
                await JobTable(store).backdate(timer, 3700)  # its time has come
            done = await _until(
                on_w2, task.id, "w2 wakes the run", _ended(TaskState.TASK_STATE_COMPLETED)
            )
            assert answer_text(done) == "R1 reminded"
            await asyncio.sleep(2)  # a later pass of w2's sync publishes nothing more
        states = await _stored_states(store_url, task.id)
        assert states[-1] == TaskState.TASK_STATE_COMPLETED, states
        assert states.count(TaskState.TASK_STATE_COMPLETED) == 1, states
        assert states.count(TaskState.TASK_STATE_INPUT_REQUIRED) == 0, states
        deadline = time.monotonic() + 30
        while not _pushed_ends(receiver, task.id):
            assert time.monotonic() < deadline, receiver.received
            await asyncio.sleep(0.2)
    assert len(_pushed_ends(receiver, task.id)) == 1, _pushed_ends(receiver, task.id)
    runs = await runs_of(store_url)
    assert sorted(r.status.value for r in runs) == ["DONE", "DONE"]  # the sleep's run, the wake's
    assert {r.invocation_id for r in runs} == {run.invocation_id}
    assert billing.acts("invoices", "create") == 0


def _pushed_ends(receiver: Receiver, task_id: str) -> set[str]:
    """The idempotency keys of the pushes telling the task completed (the receiver dedupes)."""
    found = set()
    for headers, body in receiver.received:
        update = body.get("statusUpdate") or {}
        if update.get("taskId") != task_id:
            continue
        if (update.get("status") or {}).get("state") == "TASK_STATE_COMPLETED":
            found.add(headers.get("Idempotency-Key", json.dumps(body)))
    return found
