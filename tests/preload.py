"""Imported once by the tests' fork server (see ``tests/children.py``).

Everything a test's child process needs and is slow to import: ADK's runner,
its agents and tools, google-genai, durable-adk's own ADK layer, and what a
``durable-adk serve`` worker adds (the CLI, the service, FastAPI, uvicorn and
its HTTP protocol, the A2A SDK's server when it is installed). Importing opens
nothing: no database, event loop or thread.
"""

from __future__ import annotations

import importlib.util

import fastapi
import google.adk.agents
import google.adk.runners
import google.adk.tools
import google.genai.types
import httpx
import typer
import uvicorn
import uvicorn.lifespan.on
import uvicorn.loops.asyncio
import uvicorn.protocols.http.h11_impl
import uvicorn.protocols.websockets.auto

import durable_adk.adk.loops.recovery
import durable_adk.adk.runner
import durable_adk.adk.tools.journaling
import durable_adk.adk.tools.saga_agent
import durable_adk.cli.main
import durable_adk.demo.service_app
import durable_adk.service.server
import durable_adk.service.settings
import durable_adk.store
import durable_adk.testing.scripted_model
import durable_adk.testing.services

if importlib.util.find_spec("a2a") is not None:  # the [a2a] extra
    import durable_adk.a2a.mount

__all__ = ["durable_adk", "fastapi", "google", "httpx", "typer", "uvicorn"]
