"""The A2A stores on both backends: versions, events from a version, owners, message ids, push.

Driven through the SDK's own interfaces (VersionedTaskStore, TaskEventStream,
PushNotificationConfigStore) with the SDK's own values, against the rows.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from a2a.auth.user import User
from a2a.server.cluster.event_stream import VersionedEvent
from a2a.server.cluster.task_store import ConcurrentTaskModificationError
from a2a.server.cluster.version import TaskVersion
from a2a.server.context import ServerCallContext
from a2a.types import (
    ListTasksRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

from durable_adk.a2a.stores import (
    DurableEventStream,
    DurablePushConfigStore,
    DurableTaskStore,
    DurableVersionedTaskStore,
)
from durable_adk.a2a_tables.tasks import A2aTable
from durable_adk.store import Store


class Named(User):
    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._name


ALICE = ServerCallContext(user=Named("alice"))
BOB = ServerCallContext(user=Named("bob"))


def task(task_id: str, state: int, context_id: str = "ctx") -> Task:
    return Task(id=task_id, context_id=context_id, status=TaskStatus(state=state))


def status(task_id: str, state: int) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(task_id=task_id, context_id="ctx", status=TaskStatus(state=state))


async def test_a_save_is_a_compare_and_swap_on_the_version(store: Store) -> None:
    tasks = DurableVersionedTaskStore(store, "app")
    first = await tasks.save(
        task("t1", TaskState.TASK_STATE_SUBMITTED),
        event=task("t1", TaskState.TASK_STATE_SUBMITTED),
        prev=None,
        prev_version=TaskVersion.MISSING,
        context=ALICE,
    )
    working = await tasks.save(
        task("t1", TaskState.TASK_STATE_WORKING),
        event=status("t1", TaskState.TASK_STATE_WORKING),
        prev=None,
        prev_version=first,
        context=ALICE,
    )
    assert working.is_after(first)
    # a second first write, and a write from the old version: refused, nothing written
    for stale in (TaskVersion.MISSING, first):
        with pytest.raises(ConcurrentTaskModificationError):
            await tasks.save(
                task("t1", TaskState.TASK_STATE_COMPLETED),
                event=status("t1", TaskState.TASK_STATE_COMPLETED),
                prev=None,
                prev_version=stale,
                context=ALICE,
            )
    stored = await tasks.get("t1", ALICE)
    assert stored is not None and stored.version == working
    assert stored.task.status.state == TaskState.TASK_STATE_WORKING
    events = await A2aTable(store, "app").events_after("t1", 0)
    assert [v for v, _ in events] == [1, 2]


async def test_a_cancel_overwrites_a_live_task_but_not_an_ended_one(store: Store) -> None:
    cancelled: list[str] = []

    async def on_cancel(task_id: str) -> None:
        cancelled.append(task_id)

    tasks = DurableVersionedTaskStore(store, "app", on_cancel=on_cancel)
    v1 = await tasks.save(
        task("t1", TaskState.TASK_STATE_WORKING),
        event=None,
        prev=None,
        prev_version=TaskVersion.MISSING,
        context=ALICE,
    )
    # a cancel from another replica that read no version: it wins over a live task
    await tasks.save(
        task("t1", TaskState.TASK_STATE_CANCELED),
        event=status("t1", TaskState.TASK_STATE_CANCELED),
        prev=None,
        prev_version=TaskVersion.MISSING,
        context=ALICE,
    )
    assert cancelled == ["t1"]
    # the live writer's next save from v1 is refused, from the new version too (a
    # terminal task is never written again); a second cancel too
    with pytest.raises(ConcurrentTaskModificationError):
        await tasks.save(
            task("t1", TaskState.TASK_STATE_COMPLETED),
            event=None,
            prev=None,
            prev_version=v1,
            context=ALICE,
        )
    with pytest.raises(ConcurrentTaskModificationError):
        await tasks.save(
            task("t1", TaskState.TASK_STATE_CANCELED),
            event=None,
            prev=None,
            prev_version=TaskVersion.MISSING,
            context=ALICE,
        )
    now = await tasks.get("t1", ALICE)
    assert now is not None
    with pytest.raises(ConcurrentTaskModificationError):
        await tasks.save(
            task("t1", TaskState.TASK_STATE_WORKING),
            event=None,
            prev=None,
            prev_version=now.version,
            context=ALICE,
        )
    assert cancelled == ["t1"]
    stored = await tasks.get("t1", ALICE)
    assert stored is not None and stored.task.status.state == TaskState.TASK_STATE_CANCELED


async def test_another_owner_neither_reads_nor_writes_nor_lists(store: Store) -> None:
    tasks = DurableVersionedTaskStore(store, "app")
    await tasks.save(
        task("t1", TaskState.TASK_STATE_WORKING),
        event=None,
        prev=None,
        prev_version=TaskVersion.MISSING,
        context=ALICE,
    )
    assert await tasks.get("t1", BOB) is None
    assert await DurableTaskStore(store, "other-app").get("t1", ALICE) is None
    for version in (TaskVersion.MISSING, TaskVersion(1)):
        with pytest.raises(ConcurrentTaskModificationError):
            await tasks.save(
                task("t1", TaskState.TASK_STATE_CANCELED),
                event=None,
                prev=None,
                prev_version=version,
                context=BOB,
            )
    await tasks.delete("t1", BOB)
    assert (await tasks.list(ListTasksRequest(), BOB)).total_size == 0
    listed = await tasks.list(ListTasksRequest(), ALICE)
    assert [t.id for t in listed.tasks] == ["t1"]
    assert listed.tasks[0].status.state == TaskState.TASK_STATE_WORKING


async def test_list_pages_and_filters(store: Store) -> None:
    tasks = DurableTaskStore(store, "app")
    for i in range(5):
        state = TaskState.TASK_STATE_COMPLETED if i % 2 else TaskState.TASK_STATE_WORKING
        await tasks.save(task(f"t{i}", state, context_id=f"c{i % 2}"), ALICE)
    page = await tasks.list(ListTasksRequest(page_size=2), ALICE)
    seen = [t.id for t in page.tasks]
    assert page.total_size == 5 and len(seen) == 2 and page.next_page_token
    while page.next_page_token:
        page = await tasks.list(
            ListTasksRequest(page_size=2, page_token=page.next_page_token), ALICE
        )
        seen += [t.id for t in page.tasks]
    assert sorted(seen) == [f"t{i}" for i in range(5)]
    done = await tasks.list(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED), ALICE)
    assert sorted(t.id for t in done.tasks) == ["t1", "t3"]
    in_c0 = await tasks.list(ListTasksRequest(context_id="c0"), ALICE)
    assert sorted(t.id for t in in_c0.tasks) == ["t0", "t2", "t4"]


async def test_a_subscriber_from_a_version_sees_every_later_event_once(store: Store) -> None:
    tasks = DurableVersionedTaskStore(store, "app")
    stream = DurableEventStream(tasks, poll=0.05)
    version = await tasks.save(
        task("t1", TaskState.TASK_STATE_SUBMITTED),
        event=task("t1", TaskState.TASK_STATE_SUBMITTED),
        prev=None,
        prev_version=TaskVersion.MISSING,
        context=ALICE,
    )
    version = await tasks.save(
        task("t1", TaskState.TASK_STATE_WORKING),
        event=status("t1", TaskState.TASK_STATE_WORKING),
        prev=None,
        prev_version=version,
        context=ALICE,
    )
    got: list[VersionedEvent] = []

    async def follow() -> None:
        async with contextlib.aclosing(stream.subscribe("t1", after=TaskVersion(1))) as events:
            async for event in events:
                got.append(event)

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0.1)
    # a publish of an event its save stored already changes nothing
    await stream.publish(
        "t1", VersionedEvent(event=status("t1", TaskState.TASK_STATE_WORKING), version=version)
    )
    await tasks.save(
        task("t1", TaskState.TASK_STATE_COMPLETED),
        event=status("t1", TaskState.TASK_STATE_COMPLETED),
        prev=None,
        prev_version=version,
        context=ALICE,
    )
    await asyncio.wait_for(follower, 10)  # the stream ends at the terminal state
    assert [e.version for e in got] == [TaskVersion(2), TaskVersion(3)]
    assert [e.event.status.state for e in got] == [  # type: ignore[union-attr]
        TaskState.TASK_STATE_WORKING,
        TaskState.TASK_STATE_COMPLETED,
    ]


async def test_the_publish_after_a_save_sends_no_statement_and_others_are_stored(
    store: Store,
) -> None:
    """The SDK publishes each event just after the save that stored it: no second write.
    An event no save of this process stored (another replica's) is stored by the publish."""
    tasks = DurableVersionedTaskStore(store, "app")
    stream = DurableEventStream(tasks, poll=0.05)
    version = await tasks.save(
        task("t2", TaskState.TASK_STATE_WORKING),
        event=status("t2", TaskState.TASK_STATE_WORKING),
        prev=None,
        prev_version=TaskVersion.MISSING,
        context=ALICE,
    )
    sent: list[str] = []
    inner = store.fetch

    async def counting(query: str, params: object = None) -> object:
        sent.append(query)
        return await inner(query, params)  # type: ignore[arg-type]

    store.fetch = counting  # type: ignore[assignment,method-assign]
    try:
        await stream.publish(
            "t2", VersionedEvent(event=status("t2", TaskState.TASK_STATE_WORKING), version=version)
        )
        assert sent == []
        # published again (its memory of the save spent): stored if missing, never twice
        later = TaskVersion(int(version._value) + 1)
        other = status("t2", TaskState.TASK_STATE_INPUT_REQUIRED)
        for event, at in ((status("t2", TaskState.TASK_STATE_WORKING), version), (other, later)):
            await stream.publish("t2", VersionedEvent(event=event, version=at))
        assert sent == ["a2a_event_publish", "a2a_event_publish"]
    finally:
        del store.fetch
    found = await tasks.table.events_after("t2", 0)
    assert [v for v, _ in found] == [1, 2]
    assert "TASK_STATE_WORKING" in found[0][1] and "INPUT_REQUIRED" in found[1][1]


async def test_a_message_id_is_taken_once_per_context_and_owner(store: Store) -> None:
    table = A2aTable(store, "app")
    first = await table.claim_message(owner="alice", context_id="c", message_id="m", task_id="t1")
    again = await table.claim_message(owner="alice", context_id="c", message_id="m", task_id="t2")
    other_context = await table.claim_message(
        owner="alice", context_id="d", message_id="m", task_id="t3"
    )
    other_owner = await table.claim_message(
        owner="bob", context_id="c", message_id="m", task_id="t4"
    )
    assert first.taken and first.task_id == "t1"
    assert not again.taken and again.task_id == "t1"
    assert other_context.taken and other_owner.taken
    # a re-send naming its own task (a continuation) is still told it was taken
    resent = await table.claim_message(owner="alice", context_id="c", message_id="m", task_id="t1")
    assert not resent.taken


async def test_push_configs_are_the_owners_own_and_all_go_to_dispatch(store: Store) -> None:
    configs = DurablePushConfigStore(store, "app")
    mine = await configs.set_info(
        "t1", TaskPushNotificationConfig(url="http://127.0.0.1:1/a", token="tok-a"), ALICE
    )
    assert mine.id == "t1" and mine.task_id == "t1"
    await configs.set_info(
        "t1", TaskPushNotificationConfig(id="b", url="http://127.0.0.1:1/b"), BOB
    )
    assert [c.url for c in await configs.get_info("t1", ALICE)] == ["http://127.0.0.1:1/a"]
    assert [c.id for c in await configs.get_info("t1", BOB)] == ["b"]
    assert sorted(c.url for c in await configs.get_info_for_dispatch("t1")) == [
        "http://127.0.0.1:1/a",
        "http://127.0.0.1:1/b",
    ]
    await configs.delete_info("t1", BOB, "t1")  # not Bob's: nothing goes
    assert len(await configs.get_info_for_dispatch("t1")) == 2
    await configs.delete_info("t1", ALICE)
    assert [c.id for c in await configs.get_info_for_dispatch("t1")] == ["b"]


async def test_a_save_owes_a_push_per_config_and_the_outbox_retries_then_gives_up(
    store: Store,
) -> None:
    from durable_adk.a2a_tables.outbox import PushOutbox

    configs = DurablePushConfigStore(store, "app")
    await configs.set_info(
        "t1", TaskPushNotificationConfig(url="http://127.0.0.1:9/x", token="tok"), ALICE
    )
    tasks = DurableVersionedTaskStore(store, "app")
    v1 = await tasks.save(
        task("t1", TaskState.TASK_STATE_SUBMITTED),
        event=task("t1", TaskState.TASK_STATE_SUBMITTED),
        prev=None,
        prev_version=TaskVersion.MISSING,
        context=ALICE,
    )
    # a refused save owes nothing
    with pytest.raises(ConcurrentTaskModificationError):
        await tasks.save(
            task("t1", TaskState.TASK_STATE_WORKING),
            event=status("t1", TaskState.TASK_STATE_WORKING),
            prev=None,
            prev_version=TaskVersion.MISSING,
            context=ALICE,
        )
    await tasks.save(
        task("t1", TaskState.TASK_STATE_WORKING),
        event=status("t1", TaskState.TASK_STATE_WORKING),
        prev=None,
        prev_version=v1,
        context=ALICE,
    )
    outbox = PushOutbox(store, "app")
    taken = await outbox.claim(lease=30)
    assert [(p.version, p.attempts) for p in taken] == [(1, 1), (2, 1)]
    assert taken[0].idempotency_key == "t1:1:t1"
    assert await outbox.claim(lease=30) == []  # leased: nobody else takes them
    await outbox.sent(taken[0])
    await outbox.failed(taken[1], error="HTTP 503", backoff=0, max_attempts=2)
    (again,) = await outbox.claim(lease=30)
    assert (again.version, again.attempts) == (2, 2)
    await outbox.failed(again, error="HTTP 503", backoff=0, max_attempts=2)
    assert await outbox.claim(lease=30) == []
    listed = {(r.version, r.status, r.last_error) for r in await outbox.list_pushes()}
    assert listed == {(1, "SENT", None), (2, "DEAD", "HTTP 503")}
    assert [r.version for r in await outbox.list_pushes(status="DEAD")] == [2]
