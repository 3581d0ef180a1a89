"""Every library entry that stores a value from outside bounds its depth and size (issue 47).

Items 1 and 3, on both backends: the job table (completion, progress), the
webhook handler, the inbox's answers, an operator's resolve, a run's message
and state delta (``DurableRunner``), a session's initial state and its events
(``DurableSessionService``, the last guard), an artifact's metadata. Past a
limit each raises ``PayloadTooDeep`` or ``PayloadTooLarge`` (both
``InvalidArgument``) naming it, and nothing changes. A tool or a model whose
output is past the limits is answered with an error the model sees; the run
ends DONE and a fresh worker (a new store and session service, no cache) loads
the session.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.events.event import Event
from google.adk.models.llm_request import LlmRequest
from google.adk.runners import Runner
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from op_support import park_in_store
from test_unreadable_events import poisoned_session

from durable_adk import DurableRunsPlugin, errors, webhooks
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.runs import inbox, operators
from durable_adk.adk.servers.uri import DurableUriSessionService
from durable_adk.adk.services.artifacts import DurableArtifactService
from durable_adk.adk.services.repairs import repair_event, repairs_of
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.adk.tools.result_limits import ERROR_CODE
from durable_adk.demo.approvals_app import app as approvals_app
from durable_adk.demo.service_app import APP_NAME as STOCK_APP
from durable_adk.effect_tables.jobs import JobState, JobTable
from durable_adk.limits import PayloadLimits
from durable_adk.store import Store, open_store
from durable_adk.tables.interrupts import InterruptStatus, InterruptTable
from durable_adk.tables.ledger import RunLedger
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.scripted_model import Turn

LIMITS = PayloadLimits(max_depth=8, max_bytes=2000)
DEEP = {"k": [{"k": [{"k": [{"k": [{"k": 1}]}]}]}]}  # 9 levels
LARGE = {"blob": "x" * 2001}


def nested(depth: int) -> Any:
    value: Any = 1
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


async def fresh_events(url: str, app_name: str, user: str, session: str) -> list[Event]:
    """The session as a fresh worker loads it: a new store and session service, no cache."""
    async with open_store(url) as store:
        loaded = await DurableSessionService(store, cache_sessions=0).get_session(
            app_name=app_name, user_id=user, session_id=session
        )
    assert loaded is not None
    return list(loaded.events)


@pytest.fixture
async def limited(store_url: str) -> Any:
    async with open_store(store_url, limits=LIMITS) as store:
        yield store


def test_the_deep_value_is_just_past_the_limit() -> None:
    LIMITS.check(DEEP["k"], "one level less")
    with pytest.raises(errors.PayloadTooDeep):
        LIMITS.check(DEEP, "it")


async def test_the_job_table_and_the_webhook_refuse_and_keep_the_job_open(limited: Store) -> None:
    jobs = JobTable(limited)
    await jobs.create("j1", tool_name="t", deadline=60)
    for value, kind in ((DEEP, errors.PayloadTooDeep), (LARGE, errors.PayloadTooLarge)):
        with pytest.raises(kind, match="max_payload_"):
            await jobs.complete("j1", JobState.SUCCEEDED, value)
        with pytest.raises(kind):
            await jobs.progress("j1", value)
        body = json.dumps({"job_id": "j1", "state": "SUCCEEDED", "result": value}).encode()
        signed = webhooks.sign("s3cret", body, time.time())
        with pytest.raises(webhooks.WebhookError) as refused:
            await webhooks.handle_job_webhook(jobs, "s3cret", signed, body, time.time())
        assert refused.value.status == (422 if kind is errors.PayloadTooDeep else 413)
    job = await jobs.get("j1")
    assert job is not None and job.state is JobState.STARTED and job.result is None
    assert job.progress is None
    done = await jobs.complete("j1", JobState.SUCCEEDED, DEEP["k"])
    assert done.changed


async def test_the_session_service_refuses_deep_state_and_deep_events(
    limited: Store, store_url: str
) -> None:
    sessions = DurableSessionService(limited)
    with pytest.raises(errors.PayloadTooDeep):
        await sessions.create_session(app_name="a", user_id="u", session_id="s0", state=DEEP)
    with pytest.raises(errors.PayloadTooLarge):
        await sessions.create_session(app_name="a", user_id="u", session_id="s0", state=LARGE)
    assert await sessions.get_session(app_name="a", user_id="u", session_id="s0") is None
    session = await sessions.create_session(app_name="a", user_id="u", session_id="s1")
    await sessions.append_event(session, Event(author="user", invocation_id="i1"))
    # The last guard: an event nested past max_depth plus its envelope is not stored.
    part = types.Part(
        function_response=types.FunctionResponse(id="c", name="t", response={"r": nested(30)})
    )
    deep = Event(author="a", invocation_id="i1", content=types.Content(parts=[part]))
    with pytest.raises(errors.PayloadTooDeep, match="max_payload_depth 8 plus 16"):
        await sessions.append_event(session, deep)
    assert len(await fresh_events(store_url, "a", "u", "s1")) == 1


async def test_artifact_metadata_past_the_limits_saves_no_version(limited: Store) -> None:
    artifacts = DurableArtifactService(limited)
    for metadata in (DEEP, LARGE):
        with pytest.raises(errors.InvalidArgument, match="max_payload_"):
            await artifacts.save_artifact(
                app_name="a",
                user_id="u",
                session_id="s",
                filename="f.txt",
                artifact=types.Part(text="hi"),
                custom_metadata=metadata,
            )
    assert (
        await artifacts.list_versions(app_name="a", user_id="u", session_id="s", filename="f.txt")
        == []
    )


async def test_a_run_whose_message_or_state_delta_is_past_the_limits_is_not_recorded(
    limited: Store,
) -> None:
    runner = DurableRunner(app=approvals_app(), store=limited, background=False)
    with pytest.raises(errors.PayloadTooLarge, match="run's message"):
        async for _ in runner.run(user_id="u", session_id="s", message="x" * 2001):
            pass
    with pytest.raises(errors.PayloadTooDeep, match="state_delta"):
        message = types.Content(role="user", parts=[types.Part(text="O-1")])
        async for _ in runner.run_async(
            user_id="u", session_id="s", new_message=message, state_delta={"k": DEEP}
        ):
            pass
    assert await RunLedger(limited).list_runs() == []
    assert (
        await runner.session_service.get_session(app_name="approvals", user_id="u", session_id="s")
        is None
    )


async def test_an_answer_or_a_resolve_past_the_limits_changes_nothing(limited: Store) -> None:
    runner = DurableRunner(app=approvals_app(), store=limited, background=False)
    async for _ in runner.run(user_id="u", session_id="p", message="O-1"):
        pass
    (open_one,) = await InterruptTable(limited).list_interrupts(status=InterruptStatus.OPEN)
    for payload, kind in ((DEEP, errors.PayloadTooDeep), (LARGE, errors.PayloadTooLarge)):
        with pytest.raises(kind):
            await inbox.answer_interrupt(
                limited, open_one.call_id, by="ana", decision="approve", payload=payload
            )
    (still,) = await InterruptTable(limited).list_interrupts(status=InterruptStatus.OPEN)
    assert still == open_one
    runs = await RunLedger(limited).list_runs()
    assert [r.status.value for r in runs] == ["PAUSED"]

    parked, call_id = await park_in_store(limited, "r1")
    ledger = RunLedger(limited)
    actions = await ledger.actions(run_id=parked.run_id)
    for given in ({"result": DEEP}, {"results": {call_id: LARGE}}):
        with pytest.raises(errors.InvalidArgument, match="max_payload_"):
            await operators.resolve_run(ledger, parked.run_id, by="ops", **given)
    after = await ledger.get(parked.run_id)
    assert after is not None and after.status.value == "PARKED"
    assert await ledger.actions(run_id=parked.run_id) == actions


# --- item 3: a tool's or a model's output past the limits -----------------------


def fetch_tree(depth: int, tool_context: ToolContext) -> Any:
    """Returns a tree ``depth`` levels deep, and keeps a copy in the session's state."""
    tool_context.state["tree"] = nested(depth)
    tool_context.state["small"] = "kept"
    return nested(depth)


