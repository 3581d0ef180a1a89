"""Workflow roots: node kinds, NODE_INFLIGHT from node checkpoints, journaled nodes, guards."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.context import Context
from google.adk.apps import App, ResumabilityConfig
from google.adk.events.event import Event, NodeInfo
from google.adk.events.event_actions import EventActions
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.workflow import FunctionNode, JoinNode, Workflow
from google.genai import types

from durable_adk import errors, idempotent, journaled, journaled_node
from durable_adk.adk.eventlog.classify import NodeKind, OrphanClass, classify
from durable_adk.adk.tools.workflow_nodes import (
    GUARD_MARK,
    guard_function_nodes,
    kind_of,
    node_kinds,
)
from durable_adk.testing.scripted_model import Call, Say, ScriptedModel

INV = "inv-1"


def user(text: str = "go") -> Event:
    return Event(
        invocation_id=INV,
        author="user",
        content=types.Content(role="user", parts=[types.Part(text=text)]),
    )


def checkpoint(workflow: str, **statuses: int) -> Event:
    nodes = {name: {"status": status, "interrupts": []} for name, status in statuses.items()}
    return Event(
        invocation_id=INV, author=workflow, actions=EventActions(agent_state={"nodes": nodes})
    )


def output(workflow: str, node: str, value: Any) -> Event:
    return Event(
        invocation_id=INV,
        author=workflow,
        output=value,
        node_info=NodeInfo(path=f"{workflow}@1/{node}@1"),
    )


def end(author: str) -> Event:
    return Event(invocation_id=INV, author=author, actions=EventActions(end_of_agent=True))


RUNNING, COMPLETED = 2, 3
KINDS = {
    "flow/intake": NodeKind.RERUNNABLE,
    "flow/bill": NodeKind.OPAQUE,
    "flow/clerk": NodeKind.AGENT,
    "flow/inner": NodeKind.WORKFLOW,
    "inner/step": NodeKind.OPAQUE,
}


def test_a_plain_function_node_left_running_is_node_inflight_and_unsafe() -> None:
    events = [user(), checkpoint("flow", intake=COMPLETED, bill=RUNNING)]
    found = classify(events, INV, root_agent_name="flow", nodes=KINDS)
    assert found.cls is OrphanClass.NODE_INFLIGHT
    assert found.inflight_nodes == ("flow/bill",) and found.unsafe_nodes == ("flow/bill",)
    assert "flow/bill" in found.reason
    # Without node kinds (not a Workflow root) the checkpoints are not read.
    assert classify(events, INV, root_agent_name="flow").cls is OrphanClass.MODEL_INFLIGHT


def test_a_rerunnable_node_in_flight_is_safe_and_an_unknown_node_is_not() -> None:
    events = [user(), checkpoint("flow", intake=RUNNING)]
    found = classify(events, INV, root_agent_name="flow", nodes=KINDS)
    assert (found.cls, found.inflight_nodes, found.unsafe_nodes) == (
        OrphanClass.NODE_INFLIGHT,
        ("flow/intake",),
        (),
    )
    unknown = classify(
        [user(), checkpoint("flow", mystery=RUNNING)], INV, root_agent_name="flow", nodes=KINDS
    )
    assert unknown.unsafe_nodes == ("flow/mystery",)


def test_a_node_whose_output_is_stored_is_finished_even_without_its_checkpoint() -> None:
    events = [user(), checkpoint("flow", bill=RUNNING), output("flow", "bill", {"ok": True})]
    found = classify(events, INV, root_agent_name="flow", nodes=KINDS)
    assert found.cls is OrphanClass.MODEL_INFLIGHT and found.inflight_nodes == ()
    done = [*events, checkpoint("flow", bill=COMPLETED), end("flow")]
    assert classify(done, INV, root_agent_name="flow", nodes=KINDS).cls is OrphanClass.ACTUALLY_DONE


def test_agent_and_workflow_nodes_are_judged_by_their_own_events() -> None:
    events = [user(), checkpoint("flow", clerk=RUNNING, inner=RUNNING)]
    found = classify(events, INV, root_agent_name="flow", nodes=KINDS)
    assert found.cls is OrphanClass.MODEL_INFLIGHT
    nested = [*events, checkpoint("inner", step=RUNNING)]
    found = classify(nested, INV, root_agent_name="flow", nodes=KINDS)
    assert found.cls is OrphanClass.NODE_INFLIGHT and found.unsafe_nodes == ("inner/step",)


def test_a_node_in_flight_outranks_the_workflows_end_marker_but_not_an_unanswered_call() -> None:
    call = Event(
        invocation_id=INV,
        author="clerk",
        content=types.Content(
            role="model",
            parts=[types.Part(function_call=types.FunctionCall(id="c1", name="ship", args={}))],
        ),
    )
    events = [user(), checkpoint("flow", bill=RUNNING), end("flow")]
    assert classify(events, INV, root_agent_name="flow", nodes=KINDS).cls is (
        OrphanClass.NODE_INFLIGHT
    )
    found = classify([*events[:2], call, end("flow")], INV, root_agent_name="flow", nodes=KINDS)
    assert found.cls is OrphanClass.TOOL_UNANSWERED


# ------------------------------------------------------------------- real ADK runs


class Crash(BaseException):
    """Simulated process death: ADK stores nothing for a BaseException."""


CRASH = {"on": False}


def ship(order_id: str) -> dict[str, str]:
    """Ships an order."""
    if CRASH["on"]:
        raise Crash
    return {"shipped": order_id}


def bill(node_input: Any) -> dict[str, bool]:
    """Bills (a plain function node)."""
    return {"billed": True}


def resumable(root: Any) -> App:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = ResumabilityConfig(is_resumable=True)
    return App(name="app", root_agent=root, resumability_config=config)


async def run(app: App, sessions: InMemorySessionService, **kwargs: Any) -> list[Event]:
    runner = Runner(app=app, session_service=sessions)
    with contextlib.suppress(Crash):
        async for _ in runner.run_async(user_id="u", session_id="s", **kwargs):
            pass
    session = await sessions.get_session(app_name="app", user_id="u", session_id="s")
    assert session is not None
    return session.events


async def test_adk_writes_the_end_marker_over_a_lost_call_and_the_classifier_refuses_done() -> None:
    model = ScriptedModel({"clerk": [Call("ship", {"order_id": "O1"}, id="c1"), Say("shipped")]})
    flow = Workflow(
        name="flow", edges=[("START", LlmAgent(name="clerk", model=model, tools=[ship]), bill)]
    )
    sessions = InMemorySessionService()
    await sessions.create_session(app_name="app", user_id="u", session_id="s")
    message = types.Content(role="user", parts=[types.Part(text="ship O1")])
    CRASH["on"] = True
    try:
        events = await run(resumable(flow), sessions, invocation_id=INV, new_message=message)
    finally:
        CRASH["on"] = False
    kinds = node_kinds(flow)
    assert classify(events, INV, root_agent_name="flow", nodes=kinds).cls is (
        OrphanClass.TOOL_UNANSWERED
    )
    # Plain ADK re-drive: the clerk writes its end marker with no answer, bill runs, the
    # workflow ends. The classifier still says the call is unanswered: never DONE.
    events = await run(resumable(flow), sessions, invocation_id=INV, new_message=message)
    assert not any(e.get_function_responses() for e in events)
    assert events[-1].author == "flow" and events[-1].actions.end_of_agent
    found = classify(events, INV, root_agent_name="flow", nodes=kinds)
    assert found.cls is OrphanClass.TOOL_UNANSWERED and found.unanswered_calls == (("c1", "ship"),)


# ------------------------------------------------------------------------ node kinds


def test_node_kinds_name_each_graph_node_by_workflow() -> None:
    @idempotent
    def intake(node_input: Any) -> Any:
        return node_input

    @journaled(key="ship:{order_id}")
    def ship_it(order_id: str, idempotency_key: str) -> dict[str, str]:
        return {"key": idempotency_key}

    @journaled_node(key="charge:{order_id}")
    def charge(order_id: str, idempotency_key: str) -> dict[str, str]:
        return {"key": idempotency_key}

    inner = Workflow(name="inner", edges=[("START", bill)])
    join = JoinNode(name="join")
    clerk = LlmAgent(name="clerk", model=ScriptedModel([Say("ok")]))
    flow = Workflow(
        name="flow",
        edges=[("START", intake, clerk, ship_it, charge, inner), (charge, join), (inner, join)],
    )
    assert node_kinds(flow) == {
        "flow/intake": NodeKind.RERUNNABLE,
        "flow/clerk": NodeKind.AGENT,
        "flow/ship_it": NodeKind.RERUNNABLE,  # a journaled tool, run as a tool node
        "flow/charge": NodeKind.RERUNNABLE,
        "flow/inner": NodeKind.WORKFLOW,
        "flow/join": NodeKind.RERUNNABLE,
        "inner/bill": NodeKind.OPAQUE,
    }
    assert node_kinds(clerk) is None  # not a Workflow root: no checkpoints to read


def test_a_node_with_adks_retry_config_counts_as_rerunnable_and_is_not_guarded() -> None:
    from google.adk.workflow import RetryConfig

    node = FunctionNode(func=bill, name="retried", retry_config=RetryConfig(max_attempts=3))
    assert kind_of(node) is NodeKind.RERUNNABLE
    assert guard_function_nodes(Workflow(name="flow", edges=[("START", node)])) == []


def test_idempotent_marks_a_function_node_itself() -> None:
    node = FunctionNode(func=lambda node_input: node_input, name="echo")
    assert kind_of(node) is NodeKind.OPAQUE
    assert idempotent(node) is node
    assert kind_of(node) is NodeKind.RERUNNABLE


# --------------------------------------------------------------------- journaled_node


def test_journaled_node_refuses_a_function_without_a_key_parameter_or_with_unknown_fields() -> None:
    with pytest.raises(errors.InvalidArgument, match="idempotency_key"):
        journaled_node(key="charge:{order_id}")(lambda order_id: None)

    def charge(order_id: str, idempotency_key: str) -> None: ...

    with pytest.raises(errors.InvalidArgument, match="unknown parameters"):
        journaled_node(key="charge:{customer}")(charge)
    with pytest.raises(errors.InvalidArgument, match="parameter name"):
        journaled_node(key="charge:{order.id}")(charge)


@pytest.fixture
def acts() -> Iterator[list[tuple[str, str]]]:
    yield []


async def test_journaled_node_outside_a_durable_run_passes_its_key_and_outputs_the_result(
    acts: list[tuple[str, str]],
) -> None:
    def intake(ctx: Context) -> dict[str, str]:
        ctx.state["order_id"] = "O1"
        return {"order_id": "O1"}

    @journaled_node(key="charge:{order_id}")
    async def charge(order_id: str, node_input: Any, idempotency_key: str) -> dict[str, str]:
        acts.append((order_id, idempotency_key))
        return {"charged": order_id}

    assert charge.name == "charge" and kind_of(charge) is NodeKind.RERUNNABLE
    flow = Workflow(name="flow", edges=[("START", intake, charge)])
    sessions = InMemorySessionService()
    await sessions.create_session(app_name="app", user_id="u", session_id="s")
    events = await run(
        resumable(flow),
        sessions,
        new_message=types.Content(role="user", parts=[types.Part(text="go")]),
    )
    assert acts == [("O1", "charge:O1")]
    assert [e.output for e in events if e.output is not None][-1] == {"charged": "O1"}


async def test_journaled_node_without_its_key_argument_fails_clearly_and_acts_not() -> None:
    called: list[str] = []

    @journaled_node(key="charge:{order_id}")
    def charge(order_id: str = "", idempotency_key: str = "") -> None:
        called.append(idempotency_key)

    with pytest.raises(errors.InvalidArgument, match="missing argument"):
        await charge._func(ctx=None)
    assert called == []


# ---------------------------------------------------------------------------- guards


def test_guards_go_on_plain_function_nodes_only_and_once() -> None:
    @idempotent
    def intake(node_input: Any) -> Any:
        return node_input

    def steps(node_input: Any) -> Iterator[dict[str, int]]:
        yield {"step": 1}

    plain = FunctionNode(func=bill)
    flow = Workflow(name="flow", edges=[("START", intake, plain, steps)])
    assert guard_function_nodes(flow) == ["flow/bill"]
    assert hasattr(plain._func, GUARD_MARK)
    assert guard_function_nodes(flow) == []  # already guarded
    assert kind_of(plain) is NodeKind.OPAQUE  # a guard parks it; it does not make it safe


async def test_a_guarded_node_runs_as_before_outside_a_durable_run() -> None:
    seen: list[Any] = []

    def record(node_input: Any) -> dict[str, bool]:
        seen.append(node_input)
        return {"recorded": True}

    flow = Workflow(name="flow", edges=[("START", record)])
    guard_function_nodes(flow)
    sessions = InMemorySessionService()
    await sessions.create_session(app_name="app", user_id="u", session_id="s")
    events = await run(
        resumable(flow),
        sessions,
        new_message=types.Content(role="user", parts=[types.Part(text="hi")]),
    )
    assert len(seen) == 1
    assert [e.output for e in events if e.output is not None] == [{"recorded": True}]
