"""The saga ledger and compensation: undo what a failed saga did, newest first.

What it guarantees (framework-agnostic: no ADK import here):

* A step is on record (PENDING, with its action and compensation idempotency
  keys) before its outside call, and DONE, with what its compensator needs,
  before the event that reports it. A process dying anywhere leaves a trace.
* :class:`Compensation` undoes a saga's steps newest first. A PENDING step is
  first looked up in the outside system by its action key: not found means it
  never happened (nothing to undo). Each compensation is retried with back-off;
  one that keeps failing is recorded COMPENSATION_FAILED with a dead letter
  while the others still run. Compensating twice is harmless: compensated steps
  are skipped and compensators get the same idempotency key every time.
* A PENDING step that is not found is concluded "never happened" only once the
  run and epoch that recorded it can no longer act (it finished, or was taken
  over, or its lease expired: database clock); otherwise the compensation
  waits and leaves the saga COMPENSATING for a later pass.
* Writes are fenced (:class:`Fence`): a step or compensation write made from
  inside a run carries its run id and epoch, one made by the saga sweeper its
  claim, and the database refuses it (:class:`durable_adk.errors.Fenced`) once
  that run or claim was lost.
* A saga ends COMMITTED, COMPENSATED or COMPENSATION_FAILED exactly once; the
  saga sweeper claims stuck sagas (no final status, quiet past a timeout, no
  live run) atomically and renews its claim while it works, so two sweepers
  never compensate the same saga.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from durable_adk import errors
from durable_adk.effect_tables.journal import OutcomeUnknown
from durable_adk.faults import crash_point
from durable_adk.metrics import NO_METRICS, Metrics
from durable_adk.store.base import Row, Store
from durable_adk.versions import UNVERSIONED, Serving

logger = logging.getLogger("durable_adk.sagas")

Compensator = Callable[[Mapping[str, Any], str], Awaitable[Any]]
"""Undoes one step: given its record and the compensation's idempotency key."""

Finder = Callable[[str], Awaitable[Any]]
"""Looks an action up in the outside system by its idempotency key (None: never happened)."""


class SagaStatus(StrEnum):
    """Where a saga stands."""

    RUNNING = "RUNNING"
    COMPENSATING = "COMPENSATING"
    COMMITTED = "COMMITTED"
    COMPENSATED = "COMPENSATED"
    COMPENSATION_FAILED = "COMPENSATION_FAILED"


class StepStatus(StrEnum):
    """Where a saga step stands."""

    PENDING = "PENDING"
    DONE = "DONE"
    COMPENSATED = "COMPENSATED"
    COMPENSATION_FAILED = "COMPENSATION_FAILED"


@dataclass(frozen=True, slots=True)
class Saga:
    """One saga (one run of a SagaSequence in one invocation).

    Attributes:
        saga_id: ``<invocation id>/<saga name>``.
        name: The SagaSequence's name.
        app_name: The ADK app.
        user_id: The session's user.
        session_id: The session.
        invocation_id: The invocation.
        status: Where it stands.
        reason: Why it failed, if it did.
        owner: The saga sweeper holding it, if any.
        failed_at: When compensation began (database clock).
        created_at: When it began.
        updated_at: When its ledger last changed.
        finished_at: When it reached a final status.
    """

    saga_id: str
    name: str
    app_name: str
    user_id: str
    session_id: str
    invocation_id: str
    status: SagaStatus
    reason: str | None
    owner: str | None
    failed_at: float | None
    created_at: float
    updated_at: float
    finished_at: float | None

    @classmethod
    def from_row(cls, row: Row) -> Saga:
        """Maps a ``sagas`` row."""
        return cls(
            saga_id=row["saga_id"],
            name=row["name"],
            app_name=row["app_name"],
            user_id=row["user_id"],
            session_id=row["session_id"],
            invocation_id=row["invocation_id"],
            status=SagaStatus(row["status"]),
            reason=row["reason"],
            owner=row["owner"],
            failed_at=None if row["failed_at"] is None else float(row["failed_at"]),
            created_at=float(row["created_at"]),
            updated_at=float(row["updated_at"]),
            finished_at=None if row["finished_at"] is None else float(row["finished_at"]),
        )


