"""The interrupts inbox: list what waits on a person, answer it once, apply deadlines.

What it guarantees:

* When a run ends PAUSED (or any run of an invocation ends), the index
  (:class:`~durable_adk.tables.interrupts.InterruptTable`) is brought in line with
  the session, in the unit of work that finishes the run
  (:func:`inbox_at_finish`): each open long-running call the classifier finds
  (``pending_long_running``: tool confirmations, requests for input,
  long-running tools) that waits on a person is indexed with its kind, name,
  arguments and optional deadline; an indexed call the session shows
  answered (by any path) leaves the inbox. The classifier's interrupt
  matching is used as it is. Calls a job or a timer answers (job-backed
  tools, ``durable_sleep``, a ``sleep_node``) wait on the job table, not on
  a person: they are never listed, so no approvals deadline answers them.
* :func:`answer_interrupt` answers one call exactly once: the kind decides
  what an answer is (a confirmation takes approve or deny, an input or a
  long-running call a payload, or deny), the answer is checked against the
  session, and one conditional unit of work marks it, queues the run that
  carries the function response on (the same continuation a client's
  ``invocation_id`` run is) and records who answered in the audit trail.
  Unknown call ids, the wrong kind of answer, an answer given twice or after
  the deadline get a clear error and change nothing.
* :class:`InterruptSweeper` applies the default outcome (deny) to the
  interrupts whose deadline passed, through the same unit of work.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.adk.events.event import Event
from google.adk.workflow.utils._workflow_hitl_utils import confirmation_interrupt_id
from google.genai import types

from durable_adk import errors
from durable_adk.adk.eventlog.classify import Classification, asks_of, classify, live_events
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.adk.tools.long_running import answered_by_a_job
from durable_adk.ids import check_id
from durable_adk.store.base import Store
from durable_adk.store.sealing.codec import seal_value
from durable_adk.tables.interrupts import Interrupt, InterruptKind, InterruptStatus, InterruptTable
from durable_adk.tables.ledger import Run, RunLedger

logger = logging.getLogger("durable_adk.inbox")

CONFIRMATION_CALL = "adk_request_confirmation"
INPUT_CALL = "adk_request_input"
INPUT_CALLS = frozenset({INPUT_CALL, "adk_request_credential"})
NODE_CONFIRMATION_PREFIX = confirmation_interrupt_id("")
"""How ADK's Workflow names a node's confirmation request (``adk_request_input``).

A FunctionNode built with ``require_confirmation``, and a tool node whose tool
asks for confirmation, pause on a request for input whose interrupt id is
``wf_tool_confirmation:<node path>`` and whose answer is a ``ToolConfirmation``
(``{"confirmed": true}``): an approval, not an input.
"""
DECISIONS = ("approve", "deny")
ANY_TOOL = "*"
"""The key of :class:`DurableRunner`'s ``interrupt_deadlines`` that applies to every call."""


def kind_of(name: str, call_id: str = "") -> InterruptKind:
    """The kind of interrupt a call of ``name`` with id ``call_id`` is.

    A confirmation is an LlmAgent tool's ``adk_request_confirmation``, or a
    Workflow node's confirmation request (``adk_request_input`` under a
    :data:`NODE_CONFIRMATION_PREFIX` id), whichever node asks it.
    """
    if name == CONFIRMATION_CALL:
        return InterruptKind.CONFIRMATION
    if name == INPUT_CALL and call_id.startswith(NODE_CONFIRMATION_PREFIX):
        return InterruptKind.CONFIRMATION
    if name in INPUT_CALLS:
        return InterruptKind.INPUT
    return InterruptKind.LONG_RUNNING


def guarded_call(name: str, call_id: str, args: Mapping[str, Any]) -> tuple[str, Any] | None:
    """The call a confirmation guards, as ``(tool name, its arguments)``; None for other kinds.

    ``adk_request_confirmation`` carries it as ``originalFunctionCall``; a
    Workflow node's request as ``payload`` (``tool_name``, ``args``).
    """
    if kind_of(name, call_id) is not InterruptKind.CONFIRMATION:
        return None
    original = args.get("originalFunctionCall")
    if isinstance(original, dict) and original.get("name"):
        return str(original["name"]), original.get("args") or {}
    payload = args.get("payload")
    if isinstance(payload, dict) and payload.get("tool_name"):
        return str(payload["tool_name"]), payload.get("args") or {}
    return None


