"""The payload limits, and the margin they keep below every reader of the log (issue 47).

The depth each reader of a stored event accepts is measured here, not
assumed: our own fast reader (``load_event``), pydantic-core's JSON parser,
ADK's ``Event.model_validate_json`` (its SqliteSessionService), ADK's
``json.loads`` then ``Event.model_validate`` (its DatabaseSessionService on
SQLite), and the writer (``Event.model_dump_json``). Each must accept the
deepest event the limits let through: a payload ``MAX_DEPTH_CEILING`` deep
in the deepest place an event holds one, plus :data:`EVENT_ENVELOPE`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from google.adk.events.event import Event
from google.genai import types
from hypothesis import given
from hypothesis import strategies as st

from durable_adk import errors
from durable_adk.adk.eventlog.stored import load_event
from durable_adk.limits import (
    DEFAULT_LIMITS,
    EVENT_ENVELOPE,
    MAX_DEPTH_CEILING,
    MESSAGE_ENVELOPE,
    PayloadLimits,
    depth_of,
    json_depth,
)
from payload_places import PLACES, answered, nested

READERS: dict[str, Callable[[str], object]] = {
    "durable_adk load_event": load_event,
    "pydantic-core from_json": __import__("pydantic_core").from_json,
    "ADK SqliteSessionService (model_validate_json)": Event.model_validate_json,
    "ADK DatabaseSessionService (json.loads, model_validate)": (
        lambda raw: Event.model_validate(json.loads(raw))
    ),
}


def _deepest_read(reader: Callable[[str], object]) -> int:
    """The deepest event (JSON nesting) ``reader`` loads, found by bisection."""

    # Built as text: the writer stops (near 260 levels) before some readers do.
    template = answered("PAYLOAD").model_dump_json(exclude_none=True)

    def loads(depth: int) -> bool:
        raw = template.replace('"PAYLOAD"', "[" * (depth - 6) + "1" + "]" * (depth - 6))
        assert json_depth(raw) == depth
        try:
            reader(raw)
        except (ValueError, RecursionError):  # ValidationError and JSON errors are ValueErrors
            return False
        return True

    low, high = 8, 2000
    assert loads(low) and not loads(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if loads(middle) else (low, middle)
    return low


@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_accepts_events_deeper_than_the_limits_let_through(reader: str) -> None:
    deepest = _deepest_read(READERS[reader])
    # pydantic-core stops at 200 levels; the limits stay well below.
    assert deepest >= 200
    assert deepest >= MAX_DEPTH_CEILING + EVENT_ENVELOPE + 32, (reader, deepest)


def test_the_writer_writes_events_deeper_than_the_limits_let_through() -> None:
    deepest = MAX_DEPTH_CEILING + EVENT_ENVELOPE + 32
    raw = answered(nested(deepest - 6)).model_dump_json(exclude_none=True)
    assert json_depth(raw) == deepest


@pytest.mark.parametrize("place", sorted(PLACES))
def test_the_deepest_accepted_payload_loads_in_every_reader_wherever_an_event_holds_it(
    place: str,
) -> None:
    limits = PayloadLimits(max_depth=MAX_DEPTH_CEILING)
    payload = nested(MAX_DEPTH_CEILING)
    limits.check(payload, "the payload")
    event = PLACES[place](payload)
    raw = event.model_dump_json(exclude_none=True)  # the writer goes this deep too
    limits.check_event(raw, "the event")
    assert json_depth(raw) <= MAX_DEPTH_CEILING + EVENT_ENVELOPE
    for name, reader in READERS.items():
        assert reader(raw) is not None, name


def test_the_issues_event_is_refused_by_the_last_guard_and_by_its_readers() -> None:
    raw = answered(nested(250)).model_dump_json(exclude_none=True)
    with pytest.raises(errors.PayloadTooDeep, match="max_payload_depth 64"):
        DEFAULT_LIMITS.check_event(raw, "the event")
    with pytest.raises(ValueError, match="recursion limit"):
        load_event(raw)


def test_limits_refuse_a_depth_no_reader_would_take_and_bad_sizes() -> None:
    PayloadLimits(max_depth=MAX_DEPTH_CEILING)
    for bad in ({"max_depth": MAX_DEPTH_CEILING + 1}, {"max_depth": 0}, {"max_bytes": 0}):
        with pytest.raises(errors.InvalidArgument):
            PayloadLimits(**bad)


def test_check_names_the_limit_and_counts_depth_and_bytes() -> None:
    limits = PayloadLimits(max_depth=3, max_bytes=20)
    limits.check(nested(3), "ok")
    limits.check("x" * 18, "ok")  # 20 bytes with its quotes
    with pytest.raises(errors.PayloadTooDeep, match=r"the thing .*\(max_payload_depth\)"):
        limits.check(nested(4), "the thing")
    with pytest.raises(errors.PayloadTooLarge, match=r"21 bytes .*\(max_payload_bytes\)"):
        limits.check("x" * 19, "the thing")
    with pytest.raises(errors.PayloadTooLarge):
        limits.check("é" * 10, "utf-8 counts bytes")  # 22 bytes
    # A model is measured as its JSON; an envelope does not count.
    content = types.Content(
        role="user",
        parts=[types.Part(function_response=types.FunctionResponse(response={"a": [1]}))],
    )
    PayloadLimits(max_depth=2).check(content, "a message", envelope=4)
    with pytest.raises(errors.PayloadTooDeep):
        PayloadLimits(max_depth=1).check(content, "a message", envelope=4)
    assert MESSAGE_ENVELOPE == 5
    # A model deeper than pydantic writes is too deep, not "not JSON".
    too_deep = types.Content(
        parts=[types.Part(function_response=types.FunctionResponse(response={"k": nested(300)}))]
    )
    with pytest.raises(errors.PayloadTooDeep):
        DEFAULT_LIMITS.check(too_deep, "a message", envelope=MESSAGE_ENVELOPE)
    # Deeper than Python's own recursion: measured without recursing, refused.
    with pytest.raises(errors.PayloadTooDeep):
        limits.check(nested(5000), "very deep")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=30,
)


@given(value=json_values, extra=st.integers(min_value=0, max_value=40))
def test_depth_of_a_value_equals_the_depth_of_its_json(value: Any, extra: int) -> None:
    value = nested(extra, value)
    text = json.dumps(value)
    assert depth_of(value, stop=10_000)[0] == json_depth(text)
    # brackets inside strings do not count
    assert json_depth(json.dumps(['["{[\\"', value])) == 1 + json_depth(text)
