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
* Bad input is refused before anything is read or written, with ADK's own
  :class:`~google.adk.errors.input_validation_error.InputValidationError` (as
  :class:`ArtifactInputError`, which is also a
  :class:`~durable_adk.errors.InvalidArgument`): ``adk api_server`` answers
  400 for it. Ids follow ADK's ``artifact_util.validate_path_segment``;
  file names may hold ``/`` but may not be blank, rooted, drive-qualified or
  climb out with ``..`` (as ADK's FileArtifactService refuses them); a
  reference (``artifact://``) may only point into the caller's own app, user
  and session. docs/adk-compat.md lists where this differs from ADK and why.

The run a save belongs to is the drive's fence
(:func:`durable_adk.fencing.fence.current_fence`), which ``DurableRunner`` sets while
it drives a run; ADK copies it into every task and worker thread of the run.
Outside a durable run the service works as a plain, unfenced artifact store.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
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
from durable_adk.fencing.fence import current_fence
from durable_adk.store.base import Row, Store

USER_PREFIX = "user:"
MAX_ID_BYTES = 512
"""Longest app name, user id or session id, in UTF-8 bytes.

The four parts of a file's name are one PostgreSQL index key, which must fit
in 2,704 bytes: 3 x 512 + 1,024 leaves room for the key's own overhead."""
MAX_FILENAME_BYTES = 1024
"""Longest file name (``user:`` prefix included), in UTF-8 bytes."""
MAX_VERSION = 2**63 - 1
"""The largest version number a query is asked about (a BIGINT)."""
_DRIVE = re.compile(r"[A-Za-z]:")
_SEPARATORS = re.compile(r"[/\\]")
SAVE_TRIES = 50
"""How often a save retries when another save of the same file took its version number.

Only PostgreSQL lets two saves pick one number (SQLite writes one at a time);
each collision means another save succeeded, so 50 covers 50 saves of one
file at the same instant."""


class ArtifactInputError(InputValidationError, errors.InvalidArgument):
    """An artifact call was refused before anything was read or written.

    ADK's ``InputValidationError`` (what ``adk api_server`` answers 400 for and
    ADK's own artifact services raise) and durable-adk's ``InvalidArgument``
    at once, so either ``except`` catches it.
    """


def _refused(exc: InputValidationError) -> ArtifactInputError:
    """ADK's own validation error, re-raised as ours (same message)."""
    return ArtifactInputError(exc.message)


def _check_size(field: str, value: str, limit: int) -> None:
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ArtifactInputError(f"{field} {value!r:.80} is not valid Unicode.") from exc
    if size > limit:
        raise ArtifactInputError(
            f"{field} must be at most {limit} bytes in UTF-8, got {size}: {value!r:.80}"
        )


def _check_segment(field: str, value: object) -> str:
    """An app name, user id or session id, checked by ADK's own rule and our size cap."""
    if not isinstance(value, str):
        raise ArtifactInputError(f"{field} must be a string, got {type(value).__name__}.")
    try:
        artifact_util.validate_path_segment(value, field)
    except InputValidationError as exc:
        raise _refused(exc) from exc
    _check_size(field, value, MAX_ID_BYTES)
    return value


def _check_filename(filename: object) -> str:
    """A file name: '/' nests, but it may not be blank, rooted, drive-qualified or climb out.

    The checks are ADK's FileArtifactService's (on the name without its
    ``user:`` prefix, stripped of surrounding blanks), so a name stored here
    can be stored there too and never names a path outside its scope.
    """
    if not isinstance(filename, str):
        raise ArtifactInputError(
            f"artifact filename must be a string, got {type(filename).__name__}."
        )
    if "\x00" in filename:
        raise ArtifactInputError("artifact filename must not contain null bytes.")
    _check_size("artifact filename", filename, MAX_FILENAME_BYTES)
    name = filename.removeprefix(USER_PREFIX).strip()
    if not name:
        raise ArtifactInputError(f"artifact filename {filename!r} must not be blank.")
    if name.startswith(("/", "\\")) or _DRIVE.match(name):
        raise ArtifactInputError(
            f"artifact filename {filename!r} must not be rooted or drive-qualified;"
            " give a path relative to its scope."
        )
    if ".." in _SEPARATORS.split(name):
        raise ArtifactInputError(f"artifact filename {filename!r} must not contain '..'.")
    return filename


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
    def _scope(filename: str, session_id: str | None, *, saving: bool = False) -> str:
        """The stored session id of a file: '' for a user-scoped one.

        As in ADK's services, the session id of a ``user:`` file is ignored
        (and not checked), and a session-scoped file is not saved under a
        session id whose first segment is ``user`` (ADK's in-memory and GCS
        services reserve it).
        """
        if filename.startswith(USER_PREFIX):
            return ""
        if session_id is None:
            raise ArtifactInputError("Session ID must be provided for session-scoped artifacts.")
        _check_segment("session_id", session_id)
        if saving and _SEPARATORS.split(session_id)[0] == "user":
            raise ArtifactInputError(
                "session_id must not be or start with the reserved value 'user'."
            )
        return session_id

    def _key(
        self,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None,
        *,
        saving: bool = False,
    ) -> dict[str, Any]:
        """The row key of a file; refuses a bad id or name (ArtifactInputError)."""
        return {
            "app_name": _check_segment("app_name", app_name),
            "user_id": _check_segment("user_id", user_id),
            "session_id": self._scope(_check_filename(filename), session_id, saving=saving),
            "filename": filename,
        }

    def _check_reference(
        self, part: types.Part, app_name: str, user_id: str, session_id: str | None
    ) -> None:
        """An ``artifact://`` reference must name a file of the caller's own scope."""
        assert part.file_data is not None
        uri = str(part.file_data.file_uri)
        target = artifact_util.parse_artifact_uri(uri)
        if target is None:
            raise ArtifactInputError(f"Invalid artifact reference URI: {uri}")
        try:
            artifact_util.validate_artifact_reference_scope(
                app_name=app_name, user_id=user_id, session_id=session_id, parsed_uri=target
            )
        except InputValidationError as exc:
            raise _refused(exc) from exc
        # A name no call could read is refused now rather than at every load.
        self._key(target.app_name, target.user_id, target.filename, target.session_id)

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
            ArtifactInputError: ADK's ``InputValidationError`` (also a
                ``durable_adk.errors.InvalidArgument``): a bad id or file name,
                a session-scoped file without a session id, an artifact of no
                supported kind, a reference outside the caller's scope, or
                custom metadata that is not a JSON object.
        """
        key = self._key(app_name, user_id, filename, session_id, saving=True)
        part = ensure_part(artifact)
        if artifact_util.is_artifact_ref(part):
            self._check_reference(part, app_name, user_id, session_id)
        elif part.inline_data is None and part.text is None and part.file_data is None:
            raise ArtifactInputError("Not supported artifact type.")
        encoded = part.model_dump_json(exclude_none=True)
        if custom_metadata is not None and not isinstance(custom_metadata, dict):
            raise ArtifactInputError(
                f"artifact custom_metadata must be a dict, got {type(custom_metadata).__name__}."
            )
        try:
            self.store.limits.check(custom_metadata or {}, "artifact custom_metadata")
        except errors.InvalidArgument as exc:
            raise ArtifactInputError(str(exc)) from exc
        try:
            metadata = json.dumps(custom_metadata or {})
        except (TypeError, ValueError) as exc:
            raise ArtifactInputError(f"artifact custom_metadata is not JSON: {exc}") from exc
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
            try:
                target = artifact_util.resolve_artifact_reference(
                    file_uri=str(part.file_data.file_uri),
                    app_name=app_name,
                    user_id=user_id,
                    session_id=session_id,
                    remaining_depth=depth,
                )
            except InputValidationError as exc:
                raise _refused(exc) from exc
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
        if version is not None and not 0 <= version <= MAX_VERSION:
            return None  # no such version (and none a BIGINT parameter could carry)
        return await self.store.fetchrow("artifact_get", {**key, "version": version})

    async def list_artifact_keys(
        self, *, app_name: str, user_id: str, session_id: str | None = None
    ) -> list[str]:
        """The session's file names and the user's, sorted (only the user's without a session).

        Sorted here, by code point as ADK's services sort, not by the
        database's collation.
        """
        scope = "" if session_id is None else _check_segment("session_id", session_id)
        rows = await self.store.fetch(
            "artifact_keys",
            {
                "app_name": _check_segment("app_name", app_name),
                "user_id": _check_segment("user_id", user_id),
                "session_id": scope,
            },
        )
        return sorted(str(r["filename"]) for r in rows)

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
