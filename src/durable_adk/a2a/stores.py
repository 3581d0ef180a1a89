"""The SDK's stores on the runs' database: tasks, their event stream, push configs.

* :class:`DurableVersionedTaskStore` is the SDK 1.x ``VersionedTaskStore``
  (cluster mode): each save is a compare-and-swap on the task's version,
  raising ``ConcurrentTaskModificationError`` when another writer moved the
  task first; a move to CANCELED overwrites a task that is not terminal and
  cancels its run (:attr:`on_cancel`). The event that made a version is
  stored with it, in the same unit.
* :class:`DurableTaskStore` is the plain ``TaskStore`` over the same rows
  (the last save wins), for code that wants one.
* :class:`DurableEventStream` is the ``TaskEventStream``: ``subscribe(after=v)``
  reads the stored events newer than *v*, in version order, then waits for
  more (woken in this process, polled across processes), so a client
  resubscribing on any worker from the version it last saw misses nothing
  and sees nothing twice.
* :class:`DurablePushConfigStore` keeps push configs per owner
  (``get_info`` answers the caller's own; ``get_info_for_dispatch`` all),
  refusing a URL its policy refuses (:mod:`durable_adk.a2a.push_urls`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncGenerator, Awaitable, Callable

from a2a.server.cluster.event_stream import TaskEventStream, VersionedEvent
from a2a.server.cluster.task_store import (
    ConcurrentTaskModificationError,
    StoredTask,
    VersionedTaskStore,
)
from a2a.server.cluster.version import TaskVersion
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.tasks.push_notification_config_store import (
    PushNotificationConfigStore,
    normalize_push_notification_config,
)
from a2a.server.tasks.task_store import TaskStore
from a2a.types import (
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatusUpdateEvent,
)

from durable_adk import errors
from durable_adk.a2a import codec
from durable_adk.a2a.push_urls import PushUrlPolicy
from durable_adk.a2a_tables.tasks import TERMINAL_STATES, A2aTable, VersionConflict
from durable_adk.store.base import Store

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100

CancelHook = Callable[[str], Awaitable[None]]
"""Called with a task's id after a save moved it to CANCELED: cancels its run."""


def _version_of(version: TaskVersion) -> int:
    if version.is_missing:
        return 0
    return int(version._value)


