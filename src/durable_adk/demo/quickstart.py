"""Quickstart demo: an agent killed mid-run, its history read by a fresh process.

``run`` drives an LlmAgent with two Python tools through ADK's Runner on
DurableSessionService; the crash point ``demo.in_book_delivery`` (armed by the
parent) kills the process with exit code 137 inside the second tool. ``show``
runs in a new process, loads the session from the store and prints, as JSON,
every event that survived and the state folded from them.

Run by ``durable-adk demo``; also usable directly::

    python -m durable_adk.demo.quickstart run --db sqlite:///demo.db --session s1
    python -m durable_adk.demo.quickstart show --db sqlite:///demo.db --session s1
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.runners import Runner
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.store import open_store
from durable_adk.testing import Call, Say, ScriptedModel, crash_point

APP_NAME = "quickstart"
USER_ID = "demo-user"


def check_order(order_id: str, tool_context: ToolContext) -> dict[str, Any]:
    """Looks up an order's status."""
    tool_context.state["last_order"] = order_id
    return {"order_id": order_id, "status": "packed", "items": 3}


def book_delivery(order_id: str, day: str, tool_context: ToolContext) -> dict[str, Any]:
    """Books a delivery slot for an order."""
    crash_point("demo.in_book_delivery")
    tool_context.state["delivery_day"] = day
    return {"order_id": order_id, "day": day, "booked": True}


def build_app() -> App:
    """The demo app: one assistant, two tools, a scripted model."""
    model = ScriptedModel(
        {
            "assistant": [
                Call("check_order", {"order_id": "A-42"}),
                Call("book_delivery", {"order_id": "A-42", "day": "Tuesday"}),
                Say("Order A-42 is packed (3 items); delivery is booked for Tuesday."),
            ]
        }
    )
    agent = LlmAgent(
        name="assistant",
        model=model,
        instruction="Help the customer with their order.",
        tools=[check_order, book_delivery],
    )
    return App(name=APP_NAME, root_agent=agent)


async def run(db: str, session_id: str) -> None:
    """Drives one turn; dies at the armed crash point, if any."""
    async with open_store(db) as store:
        sessions = DurableSessionService(store)
        runner = Runner(app=build_app(), session_service=sessions)
        await sessions.create_session(app_name=APP_NAME, user_id=USER_ID, session_id=session_id)
        message = types.Content(role="user", parts=[types.Part(text="Where is order A-42?")])
        async for _event in runner.run_async(
            user_id=USER_ID, session_id=session_id, new_message=message
        ):
            pass


def describe(event_json: dict[str, Any]) -> str:
    """One line saying what an event holds."""
    parts = (event_json.get("content") or {}).get("parts") or []
    bits = []
    for part in parts:
        if part.get("text"):
            bits.append(f"text: {part['text']}")
        if part.get("function_call"):
            call = part["function_call"]
            bits.append(f"call {call['name']}({json.dumps(call.get('args') or {})})")
        if part.get("function_response"):
            resp = part["function_response"]
            bits.append(f"response {resp['name']} -> {json.dumps(resp.get('response'))}")
    return "; ".join(bits) or "(no content)"


async def show(db: str, session_id: str) -> dict[str, Any]:
    """Loads the session in this (fresh) process and returns what survived."""
    async with open_store(db) as store:
        sessions = DurableSessionService(store)
        session = await sessions.get_session(
            app_name=APP_NAME, user_id=USER_ID, session_id=session_id
        )
        if session is None:
            return {"found": False}
        events = [json.loads(e.model_dump_json(exclude_none=True)) for e in session.events]
        return {
            "found": True,
            "events": [
                {"seq": i + 1, "author": e["author"], "what": describe(e)}
                for i, e in enumerate(events)
            ],
            "state": session.state,
        }


def main() -> None:
    """Command line of the child processes the demo starts."""
    parser = argparse.ArgumentParser(prog="python -m durable_adk.demo.quickstart")
    parser.add_argument("action", choices=["run", "show"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--session", required=True)
    args = parser.parse_args()
    if args.action == "run":
        asyncio.run(run(args.db, args.session))
    else:
        print(json.dumps(asyncio.run(show(args.db, args.session))))


if __name__ == "__main__":
    main()
