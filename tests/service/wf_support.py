"""A real ADK Workflow whose node needs a person's approval, for the inbox tests.

``shipping`` is a graph ``START -> intake -> ship``: ``intake`` reads the
user's words into state as the order id, and ``ship`` is a FunctionNode built
with ``require_confirmation=True``. ADK pauses the invocation on the node's
confirmation request: an ``adk_request_input`` call whose id names the node's
path (``wf_tool_confirmation:shipping@1/ship@1``, a ``/`` in it) and whose
answer is a ``ToolConfirmation``. ``SHIPPED`` counts the node's acts (the
workers of these tests run in the test's own process).
"""

from __future__ import annotations

from typing import Any

from google.adk.agents.context import Context
from google.adk.workflow import FunctionNode, Workflow
from google.genai import types

APP_NAME = "shipping"
SHIPPED: list[str] = []


def intake(ctx: Context, node_input: Any) -> dict[str, str]:
    """Takes the user's words as the order id."""
    text = ""
    if isinstance(node_input, types.Content):
        text = "".join(p.text or "" for p in node_input.parts or ())
    ctx.state["order_id"] = text
    return {"order_id": text}


def ship(order_id: str) -> dict[str, str]:
    """Ships the order: runs only once a person approved it."""
    SHIPPED.append(order_id)
    return {"shipped": order_id}


def app() -> Workflow:
    """A fresh ``shipping`` workflow."""
    return Workflow(
        name=APP_NAME,
        edges=[
            (
                "START",
                intake,
                FunctionNode(func=ship, rerun_on_resume=True, require_confirmation=True),
            )
        ],
    )


def outputs(detail: dict[str, Any]) -> list[Any]:
    """The node outputs in a run's events (``GET /v1/runs/{run}``)."""
    return [item["event"]["output"] for item in detail["events"] if item["event"].get("output")]
