"""An offline agent to try the worker service with, no API key needed::

    durable-adk serve durable_adk.demo.service_app:app --db sqlite:///demo.db \\
        --idempotent-tool check_stock

A stock assistant. On every user turn its scripted model calls
``check_stock(item)`` with the user's words, then answers from the tool's
result; it can go on for any number of turns. ``check_stock`` only reads, so
it is safe to run again after a crash (hence ``--idempotent-tool``). It takes
``DURABLE_ADK_DEMO_TOOL_SECONDS`` seconds (default 0) and passes the crash
point ``service_app.in_check_stock``, so a test can kill a worker in the
middle of a run.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any, overload

from google.adk.agents import LlmAgent
from google.adk.models.llm_request import LlmRequest

from durable_adk.testing import Call, Say, ScriptedModel, crash_point
from durable_adk.testing.scripted_model import Step, Turn

APP_NAME = "stock_assistant"
TOOL_SECONDS_ENV = "DURABLE_ADK_DEMO_TOOL_SECONDS"


async def check_stock(item: str) -> dict[str, Any]:
    """Reads how many of an item are in stock (read-only: safe to run again)."""
    await asyncio.sleep(float(os.environ.get(TOOL_SECONDS_ENV, "0")))
    crash_point("service_app.in_check_stock")
    return {"item": item, "in_stock": 7}


def last_user_text(request: LlmRequest) -> str:
    """The text of the user's last message (the scripted model's input)."""
    for content in reversed(request.contents):
        if content.role == "user":
            for part in content.parts or ():
                if part.text:
                    return part.text.strip()
    return "item"


def _last_stock(request: LlmRequest) -> dict[str, Any]:
    for content in reversed(request.contents):
        for part in content.parts or ():
            if part.function_response and part.function_response.name == "check_stock":
                return dict(part.function_response.response or {})
    return {}


def _ask(request: LlmRequest) -> Turn:
    return Call("check_stock", {"item": last_user_text(request)[:200]})


def _answer(request: LlmRequest) -> Turn:
    stock = _last_stock(request)
    return Say(f"{stock.get('in_stock', 0)} in stock for {stock.get('item', 'that')!r}.")


class EveryTurn(Sequence[Step]):
    """The same steps, in turn, for as many turns as asked (a scripted model's script)."""

    def __init__(self, *steps: Step) -> None:
        self.steps = steps

    def __len__(self) -> int:
        return 1_000_000

    @overload
    def __getitem__(self, index: int) -> Step: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Step]: ...

    def __getitem__(self, index: int | slice) -> Step | Sequence[Step]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self.steps[index % len(self.steps)]


def app() -> LlmAgent:
    """The stock assistant (a fresh agent and model per call)."""
    return LlmAgent(
        name=APP_NAME,
        model=ScriptedModel({APP_NAME: EveryTurn(_ask, _answer)}),
        instruction="Answer stock questions with check_stock.",
        tools=[check_stock],
    )
