"""An app whose tools need an artifact, a memory and a credential service.

Its module names them in ``durable_adk_services()``, the one place every
entry point (``durable-adk serve``, ``durable-adk recover``, ``adk
api_server`` with DurableRunsPlugin) takes them from. The artifacts live in a
folder (``$DADK_ARTIFACTS``, ADK's ``FileArtifactService``), so what the first
tool saved is still there for the process that recovers the run; memory and
credentials are ADK's in-memory services.

``take_order`` saves the order as an artifact, puts the session in memory and
saves the customer's API key; ``ship_order`` (idempotent, where the crash
tests kill the process: crash point ``services_app.in_ship``) reads all three
back. Without the services, ``ship_order`` fails ("Memory service is not
available") and the run with it.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from fastapi.openapi.models import APIKey, APIKeyIn
from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.artifacts.file_artifact_service import FileArtifactService
from google.adk.auth.auth_credential import AuthCredential, AuthCredentialTypes
from google.adk.auth.auth_tool import AuthConfig
from google.adk.auth.credential_service.in_memory_credential_service import (
    InMemoryCredentialService,
)
from google.adk.memory import InMemoryMemoryService
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from durable_adk.adk.services.app_services import AppServices
from durable_adk.adk.shapes.marks import idempotent
from durable_adk.faults import crash_point
from durable_adk.testing import Call, Say, ScriptedModel

APP_NAME = "services_app"
FINAL = "Shipped the lamp."
API_KEY = "key-of-ann"


def durable_adk_services() -> AppServices:
    """The app's services (the entry points find this function by its name)."""
    return AppServices(
        artifact_service=FileArtifactService(root_dir=os.environ["DADK_ARTIFACTS"]),
        memory_service=InMemoryMemoryService(),
        credential_service=InMemoryCredentialService(),
    )


def _auth() -> AuthConfig:
    return AuthConfig(
        auth_scheme=APIKey(**{"in": APIKeyIn.header}, name="X-Api-Key"),
        exchanged_auth_credential=AuthCredential(
            auth_type=AuthCredentialTypes.API_KEY, api_key=API_KEY
        ),
        credential_key="shop-api-key",
    )


async def take_order(item: str, tool_context: ToolContext) -> dict[str, Any]:
    """Notes the order: as an artifact, in memory, with the customer's API key."""
    version = await tool_context.save_artifact("order.txt", types.Part(text=item))
    await tool_context.add_session_to_memory()
    await tool_context.save_credential(_auth())
    return {"version": version}


@idempotent
async def ship_order(tool_context: ToolContext) -> dict[str, Any]:
    """Ships the order noted before: reads the artifact, the memory and the key."""
    crash_point("services_app.in_ship")
    order = await tool_context.load_artifact("order.txt")
    await tool_context.add_session_to_memory()
    found = await tool_context.search_memory("lamp")
    credential = await tool_context.load_credential(_auth())
    if credential is None:  # a fresh process: in-memory credentials start empty
        await tool_context.save_credential(_auth())
        credential = await tool_context.load_credential(_auth())
    return {
        "order": order.text if order else None,
        "memories": len(found.memories),
        "api_key": credential.api_key if credential else None,
        "pid": os.getpid(),
    }


model = ScriptedModel(
    {"clerk": [Call("take_order", {"item": "lamp"}), Call("ship_order", {}), Say(FINAL)]}
)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # ADK flags resumability as experimental
    resumable = ResumabilityConfig(is_resumable=True)
app = App(
    name=APP_NAME,
    root_agent=LlmAgent(name="clerk", model=model, tools=[take_order, ship_order]),
    resumability_config=resumable,
)
