"""The push outbox: each push notification a task owes, delivered at least once.

A task's save queues its event for every push config of the task in the
same unit (:meth:`~durable_adk.a2a_tables.tasks.A2aTable.save`), so a push
is owed exactly when the change it tells of is stored, whatever dies after.
Deliverers take due rows for a lease (:meth:`PushOutbox.claim`: one
statement, ``SKIP LOCKED`` on PostgreSQL), so a delivery that dies with its
worker is taken again after the lease; a failed attempt waits a growing
back-off, and after the last attempt the row is DEAD: kept, with its last
error, for an operator (:meth:`PushOutbox.list_pushes`).
"""

from __future__ import annotations

from dataclasses import dataclass

from durable_adk.store.base import Store


@dataclass(frozen=True, slots=True)
class Push:
    """A push taken for delivery (or listed)."""

    pk: int
    task_id: str
    owner: str
    config_id: str
    version: int
    config: str
    body: str
    attempts: int

    @property
    def idempotency_key(self) -> str:
        """The key the receiver can dedupe on: one per task version and config."""
        return f"{self.task_id}:{self.version}:{self.config_id}"


@dataclass(frozen=True, slots=True)
class PushRecord:
    """An outbox row as an operator sees it."""

    pk: int
    task_id: str
    config_id: str
    version: int
    status: str
    attempts: int
    last_error: str | None


class PushOutbox:
    """The push outbox of one app on one store."""

    def __init__(self, store: Store, app_name: str) -> None:
        """Binds the outbox to its store and app."""
        self.store = store
        self.app_name = app_name

    async def claim(self, *, lease: float, limit: int = 20) -> list[Push]:
        """Takes up to ``limit`` due pushes for ``lease`` seconds (one attempt each)."""
        rows = await self.store.fetch(
            "a2a_push_claim", {"app_name": self.app_name, "lease": lease, "limit": limit}
        )
        return [
            Push(
                pk=int(r["pk"]),
                task_id=r["task_id"],
                owner=r["owner"],
                config_id=r["config_id"],
                version=int(r["version"]),
                config=r["config"],
                body=r["body"],
                attempts=int(r["attempts"]),
            )
            for r in rows
        ]

    async def sent(self, push: Push) -> None:
        """Marks the push delivered."""
        await self.store.execute("a2a_push_sent", {"pk": push.pk})

    async def failed(self, push: Push, *, error: str, backoff: float, max_attempts: int) -> None:
        """Records a failed attempt: again after ``backoff`` seconds, or DEAD after the last."""
        await self.store.execute(
            "a2a_push_failed",
            {
                "pk": push.pk,
                "error": error[:1000],
                "backoff": backoff,
                "max_attempts": max_attempts,
            },
        )

    async def list_pushes(self, *, status: str | None = None, limit: int = 100) -> list[PushRecord]:
        """The app's pushes (``status``: PENDING, SENT or DEAD; None: all), oldest first."""
        rows = await self.store.fetch(
            "a2a_push_list", {"app_name": self.app_name, "status": status, "limit": limit}
        )
        return [
            PushRecord(
                pk=int(r["pk"]),
                task_id=r["task_id"],
                config_id=r["config_id"],
                version=int(r["version"]),
                status=r["status"],
                attempts=int(r["attempts"]),
                last_error=r["last_error"],
            )
            for r in rows
        ]
