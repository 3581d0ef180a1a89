"""Test support: a scripted model, named crash points, fake outside services.

Names are imported on first use, so a process that needs only a crash point or
a fake service (a child process of a test) does not pay for importing ADK.
``durable_adk.testing.pg_cluster`` (a throwaway PostgreSQL) is imported apart.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the real names, for type checkers
    from durable_adk.testing.crash import arm, crash_point
    from durable_adk.testing.scripted_model import Call, Fail, Say, ScriptedModel, ScriptExhausted
    from durable_adk.testing.services import FakeService

_LAZY = {
    "arm": "durable_adk.testing.crash",
    "crash_point": "durable_adk.testing.crash",
    "Call": "durable_adk.testing.scripted_model",
    "Fail": "durable_adk.testing.scripted_model",
    "Say": "durable_adk.testing.scripted_model",
    "ScriptExhausted": "durable_adk.testing.scripted_model",
    "ScriptedModel": "durable_adk.testing.scripted_model",
    "FakeService": "durable_adk.testing.services",
}

__all__ = [
    "Call",
    "Fail",
    "FakeService",
    "Say",
    "ScriptExhausted",
    "ScriptedModel",
    "arm",
    "crash_point",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
