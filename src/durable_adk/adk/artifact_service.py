"""DurableArtifactService: ADK's artifacts in the durable store, every version kept.

What it guarantees:

* An artifact saved by a tool or callback is committed to the same database as
  the session before ``save_artifact`` returns, so a run recovered on another
  worker loads what its earlier steps saved.
* Every version is kept (0, 1, 2, ...); ``load_artifact`` without a version
  reads the latest. File names starting with ``user:`` are user-scoped (shared
  by the user's sessions), as in ADK's own services.
* A save made inside a durable run is fenced by the run's epoch: once another
  worker took the run over (or it ended), the old worker's save is refused with
  :class:`~durable_adk.errors.Fenced` and writes nothing.
* A re-driven step that saves the same bytes again in the same invocation gets
  the version it saved before instead of a new one, so recovery does not pile
  up copies.

The run a save belongs to is the drive's fence
(:func:`durable_adk.fence.current_fence`), which ``DurableRunner`` sets while
it drives a run; ADK copies it into every task and worker thread of the run.
Outside a durable run the service works as a plain, unfenced artifact store.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from typing import Any

from google.adk.artifacts import artifact_util
from google.adk.artifacts.base_artifact_service import (
    ArtifactVersion,
    BaseArtifactService,
    ensure_part,
)
from google.adk.errors.input_validation_error import InputValidationError
from google.genai import types

from durable_adk import errors
from durable_adk.fence import current_fence
from durable_adk.ids import check_id
from durable_adk.store.base import Row, Store

USER_PREFIX = "user:"
SAVE_TRIES = 50
"""How often a save retries when another save of the same file took its version number.