def _subject(call: types.FunctionCall) -> str:
    """The tool a deadline is chosen by: the guarded tool of a confirmation, else the call's."""
    guarded = guarded_call(call.name or "", call.id or "", call.args or {})
    return guarded[0] if guarded is not None else call.name or ""


def may_have_interrupts(events: Sequence[Event], invocation_id: str) -> bool:
    """Whether the invocation ever made a call that waits on a person (or a long job).

    Only such an invocation can have a PAUSED run or an indexed interrupt, so
    an ordinary run's end costs no query of the index.
    """
    for event in events:
        if event.invocation_id != invocation_id:
            continue
        if event.long_running_tool_ids:
            return True
        if any(c.name in INPUT_CALLS for c in event.get_function_calls()):
            return True
    return False


def inbox_at_finish(
    run: Run,
    events: Sequence[Event],
    found: Classification,
    *,
    done: bool,
    deadlines: Mapping[str, float] | None = None,
    job_tools: Collection[str] = (),
) -> str:
    """The inbox of ``run``'s invocation as its finish writes it (the ``inbox`` of
    :meth:`~durable_adk.tables.ledger.RunLedger.finish_params`), as JSON.

    The unit that finishes the run indexes each open long-running call the
    classifier finds (``pending_long_running``) that waits on a person with
    its kind, name, arguments and deadline, settles each indexed call the
    session shows answered and, when ``done``, ends DONE the runs that paused
    on the invocation: a run is never PAUSED without its calls in the inbox
    or on the job table, nor DONE with its pause open. A call a job or a
    timer answers (a tool of ``job_tools``, a ``sleep_node``'s request:
    :func:`~durable_adk.adk.tools.long_running.answered_by_a_job`) is not
    listed: it waits on the job table, and an approvals deadline never
    applies to it.
    """
    pending = found.pending_long_running
    calls: dict[str, types.FunctionCall] = {}
    for event in live_events(events):
        if event.invocation_id == run.invocation_id:
            for call in event.get_function_calls():
                if call.id in pending and not answered_by_a_job(
                    call.name or "", call.id or "", job_tools
                ):
                    calls.setdefault(call.id or "", call)
    opened = []
    for call_id, call in calls.items():
        limit = None
        if deadlines:
            limit = deadlines.get(_subject(call), deadlines.get(ANY_TOOL))
        opened.append(
            {
                "call_id": call_id,
                "kind": kind_of(call.name or "", call_id).value,
                "name": call.name or "",
                "args": json.dumps(dict(call.args or {}), default=str),
                "deadline": limit,
            }
        )
    return json.dumps(
        {
            "app_name": run.app_name,
            "user_id": run.user_id,
            "session_id": run.session_id,
            "invocation_id": run.invocation_id,
            "done": 1 if done else 0,
            "pending": sorted(pending),
            "open": opened,
        }
    )


async def seal_inbox(store: Store, inbox: str | None) -> str | None:
    """An inbox of :func:`inbox_at_finish` with each open call's arguments sealed
    (:mod:`durable_adk.store.sealing.codec`; as it is when the store has no keys)."""
    if inbox is None or store.codec is None:
        return inbox
    found = json.loads(inbox)
    ids = [found[k] for k in ("app_name", "user_id", "session_id", "invocation_id")]
    for call in found.get("open", ()):
        call["args"] = await seal_value(
            store,
            "interrupts",
            "args",
            (*ids, call["call_id"]),
            call["args"],
            user=(ids[0], ids[1]),
        )
    return json.dumps(found)


