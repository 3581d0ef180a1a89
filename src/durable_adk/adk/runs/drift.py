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
  marked uncompensatable could otherwise be left half rolled back;
* the tool behind a confirmation still waiting for its answer (ADK's
  ``adk_request_confirmation`` call names the call it guards): the answer
  runs that tool;
* the key of every journal entry of a call still open (an intent, or a DONE
  whose answer never reached the log): a journaled tool (or node) whose code
  keys it with another template than the one that wrote the entry (the
  journal keeps it, ``journal.key_template``), or whose template computes
  another key from the call's arguments (entries written before schema
  version 20), would find no entry and act again; so would a tool that is no
  longer journaled at all;
* the id of every job of a long-running call still open: a job key template
  that computes another id from the job's request would start the work again.

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
from durable_adk.effect_tables.jobs import Job
from durable_adk.effect_tables.journal import JournalEntry, OutcomeUnknown
from durable_adk.effect_tables.sagas import owes_undo

CONFIRMATION_CALL = "adk_request_confirmation"
"""ADK's call asking a person to confirm another call (named in its ``originalFunctionCall``)."""

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


def _formatted(template: str, args: Mapping[str, Any] | None) -> str | None:
    """``template`` formatted from a call's arguments, or None when they do not fit it."""
    try:
        return template.format(**dict(args or {}))
    except (KeyError, IndexError, ValueError, AttributeError, TypeError):
        return None


def _call_args(events: Sequence[Event], invocation_id: str) -> dict[str, Mapping[str, Any]]:
    """The arguments of each call of the invocation, by call id."""
    found: dict[str, Mapping[str, Any]] = {}
    for event in events:
        if event.invocation_id == invocation_id:
            for call in event.get_function_calls():
                if call.id:
                    found[call.id] = call.args or {}
    return found


def key_drift(
    events: Sequence[Event],
    invocation_id: str,
    known: Known,
    entries: Iterable[JournalEntry] = (),
    jobs: Iterable[Job] = (),
) -> list[str]:
    """The journal entries and jobs of the invocation's open calls that ``known`` would key
    differently (see the module doc), in order, once each.

    Args:
        events: The session's events (the answers of the whole session count).
        invocation_id: The invocation the drive continues.
        known: The driving code's definition (:meth:`Known.of`).
        entries: The invocation's journal entries.
        jobs: The invocation's jobs (timers are keyed by their call: not compared).

    Returns:
        Human-readable items naming the tool and both templates (or keys).
    """
    answers: set[str] = set()
    user_answers: set[str] = set()
    for event in events:
        for response in event.get_function_responses():
            if response.id:
                answers.add(response.id)
                if event.author == "user":
                    user_answers.add(response.id)
    args = _call_args(events, invocation_id)
    missing: dict[str, None] = {}
    for entry in entries:
        call_id = entry.function_call_id
        if call_id is not None and call_id in answers:
            continue  # history: the log holds its answer, nothing runs the call again
        name = entry.tool_name
        now = known.journal_keys.get(name)
        if now is None:
            if entry.key_template is not None and name in known.tools:
                missing[
                    f"journaled tool {name!r} keyed {entry.key_template!r} (journal entry "
                    f"{entry.key!r}) where this code no longer journals it"
                ] = None
            continue  # a saga stage's act, or a tool gone (named with its open call)
        if entry.key_template is not None:
            if entry.key_template != now:
                missing[
                    f"journaled tool {name!r} keyed {entry.key_template!r} (journal entry "
                    f"{entry.key!r}) where this code keys it {now!r}"
                ] = None
            continue
        computed = _formatted(now, args.get(call_id or ""))
        if computed is not None and computed != entry.key:
            missing[
                f"journaled tool {name!r} (journal entry {entry.key!r}) where this code "
                f"keys the call {computed!r} with {now!r}"
            ] = None
    for job in jobs:
        if job.timer or job.function_call_id in user_answers:
            continue
        template = known.long_running.get(job.tool_name)
        if not template:
            continue  # gone (named with its open call) or a plain long-running tool
        request = job.request if isinstance(job.request, Mapping) else {}
        computed = _formatted(template, request)
        if computed is not None and computed != job.job_id:
            missing[
                f"long-running tool {job.tool_name!r} (job {job.job_id!r}) where this code "
                f"keys the call {computed!r} with {template!r}"
            ] = None
    return list(missing)


def _confirmed_tool(call_args: Mapping[str, Any] | None) -> str | None:
    """The name of the call a confirmation request guards (its ``originalFunctionCall``)."""
    original = (call_args or {}).get("originalFunctionCall")
    if isinstance(original, Mapping):
        name = original.get("name")
        return name if isinstance(name, str) and name else None
    return None


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
            if call.name == CONFIRMATION_CALL and call.id and call.id not in user_answers:
                # The confirmation's answer runs the tool it guards (or tells it no).
                guarded = _confirmed_tool(call.args)
                if guarded is not None and guarded not in known.tools:
                    missing[f"tool {guarded!r} (waiting for its confirmation)"] = None
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
