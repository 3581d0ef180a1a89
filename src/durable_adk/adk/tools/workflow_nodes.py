"""Workflow graph nodes: what each node is, journaled nodes, and lost calls answered first.

ADK 2.x's ``Workflow`` runs a graph of nodes: agents, functions (``FunctionNode``),
tools, nested workflows. What recovery may do with a node a crash left in flight
depends on its kind (docs/adk-notes.md, section 11):

* :func:`node_kinds` names the kind of every graph node of an app, keyed
  ``workflow/node``, for the classifier (:class:`~durable_adk.adk.eventlog.classify.NodeKind`):
  a FunctionNode or tool node is RERUNNABLE when its function or tool is
  journaled or marked :func:`~durable_adk.adk.shapes.marks.idempotent`, or when it
  has ADK's ``retry_config`` (ADK itself runs it again after a failure part-way),
  else OPAQUE (parked when in flight: it may have acted and no event says so).
* :func:`journaled_node` makes a function a FunctionNode whose effect goes
  through the journal, with the key rules of :func:`~durable_adk.adk.tools.journaling.journaled`
  tools: the effect happens once across crashes, under the run's fence.
* :func:`guard_function_nodes` makes every other FunctionNode of the app
  record that it started before its function runs (a journal intent keyed by
  the invocation and the node's path), so a crash in the middle of it parks
  the run ("node in flight") instead of running it again. The workflow's own
  RUNNING checkpoint cannot tell: ADK starts the node's task before the
  checkpoint is stored, so a node may act and die with no trace in the log.
* :func:`answer_lost_calls` answers an agent node's unanswered call before ADK
  re-enters the node. ADK does not replay such a call on a Workflow root: the
  re-driven workflow writes a checkpoint after the call, the agent then sees the
  call as "not last", pauses, and writes its end marker with no answer
  (docs/adk-notes.md, section 6). The answer is made by ADK's own function-call
  code (plugins and callbacks included), so a journaled tool answers from its
  journal and an idempotent one runs again.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from google.adk.agents import BaseAgent, LlmAgent
from google.adk.agents.context import Context
from google.adk.agents.readonly_context import ReadonlyContext
from google.adk.agents.run_config import RunConfig
from google.adk.events.event import Event
from google.adk.events.request_input import RequestInput
from google.adk.flows.llm_flows import functions as adk_functions
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.sessions.session import Session
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.adk.workflow import FunctionNode, JoinNode, Workflow

from durable_adk import errors
from durable_adk.adk.eventlog.classify import NodeKind, live_events
from durable_adk.adk.shapes import agent_tree
from durable_adk.adk.shapes.marks import is_idempotent
from durable_adk.adk.tools.journaling import (
    KEY_PARAM,
    as_async,
    attempt_in,
    effect_parameters,
    format_key,
    is_journaled,
    present_as,
    template_fields,
)
from durable_adk.effect_tables.journal import OutcomeUnknown
from durable_adk.fencing.fence import current_fence

GUARD_MARK = "__durable_adk_node_guard__"

CTX_PARAM = "ctx"
"""The parameter through which a journaled node gets ADK's node context."""


def _function_of(node: object) -> object | None:
    """The Python function a FunctionNode runs (ADK keeps it in a private attribute)."""
    return getattr(node, "_func", None)


def _is_safe(item: object) -> bool:
    return bool(item is not None and (is_journaled(item) or is_idempotent(item)))


def kind_of(node: object) -> NodeKind:
    """The kind of one graph node (see :class:`~durable_adk.adk.eventlog.classify.NodeKind`)."""
    if isinstance(node, Workflow):
        return NodeKind.WORKFLOW
    if isinstance(node, BaseAgent) or isinstance(getattr(node, "node", None), BaseAgent):
        return NodeKind.AGENT  # an agent, or a parallel worker running one
    if isinstance(node, JoinNode):
        return NodeKind.RERUNNABLE  # merges its predecessors' outputs, acts on nothing
    if _is_safe(node) or _is_safe(_function_of(node)) or _is_safe(getattr(node, "tool", None)):
        return NodeKind.RERUNNABLE
    if getattr(node, "retry_config", None) is not None:
        # ADK runs such a node again after it failed part-way: its author declared that safe.
        return NodeKind.RERUNNABLE
    return NodeKind.OPAQUE


