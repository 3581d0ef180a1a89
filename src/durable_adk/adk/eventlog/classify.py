"""Classify what the stored events say about an invocation whose worker died.

The recovery sweeper asks `classify` about the invocation of each run it claims
(DESIGN.md 3.2). Guarantees (pure functions: no I/O, inputs never mutated):

* Rewinds are applied first, exactly as ADK does when it builds model requests
  (``_apply_rewinds``): a rewind event undoes itself and every event from the
  first event of the invocation it names up to it. Then only the invocation's
  own non-partial events count; other invocations' events (rewinds aside)
  never change the result.
* Events with neither content, ``error_code`` nor ``output`` (checkpoint-only
  ``agent_state`` / ``end_of_agent`` events among them) are never the "last
  meaningful event"; only the end marker of the root or terminal agent counts.
* Precedence: NOT_STARTED, TOOL_UNANSWERED, NODE_INFLIGHT, PAUSED,
  ACTUALLY_DONE, else MODEL_INFLIGHT. An invocation with a call that is not long-running and has
  no function response is TOOL_UNANSWERED, never ACTUALLY_DONE or
  MODEL_INFLIGHT, whatever follows the call (an error event is not an answer).
* ``is_final_response()`` is never a done test: it is true for sub-agents'
  texts, error events and long-running calls.

Decisions:

* A call is *unanswered* when no function response has its id. It is also
  *abandoned* when its author made a later model turn: ADK moved past it
  (a non-resumable re-drive drops the call and asks the model again) and a
  re-drive will not replay it. Both count as unanswered: the sweeper re-drives
  a call ADK can still replay and parks an abandoned one (``abandoned_calls``).
* A long-running call (``long_running_tool_ids``, or a legacy
  ``adk_request_input`` / ``adk_request_credential`` call) is open until a
  function response with its id comes from the user or an abort seal, as in
  ADK's interrupt index; the tool's own interim response does not answer it.
* Calls and responses are matched by count, in log order, as ADK matches
  them: an interrupt id reused by a later call (a Workflow ``RequestInput``
  in a loop) is open again until its next answer, so a second pause on a
  reused id is PAUSED, not done.
* A call whose ``adk_request_confirmation`` request is still open waits on
  that request (PAUSED), not on a tool. The user's answer to it reopens the call it
  guards (whose placeholder response said "requires confirmation"): ADK then
  runs the tool and answers again, so a crash in between is TOOL_UNANSWERED.
  Only an answer that closed an open request reopens the call; a repeated
  answer does not.
* A progress answer (``response["interim"]`` true) leaves its call open.
* A long-running tool's own answer marked final (``response["final"]`` true:
  the tool refused the call, stored no job or timer, and nothing will ever
  answer it) closes its call, as an answer of the user does: the agent read
  the refusal and went on, so the invocation is not PAUSED on it.
* The terminal agent (the done test's) is the root, or ``terminal_agent_name``,
  or with ``owner_speaks_first`` the first agent that speaks in the
  invocation; it then follows each transfer it makes.
* An error event (``error_code``) as the last meaningful event gives
  MODEL_INFLIGHT: no answer was given, so a re-drive duplicates nothing the
  user saw and retries a maybe transient failure; the attempt limit parks a
  persistent one with this reason (naming the code) in the dead letter. Done
  would report a failure as success. A tool that raised (ADK stores a
  content-less error event after the call, ``workflow/_node_runner.py``):
  TOOL_UNANSWERED, the error event does not answer the call.
* An abort seal (``error_code == "INVOCATION_ABORTED"``: a client cancelled)
  gives ACTUALLY_DONE: a re-drive would undo the cancellation.
* An invocation whose events were all rewound away gives NOT_STARTED.

Workflow roots (``nodes`` given): a Workflow records its nodes' statuses in
checkpoint events (``actions.agent_state == {"nodes": {name: {"status": n}}}``,
authored by the workflow, written when a node starts and when it ends,
``workflow/_workflow.py`` ``_emit_node_checkpoint``). A node is *in flight*
when the workflow's last checkpoint says RUNNING and no output event of that
node (``node_info.path`` ending ``<workflow>@k/<node>@j``) follows it. An agent
node in flight shows its own progress in events (its calls, its texts), so it
is classified by them as before; a nested Workflow by its own checkpoints. Any
other node in flight (a FunctionNode, a tool node, a custom node) did work that
no event shows: NODE_INFLIGHT, whose ``unsafe_nodes`` are those not declared
idempotent or journaled (the sweeper parks them; it re-drives the rest, and
ADK re-runs the node).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from google.adk.events.event import Event
from google.genai import types

from durable_adk import errors

RECOVERY_SKEW_SECONDS = 5.0
"""How far before the ledger's start time a stored user event may be stamped."""

