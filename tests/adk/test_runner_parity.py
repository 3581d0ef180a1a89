"""DurableRunner against ADK's own Runner: the same surface, the same answers.

A differential suite: each case drives the same calls through ADK 2.13's
``Runner`` (on its in-memory services) and through DurableRunner (on both
backends), and compares what a caller sees: attributes, signatures, events
(author, text, calls and answers; not ids or timestamps) and error types.
Deliberate differences are listed in docs/adk-compat.md, "Runner".
"""

from __future__ import annotations

import asyncio
import inspect
import warnings
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.artifacts import InMemoryArtifactService
from google.adk.auth.credential_service.in_memory_credential_service import (
    InMemoryCredentialService,
)
from google.adk.events.event import Event
from google.adk.memory import InMemoryMemoryService
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.genai import types

from durable_adk import DurableRunner, RunStatus, errors
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.store import Store
from durable_adk.testing import Call, Say, ScriptedModel

APP = "parity"


def lookup(order: str) -> dict[str, str]:
    """Looks an order up."""
    return {"order": order, "status": "shipped"}


def agent() -> LlmAgent:
    return LlmAgent(
        name="clerk",
        model=ScriptedModel([Call("lookup", {"order": "A1"}), Say("It has shipped.")]),
        tools=[lookup],
    )


def seen(events: list[Event]) -> list[tuple[Any, ...]]:
    """What a caller compares: author, texts, calls, answers (no ids, no times)."""
    out = []
    for e in events:
        parts = e.content.parts if e.content and e.content.parts else []
        out.append(
            (
                e.author,
                tuple(p.text for p in parts if p.text),
                tuple(c.name for c in e.get_function_calls()),
                tuple((r.name, str(r.response)) for r in e.get_function_responses()),
            )
        )
    return out