def node_kinds(root: object) -> dict[str, NodeKind] | None:
    """Each graph node's kind, keyed ``workflow/node``, for every Workflow in the tree.

    Returns:
        The map, or None when ``root`` is not a Workflow (the classifier then
        reads no node checkpoints).
    """
    if not isinstance(root, Workflow):
        return None
    kinds: dict[str, NodeKind] = {}
    for found in agent_tree.agents(root):
        workflow = found.item
        if isinstance(workflow, Workflow) and workflow.graph is not None:
            for node in workflow._iter_static_children():
                kinds[f"{workflow.name}/{node.name}"] = kind_of(node)
    return kinds


def journaled_node(
    key: str,
    *,
    lookup: Callable[[str], Any] | None = None,
    name: str | None = None,
    rerun_on_resume: bool = False,
    require_confirmation: bool = False,
) -> Callable[[Callable[..., Any]], FunctionNode]:
    """Makes a function a Workflow FunctionNode whose effect happens at most once.

    The function's parameters are bound as ADK binds a FunctionNode's (from
    session state, ``node_input`` from the predecessor's output); ``key`` is a
    ``str.format`` template over them, the effect's business identity. Inside
    a durable run the effect goes through the journal under the run's fence
    (a done entry answers a re-run, an unfinished intent is looked up or
    parks the run); outside one the function is simply called with the key.
    The node's output is the function's result. The recovery sweeper re-runs
    such a node when a crash left it in flight.

    Args:
        key: A template such as ``"charge:{order_id}"``.
        lookup: Finds the effect by idempotency key in the outside system (its
            record, or None); omit when the system offers none.
        name: The node's name (default: the function's).
        rerun_on_resume: Passed to ``FunctionNode``.
        require_confirmation: The node asks a person to approve before it
            acts (ADK's confirmation request; the run is PAUSED until the
            answer). Implies ``rerun_on_resume``.

    Raises:
        durable_adk.errors.InvalidArgument: The function has no
            ``idempotency_key`` parameter, or the template names a parameter
            it does not have.
    """
    fields = template_fields(key)

    def decorate(fn: Callable[..., Any]) -> FunctionNode:
        params = effect_parameters(fn, fields)
        node_name = name or fn.__name__
        act_fn = as_async(fn)
        find = as_async(lookup) if lookup is not None else None
        passes_context = CTX_PARAM in params

        async def run(ctx: Context, **kwargs: Any) -> Any:
            effect_key = format_key(key, kwargs, node_name)
            extra = {CTX_PARAM: ctx} if passes_context else {}

            async def act(idempotency_key: str) -> Any:
                return await act_fn(**kwargs, **extra, **{KEY_PARAM: idempotency_key})

            journal, attempt = attempt_in(ctx.get_invocation_context(), node_name, None, key)
            if journal is None:
                return await act(effect_key)
            return await journal.execute(effect_key, attempt, act, find, fence=current_fence())

        present_as(run, fn, name=node_name, key=key, context=(CTX_PARAM, Context))
        return FunctionNode(
            func=run,
            name=node_name,
            rerun_on_resume=rerun_on_resume or require_confirmation,
            require_confirmation=require_confirmation,
        )

    return decorate


class NodeInFlight(OutcomeUnknown):
    """A Workflow node started, did not finish, and may have acted: the run needs a person."""


# A node's output types that the journal keeps as what they are (JSON would
# lose the type: a RequestInput replayed as its text would not ask again).
_OUTPUT_TYPES: dict[str, type[Event] | type[RequestInput]] = {
    "Event": Event,
    "RequestInput": RequestInput,
}
_OUTPUT_TAG = "__durable_adk_node_output__"


