"""A saga whose middle stage sleeps (issue 41), served by ``durable-adk serve saga_sleep_app:app``.

``reserve`` reserves a lamp at the fake inventory service
(``$DADK_INVENTORY_URL``), ``cool_off`` sleeps ten minutes, ``ship`` fails:
the saga must wake, go on, and release the reservation once.
"""

from __future__ import annotations

import os
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.llm_request import LlmRequest

from durable_adk.adk.loops.sleep import sleep_tool
from durable_adk.adk.tools.saga_agent import SagaSequence, SagaStage
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.scripted_model import Turn
from durable_adk.testing.services import ResourceClient, ServiceError

APP_NAME = "saga_sleep"


def inventory() -> ResourceClient:
    return ResourceClient(os.environ["DADK_INVENTORY_URL"], "reservations")


def reserve(state: dict[str, Any], key: str) -> Any:
    return inventory().create({"order_id": "O-1", "sku": "LAMP", "quantity": 1}, key)


def release(record: dict[str, Any], key: str) -> None:
    try:
        inventory().act(record["reservation_id"], "release", key)
    except ServiceError as exc:
        if exc.status not in (404, 409):
            raise


def ship(state: dict[str, Any], key: str) -> Any:
    raise RuntimeError("the carrier refused the parcel")


def after_sleep(request: LlmRequest) -> Turn:
    last = request.contents[-1].parts or [] if request.contents else []
    woke = any(
        (p.function_response.response or {}).get("status") == "woke"
        for p in last
        if p.function_response
    )
    return Say("cooled off" if woke else "cooling off")


cool_off = LlmAgent(
    name="cool_off",
    model=ScriptedModel({"cool_off": [Call("durable_sleep", {"seconds": 600}), after_sleep]}),
    tools=[sleep_tool()],
)
saga = SagaSequence(
    "order",
    [
        SagaStage(
            name="reserve",
            action=reserve,
            find=lambda key: inventory().find(key),
            undo_of=lambda r: {"reservation_id": r["id"]},
        ),
        cool_off,
        SagaStage(name="ship", action=ship, find=lambda key: None, uncompensatable=True),
    ],
    {"reserve": release},
)
app = App(name=APP_NAME, root_agent=saga)