@dataclass(frozen=True, slots=True)
class SagaStep:
    """One step of a saga.

    Attributes:
        saga_id: The saga.
        step: The stage's name.
        status: Where it stands.
        action_key: The action's idempotency key.
        comp_key: The compensation's idempotency key (distinct from the action's).
        record: What the compensator needs (set with DONE).
        attempts: Compensation attempts so far.
        last_error: The last compensation error.
        run_id: The run that recorded the step (None outside a durable run).
        run_epoch: That run's epoch when it recorded the step.
        compensatable: Whether the code that began the step could undo it
            (None: recorded before this was kept). Code lacking the compensator
            of a step recorded True has drifted (:class:`SagaDrifted`).
    """

    saga_id: str
    step: str
    status: StepStatus
    action_key: str
    comp_key: str
    record: dict[str, Any] | None
    attempts: int
    last_error: str | None
    run_id: str | None = None
    run_epoch: int | None = None
    compensatable: bool | None = None

    @classmethod
    def from_row(cls, row: Row) -> SagaStep:
        """Maps a ``saga_steps`` row."""
        return cls(
            saga_id=row["saga_id"],
            step=row["step"],
            status=StepStatus(row["status"]),
            action_key=row["action_key"],
            comp_key=row["comp_key"],
            record=None if row["record"] is None else json.loads(row["record"]),
            attempts=int(row["attempts"]),
            last_error=row["last_error"],
            run_id=row["run_id"],
            run_epoch=None if row["run_epoch"] is None else int(row["run_epoch"]),
            compensatable=None if row["compensatable"] is None else bool(row["compensatable"]),
        )


@dataclass(frozen=True, slots=True)
class Fence:
    """Whom a saga write is made for; the database refuses it once that party lost its right.

    Attributes:
        run_id: The run writing from inside its drive (with ``run_epoch``):
            refused unless the run is RUNNING at that epoch (the rule of the
            run's session appends; a takeover bumps the epoch).
        run_epoch: That run's epoch.
        owner: The saga sweeper writing under its claim: refused once the saga
            is claimed by another sweeper (or was released).

    ``Fence()`` (nothing named) is a saga on plain ADK: not fenced.
    """

    run_id: str | None = None
    run_epoch: int | None = None
    owner: str | None = None

    def params(self) -> dict[str, Any]:
        """The fence's query parameters."""
        return {"run_id": self.run_id, "run_epoch": self.run_epoch, "owner": self.owner}

    def wrote(self, step: SagaStep) -> bool:
        """Whether ``step`` was recorded by this run at this epoch."""
        return self.run_id is not None and (step.run_id, step.run_epoch) == (
            self.run_id,
            self.run_epoch,
        )


UNFENCED = Fence()
"""The fence of writes made outside any run and any sweeper claim."""


def _check(row: Row | None, what: str, fence: Fence) -> Row | None:
    """Raises Fenced when the database refused a fenced write; else the row."""
    if row is not None and (row.get("fence") or row.get("status")) == "fenced":
        holder = (
            f"run {fence.run_id} at epoch {fence.run_epoch}"
            if fence.run_id is not None
            else f"saga sweeper {fence.owner}"
        )
        raise errors.Fenced(f"{what} refused: {holder} no longer holds it (taken over or finished)")
    return row


def keys_for(saga_id: str, step: str) -> tuple[str, str]:
    """The action and compensation idempotency keys of a step: stable, and distinct."""
    return f"saga:{saga_id}:{step}", f"saga:{saga_id}:{step}:undo"


