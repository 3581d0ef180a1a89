"""How a run ends: one pure decision, and one function that records it with its bookkeeping.

Every way a run can end, whoever drove it (DurableRunner, the worker service,
recovery, the job resumer, an answer, ADK's own Runner under
``DurableRunsPlugin``), goes through this module:

* :func:`decide` is pure: the drive's error (or None) and the classifier's
  verdict on the invocation in, an :class:`Ending` out. DONE, PAUSED, handed
  back for recovery with a back-off, PARKED with a dead letter, FAILED,
  CANCELLED, or taken over (another worker holds the run: nothing is written).
* :func:`record` writes the ending on the ledger under the run's lease
  (owner and epoch in the WHERE clause) and then does what every ending of
  that kind needs, so no entry point can forget a part of it:

  ========== =================================================================
  DONE       the invocation's PAUSED runs end DONE; its interrupts index follows
             the session (answered calls out), in the finish's own unit
  PAUSED     its open calls are indexed in the interrupts inbox, in the
             finish's own unit
  handed     nothing more: the run stays RUNNING, its lease expires now and
  back       recovery takes it after the back-off
  PARKED     a dead letter with the last events; the session's queue is woken
  FAILED     an answer the run did not store gives its claim back, so the pause
             can be answered again; the queue is woken
  CANCELLED  a run that drove its invocation (or paused on it) cancels the
             invocation: its other PAUSED runs end CANCELLED, its interrupts
             close, its open jobs end CANCELLED (a late completion changes
             nothing; the resumer calls their tools' cancel hooks) and the
             calls it left open are sealed as ADK seals an aborted
             invocation's. A QUEUED answer run cancelled before it drove
             gives its answer claim back instead. The queue is woken.
  ========== =================================================================

  A finish writes its invocation's inbox in the unit that writes the run's
  row (:func:`~durable_adk.adk.runs.inbox.inbox_at_finish`): no crash leaves a
  PAUSED run whose call an operator cannot see. A cancel's derived records
  (interrupts, claims, jobs, seals) are written after the run's own row: a
  crash between the two leaves them to the checks that read the ledger (a
  continuation is refused once its invocation is cancelled, whatever the
  jobs table says).

* :class:`Outcome` is what a drive returns: the ending and the status the
  ledger now holds. :meth:`Outcome.raise_for_caller` turns it into the error a
  caller of :meth:`DurableRunner.run` sees.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from google.adk.events.event import Event
from google.genai import types

from durable_adk import errors
from durable_adk.adk.commits.barrier import EventBatch
from durable_adk.adk.eventlog.classify import (
    ABORT_ERROR_CODE,
    Classification,
    OrphanClass,
    classify,
)
from durable_adk.adk.runs.inbox import inbox_at_finish, may_have_interrupts, seal_inbox
from durable_adk.adk.runs.policy import RetryPolicy, causes
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.adk.tools.workflow_nodes import NodeInFlight
from durable_adk.effect_tables.jobs import JobTable
from durable_adk.effect_tables.journal import OutcomeUnknown
from durable_adk.faults import crash_point
from durable_adk.ids import check_id
from durable_adk.metrics import Metrics
from durable_adk.runlog import run_event, taken_over
from durable_adk.store.outage import current_patience
from durable_adk.tables.interrupts import InterruptTable
from durable_adk.tables.ledger import Lease, Run, RunLedger, RunStatus

logger = logging.getLogger("durable_adk.runner")

LAST_EVENTS_KEPT = 20
"""How many of an invocation's last events a dead letter keeps."""

CANCELLED_JOB_RESULT = {"status": "cancelled", "cancelled": True, "reason": "invocation cancelled"}
"""The result a cancelled invocation's open jobs end with."""


class EndKind(StrEnum):
    """The ways a run ends (or leaves this worker)."""

    DONE = "DONE"
    PAUSED = "PAUSED"
    HANDED_BACK = "HANDED_BACK"
    PARKED = "PARKED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TAKEN_OVER = "TAKEN_OVER"


@dataclass(frozen=True, slots=True)
class Ending:
    """How a run ends, decided before anything is written.

    Attributes:
        kind: The ending.
        reason: Why, for the ledger's ``last_error`` and the log (None for
            DONE and PAUSED).
        error: The error behind the ending, if any: the app's error of a
            FAILED run, the :class:`~durable_adk.effect_tables.journal.OutcomeUnknown` of a
            PARKED one, the transient fault of a hand-back.
        found: The class recorded with a parked run (its dead letter's).
        by: Who cancelled a CANCELLED run (an id, for the audit trail).
    """

    kind: EndKind
    reason: str | None = None
    error: BaseException | None = None
    found: str | None = None
    by: str | None = None