@dataclass(frozen=True, slots=True)
class InboxAnswer:
    """What answering an interrupt did.

    Attributes:
        interrupt: The interrupt as it now stands.
        run: The QUEUED run that carries the answer on.
        message: A sentence for the operator: what happened, where the run stands.
    """

    interrupt: Interrupt
    run: Run
    message: str

    @property
    def content(self) -> types.Content:
        """The message of function responses the run carries."""
        return types.Content.model_validate(json.loads(self.run.request))


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def response_for(
    interrupt: Interrupt, *, decision: str | None, payload: Any, reason: str | None, by: str
) -> dict[str, Any]:
    """The function response that answers ``interrupt`` (InvalidArgument for the wrong kind)."""
    if decision is not None and decision not in DECISIONS:
        raise errors.InvalidArgument(f"decision must be 'approve' or 'deny', not {decision!r}")
    if payload is not None:
        try:
            text = json.dumps(payload)
        except (TypeError, ValueError) as exc:
            raise errors.InvalidArgument(f"the payload must be JSON: {exc}") from None
        if "\\u0000" in text:
            raise errors.InvalidArgument("the payload must be JSON without NUL")
    if interrupt.kind is InterruptKind.CONFIRMATION:
        if decision is None:
            raise errors.InvalidArgument(
                f"interrupt {interrupt.call_id!r} is a confirmation: answer approve or deny"
            )
        answer: dict[str, Any] = {"confirmed": decision == "approve"}
        if payload is not None:
            answer["payload"] = payload
        return answer
    if decision == "approve":
        raise errors.InvalidArgument(
            f"interrupt {interrupt.call_id!r} is {interrupt.kind.value} ({interrupt.name}), not "
            "a confirmation: give a payload (or deny it)"
        )
    if decision == "deny":
        return {"denied": True, "by": by, "reason": reason or "denied"}
    if payload is None:
        raise errors.InvalidArgument(
            f"interrupt {interrupt.call_id!r} ({interrupt.kind.value}) needs a payload"
        )
    return payload if isinstance(payload, dict) else {"result": payload}


async def find_interrupt(
    table: InterruptTable,
    call_id: str,
    *,
    app_name: str | None = None,
    session_id: str | None = None,
) -> tuple[Interrupt, float]:
    """The interrupt a call id names (the open one first) and the database's time.

    Raises:
        NotFound: No interrupt has this call id.
        Conflict: Several open ones do (give the session).
    """
    found, now = await table.by_call(call_id, app_name=app_name, session_id=session_id)
    if not found:
        raise errors.NotFound(f"no interrupt {call_id!r}")
    open_ones = [i for i in found if i.status is InterruptStatus.OPEN]
    if len(open_ones) > 1:
        sessions = ", ".join(sorted({f"{i.app_name}/{i.session_id}" for i in open_ones}))
        raise errors.Conflict(
            f"call id {call_id!r} is open in several sessions ({sessions}): give the session"
        )
    return (open_ones or found)[0], now


def _refusal(interrupt: Interrupt, now: float) -> errors.DurableError | None:
    """Why ``interrupt`` takes no answer now, or None."""
    if interrupt.status is InterruptStatus.ANSWERED:
        return errors.Conflict(
            f"interrupt {interrupt.call_id!r} was already answered by {interrupt.answered_by} at "
            f"{_when(interrupt.answered_at)} (nothing changed)"
        )
    if interrupt.status is InterruptStatus.EXPIRED:
        return errors.Conflict(
            f"interrupt {interrupt.call_id!r} expired at {_when(interrupt.deadline_at)}: the "
            "default outcome (deny) was applied (nothing changed)"
        )
    if interrupt.status is InterruptStatus.CLOSED:
        return errors.Conflict(
            f"interrupt {interrupt.call_id!r} is closed: its run was cancelled (nothing changed)"
        )
    if interrupt.deadline_at is not None and interrupt.deadline_at <= now:
        return errors.Conflict(
            f"interrupt {interrupt.call_id!r} expired at {_when(interrupt.deadline_at)}: its "
            "default outcome (deny) applies (nothing changed)"
        )
    return None


