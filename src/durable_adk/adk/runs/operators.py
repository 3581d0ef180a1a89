"""What an operator does to a run: cancel, resolve, abandon, retry.

Every function here acts through one conditional ledger statement that also
writes the action's line in the audit trail (``operator_actions``: who, when,
why, the status before and after, the epoch), so a refused action changes
nothing and a change is never unrecorded. Each is safe to call twice: the
second call changes nothing and its :class:`Outcome` says where the run stands.

* :func:`cancel_run`: a QUEUED, PAUSED or PARKED run (or a RUNNING one whose
  owner stopped renewing) is CANCELLED at once; a RUNNING one is asked to stop
  (``cancel_requested_at``) and its owner ends it at its next heartbeat.
* :func:`resolve_run`: a PARKED or FAILED run whose invocation has unanswered
  tool calls ("outcome unknown") gets the operator's result as the function
  response of each call, written under a claim of the run (RUNNING, held by
  ``operator:<who>``, a new epoch, so the append is fenced like any worker's),
  then goes back in its session's queue: the next sweep of a worker serving
  the run's app drives the invocation on from the answer. The tool is not run
  again. A call whose effect waits in the journal as an INTENT (a journaled
  tool that may have acted, with no lookup) gets the result in the journal
  instead (:meth:`~durable_adk.effect_tables.journal.Journal.resolve`, recorded as DONE by
  the operator): the re-drive calls the tool again and the journal answers
  it, so the outside system gets no act.
* :func:`abandon_run`: a PARKED run (or a FAILED one) is closed as FAILED with
  the operator's reason. Abandon is final: an abandoned run is never retried,
  resolved or driven again.
* :func:`retry_run`: a PARKED run (or a FAILED one not abandoned) re-enters its
  session's queue as it is.
* :func:`abandon_version`: every open run of a version is cancelled as above,
  each cancel audited.

A crash inside :func:`resolve_run` loses nothing: before the answer is
written the run is RUNNING under the operator's lease, which runs out, and
recovery parks it again (the call is still unanswered); after, recovery finds
the call answered and drives the run on.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.adk.errors import StaleSessionError
from google.adk.events.event import Event
from google.genai import types

from durable_adk import errors
from durable_adk.adk.eventlog.classify import classify
from durable_adk.adk.runs.ending import after_cancel
from durable_adk.adk.services.sessions import RUN_METADATA_KEY, DurableSessionService
from durable_adk.effect_tables.journal import Journal, JournalEntry, JournalStatus
from durable_adk.ids import check_id
from durable_adk.tables.interrupts import InterruptTable
from durable_adk.tables.ledger import OperatorAction, Run, RunLedger, RunStatus
from durable_adk.tables.versions import VersionTable
from durable_adk.versions import parse_version

OPERATOR_METADATA_KEY = "durable_adk_operator"
"""The ``Event.custom_metadata`` key naming who wrote an operator's answer, and why."""

RESOLVABLE = frozenset({RunStatus.PARKED, RunStatus.FAILED})
"""The statuses :func:`resolve_run` accepts."""

MAX_REASON_CHARS = 2000
"""Longest reason an operator may give."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an operator action did.

    Attributes:
        run: The run as it now stands.
        changed: Whether this call changed anything.
        message: A sentence for the operator: what happened and where the run stands.
    """

    run: Run
    changed: bool
    message: str


def _check_reason(reason: str | None, *, required: bool = False) -> str | None:
    if reason is None or (isinstance(reason, str) and not reason.strip()):
        if required:  # a blank reason says nothing in the audit trail
            raise errors.InvalidArgument("a reason is required (not blank)")
        return None
    if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS or "\x00" in reason:
        raise errors.InvalidArgument(
            f"reason must be at most {MAX_REASON_CHARS} characters, no NUL"
        )
    return reason


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


async def _get(ledger: RunLedger, run_id: str) -> Run:
    run = await ledger.get(run_id)
    if run is None:
        raise errors.NotFound(f"no run {run_id!r}")
    return run


