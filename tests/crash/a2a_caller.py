"""The calling side of the A2A crash tests: a durable run that calls a remote A2A agent.

Usage: python tests/crash/a2a_caller.py MODE DB SESSION CARD_URL

* ``run``: drives one run: the root agent hands over to ``researcher``, a
  :class:`DurableRemoteA2aAgent` for the remote at CARD_URL. Prints the
  run's last text as ``ANSWER <text>``.
* ``recover``: a fresh worker: takes over what a killed ``run`` left
  (:func:`sweep_as_fresh_worker`) and prints its report as ``REPORT <json>``.
* ``answer``: answers the remote's input-required question (the paused
  long-running call ``ask_approval``) with ``{"approved": true}``, as the
  continuation of the paused invocation; prints ``ANSWER <text>``.

``durable-adk serve a2a_caller:app`` serves the same app, calling the
remote whose card URL is in ``$DADK_A2A_CARD``.

Crash points come from the environment (durable_adk.testing.arm).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import httpx
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.genai import types

from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.tools.remote_a2a import DurableRemoteA2aAgent
from durable_adk.store import Store, open_store
from durable_adk.testing import Call, ScriptedModel
from durable_adk.testing.harness import sweep_as_fresh_worker

APP = "a2acaller"
USER = "u"


def build_app(card_url: str) -> App:
    # A served side that asks for a bearer token (durable-adk serve --a2a) gets $DADK_A2A_TOKEN.
    token = os.environ.get("DADK_A2A_TOKEN")
    http = (
        httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {token}"})
        if token
        else None
    )
    researcher = DurableRemoteA2aAgent(
        name="researcher",
        agent_card=card_url,
        httpx_client=http,
        description="Researches topics.",
        poll_interval=0.05,
        max_poll_interval=0.3,
        unreachable_for=30.0,
    )
    boss = LlmAgent(
        name="boss",
        model=ScriptedModel({"boss": [Call("transfer_to_agent", {"agent_name": "researcher"})]}),
        sub_agents=[researcher],
    )
    return App(name=APP, root_agent=boss)


def build_runner(store: Store, card_url: str, worker: str) -> DurableRunner:
    return DurableRunner(app=build_app(card_url), store=store, worker_id=worker, lease=3.0)


# For ``durable-adk serve a2a_caller:app``: the remote's card URL comes from the environment.
app = build_app(os.environ["DADK_A2A_CARD"]) if "DADK_A2A_CARD" in os.environ else None


def last_text(events: list[object]) -> str:
    for event in reversed(events):
        content = getattr(event, "content", None)
        texts = [p.text for p in (content.parts or [])] if content and content.parts else []
        text = "".join(t for t in texts if t)
        if text:
            return text
    return ""


async def main(mode: str, db: str, session: str, card_url: str) -> int:
    async with open_store(db) as store:
        runner = build_runner(store, card_url, f"worker-{mode}")
        if mode == "recover":
            report = await sweep_as_fresh_worker(runner)
            print("REPORT " + json.dumps(report), flush=True)
            return 0
        if mode == "answer":
            found = await runner.session_service.get_session(
                app_name=APP, user_id=USER, session_id=session
            )
            assert found is not None
            asked, call = next(
                (e, p.function_call)
                for e in reversed(found.events)
                for p in (e.content.parts or [] if e.content else [])
                if p.function_call and p.function_call.name == "ask_approval"
            )
            invocation_id: str | None = asked.invocation_id
            message: object = types.Content(
                role="user",
                parts=[
                    types.Part(
                        function_response=types.FunctionResponse(
                            id=call.id, name=call.name, response={"approved": True}
                        )
                    )
                ],
            )
        else:
            message = "research tides, please"
            invocation_id = None
        run = runner.run(
            user_id=USER, session_id=session, message=message, invocation_id=invocation_id
        )
        events = [e async for e in run]
        print("ANSWER " + last_text(events), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:5])))
