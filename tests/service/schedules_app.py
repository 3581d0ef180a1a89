"""An app module that declares its schedules, as `durable-adk serve` loads it."""

from __future__ import annotations

from datetime import timedelta

from google.adk.agents import LlmAgent

from durable_adk.schedules import Schedule
from durable_adk.testing import Say, ScriptedModel

root_agent = LlmAgent(name="root", model=ScriptedModel([Say("Weekly report sent.")]))

durable_adk_schedules = [
    Schedule(
        name="weekly-report",
        message="send the weekly report",
        user_id="ops",
        cron="0 9 * * FRI",
        timezone="Europe/Berlin",
    ),
    Schedule(name="heartbeat", message="ping", user_id="ops", every=timedelta(hours=1)),
]
