"""The AgentExecutor that serves an A2A task as a durable run.

:class:`DurableA2aExecutor` converts the request with ADK's own A2A
converters (``A2aAgentExecutorConfig``: request, parts, events), then goes
through DurableRunner's one run path (DESIGN 3.9): the task is linked to the
invocation on the A2A tables, the run is put on the ledger (submitted while
it waits its turn in the session's queue), claimed (working), driven, and
its ending read back from the ledger decides the task's end
(:func:`ending_events`): DONE is completed (the last answer as the task's
artifact), PAUSED is input-required (auth-required for a credential
request), FAILED is failed, CANCELLED is canceled, a continuation the run
path refuses is rejected. A run handed back for recovery (a lost lease, a
transient fault) publishes nothing: the worker that finishes it, or the
task sync (:mod:`durable_adk.a2a.sync`), publishes the task's end.

The files the run saves (ADK's artifact service) become the task's
artifacts as they are saved (:mod:`durable_adk.a2a.artifacts`).

Ids: the context id is the session; the invocation the task drives is
recorded with it (``a2a_task_runs``); every status update carries
``durable_adk_run_id``, ``durable_adk_invocation_id`` and
``durable_adk_task_id`` in its metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue import Event, EventQueue
from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import InvalidParamsError
from google.adk.a2a.executor.config import A2aAgentExecutorConfig
from google.adk.a2a.executor.task_result_aggregator import TaskResultAggregator
from google.adk.events.event import Event as AdkEvent
from google.genai import types

from durable_adk import errors
from durable_adk.a2a.artifacts import saved_artifact_events, saved_deltas
from durable_adk.a2a_tables.tasks import A2aTable
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.runs.path import only_answers
from durable_adk.tables.ledger import Run, RunStatus

logger = logging.getLogger("durable_adk.a2a")

RUN_ID_KEY = "durable_adk_run_id"
INVOCATION_ID_KEY = "durable_adk_invocation_id"
TASK_ID_KEY = "durable_adk_task_id"
RUN_STATUS_KEY = "durable_adk_run_status"
WAKES_AT_KEY = "durable_adk_wakes_at"

REFUSED = (errors.InvocationCancelled, errors.Conflict, errors.InvalidArgument, errors.NotFound)
"""What the run path answers a continuation it will not take: the task is rejected."""


def _now() -> Any:
    from google.protobuf import timestamp_pb2  # type: ignore[import-untyped]

    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(datetime.now(UTC))
    return stamp


def status_event(
    task_id: str,
    context_id: str,
    state: Any,
    *,
    text: str | None = None,
    message: Message | None = None,
    metadata: dict[str, str] | None = None,
) -> TaskStatusUpdateEvent:
    """A status update; ``text`` becomes the agent's message when ``message`` is not given."""
    status = TaskStatus(state=state, timestamp=_now())
    if message is not None:
        status.message.CopyFrom(message)
    elif text:
        status.message.CopyFrom(
            Message(
                message_id=uuid.uuid4().hex,
                role=Role.ROLE_AGENT,
                task_id=task_id,
                context_id=context_id,
                parts=[Part(text=text)],
            )
        )
    return TaskStatusUpdateEvent(
        task_id=task_id, context_id=context_id, status=status, metadata=metadata or {}
    )


def ids_metadata(task_id: str, run: Run) -> dict[str, str]:
    """The ids a task update carries: its task, its run, its invocation."""
    return {TASK_ID_KEY: task_id, RUN_ID_KEY: run.run_id, INVOCATION_ID_KEY: run.invocation_id}


def invocation_view(app_name: str, user_id: str, session_id: str, invocation_id: str) -> Any:
    """What ADK's event converter reads of an invocation context (its ids and branch)."""
    return SimpleNamespace(
        app_name=app_name,
        user_id=user_id,
        session=SimpleNamespace(id=session_id),
        invocation_id=invocation_id,
        branch=None,
    )


def convert(
    config: A2aAgentExecutorConfig,
    event: AdkEvent,
    view: Any,
    task_id: str,
    context_id: str,
) -> list[Event]:
    """ADK's conversion of one ADK event into A2A events (intermediate states kept as working)."""
    found: Iterable[Event] = config.event_converter(
        event, view, task_id, context_id, config.gen_ai_part_converter
    )
    return list(found)


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


async def sleeping_until(table: A2aTable, run: Run) -> float | None:
    """When a PAUSED run that waits on durable sleeps alone wakes (None: it waits on more)."""
    if run.status is not RunStatus.PAUSED:
        return None
    waits = await table.pause_waits_on(
        user_id=run.user_id, session_id=run.session_id, invocation_id=run.invocation_id
    )
    return waits.wakes_at if waits.only_sleeps else None