ABORT_ERROR_CODE = "INVOCATION_ABORTED"
"""The ``error_code`` of the events ADK writes to seal a cancelled invocation."""

INTERIM_KEY = "interim"
"""A function response whose ``response[INTERIM_KEY]`` is true (progress) leaves its call open."""

FINAL_KEY = "final"
"""A long-running tool's own response whose ``response[FINAL_KEY]`` is true closes its call."""

_CONFIRMATION = "adk_request_confirmation"
_NODE_RUNNING = 2
"""``NodeStatus.RUNNING.value`` as a checkpoint stores it (checked by verify_adk_facts.py)."""
_LEGACY_INTERRUPTS = frozenset({"adk_request_input", "adk_request_credential"})


class OrphanClass(StrEnum):
    """What the stored events say about an invocation (a ``str`` subclass)."""

    NOT_STARTED = "NOT_STARTED"
    MODEL_INFLIGHT = "MODEL_INFLIGHT"
    TOOL_UNANSWERED = "TOOL_UNANSWERED"
    NODE_INFLIGHT = "NODE_INFLIGHT"
    PAUSED = "PAUSED"
    ACTUALLY_DONE = "ACTUALLY_DONE"


class NodeKind(StrEnum):
    """What recovery may do with a Workflow graph node that a crash left in flight."""

    AGENT = "agent"
    """An agent node: its calls and texts are events, classified as such."""
    WORKFLOW = "workflow"
    """A nested Workflow: classified by its own checkpoints."""
    RERUNNABLE = "rerunnable"
    """A node declared idempotent or journaled: ADK may run it again."""
    OPAQUE = "opaque"
    """Any other node (a FunctionNode, a tool node): it may have acted unseen."""


@dataclass(frozen=True)
class Classification:
    """The verdict on one invocation.

    Attributes:
        cls: The class.
        invocation_id: The invocation classified.
        unanswered_calls: ``(call_id, tool_name)`` of each call that is not
            long-running and has no function response, in call order.
        pending_long_running: Ids of the long-running calls still unanswered.
        reason: A short human explanation.
        last_event_id: Id of the invocation's last live event (of any kind).
        abandoned_calls: Ids of the ``unanswered_calls`` whose author made a
            later model turn: a re-drive will not replay them.
        inflight_nodes: ``workflow/node`` of each Workflow node in flight
            that is neither an agent nor a workflow (NODE_INFLIGHT).
        unsafe_nodes: Those of ``inflight_nodes`` not declared idempotent or
            journaled: re-running them might repeat what they did.
    """

    cls: OrphanClass
    invocation_id: str | None
    unanswered_calls: tuple[tuple[str, str], ...]
    pending_long_running: tuple[str, ...]
    reason: str
    last_event_id: str | None
    abandoned_calls: tuple[str, ...] = ()
    inflight_nodes: tuple[str, ...] = ()
    unsafe_nodes: tuple[str, ...] = ()


def live_events(events: Sequence[Event]) -> list[Event]:
    """Returns the events that survive every rewind, in order.

    Mirrors ADK's ``_apply_rewinds``: walking backwards, an event with
    ``actions.rewind_before_invocation_id == X`` is dropped together with every
    event from the first event of invocation ``X`` up to it.

    Args:
        events: The session's events, oldest first.

    Returns:
        The live events, oldest first.
    """
    first_index: dict[str, int] = {}
    for index, event in enumerate(events):
        if event.invocation_id and event.invocation_id not in first_index:
            first_index[event.invocation_id] = index
    kept: list[Event] = []
    i = len(events) - 1
    while i >= 0:
        target = events[i].actions.rewind_before_invocation_id
        if target:
            start = first_index.get(target)
            if start is not None and start < i:
                i = start
        else:
            kept.append(events[i])
        i -= 1
    kept.reverse()
    return kept


def _has_content(event: Event) -> bool:
    return bool(event.content and event.content.parts)


def _text_of(event: Event) -> str:
    parts = event.content.parts if event.content and event.content.parts else []
    return "".join(p.text for p in parts if p.text and not p.thought)


def _is_meaningful(event: Event) -> bool:
    return _has_content(event) or bool(event.error_code)


