"""A2A tasks on the runs' database: state and version, events, runs, message ids, push configs.

What it guarantees (framework-agnostic: no ADK and no A2A SDK import here;
bodies are the SDK's protobuf JSON, kept as text):

* A task's save is one conditional unit (:meth:`A2aTable.save`): the stored
  version must be the one the writer read (compare-and-swap), a first write
  finds no row, a move to CANCELED finds the task not terminal; the new
  version and the event that made it are written together, so a reader of
  the events after version *n* (:meth:`A2aTable.events_after`) sees every
  change once, in order, on any worker. A refused save writes nothing.
* A task is read and written only by its owner, within its app.
* With keys configured (docs/data.md), a task's body, its events and its
  push configs are sealed with their row's identity (the task; the task and
  the version the event made; the task, owner and config) before they are
  written, and opened as they are read; the push outbox's copies of an event
  and a config open as the rows they were copied from.
* A message id is taken once per (app, owner, context)
  (:meth:`A2aTable.claim_message`): the second taker learns the task of the
  first, so a re-sent message never starts work twice.
* The invocations a task drove are on record (:meth:`A2aTable.link_run`), so
  the task, its runs and its invocation are found from each other, and the
  tasks whose runs ended while no worker watched are found in one query
  (:meth:`A2aTable.to_sync`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from durable_adk import errors
from durable_adk.store.base import Row, Store
from durable_adk.store.sealing.codec import seal_value

TERMINAL_STATES = frozenset(
    {
        "TASK_STATE_COMPLETED",
        "TASK_STATE_FAILED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_REJECTED",
    }
)
"""A2A's terminal task states: a task in one takes no further message."""

_STALE_TRIES = 5
"""Saves an overwrite tries when other writers keep moving the version it sealed for."""

OPEN_STATES = frozenset({"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"})
"""States in which a task's run is queued or under way."""


@dataclass(frozen=True, slots=True)
class StoredTask:
    """A task row: the body (protobuf JSON) and the version it was read at."""

    task_id: str
    owner: str
    context_id: str
    state: str
    version: int
    body: str


@dataclass(frozen=True, slots=True)
class TaskRun:
    """An invocation a task drove, with the newest run of it (None: none recorded)."""

    task_id: str
    user_id: str
    session_id: str
    invocation_id: str
    run_id: str | None
    status: str | None
    last_error: str | None
    classification: str | None
    app_version: str | None = None


@dataclass(frozen=True, slots=True)
class PauseWaits:
    """What a paused invocation waits on: a sleep's wake-up, jobs, questions in the inbox."""

    wakes_at: float | None
    jobs: int
    asks: int

    @property
    def only_sleeps(self) -> bool:
        """It waits on durable sleeps alone: nobody is asked anything, time answers it."""
        return self.wakes_at is not None and self.jobs == 0 and self.asks == 0


@dataclass(frozen=True, slots=True)
class TaskToSync:
    """An open task whose run ended (or never was recorded) with no worker to say so."""

    task: StoredTask
    run: TaskRun


@dataclass(frozen=True, slots=True)
class MessageClaim:
    """The answer to a message id's claim: did this request take it, and for which task."""

    taken: bool
    task_id: str


class VersionConflict(errors.Conflict):
    """The task's stored version is not the one the writer read (or it is another owner's)."""