class SagaLedger:
    """Sagas and their steps over a store."""

    def __init__(self, store: Store) -> None:
        """Creates the ledger over an open store."""
        self.store = store

    async def begin(
        self,
        *,
        saga_id: str,
        name: str,
        app_name: str,
        user_id: str,
        session_id: str,
        invocation_id: str,
    ) -> Saga:
        """Records a saga (or returns the one already recorded under this id)."""
        row = await self.store.fetchrow(
            "saga_begin",
            {
                "saga_id": saga_id,
                "name": name,
                "app_name": app_name,
                "user_id": user_id,
                "session_id": session_id,
                "invocation_id": invocation_id,
            },
        )
        assert row is not None
        return Saga.from_row(row)

    async def get(self, saga_id: str) -> Saga | None:
        """One saga, or None."""
        row = await self.store.fetchrow("saga_get", {"saga_id": saga_id})
        return None if row is None else Saga.from_row(row)

    async def list_sagas(self, *, status: SagaStatus | None = None, limit: int = 100) -> list[Saga]:
        """Sagas, newest first."""
        rows = await self.store.fetch(
            "saga_list", {"status": status.value if status else None, "limit": limit}
        )
        return [Saga.from_row(r) for r in rows]

    async def steps(self, saga_id: str) -> list[SagaStep]:
        """A saga's steps, newest first."""
        return [
            SagaStep.from_row(r) for r in await self.store.fetch("saga_steps", {"saga_id": saga_id})
        ]

    async def step_pending(
        self,
        saga_id: str,
        step: str,
        *,
        fence: Fence = UNFENCED,
        compensatable: bool | None = None,
    ) -> tuple[str, str]:
        """Records that a step is about to act; returns its (action, compensation) keys.

        ``compensatable`` says whether the code beginning it can undo it; the
        first record of the step keeps it (a re-drive does not change it).

        Raises:
            durable_adk.errors.Fenced: ``fence``'s run was taken over or has finished.
        """
        action_key, comp_key = keys_for(saga_id, step)
        row = await self.store.fetchrow(
            "saga_step_pending",
            {
                "saga_id": saga_id,
                "step": step,
                "action_key": action_key,
                "comp_key": comp_key,
                "compensatable": compensatable,
                **fence.params(),
            },
        )
        _check(row, f"step {step} of saga {saga_id}", fence)
        return action_key, comp_key

    async def step_done(
        self, saga_id: str, step: str, record: Mapping[str, Any], *, fence: Fence = UNFENCED
    ) -> None:
        """Records that a step acted, with what its compensator needs.

        Raises:
            durable_adk.errors.Fenced: ``fence``'s run was taken over or has finished.
        """
        row = await self.store.fetchrow(
            "saga_step_done",
            {
                "saga_id": saga_id,
                "step": step,
                "record": json.dumps(dict(record)),
                **fence.params(),
            },
        )
        _check(row, f"step {step} of saga {saga_id}", fence)

    async def step_undone(
        self,
        saga_id: str,
        step: str,
        status: StepStatus,
        *,
        attempts: int,
        error: str | None = None,
        fence: Fence = UNFENCED,
    ) -> None:
        """Records the end of a step's compensation.

        Raises:
            durable_adk.errors.Fenced: ``fence``'s run or claim was lost.
        """
        row = await self.store.fetchrow(
            "saga_step_undone",
            {
                "saga_id": saga_id,
                "step": step,
                "status": status.value,
                "attempts": attempts,
                "error": error,
                **fence.params(),
            },
        )
        _check(row, f"compensation of {step} in saga {saga_id}", fence)

    async def step_can_act(self, saga_id: str, step: str) -> bool:
        """Whether the run and epoch that recorded a step may still act on it.

        True while that run is RUNNING at that epoch with a live lease (database
        clock); False once it finished, was taken over (only after its lease
        expired) or let its lease expire, and for a step recorded outside a run.
        """
        return bool(
            await self.store.fetchval("saga_step_can_act", {"saga_id": saga_id, "step": step})
        )

    async def compensating(
        self, saga_id: str, reason: str, *, fence: Fence = UNFENCED
    ) -> Saga | None:
        """Marks a saga as compensating (the first reason and failure time stay).

        Raises:
            durable_adk.errors.Fenced: ``fence``'s run or claim was lost.
        """
        row = await self.store.fetchrow(
            "saga_compensating", {"saga_id": saga_id, "reason": reason, **fence.params()}
        )
        row = _check(row, f"saga {saga_id}", fence)
        return None if row is None or row["saga_id"] is None else Saga.from_row(row)

    async def finish(
        self,
        saga_id: str,
        status: SagaStatus,
        reason: str | None = None,
        *,
        fence: Fence = UNFENCED,
    ) -> Saga | None:
        """Gives a saga its final status; None if it already had one.

        A saga sweeper's finish (``fence.owner``) keeps its claim: the saga owes
        its outcome event until :meth:`recorded`.

        Raises:
            durable_adk.errors.Fenced: ``fence``'s run or claim was lost.
        """
        row = await self.store.fetchrow(
            "saga_finish",
            {"saga_id": saga_id, "status": status.value, "reason": reason, **fence.params()},
        )
        row = _check(row, f"saga {saga_id}", fence)
        return None if row is None or row["saga_id"] is None else Saga.from_row(row)

    async def renew(self, saga_id: str, owner: str, *, lease: float) -> bool:
        """Extends a sweeper's claim on a saga; False if it was lost or is no longer needed."""
        row = await self.store.fetchrow(
            "saga_renew", {"saga_id": saga_id, "owner": owner, "lease": lease}
        )
        return row is not None

    async def release(self, saga_id: str, owner: str) -> bool:
        """Ends a sweeper's claim without finishing the saga (a later pass takes it again)."""
        return (
            await self.store.fetchrow("saga_release", {"saga_id": saga_id, "owner": owner})
            is not None
        )

    async def recorded(self, saga_id: str, owner: str) -> bool:
        """The sweeper stored the saga's outcome event: nothing more is owed, the claim ends."""
        row = await self.store.fetchrow("saga_recorded", {"saga_id": saga_id, "owner": owner})
        return row is not None

    async def claim_stuck(
        self,
        owner: str,
        *,
        name: str,
        app_name: str,
        quiet_for: float,
        lease: float = 60.0,
        limit: int = 10,
        serving: Serving = UNVERSIONED,
    ) -> list[Saga]:
        """Claims stuck sagas of one name and app.

        Stuck: no final status, quiet for ``quiet_for`` seconds, and a run that is
        neither live (RUNNING, QUEUED) nor waiting on a long-running call (PAUSED).
        Only sagas recorded under a version ``serving`` takes (or under none),
        as for runs (docs/deploying.md).
        """
        rows = await self.store.fetch(
            "saga_claim_stuck",
            {
                "owner": owner,
                "name": name,
                "app_name": app_name,
                "timeout": quiet_for,
                "lease": lease,
                "limit": limit,
                "serves": serving.params()["serves"],
            },
        )
        return [Saga.from_row(r) for r in rows]

    async def backdate(self, saga_id: str, seconds: float) -> None:
        """Moves a saga's quiet time ``seconds`` into the past (tests, operators)."""
        await self.store.execute("saga_backdate", {"saga_id": saga_id, "seconds": seconds})

    async def left_for_other_code(self, saga: Saga, drifted: SagaDrifted) -> None:
        """Records (once) that this code lacks compensators the saga needs; nothing was undone."""
        await self.store.execute(
            "dead_letter_add_once",
            {
                "kind": "compensation",
                "run_id": None,
                "request": json.dumps({"saga_id": saga.saga_id, "steps": list(drifted.steps)}),
                "classification": f"saga {saga.name}: drift (left for code that can undo it)",
                "last_events": None,
                "error": str(drifted),
            },
        )

    async def dead_letter(self, *, saga: Saga, step: SagaStep, error: str) -> None:
        """Records a compensation that needs a person."""
        await self.store.execute(
            "dead_letter_add",
            {
                "kind": "compensation",
                "run_id": None,
                "request": json.dumps(
                    {"saga_id": saga.saga_id, "step": step.step, "record": step.record}
                ),
                "classification": f"saga {saga.name}: compensation of {step.step} failed",
                "last_events": None,
                "error": error,
            },
        )