def _is_model_turn(event: Event) -> bool:
    return event.author != "user" and _has_content(event) and not event.get_function_responses()


def _is_final_text(event: Event) -> bool:
    return (
        event.author != "user"
        and bool(_text_of(event))
        and not event.get_function_calls()
        and not event.get_function_responses()
        and not event.long_running_tool_ids
        and not event.error_code
        and not event.actions.transfer_to_agent
    )


@dataclass
class _Occurrence:
    """One issue of a call id (ADK lets an interrupt id be reused: a loop asks again)."""

    name: str
    author: str
    index: int
    long_running: bool


def _open_calls(
    mine: Sequence[Event],
) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...], tuple[str, ...]]:
    """Returns the unanswered ``(id, name)`` calls, the abandoned ones' ids and the open
    long-running call ids.

    Calls and responses are matched by count, in log order, as ADK matches
    them (``events/_interrupts.py`` ``index_open_interrupts``, the workflow
    rehydration scan): a call id issued again after its answer (a
    ``RequestInput`` reusing its ``interrupt_id`` in a loop) is open again,
    and each response closes the oldest open issue of its id.
    """
    open_issues: dict[str, list[_Occurrence]] = {}
    confirms: dict[str, str] = {}  # confirmation call id -> id of the call it guards
    last_issue: dict[str, _Occurrence] = {}  # the latest issue of each call id
    last_turn: dict[str, int] = {}
    for index, event in enumerate(mine):
        from_user = event.author == "user" or event.error_code == ABORT_ERROR_CODE
        for response in event.get_function_responses():
            if (response.response or {}).get(INTERIM_KEY):
                continue  # progress: the call stays open
            issues = open_issues.get(response.id or "", [])
            # The user (or an abort seal) answers any call; a tool's own
            # (interim) response does not close a long-running one, unless
            # the tool marked it final (it refused the call: nothing follows).
            final = from_user or bool((response.response or {}).get(FINAL_KEY))
            closing = next((o for o in issues if final or not o.long_running), None)
            if closing is None:
                continue  # answers nothing open (a repeat, or an unknown id)
            issues.remove(closing)
            guarded = confirms.get(response.id or "")
            if event.author == "user" and guarded is not None and guarded in last_issue:
                # The user's decision reopens the guarded call: ADK answers it again.
                before = last_issue[guarded]
                reopened = _Occurrence(before.name, before.author, index, long_running=False)
                open_issues.setdefault(guarded, []).append(reopened)
                last_issue[guarded] = reopened
        marked = set(event.long_running_tool_ids or ())
        for call in event.get_function_calls():
            if not call.id:
                continue  # ADK gives every call an id; one without cannot be answered
            issue = _Occurrence(
                call.name or "",
                event.author,
                index,
                long_running=call.id in marked or call.name in _LEGACY_INTERRUPTS,
            )
            open_issues.setdefault(call.id, []).append(issue)
            last_issue[call.id] = issue
            original = (call.args or {}).get("originalFunctionCall")
            if call.name == _CONFIRMATION and isinstance(original, dict):
                confirms[call.id] = str(original.get("id"))
        for call_id in marked:  # marked on a later event than its call
            for issue in open_issues.get(call_id, []):
                issue.long_running = True
        if _is_model_turn(event):
            last_turn[event.author] = index
    pending = tuple(c for c, issues in open_issues.items() if any(o.long_running for o in issues))
    # A call awaiting its confirmation waits on that (long-running) request, not on a tool.
    awaiting_confirmation = {guarded for request, guarded in confirms.items() if request in pending}
    unanswered_issues = [
        (call_id, issue)
        for call_id, issues in open_issues.items()
        if call_id not in awaiting_confirmation
        for issue in issues
        if not issue.long_running
    ]
    unanswered = tuple(dict.fromkeys((c, o.name) for c, o in unanswered_issues))
    abandoned = tuple(
        dict.fromkeys(c for c, o in unanswered_issues if last_turn.get(o.author, -1) > o.index)
    )
    return unanswered, abandoned, pending


def _node_of(path: str | None) -> tuple[str, str] | None:
    """``(workflow, node)`` names of an event's ``node_info.path`` (``"flow@1/bill@1"``)."""
    segments = [segment.split("@", 1)[0] for segment in (path or "").split("/") if segment]
    return (segments[-2], segments[-1]) if len(segments) >= 2 else None


