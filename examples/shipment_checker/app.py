"""An hourly shipment checker: a schedule that asks an agent, every hour, whether a
shipment has landed; each hour's check runs once across every worker, whatever dies.

The agent's one tool, ``check_shipment``, looks the shipment up at the carrier
(a real HTTP service: ``$DADK_CARRIER_URL``, the fake carrier of
:mod:`durable_adk.testing.services` in the tests), tagging each request with
its process id. It only reads, so it is marked idempotent: a re-driven check
may look again. The schedule is declared next to the app, where every entry
point finds it::

    durable-adk serve examples.shipment_checker.app:app
    durable-adk recover examples.shipment_checker.app:app

Each tick starts a run in a session of its own (``shipment-check@<hour>``);
``overlap="skip"`` skips an hour whose previous check still runs, and
``catch_up="latest"`` makes a fleet that was down for a night check once when
it is back, not once per missed hour. tests/crash/test_schedules_crash.py
kills a worker inside the firing of a tick and counts the carrier's lookups.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App

from durable_adk import Schedule, idempotent
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.services import ResourceClient

APP_NAME = "shipments"
SHIPMENT = "SHIP-1"

hourly_check = Schedule(
    name="shipment-check",
    message=f"Has shipment {SHIPMENT} landed?",
    user_id="logistics",
    every=timedelta(hours=1),
    overlap="skip",
    catch_up="latest",
)


@idempotent
def check_shipment(shipment_id: str) -> dict[str, Any]:
    """Looks a shipment up at the carrier (reads only)."""
    url = os.environ.get("DADK_CARRIER_URL")
    if not url:
        return {"shipment_id": shipment_id, "landed": False, "checked": False}
    carrier = ResourceClient(url, "shipments", caller={"pid": str(os.getpid())}, fenced=False)
    found = carrier.find(f"shipment:{shipment_id}")
    return {"shipment_id": shipment_id, "landed": found is not None, "checked": True}


def build_agent() -> LlmAgent:
    """The checker: calls the carrier, then says what it found (a scripted model)."""
    script = [
        Call("check_shipment", {"shipment_id": SHIPMENT}),
        Say(f"Shipment {SHIPMENT} has not landed yet."),
    ]
    return LlmAgent(name="checker", model=ScriptedModel(script), tools=[check_shipment])


app = App(name=APP_NAME, root_agent=build_agent())

durable_adk_schedules = [hourly_check]