def _as_id(who: str | None) -> str | None:
    """``who`` if it is a valid actor id for the audit trail, else None."""
    try:
        return check_id("by", who) if who is not None else None
    except errors.InvalidArgument:
        return None


def _cause(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    return next((e for e in causes(exc) if isinstance(e, kind)), None)


def decide(
    error: BaseException | None,
    verdict: Classification | None,
    *,
    retry_policy: RetryPolicy,
    cancelled_by: str | None = None,
    lease_lost: str | None = None,
    nothing_to_do: bool = False,
) -> Ending:
    """The ending of a drive, from how it ended. Pure: no I/O.

    Args:
        error: What the drive raised (None: ADK's invocation ended normally).
        verdict: The classifier's verdict on the invocation after the drive
            (needed when ``error`` is None).
        retry_policy: Which errors are transient.
        cancelled_by: Who cancelled the run, once its owner saw the cancel.
        lease_lost: Why the lease was lost, if it was.
        nothing_to_do: The run carried answers that another run had stored:
            it is DONE without driving.

    Returns:
        The ending. The precedence: a seen cancel; a lost lease (taken over);
        an outside service's fenced refusal while the lease holds (handed
        back: it did not act); an unknown outcome (PARKED); a transient error
        (handed back); any other error (FAILED); then, for a normal end, the
        verdict: DONE, PAUSED, or handed back when ADK ended the invocation
        with a call unanswered or no final answer.
    """
    if cancelled_by is not None or (error is not None and _cause(error, errors.RunCancelled)):
        why = f"cancelled by {cancelled_by or 'an operator'}"
        return Ending(EndKind.CANCELLED, why, error, by=_as_id(cancelled_by))
    if error is not None:
        refused = _cause(error, errors.FenceRefused)
        if refused is not None and lease_lost is None:
            why = f"an outside service refused the request as fenced off: {refused}"
            return Ending(EndKind.HANDED_BACK, why, error)
        fenced = _cause(error, errors.Fenced)
        if fenced is not None or lease_lost is not None:
            return Ending(EndKind.TAKEN_OVER, str(fenced or lease_lost), fenced or error)
        unknown = _cause(error, OutcomeUnknown)
        if unknown is not None:
            found = "NODE_INFLIGHT" if isinstance(unknown, NodeInFlight) else "TOOL_UNANSWERED"
            return Ending(EndKind.PARKED, str(unknown), unknown, found)
        failed = f"{type(error).__name__}: {error}"
        if retry_policy.is_transient(error):
            return Ending(EndKind.HANDED_BACK, f"transient fault: {failed}", error)
        return Ending(EndKind.FAILED, failed, error)
    if lease_lost is not None:
        return Ending(EndKind.TAKEN_OVER, lease_lost)
    if nothing_to_do or (verdict is not None and verdict.cls is OrphanClass.ACTUALLY_DONE):
        return Ending(EndKind.DONE)
    if verdict is not None and verdict.cls is OrphanClass.PAUSED:
        return Ending(EndKind.PAUSED)
    cls, why = (verdict.cls.value, verdict.reason) if verdict else ("unknown", "no verdict")
    return Ending(
        EndKind.HANDED_BACK, f"the invocation ended {cls} ({why}): handed back for recovery"
    )


FINISHING = frozenset({EndKind.DONE, EndKind.PAUSED, EndKind.FAILED})
"""The endings written by a finish (``run_finish``), which a drive's last events may join."""

STATUS_OF = {
    EndKind.DONE: RunStatus.DONE,
    EndKind.PAUSED: RunStatus.PAUSED,
    EndKind.HANDED_BACK: RunStatus.RUNNING,
    EndKind.PARKED: RunStatus.PARKED,
    EndKind.FAILED: RunStatus.FAILED,
    EndKind.CANCELLED: RunStatus.CANCELLED,
}


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a drive (or a recovery without one) ended, as recorded.

    Attributes:
        run: The run.
        ending: The ending decided.
        recorded: Whether the ledger took it (False: the lease was lost, or
            the store failed to record it and the lease is left to expire).
        store_error: The store's failure to record it, if that happened.
    """

    run: Run
    ending: Ending
    recorded: bool = True
    store_error: BaseException | None = None

    @property
    def status(self) -> RunStatus | None:
        """The run's status on the ledger now (None: another worker holds it, or unknown)."""
        if not self.recorded:
            return None
        return STATUS_OF.get(self.ending.kind)

    def raise_for_caller(self) -> None:
        """Raises what a caller of ``DurableRunner.run`` is told, if the run did not end well.

        Raises:
            durable_adk.errors.Fenced: Another worker holds the run.
            durable_adk.errors.RunInterrupted: Handed back, or not recorded.
            durable_adk.effect_tables.journal.OutcomeUnknown: Parked.
            durable_adk.errors.RunCancelled: Cancelled.
            Exception: The app's own error of a FAILED run.
        """
        run, ending, cause = self.run, self.ending, self.ending.error
        if self.store_error is not None:
            raise errors.RunInterrupted(
                f"run {run.run_id}: the store failed to record how the drive ended "
                f"({self.store_error}); its lease expires and recovery takes it over then"
            ) from (cause or self.store_error)
        if not self.recorded or ending.kind is EndKind.TAKEN_OVER:
            if isinstance(cause, errors.Fenced):
                raise cause
            raise errors.Fenced(
                f"run {run.run_id} (epoch {run.epoch}): {ending.reason or 'taken over'}"
            ) from cause
        if ending.kind is EndKind.HANDED_BACK:
            raise errors.RunInterrupted(
                f"run {run.run_id} was handed back for recovery after a back-off: {ending.reason}"
            ) from cause
        if ending.kind is EndKind.PARKED:
            assert isinstance(cause, OutcomeUnknown)
            raise cause
        if ending.kind is EndKind.CANCELLED:
            raise errors.RunCancelled(
                f"run {run.run_id} was {ending.reason or 'cancelled'}: it is CANCELLED"
            ) from cause
        if ending.kind is EndKind.FAILED:
            assert cause is not None
            raise cause


class Recording(Protocol):
    """What :func:`record` needs of the run path (RunPath provides it)."""

    ledger: RunLedger
    sessions: DurableSessionService
    interrupts: InterruptTable
    metrics: Metrics
    interrupt_deadlines: dict[str, float]
    job_tools: frozenset[str]


def last_events_of(events: Sequence[Event], invocation_id: str | None) -> list[dict[str, Any]]:
    """The invocation's last events as JSON, for a dead letter."""
    mine = [e for e in events if e.invocation_id == invocation_id][-LAST_EVENTS_KEPT:]
    return [json.loads(e.model_dump_json(exclude_none=True)) for e in mine]


async def record(
    path: Recording,
    run: Run,
    ending: Ending,
    *,
    events: Sequence[Event] | None = None,
    verdict: Classification | None = None,
    classification: str | None = None,
    last: EventBatch | None = None,
) -> Outcome:
    """Writes ``ending`` for a run this worker holds, then the bookkeeping of that ending.

    Args:
        path: The run path (ledger, sessions, interrupts, metrics).
        run: The run, held at its epoch.
        ending: What :func:`decide` (or recovery) decided.
        events: The session's events after the drive, if at hand (read
            when a PARKED ending or the bookkeeping needs them).
        verdict: The classifier's verdict (the interrupts index needs it).
        classification: What recovery found, recorded on a finished row.
        last: The drive's batch still holding its last events, for an ending
            that finishes the run (DONE, PAUSED, FAILED): they are written in
            the finish's own unit (``append_events_finish``), so the final
            answer is durable exactly when the run is finished. Nothing of
            either is written if the store refuses the events.

    Returns:
        The outcome; ``recorded`` False when the lease was lost meanwhile or
        the store failed (then ``store_error`` says how).

    Raises:
        google.adk.errors.StaleSessionError, SessionNotFoundError: ``last``
            could not be written (the session moved on, or was deleted);
            nothing was.
    """
    try:
        written = await _write(
            path,
            run,
            ending,
            events=events,
            verdict=verdict,
            classification=classification,
            last=last,
        )
    except (errors.StoreError, TimeoutError) as exc:
        logger.warning(
            "run %s (epoch %d): the store failed to record how the drive ended (%s); "
            "its lease expires and recovery takes it over then",
            run.run_id,
            run.epoch,
            exc,
        )
        return Outcome(run, ending, recorded=False, store_error=exc)
    if not written:
        taken_over(logger, run_id=run.run_id, epoch=run.epoch, during="its end", reason=ending)
        return Outcome(run, ending, recorded=False)
    _log_and_count(path.metrics, run, ending, in_outage=path.ledger.store.health.in_outage())
    crash_point("ending.after_write")  # the ending and its inbox written; a cancel's records not
    try:
        await _bookkeeping(path, run, ending)
    except (errors.StoreError, TimeoutError) as exc:
        # Derived records: the run's own end is recorded, and a continuation of a
        # cancelled invocation is refused whatever they say.
        logger.warning("run %s: the bookkeeping of its end failed: %s", run.run_id, exc)
    return Outcome(run, ending)


async def _write(
    path: Recording,
    run: Run,
    ending: Ending,
    *,
    events: Sequence[Event] | None,
    verdict: Classification | None,
    classification: str | None,
    last: EventBatch | None = None,
) -> bool:
    """The ledger write of one ending; False when the lease was lost."""
    ledger, lease, kind = path.ledger, run.lease, ending.kind
    if kind is EndKind.TAKEN_OVER:
        return False
    if kind in FINISHING:
        failed = kind is EndKind.FAILED
        error = ending.reason if failed else None
        found = None if failed else classification
        inbox = None
        if (
            not failed
            and events is not None
            and verdict is not None
            and may_have_interrupts(events, run.invocation_id)
        ):
            # Its inbox in the finish's unit: never PAUSED with a call missing from it.
            inbox = inbox_at_finish(
                run,
                events,
                verdict,
                done=kind is EndKind.DONE,
                deadlines=path.interrupt_deadlines,
                job_tools=path.job_tools,
            )
            inbox = await seal_inbox(ledger.store, inbox)
        if last is None or not last.pending:
            return await ledger.finish(
                lease, STATUS_OF[kind], error=error, classification=found, inbox=inbox
            )
        params = ledger.finish_params(
            lease, STATUS_OF[kind], error=error, classification=found, inbox=inbox
        )
        try:
            row = await path.sessions.flush_batch(last, finish=params)
        except errors.Fenced:
            return False
        if row is not None:
            await ledger.finished(row)
        return True
    if kind is EndKind.HANDED_BACK:
        if outage_hand_back(ending):
            # A write the outage broke after it left (it may have committed): the
            # drive could not wait it out. Once the store is back (this write
            # works) the run is recovered from its log at the next sweep, nudged now.
            released = await _release_after_outage(ledger, lease, ending.reason or "handed back")
            if released:
                ledger.store.health.nudge()
            return released
        return await ledger.release(lease, error=ending.reason or "handed back")
    if kind is EndKind.CANCELLED:
        # The audit row of the cancel, if the drive stopped for a cancel the
        # ledger has not seen (a caller's abort signal): it is what marks the
        # invocation cancelled for every later continuation. A no-op when an
        # operator's request is already recorded.
        await ledger.cancel(run.run_id, by=ending.by or "durable-adk", reason=ending.reason)
        done = await ledger.finish_cancelled(lease)
        if not done:  # the cancel ended it at once (its lease had run out meanwhile)
            now = await ledger.get(run.run_id)
            done = now is not None and now.status is RunStatus.CANCELLED and now.epoch == run.epoch
        if done:
            await ledger.wake_session(run)
        return done
    # PARKED: the dead letter keeps the invocation's last events.
    if events is None:
        session = await path.sessions.get_session(
            app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
        )
        events = session.events if session else []
    parked = await ledger.park(
        lease,
        error=ending.reason or "parked",
        classification=ending.found or classification,
        last_events=last_events_of(events, run.invocation_id),
    )
    if parked:
        await ledger.wake_session(run)
    return parked


async def _release_after_outage(ledger: RunLedger, lease: Lease, error: str) -> bool:
    """Hands the run back with no back-off, sent again until it answers while the lease
    is trusted: the release is one conditional statement on (owner, epoch), so a second
    one after a first that committed unseen changes nothing more."""
    while True:
        try:
            return await ledger.release(lease, error=error, backoff=0.0)
        except errors.StoreUnavailable:
            patience = current_patience()
            if patience is None or not await ledger.store.health.wait_back(patience):
                raise


_LOGGED = {
    EndKind.HANDED_BACK: ("handed_back", logging.WARNING),
    EndKind.PARKED: ("parked", logging.WARNING),
    EndKind.CANCELLED: ("cancelled", logging.INFO),
}
"""The endings that get a run-log line of their own (docs/runs.md, "Logs")."""


def outage_hand_back(ending: Ending) -> bool:
    """Whether ``ending`` hands a run back because the store went away under a write.

    Such a run is recovered at once when the store is back (no back-off): the
    outage, not the run, is what the log has to say (once, from the store).
    """
    return (
        ending.kind is EndKind.HANDED_BACK
        and ending.error is not None
        and _cause(ending.error, errors.StoreUnavailable) is not None
    )


def _log_and_count(metrics: Metrics, run: Run, ending: Ending, *, in_outage: bool) -> None:
    kind = ending.kind
    if kind in _LOGGED:
        name, level = _LOGGED[kind]
        if in_outage and outage_hand_back(ending):
            level = logging.INFO  # part of an outage, which the store says once
        extra = {"cls": ending.found} if kind is EndKind.PARKED else {}
        run_event(
            logger,
            level,
            name,
            run_id=run.run_id,
            epoch=run.epoch,
            attempt=run.attempts,
            reason=ending.reason,
            **extra,
        )
    if kind is EndKind.HANDED_BACK:
        return  # still RUNNING: not an outcome
    if kind is EndKind.PARKED:
        metrics.run_parked()
    metrics.run_finished(STATUS_OF[kind].value)


async def _bookkeeping(path: Recording, run: Run, ending: Ending) -> None:
    # A finish wrote its inbox in its own unit (_write); a cancel's is written here.
    if ending.kind is EndKind.CANCELLED:
        await after_cancel(
            path.ledger,
            path.sessions,
            path.interrupts,
            run,
            drove=True,  # a drive's (or a recovery's) run held its invocation
            reason=ending.reason or "cancelled",
        )


async def after_cancel(
    ledger: RunLedger,
    sessions: DurableSessionService,
    interrupts: InterruptTable,
    run: Run,
    *,
    drove: bool,
    reason: str,
) -> None:
    """The bookkeeping of a CANCELLED run (a drive's end, or an operator's cancel of a QUEUED,
    PAUSED or PARKED run).

    A run that never drove (a QUEUED answer) gives its answer claims back:
    the pause stays open for another answer. Any other run cancels its
    invocation: the runs paused or queued on it end CANCELLED, one still
    driving it is asked to stop, its interrupts close, its open jobs end
    CANCELLED, and the calls it left open are sealed.
    """
    if not drove:
        await ledger.release_claims_of_run(run.run_id)
        await ledger.wake_session(run)
        return
    await ledger.cancel_paused_of_invocation(
        run, reason=f"its invocation was cancelled (run {run.run_id}: {reason})"
    )
    # A continuation already driving stops at its owner's next heartbeat.
    await ledger.request_cancel_of_invocation(run, by="durable-adk")
    await interrupts.close_of_invocation(run)
    await JobTable(ledger.store).cancel_of_invocation(
        app_name=run.app_name,
        user_id=run.user_id,
        session_id=run.session_id,
        invocation_id=run.invocation_id,
        result=CANCELLED_JOB_RESULT,
    )
    await seal_open_calls(sessions, run)
    await ledger.wake_session(run)


ABORT_MESSAGE = "Invocation was aborted by client."
"""The error ADK's own seal gives an aborted invocation's open calls."""


async def seal_open_calls(sessions: DurableSessionService, run: Run) -> int:
    """Seals the calls a cancelled invocation left open, as ADK seals an aborted invocation's.

    ADK answers each call an aborted invocation left open with an error
    response (``error_code="INVOCATION_ABORTED"``, authored by the agent that
    made the call, on its branch), so a later turn finds no dangling call and
    a resumable app does not replay it. A cancel seen while the run was
    paused, queued or parked had no ADK invocation to do that, so the same
    seal is appended here: every call still open by the classifier's count
    (unanswered, or long-running and not answered by the user, whose own
    pending answer does not close it), once; a sealed call is answered, so a
    second cancel finds nothing open.

    Returns:
        How many seal events were appended.
    """
    session = await sessions.get_session(
        app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
    )
    if session is None:
        return 0
    found = classify(session.events, run.invocation_id, root_agent_name="-")
    open_ids = {c for c, _ in found.unanswered_calls} | set(found.pending_long_running)
    if not open_ids:
        return 0
    grouped: dict[tuple[str, str | None, str | None], list[types.FunctionCall]] = {}
    for event in session.events:
        if event.invocation_id != run.invocation_id:
            continue
        for call in event.get_function_calls():
            if call.id in open_ids:
                open_ids.discard(call.id)
                key = (event.author, event.branch, event.isolation_scope)
                grouped.setdefault(key, []).append(call)
    for (author, branch, scope), calls in grouped.items():
        seal = Event(
            invocation_id=run.invocation_id,
            author=author,
            branch=branch,
            isolation_scope=scope,
            error_code=ABORT_ERROR_CODE,
            error_message=ABORT_MESSAGE,
            content=types.Content(
                role="user",
                parts=[
                    types.Part(
                        function_response=types.FunctionResponse(
                            id=call.id, name=call.name, response={"error": ABORT_MESSAGE}
                        )
                    )
                    for call in calls
                ],
            ),
        )
        await sessions.append_event(session, seal)
    return len(grouped)