def nodes_in_flight(
    mine: Sequence[Event], nodes: Mapping[str, NodeKind]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The in-flight Workflow nodes that are neither agents nor workflows, and the unsafe ones.

    Args:
        mine: One invocation's live events, oldest first.
        nodes: Each graph node's kind, keyed ``workflow/node``; a node missing
            from it counts as OPAQUE.

    Returns:
        ``(in_flight, unsafe)``, each ``workflow/node`` names in checkpoint order.
    """
    latest: dict[str, tuple[int, Mapping[str, Any]]] = {}
    for index, event in enumerate(mine):
        state = event.actions.agent_state
        if isinstance(state, Mapping) and isinstance(state.get("nodes"), Mapping):
            latest[event.author] = (index, state["nodes"])
    in_flight: list[str] = []
    unsafe: list[str] = []
    for workflow, (index, states) in latest.items():
        for name, state in states.items():
            if not (isinstance(state, Mapping) and state.get("status") == _NODE_RUNNING):
                continue
            key = f"{workflow}/{name}"
            kind = nodes.get(key, NodeKind.OPAQUE)
            if kind in (NodeKind.AGENT, NodeKind.WORKFLOW):
                continue
            if any(
                e.output is not None and _node_of(e.node_info.path) == (workflow, name)
                for e in mine[index + 1 :]
            ):
                continue  # it finished; only the checkpoint saying so was lost
            in_flight.append(key)
            if kind is not NodeKind.RERUNNABLE:
                unsafe.append(key)
    return tuple(in_flight), tuple(unsafe)


def recover_invocation_id(
    events: Sequence[Event],
    *,
    started_at: float,
    request_text: str | None = None,
    skew: float = RECOVERY_SKEW_SECONDS,
) -> str | None:
    """Finds a run's invocation id from its stored user message.

    Candidates are user events with content and no function responses (an
    answer to a long-running call is stored under the older invocation that
    made the call) stamped no earlier than ``started_at - skew``. Rewinds are
    not applied: the id of a rewound invocation is still its id.

    Args:
        events: The session's events, oldest first.
        started_at: When the ledger row started, in ``Event.timestamp`` units
            (seconds since the epoch).
        request_text: The run's request text; the first candidate whose text
            equals it (both stripped) is preferred.
        skew: Clock skew tolerated between the ledger and the events.

    Returns:
        The invocation id, or ``None`` if no candidate exists.
    """
    candidates = [
        e
        for e in events
        if e.author == "user"
        and e.invocation_id
        and e.timestamp >= started_at - skew
        and _has_content(e)
        and not e.get_function_responses()
    ]
    if request_text is not None:
        wanted = request_text.strip()
        for event in candidates:
            if _text_of(event).strip() == wanted:
                return event.invocation_id
    return candidates[0].invocation_id if candidates else None


def classify(
    events: Sequence[Event],
    invocation_id: str | None,
    *,
    root_agent_name: str,
    terminal_agent_name: str | None = None,
    nodes: Mapping[str, NodeKind] | None = None,
    owner_speaks_first: bool = False,
) -> Classification:
    """Classifies what the stored events say about one invocation.

    ACTUALLY_DONE needs no unanswered or long-running call and either (a) an
    ``end_of_agent`` marker by the root or terminal agent after the last
    meaningful event, unless that event hands over with ``transfer_to_agent``
    (an LlmAgent writes its marker before its transfer target runs); (b) an
    abort seal as the last meaningful event; (c) a final text by the
    terminal agent as the last meaningful event; or (d) an output event (a
    node's answer, with or without content) by the root or terminal agent as
    the last meaningful event: a plain BaseNode root ends so. The terminal agent starts as
    ``terminal_agent_name`` (else the root) and follows each transfer it makes.
    Markers exist only in resumable apps; without them a pipeline is done only
    through (c), so pass its last sub-agent as ``terminal_agent_name``. For an
    LlmAgent root whose conversation moved to a sub-agent in an earlier
    invocation, pass that sub-agent. A loop's sub-agents answer every round:
    for a LoopAgent root pass none (only the root's marker then counts).

    With ``owner_speaks_first`` (an LlmAgent root: ADK hands each new message
    to the agent that owns the conversation, the target of an earlier turn's
    transfer), the terminal agent is the first agent that speaks in the
    invocation, then follows its transfers: a specialist's answer in turn 2
    ends the turn.

    Args:
        events: The whole session's events, oldest first (rewinds may come
            from other invocations).
        invocation_id: The invocation to classify; ``None`` if unknown.
        root_agent_name: The name of the app's root agent.
        terminal_agent_name: The agent whose final text ends the invocation.
        nodes: For a Workflow root, each graph node's kind keyed
            ``workflow/node`` (:func:`durable_adk.adk.tools.workflow_nodes.node_kinds`):
            turns on NODE_INFLIGHT. None for other roots.
        owner_speaks_first: The root is a conversational LlmAgent (see above).

    Returns:
        The classification; the module docstring lists the rules.
    """
    live = live_events(events) if invocation_id is not None else []
    mine = [e for e in live if e.invocation_id == invocation_id and not e.partial]
    last_id = mine[-1].id if mine else None

    def verdict(
        cls: OrphanClass,
        reason: str,
        calls: tuple[tuple[str, str], ...] = (),
        pending: tuple[str, ...] = (),
    ) -> Classification:
        return Classification(cls, invocation_id, calls, pending, reason, last_id)

    if invocation_id is None:
        return verdict(OrphanClass.NOT_STARTED, "no invocation id")
    if not any(e.author == "user" and _has_content(e) for e in mine):
        rewound = not mine and any(e.invocation_id == invocation_id for e in events)
        why = "its events were rewound" if rewound else "no user message stored"
        return verdict(OrphanClass.NOT_STARTED, why)

    unanswered, abandoned, pending = _open_calls(mine)
    if unanswered:
        names = ", ".join(name for _, name in unanswered)
        why = f"unanswered call: {names}"
        if abandoned:
            why += f" ({len(abandoned)} left behind by a later model turn)"
        return Classification(
            OrphanClass.TOOL_UNANSWERED, invocation_id, unanswered, pending, why, last_id, abandoned
        )
    if nodes is not None:
        in_flight, unsafe = nodes_in_flight(mine, nodes)
        if in_flight:
            why = f"node in flight: {', '.join(in_flight)}"
            if unsafe:
                why += f" ({', '.join(unsafe)} neither idempotent nor journaled)"
            return Classification(
                OrphanClass.NODE_INFLIGHT,
                invocation_id,
                (),
                pending,
                why,
                last_id,
                inflight_nodes=in_flight,
                unsafe_nodes=unsafe,
            )
    if pending:
        return verdict(OrphanClass.PAUSED, "long-running call awaits its answer", (), pending)

    terminal = terminal_agent_name or root_agent_name
    if owner_speaks_first:
        terminal = next(
            (e.author for e in mine if e.author != "user" and _is_meaningful(e)), terminal
        )
    for event in mine:
        if event.author == terminal and event.actions.transfer_to_agent:
            terminal = event.actions.transfer_to_agent
    # A plain node's output event carries no content: for a root that is neither
    # an agent nor a Workflow (whose nodes' outputs are read above), it is the
    # node's answer, as ADK's Runner takes it.
    outputs_answer = nodes is None

    def counts(e: Event) -> bool:
        return _is_meaningful(e) or (outputs_answer and e.output is not None)

    last_index = max(i for i, e in enumerate(mine) if counts(e))
    last = mine[last_index]
    done = OrphanClass.ACTUALLY_DONE
    if not last.actions.transfer_to_agent:
        for event in mine[last_index + 1 :]:
            if event.actions.end_of_agent and event.author in (root_agent_name, terminal):
                return verdict(done, f"end marker of {event.author}")
    if last.error_code == ABORT_ERROR_CODE:
        return verdict(done, "aborted by the client")
    if last.author == terminal and _is_final_text(last):
        return verdict(done, f"final text by terminal agent {terminal}")
    if outputs_answer and last.output is not None and last.author in (root_agent_name, terminal):
        return verdict(done, f"output of {last.author}")

    if last.error_code:
        why = f"error {last.error_code} by {last.author}; re-drive retries"
    elif last.actions.transfer_to_agent:
        why = f"transfer to {last.actions.transfer_to_agent}; awaiting it"
    elif last.author == "user":
        why = "awaiting the model after the user's message"
    elif last.get_function_responses():
        why = "calls answered; awaiting the model"
    elif _is_final_text(last):
        why = f"text by {last.author}, not the terminal agent {terminal}"
    else:
        why = f"awaiting the model after {last.author}"
    return verdict(OrphanClass.MODEL_INFLIGHT, why)


def asks_of(events: Sequence[Event], invocation_id: str) -> dict[str, int]:
    """How many times the invocation asked each call id (a loop may ask one id again)."""
    asked: dict[str, int] = {}
    for event in live_events(events):
        if event.invocation_id != invocation_id or event.author == "user":
            continue
        for call in event.get_function_calls():
            if call.id:
                asked[call.id] = asked.get(call.id, 0) + 1
    return asked


def check_answers(
    events: Sequence[Event], invocation_id: str, content: types.Content
) -> list[tuple[str, int]]:
    """Refuses a message that does not answer open interrupts of the invocation, once each.

    An interrupt (a long-running call, ``adk_request_confirmation``,
    ``adk_request_input``) takes one answer per time it was asked: with a
    reused id (a loop asking again) each pause takes its own answer, and a
    second answer to the same pause is refused. Nothing is written by this check.

    Two answers read against the same session both pass it; the claims it
    returns, written with the run that carries the answer (``answer_claims``),
    let only one of them in.

    Args:
        events: The session's events, oldest first.
        invocation_id: The invocation the message continues.
        content: The message: function responses only.

    Returns:
        One claim per pause the message closes (interim responses close none):
        the call id and which time it was asked (1 for the first).

    Raises:
        durable_adk.errors.NotFound: The session has no such invocation.
        durable_adk.errors.InvalidArgument: An unknown call id, a name that
            is not the call's, or one call answered twice in the message.
        durable_adk.errors.Conflict: The call's interrupt is not open: it was
            already answered.
    """
    mine = [e for e in live_events(events) if e.invocation_id == invocation_id]
    if not mine:
        raise errors.NotFound(f"the session has no invocation {invocation_id!r}")
    calls = {c.id: c.name for e in mine for c in e.get_function_calls() if c.id}
    pending = set(classify(events, invocation_id, root_agent_name="-").pending_long_running)
    seen: set[str] = set()
    # An interim response (a long-running tool's progress) leaves the pause
    # open: it takes no claim, and the final answer takes the pause's.
    final: list[str] = []
    for part in content.parts or ():
        answer = part.function_response
        if answer is None or not answer.id:
            raise errors.InvalidArgument("each part must be a function response with the call's id")
        if answer.id in seen:
            raise errors.InvalidArgument(f"call {answer.id!r} is answered twice")
        seen.add(answer.id)
        if answer.id not in calls:
            raise errors.InvalidArgument(
                f"invocation {invocation_id!r} made no call {answer.id!r}"
                + (f"; its open calls: {', '.join(sorted(pending))}" if pending else "")
            )
        if calls[answer.id] != answer.name:
            raise errors.InvalidArgument(
                f"call {answer.id!r} is {calls[answer.id]!r}, not {answer.name!r}"
            )
        if answer.id not in pending:
            raise errors.Conflict(f"call {answer.id!r} was already answered (nothing changed)")
        if not (answer.response or {}).get(INTERIM_KEY):
            final.append(answer.id)
    asked = asks_of(events, invocation_id)
    return [(call_id, asked.get(call_id, 1)) for call_id in sorted(final)]


def replay_blockers(events: Sequence[Event], found: Classification) -> frozenset[str]:
    """Ids of the events that keep ADK from replaying ``found``'s unanswered calls.

    ADK replays an unanswered call on re-drive only when the call is the last
    event of its agent's branch (``flows/llm_flows/core/_resume.py``,
    ``decide_step_resume``); any later event of the branch that does not
    answer it makes ADK pause instead, writing the agent's end marker with no
    answer (docs/adk-notes.md, section 6). The events that stand in the way
    after a transient fault are content-less ones by the call's author on the
    call's branch: the error event ADK stores when the tool raised, and end
    markers a re-drive wrote while it skipped the call. Abort seals, events
    with content or state changes, other agents' and other branches' events
    are never returned, nor anything for an abandoned call.

    Args:
        events: The whole session's events, oldest first.
        found: The invocation's classification (``classify`` of ``events``).

    Returns:
        Event ids to leave out of what ADK sees for the re-drive (the log itself
        is not changed).
    """
    replayable = {c for c, _ in found.unanswered_calls} - set(found.abandoned_calls)
    if not replayable:
        return frozenset()
    mine = [
        e for e in live_events(events) if e.invocation_id == found.invocation_id and not e.partial
    ]
    blockers: set[str] = set()
    for index, event in enumerate(mine):
        if not any(c.id in replayable for c in event.get_function_calls()):
            continue
        for later in mine[index + 1 :]:
            if (
                later.author == event.author
                and later.branch == event.branch
                and not _has_content(later)
                and not later.actions.state_delta
                and not later.actions.agent_state
                and later.error_code != ABORT_ERROR_CODE
                and (later.error_code or later.actions.end_of_agent)
            ):
                blockers.add(later.id)
    return frozenset(blockers)
