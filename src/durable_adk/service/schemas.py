"""The HTTP edge's request and response models (the OpenAPI spec is made from them).

Pydantic lives here and nowhere deeper: routes validate requests into these
models, call the worker and :class:`~durable_adk.service.ops.Operations`
(which speak frozen dataclasses), and map the answers back with
``from_attributes``. Every identifier has a bounded length and a plain
character set, so hostile strings are refused with 422 before anything is read
or written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from durable_adk.ledger import DeadLetter, Run
from durable_adk.service.ops import RunDetail, SeqEvent

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
"""User, session and run ids the API accepts: 1 to 128 plain characters."""

Id = Annotated[str, StringConstraints(pattern=ID_PATTERN)]


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
    """A run to start: the user's message as text, or as a genai ``Content``."""

    model_config = ConfigDict(extra="forbid")

    message: str | None = Field(
        default=None, min_length=1, description="The user's message as plain text."
    )
    content: dict[str, Any] | None = Field(
        default=None,
        description="The user's message as a google.genai Content object (role 'user').",
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


class RunDetailOut(_Out):
    """One run with its classification, its events and its dead letters."""

    run: RunOut
    request: dict[str, Any]
    finding: FindingOut | None
    events: list[SeqEventOut]
    dead_letters: list[DeadLetterOut]


class StatsOut(_Out):
    """Totals over the whole store."""

    sessions: int
    events: int
    runs: int
    runs_changed_at: float
    dead_letters: int


class HealthOut(_Out):
    """This worker."""

    worker_id: str
    app_name: str
    draining: bool
    active_runs: int


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


def detail_out(detail: RunDetail) -> RunDetailOut:
    """A run's details for the wire."""
    finding = detail.finding
    return RunDetailOut(
        run=run_out(detail.run),
        request=json.loads(detail.run.request),
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
