"""Re-checks the facts in docs/adk-notes.md against the installed ADK.

Run from the repository root (offline; uses ScriptedModel, no LLM):

    PYTHONPATH=src .venv/bin/python docs/adk-notes/verify_adk_facts.py

Every check is an assert; the script prints one line per verified fact and
exits non-zero on the first fact that no longer holds (e.g. after an upgrade).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import warnings
from collections.abc import AsyncGenerator
from typing import Any, Literal

from google.adk.agents import BaseAgent, LlmAgent, SequentialAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.agents.run_config import RunConfig
from google.adk.apps import App, ResumabilityConfig
from google.adk.events import Event
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService, Session
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.genai import types

from durable_adk.testing.scripted_model import Call, Say, ScriptedModel

warnings.filterwarnings("ignore")
logging.getLogger("google_adk").setLevel(logging.CRITICAL)


class Crash(BaseException):
    """Simulated process death (BaseException: ADK writes no error event)."""


CRASH = {"on": False}
TOOL_CALL_IDS: list[str] = []


def charge(amount: int, tool_context: Any) -> dict[str, bool]:
    """Charges money."""
    TOOL_CALL_IDS.append(tool_context.function_call_id)
    if CRASH["on"]:
        raise Crash
    return {"ok": True}


def approve(amount: int) -> dict[str, str]:
    """Asks a human (long-running)."""
    return {"status": "pending"}


class Echo(BaseAgent):
    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        yield Event(
            invocation_id=ctx.invocation_id,
            author=self.name,
            content=types.Content(role="model", parts=[types.Part(text="echo")]),
        )


def app(root: Any, resumable: bool) -> App:
    cfg = ResumabilityConfig(is_resumable=resumable)
    return App(name="app", root_agent=root, resumability_config=cfg)


def llm_root(resumable: bool) -> App:
    model = ScriptedModel([Call("charge", {"amount": 5}), Say("charged")] * 3)
    return app(LlmAgent(name="payer", model=model, tools=[charge]), resumable)


def seq_root(resumable: bool) -> App:
    m = ScriptedModel({"a": [Say("A")] * 3, "b": [Say("B")] * 3})
    return app(
        SequentialAgent(
            name="pipe", sub_agents=[LlmAgent(name="a", model=m), LlmAgent(name="b", model=m)]
        ),
        resumable,
    )


def msg(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


async def fresh() -> InMemorySessionService:
    ss = InMemorySessionService()
    await ss.create_session(app_name="app", user_id="u", session_id="s")
    return ss


async def drive(
    a: App, ss: InMemorySessionService, runner_cls: type[Runner] = Runner, **kw: Any
) -> None:
    async for _ in runner_cls(app=a, session_service=ss).run_async(
        user_id="u", session_id="s", **kw
    ):
        pass


async def events(ss: InMemorySessionService) -> list[Event]:
    s = await ss.get_session(app_name="app", user_id="u", session_id="s")
    assert s is not None
    return s.events


def ok(fact: str) -> None:
    print(f"OK  {fact}")


async def q1() -> None:
    for res in (False, True):
        ss = await fresh()
        await drive(llm_root(res), ss, invocation_id="inv-1", new_message=msg("pay"))
        evs = await events(ss)
        assert {e.invocation_id for e in evs} == {"inv-1"}
        n = len(evs)
        await drive(llm_root(res), ss, invocation_id="inv-1", new_message=msg("pay"))
        evs = await events(ss)
        assert sum(e.author == "user" for e in evs) == 1 and len(evs) > n
    ok(
        "Q1 LlmAgent root: caller id used for a new invocation; re-driving a finished "
        "id adds no user event but runs the agent again (resumable on and off)"
    )

    ss = await fresh()
    try:
        await drive(seq_root(True), ss, invocation_id="inv-1", new_message=msg("go"))
        raise AssertionError("expected ValueError")
    except ValueError as e:
        assert "no events to resume" in str(e)
    await drive(seq_root(True), ss, new_message=msg("warm-up"))
    await drive(seq_root(True), ss, invocation_id="inv-1", new_message=msg("go"))
    n = len(await events(ss))
    await drive(seq_root(True), ss, invocation_id="inv-1", new_message=msg("go"))
    await drive(seq_root(True), ss, invocation_id="inv-1")
    assert len(await events(ss)) == n
    ok(
        "Q1 non-LlmAgent root, resumable: new caller id fails on an empty session, "
        "works otherwise; finished id is a no-op"
    )

    ss = await fresh()
    await drive(seq_root(False), ss, invocation_id="inv-1", new_message=msg("go"))
    n = len(await events(ss))
    await drive(seq_root(False), ss, invocation_id="inv-1", new_message=msg("go"))
    evs = await events(ss)
    assert len(evs) == n + 2 and sum(e.author == "user" for e in evs) == 1
    try:
        await drive(seq_root(False), ss, invocation_id="inv-1")
        raise AssertionError("expected ValueError")
    except ValueError as e:
        assert "resumable app" in str(e)
    ok(
        "Q1 non-LlmAgent root, not resumable: same id re-runs every sub-agent (no "
        "duplicate user event); no message -> ValueError"
    )

    ss = await fresh()
    await drive(app(Echo(name="echo"), True), ss, new_message=msg("x"))
    inv = (await events(ss))[0].invocation_id
    await drive(app(Echo(name="echo"), True), ss, invocation_id=inv)
    assert [e.author for e in await events(ss)] == ["user", "echo", "echo"]
    ok("Q1 custom BaseAgent root writes no end_of_agent, so a resumable re-drive runs it again")

    next_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("next_id", default=None)

    class IdRunner(Runner):
        def _new_invocation_context(self, session: Session, **kw: Any) -> InvocationContext:
            kw["invocation_id"] = kw.get("invocation_id") or next_id.get()
            return super()._new_invocation_context(session, **kw)

    for make in (seq_root, llm_root):
        ss = await fresh()
        next_id.set("chosen-1")
        await drive(make(True), ss, IdRunner, new_message=msg("go"))
        assert {e.invocation_id for e in await events(ss)} == {"chosen-1"}
    ok("Q1 overriding Runner._new_invocation_context sets the id of new invocations on both paths")


async def q2_q3_q4_q5() -> None:
    ss = await fresh()
    await drive(llm_root(False), ss, new_message=msg("pay"))
    evs = await events(ss)
    assert not any(e.actions.end_of_agent or e.actions.agent_state for e in evs)
    fc, fr = evs[1], evs[2]
    assert fc.author == fr.author == "payer" and fc.content and fr.content
    assert (fc.content.role, fr.content.role) == ("model", "user")
    assert fc.get_function_calls()[0].id == fr.get_function_responses()[0].id
    ok(
        "Q3 tool call: FC event (author=agent, role=model) then FR event (author=agent, "
        "role=user), same id"
    )
    ok("Q2 not resumable: no end_of_agent/agent_state events at all")

    ss = await fresh()
    await drive(llm_root(True), ss, new_message=msg("pay"))
    last = (await events(ss))[-1]
    assert last.actions.end_of_agent and last.author == "payer" and last.content is None
    ss = await fresh()
    await drive(seq_root(True), ss, new_message=msg("go"))
    marks = [
        (e.author, e.actions.end_of_agent, e.actions.agent_state)
        for e in await events(ss)
        if e.content is None
    ]
    assert marks == [
        ("pipe", None, {"current_sub_agent": "a"}),
        ("a", True, None),
        ("pipe", None, {"current_sub_agent": "b"}),
        ("b", True, None),
        ("pipe", True, None),
    ]
    ok(
        "Q2 resumable: LlmAgent root ends with a content-less end_of_agent by the root; "
        "sequential writes agent_state checkpoints and end_of_agent per agent, root "
        "last"
    )

    m = ScriptedModel([Call("approve", {"amount": 1}, id="lro-1"), Say("waiting"), Say("done")])
    a = app(LlmAgent(name="payer", model=m, tools=[LongRunningFunctionTool(approve)]), True)
    ss = await fresh()
    await drive(a, ss, new_message=msg("pay"), run_config=RunConfig(custom_metadata={"run": "R1"}))
    evs = await events(ss)
    assert evs[1].long_running_tool_ids == {"lro-1"}
    assert not any(e.actions.end_of_agent for e in evs)
    assert all(e.custom_metadata == {"run": "R1"} for e in evs)
    ok(
        "Q3 long-running call: FC event carries long_running_tool_ids; paused "
        "invocation has no end_of_agent"
    )
    ok("Q4 RunConfig.custom_metadata is stamped on every stored event, the user event included")

    answer = types.FunctionResponse(id="lro-1", name="approve", response={"status": "approved"})
    await drive(
        a,
        ss,
        invocation_id="bogus",
        new_message=types.Content(role="user", parts=[types.Part(function_response=answer)]),
    )
    evs = await events(ss)
    assert {e.invocation_id for e in evs} == {evs[0].invocation_id}
    assert evs[-1].actions.end_of_agent
    ok(
        "Q7 FunctionResponse(id, name) resumes the invocation that owns the call; a "
        "different invocation_id is ignored"
    )

    log: list[str] = []

    class LoggingSessions(InMemorySessionService):
        async def get_session(self, **kw: Any) -> Session | None:
            log.append("get_session")
            return await super().get_session(**kw)

        async def append_event(self, session: Session, event: Event) -> Event:
            log.append(f"append:{id(session)}")
            return await super().append_event(session, event)

    for make in (llm_root, seq_root):
        ls = LoggingSessions()
        await ls.create_session(app_name="app", user_id="u", session_id="s")
        log.clear()
        await drive(make(True), ls, new_message=msg("go"))
        assert log[0] == "get_session" and log.count("get_session") == 1
        assert len(set(log[1:])) == 1 and len(log) - 1 == len(await events(ls))
    ok(
        "Q5 one get_session per run_async, then one append_event per stored event on "
        "the same Session object"
    )


def seq_root_with_tool(resumable: bool) -> App:
    m = ScriptedModel(
        {"payer": [Call("charge", {"amount": 5}), Say("charged")], "after": [Say("after")]}
    )
    payer = LlmAgent(name="payer", model=m, tools=[charge])
    return app(
        SequentialAgent(name="pipe", sub_agents=[payer, LlmAgent(name="after", model=m)]), resumable
    )


async def q6() -> None:
    for make, res in ((llm_root, True), (seq_root_with_tool, True), (llm_root, False)):
        ss = await fresh()
        CRASH["on"], TOOL_CALL_IDS[:] = True, []
        with contextlib.suppress(Crash):
            await drive(make(res), ss, new_message=msg("pay"))
        inv = (await events(ss))[0].invocation_id
        CRASH["on"] = False
        again = None if res else msg("pay")  # a no-message re-drive needs resumability
        await drive(make(res), ss, invocation_id=inv, new_message=again)
        calls = [c.id for e in await events(ss) for c in e.get_function_calls()]
        if res:
            assert len(calls) == 1 and [calls[0], calls[0]] == TOOL_CALL_IDS
        else:
            assert len(calls) == 2 and calls == TOOL_CALL_IDS
    ok(
        "Q6 resumable: crash between FC and FR -> re-drive re-executes the tool with "
        "the same call id, no new model turn"
    )
    ok(
        "Q6 not resumable: the model is asked again and a new call id is used; the old "
        "FC stays orphaned"
    )


async def q6_workflow() -> None:
    from google.adk.workflow import Workflow

    def wf(resumable: bool) -> App:
        m = ScriptedModel({"a": [Say("A")], "b": [Call("charge", {"amount": 1}), Say("B")]})
        b = LlmAgent(name="b", model=m, tools=[charge])
        return app(
            Workflow(name="pipe", edges=[("START", LlmAgent(name="a", model=m), b)]), resumable
        )

    ss = await fresh()
    CRASH["on"], TOOL_CALL_IDS[:] = True, []
    with contextlib.suppress(Crash):
        await drive(wf(True), ss, invocation_id="inv-1", new_message=msg("go"))
    CRASH["on"] = False
    await drive(wf(True), ss, invocation_id="inv-1")
    evs = await events(ss)
    assert len(TOOL_CALL_IDS) == 1 and not any(e.get_function_responses() for e in evs)
    assert evs[-1].author == "pipe" and evs[-1].actions.end_of_agent
    ok(
        "Q6 Workflow root, resumable: the interrupted call is neither replayed nor "
        "answered, yet the workflow writes end_of_agent"
    )


async def q11_workflow_nodes() -> None:
    from google.adk.agents.context import Context
    from google.adk.workflow import FunctionNode, Workflow
    from google.adk.workflow._node_status import NodeStatus

    from durable_adk.adk.eventlog import classify
    from durable_adk.adk.tools import workflow_nodes

    seen: dict[str, Any] = {}

    def bill(ctx: Context) -> dict[str, bool]:
        own = [
            e.actions.agent_state["nodes"].get("bill", {}).get("status")
            for e in ctx.session.events
            if e.actions.agent_state and "nodes" in e.actions.agent_state
        ]
        seen["running_stored"] = NodeStatus.RUNNING.value in own
        return {"billed": True}

    node = FunctionNode(func=bill)
    for private in ("_func", "_unwrapped_func", "_sig", "_context_param_name"):
        assert hasattr(node, private), private
    flow = Workflow(name="flow", edges=[("START", node)])
    assert workflow_nodes.guard_function_nodes(flow) == ["flow/bill"]
    ss = await fresh()
    await drive(app(flow, True), ss, new_message=msg("go"))
    evs = await events(ss)
    assert NodeStatus.RUNNING.value == classify._NODE_RUNNING
    states = [e.actions.agent_state["nodes"] for e in evs if e.actions.agent_state]
    assert states[0] == {"bill": {"status": NodeStatus.RUNNING.value, "interrupts": []}}
    assert states[-1]["bill"]["status"] == NodeStatus.COMPLETED.value
    assert [e.output for e in evs if e.output is not None] == [{"billed": True}]
    assert [e.node_info.path for e in evs if e.output is not None] == ["flow@1/bill@1"]
    ok(
        "Q11 a Workflow checkpoints its nodes as agent_state={'nodes': {name: {'status': n}}} "
        "(RUNNING=2) by the workflow; a node's output event has path <workflow>@k/<node>@j; "
        "FunctionNode keeps _func/_unwrapped_func/_sig/_context_param_name, and a guarded "
        "node runs outside a durable run as before"
    )
    assert seen["running_stored"] is False
    ok("Q11 a FunctionNode runs before the workflow's RUNNING checkpoint of it is stored")


async def q11_lost_call_answered_first(include_contents: Literal["default", "none"]) -> list[str]:
    """Crash a Workflow agent node mid-call, answer the call first, re-drive; the tool runs."""
    from google.adk.workflow import Workflow

    from durable_adk.adk.tools.workflow_nodes import answer_lost_calls

    m = ScriptedModel({"b": [Call("charge", {"amount": 1}, id="c1"), Say("B")]})
    b = LlmAgent(name="b", model=m, tools=[charge], include_contents=include_contents)
    flow = Workflow(name="pipe", edges=[("START", b)])
    ss = await fresh()
    CRASH["on"], TOOL_CALL_IDS[:] = True, []
    with contextlib.suppress(Crash):
        await drive(app(flow, True), ss, invocation_id="inv-1", new_message=msg("go"))
    CRASH["on"] = False
    session = await ss.get_session(app_name="app", user_id="u", session_id="s")
    assert session is not None
    runner = Runner(app=app(flow, True), session_service=ss)  # _new_invocation_context
    stored = await answer_lost_calls(
        runner, ss, session, invocation_id="inv-1", call_ids=["c1"], run_config=RunConfig()
    )
    assert [r.id for e in stored for r in e.get_function_responses()] == ["c1"]
    assert stored[0].author == "b" and stored[0].node_info.path == "pipe@1/b@1"
    await drive(app(flow, True), ss, invocation_id="inv-1")
    evs = await events(ss)
    texts = [p.text for e in evs if e.author == "b" and e.content for p in e.content.parts or ()]
    assert [t for t in texts if t] == ["B"] and evs[-1].actions.end_of_agent
    return list(TOOL_CALL_IDS)


async def q11_lost_calls() -> None:
    # The crashed run's call, then the answer made first; the node goes on from it.
    assert await q11_lost_call_answered_first("default") == ["c1", "c1"]
    ok(
        "Q11 Runner._new_invocation_context + flows.llm_flows.functions."
        "handle_function_call_list_async answer a Workflow node's lost call; the re-driven "
        "node (include_contents='default') continues from that answer and the workflow finishes"
    )
    # ADK's default for a workflow node: the node is asked again from its input and calls again.
    assert await q11_lost_call_answered_first("none") == ["c1", "c1", "c1"]
    ok(
        "Q11 a single-turn node (include_contents='none') re-driven after its call was "
        "answered asks its model again from its input and calls the tool again"
    )


def q9_static_children() -> None:
    from google.adk.tools.agent_tool import AgentTool
    from google.adk.workflow import Workflow

    from durable_adk.adk.shapes import agent_tree

    m = ScriptedModel([Say("ok")])
    child = LlmAgent(name="child", model=m, tools=[approve])
    node = LlmAgent(name="node", model=m, tools=[charge, AgentTool(agent=child)])
    flow = Workflow(name="flow", edges=[("START", node)])
    assert [n.name for n in flow._iter_static_children()] == ["node"]
    assert {agent_tree.tool_name(f.item) for f in agent_tree.tools(flow)} == {
        "charge",
        "child",
        "approve",
    }
    ok(
        "Q9 BaseNode._iter_static_children lists a Workflow's graph nodes; the agent-tree "
        "walk reaches their tools and an AgentTool child's tools"
    )


async def q6_error_event() -> None:
    """A tool that raises an Exception (a store fault, say) leaves an error event after its call."""
    faults = {"left": 1}

    def flaky(amount: int, tool_context: Any) -> dict[str, bool]:
        """Charges money; the first attempt meets a store fault."""
        TOOL_CALL_IDS.append(tool_context.function_call_id)
        if faults["left"]:
            faults["left"] -= 1
            raise ConnectionError("store unavailable")
        return {"ok": True}

    model = ScriptedModel([Call("flaky", {"amount": 5}), Say("charged")])
    flaky_app = app(LlmAgent(name="payer", model=model, tools=[flaky]), True)
    ss = await fresh()
    TOOL_CALL_IDS[:] = []
    with contextlib.suppress(ConnectionError):
        await drive(flaky_app, ss, new_message=msg("pay"))
    evs = await events(ss)
    assert evs[-1].error_code == "ConnectionError" and not evs[-1].content
    assert evs[-2].get_function_calls() and not any(e.get_function_responses() for e in evs)
    await drive(flaky_app, ss, invocation_id=evs[0].invocation_id, new_message=msg("pay"))
    evs = await events(ss)
    assert len(TOOL_CALL_IDS) == 1 and not any(e.get_function_responses() for e in evs)
    assert evs[-1].author == "payer" and evs[-1].actions.end_of_agent and not evs[-1].content
    ok(
        "Q6 a tool that raised leaves a content-less error event after its call; a "
        "resumable re-drive does not replay the call but pauses and writes end_of_agent"
    )

    # Shown the invocation without that error event (a plugin's before_run_callback,
    # as durable_adk.adk.loops.recovery does), the same re-drive replays the call.
    class HideErrors(BasePlugin):
        async def before_run_callback(self, *, invocation_context: InvocationContext) -> None:
            session = invocation_context.session
            session.events = [e for e in session.events if not e.error_code]

    hiding = App(
        name="app",
        root_agent=flaky_app.root_agent,
        resumability_config=flaky_app.resumability_config,
        plugins=[HideErrors(name="hide_errors")],
    )
    ss = await fresh()
    faults["left"], TOOL_CALL_IDS[:] = 1, []
    with contextlib.suppress(ConnectionError):
        await drive(hiding, ss, new_message=msg("pay"))
    inv = (await events(ss))[0].invocation_id
    await drive(hiding, ss, invocation_id=inv, new_message=msg("pay"))
    evs = await events(ss)
    assert len(TOOL_CALL_IDS) == 2 and len(set(TOOL_CALL_IDS)) == 1
    assert [r.id for e in evs for r in e.get_function_responses()] == TOOL_CALL_IDS[:1]
    assert [e.error_code for e in evs if e.error_code] == ["ConnectionError"]  # still stored
    ok("Q6 without the error event in ADK's view the call is replayed with its own id")


SHAPE_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("shape_var", default="")


async def q11_shapes() -> None:
    """Section 11: AgentTool's child session, confirmation re-drive, reused interrupt ids."""
    from google.adk.events.request_input import RequestInput
    from google.adk.tools.agent_tool import AgentTool
    from google.adk.tools.function_tool import FunctionTool
    from google.adk.tools.tool_context import ToolContext
    from google.adk.workflow import FunctionNode, Workflow

    seen: dict[str, Any] = {}

    def probe(tool_context: ToolContext) -> dict[str, bool]:
        """Looks at where it runs."""
        ic = tool_context.get_invocation_context()
        seen["service"] = type(ic.session_service).__name__
        seen["metadata"] = dict((ic.run_config.custom_metadata or {}) if ic.run_config else {})
        seen["var"] = SHAPE_VAR.get()
        return {"ok": True}

    model = ScriptedModel(
        {
            "desk": [Call("clerk", {"request": "x"}), Say("done")],
            "clerk": [Call("probe"), Say("ok")],
        }
    )
    clerk = LlmAgent(name="clerk", model=model, tools=[probe])
    desk = LlmAgent(name="desk", model=model, tools=[AgentTool(clerk)])
    ss = await fresh()
    SHAPE_VAR.set("parent")
    config = RunConfig(custom_metadata={"stamp": 1})
    await drive(app(desk, True), ss, new_message=msg("go"), run_config=config)
    assert seen == {"service": "InMemorySessionService", "metadata": {"stamp": 1}, "var": "parent"}
    assert not any(e.author == "clerk" for e in await events(ss))  # child events never stored
    ok(
        "Q11 AgentTool runs its agent on an InMemorySessionService, with the caller's "
        "RunConfig custom_metadata and context variables; its events are not stored"
    )

    class Crash(BaseException):
        pass

    runs: list[str] = []

    def pay(amount: int, tool_context: ToolContext) -> dict[str, int]:
        """Pays."""
        runs.append(tool_context.function_call_id or "")
        if len(runs) == 1:
            raise Crash
        return {"paid": amount}

    cashier = LlmAgent(
        name="cashier",
        model=ScriptedModel({"cashier": [Call("pay", {"amount": 5}), Say("Paid.")]}),
        tools=[FunctionTool(pay, require_confirmation=True)],
    )
    ss = await fresh()
    await drive(app(cashier, True), ss, new_message=msg("pay"))
    evs = await events(ss)
    request = next(c for e in evs for c in e.get_function_calls() if e.long_running_tool_ids)
    approval = types.Content(
        role="user",
        parts=[
            types.Part(
                function_response=types.FunctionResponse(
                    id=request.id, name=request.name, response={"confirmed": True}
                )
            )
        ],
    )
    with contextlib.suppress(Crash):
        await drive(app(cashier, True), ss, new_message=approval)
    await drive(app(cashier, True), ss, invocation_id=evs[0].invocation_id)
    assert len(runs) == 2 and len(set(runs)) == 1
    ok("Q11 killed in an approved tool, a re-drive with no message runs it again, same call id")

    def ask(ctx: Any) -> Any:
        got = ctx.resume_inputs.get("review")
        return got if got is not None else RequestInput(interrupt_id="review")

    def decide(node_input: Any) -> Event:
        return Event(output=node_input, route="done" if node_input == {"a": "yes"} else "again")

    def finish(node_input: Any) -> str:
        return "finished"

    asking = FunctionNode(func=ask, name="ask", rerun_on_resume=True)
    deciding = FunctionNode(func=decide, name="decide")
    loop = Workflow(
        name="loop",
        edges=[
            ("START", asking, deciding),
            (deciding, {"again": asking, "done": FunctionNode(func=finish, name="finish")}),
        ],
    )
    ss = await fresh()
    await drive(app(loop, True), ss, new_message=msg("go"))
    for answer in ("no", "yes"):
        reply = types.FunctionResponse(
            id="review", name="adk_request_input", response={"a": answer}
        )
        await drive(
            app(loop, True),
            ss,
            new_message=types.Content(role="user", parts=[types.Part(function_response=reply)]),
        )
    evs = await events(ss)
    asks = [c.id for e in evs for c in e.get_function_calls()]
    assert asks == ["review", "review"] and any(e.output == "finished" for e in evs)
    assert evs[-1].actions.end_of_agent
    ok("Q11 a RequestInput reusing its interrupt id pauses at each ask and takes one answer each")


async def main() -> None:
    q9_static_children()
    await q1()
    await q2_q3_q4_q5()
    await q6()
    await q6_error_event()
    await q6_workflow()
    await q11_workflow_nodes()
    await q11_lost_calls()
    await q11_shapes()


if __name__ == "__main__":
    asyncio.run(main())
