"""Stored events rebuilt without validation equal their validation, or are validated.

Differential: every case compares ``load_event(raw)`` with ADK's own
``Event.model_validate_json(raw)`` through ``same_model`` (types all the way
down, set fields, values), and the error cases compare the exception types.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pydantic
import pytest
from google.adk.events.event import Event, NodeInfo
from google.adk.events.event_actions import EventActions, EventCompaction
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types
from hypothesis import given, settings
from hypothesis import strategies as st

from children import run_child
from durable_adk.adk.eventlog import stored as stored_events
from durable_adk.adk.eventlog.stored import load_event, same_model


def _content(*parts: types.Part, role: str = "model") -> types.Content:
    return types.Content(role=role, parts=list(parts))


def _shapes() -> dict[str, Event]:
    call = types.FunctionCall(id="c1", name="send_invoice", args={"amount": 12.5, "to": ["a"]})
    return {
        "user text": Event(
            invocation_id="i", author="user", content=_content(types.Part(text="hi"), role="user")
        ),
        "function call": Event(
            invocation_id="i",
            author="agent",
            content=_content(types.Part(function_call=call)),
            finish_reason=types.FinishReason.STOP,
            model_version="scripted",
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=10,
                total_token_count=12,
                prompt_tokens_details=[
                    types.ModalityTokenCount(modality=types.MediaModality.TEXT, token_count=10)
                ],
            ),
            avg_logprobs=-0.5,
        ),
        "long-running call": Event(
            invocation_id="i",
            author="agent",
            content=_content(types.Part(function_call=call)),
            long_running_tool_ids={"c1", "c2"},
        ),
        "function response and actions": Event(
            invocation_id="i",
            author="agent",
            branch="root.billing",
            content=_content(
                types.Part(
                    function_response=types.FunctionResponse(
                        id="c1", name="send_invoice", response={"ok": True, "n": None}
                    )
                ),
                role="user",
            ),
            actions=EventActions(
                state_delta={"x": 1, "app:y": [1, 2.5], "user:z": {"k": None}},
                artifact_delta={"report.txt": 3},
                transfer_to_agent="billing",
                escalate=False,
                skip_summarization=True,
                end_of_agent=True,
                agent_state={"step": 2},
                rewind_before_invocation_id="i0",
                requested_tool_confirmations={
                    "c1": ToolConfirmation(hint="pay?", confirmed=False, payload={"a": 1})
                },
            ),
        ),
        "compaction": Event(
            invocation_id="i",
            author="user",
            actions=EventActions(
                compaction=EventCompaction(
                    start_timestamp=1.0,
                    end_timestamp=2,
                    compacted_content=_content(types.Part(text="summary")),
                )
            ),
        ),
        "workflow node": Event(
            invocation_id="i",
            author="node",
            node_info=NodeInfo(path="wf/ask", output_for=["wf"], message_as_output=True),
            output={"answer": 42, "list": [1, "a", None]},
            isolation_scope="s",
        ),
        "text, thought and code": Event(
            invocation_id="i",
            author="agent",
            content=_content(
                types.Part(text="thinking", thought=True),
                types.Part(
                    executable_code=types.ExecutableCode(
                        code="print(1)", language=types.Language.PYTHON
                    )
                ),
                types.Part(
                    code_execution_result=types.CodeExecutionResult(
                        outcome=types.Outcome.OUTCOME_OK, output="1"
                    )
                ),
                types.Part(file_data=types.FileData(file_uri="gs://b/f", mime_type="text/plain")),
            ),
            partial=False,
            turn_complete=True,
            interrupted=False,
            error_code="E",
            error_message="boom",
            custom_metadata={"durable_adk": {"run": "r1", "epoch": 3}, "k": [1.5, True]},
        ),
        # Shapes the fast path refuses: they must come back validated, unchanged.
        "bytes": Event(
            invocation_id="i",
            author="agent",
            content=_content(types.Part(inline_data=types.Blob(mime_type="a/b", data=b"\x00\xff"))),
        ),
        "route": Event(invocation_id="i", author="node", actions=EventActions(route=["a", 1])),
        "auth config": Event(
            invocation_id="i",
            author="agent",
            actions=EventActions(
                requested_auth_configs={
                    "c1": {"auth_scheme": {"type": "http", "scheme": "bearer"}},
                }
            ),
        ),
    }


SHAPES = _shapes()
FAST = [name for name in SHAPES if name not in {"bytes", "route", "auth config"}]


def _stored(event: Event) -> str:
    """As DurableSessionService stores it."""
    return event.model_dump_json(exclude_none=True)


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts the rows that took ADK's validating path."""
    seen: list[str] = []
    real = Event.model_validate_json

    def counting(raw: Any, *args: Any, **kwargs: Any) -> Event:
        seen.append(raw)
        return real(raw, *args, **kwargs)

    monkeypatch.setattr(stored_events, "_VERIFY", False)
    monkeypatch.setattr(Event, "model_validate_json", counting)
    return seen


