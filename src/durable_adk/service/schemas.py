"""The HTTP edge's request and response models (the OpenAPI spec is made from them).

Pydantic lives here and nowhere deeper: routes validate requests into these
models, call the worker and :class:`~durable_adk.service.ops.Operations`
(which speak frozen dataclasses), and map the answers back with
``from_attributes``. Every identifier obeys the library's one id rule
(:data:`durable_adk.ids.ID_PATTERN`: 1 to 512 characters, no ``/``, NUL or
other control character; a function call id may also hold ``/``,
:data:`CALL_ID_PATTERN`), so hostile strings are refused with 422 before
anything is read or written, and every id the library stores can be named.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from durable_adk.adk.runs.inbox import guarded_call
from durable_adk.adk.runs.operators import MAX_REASON_CHARS, Outcome
from durable_adk.ids import ID_PATTERN as ID_PATTERN  # the library's rule, for the routes
from durable_adk.service.ops import RunDetail, SeqEvent
from durable_adk.tables.interrupts import Interrupt
from durable_adk.tables.ledger import DeadLetter, OperatorAction, Run

Id = Annotated[str, StringConstraints(pattern=ID_PATTERN)]

CALL_ID_PATTERN = r"^[^\x00-\x1f\x7f]{1,512}$"
"""Function call ids (the interrupts' ids): 1 to 512 characters, no NUL or other control
character; unlike the library's ids they may hold ``/`` (a Workflow node's
interrupt id names its node path, ``wf_tool_confirmation:flow@1/ship@1``). In a
URL path a call id is one percent-encoded segment (see ``docs/service.md``,
"Ids in paths"); the route takes the rest of the path, so a plain ``/`` works too.
"""


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True, frozen=True)


class ErrorBody(_Out):
    """What went wrong.

    Attributes:
        code: A stable machine-readable code (``not_found``, ``unauthorized``...).
        message: A sentence for a person.
    """

    code: str
    message: str


class ErrorOut(_Out):
    """Every error response."""

    error: ErrorBody


class StartRunIn(BaseModel):
    """A run to start: the user's message as text, or as a genai ``Content``.

    With ``invocation_id``, the run continues that paused invocation instead:
    ``content`` is then made only of ``function_response`` parts, each
    answering one of its open long-running calls (a tool confirmation, a
    request for input, a long-running tool) by id and name.
    """

    model_config = ConfigDict(extra="forbid")

    message: str | None = Field(
        default=None, min_length=1, description="The user's message as plain text."
    )
    content: dict[str, Any] | None = Field(
        default=None,
        description="The user's message as a google.genai Content object (role 'user').",
    )
    invocation_id: Id | None = Field(
        default=None,
        description="A paused invocation of the session that 'content' answers "
        "(function_response parts only).",
    )
    by: Id | None = Field(
        default=None, description="Who answers (recorded in the audit trail with invocation_id)."
    )
    streaming: bool | None = Field(
        default=None,
        description="Stream the model's text (ADK StreamingMode.SSE): partial events, never "
        "stored, reach this worker's event stream live. Default: the worker's --streaming.",
    )


class RunOut(_Out):
    """One run on the ledger."""

    run_id: str
    app_name: str
    user_id: str
    session_id: str
    invocation_id: str
    status: str
    owner: str | None
    epoch: int
    attempts: int
    last_error: str | None
    classification: str | None
    created_at: float
    updated_at: float
    finished_at: float | None
    app_version: str | None = Field(
        default=None, description="The app version the run was started under (None: unversioned)."
    )
    app_fingerprint: str | None = Field(
        default=None, description="The fingerprint of the app's definition it was started under."
    )


class StartRunOut(_Out):
    """A run accepted: follow its events from ``after_seq``."""

    run: RunOut
    after_seq: int = Field(description="The session's last sequence number before this run.")
    events_url: str = Field(description="Server-Sent Events of this run, from after_seq.")


class RunListOut(_Out):
    """Runs, newest first."""

    runs: list[RunOut]


class RunCountsOut(_Out):
    """How many runs stand in each status."""

    counts: dict[str, int]


class SeqEventOut(_Out):
    """One event of a session's log with its sequence number."""

    seq: int
    event: dict[str, Any]


class EventsOut(_Out):
    """A slice of a session's log."""

    events: list[SeqEventOut]
    last_seq: int = Field(description="The last sequence number in this slice (or 'after').")


