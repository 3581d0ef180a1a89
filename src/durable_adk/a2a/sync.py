"""Tasks whose run ended while no worker watched: their end, published from the ledger.

A worker killed while a task is working leaves the task WORKING; recovery
(any worker's sweeper) finishes the run. :class:`TaskSync`, run by every
A2A worker, finds the open tasks whose newest run has ended (one query,
:meth:`~durable_adk.a2a_tables.tasks.A2aTable.to_sync`), rebuilds what the live
executor would have published from the invocation's stored events (ADK's
own converter and aggregator; the files the run saved that the task does
not show yet, :mod:`durable_adk.a2a.artifacts`) and saves the task's end with its events,
compare-and-swap on the version: a live writer that got there first wins and
the sync moves on. Subscribers on any worker read those events from the
stream (:class:`~durable_adk.a2a.stores.DurableEventStream`).

A task linked to an invocation that has no run ``orphan_grace`` seconds
later (the worker died between the link and the run's record) is failed
with a reason: nothing ran, and nothing will.

Runs that stop without ending leave their task open, and the sync says so
once each: a run parked by recovery (drift on a deploy, an unknown outcome)
is published as the live drive would (working, with the reason and what an
operator can do; the operator's retry, resolve, abandon or cancel then ends
the task through the same pass); a run asleep on a durable sleep alone is
working, saying when it wakes. A run recorded under a version no live worker
serves (a pinned deploy whose old workers are gone) is published working
with a message saying it waits for a worker of its version. A task waiting
for its client (input-required, auth-required) whose run was continued or
ended without it (the inbox's answer, a deadline's default, a job's result,
an operator's cancel) follows its run the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from a2a.auth.user import User
from a2a.server.cluster.task_store import ConcurrentTaskModificationError
from a2a.server.cluster.version import TaskVersion
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.types import Task, TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent
from google.adk.a2a.executor.config import A2aAgentExecutorConfig
from google.adk.a2a.executor.task_result_aggregator import TaskResultAggregator

from durable_adk import errors
from durable_adk.a2a import codec
from durable_adk.a2a.artifacts import saved_artifact_events, saved_deltas, shown_versions
from durable_adk.a2a.executor import (
    RUN_STATUS_KEY,
    TASK_ID_KEY,
    convert,
    ending_events,
    ids_metadata,
    invocation_view,
    sleeping_until,
    status_event,
)
from durable_adk.a2a.stores import DurableVersionedTaskStore
from durable_adk.a2a_tables.tasks import TaskToSync
from durable_adk.adk.runner import DurableRunner
from durable_adk.tables.versions import VersionTable

logger = logging.getLogger("durable_adk.a2a")


class _Owner(User):
    """A ServerCallContext user standing for the task's stored owner."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        return bool(self._name)

    @property
    def user_name(self) -> str:
        return self._name


def apply(task: Task, event: Event) -> None:
    """Applies a status or artifact update to the task, as the SDK's task manager does."""
    if isinstance(event, TaskStatusUpdateEvent):
        if task.status.HasField("message"):
            task.history.append(task.status.message)
        task.status.CopyFrom(event.status)
        for key, value in event.metadata.items():
            task.metadata[key] = value
    elif isinstance(event, TaskArtifactUpdateEvent):
        for i, artifact in enumerate(task.artifacts):
            if artifact.artifact_id == event.artifact.artifact_id:
                task.artifacts[i].CopyFrom(event.artifact)
                break
        else:
            task.artifacts.append(event.artifact)