@pytest.mark.parametrize("name", list(SHAPES))
def test_every_shape_comes_back_as_validation_makes_it(name: str) -> None:
    raw = _stored(SHAPES[name])
    rebuilt = load_event(raw)
    assert same_model(rebuilt, Event.model_validate_json(raw))
    assert _stored(rebuilt) == raw


@pytest.mark.parametrize("name", FAST)
def test_the_common_shapes_take_the_fast_path(name: str, validations: list[str]) -> None:
    load_event(_stored(SHAPES[name]))
    assert validations == []


@pytest.mark.parametrize("name", ["bytes", "route", "auth config"])
def test_values_it_does_not_convert_are_validated_whole(name: str, validations: list[str]) -> None:
    raw = _stored(SHAPES[name])
    rebuilt = load_event(raw)
    assert validations == [raw]
    assert isinstance(rebuilt, Event)


def test_an_unknown_key_is_left_to_validation(validations: list[str]) -> None:
    data = json.loads(_stored(SHAPES["user text"]))
    data["field_of_a_newer_adk"] = 1
    raw = json.dumps(data)
    assert same_model(load_event(raw), Event.model_validate_json(raw))
    assert validations == [raw, raw]


def test_an_unknown_key_in_a_strict_model_fails_as_validation_does() -> None:
    data = json.loads(_stored(SHAPES["user text"]))
    data["content"]["parts"][0]["not_a_part_field"] = 1
    with pytest.raises(pydantic.ValidationError):
        Event.model_validate_json(json.dumps(data))
    with pytest.raises(pydantic.ValidationError):
        load_event(json.dumps(data))


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        "[]",
        '{"author": "a", "invocation_id": "i", "id": "e", "timestamp": 1, "content": "text"}',
        '{"author": "a", "invocation_id": "i", "id": "e", "timestamp": 1, "content": {"parts": 1}}',
        '{"author": "a", "invocation_id": "i", "id": "e", "timestamp": "soon"}',
        '{"author": "a", "invocation_id": "i", "id": "e", "timestamp": 1, "finish_reason": "NO"}',
        '{"author": 5, "invocation_id": "i", "id": "e", "timestamp": 1}',
        '{"author": "a", "invocation_id": "i", "id": "e", "timestamp": 1}',
    ],
)
def test_malformed_rows_fail_or_pass_exactly_as_validation(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stored_events, "_VERIFY", False)
    try:
        expected: Event | Exception = Event.model_validate_json(raw)
    except Exception as exc:
        expected = exc
    if isinstance(expected, Exception):
        with pytest.raises(type(expected)):
            load_event(raw)
    else:
        assert same_model(load_event(raw), expected)


def test_a_model_with_an_unreviewed_validator_is_never_trusted() -> None:
    class Checked(pydantic.BaseModel):
        value: int

        @pydantic.field_validator("value")
        @classmethod
        def _double(cls, v: int) -> int:
            return v * 2

    class Wrapped(pydantic.BaseModel):
        inner: Checked

    plan = stored_events._plan(Wrapped)
    with pytest.raises(stored_events._Untrusted):
        plan.build({"inner": {"value": 1}})