Only PostgreSQL lets two saves pick one number (SQLite writes one at a time);
each collision means another save succeeded, so 50 covers 50 saves of one
file at the same instant."""


def _mime_type(part: types.Part) -> str | None:
    if part.inline_data is not None:
        return part.inline_data.mime_type
    if part.text is not None:
        return "text/plain"
    if part.file_data is not None and not artifact_util.is_artifact_ref(part):
        return part.file_data.mime_type
    return None


class DurableArtifactService(BaseArtifactService):
    """ADK's ``BaseArtifactService`` over a durable-adk store (SQLite or PostgreSQL)."""

    def __init__(self, store: Store) -> None:
        """Creates the service over an open store."""
        self.store = store

    @staticmethod
    def _scope(filename: str, session_id: str | None) -> str:
        """The stored session id of a file: '' for a user-scoped one."""
        if filename.startswith(USER_PREFIX):
            return ""
        if session_id is None:
            raise InputValidationError("Session ID must be provided for session-scoped artifacts.")
        return check_id("session_id", session_id)

    def _key(
        self, app_name: str, user_id: str, filename: str, session_id: str | None
    ) -> dict[str, Any]:
        if not isinstance(filename, str) or not filename or len(filename) > 1024:
            raise errors.InvalidArgument(
                f"artifact filename must be 1..1024 characters, got {filename!r:.80}"
            )
        return {
            "app_name": check_id("app_name", app_name),
            "user_id": check_id("user_id", user_id),
            "session_id": self._scope(filename, session_id),
            "filename": filename,
        }

    async def save_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        artifact: types.Part | dict[str, Any],
        session_id: str | None = None,
        custom_metadata: dict[str, Any] | None = None,
    ) -> int:
        """Saves a new version; returns its number (0 for the first).

        Raises:
            durable_adk.errors.Fenced: Saved for a run that was taken over.
            durable_adk.errors.InvalidArgument: A bad id, file name or metadata.
            InputValidationError: A session-scoped file without a session id,
                or an artifact of no supported kind (ADK's own error).
        """
        key = self._key(app_name, user_id, filename, session_id)
        part = ensure_part(artifact)
        if (
            part.inline_data is None
            and part.text is None
            and part.file_data is None
            and not artifact_util.is_artifact_ref(part)
        ):
            raise InputValidationError("Not supported artifact type.")
        encoded = part.model_dump_json(exclude_none=True)
        try:
            metadata = json.dumps(custom_metadata or {})
        except (TypeError, ValueError) as exc:
            raise errors.InvalidArgument(f"artifact custom_metadata is not JSON: {exc}") from exc
        run = current_fence()
        if run is not None:
            run.check()  # a worker past its lease writes nothing, before the database says so
        params = {
            **key,
            "part": encoded,
            "mime_type": _mime_type(part),
            "custom_metadata": metadata,
            "digest": hashlib.sha256(encoded.encode()).hexdigest(),
            "run_id": run.run_id if run else None,
            "run_epoch": run.epoch if run else None,
            "invocation_id": run.invocation_id if run else None,
        }
        for _ in range(SAVE_TRIES):
            try:
                row = await self.store.fetchrow("artifact_save", params)
            except errors.UniqueViolation:
                # Another save of this file took the number: count again, a
                # little later so the contenders spread out.
                await asyncio.sleep(random.uniform(0, 0.005))
                continue
            assert row is not None
            if row["status"] == "fenced":
                raise errors.Fenced(
                    f"artifact {filename!r} not saved: run {params['run_id']} was taken over"
                )
            return int(row["version"])
        raise errors.DatabaseBusy(f"artifact {filename!r}: {SAVE_TRIES} concurrent saves collided")

    async def load_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
        version: int | None = None,
    ) -> types.Part | None:
        """One version of a file (the latest by default), or None."""
        depth = artifact_util._MAX_ARTIFACT_REFERENCE_DEPTH
        return await self._load(app_name, user_id, filename, session_id, version, depth)

    async def _load(
        self,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None,
        version: int | None,
        depth: int,
    ) -> types.Part | None:
        row = await self._row(app_name, user_id, filename, session_id, version)
        if row is None:
            return None
        part = types.Part.model_validate_json(row["part"])
        if artifact_util.is_artifact_ref(part):
            # A reference to another artifact in the caller's scope: followed a
            # bounded number of hops (ADK's own check refuses cycles and escapes).
            assert part.file_data is not None
            target = artifact_util.resolve_artifact_reference(
                file_uri=str(part.file_data.file_uri),
                app_name=app_name,
                user_id=user_id,
                session_id=session_id,
                remaining_depth=depth,
            )
            return await self._load(
                target.app_name,
                target.user_id,
                target.filename,
                target.session_id,
                target.version,
                depth - 1,
            )
        if part == types.Part() or artifact_util._is_rewind_tombstone(part):
            return None  # what a session rewind saves to remove a file
        return part

    async def _row(
        self,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None,
        version: int | None,
    ) -> Row | None:
        key = self._key(app_name, user_id, filename, session_id)
        return await self.store.fetchrow("artifact_get", {**key, "version": version})

    async def list_artifact_keys(
        self, *, app_name: str, user_id: str, session_id: str | None = None
    ) -> list[str]:
        """The session's file names and the user's, sorted (only the user's without a session)."""
        rows = await self.store.fetch(
            "artifact_keys",
            {
                "app_name": check_id("app_name", app_name),
                "user_id": check_id("user_id", user_id),
                "session_id": "" if session_id is None else check_id("session_id", session_id),
            },
        )
        return [str(r["filename"]) for r in rows]

    async def delete_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
    ) -> None:
        """Deletes every version of a file (nothing happens if there is none)."""
        key = self._key(app_name, user_id, filename, session_id)
        await self.store.execute("artifact_delete", key)

    async def list_versions(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
    ) -> list[int]:
        """A file's version numbers, oldest first."""
        return [
            v.version
            for v in await self.list_artifact_versions(
                app_name=app_name, user_id=user_id, filename=filename, session_id=session_id
            )
        ]

    async def list_artifact_versions(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
    ) -> list[ArtifactVersion]:
        """Every version of a file with its metadata, oldest first."""
        key = self._key(app_name, user_id, filename, session_id)
        rows = await self.store.fetch("artifact_versions", key)
        return [self._version_of(r) for r in rows]

    async def get_artifact_version(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
        version: int | None = None,
    ) -> ArtifactVersion | None:
        """One version's metadata (the latest by default), or None."""
        row = await self._row(app_name, user_id, filename, session_id, version)
        return None if row is None else self._version_of(row)

    @staticmethod
    def _version_of(row: Row) -> ArtifactVersion:
        scope = (
            f"users/{row['user_id']}"
            if row["session_id"] == ""
            else f"users/{row['user_id']}/sessions/{row['session_id']}"
        )
        return ArtifactVersion(
            version=int(row["version"]),
            canonical_uri=(
                f"durable-adk://apps/{row['app_name']}/{scope}/artifacts/{row['filename']}"
                f"/versions/{row['version']}"
            ),
            custom_metadata=json.loads(row["custom_metadata"] or "{}"),
            create_time=float(row["created_at"]),
            mime_type=row["mime_type"],
        )
