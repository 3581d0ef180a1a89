"""The files a run saved (ADK's artifact service) as the A2A task's artifacts.

A tool's ``tool_context.save_artifact(filename, part)`` records
``{filename: version}`` in its event's ``actions.artifact_delta``. For each
such entry the task gets an artifact update (:func:`saved_artifact_events`):
the file loaded at that version from the runner's artifact service, as one
A2A part (text for ``text/*`` and text parts, the bytes with their media
type and file name otherwise, a URL for a file ADK keeps by reference).

One artifact per file name: its id is ``file:<filename>`` and its name the
file name; a new version of the file *replaces* it (``append`` false,
``last_chunk`` true: each version is whole, as ADK saves it), so a task
shows each file once, at its newest version, and the version is in the
artifact's metadata (``durable_adk_artifact_version``). The live drive
publishes each save as its event arrives; the task sync
(:mod:`durable_adk.a2a.sync`) publishes, from the invocation's stored
events, only the versions the task does not show yet, so a save published
before a crash is not published again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from a2a.types import Artifact, Part, Task, TaskArtifactUpdateEvent
from google.adk.artifacts.base_artifact_service import BaseArtifactService
from google.adk.events.event import Event as AdkEvent
from google.genai import types

ID_PREFIX = "file:"
VERSION_KEY = "durable_adk_artifact_version"


def artifact_id(filename: str) -> str:
    """The task artifact id of a saved file."""
    return f"{ID_PREFIX}{filename}"


def saved_deltas(events: Iterable[AdkEvent]) -> dict[str, int]:
    """The newest version of each file the events saved, in the order first saved."""
    found: dict[str, int] = {}
    for event in events:
        for filename, version in (event.actions.artifact_delta or {}).items():
            found[filename] = int(version)
    return found


def shown_versions(task: Task) -> dict[str, int]:
    """``{artifact id: version}`` of the saved files the task already shows."""
    shown: dict[str, int] = {}
    for artifact in task.artifacts:
        if artifact.artifact_id.startswith(ID_PREFIX) and VERSION_KEY in artifact.metadata:
            shown[artifact.artifact_id] = int(artifact.metadata[VERSION_KEY])
    return shown


def a2a_part(part: types.Part, filename: str) -> Part | None:
    """One saved file as an A2A part; None for a part that holds no file."""
    if part.text is not None:
        return Part(text=part.text, media_type="text/plain", filename=filename)
    if part.inline_data is not None and part.inline_data.data is not None:
        mime = part.inline_data.mime_type or "application/octet-stream"
        data = part.inline_data.data
        if mime.lower().startswith("text/"):
            return Part(
                text=data.decode("utf-8", errors="replace"), media_type=mime, filename=filename
            )
        return Part(raw=data, media_type=mime, filename=filename)
    if part.file_data is not None and part.file_data.file_uri:
        return Part(
            url=part.file_data.file_uri,
            media_type=part.file_data.mime_type or "application/octet-stream",
            filename=filename,
        )
    return None


async def saved_artifact_events(
    service: BaseArtifactService | None,
    *,
    app_name: str,
    user_id: str,
    session_id: str,
    task_id: str,
    context_id: str,
    deltas: Mapping[str, int],
    metadata: Mapping[str, str],
    shown: Mapping[str, int] | None = None,
) -> list[TaskArtifactUpdateEvent]:
    """The artifact updates of the files ``deltas`` saved (none shown at that version yet).

    Args:
        service: The runner's artifact service (None: no artifacts).
        app_name: The app.
        user_id: The run's ADK user.
        session_id: The run's session.
        task_id: The task.
        context_id: Its context.
        deltas: ``{filename: version}`` saved.
        metadata: The ids the update carries (task, run, invocation).
        shown: ``{artifact id: version}`` the task already shows (skipped).
    """
    if service is None:
        return []
    found: list[TaskArtifactUpdateEvent] = []
    for filename, version in deltas.items():
        if shown is not None and shown.get(artifact_id(filename)) == version:
            continue
        saved = await service.load_artifact(
            app_name=app_name,
            user_id=user_id,
            session_id=session_id,
            filename=filename,
            version=version,
        )
        part = None if saved is None else a2a_part(saved, filename)
        if part is None:
            continue
        artifact = Artifact(artifact_id=artifact_id(filename), name=filename, parts=[part])
        artifact.metadata.update({VERSION_KEY: version})
        found.append(
            TaskArtifactUpdateEvent(
                task_id=task_id,
                context_id=context_id,
                artifact=artifact,
                append=False,
                last_chunk=True,
                metadata=dict(metadata),
            )
        )
    return found
