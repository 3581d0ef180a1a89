"""An app with a sleep in each of two ParallelAgent branches (issue 41): refused when loaded.

``durable-adk serve parallel_sleeps_app:app`` (run from this folder) must
refuse it before serving anything; ``one_branch`` (a sleep in one branch
only) is accepted.
"""

from __future__ import annotations

import warnings

from google.adk.agents import LlmAgent, ParallelAgent
from google.adk.apps import App
from google.adk.models.llm_request import LlmRequest

from durable_adk.adk.loops.sleep import sleep_tool
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.scripted_model import Turn

WOKE = "awake, acting now"


def reply_to_sleep(request: LlmRequest) -> Turn:
    """After the sleep's first answer: say so; after the wake-up: act."""
    last = request.contents[-1].parts or [] if request.contents else []
    answers = [p.function_response.response or {} for p in last if p.function_response]
    return Say(WOKE if any(a.get("status") == "woke" for a in answers) else "sleeping")


MODEL = ScriptedModel(
    {
        "north": [Call("durable_sleep", {"seconds": 5}), reply_to_sleep],
        "south": [Call("durable_sleep", {"seconds": 9}), reply_to_sleep],
        "east": [Say("east is done")],
    }
)


def branches(*, both_sleep: bool) -> ParallelAgent:
    north = LlmAgent(name="north", model=MODEL, tools=[sleep_tool()])
    south = (
        LlmAgent(name="south", model=MODEL, tools=[sleep_tool()])
        if both_sleep
        else LlmAgent(name="east", model=MODEL)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return ParallelAgent(name="fan_out", sub_agents=[north, south])


app = App(name="parallel_sleeps", root_agent=branches(both_sleep=True))
one_branch = App(name="parallel_sleeps", root_agent=branches(both_sleep=False))