def ending_events(
    task_id: str,
    context_id: str,
    run: Run,
    aggregator: TaskResultAggregator,
    metadata: dict[str, str],
    *,
    wakes_at: float | None = None,
) -> list[Event]:
    """The task's last events for the run's ending; empty while the run is not at an end.

    DONE: the answer as an artifact, then completed; PAUSED: input-required
    (auth-required for a credential request) with the question, but working
    when it waits on durable sleeps alone (``wakes_at``: nobody is asked
    anything, the run wakes by itself and the task sync publishes its end);
    FAILED: failed with the error; CANCELLED: canceled; PARKED: a working
    update saying an operator must look, with the reason (an operator's retry
    or resolve continues it, an abandon fails it, a cancel cancels it). Every
    update's metadata names the run's status (``durable_adk_run_status``).
    """
    status = run.status
    message = aggregator.task_status_message
    metadata = {**metadata, RUN_STATUS_KEY: status.value}
    if status is RunStatus.DONE:
        if aggregator.task_state == TaskState.TASK_STATE_FAILED:
            return [
                status_event(
                    task_id,
                    context_id,
                    TaskState.TASK_STATE_FAILED,
                    message=message,
                    metadata=metadata,
                )
            ]
        found: list[Event] = []
        if message is not None and message.parts:
            found.append(
                TaskArtifactUpdateEvent(
                    task_id=task_id,
                    context_id=context_id,
                    artifact=Artifact(
                        artifact_id=f"{run.invocation_id}-answer", parts=message.parts
                    ),
                    last_chunk=True,
                    metadata=metadata,
                )
            )
        found.append(
            status_event(task_id, context_id, TaskState.TASK_STATE_COMPLETED, metadata=metadata)
        )
        return found
    if status is RunStatus.PAUSED and wakes_at is not None:
        return [
            status_event(
                task_id,
                context_id,
                TaskState.TASK_STATE_WORKING,
                text=f"sleeping until {_when(wakes_at)} (a durable sleep): the run wakes by "
                "itself then and goes on; nothing is asked of you",
                metadata={**metadata, WAKES_AT_KEY: _when(wakes_at)},
            )
        ]
    if status is RunStatus.PAUSED:
        state = (
            TaskState.TASK_STATE_AUTH_REQUIRED
            if aggregator.task_state == TaskState.TASK_STATE_AUTH_REQUIRED
            else TaskState.TASK_STATE_INPUT_REQUIRED
        )
        return [status_event(task_id, context_id, state, message=message, metadata=metadata)]
    if status is RunStatus.FAILED:
        return [
            status_event(
                task_id,
                context_id,
                TaskState.TASK_STATE_FAILED,
                text=run.last_error or "the run failed",
                metadata=metadata,
            )
        ]
    if status is RunStatus.CANCELLED:
        return [status_event(task_id, context_id, TaskState.TASK_STATE_CANCELED, metadata=metadata)]
    if status is RunStatus.PARKED:
        return [
            status_event(
                task_id,
                context_id,
                TaskState.TASK_STATE_WORKING,
                text=f"parked for an operator (run {run.run_id}): "
                + (run.last_error or run.classification or "see durable-adk runs show")
                + "; an operator's retry or resolve continues it, abandon fails it, "
                "cancel cancels it",
                metadata=metadata,
            )
        ]
    return []


