"""DurableRunner offers ADK's Runner surface: services, plugins, RunConfig, run_async.

An ADK app that saves artifacts, searches memory and has a plugin runs on
DurableRunner unchanged apart from its Runner line; a run handed back by a
store fault mid-tool is recovered and finds the artifact its first attempt
saved (the durable artifact service, on the same store).
"""

from __future__ import annotations

from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig
from google.adk.memory import InMemoryMemoryService
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from durable_adk import DurableRunner, RunStatus, Sweeper, errors, idempotent
from durable_adk.adk.services.sessions import RUN_METADATA_KEY
from durable_adk.store import Store
from durable_adk.testing import Call, Say, ScriptedModel

FAULTS = {"left": 0}
SEEN: dict[str, Any] = {}


@idempotent
async def write_report(title: str, tool_context: ToolContext) -> dict[str, Any]:
    """Writes a report as an artifact, then reads the memory."""
    version = await tool_context.save_artifact("report.txt", types.Part(text=f"report: {title}"))
    SEEN.setdefault("versions", []).append(version)
    if FAULTS["left"]:
        FAULTS["left"] -= 1
        raise errors.StoreUnavailable("the store went away mid-tool")
    memories = await tool_context.search_memory("report")
    return {"version": version, "memories": len(memories.memories)}


class Counting(BasePlugin):
    def __init__(self) -> None:
        super().__init__(name="counting")
        self.runs = 0

    async def before_run_callback(self, *, invocation_context: Any) -> None:
        self.runs += 1


def runner_for(store: Store, plugin: Counting) -> DurableRunner:
    agent = LlmAgent(
        name="writer",
        model=ScriptedModel([Call("write_report", {"title": "Q3"}), Say("Report written.")]),
        tools=[write_report],
    )
    return DurableRunner(
        app=agent,
        app_name="reports",
        store=store,
        memory_service=InMemoryMemoryService(),
        plugins=[plugin],
        run_config=RunConfig(max_llm_calls=20),
    )


def message() -> types.Content:
    return types.Content(role="user", parts=[types.Part(text="Write the Q3 report")])


async def test_an_adk_app_runs_unchanged_through_run_async(store: Store) -> None:
    FAULTS["left"] = 0
    SEEN.clear()
    plugin = Counting()
    runner = runner_for(store, plugin)
    config = RunConfig(max_llm_calls=10, custom_metadata={"tenant": "acme"})
    events = [
        e
        async for e in runner.run_async(
            user_id="u",
            session_id="s1",
            new_message=message(),
            run_config=config,
            state_delta={"user_tier": "gold"},
        )
    ]
    texts = [p.text for e in events if e.content for p in e.content.parts or () if p.text]
    assert texts == ["Report written."]
    (run,) = await runner.ledger.list_runs()
    assert run.status is RunStatus.DONE
    assert plugin.runs == 1
    session = await runner.sessions.get_session(app_name="reports", user_id="u", session_id="s1")
    assert session is not None and session.state["user_tier"] == "gold"
    stamped = [e.custom_metadata for e in session.events if e.author == "writer"]
    assert stamped and all(m and m["tenant"] == "acme" and RUN_METADATA_KEY in m for m in stamped)
    part = await runner.adk.artifact_service.load_artifact(
        app_name="reports", user_id="u", session_id="s1", filename="report.txt"
    )
    assert part is not None and part.text == "report: Q3"


async def test_a_recovered_run_finds_the_artifact_its_first_attempt_saved(store: Store) -> None:
    FAULTS["left"] = 1
    SEEN.clear()
    runner = runner_for(store, Counting())
    try:
        async for _ in runner.run(user_id="u", session_id="s2", message=message()):
            pass
    except errors.RunInterrupted:
        pass
    else:
        raise AssertionError("the store fault should have handed the run back")
    (run,) = await runner.ledger.list_runs()
    assert run.status is RunStatus.RUNNING  # handed back, not FAILED
    await runner.ledger.backdate(run.run_id, 3600)
    (recovery,) = await Sweeper(runner).recover_once()
    assert recovery.status is RunStatus.DONE
    # The re-driven tool saved the same bytes in the same run: the version it saved first.
    assert SEEN["versions"] == [0, 0]
    versions = await runner.adk.artifact_service.list_versions(
        app_name="reports", user_id="u", session_id="s2", filename="report.txt"
    )
    assert versions == [0]
