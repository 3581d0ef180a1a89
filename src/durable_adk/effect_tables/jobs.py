"""The job table: long-running work joined durably to the call it answers.

A long-running call involves three facts that arrive separately and in any
order: the job (created by the tool, its id the work's business identity such
as ``report:2026-Q3:EMEA``), the call it answers (session, invocation and
function call id) and the result (from a webhook, a queue or a poller, maybe
twice, maybe late). One row per job joins them. Guarantees (framework-agnostic:
no ADK import here):

* :meth:`JobTable.create` is idempotent: the first call creates the row, later
  ones return it unchanged.
* :meth:`JobTable.attach` fills only empty columns: a replayed or late attach
  never overwrites the call a job already answers. Another call that attaches
  to the same job (a second call with the same business identity, maybe in
  another invocation or session) is kept beside it (:meth:`JobTable.calls`)
  and answered too, once.
* Submission is retried until the outside system accepts it:
  :meth:`JobTable.claim_submit` hands the next attempt of a job to one
  submitter at a time (under a lease, only before the deadline),
  :meth:`JobTable.submit_failed` backs it off, :meth:`JobTable.mark_submitted`
  records the acceptance (once). The job id is the idempotency key
  downstream, so an attempt repeated after a crash is harmless.
* :meth:`JobTable.complete` is one conditional update: the first terminal
  result wins; a duplicate or late one changes nothing and still succeeds for
  its sender. A completion that arrives before the call is attached is kept
  and the job becomes ready once both halves exist.
* :meth:`JobTable.claim_for_resume` hands each ready call (its job terminal)
  to one resumer at a time, under a lease on the database clock
  (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, the write lock on SQLite). A
  resumer records the run that carries the answer with
  :meth:`JobTable.mark_resumed`; a claim whose resumer died before that is
  claimable again once its lease ran out.
* Progress is recorded only when it changed (:meth:`JobTable.progress`) and
  handed out at most once per interval (:meth:`JobTable.claim_progress`).
* :meth:`JobTable.expire` turns open jobs past their deadline into ``EXPIRED``
  with an explicit result, in the same conditional update, so a real result
  arriving later is a no-op.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from durable_adk import errors
from durable_adk.store.base import Row, Store

DEFAULT_EXPIRED_RESULT: Mapping[str, Any] = {
    "status": "expired",
    "message": "No result arrived before the deadline; the work was cancelled.",
}
"""The result an expired job answers its call with, unless another is given."""


class JobNotFound(errors.DurableError):
    """No job has this id."""


class JobState(StrEnum):
    """Where a job stands. Every state but STARTED is terminal."""

    STARTED = "STARTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    EXPIRED = "EXPIRED"
    CANCELLED = "CANCELLED"


COMPLETION_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
"""The terminal states a completion may report (EXPIRED belongs to the deadline sweep)."""


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True, slots=True)
class Job:
    """One long-running job and the call it answers.

    Attributes:
        job_id: The work's business identity (``report:2026-Q3:EMEA``).
        tool_name: The tool that started it; also the function response's name.
        request: The call's arguments, as the tool received them.
        app_name: The ADK app of the call (None until attached).
        user_id: The session's user (None until attached).
        session_id: The session of the call (None until attached).
        invocation_id: The invocation that made the call (None until attached).
        function_call_id: The call's id, repeated in the answer (None until attached).
        state: Where the job stands.
        result: The terminal result (None while STARTED).
        progress: The last progress reported.
        progress_at: When it was reported (database clock).
        progress_sent: The last progress handed out for delivery.
        progress_sent_at: When it was handed out.
        deadline_at: After this the expiry sweep ends the job.
        submitted_at: When the outside system accepted the work (None until then).
        submit_attempts: Submission attempts started so far.
        submit_after: When the next submission attempt may start (the running
            attempt's lease, or the back-off after a failed one).
        submit_error: The last failed attempt's error.
        timer: A durable sleep's wake-up (its ``deadline_at`` is the due time).
        resume_owner: The resumer holding (or last holding) the resume claim
            (of this call: a record from :meth:`JobTable.claim_for_resume`
            describes one call, the job row's own or another one).
        resume_epoch: Bumped by every resume claim; names the claim.
        resume_until: The resume claim's lease expiry.
        resume_run_id: The run that carries the answer.
        resumed_at: When the answer was handed to that run.
        created_at: When the job was created.
        updated_at: When the row last changed.
        completed_at: When the job reached its terminal state.
    """

    job_id: str
    tool_name: str
    request: Any
    app_name: str | None
    user_id: str | None
    session_id: str | None
    invocation_id: str | None
    function_call_id: str | None
    state: JobState
    result: Any
    progress: Any
    progress_at: float | None
    progress_sent: Any
    progress_sent_at: float | None
    deadline_at: float
    submitted_at: float | None
    resume_owner: str | None
    resume_epoch: int
    resume_until: float | None
    resume_run_id: str | None
    resumed_at: float | None
    created_at: float
    updated_at: float
    completed_at: float | None
    submit_attempts: int = 0
    submit_after: float | None = None
    submit_error: str | None = None
    timer: bool = False

    @classmethod
    def from_row(cls, row: Row) -> Job:
        """Maps a ``jobs`` row."""
        return cls(
            job_id=row["job_id"],
            tool_name=row["tool_name"],
            request=_loads(row["request"]),
            app_name=row["app_name"],
            user_id=row["user_id"],
            session_id=row["session_id"],
            invocation_id=row["invocation_id"],
            function_call_id=row["function_call_id"],
            state=JobState(row["state"]),
            result=_loads(row["result"]),
            progress=_loads(row["progress"]),
            progress_at=_float(row["progress_at"]),
            progress_sent=_loads(row["progress_sent"]),
            progress_sent_at=_float(row["progress_sent_at"]),
            deadline_at=float(row["deadline_at"]),
            submitted_at=_float(row["submitted_at"]),
            resume_owner=row["resume_owner"],
            resume_epoch=int(row["resume_epoch"]),
            resume_until=_float(row["resume_until"]),
            resume_run_id=row["resume_run_id"],
            resumed_at=_float(row["resumed_at"]),
            created_at=float(row["created_at"]),
            updated_at=float(row["updated_at"]),
            completed_at=_float(row["completed_at"]),
            submit_attempts=int(row["submit_attempts"]),
            submit_after=_float(row["submit_after"]),
            submit_error=row["submit_error"],
            timer=bool(row["timer"]) if "timer" in row else False,
        )

    @property
    def terminal(self) -> bool:
        """Whether the job has its final result."""
        return self.state is not JobState.STARTED

    @property
    def attached(self) -> bool:
        """Whether the call the job answers is fully known."""
        return None not in (
            self.app_name,
            self.user_id,
            self.session_id,
            self.invocation_id,
            self.function_call_id,
        )


@dataclass(frozen=True, slots=True)
class JobCall:
    """Another call attached to a job (the job row holds the first one).

    Attributes:
        job_id: The job.
        app_name: The call's ADK app.
        user_id: The session's user.
        session_id: The call's session.
        invocation_id: The invocation that made the call.
        function_call_id: The call's id, repeated in its answer.
        resume_owner: The resumer holding (or last holding) its resume claim.
        resume_epoch: Bumped by every resume claim of this call.
        resume_until: The claim's lease expiry.
        resume_run_id: The run that carries its answer.
        resumed_at: When its answer was handed to that run.
        created_at: When the call attached.
    """

    job_id: str
    app_name: str
    user_id: str
    session_id: str
    invocation_id: str
    function_call_id: str
    resume_owner: str | None
    resume_epoch: int
    resume_until: float | None
    resume_run_id: str | None
    resumed_at: float | None
    created_at: float

    @classmethod
    def from_row(cls, row: Row) -> JobCall:
        """Maps a ``job_calls`` row."""
        return cls(
            job_id=row["job_id"],
            app_name=row["app_name"],
            user_id=row["user_id"],
            session_id=row["session_id"],
            invocation_id=row["invocation_id"],
            function_call_id=row["function_call_id"],
            resume_owner=row["resume_owner"],
            resume_epoch=int(row["resume_epoch"]),
            resume_until=_float(row["resume_until"]),
            resume_run_id=row["resume_run_id"],
            resumed_at=_float(row["resumed_at"]),
            created_at=float(row["created_at"]),
        )

    def answering(self, job: Job) -> Job:
        """The job as this call sees it: the job's result, this call and its claim."""
        return replace(
            job,
            app_name=self.app_name,
            user_id=self.user_id,
            session_id=self.session_id,
            invocation_id=self.invocation_id,
            function_call_id=self.function_call_id,
            resume_owner=self.resume_owner,
            resume_epoch=self.resume_epoch,
            resume_until=self.resume_until,
            resume_run_id=self.resume_run_id,
            resumed_at=self.resumed_at,
        )


@dataclass(frozen=True, slots=True)
class Completion:
    """What a completion did.

    Attributes:
        job: The job as it now stands (the first terminal result, if this one lost).
        changed: Whether this completion was the one that ended the job.
    """

    job: Job
    changed: bool


def _dumps(value: Any, what: str) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise errors.InvalidArgument(f"{what} must be JSON-serializable: {exc}") from exc


def _claims(jobs: Sequence[Job]) -> str:
    return json.dumps(
        [
            {
                "job_id": j.job_id,
                "epoch": j.resume_epoch,
                "session_id": j.session_id,
                "call": j.function_call_id,
            }
            for j in jobs
        ]
    )


def _check_new_job(job_id: str, tool_name: str, deadline: float) -> None:
    """Refuses a job that cannot be created (before anything is written)."""
    if not isinstance(job_id, str) or not job_id:
        raise errors.InvalidArgument("job_id must be a non-empty string")
    if not tool_name:
        raise errors.InvalidArgument("tool_name must be a non-empty string")
    if deadline <= 0:
        raise errors.InvalidArgument("deadline must be > 0 seconds")


class JobTable:
    """Long-running jobs over a store."""

    def __init__(self, store: Store) -> None:
        """Creates the table's API.

        Args:
            store: An open store (its schema includes the ``jobs`` table).
        """
        self.store = store

    async def create(
        self, job_id: str, *, tool_name: str, deadline: float, request: Any = None
    ) -> tuple[Job, bool]:
        """Creates a job in STARTED, or returns the existing one unchanged.

        Args:
            job_id: The work's business identity, the same on every retry.
            tool_name: The tool (and function response) name.
            deadline: Seconds from now (database clock) before the job expires.
            request: The call's arguments (JSON-serializable), kept for submission.

        Returns:
            The job, and whether this call created it.
        """
        _check_new_job(job_id, tool_name, deadline)
        row = await self.store.fetchrow(
            "job_create",
            {
                "job_id": job_id,
                "tool_name": tool_name,
                "request": None if request is None else _dumps(request, "request"),
                "deadline": float(deadline),
            },
        )
        assert row is not None
        return Job.from_row(row), bool(row["created"])

    async def start(
        self,
        job_id: str,
        *,
        tool_name: str,
        deadline: float,
        request: Any = None,
        app_name: str,
        user_id: str,
        session_id: str,
        invocation_id: str,
        function_call_id: str,
        with_events: Callable[[Mapping[str, Any]], Awaitable[Row | None]] | None = None,
    ) -> Job:
        """Creates the job if absent and attaches the call to it, in one unit.

        :meth:`create` then :meth:`attach`, with no window between them in
        which a crash leaves a job nobody answers from.

        Args:
            job_id, tool_name, deadline, request: As :meth:`create`.
            app_name, user_id, session_id, invocation_id, function_call_id:
                As :meth:`attach`.
            with_events: Writes the job together with the run's buffered
                events (the call among them) in one unit, given
                ``job_start``'s parameters; returns None when there was
                nothing to write with it (the job is then started alone).
        """
        _check_new_job(job_id, tool_name, deadline)
        if not function_call_id:
            raise errors.InvalidArgument("function_call_id must be a non-empty string")
        params = {
            "job_id": job_id,
            "tool_name": tool_name,
            "request": None if request is None else _dumps(request, "request"),
            "deadline": float(deadline),
            "app_name": app_name,
            "user_id": user_id,
            "session_id": session_id,
            "invocation_id": invocation_id,
            "function_call_id": function_call_id,
        }
        row = await with_events(params) if with_events is not None else None
        if row is None:
            row = await self.store.fetchrow("job_start", params)
        assert row is not None and row["job_id"] == job_id
        return Job.from_row(row)

    async def attach(
        self,
        job_id: str,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        invocation_id: str,
        function_call_id: str,
    ) -> Job:
        """Records the call a job answers; fills only the columns still empty.

        Raises:
            JobNotFound: No such job.
        """
        row = await self.store.fetchrow(
            "job_attach",
            {
                "job_id": job_id,
                "app_name": app_name,
                "user_id": user_id,
                "session_id": session_id,
                "invocation_id": invocation_id,
                "function_call_id": function_call_id,
            },
        )
        if row is None:
            raise JobNotFound(f"no job {job_id!r}")
        return Job.from_row(row)

    async def mark_submitted(self, job_id: str) -> bool:
        """Records that the outside system accepted the work; True for exactly one caller."""
        return await self.store.fetchrow("job_mark_submitted", {"job_id": job_id}) is not None

    async def claim_submit(
        self,
        job_id: str | None = None,
        *,
        tools: Sequence[str] | None = None,
        lease: float = 30.0,
        limit: int = 100,
    ) -> list[Job]:
        """Takes the next submission attempt of open jobs whose work is not accepted yet.

        A job is due when no attempt holds it (the last one's lease ran out, or
        its back-off passed) and its deadline has not passed. Each attempt is
        handed to one caller; the returned job's ``submit_attempts`` names it.

        Args:
            job_id: Only this job (None: any due job).
            tools: Only jobs of these tools (None: any tool).
            lease: Seconds the attempt holds the job before another may start.
            limit: Most jobs claimed.
        """
        if lease <= 0:
            raise errors.InvalidArgument("lease must be > 0 seconds")
        rows = await self.store.fetch(
            "job_claim_submit",
            {
                "job_id": job_id,
                "tools": None if tools is None else json.dumps(list(tools)),
                "lease": float(lease),
                "limit": limit,
            },
        )
        return [Job.from_row(r) for r in rows]

    async def submit_failed(
        self, job_id: str, attempt: int, error: str, *, retry_in: float
    ) -> bool:
        """Records a failed attempt; the next one may start ``retry_in`` seconds from now.

        Only the current attempt (``attempt`` is its ``submit_attempts``) sets
        the back-off: a late failure of an older attempt changes nothing.
        """
        row = await self.store.fetchrow(
            "job_submit_failed",
            {
                "job_id": job_id,
                "attempt": int(attempt),
                "error": error[:2000],
                "retry_in": max(0.0, float(retry_in)),
            },
        )
        return row is not None

    async def calls(self, job_id: str) -> list[JobCall]:
        """The other calls attached to a job (not the one on its row), oldest first."""
        rows = await self.store.fetch("job_calls_of", {"job_id": job_id})
        return [JobCall.from_row(r) for r in rows]

    async def complete(self, job_id: str, state: JobState | str, result: Any) -> Completion:
        """Ends a job with its result; the first terminal result wins.

        A duplicate or late completion changes nothing and returns normally
        (``changed=False``), so its sender stops retrying.

        Args:
            job_id: The job.
            state: SUCCEEDED, FAILED or CANCELLED.
            result: The result the call is answered with (JSON-serializable).

        Raises:
            JobNotFound: No such job (nothing is written).
            durable_adk.errors.InvalidArgument: Another state, or a result
                that is not JSON.
            durable_adk.errors.PayloadTooDeep: The result is nested deeper
                than the store's limits allow (nothing is written).
            durable_adk.errors.PayloadTooLarge: The result is larger than
                they allow (nothing is written).
        """
        try:
            final = JobState(state)
        except ValueError:
            final = JobState.STARTED
        if final not in COMPLETION_STATES:
            raise errors.InvalidArgument(
                f"a completion's state is SUCCEEDED, FAILED or CANCELLED, not {state!r}"
            )
        self.store.limits.check(result, f"the result of job {job_id!r}")
        row = await self.store.fetchrow(
            "job_complete",
            {"job_id": job_id, "state": final.value, "result": _dumps(result, "result")},
        )
        if row is None:
            raise JobNotFound(f"no job {job_id!r}")
        job = Job.from_row(row)
        if row["outcome"] == "changed" or job.state is not JobState.STARTED:
            return Completion(job=job, changed=row["outcome"] == "changed")
        # The update found the row no longer STARTED, yet the statement's own
        # read of it says STARTED: on PostgreSQL the update waited for a
        # concurrent completion and saw its committed row, while the fallback
        # read of the same statement sees the row as the statement began. That
        # completion has committed, so a new statement reads what it kept (a
        # job never goes back to STARTED).
        now = await self.get(job_id)
        if now is None:
            raise JobNotFound(f"no job {job_id!r}")
        if now.state is JobState.STARTED:
            raise errors.StoreError(
                f"job {job_id!r}: its completion was refused but the job reads STARTED; "
                "send the completion again"
            )
        return Completion(job=now, changed=False)

    async def progress(self, job_id: str, progress: Mapping[str, Any]) -> bool:
        """Records an open job's progress; True only when it changed.

        Delivery is throttled separately (:meth:`claim_progress`).
        """
        self.store.limits.check(progress, f"the progress of job {job_id!r}")
        if self.store.codec is not None:  # sealed values always differ: compare clear ones
            current = await self.get(job_id)
            if current is not None and current.progress == json.loads(_dumps(progress, "x")):
                return False
        return (
            await self.store.fetchrow(
                "job_progress", {"job_id": job_id, "progress": _dumps(progress, "progress")}
            )
            is not None
        )

    async def claim_progress(self, *, interval: float, limit: int = 100) -> list[Job]:
        """Claims progress to deliver: changed since delivered, last delivery ``interval`` ago.

        The claim marks the progress delivered, so each is handed out at most once.
        """
        rows = await self.store.fetch(
            "job_claim_progress", {"interval": float(interval), "limit": limit}
        )
        return [Job.from_row(r) for r in rows]

    async def claim_for_resume(
        self,
        owner: str,
        *,
        app_name: str | None = None,
        lease: float = 30.0,
        gather: float = 0.0,
        limit: int = 100,
    ) -> list[Job]:
        """Claims ready calls: their job terminal, not yet handed to a run.

        Every call attached to a job is one record: the job row's own call,
        and each other call with the same business identity
        (:meth:`calls`), as the job seen by that call
        (:meth:`JobCall.answering`). Each is claimed, marked and released on
        its own, so each is answered once.

        Args:
            owner: The resumer's name.
            app_name: Only jobs of this app (None: any).
            lease: Seconds the claim holds; after that another resumer may claim.
            gather: Seconds a job waits for a still-open sibling (same
                invocation) so both are answered in one message.
            limit: Most job rows claimed (and as many other calls).

        Returns:
            The claimed calls, grouped by invocation.
        """
        params = {
            "owner": owner,
            "app_name": app_name,
            "lease": float(lease),
            "gather": float(gather),
            "limit": limit,
        }
        jobs = [Job.from_row(r) for r in await self.store.fetch("job_claim_resume", params)]
        others = [
            JobCall.from_row(r) for r in await self.store.fetch("job_claim_resume_calls", params)
        ]
        # A terminal job's result never changes, so reading it after the claim is safe.
        finished: dict[str, Job | None] = {}
        for call in others:
            if call.job_id not in finished:
                finished[call.job_id] = await self.get(call.job_id)
            job = finished[call.job_id]
            if job is not None:
                jobs.append(call.answering(job))
        return sorted(jobs, key=lambda j: (j.invocation_id or "", j.completed_at or 0.0))

    async def mark_resumed(self, owner: str, jobs: Sequence[Job], run_id: str) -> set[str]:
        """Records the run that carries the answers of claimed jobs.

        Returns:
            The ids of the jobs marked (claims this owner still held).
        """
        params = {"claims": _claims(jobs), "owner": owner, "run_id": run_id}
        rows = [
            *await self.store.fetch("job_mark_resumed", params),
            *await self.store.fetch("job_mark_resumed_calls", params),
        ]
        return {r["job_id"] for r in rows}

    async def release(self, owner: str, jobs: Sequence[Job]) -> set[str]:
        """Gives resume claims back at once (the answers could not be handed over)."""
        params = {"claims": _claims(jobs), "owner": owner}
        rows = [
            *await self.store.fetch("job_release_resume", params),
            *await self.store.fetch("job_release_resume_calls", params),
        ]
        return {r["job_id"] for r in rows}

    async def expire(
        self, *, result: Mapping[str, Any] = DEFAULT_EXPIRED_RESULT, limit: int = 100
    ) -> list[Job]:
        """Turns open jobs past their deadline into EXPIRED with ``result``.

        Returns:
            The jobs this call expired.
        """
        rows = await self.store.fetch(
            "job_expire", {"result": _dumps(dict(result), "result"), "limit": limit}
        )
        return [Job.from_row(r) for r in rows]

    async def cancel_of_invocation(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        invocation_id: str,
        result: Mapping[str, Any],
    ) -> list[str]:
        """Ends CANCELLED the open jobs of a cancelled invocation; returns their ids.

        The first terminal result wins, so a completion that arrives later is
        acknowledged and changes nothing. The resumer then acknowledges these
        jobs without a run (the invocation takes no answer) and calls each
        tool's cancel hook.
        """
        rows = await self.store.fetch(
            "job_cancel_of_invocation",
            {
                "app_name": app_name,
                "user_id": user_id,
                "session_id": session_id,
                "invocation_id": invocation_id,
                "result": json.dumps(dict(result)),
            },
        )
        return sorted(str(r["job_id"]) for r in rows)

    async def create_timer(
        self,
        job_id: str,
        *,
        tool_name: str,
        seconds: float | None = None,
        until: float | None = None,
        request: Any = None,
    ) -> tuple[Job, bool]:
        """Creates a timer (a job that wakes at its due time), or returns the existing one.

        The due time is ``until`` (epoch seconds) or ``seconds`` from now on
        the database clock; it is the job's ``deadline_at``. A timer has no
        outside work (it is submitted at once) and is never expired: at its
        due time :meth:`wake` ends it ``SUCCEEDED`` with its wake-up.

        Raises:
            durable_adk.errors.InvalidArgument: Not exactly one of
                ``seconds`` and ``until``, a negative ``seconds``, or an
                empty id or tool name (nothing is written).
        """
        if not isinstance(job_id, str) or not job_id:
            raise errors.InvalidArgument("job_id must be a non-empty string")
        if not tool_name:
            raise errors.InvalidArgument("tool_name must be a non-empty string")
        if (seconds is None) == (until is None):
            raise errors.InvalidArgument("a timer needs exactly one of seconds and until")
        if seconds is not None and not seconds >= 0:
            raise errors.InvalidArgument("seconds must be >= 0")
        row = await self.store.fetchrow(
            "job_create_timer",
            {
                "job_id": job_id,
                "tool_name": tool_name,
                "request": None if request is None else _dumps(request, "request"),
                "seconds": None if seconds is None else float(seconds),
                "until": None if until is None else float(until),
            },
        )
        assert row is not None
        return Job.from_row(row), bool(row["created"])

    async def wake(self, *, limit: int = 100) -> list[Job]:
        """Wakes the timers due by the database clock: one indexed statement.

        Each due timer ends ``SUCCEEDED`` with the result ``{"status":
        "woke", "due": ..., "woke_at": ...}`` in one conditional update
        (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, the write lock on SQLite),
        so two wakers never wake one timer twice; a cancelled timer is not
        open and never wakes. The job resumer answers the calls.

        Returns:
            The timers this call woke.
        """
        rows = await self.store.fetch("job_wake", {"limit": limit})
        return [Job.from_row(r) for r in rows]

    async def wakes_at(self, invocation_id: str) -> float | None:
        """When an invocation's earliest open timer is due (None: it sleeps on none)."""
        row = await self.store.fetchrow("job_wake_of_invocation", {"invocation_id": invocation_id})
        return None if row is None else _float(row["wakes_at"])

    async def now(self) -> float:
        """The database clock, seconds since the Unix epoch."""
        row = await self.store.fetchrow("job_now", {})
        assert row is not None
        return float(row["now"])

    async def get(self, job_id: str) -> Job | None:
        """One job, or None."""
        row = await self.store.fetchrow("job_get", {"job_id": job_id})
        return None if row is None else Job.from_row(row)

    async def list_jobs(
        self,
        *,
        state: JobState | None = None,
        session_id: str | None = None,
        limit: int = 100,
    ) -> list[Job]:
        """Jobs, newest first, optionally of one state or one session."""
        rows = await self.store.fetch(
            "job_list",
            {"state": state.value if state else None, "session_id": session_id, "limit": limit},
        )
        return [Job.from_row(r) for r in rows]

    async def backdate(self, job_id: str, seconds: float) -> None:
        """Moves a job's deadline, claim leases, submission back-off and progress clock back."""
        await self.store.execute("job_backdate", {"job_id": job_id, "seconds": float(seconds)})

    async def backdate_submit(self, job_id: str, seconds: float) -> None:
        """Moves only a job's submission attempt lease (or back-off) ``seconds`` back."""
        await self.store.execute(
            "job_backdate_submit", {"job_id": job_id, "seconds": float(seconds)}
        )
