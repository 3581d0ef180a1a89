"""An offline agent whose tool needs a person's approval, to try the interrupts inbox::

    durable-adk serve durable_adk.demo.approvals_app:app --db sqlite:///demo.db

On every user turn its scripted model asks to ``ship_order(order_id)`` with
the user's words as the order id. The tool requires confirmation: ADK pauses
the invocation on an ``adk_request_confirmation`` call, the run ends PAUSED,
and the call waits in the inbox (``GET /v1/interrupts``, ``durable-adk
interrupts list``, the dashboard). Approved, the tool ships the order and the
model says so; denied, the model says it was not shipped.
"""

from __future__ import annotations

from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.llm_request import LlmRequest
from google.adk.tools.function_tool import FunctionTool

from durable_adk.demo.service_app import EveryTurn, last_user_text
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.scripted_model import Turn

APP_NAME = "approvals"


def ship_order(order_id: str) -> dict[str, Any]:
    """Ships an order (needs a person's approval first)."""
    return {"order_id": order_id, "shipped": True}


def _shipped(request: LlmRequest) -> bool:
    for content in reversed(request.contents):
        for part in content.parts or ():
            answer = part.function_response
            if answer and answer.name == "ship_order":
                return bool((answer.response or {}).get("shipped"))
    return False


def _ask(request: LlmRequest) -> Turn:
    return Call("ship_order", {"order_id": last_user_text(request)[:200]})


def _answer(request: LlmRequest) -> Turn:
    return Say("Shipped." if _shipped(request) else "Not shipped: it was not approved.")


def app() -> LlmAgent:
    """The approvals agent (a fresh agent and model per call)."""
    return LlmAgent(
        name=APP_NAME,
        model=ScriptedModel({APP_NAME: EveryTurn(_ask, _answer)}),
        instruction="Ship orders with ship_order; a person approves each.",
        tools=[FunctionTool(ship_order, require_confirmation=True)],
    )