def message(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


def resumable(root: Any) -> App:
    """The App ADK's Runner gets: resumable, as every durable run is (docs/adk-compat.md)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return App(
            name=APP, root_agent=root, resumability_config=ResumabilityConfig(is_resumable=True)
        )


async def adk_events(root: Any, **kwargs: Any) -> list[Event]:
    runner = Runner(
        app=resumable(root), session_service=InMemorySessionService(), auto_create_session=True
    )
    return [e async for e in runner.run_async(user_id="u", session_id="s", **kwargs)]


async def ours_events(store: Store, root: Any, **kwargs: Any) -> list[Event]:
    runner = DurableRunner(agent=root, app_name=APP, store=store, background=False)
    return [e async for e in runner.run_async(user_id="u", session_id="s", **kwargs)]


def test_the_public_surface_is_adks() -> None:
    ours = set(dir(DurableRunner))
    missing = [
        name
        for name in (
            "app",
            "app_name",
            "agent",
            "session_service",
            "artifact_service",
            "memory_service",
            "credential_service",
            "plugin_manager",
            "run_async",
            "close",
        )
        if name not in ours
    ]
    assert missing == []
    adk = inspect.signature(Runner.run_async).parameters
    mine = inspect.signature(DurableRunner.run_async).parameters
    for name, param in adk.items():
        if name == "self":
            continue
        assert name in mine, name
        assert mine[name].kind == param.kind, name
        assert mine[name].default == param.default, name


async def test_the_services_given_are_the_attributes(store: Store) -> None:
    artifacts, memory, creds = (
        InMemoryArtifactService(),
        InMemoryMemoryService(),
        InMemoryCredentialService(),
    )
    runner = DurableRunner(
        agent=agent(),
        app_name=APP,
        store=store,
        artifact_service=artifacts,
        memory_service=memory,
        credential_service=creds,
    )
    assert runner.artifact_service is artifacts
    assert runner.memory_service is memory
    assert runner.credential_service is creds
    assert isinstance(runner.session_service, DurableSessionService)
    assert runner.agent.name == "clerk" and runner.app_name == APP
    assert runner.plugin_manager.plugins[0].name == "durable_adk_barriers"


async def test_app_or_agent_exactly_one(store: Store) -> None:
    with pytest.raises(errors.InvalidArgument):
        DurableRunner(store=store)
    with pytest.raises(errors.InvalidArgument):
        DurableRunner(app=agent(), agent=agent(), store=store)


async def test_an_app_without_resumability_is_accepted_with_it_on(store: Store) -> None:
    app = App(name=APP, root_agent=agent())
    runner = DurableRunner(app=app, store=store, background=False)
    assert runner.app.resumability_config is not None
    assert runner.app.resumability_config.is_resumable
    events = [e async for e in runner.run(user_id="u", session_id="s", message="where is A1?")]
    assert seen(events) == seen(await adk_events(agent(), new_message=message("where is A1?")))


@pytest.mark.parametrize("yield_user_message", [False, True])
async def test_run_async_yields_what_adks_runner_yields(
    store: Store, yield_user_message: bool
) -> None:
    kwargs = {"new_message": message("where is A1?"), "yield_user_message": yield_user_message}
    theirs = await adk_events(agent(), **kwargs)
    ours = await ours_events(store, agent(), **kwargs)
    assert seen(ours) == seen(theirs)
    assert (ours[0].author == "user") is yield_user_message


async def test_run_async_without_message_or_invocation_is_refused(store: Store) -> None:
    # ADK's Runner runs an LlmAgent root on the session as it is; a durable run
    # needs a request to put on the ledger, so it refuses (docs/adk-compat.md).
    runner = DurableRunner(agent=agent(), app_name=APP, store=store, background=False)
    with pytest.raises(ValueError, match="needs new_message"):
        async for _ in runner.run_async(user_id="u", session_id="s"):
            pass
    assert await runner.ledger.list_runs() == []


def approve(amount: int) -> None:
    """Asks a person to approve (long-running: answered later)."""
    return None


def approving_agent() -> LlmAgent:
    return LlmAgent(
        name="clerk",
        model=ScriptedModel([Call("approve", {"amount": 5}), Say("waiting"), Say("approved")]),
        tools=[LongRunningFunctionTool(approve)],
    )


async def test_answers_without_an_invocation_id_continue_the_paused_invocation(
    store: Store,
) -> None:
    runner = DurableRunner(agent=approving_agent(), app_name=APP, store=store, background=False)
    first = [
        e async for e in runner.run_async(user_id="u", session_id="s", new_message=message("pay"))
    ]
    (call,) = [c for e in first for c in e.get_function_calls()]
    answer = types.Content(
        role="user",
        parts=[
            types.Part(
                function_response=types.FunctionResponse(
                    id=call.id, name="approve", response={"ok": True}
                )
            )
        ],
    )
    more = [e async for e in runner.run_async(user_id="u", session_id="s", new_message=answer)]
    assert {e.invocation_id for e in more} == {first[0].invocation_id}
    runs = await runner.ledger.list_runs()
    assert {r.status for r in runs} == {RunStatus.DONE}


async def test_abort_signal_cancels_the_invocation(store: Store) -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(order: str) -> dict[str, str]:
        """Waits."""
        entered.set()
        await asyncio.wait_for(release.wait(), 30)
        return {"order": order}

    root = LlmAgent(
        name="clerk",
        model=ScriptedModel([Call("slow", {"order": "A1"}), Say("done")]),
        tools=[slow],
    )
    runner = DurableRunner(agent=root, app_name=APP, store=store, background=False, cancel_grace=1)
    abort = asyncio.Event()

    async def drive() -> None:
        async for _ in runner.run_async(
            user_id="u", session_id="s", new_message=message("go"), abort_signal=abort
        ):
            pass

    task = asyncio.create_task(drive())
    await asyncio.wait_for(entered.wait(), 30)
    abort.set()
    release.set()
    with pytest.raises(errors.RunCancelled):
        await asyncio.wait_for(task, 60)
    (run,) = await runner.ledger.list_runs()
    assert run.status is RunStatus.CANCELLED
    cancelled = await runner.ledger.invocation_cancelled(
        app_name=APP, user_id="u", session_id="s", invocation_id=run.invocation_id
    )
    assert cancelled is not None


async def test_construction_answers_as_adks(store: Store) -> None:
    with pytest.raises(ValueError, match="Only one of app, agent, or node") as ours:
        DurableRunner(app=agent(), agent=agent(), store=store)
    with pytest.raises(ValueError, match="Only one of app, agent, or node") as theirs:
        Runner(app=resumable(agent()), agent=agent(), session_service=InMemorySessionService())
    assert isinstance(ours.value, ValueError) and isinstance(theirs.value, ValueError)
    with pytest.raises(ValueError, match="One of app, agent, or node must be provided"):
        DurableRunner(store=store)
    renamed = DurableRunner(app=resumable(agent()), app_name="override", store=store)
    adk = Runner(
        app=resumable(agent()), app_name="override", session_service=InMemorySessionService()
    )
    assert renamed.app_name == adk.app_name == "override"


async def test_a_missing_session_without_auto_create_is_adks_error(store: Store) -> None:
    from google.adk.errors.session_not_found_error import SessionNotFoundError

    runner = DurableRunner(agent=agent(), app_name=APP, store=store, auto_create_session=False)
    with pytest.raises(SessionNotFoundError):
        async for _ in runner.run_async(user_id="u", session_id="none", new_message=message("x")):
            pass
    adk = Runner(app=resumable(agent()), session_service=InMemorySessionService())
    with pytest.raises(SessionNotFoundError):
        async for _ in adk.run_async(user_id="u", session_id="none", new_message=message("x")):
            pass
    assert await runner.ledger.list_runs() == []  # refused before anything was written


async def test_a_caller_chosen_invocation_id_starts_a_new_invocation(store: Store) -> None:
    runner = DurableRunner(agent=agent(), app_name=APP, store=store, background=False)
    events = [
        e
        async for e in runner.run_async(
            user_id="u", session_id="s", invocation_id="e-mine", new_message=message("where?")
        )
    ]
    assert {e.invocation_id for e in events} == {"e-mine"}
    (run,) = await runner.ledger.list_runs()
    assert run.invocation_id == "e-mine" and run.status is RunStatus.DONE


async def test_close_closes_adks_side_too(store: Store) -> None:
    from google.adk.plugins.base_plugin import BasePlugin

    class Closing(BasePlugin):
        closed = False

        async def close(self) -> None:
            Closing.closed = True

    app = resumable(agent()).model_copy(update={"plugins": [Closing(name="closing")]})
    runner = DurableRunner(app=app, store=store, background=False)
    await runner.close()
    assert Closing.closed