def owes_undo(status: str, compensatable: bool | None) -> bool:
    """Whether a step still to undo (PENDING or DONE) was begun by code that could undo it.

    Code that lacks such a step's compensator has drifted: the drive's drift
    check and the compensation engine both ask this.
    """
    return bool(compensatable) and status in (StepStatus.PENDING, StepStatus.DONE)


class SagaDrifted(OutcomeUnknown):
    """The saga recorded steps whose compensators this code lacks: nothing was undone.

    A step begun by code that could undo it (``compensatable``) must be undone
    by code that still can; a worker whose stage lost its compensator (the
    stage was renamed away or marked uncompensatable) leaves the saga for one
    that has it instead of undoing the rest around it.

    Attributes:
        steps: The steps, newest first, whose compensators are missing.
    """

    def __init__(self, saga: str, steps: list[str]) -> None:
        self.steps = tuple(steps)
        super().__init__(
            f"saga {saga!r}: this code has no compensator for "
            + ", ".join(repr(s) for s in steps)
            + ", which the code that began them could undo"
        )


@dataclass(frozen=True, slots=True)
class Undo:
    """How to undo one kind of step.

    Attributes:
        compensate: Undoes it (idempotent under the compensation key; treats a
            missing or already undone effect as done). None for a step that
            cannot be undone: if it acted, its compensation fails to a dead letter.
        find: Looks the action up by its idempotency key, for a step that died
            PENDING; its answer becomes the record. None: no lookup exists, and a
            PENDING step's compensation fails to a dead letter.
        record_of: Turns what ``find`` returned into the compensator's record.
    """

    compensate: Compensator | None
    find: Finder | None = None
    record_of: Callable[[Any], Mapping[str, Any]] = lambda found: dict(found)