class FindingOut(_Out):
    """What the classifier reads in a run's events now."""

    cls: str
    reason: str
    unanswered_calls: list[tuple[str, str]]
    pending_long_running: list[str]


class DeadLetterOut(_Out):
    """A record that needs a person."""

    kind: str
    run_id: str | None
    request: str | None
    classification: str | None
    last_events: str | None
    error: str
    created_at: float


class DeadLetterListOut(_Out):
    """Dead letters, newest first."""

    dead_letters: list[DeadLetterOut]


class ActionOut(_Out):
    """One line of the operators' audit trail."""

    run_id: str
    app_name: str
    action: str = Field(description="cancel, resolve, abandon, retry or answer.")
    actor: str = Field(description="Who.")
    reason: str | None = Field(description="Why.")
    status_before: str
    status_after: str
    epoch: int = Field(description="The run's fencing epoch after the action.")
    detail: dict[str, Any] | None = Field(description="The operator's result, the outcome...")
    created_at: float


class ActionListOut(_Out):
    """Operator actions, newest first."""

    actions: list[ActionOut]


class AttemptOut(_Out):
    """One holder of the run, by the epoch its events were written at (takeover marker)."""

    epoch: int
    first_seq: int
    last_seq: int
    events: int
    by_operator: str | None


class RunDetailOut(_Out):
    """One run with its classification, its events, dead letters and operator actions."""

    run: RunOut
    request: dict[str, Any]
    finding: FindingOut | None
    note: str | None = Field(default=None, description="Why there is no finding.")
    events: list[SeqEventOut]
    dead_letters: list[DeadLetterOut]
    actions: list[ActionOut] = Field(description="What operators did to it, oldest first.")
    attempts: list[AttemptOut] = Field(
        description="Its holders by fencing epoch, from its events' stamps, oldest first."
    )
    a2a_tasks: list[str] = Field(
        default_factory=list,
        description="The A2A tasks whose run this is (durable-adk serve --a2a).",
    )
    wakes_at: float | None = Field(
        default=None,
        description="When its durable sleep is due (epoch seconds, database clock), if it sleeps.",
    )


Who = Annotated[
    str,
    StringConstraints(pattern=ID_PATTERN),
    Field(description="Who acts (recorded in the audit trail)."),
]
Reason = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_REASON_CHARS),
    Field(description="Why (recorded in the audit trail)."),
]


class ActionIn(BaseModel):
    """An operator action without a result: cancel or retry."""

    model_config = ConfigDict(extra="forbid")

    by: Who
    reason: Reason | None = None


class AbandonIn(BaseModel):
    """Abandon a parked run: it becomes FAILED with this reason."""

    model_config = ConfigDict(extra="forbid")

    by: Who
    reason: Reason


class ResolveIn(BaseModel):
    """Resolve a parked run: the result of its unanswered call(s), as the operator checked it."""

    model_config = ConfigDict(extra="forbid")

    by: Who
    reason: Reason | None = None
    result: Any = Field(
        default=None,
        description="The result of the one unanswered call (a JSON object is the "
        "function response as it is; anything else becomes {'result': value}).",
    )
    results: dict[Annotated[str, StringConstraints(min_length=1, max_length=512)], Any] | None = (
        Field(default=None, description="Results by call id, for several unanswered calls.")
    )


class OutcomeOut(_Out):
    """What an operator action did, and where the run stands."""

    run: RunOut
    changed: bool = Field(description="False: nothing was changed (already done).")
    message: str


class AppsOut(_Out):
    """The apps with runs on this store."""

    serving: str = Field(description="The app this worker serves.")
    apps: dict[str, int] = Field(description="Runs per app.")


class StatsOut(_Out):
    """Totals over the whole store."""

    sessions: int
    events: int
    runs: int
    runs_changed_at: float
    dead_letters: int
    operator_actions: int


class HealthOut(_Out):
    """This worker."""

    worker_id: str
    app_name: str
    draining: bool
    active_runs: int


class ReadyOut(_Out):
    """Whether this worker can take work now (``/readyz``: 200 ready, 503 not)."""

    worker_id: str
    ready: bool
    reason: str


class ListOut(_Out):
    """Records of a feature that may be absent from this build (jobs, sagas).

    ``available`` is false, with the reason in ``note``, when the feature's
    module or tables are not there; ``items`` is then empty.
    """

    available: bool
    note: str | None = None
    items: list[dict[str, Any]]


# ------------------------------------------------------------ record mappers


def run_out(run: Run) -> RunOut:
    """A ledger row for the wire."""
    return RunOut.model_validate(run, from_attributes=True)


