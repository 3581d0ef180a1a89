"""Key drift (issue 41): journal entries and jobs of open calls that new code keys differently.

The function is pure: events, the new code's definition and the invocation's
journal entries and jobs in, the items that drifted out. The crash tests in
``tests/service/test_drift_serve.py`` show the same through real workers.
"""

from __future__ import annotations

from typing import Any

from google.adk.events.event import Event
from google.adk.tools.function_tool import FunctionTool
from google.genai import types

from durable_adk import journaled
from durable_adk.adk.runs.drift import drift, key_drift
from durable_adk.adk.runs.fingerprint import Known
from durable_adk.effect_tables.jobs import Job, JobState
from durable_adk.effect_tables.journal import JournalEntry, JournalStatus

INV = "e-1"


def charge_tool(key: str) -> FunctionTool:
    @journaled(key=key)
    def charge(order_id: str, amount: int, idempotency_key: str) -> dict[str, Any]:
        """Charges."""
        return {"key": idempotency_key}

    return charge


def known(tool: FunctionTool) -> Known:
    """What code with this one journaled tool knows (its template read by the one walk)."""
    return Known(
        agents=frozenset({"shop"}),
        tools=frozenset({tool.name}),
        journal_keys=Known.of(tool).journal_keys,
    )


def call_event(call_id: str, name: str, args: dict[str, Any]) -> Event:
    call = types.FunctionCall(id=call_id, name=name, args=args)
    return Event(
        invocation_id=INV,
        author="shop",
        content=types.Content(role="model", parts=[types.Part(function_call=call)]),
    )


def answer_event(call_id: str, name: str) -> Event:
    answer = types.FunctionResponse(id=call_id, name=name, response={"ok": True})
    return Event(
        invocation_id=INV,
        author="shop",
        content=types.Content(role="user", parts=[types.Part(function_response=answer)]),
    )


def entry(key: str, call_id: str, template: str | None, tool: str = "charge") -> JournalEntry:
    return JournalEntry(
        key=key,
        tool_name=tool,
        status=JournalStatus.INTENT,
        result=None,
        run_id="r-1",
        run_epoch=1,
        invocation_id=INV,
        function_call_id=call_id,
        created_at=0.0,
        updated_at=0.0,
        key_template=template,
    )


def job(job_id: str, call_id: str, request: dict[str, Any], *, timer: bool = False) -> Job:
    return Job(
        job_id=job_id, tool_name="report", request=request, app_name="shop", user_id="u",
        session_id="s", invocation_id=INV, function_call_id=call_id, state=JobState.STARTED,
        result=None, progress=None, progress_at=None, progress_sent=None, progress_sent_at=None,
        deadline_at=0.0, submitted_at=None, resume_owner=None, resume_epoch=0,
        resume_until=None, resume_run_id=None, resumed_at=None, created_at=0.0,
        updated_at=0.0, completed_at=None, timer=timer,
    )  # fmt: skip


ARGS = {"order_id": "o-1", "amount": 40}


def test_an_entry_keyed_by_another_template_names_the_tool_and_both_templates() -> None:
    events = [call_event("c-1", "charge", ARGS)]
    new = known(charge_tool("charge:{order_id}:{amount}"))
    found = key_drift(events, INV, new, [entry("charge:o-1", "c-1", "charge:{order_id}")])
    assert found == [
        "journaled tool 'charge' keyed 'charge:{order_id}' (journal entry 'charge:o-1') "
        "where this code keys it 'charge:{order_id}:{amount}'"
    ]
    # The same template: nothing drifted.
    same = known(charge_tool("charge:{order_id}"))
    assert key_drift(events, INV, same, [entry("charge:o-1", "c-1", "charge:{order_id}")]) == []


def test_an_entry_written_before_templates_were_kept_is_compared_by_the_key_computed() -> None:
    events = [call_event("c-1", "charge", ARGS)]
    new = known(charge_tool("charge:{order_id}:{amount}"))
    (item,) = key_drift(events, INV, new, [entry("charge:o-1", "c-1", None)])
    assert "'charge:o-1'" in item and "'charge:o-1:40'" in item
    assert key_drift(events, INV, new, [entry("charge:o-1:40", "c-1", None)]) == []


def test_a_call_the_log_answered_is_history_and_a_saga_act_has_no_template() -> None:
    events = [call_event("c-1", "charge", ARGS), answer_event("c-1", "charge")]
    new = known(charge_tool("charge:{order_id}:{amount}"))
    assert key_drift(events, INV, new, [entry("charge:o-1", "c-1", "charge:{order_id}")]) == []
    saga_act = entry(f"{INV}/order/reserve", "c-9", None, tool="reserve")
    assert key_drift([], INV, new, [saga_act]) == []


def test_a_tool_no_longer_journaled_is_drift() -> None:
    new = Known(agents=frozenset({"shop"}), tools=frozenset({"charge"}))
    events = [call_event("c-1", "charge", ARGS)]
    (item,) = key_drift(events, INV, new, [entry("charge:o-1", "c-1", "charge:{order_id}")])
    assert "no longer journals it" in item


def test_a_job_whose_key_the_new_code_computes_differently_is_drift_a_timer_is_not() -> None:
    new = Known(
        agents=frozenset({"shop"}),
        tools=frozenset({"report"}),
        long_running={"report": "report:{quarter}:{region}"},
    )
    request = {"quarter": "q3", "region": "emea"}
    (item,) = key_drift([], INV, new, jobs=[job("report:q3", "c-2", request)])
    assert "'report:q3'" in item and "'report:{quarter}:{region}'" in item
    assert key_drift([], INV, new, jobs=[job("report:q3:emea", "c-2", request)]) == []
    assert key_drift([], INV, new, jobs=[job("timer:c-3", "c-3", {}, timer=True)]) == []


def test_a_confirmation_still_waiting_names_the_tool_it_guards() -> None:
    asked = types.FunctionCall(
        id="conf-1",
        name="adk_request_confirmation",
        args={"originalFunctionCall": {"id": "c-1", "name": "ship_order", "args": {}}},
    )
    events = [
        Event(
            invocation_id=INV,
            author="shop",
            long_running_tool_ids={"conf-1"},
            content=types.Content(role="model", parts=[types.Part(function_call=asked)]),
        )
    ]
    renamed = Known(agents=frozenset({"shop"}), tools=frozenset({"dispatch_order"}))
    assert drift(events, INV, renamed) == ["tool 'ship_order' (waiting for its confirmation)"]
    kept = Known(agents=frozenset({"shop"}), tools=frozenset({"ship_order"}))
    assert drift(events, INV, kept) == []
