"""An LlmAgent with a Python tool, run through ADK's Runner on DurableSessionService.

On both backends: the run completes, and a fresh process that loads the session
sees the same events and the same state. A second test kills the agent's
process for real (os._exit(137) at a crash point inside a tool) and checks what
a fresh process finds.
"""

from __future__ import annotations

import json
import os
import sys

from google.adk.runners import Runner
from google.genai import types

from children import run_child
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.demo import quickstart
from durable_adk.store import open_store
from durable_adk.testing import arm


def fresh_process_view(url: str, session_id: str) -> dict[str, object]:
    done = run_child(
        [
            sys.executable,
            "-m",
            "durable_adk.demo.quickstart",
            "show",
            "--db",
            url,
            "--session",
            session_id,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return dict(json.loads(done.stdout))


async def test_agent_run_and_reload_in_fresh_process(store_url: str) -> None:
    async with open_store(store_url) as store:
        sessions = DurableSessionService(store)
        runner = Runner(app=quickstart.build_app(), session_service=sessions)
        await sessions.create_session(
            app_name=quickstart.APP_NAME, user_id=quickstart.USER_ID, session_id="e2e"
        )
        message = types.Content(role="user", parts=[types.Part(text="Where is order A-42?")])
        seen = [
            e
            async for e in runner.run_async(
                user_id=quickstart.USER_ID, session_id="e2e", new_message=message
            )
        ]
        assert seen[-1].content and seen[-1].content.parts
        assert "Tuesday" in (seen[-1].content.parts[0].text or "")
        here = await sessions.get_session(
            app_name=quickstart.APP_NAME, user_id=quickstart.USER_ID, session_id="e2e"
        )
        assert here is not None
    there = fresh_process_view(store_url, "e2e")
    assert there["state"] == here.state == {"last_order": "A-42", "delivery_day": "Tuesday"}
    events = there["events"]
    assert isinstance(events, list)
    assert [e["author"] for e in events] == [e.author for e in here.events]
    assert [e["what"] for e in events] == [
        quickstart.describe(json.loads(e.model_dump_json(exclude_none=True))) for e in here.events
    ]
    assert len(events) == 6


async def test_killed_mid_tool_leaves_every_committed_event(store_url: str) -> None:
    async with open_store(store_url):
        pass  # create the schema before the child races to do it
    child = run_child(
        [
            sys.executable,
            "-m",
            "durable_adk.demo.quickstart",
            "run",
            "--db",
            store_url,
            "--session",
            "k1",
        ],
        env=arm(dict(os.environ), "demo.in_book_delivery"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 137, child.stderr
    there = fresh_process_view(store_url, "k1")
    events = there["events"]
    assert isinstance(events, list)
    assert [e["what"].split("(")[0] for e in events] == [
        "text: Where is order A-42?",
        "call check_order",
        'response check_order -> {"order_id": "A-42", "status": "packed", "items": 3}',
        "call book_delivery",
    ]
    assert there["state"] == {"last_order": "A-42"}