class A2aTable:
    """The A2A tables of one app on one store."""

    def __init__(self, store: Store, app_name: str) -> None:
        """Binds the table to its store and app."""
        self.store = store
        self.app_name = app_name

    async def get(self, task_id: str, owner: str) -> StoredTask | None:
        """The owner's task, or None (also for another owner's)."""
        row = await self.store.fetchrow(
            "a2a_task_get", {"task_id": task_id, "app_name": self.app_name, "owner": owner}
        )
        return None if row is None else _stored(row)

    async def save(
        self,
        *,
        task_id: str,
        owner: str,
        context_id: str,
        state: str,
        body: str,
        prev_version: int,
        event: str | None,
        force: bool = False,
    ) -> int:
        """Writes the task if its stored version is ``prev_version``; returns the new version.

        Args:
            task_id: The task.
            owner: Its owner (a save of another owner's task is refused).
            context_id: Its context.
            state: Its state (``TASK_STATE_*``), as in ``body``.
            body: The Task, protobuf JSON.
            prev_version: The version the writer read (0: a first write).
            event: The event that made this version (a StreamResponse, JSON), or None.
            force: Write whatever the stored version (a plain TaskStore's save).

        Raises:
            VersionConflict: Another writer moved the task first, or it is
                another owner's; nothing was written.
        """
        self.store.limits.check(body, "the A2A task")
        canceling = state == "TASK_STATE_CANCELED" and not force
        params = {
            "task_id": task_id,
            "app_name": self.app_name,
            "owner": owner,
            "context_id": context_id,
            "state": state,
            "body": await seal_value(self.store, "a2a_tasks", "body", (task_id,), body),
            "prev_version": prev_version,
            "event": event,
            "force": 1 if force else 0,
            "canceling": 1 if canceling else 0,
            "expect": None,
        }
        for _ in range(_STALE_TRIES):
            if self.store.codec is not None and event is not None:
                # The event is sealed for the version it makes (its row's identity):
                # a compare-and-swap knows it; an overwrite reads it first and the
                # save checks it is still the stored one ('stale': read again).
                if force or canceling:
                    found = await self.store.fetchrow("a2a_task_version", {"task_id": task_id})
                    expect = 0 if found is None else int(found["version"])
                    params["expect"] = expect
                    made = expect + 1
                else:
                    made = prev_version + 1
                params["event"] = await seal_value(
                    self.store, "a2a_task_events", "body", (task_id, made), event
                )
            row = await self.store.fetchrow("a2a_task_save", params)
            if row is None or row["status"] != "stale":
                break
        if row is None or row["status"] != "ok" or row["version"] is None:
            raise VersionConflict(f"task {task_id} was modified concurrently by another writer")
        return int(row["version"])

    async def delete(self, task_id: str, owner: str) -> None:
        """Deletes the owner's task, its events and its push configs."""
        await self.store.execute(
            "a2a_task_delete", {"task_id": task_id, "app_name": self.app_name, "owner": owner}
        )

    async def list_tasks(
        self,
        owner: str,
        *,
        context_id: str | None,
        state: str | None,
        updated_after: float | None,
        limit: int,
        offset: int,
    ) -> tuple[list[StoredTask], int]:
        """One page of the owner's tasks, newest change first, and how many match in all."""
        rows = await self.store.fetch(
            "a2a_task_list",
            {
                "app_name": self.app_name,
                "owner": owner,
                "context_id": context_id,
                "state": state,
                "updated_after": updated_after,
                "limit": limit,
                "offset": offset,
            },
        )
        total = int(rows[0]["total"]) if rows else 0
        return [
            StoredTask(
                task_id=r["task_id"],
                owner=owner,
                context_id=context_id or "",
                state=state or "",
                version=int(r["version"]),
                body=r["body"],
            )
            for r in rows
        ], total

    async def publish(self, task_id: str, version: int, body: str) -> None:
        """Stores an event a save did not store (the first one stored at a version stays)."""
        sealed = await seal_value(self.store, "a2a_task_events", "body", (task_id, version), body)
        await self.store.execute(
            "a2a_event_publish", {"task_id": task_id, "version": version, "body": sealed}
        )

    async def events_after(
        self, task_id: str, after: int, *, limit: int = 200
    ) -> list[tuple[int, str]]:
        """The task's events newer than version ``after``, in order: (version, body)."""
        rows = await self.store.fetch(
            "a2a_events_after", {"task_id": task_id, "after": after, "limit": limit}
        )
        return [(int(r["version"]), r["body"]) for r in rows]

    async def link_run(
        self, task_id: str, *, user_id: str, session_id: str, invocation_id: str
    ) -> None:
        """Records that the task drives this invocation (twice: no change)."""
        await self.store.execute(
            "a2a_task_link_run",
            {
                "task_id": task_id,
                "app_name": self.app_name,
                "user_id": user_id,
                "session_id": session_id,
                "invocation_id": invocation_id,
            },
        )

    async def runs_of(self, task_id: str) -> list[TaskRun]:
        """The invocations the task drove, oldest first, each with its newest run."""
        rows = await self.store.fetch(
            "a2a_task_runs_of", {"task_id": task_id, "app_name": self.app_name}
        )
        return [_task_run(r) for r in rows]

    async def tasks_state(self, task_id: str) -> list[str]:
        """The stored state of the task, whoever owns it (empty: no such task)."""
        rows = await self.store.fetch(
            "a2a_task_state", {"task_id": task_id, "app_name": self.app_name}
        )
        return [r["state"] for r in rows]

    async def tasks_of_invocation(self, invocation_id: str) -> list[str]:
        """The tasks that drove an invocation (usually one)."""
        rows = await self.store.fetch("a2a_tasks_of_invocation", {"invocation_id": invocation_id})
        return [r["task_id"] for r in rows]

    async def to_sync(
        self, *, grace: float, orphan_grace: float, limit: int = 50
    ) -> list[TaskToSync]:
        """Tasks whose newest run stopped ``grace`` seconds ago or more, not yet published.

        Open tasks whose run ended (or was never recorded); tasks whose run
        paused or parked since their last write; tasks waiting for their
        client whose run went on without it and stopped since (query
        ``a2a_tasks_to_sync``).
        """
        rows = await self.store.fetch(
            "a2a_tasks_to_sync",
            {
                "app_name": self.app_name,
                "grace": grace,
                "orphan_grace": orphan_grace,
                "limit": limit,
            },
        )
        return [_to_sync(r) for r in rows]

    async def unheld(self, *, grace: float, limit: int = 50) -> list[TaskToSync]:
        """Open tasks whose versioned run nobody has held for ``grace`` seconds.

        Each is returned until the task is written again: the caller publishes
        which of them wait for a worker of their version (each such wait once).
        """
        rows = await self.store.fetch(
            "a2a_tasks_waiting", {"app_name": self.app_name, "grace": grace, "limit": limit}
        )
        return [_to_sync(r, app_version=r["app_version"]) for r in rows]

    async def pause_waits_on(
        self, *, user_id: str, session_id: str, invocation_id: str
    ) -> PauseWaits:
        """What the paused invocation waits on (see :class:`PauseWaits`)."""
        row = await self.store.fetchrow(
            "a2a_pause_waits_on",
            {
                "app_name": self.app_name,
                "user_id": user_id,
                "session_id": session_id,
                "invocation_id": invocation_id,
            },
        )
        if row is None:
            return PauseWaits(wakes_at=None, jobs=0, asks=0)
        wakes_at = row["wakes_at"]
        return PauseWaits(
            wakes_at=None if wakes_at is None else float(wakes_at),
            jobs=int(row["jobs"] or 0),
            asks=int(row["asks"] or 0),
        )

    async def claim_message(
        self, *, owner: str, context_id: str, message_id: str, task_id: str
    ) -> MessageClaim:
        """Takes ``message_id`` (in the context as the client named it) for ``task_id``.

        Returns:
            Whether this call took it, and the task that holds it (this one's
            when taken, the first taker's otherwise).
        """
        nonce = uuid.uuid4().hex
        params = {
            "app_name": self.app_name,
            "owner": owner,
            "context_id": context_id,
            "message_id": message_id,
            "task_id": task_id,
            "nonce": nonce,
        }
        for _ in range(3):
            row = await self.store.fetchrow("a2a_message_claim", params)
            if row is not None:
                return MessageClaim(taken=row["nonce"] == nonce, task_id=str(row["task_id"]))
        # PostgreSQL: a concurrent taker committed after this statement's snapshot
        # three times running; the claim cannot be settled now.
        raise errors.Conflict(f"message {message_id} is being taken by another request")

    async def set_push(self, task_id: str, owner: str, config_id: str, body: str) -> None:
        """Stores (or replaces) the owner's push config ``config_id`` of the task."""
        self.store.limits.check(body, "the push notification config")
        sealed = await seal_value(
            self.store, "a2a_push_configs", "body", (task_id, owner, config_id), body
        )
        await self.store.execute(
            "a2a_push_set",
            {"task_id": task_id, "owner": owner, "config_id": config_id, "body": sealed},
        )

    async def get_push(self, task_id: str, owner: str) -> list[str]:
        """The owner's push configs of the task (bodies)."""
        rows = await self.store.fetch("a2a_push_get", {"task_id": task_id, "owner": owner})
        return [r["body"] for r in rows]

    async def push_for_dispatch(self, task_id: str) -> list[str]:
        """Every push config of the task, whoever registered it (bodies)."""
        rows = await self.store.fetch("a2a_push_for_dispatch", {"task_id": task_id})
        return [r["body"] for r in rows]

    async def delete_push(self, task_id: str, owner: str, config_id: str | None) -> None:
        """Deletes the owner's push config ``config_id`` (None: all of the owner's) of the task."""
        await self.store.execute(
            "a2a_push_delete", {"task_id": task_id, "owner": owner, "config_id": config_id}
        )


def _stored(row: Row) -> StoredTask:
    return StoredTask(
        task_id=row["task_id"],
        owner=row["owner"],
        context_id=row["context_id"],
        state=row["state"],
        version=int(row["version"]),
        body=row["body"],
    )


def _to_sync(r: Row, *, app_version: str | None = None) -> TaskToSync:
    task = StoredTask(
        task_id=r["task_id"],
        owner=r["owner"],
        context_id=r["context_id"],
        state=r["state"],
        version=int(r["version"]),
        body=r["body"],
    )
    run = TaskRun(
        task_id=r["task_id"],
        user_id=r["user_id"],
        session_id=r["session_id"],
        invocation_id=r["invocation_id"],
        run_id=r["run_id"],
        status=r["run_status"],
        last_error=r["last_error"],
        classification=r["classification"],
        app_version=app_version,
    )
    return TaskToSync(task=task, run=run)


def _task_run(row: Row) -> TaskRun:
    return TaskRun(
        task_id=row["task_id"],
        user_id=row["user_id"],
        session_id=row["session_id"],
        invocation_id=row["invocation_id"],
        run_id=row["run_id"],
        status=row["status"],
        last_error=row["last_error"],
        classification=row["classification"],
    )