def _reply(seen: list[dict[str, Any]]) -> Any:
    def reply(request: LlmRequest) -> Turn:
        last = request.contents[-1].parts[-1].function_response
        assert last is not None
        seen.append(dict(last.response or {}))
        return Say("done")

    return reply


async def test_a_tool_whose_result_is_past_the_limits_answers_the_model_with_an_error(
    limited: Store, store_url: str
) -> None:
    seen: list[dict[str, Any]] = []
    model = ScriptedModel({"tree": [Call("fetch_tree", {"depth": 250}, id="c1"), _reply(seen)]})
    agent = LlmAgent(name="tree", model=model, tools=[fetch_tree])
    runner = DurableRunner(app=agent, store=limited, background=False)
    async for _ in runner.run(user_id="u", session_id="t1", message="get the tree"):
        pass
    (error,) = seen
    assert set(error) == {"error"}
    assert "the result of tool 'fetch_tree'" in error["error"]
    assert "state 'tree'" in error["error"] and "max_payload_depth" in error["error"]
    (run,) = await RunLedger(limited).list_runs()
    assert run.status.value == "DONE"
    events = await fresh_events(store_url, "tree", "u", "t1")
    said = [e for e in events if e.content]
    assert said[-1].content and said[-1].content.parts
    assert said[-1].content.parts[0].text == "done"
    deltas = [e.actions.state_delta for e in events if e.actions.state_delta]
    assert deltas == [{"small": "kept"}]  # the deep state key was never stored