def events_out(events: Sequence[SeqEvent]) -> list[SeqEventOut]:
    """Stored events for the wire."""
    return [SeqEventOut(seq=e.seq, event=e.as_dict()) for e in events]


def letter_out(letter: DeadLetter) -> DeadLetterOut:
    """A dead letter for the wire."""
    return DeadLetterOut.model_validate(letter, from_attributes=True)


def action_out(action: OperatorAction) -> ActionOut:
    """An audit line for the wire."""
    detail = json.loads(action.detail) if action.detail else None
    return ActionOut(
        run_id=action.run_id,
        app_name=action.app_name,
        action=action.action,
        actor=action.actor,
        reason=action.reason,
        status_before=action.status_before,
        status_after=action.status_after,
        epoch=action.epoch,
        detail=detail if isinstance(detail, dict) else None,
        created_at=action.created_at,
    )


def outcome_out(outcome: Outcome) -> OutcomeOut:
    """An operator action's outcome for the wire."""
    return OutcomeOut(run=run_out(outcome.run), changed=outcome.changed, message=outcome.message)


def detail_out(detail: RunDetail) -> RunDetailOut:
    """A run's details for the wire."""
    finding = detail.finding
    return RunDetailOut(
        run=run_out(detail.run),
        request=json.loads(detail.run.request),
        note=detail.note,
        wakes_at=detail.wakes_at,
        a2a_tasks=list(detail.a2a_tasks),
        actions=[action_out(a) for a in detail.actions],
        attempts=[AttemptOut.model_validate(a, from_attributes=True) for a in detail.attempts],
        finding=None
        if finding is None
        else FindingOut(
            cls=finding.cls,
            reason=finding.reason,
            unanswered_calls=list(finding.unanswered_calls),
            pending_long_running=list(finding.pending_long_running),
        ),
        events=events_out(detail.events),
        dead_letters=[letter_out(d) for d in detail.dead_letters],
    )


class GuardedCallOut(_Out):
    """The tool call a confirmation guards (what approving it lets run)."""

    name: str
    args: Any


class InterruptOut(_Out):
    """A call a paused run waits on (a confirmation, an input, a long-running call)."""

    call_id: str
    app_name: str
    user_id: str
    session_id: str
    invocation_id: str
    run_id: str = Field(description="The run that paused on it.")
    kind: str = Field(
        description="confirmation (a tool's or any Workflow node's: approve or deny), input "
        "or long_running."
    )
    name: str = Field(description="The call's function name.")
    args: dict[str, Any] = Field(description="The call's arguments (hint, original call...).")
    guarded_call: GuardedCallOut | None = Field(
        default=None, description="For a confirmation: the call it guards."
    )
    status: str = Field(description="OPEN, ANSWERED, EXPIRED (default outcome) or CLOSED.")
    deadline_at: float | None = Field(description="When the default outcome (deny) applies.")
    answered_by: str | None
    answer: dict[str, Any] | None = Field(description="The function response sent.")
    answer_run_id: str | None = Field(description="The run that carries the answer on.")
    answered_at: float | None
    created_at: float


class InterruptListOut(_Out):
    """Interrupts, oldest first."""

    interrupts: list[InterruptOut]


class AnswerIn(BaseModel):
    """Answer an interrupt: approve or deny (a confirmation), or a payload (input, long-running)."""

    model_config = ConfigDict(extra="forbid")

    by: Who
    decision: Literal["approve", "deny"] | None = Field(
        default=None, description="A confirmation's answer; any interrupt may be denied."
    )
    payload: Any = Field(
        default=None,
        description="An input's or long-running call's answer (JSON; an object is the function "
        "response as it is), or a confirmation's payload.",
    )
    reason: Reason | None = None
    session_id: Id | None = Field(
        default=None, description="The session, when the call id is open in several."
    )


class AnswerOut(_Out):
    """What an answer did: the interrupt as answered and the run carrying the answer on."""

    interrupt: InterruptOut
    run: RunOut
    message: str


def interrupt_out(interrupt: Interrupt) -> InterruptOut:
    """An interrupt for the wire."""
    out = InterruptOut.model_validate(interrupt, from_attributes=True)
    guarded = guarded_call(interrupt.name, interrupt.call_id, interrupt.args)
    if guarded is None:
        return out
    return out.model_copy(update={"guarded_call": GuardedCallOut(name=guarded[0], args=guarded[1])})