class _Wakeups:
    """In-process wake-ups of the subscribers of a task (other processes poll)."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def event(self, task_id: str) -> asyncio.Event:
        return self._events.setdefault(task_id, asyncio.Event())

    def wake(self, task_id: str) -> None:
        found = self._events.pop(task_id, None)
        if found is not None:
            found.set()


_REMEMBERED = 4096
"""Tasks whose last stored event a store remembers (the SDK publishes it just after)."""


class DurableVersionedTaskStore(VersionedTaskStore):
    """The SDK's VersionedTaskStore on the runs' database (see the module)."""

    def __init__(self, store: Store, app_name: str, *, on_cancel: CancelHook | None = None) -> None:
        """Binds the store to the database and app.

        Args:
            store: The open durable store (the runs' database).
            app_name: The app whose tasks these are.
            on_cancel: Called with a task's id after a save moved it to
                CANCELED (the server cancels the task's run there).
        """
        self.table = A2aTable(store, app_name)
        self.on_cancel = on_cancel
        self.wakeups = _Wakeups()
        self.stored_events: dict[str, int] = {}
        """The version whose event this process's last save of a task stored (by task)."""

    async def save(
        self,
        task: Task,
        *,
        event: Event | None,
        prev: Task | None,
        prev_version: TaskVersion,
        context: ServerCallContext,
    ) -> TaskVersion:
        """Writes ``task`` if the stored version is ``prev_version`` (see the module)."""
        del prev
        state = codec.state_name(task.status.state)
        try:
            version = await self.table.save(
                task_id=task.id,
                owner=codec.owner_of(context),
                context_id=task.context_id,
                state=state,
                body=codec.task_to_text(task),
                prev_version=_version_of(prev_version),
                event=None if event is None else codec.event_to_text(event),
            )
        except VersionConflict as exc:
            raise ConcurrentTaskModificationError(task.id) from exc
        if event is not None:
            self.stored_events.pop(task.id, None)
            self.stored_events[task.id] = version
            if len(self.stored_events) > _REMEMBERED:
                del self.stored_events[next(iter(self.stored_events))]
        self.wakeups.wake(task.id)
        if state == "TASK_STATE_CANCELED" and self.on_cancel is not None:
            await self.on_cancel(task.id)
        return TaskVersion(version)

    async def get(self, task_id: str, context: ServerCallContext) -> StoredTask | None:
        """The caller's task with its version, or None."""
        found = await self.table.get(task_id, codec.owner_of(context))
        if found is None:
            return None
        return StoredTask(codec.task_from_text(found.body), TaskVersion(found.version))

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """One page of the caller's tasks, newest change first."""
        return await _list(self.table, params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Deletes the caller's task, its events and push configs."""
        await self.table.delete(task_id, codec.owner_of(context))


class DurableTaskStore(TaskStore):
    """The SDK's plain TaskStore on the same rows: the last save wins."""

    def __init__(self, store: Store, app_name: str) -> None:
        """Binds the store to the database and app."""
        self.table = A2aTable(store, app_name)

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Writes the task whatever its stored version (never another owner's)."""
        try:
            await self.table.save(
                task_id=task.id,
                owner=codec.owner_of(context),
                context_id=task.context_id,
                state=codec.state_name(task.status.state),
                body=codec.task_to_text(task),
                prev_version=0,
                event=None,
                force=True,
            )
        except VersionConflict as exc:
            raise errors.Conflict(f"task {task.id} belongs to another owner") from exc

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The caller's task, or None."""
        found = await self.table.get(task_id, codec.owner_of(context))
        return None if found is None else codec.task_from_text(found.body)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """One page of the caller's tasks, newest change first."""
        return await _list(self.table, params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Deletes the caller's task."""
        await self.table.delete(task_id, codec.owner_of(context))


async def _list(
    table: A2aTable, params: ListTasksRequest, context: ServerCallContext
) -> ListTasksResponse:
    from a2a.utils.errors import InvalidParamsError

    offset = 0
    if params.page_token:
        try:
            offset = int(json.loads(base64.urlsafe_b64decode(params.page_token))["o"])
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidParamsError(message="invalid page_token") from exc
    size = params.page_size or DEFAULT_PAGE_SIZE
    size = max(1, min(size, MAX_PAGE_SIZE))
    after = None
    if params.HasField("status_timestamp_after"):
        after = params.status_timestamp_after.ToNanoseconds() / 1e9
    found, total = await table.list_tasks(
        codec.owner_of(context),
        context_id=params.context_id or None,
        state=codec.state_name(params.status) if params.status else None,
        updated_after=after,
        limit=size,
        offset=offset,
    )
    token = ""
    if offset + len(found) < total:
        token = base64.urlsafe_b64encode(json.dumps({"o": offset + len(found)}).encode()).decode()
    return ListTasksResponse(
        tasks=[codec.task_from_text(t.body) for t in found],
        next_page_token=token,
        page_size=size,
        total_size=total,
    )


class DurableEventStream(TaskEventStream):
    """The SDK's TaskEventStream on the runs' database (see the module)."""

    def __init__(self, tasks: DurableVersionedTaskStore, *, poll: float = 0.25) -> None:
        """Reads the events ``tasks`` stores.

        Args:
            tasks: The versioned task store whose saves store the events.
            poll: Seconds between two reads when nothing woke this process.
        """
        self.tasks = tasks
        self.poll = poll

    async def publish(self, task_id: str, event: VersionedEvent) -> None:
        """Stores an event its save did not store, and wakes this process's subscribers.

        The SDK publishes each event right after the save that made its
        version; that save stored it in its own unit, so no statement is sent
        for it again.
        """
        version = _version_of(event.version)
        if version and self.tasks.stored_events.get(task_id) == version:
            del self.tasks.stored_events[task_id]
        else:
            text = codec.event_to_text(event.event)
            if version and text is not None:
                await self.tasks.table.publish(task_id, version, text)
        self.tasks.wakeups.wake(task_id)

    async def subscribe(
        self, task_id: str, *, after: TaskVersion
    ) -> AsyncGenerator[VersionedEvent, None]:
        """Yields the task's events newer than ``after``, in order, until it stops or ends."""
        seen = _version_of(after)
        while True:
            woken = self.tasks.wakeups.event(task_id)
            batch = await self.tasks.table.events_after(task_id, seen)
            for version, text in batch:
                seen = version
                event = codec.event_from_text(text)
                yield VersionedEvent(event=event, version=TaskVersion(version))
                if _ends(event):
                    return
            if batch:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), self.poll)

    async def destroy(self, task_id: str) -> None:
        """Nothing to release: the events stay with the task (retention purges them)."""
        self.tasks.wakeups.wake(task_id)


def _ends(event: Event) -> bool:
    if isinstance(event, Message):
        return True
    if isinstance(event, TaskStatusUpdateEvent | Task):
        return codec.state_name(event.status.state) in TERMINAL_STATES
    return False


class DurablePushConfigStore(PushNotificationConfigStore):
    """The SDK's PushNotificationConfigStore on the runs' database, owner-scoped."""

    def __init__(
        self, store: Store, app_name: str, *, push_urls: PushUrlPolicy | None = None
    ) -> None:
        """Binds the store to the database and app.

        Args:
            store: The open durable store (the runs' database).
            app_name: The app whose tasks these are.
            push_urls: The URLs a config may name (default: any http(s) URL
                without credentials, see :mod:`durable_adk.a2a.push_urls`).
        """
        self.table = A2aTable(store, app_name)
        self.push_urls = push_urls or PushUrlPolicy()

    async def set_info(
        self,
        task_id: str,
        notification_config: TaskPushNotificationConfig,
        context: ServerCallContext,
    ) -> TaskPushNotificationConfig:
        """Stores the caller's config for the task (same id: replaced) and returns it.

        Raises:
            a2a.utils.errors.InvalidParamsError: The URL is refused; nothing stored.
        """
        self.push_urls.check(notification_config.url)
        config = normalize_push_notification_config(task_id, notification_config)
        await self.table.set_push(
            task_id, codec.owner_of(context), config.id, codec.push_to_text(config)
        )
        return config

    async def get_info(
        self, task_id: str, context: ServerCallContext
    ) -> list[TaskPushNotificationConfig]:
        """The caller's configs of the task."""
        bodies = await self.table.get_push(task_id, codec.owner_of(context))
        return [codec.push_from_text(b) for b in bodies]

    async def get_info_for_dispatch(self, task_id: str) -> list[TaskPushNotificationConfig]:
        """Every config of the task, whoever registered it (the dispatch path)."""
        bodies = await self.table.push_for_dispatch(task_id)
        return [codec.push_from_text(b) for b in bodies]

    async def delete_info(
        self, task_id: str, context: ServerCallContext, config_id: str | None = None
    ) -> None:
        """Deletes the caller's config ``config_id`` of the task (None: all the caller's)."""
        await self.table.delete_push(task_id, codec.owner_of(context), config_id)


__all__ = [
    "DurableEventStream",
    "DurablePushConfigStore",
    "DurableTaskStore",
    "DurableVersionedTaskStore",
    "TaskState",
]
