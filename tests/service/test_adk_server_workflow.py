"""Workflow roots under ``adk api_server --extra_plugins durable_adk.DurableRunsPlugin``.

ADK's invocation context carries no agent for a Workflow root (``ic.agent``
is None), so the plugin's ServerRuns used to fail every ``POST /run`` of such
an app with 500 while it rebuilt the App from the context. Through ADK's own
FastAPI app (``get_fast_api_app``), on both backends, for an App with its own
plugin and resumability config and for a bare Workflow ``root_agent``:

* ``POST /run`` on a server with no open runs answers 200 with the clerk's
  answer, and the run is DONE on the ledger under the invocation ADK ran
  (the App's own plugin saw it);
* an orphaned run of the app (its worker died) is recovered when a server
  starts, before any request, and ends DONE.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.adk.cli.fast_api import get_fast_api_app

from durable_adk import RunLedger, RunStatus, ServerSettings, open_store, register_session_uris

AGENT = '''
import warnings

from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.workflow import FunctionNode, Workflow

from durable_adk.adk.shapes.marks import idempotent
from durable_adk.testing import Say, ScriptedModel

SEEN = []


class Counting(BasePlugin):
    """The App's own plugin: notes each invocation it sees."""

    async def before_run_callback(self, *, invocation_context):
        SEEN.append(invocation_context.invocation_id)
        return None


@idempotent
def intake(node_input=None) -> dict:
    return {{"order": "ORD-7"}}


# Each run of the clerk node may or may not see its earlier turn: the same answer either way.
clerk = LlmAgent(name="clerk", model=ScriptedModel({{"clerk": [Say("booked"), Say("booked")]}}))
graph = Workflow(name="{name}", edges=[("START", FunctionNode(func=intake, name="intake"), clerk)])
if "{shape}" == "app":
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        resumable = ResumabilityConfig(is_resumable=True)
    app = App(name="{name}", root_agent=graph, plugins=[Counting("counting")],
              resumability_config=resumable)
else:
    root_agent = graph
'''


def texts(events: list[Any]) -> list[str]:
    return [p.text for e in events if e.content for p in e.content.parts or [] if p.text]


def agents_folder(tmp_path: Path, name: str, shape: str) -> Path:
    agents = tmp_path / "agents"
    (agents / name).mkdir(parents=True)
    (agents / name / "__init__.py").write_text("from . import agent\n")
    (agents / name / "agent.py").write_text(AGENT.format(name=name, shape=shape))
    return agents


def server(agents: Path, store_url: str) -> tuple[Any, Any]:
    """ADK's FastAPI app on the durable store with the plugin, and its session service."""
    registration = register_session_uris(settings=ServerSettings(sweep_interval=0.2))
    http_app = get_fast_api_app(
        agents_dir=str(agents),
        session_service_uri=f"durable+{store_url}",
        web=False,
        extra_plugins=["durable_adk.DurableRunsPlugin"],
        lifespan=registration.lifespan,
    )
    [service] = registration.services
    return http_app, service


@pytest.mark.parametrize("shape", ["app", "root_agent"])
async def test_a_workflow_app_runs_and_recovers_under_the_plugin(
    shape: str, backend: str, store_url: str, tmp_path: Path
) -> None:
    # A module name of its own per test: ADK's loader keeps modules in
    # sys.modules, and its server appends its plugins to a loaded App.
    name = f"flow_{shape}_{backend}"
    agents = agents_folder(tmp_path, name, shape)
    async with open_store(store_url):
        pass  # the schema

    # 1. POST /run on a server with no open runs: the plugin makes the
    #    app's runner from the invocation (a Workflow root is not in it).
    http_app, service = server(agents, store_url)
    async with http_app.router.lifespan_context(http_app):
        transport = httpx.ASGITransport(app=http_app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            made = await http.post(f"/apps/{name}/users/ann/sessions/s1")
            assert made.status_code == 200, made.text
            ran = await http.post(
                "/run",
                json={
                    "app_name": name,
                    "user_id": "ann",
                    "session_id": "s1",
                    "new_message": {"role": "user", "parts": [{"text": "book ORD-7"}]},
                },
                timeout=60,
            )
        assert ran.status_code == 200, ran.text
        assert texts_of(ran.json()) == ["booked"]
        [run] = await RunLedger(service.store).list_runs()
        assert (run.status, run.attempts) == (RunStatus.DONE, 1)
        session = await service.get_session(app_name=name, user_id="ann", session_id="s1")
        assert session is not None
        assert texts(session.events) == ["book ORD-7", "booked"]
        assert {e.invocation_id for e in session.events} == {run.invocation_id}
        if shape == "app":  # the App's own plugin ran
            assert run.invocation_id in sys.modules[f"{name}.agent"].SEEN

    # 2. An orphan of the app (its worker died): a new server recovers it at
    #    start-up, before any request, loading the app from the agents folder.
    async with open_store(store_url) as store:
        ledger = RunLedger(store)
        queued = await ledger.submit(
            app_name=name,
            user_id="ann",
            session_id="s1",
            request={"role": "user", "parts": [{"text": "book ORD-8"}]},
            owner="dead",
        )
        orphan = await ledger.claim_queued(queued.run_id, "dead")
        assert orphan is not None
        await ledger.backdate(orphan.run_id, 120)
    http_app, service = server(agents, store_url)
    async with http_app.router.lifespan_context(http_app):
        ledger = RunLedger(service.store)

        async def ended() -> Any:
            while True:
                now = await ledger.get(orphan.run_id)
                if now is None or now.status is not RunStatus.RUNNING:
                    return now
                await asyncio.sleep(0.1)

        recovered = await asyncio.wait_for(ended(), 60)
        assert recovered.status is RunStatus.DONE, recovered.last_error
        session = await service.get_session(app_name=name, user_id="ann", session_id="s1")
        assert session is not None
        assert texts(session.events) == ["book ORD-7", "booked", "book ORD-8", "booked"]


def texts_of(events: list[dict[str, Any]]) -> list[str]:
    """Texts of events as ADK's /run answers them (JSON)."""
    parts = [p for e in events for p in (e.get("content") or {}).get("parts") or []]
    return [p["text"] for p in parts if p.get("text")]