class TaskSync:
    """Publishes the end of tasks whose run ended unwatched (see the module)."""

    def __init__(
        self,
        runner: DurableRunner,
        tasks: DurableVersionedTaskStore,
        *,
        active: set[str] | None = None,
        config: A2aAgentExecutorConfig | None = None,
        grace: float = 2.0,
        orphan_grace: float = 30.0,
        every: float = 1.0,
    ) -> None:
        """Binds the sync to the app's runner and task store.

        Args:
            runner: The app's DurableRunner (its ledger and sessions).
            tasks: The task store whose rows it ends.
            active: Tasks this process drives now (left to their drive).
            config: ADK's converters (as the executor's).
            grace: Seconds after a run's end before the sync takes its task
                (the live drive publishes its own end first).
            orphan_grace: Seconds a linked invocation may go without a run.
            every: Seconds between two passes of :meth:`run`.
        """
        self.runner = runner
        self.tasks = tasks
        self.active = active if active is not None else set()
        self.config = config or A2aAgentExecutorConfig()
        self.grace = grace
        self.orphan_grace = orphan_grace
        self.every = every

    async def once(self) -> int:
        """One pass; returns how many tasks it ended."""
        found = await self.tasks.table.to_sync(grace=self.grace, orphan_grace=self.orphan_grace)
        done = 0
        for item in found:
            if item.task.task_id in self.active:
                continue
            try:
                if await self._sync(item):
                    done += 1
            except errors.StoreError as exc:
                logger.warning("task %s: could not publish its end yet: %s", item.task.task_id, exc)
        return done + await self._waiting()

    async def _waiting(self) -> int:
        """Publishes, once each, the open tasks whose run waits for a worker of its version."""
        found = [
            item
            for item in await self.tasks.table.unheld(grace=self.grace)
            if item.task.task_id not in self.active
        ]
        if not found:
            return 0
        served = {
            info.version
            for info in await VersionTable(self.runner.store, self.runner.app_name).report()
            if info.own_workers or info.continued_by
        }
        done = 0
        for item in found:
            version = item.run.app_version
            if version is None or version in served or item.run.run_id is None:
                continue
            task = codec.task_from_text(item.task.body)
            event = status_event(
                task.id,
                task.context_id,
                TaskState.TASK_STATE_WORKING,
                text=f"waiting for a worker of version {version}: run {item.run.run_id} was "
                f"started by version {version} and no live worker serves it (the deploy "
                "rules: a run goes on only on a worker of its version or of one that "
                "declares it compatible)",
                metadata={
                    TASK_ID_KEY: task.id,
                    RUN_STATUS_KEY: item.run.status or "",
                    "durable_adk_run_id": item.run.run_id,
                    "durable_adk_invocation_id": item.run.invocation_id,
                },
            )
            try:
                if await self._publish(task, item.task.version, item.task.owner, [event]):
                    done += 1
            except errors.StoreError as exc:
                logger.warning("task %s: could not say it waits: %s", task.id, exc)
        return done

    async def run(self) -> None:
        """Passes every ``every`` seconds until cancelled."""
        while True:
            with contextlib.suppress(errors.StoreError):
                await self.once()
            await asyncio.sleep(self.every)

    async def _sync(self, item: TaskToSync) -> bool:
        task = codec.task_from_text(item.task.body)
        linked = item.run
        if linked.run_id is None:
            events: list[Event] = [
                status_event(
                    task.id,
                    task.context_id,
                    TaskState.TASK_STATE_FAILED,
                    text="the worker serving this task stopped before its run was recorded; "
                    "nothing ran: send the message again with a new message id",
                    metadata={TASK_ID_KEY: task.id},
                )
            ]
        else:
            run = await self.runner.ledger.get(linked.run_id)
            if run is None:
                return False
            aggregator, deltas = await self._replay(
                task, linked.user_id, linked.session_id, run.invocation_id
            )
            metadata = ids_metadata(task.id, run)
            events = ending_events(
                task.id,
                task.context_id,
                run,
                aggregator,
                metadata,
                wakes_at=await sleeping_until(self.tasks.table, run),
            )
            if events:
                saved = await saved_artifact_events(
                    self.runner.artifact_service,
                    app_name=self.runner.app_name,
                    user_id=linked.user_id,
                    session_id=linked.session_id,
                    task_id=task.id,
                    context_id=task.context_id,
                    deltas=deltas,
                    metadata=metadata,
                    shown=shown_versions(task),
                )
                events = [*saved, *events]
        if not events:
            return False
        if not await self._publish(task, item.task.version, item.task.owner, events):
            return False
        logger.info("task %s: published its end (%s)", task.id, codec.state_name(task.status.state))
        return True

    async def _publish(self, task: Task, stored: int, owner: str, events: list[Event]) -> bool:
        """Saves each event with the task it makes, compare-and-swap from version ``stored``."""
        version = TaskVersion(stored)
        context = ServerCallContext(user=_Owner(owner))
        for event in events:
            before = Task()
            before.CopyFrom(task)
            apply(task, event)
            try:
                version = await self.tasks.save(
                    task, event=event, prev=before, prev_version=version, context=context
                )
            except ConcurrentTaskModificationError:
                return False  # a live writer published first
        return True

    async def _replay(
        self, task: Task, user_id: str, session_id: str, invocation_id: str
    ) -> tuple[TaskResultAggregator, dict[str, int]]:
        """The aggregator of the invocation's last drive, from its stored events, and the
        newest version of each file the invocation saved.

        A drive starts at a user's event of the invocation (its message, or the
        answer that continued it: a client's, a job's, a sleep's wake-up), and
        the live drive's aggregator saw that drive's events alone; so the
        replay starts again at each, or a continued invocation would end with
        the question its pause asked instead of its answer.
        """
        aggregator = TaskResultAggregator()
        session = await self.runner.session_service.get_session(
            app_name=self.runner.app_name, user_id=user_id, session_id=session_id
        )
        if session is None:
            return aggregator, {}
        view = invocation_view(self.runner.app_name, user_id, session_id, invocation_id)
        mine = [
            event
            for event in session.events
            if event.invocation_id == invocation_id and event.author != "user"
        ]
        for event in session.events:
            if event.invocation_id != invocation_id:
                continue
            if event.author == "user":
                aggregator = TaskResultAggregator()
                continue
            for converted in convert(self.config, event, view, task.id, task.context_id):
                aggregator.process_event(converted)
        return aggregator, saved_deltas(mine)
