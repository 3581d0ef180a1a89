"""Where an event holds a payload from outside, for the payload-limit tests (issue 47)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.genai import types


def nested(depth: int, leaf: Any = 1) -> Any:
    """A value ``depth`` levels deep (objects and arrays in turn), ``leaf`` at the bottom."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def answered(payload: Any) -> Event:
    """An event answering a call, the payload wrapped as the library wraps an answer."""
    response = {"confirmed": True, "payload": payload}
    part = types.Part(
        function_response=types.FunctionResponse(id="c1", name="tool", response=response)
    )
    return Event(
        author="user", invocation_id="i1", content=types.Content(role="user", parts=[part])
    )


def with_state(payload: Any) -> Event:
    """An event setting the state key ``k``."""
    return Event(author="a", invocation_id="i1", actions=EventActions(state_delta={"k": payload}))


def called(payload: Any) -> Event:
    """A model's call with the payload as an argument."""
    part = types.Part(function_call=types.FunctionCall(id="c1", name="tool", args={"k": payload}))
    return Event(author="a", invocation_id="i1", content=types.Content(role="model", parts=[part]))


PLACES: dict[str, Callable[[Any], Event]] = {
    "answer": answered,
    "state": with_state,
    "call": called,
}
