"""Drift: what a run's log refers to that the code driving it no longer has.

A run recorded under one definition of the app (its fingerprint, see
:mod:`durable_adk.adk.runs.fingerprint`) may be continued by a worker whose code
differs: a compatible version (docs/deploying.md), or the same version string
deployed with changed code. Before such a drive hands the invocation to ADK,
:func:`drift` reads the invocation's stored events and names what they need
and the code lacks:

* an agent that wrote one of its events (ADK resumes the invocation in the
  agent it was in);
* a Workflow node on one of its events' node paths (``flow@1/review@1``);
* the tool of a call still open (no answer yet, or a long-running call with
  no answer from the user: the answer the drive carries goes to it), or a
  long-running call whose tool is no longer long-running;
* each saga the invocation recorded (a SagaSequence of that name) and each
  step it recorded (a stage of that name), read from the saga ledger;
* the compensator of each step not yet undone that the code beginning it
  could undo (the ledger keeps that with the step): a stage the new code
  marked uncompensatable could otherwise be left half rolled back.

ADK's own calls (``adk_request_input``, ``adk_request_confirmation``,
``adk_request_credential``, ``transfer_to_agent``) need no tool of the app.
Calls answered long ago are history: the model reads them, nothing runs them.

The driver parks a drifted run (a dead letter naming what is missing) before
any model call or tool runs. Runs recorded under the worker's own fingerprint,
or under none, are not read at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.adk.events.event import Event

from durable_adk.adk.runs.fingerprint import Known
from durable_adk.tables.journal import OutcomeUnknown
from durable_adk.tables.sagas import owes_undo

ADK_CALLS = frozenset(
    {
        "adk_request_input",
        "adk_request_confirmation",
        "adk_request_credential",
        "transfer_to_agent",
    }
)
"""Function calls ADK makes and answers itself: no tool of the app serves them."""


class RunDrifted(OutcomeUnknown):
    """The run's log refers to what this code lacks: it was parked before anything acted."""


@dataclass(frozen=True, slots=True)
class RecordedStep:
    """A saga step as the ledger holds it (``saga_steps_of_invocation``).

    Attributes:
        saga: The saga's (SagaSequence's) name.
        step: The stage's name.
        status: PENDING, DONE, COMPENSATED or COMPENSATION_FAILED.
        compensatable: Whether the code that began it could undo it (None: not kept).
    """

    saga: str
    step: str
    status: str = "DONE"
    compensatable: bool | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RecordedStep:
        """Maps a ``saga_steps_of_invocation`` row."""
        compensatable = row["compensatable"]
        return cls(
            saga=str(row["name"]),
            step=str(row["step"]),
            status=str(row["status"]),
            compensatable=None if compensatable is None else bool(compensatable),
        )


def node_names(path: str | None) -> list[str]:
    """The node names of a node path (``"flow@1/review@2"``: ``["flow", "review"]``)."""
    return [part.split("@", 1)[0] for part in (path or "").split("/") if part.split("@", 1)[0]]


def drift(
    events: Sequence[Event],
    invocation_id: str,
    known: Known,
    saga_steps: Iterable[RecordedStep] = (),
) -> list[str]:
    """What the invocation's stored events refer to that ``known`` lacks, in order, once each.

    Args:
        events: The session's events (only the invocation's are read; the
            answers of the whole session count).
        invocation_id: The invocation the drive continues.
        known: The names the driving code knows (:meth:`Known.of`).
        saga_steps: Every step the invocation's sagas recorded (the saga ledger).

    Returns:
        Human-readable items (``"tool 'approve'"``); empty when nothing drifted.
    """
    answers: set[str] = set()
    user_answers: set[str] = set()
    for event in events:
        for response in event.get_function_responses():
            if response.id:
                answers.add(response.id)
                if event.author == "user":
                    user_answers.add(response.id)
    missing: dict[str, None] = {}
    for event in events:
        if event.invocation_id != invocation_id:
            continue
        if event.author != "user" and event.author not in known.agents:
            missing[f"agent {event.author!r}"] = None
        for name in node_names(event.node_info.path):
            if name not in known.agents:
                missing[f"node {name!r}"] = None
        long_running = event.long_running_tool_ids or set()
        for call in event.get_function_calls():
            if not call.name or call.name in ADK_CALLS or not call.id:
                continue
            is_long = call.id in long_running
            still_open = call.id not in (user_answers if is_long else answers)
            if not still_open:
                continue
            if call.name not in known.tools:
                missing[f"tool {call.name!r}"] = None
            elif is_long and call.name not in known.long_running:
                missing[f"tool {call.name!r} (no longer long-running)"] = None
    for recorded in saga_steps:
        saga, step = recorded.saga, recorded.step
        stages = known.saga_steps.get(saga)
        if stages is None:
            missing[f"saga {saga!r}"] = None
        elif step not in stages:
            missing[f"saga step {saga!r}/{step!r}"] = None
        elif owes_undo(recorded.status, recorded.compensatable) and step not in (
            known.compensators.get(saga, frozenset())
        ):
            missing[f"compensator of saga step {saga!r}/{step!r}"] = None
    return list(missing)
