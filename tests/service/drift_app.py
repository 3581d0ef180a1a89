"""An app module deployed twice with different code, as `durable-adk serve` loads it.

``DRIFT_APP_CODE`` picks the code (the version string comes from the command
line's ``--app-version``, so one string can be deployed with either code):

* ``a``: ``charge(order_id, amount)`` journaled under ``charge:{order_id}``;
  ``ship(order_id)``, a plain tool (not idempotent) that books a shipment;
  ``ship_order(order_id)`` behind a confirmation; ``start_report(quarter)``,
  a long-running job keyed ``report:{quarter}``.
* ``b``: the same app after a careless refactoring: ``charge`` keyed
  ``charge:{order_id}:{amount}``, ``ship`` dropped and ``ship_order`` renamed
  ``dispatch_order``.

The tools act on the fake services named by ``DRIFT_PAYMENTS_URL`` and
``DRIFT_CARRIER_URL`` (each counts its acts). ``ship`` passes the crash point
``drift_app.after_ship`` once the carrier booked the shipment.

The scripted model reads the user's message: ``charge <order> <amount>``,
``ship <order>``, ``confirm <order>`` or ``report <quarter>`` makes the
matching call; the next turn answers ``done``.
"""

from __future__ import annotations

import os
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.llm_request import LlmRequest
from google.adk.tools.function_tool import FunctionTool

from durable_adk import journaled
from durable_adk.adk.tools.long_running import long_running_tool
from durable_adk.demo.service_app import EveryTurn, last_user_text
from durable_adk.testing import Call, Say, ScriptedModel, crash_point
from durable_adk.testing.fakes.clients import ResourceClient
from durable_adk.testing.scripted_model import Turn

APP_NAME = "shop"
CODE_ENV = "DRIFT_APP_CODE"


def _charges() -> ResourceClient:
    return ResourceClient(os.environ["DRIFT_PAYMENTS_URL"], "charges")


def _shipments() -> ResourceClient:
    return ResourceClient(os.environ["DRIFT_CARRIER_URL"], "shipments")


def _charge_tool(key: str) -> FunctionTool:
    def find_charge(idempotency_key: str) -> dict[str, Any] | None:
        return _charges().find(idempotency_key)

    @journaled(key=key, lookup=find_charge)
    def charge(order_id: str, amount: int, idempotency_key: str) -> dict[str, Any]:
        """Charges the customer for an order."""
        made = _charges().create(
            {"order_id": order_id, "customer": "ann", "amount": amount}, idempotency_key
        )
        return {"charge": made["id"]}

    return charge


def ship(order_id: str) -> dict[str, Any]:
    """Books a shipment (not idempotent: each call books one)."""
    made = _shipments().create({"order_id": order_id, "address": "1 Main St"}, f"ship-{order_id}")
    crash_point("drift_app.after_ship")
    return {"shipment": made["id"]}


def _shipping_tool(name: str) -> FunctionTool:
    def ship_confirmed(order_id: str) -> dict[str, Any]:
        made = _shipments().create(
            {"order_id": order_id, "address": "1 Main St"}, f"{name}-{order_id}"
        )
        return {"shipment": made["id"]}

    ship_confirmed.__name__ = name
    ship_confirmed.__doc__ = "Ships an order once a person confirmed it."
    return FunctionTool(ship_confirmed, require_confirmation=True)


def start_report(quarter: str) -> dict[str, Any]:
    """Starts building the quarter's report (a long-running job)."""
    return {"message": f"building the {quarter} report"}


def _first(request: LlmRequest) -> Turn:
    words = last_user_text(request).split()
    verb, order = [*words, "", ""][:2]
    if verb == "charge":
        return Call("charge", {"order_id": order, "amount": int(words[2])})
    if verb == "ship":
        return Call("ship", {"order_id": order})
    if verb == "confirm":
        return Call("ship_order", {"order_id": order})
    return Call("start_report", {"quarter": order})


def app() -> LlmAgent:
    """The shop's agent, in the code ``DRIFT_APP_CODE`` names."""
    code = os.environ.get(CODE_ENV, "a")
    tools: list[Any] = [
        long_running_tool(start_report, job_key="report:{quarter}", deadline=600),
    ]
    if code == "a":
        tools += [_charge_tool("charge:{order_id}"), ship, _shipping_tool("ship_order")]
    else:
        tools += [_charge_tool("charge:{order_id}:{amount}"), _shipping_tool("dispatch_order")]
    return LlmAgent(
        name=APP_NAME,
        model=ScriptedModel({APP_NAME: EveryTurn(_first, lambda _r: Say("done"))}),
        instruction="Run the shop.",
        tools=tools,
    )