async def cancel_run(
    ledger: RunLedger,
    run_id: str,
    *,
    by: str,
    reason: str | None = None,
    sessions: DurableSessionService | None = None,
) -> Outcome:
    """Cancels a run (see the module docstring); safe to call twice.

    A QUEUED, PAUSED or PARKED run ends CANCELLED here, with the bookkeeping
    of that ending (:func:`durable_adk.adk.runs.ending.after_cancel`): a QUEUED
    answer run gives its answer claim back; any other cancels its invocation
    (its paused runs, interrupts and open jobs, and the calls it left open
    are sealed). A RUNNING run's owner ends it the same way at its next
    heartbeat.

    Args:
        sessions: The session service that seals the invocation's open calls
            (default: one over the ledger's store).

    Raises:
        NotFound: No such run.
        InvalidArgument: A bad ``by`` or ``reason``.
    """
    check_id("by", by)
    reason = _check_reason(reason)
    before = await _get(ledger, run_id)
    done = await ledger.cancel(run_id, by=by, reason=reason)
    run = done.run
    if run.status is RunStatus.CANCELLED and done.changed:
        await after_cancel(
            ledger,
            sessions if sessions is not None else DurableSessionService(ledger.store),
            InterruptTable(ledger.store),
            run,
            drove=before.status is not RunStatus.QUEUED,
            reason=f"cancelled by {by}" + (f": {reason}" if reason else ""),
        )
    if run.status is RunStatus.CANCELLED:
        what = "cancelled" if done.changed else "was already CANCELLED: nothing changed"
        return Outcome(run, done.changed, f"run {run_id} {what}; it is CANCELLED")
    if run.status is RunStatus.RUNNING:
        what = "cancel requested" if done.changed else "a cancel was already requested"
        return Outcome(
            run,
            done.changed,
            f"run {run_id} is RUNNING on {run.owner}: {what}; its owner stops it at its next "
            "heartbeat (or recovery cancels it if the owner is dead)",
        )
    return Outcome(
        run,
        False,
        f"run {run_id} is {run.status.value}: it has ended, nothing to cancel (nothing changed)",
    )


async def abandon_run(ledger: RunLedger, run_id: str, *, by: str, reason: str) -> Outcome:
    """Closes a PARKED (or FAILED) run as FAILED with the operator's reason; safe twice.

    Raises:
        NotFound: No such run.
        Conflict: The run is neither PARKED nor FAILED (nothing changed).
        InvalidArgument: A bad ``by``, or no reason.
    """
    check_id("by", by)
    reason = _check_reason(reason, required=True) or ""
    done = await ledger.abandon(run_id, by=by, reason=reason)
    run = done.run
    if done.changed:
        return Outcome(run, True, f"run {run_id} abandoned: it is FAILED ({run.last_error})")
    if run.status is RunStatus.FAILED:
        return Outcome(
            run, False, f"run {run_id} was already abandoned: it is FAILED ({run.last_error})"
        )
    raise errors.Conflict(
        f"run {run_id!r} is {run.status.value}: only a PARKED or FAILED run is abandoned "
        "(cancel a live one)"
    )


async def retry_run(
    ledger: RunLedger, run_id: str, *, by: str, reason: str | None = None
) -> Outcome:
    """Puts a PARKED run (or a FAILED one not abandoned) back in its session's queue, recorded.

    Abandon is final: an abandoned run is never driven again, so retrying it
    is refused and changes nothing.

    Raises:
        NotFound: No such run.
        Conflict: The run is neither PARKED nor FAILED, or it was abandoned
            (nothing changed).
        InvalidArgument: A bad ``by`` or ``reason``.
    """
    check_id("by", by)
    reason = _check_reason(reason)
    run = await _get(ledger, run_id)
    if run.status is RunStatus.FAILED:
        await _refuse_if_abandoned(ledger, run_id)
    done = await ledger.retry_recorded(run_id, by=by, reason=reason)
    if not done.changed:
        if done.run.status is RunStatus.FAILED:
            # An abandon that raced this retry and won.
            await _refuse_if_abandoned(ledger, run_id)
        raise errors.Conflict(
            f"run {run_id!r} is {done.run.status.value}, not PARKED or FAILED: "
            "only a parked or failed run is retried (nothing changed)"
        )
    return Outcome(
        done.run, True, f"run {run_id} is QUEUED: the next sweep of a worker recovers it"
    )


