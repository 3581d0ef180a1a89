"""Guards for issue 11's shapes, in process, both backends.

* An AgentTool's child runs on ADK's throw-away in-memory session: its
  journaled tool uses the parent run's journal, epoch and invocation id; a
  journaled tool inside a durable drive that cannot reach its journal refuses;
  shapes that cannot be guarded there are refused at construction.
* An answer to a pause is taken once: a second answer is refused with a clear
  error and nothing is written.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.agent_tool import AgentTool
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.genai import types

from durable_adk import DurableRunner, RunStatus, errors, journaled, long_running_tool
from durable_adk.adk.runner import cause_of
from durable_adk.adk.tools.saga_agent import SagaSequence
from durable_adk.effect_tables.journal import Journal
from durable_adk.fencing.fence import RunFence, using_fence
from durable_adk.store import Store
from durable_adk.testing import Call, Say, ScriptedModel


def refund_tool(acts: list[str]) -> FunctionTool:
    @journaled(key="refund:{order}")
    def refund(order: str, idempotency_key: str) -> dict[str, str]:
        """Refunds an order."""
        acts.append(idempotency_key)
        return {"refunded": order}

    return refund


def desk_with_clerk(acts: list[str], *, runs: int = 1) -> LlmAgent:
    model = ScriptedModel(
        {
            "desk": [Call("clerk", {"request": "refund A1"}), Say("Done.")] * runs,
            "clerk": [Call("refund", {"order": "A1"}), Say("refunded A1")],
        }
    )
    clerk = LlmAgent(name="clerk", model=model, description="refunds", tools=[refund_tool(acts)])
    return LlmAgent(name="desk", model=model, tools=[AgentTool(clerk)])


async def test_a_journaled_tool_in_an_agent_tools_child_uses_the_parent_run(store: Store) -> None:
    acts: list[str] = []
    runner = DurableRunner(app=desk_with_clerk(acts), store=store, app_name="desk")
    assert {"refund", "clerk"} <= runner.idempotent_tools  # the AgentTool is safe to re-drive
    async for _ in runner.run(user_id="u", session_id="s", message="refund A1"):
        pass
    (run,) = await runner.ledger.list_runs()
    assert run.status is RunStatus.DONE
    entry = await Journal(store).get("refund:A1")
    assert entry is not None and entry.status.value == "DONE"
    # Owned by the parent's durable run, under the parent's invocation (not the child's).
    assert (entry.run_id, entry.run_epoch, entry.invocation_id) == (
        run.run_id,
        run.epoch,
        run.invocation_id,
    )
    assert acts == ["refund:A1"]
    # The same effect asked again in another turn: answered from the journal.
    async for _ in runner.run(user_id="u", session_id="s2", message="refund A1"):
        pass
    assert acts == ["refund:A1"]


async def test_a_journaled_tool_that_cannot_reach_its_journal_inside_a_drive_refuses() -> None:
    acts: list[str] = []
    model = ScriptedModel({"clerk": [Call("refund", {"order": "A1"}), Say("refunded")]})
    agent = LlmAgent(name="clerk", model=model, tools=[refund_tool(acts)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        app = App(
            name="x", root_agent=agent, resumability_config=ResumabilityConfig(is_resumable=True)
        )
    sessions = InMemorySessionService()
    runner = Runner(app=app, session_service=sessions)
    session = await sessions.create_session(app_name="x", user_id="u")
    fence = RunFence("run-x", 1, trusted_until=float("inf"))
    with using_fence(fence), pytest.raises(Exception) as raised:
        # Inside a durable drive, but no run stamp and no store: the tool refuses.
        async for _ in runner.run_async(
            user_id="u",
            session_id=session.id,
            new_message=types.Content(role="user", parts=[types.Part(text="go")]),
        ):
            pass
    fenced = cause_of(raised.value, errors.Fenced)
    assert fenced is not None and "refused rather than act without its journal" in str(fenced)
    assert acts == []  # never acted unguarded


@pytest.mark.parametrize("inside", ["durable_long_running", "long_running", "saga"])
def test_an_agent_tool_child_that_cannot_be_guarded_is_refused_at_construction(
    store: Store, inside: str
) -> None:
    def start(quarter: str) -> dict[str, str]:
        """Starts a report."""
        return {"status": "pending"}

    model = ScriptedModel({})
    if inside == "durable_long_running":
        tool: Any = long_running_tool(start, job_key="report:{quarter}", deadline=60)
        child: Any = LlmAgent(name="reporter", model=model, tools=[tool])
        named = "'start'"
    elif inside == "long_running":
        child = LlmAgent(name="reporter", model=model, tools=[LongRunningFunctionTool(start)])
        named = "'start'"
    else:
        stage = LlmAgent(name="note", model=model)
        child = SagaSequence("reporter", [stage], {}, allow_unsafe_order=True)
        named = "saga 'reporter'"
    root = LlmAgent(name="desk", model=model, tools=[AgentTool(child)])
    with pytest.raises(errors.InvalidArgument) as refused:
        DurableRunner(app=root, store=store, app_name="desk")
    message = str(refused.value)
    assert named in message and "AgentTool 'reporter'" in message
    assert "throw-away" in message


async def test_a_second_answer_to_one_confirmation_is_refused_and_changes_nothing(
    store: Store,
) -> None:
    acts: list[str] = []

    @journaled(key="pay:{invoice}")
    def pay(invoice: str, idempotency_key: str) -> dict[str, str]:
        """Pays an invoice."""
        acts.append(idempotency_key)
        return {"paid": invoice}

    model = ScriptedModel({"cashier": [Call("pay", {"invoice": "I-1"}), Say("Paid I-1.")]})
    agent = LlmAgent(
        name="cashier", model=model, tools=[FunctionTool(pay.func, require_confirmation=True)]
    )
    runner = DurableRunner(app=agent, store=store, app_name="cashier")
    async for _ in runner.run(user_id="u", session_id="s", message="pay I-1"):
        pass
    (paused,) = await runner.ledger.list_runs()
    assert paused.status is RunStatus.PAUSED and acts == []
    session = await runner.sessions.get_session(app_name="cashier", user_id="u", session_id="s")
    assert session is not None
    (request,) = [
        c
        for e in session.events
        for c in e.get_function_calls()
        if c.name == "adk_request_confirmation"
    ]
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
    async for _ in runner.run(
        user_id="u", session_id="s", message=approval, invocation_id=paused.invocation_id
    ):
        pass
    assert acts == ["pay:I-1"]
    before = await runner.sessions.get_session(app_name="cashier", user_id="u", session_id="s")
    assert before is not None
    with pytest.raises(errors.Conflict, match="already answered"):
        async for _ in runner.run(
            user_id="u", session_id="s", message=approval, invocation_id=paused.invocation_id
        ):
            pass
    after = await runner.sessions.get_session(app_name="cashier", user_id="u", session_id="s")
    assert after is not None and len(after.events) == len(before.events)
    # Newest first: the approval run is DONE and the paused run followed its
    # invocation to DONE; the refused answer changed neither.
    assert [r.status for r in await runner.ledger.list_runs()] == [RunStatus.DONE, RunStatus.DONE]
    assert acts == ["pay:I-1"]
    wrong = approval.model_copy(deep=True)
    assert wrong.parts and wrong.parts[0].function_response
    wrong.parts[0].function_response.name = "pay"
    with pytest.raises(errors.InvalidArgument, match="not 'pay'"):
        async for _ in runner.run(
            user_id="u", session_id="s", message=wrong, invocation_id=paused.invocation_id
        ):
            pass
    with pytest.raises(errors.NotFound):
        async for _ in runner.run(
            user_id="u", session_id="s", message=approval, invocation_id="e-nope"
        ):
            pass
    assert len(await runner.ledger.list_runs()) == 2
