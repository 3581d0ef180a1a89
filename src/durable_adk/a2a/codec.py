"""The SDK's protobuf values as the text the tables keep, and who owns a request.

Bodies are protobuf JSON (the SDK's own wire form), so a task written by one
worker reads back the same on another. An event is kept as a
``StreamResponse`` (one of task, message, status update, artifact update).
"""

from __future__ import annotations

from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.types import (
    Message,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatusUpdateEvent,
)
from google.protobuf.json_format import MessageToJson, Parse  # type: ignore[import-untyped]


def owner_of(context: ServerCallContext | None) -> str:
    """The owner a request reads and writes as: the authenticated user's name, else ''."""
    if context is None:
        return ""
    user = context.user
    if user is None or not user.is_authenticated:
        return ""
    return str(user.user_name)


def state_name(state: int) -> str:
    """``TASK_STATE_WORKING`` for the enum value."""
    return str(TaskState.Name(state))


def task_to_text(task: Task) -> str:
    """A Task as stored text."""
    return str(MessageToJson(task, indent=None))


def task_from_text(text: str) -> Task:
    """A stored Task."""
    found: Task = Parse(text, Task())
    return found


def event_to_text(event: Event) -> str | None:
    """An event as a stored StreamResponse; None for what is not an A2A event."""
    wrapped = StreamResponse()
    if isinstance(event, Task):
        wrapped.task.CopyFrom(event)
    elif isinstance(event, Message):
        wrapped.message.CopyFrom(event)
    elif isinstance(event, TaskStatusUpdateEvent):
        wrapped.status_update.CopyFrom(event)
    elif isinstance(event, TaskArtifactUpdateEvent):
        wrapped.artifact_update.CopyFrom(event)
    else:
        return None
    return str(MessageToJson(wrapped, indent=None))


def event_from_text(text: str) -> Event:
    """A stored StreamResponse as the event it holds."""
    wrapped = Parse(text, StreamResponse())
    kind = wrapped.WhichOneof("payload")
    found: Any = getattr(wrapped, kind or "task")
    return found  # type: ignore[no-any-return]


def push_to_text(config: TaskPushNotificationConfig) -> str:
    """A push config as stored text."""
    return str(MessageToJson(config, indent=None))


def push_from_text(text: str) -> TaskPushNotificationConfig:
    """A stored push config."""
    found: TaskPushNotificationConfig = Parse(text, TaskPushNotificationConfig())
    return found