async def test_a_model_whose_call_is_past_the_limits_ends_its_turn_with_an_error(
    limited: Store, store_url: str
) -> None:
    model = ScriptedModel({"tree": [Call("fetch_tree", {"depth": nested(250)}, id="c1")]})
    agent = LlmAgent(name="tree", model=model, tools=[fetch_tree])
    runner = DurableRunner(app=agent, store=limited, background=False)
    async for _ in runner.run(user_id="u", session_id="m1", message="get the tree"):
        pass
    (run,) = await RunLedger(limited).list_runs()
    events = await fresh_events(store_url, "tree", "u", "m1")
    (refused,) = [e for e in events if e.error_code]
    assert refused.error_code == ERROR_CODE and "max_payload_depth" in (refused.error_message or "")
    assert not any(e.get_function_calls() for e in events)
    assert run.status.value == "DONE", run


async def test_under_adks_own_runner_the_durable_runs_plugin_answers_with_the_error_too(
    store_url: str,
) -> None:
    seen: list[dict[str, Any]] = []
    service = DurableUriSessionService(f"durable+{store_url}")
    model = ScriptedModel({"tree": [Call("fetch_tree", {"depth": 250}, id="c1"), _reply(seen)]})
    agent = LlmAgent(name="tree", model=model, tools=[fetch_tree])
    runner = Runner(
        app=App(name="tree", root_agent=agent, plugins=[DurableRunsPlugin()]),
        session_service=service,
    )
    await service.create_session(app_name="tree", user_id="u", session_id="a1")
    message = types.Content(role="user", parts=[types.Part(text="get the tree")])
    try:
        async for _ in runner.run_async(user_id="u", session_id="a1", new_message=message):
            pass
        (run,) = await RunLedger(service.store).list_runs()
        assert run.status.value == "DONE"
    finally:
        await service.durable_runs.aclose()
        await service.store.close()
    (error,) = seen
    assert "the result of tool 'fetch_tree'" in error["error"]
    events = await fresh_events(store_url, "tree", "u", "a1")
    assert [e.actions.state_delta for e in events if e.actions.state_delta] == [{"small": "kept"}]


async def test_a_repair_whose_replacement_is_past_the_limits_changes_nothing(
    store_url: str,
) -> None:
    poison = await poisoned_session(store_url, "rp")
    replacement = {
        "content": {"role": "model", "parts": [{"text": "repaired"}]},
        "custom_metadata": {"k": nested(100)},
    }
    where = {"app_name": STOCK_APP, "user_id": "u1", "session_id": "rp"}
    async with open_store(store_url) as store:
        sessions = DurableSessionService(store)
        with pytest.raises(errors.PayloadTooDeep, match="replacement"):
            await repair_event(
                sessions, **where, event_id=poison.id, by="ops", reason="fix",
                replacement=replacement,
            )  # fmt: skip
        assert await repairs_of(sessions, **where) == []