async def _refuse_if_abandoned(ledger: RunLedger, run_id: str) -> None:
    """Raises Conflict (abandon is final) when the run was abandoned."""
    abandoned = await _abandoned(ledger, run_id)
    if abandoned is not None:
        raise errors.Conflict(
            f"run {run_id!r} was abandoned by {abandoned.actor} at "
            f"{_when(abandoned.created_at)}: abandon is final, it is not retried; "
            "it is FAILED (nothing changed)"
        )


async def _abandoned(ledger: RunLedger, run_id: str) -> OperatorAction | None:
    """The operator action that abandoned the run, or None."""
    found = [a for a in await ledger.actions(run_id=run_id, limit=1000) if a.action == "abandon"]
    return found[0] if found else None


def _response_of(value: Any) -> dict[str, Any]:
    """A function response body: a JSON object as it is, anything else as ``{"result": v}``."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise errors.InvalidArgument(f"the result must be JSON: {exc}") from None
    if "\\u0000" in text:
        raise errors.InvalidArgument("the result cannot hold a NUL character")
    return value if isinstance(value, dict) else {"result": value}


async def resolve_run(
    ledger: RunLedger,
    run_id: str,
    *,
    by: str,
    reason: str | None = None,
    result: Any = None,
    results: Mapping[str, Any] | None = None,
    sessions: DurableSessionService | None = None,
) -> Outcome:
    """Answers a parked or failed run's unanswered calls with the operator's results.

    Give ``result`` when the invocation has one unanswered call, or
    ``results`` (call id to result) for several; every unanswered call must
    be answered. A result that is a JSON object is the function response as
    it is; anything else is wrapped as ``{"result": value}``.

    Args:
        ledger: The run ledger.
        run_id: The run.
        by: Who resolves it (recorded).
        reason: Why (recorded), e.g. what the operator checked.
        result: The result of the one unanswered call.
        results: Results by call id.
        sessions: The session service to write through (default: a new one
            over the ledger's store).

    Returns:
        The outcome; the run is QUEUED when this call resolved it.

    Raises:
        NotFound: No such run.
        Conflict: The run is not PARKED or FAILED and was never resolved, it
            has no unanswered call, another run of its session is RUNNING, or
            it changed while being resolved (nothing changed).
        InvalidArgument: Unknown or missing call ids, a result that is not
            JSON, a bad ``by`` or ``reason``, a result past the store's
            :class:`~durable_adk.limits.PayloadLimits` (nothing changed).
    """
    check_id("by", by)
    reason = _check_reason(reason)
    if (results is None) == (result is None):
        raise errors.InvalidArgument("give exactly one of 'result' and 'results'")
    given = {"": result} if results is None else dict(results)
    for call_id, value in given.items():
        what = f"the result for call {call_id!r}" if call_id else "the result"
        ledger.store.limits.check(value, f"{what} resolving run {run_id!r}")
    run = await _get(ledger, run_id)
    if run.status is RunStatus.FAILED:
        closed = await _abandoned(ledger, run_id)
        if closed is not None:
            raise errors.Conflict(
                f"run {run_id!r} was abandoned by {closed.actor} at "
                f"{_when(closed.created_at)}: it is closed, there is nothing to resolve"
            )
    if run.status not in RESOLVABLE:
        earlier = [
            a for a in await ledger.actions(run_id=run_id, limit=1000) if a.action == "resolve"
        ]
        if earlier:
            last = earlier[0]
            return Outcome(
                run,
                False,
                f"run {run_id} was already resolved by {last.actor} at {_when(last.created_at)}; "
                f"it is {run.status.value}: nothing changed",
            )
        if run.status is RunStatus.RUNNING and (run.owner or "").startswith("operator:"):
            # Read between another operator's claim and its action record.
            raise errors.Conflict(await _changed_meanwhile(ledger, run_id))
        raise errors.Conflict(
            f"run {run_id!r} is {run.status.value}: only a PARKED or FAILED run is resolved"
        )
    service = sessions or DurableSessionService(ledger.store)
    session = await service.get_session(
        app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
    )
    if session is None:
        raise errors.Conflict(f"run {run_id!r}: its session {run.session_id!r} is gone")
    found = classify(session.events, run.invocation_id, root_agent_name=run.app_name)
    open_calls = dict(found.unanswered_calls)
    if not open_calls:
        now = await _get(ledger, run_id)
        if (now.status, now.epoch) != (run.status, run.epoch):
            # Another operator answered the calls since the run was read here.
            raise errors.Conflict(await _changed_meanwhile(ledger, run_id))
        raise errors.Conflict(
            f"run {run_id!r} has no unanswered call to resolve (its events read "
            f"{found.cls.value}: {found.reason}); retry or abandon it instead"
        )
    if results is None:
        if len(open_calls) != 1:
            raise errors.InvalidArgument(
                f"run {run_id!r} has {len(open_calls)} unanswered calls "
                f"({', '.join(sorted(open_calls))}): give 'results' by call id"
            )
        results = {next(iter(open_calls)): result}
    unknown = sorted(set(results) - set(open_calls))
    if unknown:
        raise errors.InvalidArgument(
            f"{', '.join(map(repr, unknown))}: not an unanswered call of run {run_id!r}; "
            f"its unanswered calls are {', '.join(sorted(open_calls))}"
        )
    missing = sorted(set(open_calls) - set(results))
    if missing:
        raise errors.InvalidArgument(
            f"run {run_id!r}: give a result for every unanswered call; missing {', '.join(missing)}"
        )
    answers = {call_id: _response_of(value) for call_id, value in results.items()}
    journal = Journal(ledger.store)
    in_journal = _journaled_calls(
        await journal.list(invocation_id=run.invocation_id, limit=1000), open_calls
    )
    callers: dict[str, Event] = {}
    for event in session.events:
        if event.invocation_id != run.invocation_id:
            continue
        for call in event.get_function_calls():
            if call.id in open_calls and call.id not in callers:
                callers[call.id] = event

    owner = f"operator:{by}"[:500]
    claimed = await ledger.operator_claim(run, owner)
    if claimed is None:
        raise errors.Conflict(await _changed_meanwhile(ledger, run_id))
    try:
        # A journaled effect's result goes in the journal: the re-drive's call
        # of the tool answers from there and the outside system gets no act.
        for call_id, entry in in_journal.items():
            await journal.resolve(entry.key, results[call_id], by=by)
        session = await service.get_session(
            app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
        )
        if session is None:
            raise errors.Conflict(f"run {run_id!r}: its session {run.session_id!r} is gone")
        by_author: dict[tuple[str, str | None], list[types.Part]] = {}
        for call_id, response in answers.items():
            if call_id in in_journal:
                continue
            caller = callers[call_id]
            by_author.setdefault((caller.author, caller.branch), []).append(
                types.Part(
                    function_response=types.FunctionResponse(
                        id=call_id, name=open_calls[call_id], response=response
                    )
                )
            )
        for (author, branch), parts in by_author.items():
            event = Event(
                id=str(uuid.uuid4()),
                invocation_id=run.invocation_id,
                author=author,
                branch=branch,
                content=types.Content(role="user", parts=parts),
                custom_metadata={
                    RUN_METADATA_KEY: {"run_id": run.run_id, "epoch": claimed.epoch},
                    OPERATOR_METADATA_KEY: {"by": by, "reason": reason},
                },
            )
            await service.append_event(session, event)
    except (errors.Fenced, StaleSessionError) as exc:
        await ledger.operator_release(claimed.lease, run.status)
        raise errors.Conflict(f"run {run_id!r} changed while being resolved: {exc}") from None
    except BaseException:
        await ledger.operator_release(claimed.lease, run.status)
        raise
    queued = await ledger.operator_requeue(
        claimed.lease,
        action="resolve",
        by=by,
        reason=reason,
        status_before=run.status,
        detail={
            "results": answers,
            "calls": {call_id: open_calls[call_id] for call_id in answers},
            "journal": {call_id: entry.key for call_id, entry in in_journal.items()},
            "previous_error": run.last_error,
        },
    )
    if queued is None:
        # The answer is stored; recovery finds the calls answered and drives on.
        now = await _get(ledger, run_id)
        return Outcome(
            now,
            True,
            f"run {run_id}: the answer was stored but the operator's claim ran out; "
            f"it is {now.status.value} and recovery drives it on",
        )
    names = ", ".join(f"{open_calls[c]} ({c})" for c in answers)
    where = (
        f" (in the journal, under {', '.join(e.key for e in in_journal.values())})"
        if in_journal
        else ""
    )
    return Outcome(
        queued,
        True,
        f"run {run_id} resolved: the result of {names} was recorded{where}; it is QUEUED and "
        f"the next sweep of a worker serving app {run.app_name!r} drives it on",
    )


async def _changed_meanwhile(ledger: RunLedger, run_id: str) -> str:
    """What a resolve that lost its claim tells the operator: where the run stands, and who won."""
    now = await _get(ledger, run_id)
    owner = now.owner or ""
    if now.status is RunStatus.RUNNING and owner.startswith("operator:"):
        return (
            f"run {run_id!r} is being resolved by {owner.removeprefix('operator:')} "
            "(nothing changed here)"
        )
    last = next(iter(await ledger.actions(run_id=run_id, limit=1)), None)
    by = f"; last action: {last.action} by {last.actor} at {_when(last.created_at)}" if last else ""
    return (
        f"run {run_id!r} changed while being resolved: it is {now.status.value}{by} "
        "(nothing changed here)"
    )


def _journaled_calls(
    entries: list[JournalEntry], open_calls: Mapping[str, str]
) -> dict[str, JournalEntry]:
    """The open calls whose effect waits in the journal as an INTENT, and that entry.

    An entry is matched by the call that last wrote it, else by its tool when
    the invocation has one such intent left for it.
    """
    intents = [e for e in entries if e.status is JournalStatus.INTENT]
    found: dict[str, JournalEntry] = {}
    for call_id, name in open_calls.items():
        match = next((e for e in intents if e.function_call_id == call_id), None)
        if match is None:
            of_tool = [e for e in intents if e.tool_name == name and e not in found.values()]
            match = of_tool[0] if len(of_tool) == 1 else None
        if match is not None:
            found[call_id] = match
    return found


__all__ = [
    "OPERATOR_METADATA_KEY",
    "Outcome",
    "abandon_run",
    "cancel_run",
    "resolve_run",
    "retry_run",
]


async def abandon_version(table: VersionTable, version: str, *, by: str, reason: str) -> list[str]:
    """Cancels every open run of ``version`` as an operator's cancel; returns their ids.

    A QUEUED, PAUSED or PARKED run ends CANCELLED at once (its invocation's
    open jobs, timers and interrupts with it); a RUNNING one is stopped by its
    owner, or ended by any worker's sweeper if its owner is gone. Each cancel
    is audited. Safe to call twice.

    Raises:
        InvalidVersion: Not a version string (nothing written).
        InvalidArgument: A bad ``by`` or an empty ``reason`` (nothing written).
    """
    parse_version(version)
    check_id("by", by)
    if not isinstance(reason, str) or not reason.strip():
        raise errors.InvalidArgument("abandoning a version's runs needs a reason")
    ledger = RunLedger(table.store)
    done = []
    for run_id in await table.open_runs(version):
        outcome = await cancel_run(
            ledger, run_id, by=by, reason=f"version {version} abandoned: {reason}"
        )
        if outcome.changed:
            done.append(outcome.run.run_id)
    return done