def _digest(value: Mapping[str, Any]) -> str:
    """A short stable digest of a node's resume inputs."""
    text = json.dumps(value, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _encode_output(value: Any) -> Any:
    """A node's output as the journal stores it (an Event or RequestInput keeps its type)."""
    for name, kind in _OUTPUT_TYPES.items():
        if isinstance(value, kind):
            return {_OUTPUT_TAG: name, "value": value.model_dump(mode="json", by_alias=True)}
    return value


def _decode_output(value: Any) -> Any:
    """The inverse of :func:`_encode_output`."""
    if isinstance(value, dict) and set(value) == {_OUTPUT_TAG, "value"}:
        return _OUTPUT_TYPES[value[_OUTPUT_TAG]].model_validate(value["value"])
    return value


def _guard(node: FunctionNode, label: str) -> None:
    """Wraps one FunctionNode's function in its start record (see :func:`guard_function_nodes`)."""
    original = node._func
    context_name = node._context_param_name
    wants_context = context_name in node._sig.parameters
    call = as_async(original)

    async def guarded(**kwargs: Any) -> Any:
        ctx = kwargs[context_name] if wants_context else kwargs.pop(context_name)
        journal, attempt = attempt_in(ctx.get_invocation_context(), f"node:{label}")
        if journal is None:
            return await call(**kwargs)
        key = f"node:{ctx.get_invocation_context().invocation_id}:{ctx.node_path}"
        if ctx.resume_inputs:
            # A node re-run with a person's answers (rerun_on_resume) is a new
            # execution of it, not a repeat of the one that asked.
            key += ":" + _digest(ctx.resume_inputs)

        async def act(_key: str) -> Any:
            return _encode_output(await call(**kwargs))

        try:
            return _decode_output(
                await journal.execute(key, attempt, act, None, fence=current_fence())
            )
        except OutcomeUnknown as exc:
            raise NodeInFlight(
                f"node in flight: {label} ({ctx.node_path}) started and did not finish, so it "
                "may have acted; it is neither idempotent nor journaled and is not run again "
                "(mark its function @idempotent, or make it a journaled_node)"
            ) from exc

    setattr(guarded, GUARD_MARK, label)
    guarded.__name__ = getattr(original, "__name__", label)
    node._func = guarded
    node._unwrapped_func = guarded
    if not wants_context:  # ADK passes the node context only to a declared parameter
        context = inspect.Parameter(context_name, inspect.Parameter.KEYWORD_ONLY)
        node._sig = node._sig.replace(parameters=[*node._sig.parameters.values(), context])


def guard_function_nodes(root: object) -> list[str]:
    """Gives every OPAQUE FunctionNode of the app's Workflows a start record in the journal.

    A guarded node's function runs inside the journal under the key
    ``node:<invocation>:<node path>`` with no lookup: a re-run after it
    finished returns its stored result (the output event was lost); a re-run
    after it started and died raises :class:`NodeInFlight`, which parks the
    run with that reason. Outside a durable run the function is just called.
    Generator functions (which yield events as they go) and nodes already
    guarded are left as they are; journaled and idempotent nodes need no guard.

    Returns:
        The ``workflow/node`` names guarded now.
    """
    guarded: list[str] = []
    for found in agent_tree.agents(root):
        workflow = found.item
        if not (isinstance(workflow, Workflow) and workflow.graph is not None):
            continue
        for node in workflow._iter_static_children():
            if not isinstance(node, FunctionNode) or kind_of(node) is not NodeKind.OPAQUE:
                continue
            function = node._func
            if (
                hasattr(function, GUARD_MARK)
                or inspect.isasyncgenfunction(node._unwrapped_func)
                or inspect.isgeneratorfunction(node._unwrapped_func)
            ):
                continue
            label = f"{workflow.name}/{node.name}"
            _guard(node, label)
            guarded.append(label)
    return guarded


_CONFIRMATION = "adk_request_confirmation"


def _confirmations(mine: Sequence[Event]) -> dict[str, ToolConfirmation]:
    """The user's decisions on confirmation requests, keyed by the call each one guards.

    A call reopened by its confirmation (the tool asked, the user answered) is run
    with that decision, as ADK runs it, rather than asking again.
    """
    guarded: dict[str, str] = {}
    for event in mine:
        for call in event.get_function_calls():
            original = (call.args or {}).get("originalFunctionCall")
            if call.name == _CONFIRMATION and call.id and isinstance(original, dict):
                guarded[call.id] = str(original.get("id"))
    decisions: dict[str, ToolConfirmation] = {}
    for event in mine:
        if event.author != "user":
            continue
        for response in event.get_function_responses():
            if response.id in guarded:
                decisions[guarded[response.id]] = ToolConfirmation.from_response_dict(
                    response.response or {}
                )
    return decisions


def _agent_named(root: object, name: str) -> LlmAgent | None:
    for found in agent_tree.agents(root):
        if isinstance(found.item, LlmAgent) and found.item.name == name:
            return found.item
    return None


async def answer_lost_calls(
    adk: Runner,
    sessions: BaseSessionService,
    session: Session,
    *,
    invocation_id: str,
    call_ids: Sequence[str],
    run_config: RunConfig,
) -> list[Event]:
    """Runs the unanswered calls of an invocation and stores their function responses.

    Each call is run by ADK's own function-call code in a context of the
    agent that made it (its tools, its callbacks, the app's plugins), on the
    call's branch (with the user's decision when the call was reopened by its
    confirmation), and the response event is appended with the call's node
    path and the run's metadata, as ADK would have stored it. A journaled tool
    answers from its journal (or looks its effect up); an idempotent one runs
    again. Errors propagate: :class:`~durable_adk.effect_tables.journal.OutcomeUnknown`
    parks the run, :class:`~durable_adk.errors.Fenced` stops it.

    Args:
        adk: The app's ADK runner (builds the invocation context).
        sessions: The session service to append to.
        session: The session, as just read.
        invocation_id: The invocation that made the calls.
        call_ids: The unanswered calls to answer.
        run_config: The drive's run config (its metadata stamps the events).

    Returns:
        The stored response events.

    Raises:
        durable_adk.errors.InvalidArgument: A call or its agent is not found;
            nothing was run.
    """
    wanted = set(call_ids)
    mine = [e for e in live_events(session.events) if e.invocation_id == invocation_id]
    plan: list[tuple[Event, LlmAgent]] = []
    for event in mine:
        if not any(c.id in wanted for c in event.get_function_calls()):
            continue
        agent = _agent_named(adk.agent, event.author)
        if agent is None:
            raise errors.InvalidArgument(
                f"no LlmAgent named {event.author!r} in the app answers call(s) of event {event.id}"
            )
        plan.append((event, agent))
    found = {c.id for event, _ in plan for c in event.get_function_calls()}
    missing = wanted - found
    if missing:
        raise errors.InvalidArgument(f"calls not found in invocation {invocation_id}: {missing}")
    stored: list[Event] = []
    for event, agent in plan:
        context = adk._new_invocation_context(
            session, invocation_id=invocation_id, run_config=run_config
        ).model_copy(update={"agent": agent, "branch": event.branch})
        tools = {tool.name: tool for tool in await agent.canonical_tools(ReadonlyContext(context))}
        calls = [c for c in event.get_function_calls() if c.id in wanted]
        response = await adk_functions.handle_function_call_list_async(
            context, calls, tools, tool_confirmation_dict=_confirmations(mine) or None
        )
        if response is None:
            continue  # long-running calls only: nothing to store (the classifier never asks)
        response.invocation_id = invocation_id
        response.node_info = event.node_info.model_copy()
        metadata: Mapping[str, Any] = run_config.custom_metadata or {}
        response.custom_metadata = {**metadata, **(response.custom_metadata or {})}
        stored.append(await sessions.append_event(session, response))
    return stored