def test_verification_is_on_for_the_whole_suite() -> None:
    # tests/conftest.py turns it on before durable_adk is imported, so every
    # read of a stored event in this suite is compared with its validation.
    assert stored_events._verifying()


_COUNT_VALIDATIONS = """
from google.adk.events.event import Event
from durable_adk.adk.eventlog.stored import load_event
seen = []
real = Event.model_validate_json
Event.model_validate_json = lambda raw, *a, **k: (seen.append(raw), real(raw, *a, **k))[1]
load_event(Event(author="a", invocation_id="i").model_dump_json(exclude_none=True))
print(len(seen))
"""


@pytest.mark.parametrize("switch", [None, "0", "1"])
def test_a_child_follows_its_own_environment_even_forked_from_an_importer(
    switch: str | None,
) -> None:
    # tests/children.py forks the child from a process that imported this
    # module with the switch on (tests/conftest.py): the child's own
    # environment decides whether it validates.
    env = {k: v for k, v in os.environ.items() if k != stored_events.VERIFY_ENV}
    if switch is not None:
        env[stored_events.VERIFY_ENV] = switch
    done = run_child(
        [sys.executable, "-c", _COUNT_VALIDATIONS], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1" if switch == "1" else "0"]


def test_same_model_tells_types_apart() -> None:
    raw = _stored(SHAPES["function call"])
    event = Event.model_validate_json(raw)
    assert same_model(event, Event.model_validate_json(raw))
    changed = event.model_copy(deep=True)
    changed.finish_reason = "STOP"  # type: ignore[assignment]
    assert changed == event or changed != event  # pydantic may compare either way
    assert not same_model(changed, event)
    as_list = event.model_copy(deep=True)
    as_list.long_running_tool_ids = ["c1"]  # type: ignore[assignment]
    assert not same_model(as_list, event.model_copy(update={"long_running_tool_ids": {"c1"}}))


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    args=st.dictionaries(st.text(max_size=6), _json, max_size=4),
    state=st.dictionaries(st.text(min_size=1, max_size=6), _json, max_size=4),
    text=st.text(max_size=20),
    author=st.text(min_size=1, max_size=8),
    timestamp=st.floats(min_value=0, max_value=4e9),
)
def test_random_calls_and_state_come_back_as_validation_makes_them(
    args: dict[str, Any], state: dict[str, Any], text: str, author: str, timestamp: float
) -> None:
    event = Event(
        invocation_id="i",
        author=author,
        timestamp=timestamp,
        content=_content(
            types.Part(text=text),
            types.Part(function_call=types.FunctionCall(id="c", name="tool", args=args)),
        ),
        actions=EventActions(state_delta=state),
    )
    raw = _stored(event)
    assert same_model(load_event(raw), Event.model_validate_json(raw))


def test_a_large_batch_pauses_the_collector_and_always_gives_it_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``load_events`` builds a big batch with the cyclic collector off, and turns it on again
    even when a row fails; a small batch, or a collector already off, is left alone."""
    import gc

    seen: list[bool] = []
    real = stored_events.load_event

    def spy(raw: str | bytes) -> Event:
        seen.append(gc.isenabled())
        return real(raw)

    monkeypatch.setattr(stored_events, "load_event", spy)
    row = Event(author="user", invocation_id="i").model_dump_json()
    big = stored_events.GC_PAUSE_FROM
    assert len(stored_events.load_events([row] * big, count=big)) == big
    assert seen == [False] * big and gc.isenabled()
    seen.clear()
    assert len(stored_events.load_events([row] * 3, count=3)) == 3
    assert seen == [True] * 3
    with pytest.raises(pydantic.ValidationError):
        stored_events.load_events([row] * (big - 1) + ["{not json"], count=big)
    assert gc.isenabled()
    gc.disable()
    try:
        stored_events.load_events([row] * big, count=big)
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()
