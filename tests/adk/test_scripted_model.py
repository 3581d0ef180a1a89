"""Tests for durable_adk.testing.scripted_model against real ADK runners."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.events import Event
from google.adk.models.llm_request import LlmRequest
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.adk.workflow import Workflow
from google.genai import types

from durable_adk.testing.scripted_model import (
    Call,
    Fail,
    Say,
    ScriptedModel,
    ScriptExhausted,
    agent_name_of,
    turn_index_of,
)

APP, USER, SESSION = "app", "u", "s"


class Crash(BaseException):
    """Simulated process death: a BaseException, so ADK records no error event."""


def user(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


async def new_session() -> InMemorySessionService:
    service = InMemorySessionService()
    await service.create_session(app_name=APP, user_id=USER, session_id=SESSION)
    return service


async def run(
    root: Any,
    service: InMemorySessionService,
    text: str | None = "hi",
    *,
    resumable: bool = False,
    invocation_id: str | None = None,
) -> list[Event]:
    app = App(name=APP, root_agent=root)
    if resumable:
        with warnings.catch_warnings():  # ResumabilityConfig is flagged experimental.
            warnings.simplefilter("ignore", UserWarning)
            app = App(
                name=APP,
                root_agent=root,
                resumability_config=ResumabilityConfig(is_resumable=True),
            )
    runner = Runner(app=app, session_service=service)
    return [
        event
        async for event in runner.run_async(
            user_id=USER,
            session_id=SESSION,
            invocation_id=invocation_id,
            new_message=user(text) if text is not None else None,
        )
    ]


def texts(events: list[Event]) -> list[str]:
    return [p.text for e in events if e.content for p in e.content.parts or [] if p.text]


@pytest.mark.asyncio
async def test_tool_call_then_final_text() -> None:
    seen: list[tuple[int, int]] = []

    def add(a: int, b: int) -> dict[str, int]:
        """Adds two numbers."""
        seen.append((a, b))
        return {"sum": a + b}

    model = ScriptedModel({"calc": [Call("add", {"a": 1, "b": 2}), Say("It is 3.")]})
    agent = LlmAgent(name="calc", model=model, tools=[add])
    service = await new_session()

    events = await run(agent, service)

    assert seen == [(1, 2)]
    assert texts(events) == ["It is 3."]
    responses = [r for e in events for r in e.get_function_responses()]
    calls = [c for e in events for c in e.get_function_calls()]
    assert [r.response for r in responses] == [{"sum": 3}]
    assert calls[0].id is not None and calls[0].id.startswith("adk-")  # ADK assigned it
    assert responses[0].id == calls[0].id
    assert model.calls == [("calc", 0), ("calc", 1)]


@pytest.mark.asyncio
async def test_parallel_calls_and_explicit_ids() -> None:
    def ping(n: int) -> dict[str, int]:
        """Echoes n."""
        return {"n": n}

    model = ScriptedModel(
        [
            (Say("two pings"), Call("ping", {"n": 1}, id="c1"), Call("ping", {"n": 2}, id="c2")),
            Say("done"),
        ]
    )
    events = await run(LlmAgent(name="p", model=model, tools=[ping]), await new_session())

    calls = [c for e in events for c in e.get_function_calls()]
    assert [(c.id, c.args) for c in calls] == [("c1", {"n": 1}), ("c2", {"n": 2})]
    responses = {r.id: r.response for e in events for r in e.get_function_responses()}
    assert responses == {"c1": {"n": 1}, "c2": {"n": 2}}
    assert texts(events)[-1] == "done"


@pytest.mark.asyncio
async def test_fail_step_surfaces_as_error() -> None:
    model = ScriptedModel([Fail(RuntimeError("model down"))])
    with pytest.raises(RuntimeError, match="model down"):
        await run(LlmAgent(name="a", model=model), await new_session())


@pytest.mark.asyncio
async def test_exhausted_script_raises() -> None:
    def noop() -> dict[str, str]:
        """Does nothing."""
        return {}

    model = ScriptedModel({"a": [Call("noop")]})  # nothing scripted after the tool
    with pytest.raises(ScriptExhausted, match="no step 1 for agent 'a'"):
        await run(LlmAgent(name="a", model=model, tools=[noop]), await new_session())


@pytest.mark.asyncio
async def test_unknown_agent_raises() -> None:
    model = ScriptedModel({"someone_else": [Say("x")]})
    with pytest.raises(ScriptExhausted):
        await run(LlmAgent(name="a", model=model), await new_session())


@pytest.mark.asyncio
async def test_callable_step_and_multi_turn_session() -> None:
    def echo_count(request: LlmRequest) -> Say:
        return Say(f"contents={len(request.contents)}")

    model = ScriptedModel([Say("first"), echo_count])
    agent = LlmAgent(name="a", model=model)
    service = await new_session()

    assert texts(await run(agent, service, "one")) == ["first"]
    # Turn 2 continues the same script: user, model, user -> 3 contents.
    assert texts(await run(agent, service, "two")) == ["contents=3"]


@pytest.mark.asyncio
async def test_workflow_pipeline_with_per_agent_scripts() -> None:
    model = ScriptedModel({"writer": [Say("draft")], "editor": [Say("final")]})
    writer = LlmAgent(name="writer", model=model)
    editor = LlmAgent(name="editor", model=model)
    pipeline = Workflow(name="pipeline", edges=[("START", writer, editor)])

    events = await run(pipeline, await new_session())

    assert [(e.author, t) for e in events for t in texts([e])] == [
        ("writer", "draft"),
        ("editor", "final"),
    ]
    assert model.calls == [("writer", 0), ("editor", 0)]


@pytest.mark.asyncio
async def test_redrive_in_fresh_process_replays_same_point() -> None:
    """Crash after the function call is stored; a new model instance resumes."""
    crash = {"on": True}

    def charge(amount: int) -> dict[str, bool]:
        """Charges money."""
        if crash["on"]:
            raise Crash
        return {"ok": True}

    def build() -> tuple[LlmAgent, ScriptedModel]:
        model = ScriptedModel([Call("charge", {"amount": 5}, id="fc-1"), Say("charged")])
        return LlmAgent(name="payer", model=model, tools=[charge]), model

    service = await new_session()
    agent, first = build()
    with pytest.raises(Crash):
        await run(agent, service, "pay", resumable=True, invocation_id="inv-1")
    assert first.calls == [("payer", 0)]

    crash["on"] = False
    agent, second = build()  # as if in a fresh process
    events = await run(agent, service, None, resumable=True, invocation_id="inv-1")

    assert [r.id for e in events for r in e.get_function_responses()] == ["fc-1"]
    assert texts(events) == ["charged"]
    assert second.calls == [("payer", 1)]  # step derived from stored history


@pytest.mark.asyncio
async def test_long_running_call_answered_by_a_later_message() -> None:
    def approve(amount: int) -> None:
        """Asks a human; the answer arrives later."""

    model = ScriptedModel([Call("approve", {"amount": 5}, id="lro-1"), Say("approved")])
    agent = LlmAgent(name="a", model=model, tools=[LongRunningFunctionTool(approve)])
    service = await new_session()

    first = await run(agent, service, "pay", resumable=True)
    assert first[-1].long_running_tool_ids == {"lro-1"}

    answer = types.FunctionResponse(id="lro-1", name="approve", response={"ok": True})
    app = App(name=APP, root_agent=agent)
    events = [
        e
        async for e in Runner(app=app, session_service=service).run_async(
            user_id=USER,
            session_id=SESSION,
            new_message=types.Content(role="user", parts=[types.Part(function_response=answer)]),
        )
    ]
    assert texts(events) == ["approved"]
    assert {e.invocation_id for e in events} == {first[0].invocation_id}


@pytest.mark.asyncio
async def test_long_running_interim_result_reasks_the_same_step() -> None:
    def approve(amount: int) -> dict[str, str]:
        """Asks a human; returns an interim status."""
        return {"status": "pending"}

    def after_call(request: LlmRequest) -> Say:
        response = (request.contents[-1].parts or [types.Part()])[-1].function_response
        pending = response is not None and (response.response or {}).get("status") == "pending"
        return Say("waiting" if pending else "approved")

    model = ScriptedModel([Call("approve", {"amount": 5}, id="lro-1"), after_call])
    agent = LlmAgent(name="a", model=model, tools=[LongRunningFunctionTool(approve)])
    service = await new_session()

    assert texts(await run(agent, service, "pay")) == ["waiting"]
    answer = types.FunctionResponse(id="lro-1", name="approve", response={"status": "ok"})
    runner = Runner(app=App(name=APP, root_agent=agent), session_service=service)
    message = types.Content(role="user", parts=[types.Part(function_response=answer)])
    events = [
        e async for e in runner.run_async(user_id=USER, session_id=SESSION, new_message=message)
    ]
    assert texts(events) == ["approved"]
    assert model.calls == [("a", 0), ("a", 1), ("a", 1)]


def test_step_selection_is_a_function_of_the_request() -> None:
    request = LlmRequest(
        contents=[user("q"), types.Content(role="model", parts=[types.Part(text="a")]), user("q2")],
        config=types.GenerateContentConfig(labels={"adk_agent_name": "x"}),
    )
    script = {"x": [Say("zero"), Say("one")]}
    assert agent_name_of(request) == "x"
    assert turn_index_of(request) == 1
    assert ScriptedModel(script).step_for(request) == ScriptedModel(script).step_for(request)
    assert ScriptedModel(script).step_for(request) == Say("one")


def test_agent_name_falls_back_to_identity_instruction() -> None:
    request = LlmRequest(
        config=types.GenerateContentConfig(
            system_instruction='You are an agent. Your internal name is "helper".'
        )
    )
    assert agent_name_of(request) == "helper"
    assert agent_name_of(LlmRequest()) is None


async def test_a_streamed_turn_comes_in_partial_chunks_then_whole() -> None:
    model = ScriptedModel([(Say("Two lamps", chunks=("Two ", "lamps")), Call("order", {"n": 2}))])
    request = LlmRequest(contents=[user("lamps?")])
    streamed = [r async for r in model.generate_content_async(request, stream=True)]
    assert [(r.partial, r.content.parts[0].text) for r in streamed[:-1]] == [  # type: ignore[union-attr, index]
        (True, "Two "),
        (True, "lamps"),
    ]
    final = streamed[-1]
    assert not final.partial and final.content is not None and final.content.parts
    assert final.content.parts[0].text == "Two lamps"
    assert final.content.parts[1].function_call is not None  # calls only in the whole turn
    whole = [r async for r in model.generate_content_async(request)]
    assert len(whole) == 1 and not whole[0].partial


def test_say_refuses_chunks_that_do_not_make_up_its_text() -> None:
    with pytest.raises(ValueError, match="do not make up"):
        Say("Two lamps", chunks=("Two", "lamps"))
    assert Say("We have 7.").pieces() == ["We ", "have ", "7."]
