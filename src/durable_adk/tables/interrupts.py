"""The interrupts index: what waits on a person, across every session, answered once.

What it guarantees (framework-agnostic: no ADK import here):

* A row per open call a run paused on (a tool confirmation, a request for
  input, a long-running call), written when the run pauses
  (:meth:`InterruptTable.open`); indexing a call twice keeps the first row.
  Listing across sessions is one indexed query, however many sessions wait.
* An interrupt is answered at most once: :meth:`InterruptTable.answer` is one
  conditional unit of work that marks it (ANSWERED, or EXPIRED when the
  deadline sweeper applies the default outcome), puts the run that carries
  the answer in the session's queue and writes the answer, with who gave it,
  in the audit trail of the run that paused. A refused answer changes nothing.
* The deadline is on the database clock; an answer after it is refused, and
  only the deadline sweeper may then apply the default outcome.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from durable_adk.store.base import Row, Store
from durable_adk.store.sealing.codec import seal_value
from durable_adk.tables.ledger import Run


class InterruptKind(StrEnum):
    """What an interrupt waits for."""

    CONFIRMATION = "confirmation"
    INPUT = "input"
    LONG_RUNNING = "long_running"


class InterruptStatus(StrEnum):
    """Where an interrupt stands."""

    OPEN = "OPEN"
    ANSWERED = "ANSWERED"
    EXPIRED = "EXPIRED"
    CLOSED = "CLOSED"


@dataclass(frozen=True, slots=True)
class Interrupt:
    """One call a paused run waits on.

    Attributes:
        call_id: The function call's id (the answer repeats it).
        app_name: The ADK app.
        user_id: The session's user.
        session_id: The session.
        invocation_id: The paused invocation.
        run_id: The run that paused on it.
        kind: confirmation, input or long_running.
        name: The call's function name (the answer repeats it).
        args: The call's arguments (a confirmation's hint and payload, the
            original call it guards; a request's prompt).
        status: OPEN, ANSWERED, EXPIRED (the deadline's default outcome was
            applied) or CLOSED (its run was cancelled).
        deadline_at: When the default outcome applies (database clock), or None.
        answered_by: Who answered (``deadline`` for the default outcome,
            ``session`` when the session shows it answered by another path).
        answer: The function response sent, or None.
        answer_run_id: The run that carries the answer on.
        answered_at: When it was answered or closed.
        created_at: When it was indexed.
    """

    call_id: str
    app_name: str
    user_id: str
    session_id: str
    invocation_id: str
    run_id: str
    kind: InterruptKind
    name: str
    args: dict[str, Any]
    status: InterruptStatus
    deadline_at: float | None
    answered_by: str | None
    answer: dict[str, Any] | None
    answer_run_id: str | None
    answered_at: float | None
    created_at: float
    pk: int = 0

    @classmethod
    def from_row(cls, row: Row) -> Interrupt:
        """Maps an ``interrupts`` row."""
        return cls(
            call_id=row["call_id"],
            app_name=row["app_name"],
            user_id=row["user_id"],
            session_id=row["session_id"],
            invocation_id=row["invocation_id"],
            run_id=row["run_id"],
            kind=InterruptKind(row["kind"]),
            name=row["name"],
            args=json.loads(row["args"]) if row["args"] else {},
            status=InterruptStatus(row["status"]),
            deadline_at=None if row["deadline_at"] is None else float(row["deadline_at"]),
            answered_by=row["answered_by"],
            answer=json.loads(row["answer"]) if row["answer"] else None,
            answer_run_id=row["answer_run_id"],
            answered_at=None if row["answered_at"] is None else float(row["answered_at"]),
            created_at=float(row["created_at"]),
            pk=int(row["pk"]),
        )


class InterruptTable:
    """The interrupts index over a store."""

    def __init__(self, store: Store) -> None:
        """Creates the table's access over an open store."""
        self.store = store

    async def open(
        self,
        run: Run,
        *,
        call_id: str,
        kind: InterruptKind,
        name: str,
        args: Mapping[str, Any],
        deadline_seconds: float | None = None,
    ) -> None:
        """Indexes an open call of ``run``'s invocation (a call already indexed stays as it is)."""
        await self.store.execute(
            "interrupt_open",
            {
                "call_id": call_id,
                "app_name": run.app_name,
                "user_id": run.user_id,
                "session_id": run.session_id,
                "invocation_id": run.invocation_id,
                "run_id": run.run_id,
                "kind": kind.value,
                "name": name,
                "args": json.dumps(dict(args), default=str),
                "deadline": deadline_seconds,
            },
        )

    async def list_interrupts(
        self,
        *,
        status: InterruptStatus | None = InterruptStatus.OPEN,
        app_name: str | None = None,
        session_id: str | None = None,
        kind: InterruptKind | None = None,
        limit: int = 100,
    ) -> list[Interrupt]:
        """Interrupts, oldest first (by default the open ones), optionally filtered."""
        rows = await self.store.fetch(
            "interrupt_list",
            {
                "status": status.value if status else None,
                "app_name": app_name,
                "session_id": session_id,
                "kind": kind.value if kind else None,
                "limit": limit,
            },
        )
        return [Interrupt.from_row(r) for r in rows]

    async def by_call(
        self, call_id: str, *, app_name: str | None = None, session_id: str | None = None
    ) -> tuple[list[Interrupt], float]:
        """The interrupts of a call id (newest first) and the database's time now."""
        rows = await self.store.fetch(
            "interrupt_by_call",
            {"call_id": call_id, "app_name": app_name, "session_id": session_id},
        )
        if not rows:
            return [], 0.0
        return [Interrupt.from_row(r) for r in rows], float(rows[0]["db_now"])

    async def settle(self, interrupt: Interrupt) -> None:
        """Marks an OPEN interrupt ANSWERED because the session shows its call answered."""
        await self.store.execute("interrupt_settle", {"pk": interrupt.pk})

    async def close_of_run(self, run_id: str) -> None:
        """Closes the open interrupts of a run that was cancelled."""
        await self.store.execute("interrupt_close_of_run", {"run_id": run_id})

    async def close_of_invocation(self, run: Run) -> None:
        """Closes the open interrupts of ``run``'s invocation (it was cancelled)."""
        await self.store.execute(
            "interrupt_close_of_invocation",
            {
                "app_name": run.app_name,
                "user_id": run.user_id,
                "session_id": run.session_id,
                "invocation_id": run.invocation_id,
            },
        )

    async def backdate(self, call_id: str, seconds: float) -> None:
        """Puts an open interrupt's deadline ``seconds`` in the past (tests, operators)."""
        await self.store.execute("interrupt_backdate", {"call_id": call_id, "seconds": seconds})

    async def due(self, *, app_name: str | None = None, limit: int = 100) -> list[Interrupt]:
        """OPEN interrupts whose deadline has passed (database clock)."""
        rows = await self.store.fetch("interrupt_due", {"app_name": app_name, "limit": limit})
        return [Interrupt.from_row(r) for r in rows]

    async def answer(
        self,
        interrupt: Interrupt,
        *,
        response: Mapping[str, Any],
        request: Mapping[str, Any],
        ask: int,
        by: str,
        reason: str | None,
        owner: str,
        lease: float,
        by_deadline: bool = False,
    ) -> Run | None:
        """Answers an OPEN interrupt once, in one unit of work (see the module docstring).

        Args:
            interrupt: The interrupt as read.
            response: The function response's body (recorded on the interrupt).
            request: The message of the run that carries the answer (JSON).
            ask: Which time the invocation asked the call (1 for the first):
                the pause's answer claim, taken in the same unit.
            by: Who answers (``deadline`` for the default outcome).
            reason: Why, for the audit trail.
            owner: The run's holder: the worker that drives it at once, or an
                operator (then ``lease`` 0: any worker's sweep takes it).
            lease: Seconds the owner holds the queued run.
            by_deadline: The deadline sweeper applies the default outcome
                (only after the deadline; a person's answer only before it).

        Returns:
            The QUEUED run carrying the answer, or None when refused (the
            interrupt is no longer OPEN, or the deadline says no): nothing changed.

        Raises:
            durable_adk.errors.UniqueViolation: Another run holds the pause's
                answer claim (nothing changed).
        """
        detail = {
            "call_id": interrupt.call_id,
            "kind": interrupt.kind.value,
            "name": interrupt.name,
            "response": dict(response),
            "default_outcome": by_deadline,
        }
        new_run_id = f"run-{uuid.uuid4().hex}"
        i = interrupt
        user = (i.app_name, i.user_id)
        identity = (*user, i.session_id, i.invocation_id, i.call_id)
        row = await self.store.fetchrow(
            "interrupt_answer",
            {
                "pk": interrupt.pk,
                "ask": ask,
                "by_deadline": 1 if by_deadline else 0,
                "actor": by,
                "reason": reason,
                "answer": await seal_value(
                    self.store, "interrupts", "answer", identity, _json(response), user=user
                ),
                "new_run_id": new_run_id,
                "request": await seal_value(
                    self.store, "runs", "request", (new_run_id,), _json(request), user=user
                ),
                "owner": owner,
                "lease": lease,
                "detail": await seal_value(
                    self.store, "operator_actions", "detail", (i.run_id, "answer"), _json(detail)
                ),
            },
        )
        if row is None or "run_id" not in row:
            return None
        return Run.from_row(row)


def _json(value: Mapping[str, Any]) -> str:
    return json.dumps(dict(value), default=str)


__all__ = ["Interrupt", "InterruptKind", "InterruptStatus", "InterruptTable"]
