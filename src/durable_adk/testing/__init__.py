"""Test support: a scripted model, named crash points, a throwaway PostgreSQL.

Importing this package does not import PostgreSQL tooling; use
``durable_adk.testing.pg_cluster`` for that.
"""

from __future__ import annotations

from durable_adk.testing.crash import arm, crash_point
from durable_adk.testing.scripted_model import Call, Fail, Say, ScriptedModel, ScriptExhausted

__all__ = ["Call", "Fail", "Say", "ScriptExhausted", "ScriptedModel", "arm", "crash_point"]
