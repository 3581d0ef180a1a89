"""Imported once by the crash-test fork server (see ``tests/children.py``).

Everything a crash-test child needs and is slow to import: ADK's runner, its
agents and tools, google-genai, and durable-adk's own ADK layer.
"""

from __future__ import annotations

import google.adk.agents
import google.adk.runners
import google.adk.tools
import google.genai.types

import durable_adk.adk.loops.recovery
import durable_adk.adk.runner
import durable_adk.adk.tools.journaling
import durable_adk.adk.tools.saga_agent
import durable_adk.store
import durable_adk.testing.scripted_model
import durable_adk.testing.services

__all__ = ["durable_adk", "google"]
