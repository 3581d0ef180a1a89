"""An app module whose schedules depend on the code deployed: ``$DADK_SCHEDULES``
names the set (``1.0``: ``pulse`` every 3 s; ``2.0``: ``pulse`` every 2 s with
another message, and a new ``fresh`` every 2 s). The version itself comes from
``durable-adk serve --app-version``, as a deploy sets it."""

from __future__ import annotations

import os
from datetime import timedelta

from google.adk.agents import LlmAgent

from durable_adk.schedules import Schedule
from durable_adk.testing import Say, ScriptedModel

root_agent = LlmAgent(name="root", model=ScriptedModel([Say("pulse taken")]))

SETS = {
    "1.0": [
        Schedule(name="pulse", message="pulse of 1.0", user_id="ops", every=timedelta(seconds=3))
    ],
    "2.0": [
        Schedule(name="pulse", message="pulse of 2.0", user_id="ops", every=timedelta(seconds=2)),
        Schedule(name="fresh", message="fresh of 2.0", user_id="ops", every=timedelta(seconds=2)),
    ],
}


def durable_adk_schedules() -> list[Schedule]:
    """The set the deployed code declares."""
    return SETS[os.environ.get("DADK_SCHEDULES", "1.0")]