class DurableA2aExecutor(AgentExecutor):
    """Serves each A2A task as a durable run of ``runner`` (see the module)."""

    def __init__(
        self, runner: DurableRunner, *, config: A2aAgentExecutorConfig | None = None
    ) -> None:
        """Binds the executor to the runner whose runs its tasks are.

        Args:
            runner: The DurableRunner of the app (its store holds the tasks).
            config: ADK's converters (default: ADK's defaults).
        """
        self.runner = runner
        self.config = config or A2aAgentExecutorConfig()
        self.table = A2aTable(runner.store, runner.app_name)
        self.active: set[str] = set()
        """Tasks this process drives now (the task sync leaves them to it)."""
        self._cancelling: set[str] = set()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Runs the request's message as a durable run and publishes the task's updates."""
        message = context.message
        task_id, context_id = context.task_id, context.context_id
        if message is None or not task_id or not context_id:
            raise InvalidParamsError(message="an A2A request needs a message")
        if context.current_task is None:
            task = Task(
                id=task_id,
                context_id=context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED, timestamp=_now()),
            )
            task.history.append(message)
            await event_queue.enqueue_event(task)
        request = self.config.request_converter(context, self.config.a2a_part_converter)
        user_id = request.user_id or f"A2A_USER_{context_id}"
        session_id = request.session_id or context_id
        content = request.new_message
        if content is None or not content.parts:
            await event_queue.enqueue_event(
                status_event(
                    task_id,
                    context_id,
                    TaskState.TASK_STATE_REJECTED,
                    text="the message has no parts the agent reads",
                )
            )
            return
        self.active.add(task_id)
        try:
            await self._serve(task_id, context_id, user_id, session_id, content, event_queue)
        finally:
            self.active.discard(task_id)
            self._cancelling.discard(task_id)

    async def _serve(
        self,
        task_id: str,
        context_id: str,
        user_id: str,
        session_id: str,
        content: types.Content,
        queue: EventQueue,
    ) -> None:
        runner = self.runner
        try:
            run, content, resume = await self._submit(task_id, user_id, session_id, content)
        except REFUSED as exc:
            await queue.enqueue_event(
                status_event(task_id, context_id, TaskState.TASK_STATE_REJECTED, text=str(exc))
            )
            return
        metadata = ids_metadata(task_id, run)
        claimed = await runner.wait_for_turn(run)
        await queue.enqueue_event(
            status_event(task_id, context_id, TaskState.TASK_STATE_WORKING, metadata=metadata)
        )
        aggregator = TaskResultAggregator()
        view = invocation_view(runner.app_name, user_id, session_id, run.invocation_id)
        try:
            driven = runner.drive(claimed, content, resume=resume)
            async with contextlib.aclosing(driven) as events:
                async for event in events:
                    for converted in convert(self.config, event, view, task_id, context_id):
                        aggregator.process_event(converted)
                        await queue.enqueue_event(converted)
                    deltas = saved_deltas([event])
                    if deltas:
                        for update in await saved_artifact_events(
                            runner.artifact_service,
                            app_name=runner.app_name,
                            user_id=user_id,
                            session_id=session_id,
                            task_id=task_id,
                            context_id=context_id,
                            deltas=deltas,
                            metadata=metadata,
                        ):
                            await queue.enqueue_event(update)
        except errors.Fenced:
            logger.info(
                "task %s: run %s was taken over; its new owner ends it", task_id, run.run_id
            )
            return
        except asyncio.CancelledError:
            # The SDK stops this drive when the task was canceled elsewhere (its
            # save found the task CANCELED): the run is cancelled too, at once.
            await asyncio.shield(self._cancel_if_canceled(task_id))
            raise
        except errors.RunCancelled:
            pass
        except Exception:
            logger.warning(
                "task %s: the drive of run %s ended with an error",
                task_id,
                run.run_id,
                exc_info=True,
            )
        ended = await runner.ledger.get(run.run_id)
        if ended is None:
            return
        if ended.status is RunStatus.CANCELLED and task_id in self._cancelling:
            return  # cancel() publishes the canceled state
        wakes_at = await sleeping_until(self.table, ended)
        for event in ending_events(
            task_id, context_id, ended, aggregator, metadata, wakes_at=wakes_at
        ):
            await queue.enqueue_event(event)

    async def _cancel_if_canceled(self, task_id: str) -> None:
        """Cancels the task's runs when its stored state is CANCELED."""
        for owner_task in await self.table.tasks_state(task_id):
            if owner_task == "TASK_STATE_CANCELED":
                await cancel_task_runs(self.runner, self.table, task_id)
                return

    async def _submit(
        self, task_id: str, user_id: str, session_id: str, content: types.Content
    ) -> tuple[Run, types.Content, bool]:
        """Links the task to its invocation, then puts the run on the ledger."""
        path = self.runner.path
        if only_answers(content):
            invocation_id = await path.invocation_of_answers(user_id, session_id, content)
            await self.table.link_run(
                task_id, user_id=user_id, session_id=session_id, invocation_id=invocation_id
            )
            run, content = await path.submit(
                user_id=user_id, session_id=session_id, message=content, invocation_id=invocation_id
            )
            return run, content, True
        chosen = f"e-{uuid.uuid4()}"
        await path.ensure_session(user_id, session_id)
        await self.table.link_run(
            task_id, user_id=user_id, session_id=session_id, invocation_id=chosen
        )
        run, content = await path.submit(
            user_id=user_id, session_id=session_id, message=content, chosen_invocation_id=chosen
        )
        return run, content, False

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancels the task's runs (the run's cancel, from any worker), then says canceled."""
        task_id = context.task_id
        if not task_id:
            raise InvalidParamsError(message="tasks/cancel needs a task id")
        self._cancelling.add(task_id)
        await cancel_task_runs(self.runner, self.table, task_id)
        await event_queue.enqueue_event(
            status_event(task_id, context.context_id or "", TaskState.TASK_STATE_CANCELED)
        )


async def cancel_task_runs(runner: DurableRunner, table: A2aTable, task_id: str) -> None:
    """Cancels every run of the task that has not ended (each cancel is safe twice)."""
    for linked in await table.runs_of(task_id):
        if linked.run_id is None or linked.status in ("DONE", "FAILED", "CANCELLED"):
            continue
        try:
            outcome = await runner.cancel(
                linked.run_id, by="a2a", reason=f"tasks/cancel of task {task_id}"
            )
        except errors.NotFound:
            continue
        logger.info("task %s: cancel of run %s: %s", task_id, linked.run_id, outcome)