async def answer_interrupt(
    store: Store,
    call_id: str,
    *,
    by: str,
    decision: str | None = None,
    payload: Any = None,
    reason: str | None = None,
    session_id: str | None = None,
    app_name: str | None = None,
    owner: str | None = None,
    lease: float = 0.0,
    owner_app: str | None = None,
) -> InboxAnswer:
    """Answers an open interrupt exactly once and queues its invocation's continuation.

    Args:
        store: The open store.
        call_id: The interrupt's call id.
        by: Who answers (recorded).
        decision: ``approve`` or ``deny`` (a confirmation takes one; any kind
            may be denied).
        payload: The answer of an input or long-running call (JSON), or a
            confirmation's payload.
        reason: Why (recorded).
        session_id: The session, when a call id is open in several.
        app_name: Only this app's interrupts.
        owner: The worker that drives the continuation at once (default:
            ``operator:<by>`` with no lease, so the next sweep of a worker
            serving the app drives it).
        lease: Seconds ``owner`` holds the queued run.
        owner_app: ``owner`` and ``lease`` apply only to this app's
            interrupts (a worker drives only its own app); None: to any.

    Returns:
        The interrupt as answered and the QUEUED run carrying the answer.

    Raises:
        NotFound: No such interrupt.
        Conflict: Already answered, expired, closed, or answered in the
            session by another path (nothing changed).
        InvalidArgument: The wrong kind of answer, a payload that is not
            JSON, a bad ``by`` or ``reason`` (nothing changed).
        PayloadTooDeep, PayloadTooLarge: A payload past the store's
            :class:`~durable_adk.limits.PayloadLimits` (nothing changed).
    """
    check_id("by", by)
    if reason is not None and (len(reason) > 2000 or "\x00" in reason):
        raise errors.InvalidArgument("reason must be at most 2000 characters, no NUL")
    if payload is not None:
        store.limits.check(payload, f"the answer to {call_id!r}")
    table = InterruptTable(store)
    interrupt, now = await find_interrupt(table, call_id, app_name=app_name, session_id=session_id)
    refused = _refusal(interrupt, now)
    if refused is not None:
        raise refused
    response = response_for(interrupt, decision=decision, payload=payload, reason=reason, by=by)
    ask = await _open_ask(store, table, interrupt)
    if ask is None:
        raise errors.Conflict(
            f"interrupt {call_id!r} was already answered in its session (nothing changed)"
        )
    drives = owner is not None and owner_app in (None, interrupt.app_name)
    return await _record_answer(
        table,
        interrupt,
        response,
        ask=ask,
        by=by,
        reason=reason,
        owner=owner if drives and owner is not None else f"operator:{by}"[:500],
        lease=lease if drives else 0.0,
        by_deadline=False,
    )


async def _open_ask(store: Store, table: InterruptTable, interrupt: Interrupt) -> int | None:
    """Which time the invocation asked the interrupt's call, or None when it is answered.

    A call the session shows answered (by any path) leaves the inbox here.
    """
    session = await DurableSessionService(store).get_session(
        app_name=interrupt.app_name, user_id=interrupt.user_id, session_id=interrupt.session_id
    )
    events = list(session.events) if session else []
    found = classify(events, interrupt.invocation_id, root_agent_name="-")
    if interrupt.call_id not in found.pending_long_running:
        await table.settle(interrupt)
        return None
    return asks_of(events, interrupt.invocation_id).get(interrupt.call_id, 1)


