"""durable-adk: Google ADK agents that survive crashes."""

from __future__ import annotations

__version__ = "0.1.0"