@dataclass(frozen=True, slots=True)
class CompensationResult:
    """How a compensation pass ended.

    Attributes:
        status: COMPENSATED, or COMPENSATION_FAILED when a step could not be
            undone; COMPENSATING when the pass left the saga unfinished because
            a step that died PENDING may still act (see ``waiting``).
        failed_steps: The steps left for a person (each has a dead letter).
        seconds: From the saga's failure to the end of this pass (database clock).
        waiting: Steps that died PENDING, were not found, and whose run may still
            act: not concluded; a later pass decides them.
    """

    status: SagaStatus
    failed_steps: tuple[str, ...]
    seconds: float | None
    waiting: tuple[str, ...] = ()


class Compensation:
    """Undoes a saga's steps newest first, with retries and dead letters."""

    def __init__(
        self,
        ledger: SagaLedger,
        undo: Mapping[str, Undo],
        *,
        retries: int = 3,
        backoff: float = 0.2,
        metrics: Metrics = NO_METRICS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """Creates the compensation engine.

        Args:
            ledger: The saga ledger.
            undo: How to undo each step, by step name.
            retries: Attempts per compensation before it is dead-lettered.
            backoff: First wait between attempts, doubled each time.
            metrics: Where outcomes and durations are recorded.
            sleep: The wait between attempts.
        """
        if retries < 1 or backoff < 0:
            raise errors.InvalidArgument("retries must be >= 1 and backoff >= 0")
        self.ledger = ledger
        self.undo = dict(undo)
        self.retries = retries
        self.backoff = backoff
        self.metrics = metrics
        self.sleep = sleep

    async def run(self, saga: Saga, reason: str, *, fence: Fence = UNFENCED) -> CompensationResult:
        """Compensates every step that may have acted, then finishes the saga.

        The work is wrapped in a ``durable_adk.compensation`` span.

        Args:
            saga: The saga.
            reason: Why it is rolled back.
            fence: Whom the writes are made for: the run compensating in its own
                drive, or the saga sweeper's claim. A step this run recorded at
                this epoch is its own (its call returned before compensation).

        Raises:
            durable_adk.errors.Fenced: The run or the claim was lost; nothing
                more was written.
        """
        attributes = {"durable_adk.saga_id": saga.saga_id, "durable_adk.saga": saga.name}
        with self.metrics.span("durable_adk.compensation", attributes) as span:
            result = await self._run(saga, reason, fence)
            span.set_attribute("durable_adk.status", result.status.value)
            return result

    def lacking(self, steps: list[SagaStep]) -> list[str]:
        """Steps still to undo that were begun undoable but have no compensator here."""
        return [
            step.step
            for step in steps
            if owes_undo(step.status, step.compensatable)
            and (step.step not in self.undo or self.undo[step.step].compensate is None)
        ]

    async def _run(self, saga: Saga, reason: str, fence: Fence) -> CompensationResult:
        """Compensates every step that may have acted, then finishes the saga."""
        steps = await self.ledger.steps(saga.saga_id)
        if missing := self.lacking(steps):
            raise SagaDrifted(saga.name, missing)  # before anything is written or undone
        marked = await self.ledger.compensating(saga.saga_id, reason, fence=fence)
        failed: list[str] = []
        waiting: list[str] = []
        for step in steps:
            if step.status is StepStatus.COMPENSATED:
                continue
            undone = await self._undo_step(saga, step, fence)
            if undone is None:  # not decidable yet
                waiting.append(step.step)
            elif not undone:
                failed.append(step.step)
        if waiting:
            logger.info("saga %s: %s may still act; its compensation waits", saga.saga_id, waiting)
            return CompensationResult(
                status=SagaStatus.COMPENSATING,
                failed_steps=tuple(failed),
                seconds=None,
                waiting=tuple(waiting),
            )
        status = SagaStatus.COMPENSATION_FAILED if failed else SagaStatus.COMPENSATED
        finished = await self.ledger.finish(saga.saga_id, status, reason, fence=fence)
        seconds = None
        failed_at = (marked or saga).failed_at
        if finished is not None and finished.finished_at is not None and failed_at is not None:
            seconds = max(0.0, finished.finished_at - failed_at)
        if finished is not None:
            self.metrics.saga_outcome(status.value.lower(), compensation_seconds=seconds)
        return CompensationResult(status=status, failed_steps=tuple(failed), seconds=seconds)

    async def _undo_step(self, saga: Saga, step: SagaStep, fence: Fence) -> bool | None:
        """Undoes one step: True when undone, False when given up, None to wait."""
        undo = self.undo.get(step.step)
        if undo is None:
            return await self._give_up(
                saga, step, 0, f"no compensator for step {step.step!r}", fence
            )
        record: Mapping[str, Any] | None = step.record
        attempts = 0
        last_error = ""
        while attempts < self.retries:
            attempts += 1
            try:
                if record is None:  # died PENDING: did the action happen at all?
                    if undo.find is None:
                        return await self._give_up(
                            saga, step, attempts, "step died mid-action and has no lookup", fence
                        )
                    # Asked before the lookup: a run that may still act could make
                    # its call land after a negative answer.
                    may_act = not fence.wrote(step) and await self.ledger.step_can_act(
                        saga.saga_id, step.step
                    )
                    found = await undo.find(step.action_key)
                    if found is None:
                        if may_act:
                            return None
                        await self.ledger.step_undone(
                            saga.saga_id,
                            step.step,
                            StepStatus.COMPENSATED,
                            attempts=attempts,
                            error="the action never happened",
                            fence=fence,
                        )
                        return True
                    record = undo.record_of(found)
                if undo.compensate is None:
                    return await self._give_up(
                        saga,
                        step,
                        attempts,
                        f"step {step.step!r} acted and cannot be undone",
                        fence,
                    )
                await undo.compensate({**record, "key": step.comp_key}, step.comp_key)
                crash_point(f"saga.undo.{step.step}.after")
                await self.ledger.step_undone(
                    saga.saga_id, step.step, StepStatus.COMPENSATED, attempts=attempts, fence=fence
                )
                return True
            except errors.Fenced:
                raise  # the run or the claim is gone: this worker writes nothing more
            except Exception as exc:  # any failure of an outside system: retry, then give up
                last_error = f"{type(exc).__name__}: {exc}"
                logger.warning(
                    "saga %s: undo of %s failed (%s)", saga.saga_id, step.step, last_error
                )
                if attempts < self.retries:
                    await self.sleep(self.backoff * 2 ** (attempts - 1))
        return await self._give_up(saga, step, attempts, last_error, fence)

    async def _give_up(
        self, saga: Saga, step: SagaStep, attempts: int, error: str, fence: Fence
    ) -> bool:
        await self.ledger.step_undone(
            saga.saga_id,
            step.step,
            StepStatus.COMPENSATION_FAILED,
            attempts=attempts,
            error=error,
            fence=fence,
        )
        await self.ledger.dead_letter(saga=saga, step=step, error=error)
        return False