async def _record_answer(
    table: InterruptTable,
    interrupt: Interrupt,
    response: dict[str, Any],
    *,
    ask: int,
    by: str,
    reason: str | None,
    owner: str,
    lease: float,
    by_deadline: bool,
) -> InboxAnswer:
    cancelled = await RunLedger(table.store).invocation_cancelled(
        app_name=interrupt.app_name,
        user_id=interrupt.user_id,
        session_id=interrupt.session_id,
        invocation_id=interrupt.invocation_id,
    )
    if cancelled is not None:  # the one rule of every continuation (RunPath.submit's)
        raise errors.InvocationCancelled(
            f"interrupt {interrupt.call_id!r}: its invocation was cancelled by {cancelled[1]} "
            f"(run {cancelled[0]}); it takes no answer (nothing changed)"
        )
    content = types.Content(
        role="user",
        parts=[
            types.Part(
                function_response=types.FunctionResponse(
                    id=interrupt.call_id, name=interrupt.name, response=response
                )
            )
        ],
    )
    try:
        run = await table.answer(
            interrupt,
            response=response,
            request=content.model_dump(mode="json", exclude_none=True),
            ask=ask,
            by=by,
            reason=reason,
            owner=owner,
            lease=lease,
            by_deadline=by_deadline,
        )
    except errors.UniqueViolation:
        # The pause's answer claim is taken: a run carrying an answer sent
        # through the run API at the same instant got it first. The loser is
        # told which run carries the answer, and where it stands.
        held = await RunLedger(table.store).claim_holders(
            app_name=interrupt.app_name,
            user_id=interrupt.user_id,
            session_id=interrupt.session_id,
            invocation_id=interrupt.invocation_id,
            claims=[(interrupt.call_id, ask)],
        )
        holder = "".join(
            f" (run {run_id}, {status.value if status else 'gone'})" for _, run_id, status in held
        )
        raise errors.Conflict(
            f"interrupt {interrupt.call_id!r} was already answered by another run{holder} "
            "(nothing changed)"
        ) from None
    if run is None:
        again, now = await find_interrupt(table, interrupt.call_id, session_id=interrupt.session_id)
        raise _refusal(again, now) or errors.Conflict(
            f"interrupt {interrupt.call_id!r} changed while being answered; look again"
        )
    answered, _ = await find_interrupt(table, interrupt.call_id, session_id=interrupt.session_id)
    what = "its default outcome (deny) was applied" if by_deadline else f"answered by {by}"
    return InboxAnswer(
        answered,
        run,
        f"interrupt {interrupt.call_id} ({interrupt.name}) {what}; run {run.run_id} carries the "
        f"answer and is {run.status.value} in session {interrupt.session_id}; the paused run "
        f"{interrupt.run_id} ends DONE with its invocation",
    )


class InterruptSweeper:
    """Applies the default outcome (deny) to the interrupts whose deadline passed."""

    def __init__(
        self,
        store: Store,
        *,
        app_name: str | None,
        owner: str,
        batch: int = 50,
        job_tools: Collection[str] = (),
    ) -> None:
        """Creates the sweeper.

        Args:
            store: The open store.
            app_name: Only this app's interrupts (None: every app's).
            owner: Who holds the runs it queues (with no lease: the next
                recovery sweep of a worker serving the app drives them).
            batch: Most interrupts per pass.
            job_tools: The app's job-backed tools: a call of theirs (or a
                ``sleep_node``'s request) indexed before such calls left the
                inbox is answered by its job or timer, never by a deadline:
                it is settled out of the inbox instead.
        """
        self.table = InterruptTable(store)
        self.app_name = app_name
        self.owner = owner
        self.batch = batch
        self.job_tools = frozenset(job_tools)

    async def expire_once(self) -> list[InboxAnswer]:
        """One pass: every due interrupt gets its default outcome, at most once."""
        done: list[InboxAnswer] = []
        for interrupt in await self.table.due(app_name=self.app_name, limit=self.batch):
            if answered_by_a_job(interrupt.name, interrupt.call_id, self.job_tools):
                # Indexed by an older version: a job or a timer answers it, not a person.
                await self.table.settle(interrupt)
                logger.info(
                    "interrupt %s (%s) waits on its job or timer: left the inbox, no default "
                    "outcome applied",
                    interrupt.call_id,
                    interrupt.name,
                )
                continue
            response = response_for(
                interrupt,
                decision="deny",
                payload=None,
                reason=f"no answer before the deadline ({_when(interrupt.deadline_at)})",
                by="deadline",
            )
            try:
                ask = await _open_ask(self.table.store, self.table, interrupt)
                if ask is None:
                    continue  # answered in its session by another path
                answered = await _record_answer(
                    self.table,
                    interrupt,
                    response,
                    ask=ask,
                    by="deadline",
                    reason="no answer before the deadline",
                    owner=self.owner,
                    lease=0.0,
                    by_deadline=True,
                )
            except errors.Conflict:
                continue  # answered meanwhile, or another sweeper got it first
            logger.info("%s", answered.message)
            done.append(answered)
        return done


__all__ = [
    "ANY_TOOL",
    "InboxAnswer",
    "InterruptSweeper",
    "answer_interrupt",
    "find_interrupt",
    "guarded_call",
    "inbox_at_finish",
    "kind_of",
    "may_have_interrupts",
    "response_for",
    "seal_inbox",
]
