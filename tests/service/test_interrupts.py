"""The interrupts inbox through the real HTTP API, on both backends (issue 14, item 2).

A real ADK app whose tool needs confirmation pauses; the inbox lists the call
across sessions; one answer (who gave it recorded) continues the invocation
and the paused run follows it to DONE; a deadline applies the safe default
(deny) through the worker's own sweeper loop; bad answers change nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.adk.events.event import Event
from google.genai import types
from op_support import APP
from svc_support import Service
from test_operator import wait_status

from durable_adk.adk.services.sessions import RUN_METADATA_KEY
from durable_adk.demo.approvals_app import app as approvals_app
from durable_adk.limits import DEFAULT_MAX_BYTES
from durable_adk.tables.interrupts import InterruptTable
from durable_adk.tables.ledger import RunLedger

APPROVALS = {"app": approvals_app()}
approvals = pytest.mark.parametrize("service", [APPROVALS], indirect=True)


async def pause(service: Service, session: str, order: str) -> tuple[str, dict[str, Any]]:
    """Starts a run that asks to ship ``order``; returns its id and its open interrupt."""
    started = await service.client.post(
        f"/v1/users/u1/sessions/{session}/runs", json={"message": order}
    )
    assert started.status_code == 202, started.text
    run_id = started.json()["run"]["run_id"]
    await wait_status(service, run_id, "PAUSED")
    found = (await service.client.get("/v1/interrupts", params={"session_id": session})).json()
    (interrupt,) = found["interrupts"]
    return run_id, interrupt


def last_text(detail: dict[str, Any]) -> str:
    said = [
        part["text"]
        for item in detail["events"]
        for part in (item["event"].get("content") or {}).get("parts") or []
        if part.get("text")
    ]
    return said[-1]


async def state(service: Service) -> tuple[Any, ...]:
    """Everything an answer could change: the totals, the inbox, the audit trail."""
    inbox = []
    for status in ("OPEN", "ANSWERED", "EXPIRED", "CLOSED"):
        listed = await service.client.get("/v1/interrupts", params={"status": status})
        assert listed.status_code == 200, listed.text
        inbox.append(listed.json()["interrupts"])
    actions = (await service.client.get("/v1/actions")).json()
    runs = (await service.client.get("/v1/runs")).json()
    return (await service.stats(), inbox, actions, runs)


@approvals
async def test_the_inbox_lists_a_confirmation_and_one_approval_ships_it(service: Service) -> None:
    paused, interrupt = await pause(service, "a1", "O-1")
    other, _ = await pause(service, "a2", "O-2")
    assert interrupt["kind"] == "confirmation" and interrupt["status"] == "OPEN"
    assert interrupt["name"] == "adk_request_confirmation" and interrupt["run_id"] == paused
    assert interrupt["args"]["originalFunctionCall"]["name"] == "ship_order"
    assert interrupt["args"]["originalFunctionCall"]["args"] == {"order_id": "O-1"}
    every = (await service.client.get("/v1/interrupts")).json()["interrupts"]
    assert [i["session_id"] for i in every] == ["a1", "a2"]  # across sessions, oldest first
    for params, expected in (
        ({"kind": "confirmation"}, 2),
        ({"kind": "input"}, 0),
        ({"app_name": "approvals"}, 2),
        ({"app_name": "another"}, 0),
        ({"session_id": "a2"}, 1),
    ):
        listed = (await service.client.get("/v1/interrupts", params=params)).json()
        assert len(listed["interrupts"]) == expected, params

    url = f"/v1/interrupts/{interrupt['call_id']}"
    answered = await service.client.post(
        url, json={"by": "ana", "decision": "approve", "reason": "checked the address"}
    )
    assert answered.status_code == 200, answered.text
    body = answered.json()
    assert body["interrupt"]["status"] == "ANSWERED" and body["interrupt"]["answered_by"] == "ana"
    assert body["interrupt"]["answer"] == {"confirmed": True}
    assert "answered by ana" in body["message"]
    carrier = body["run"]["run_id"]
    assert body["interrupt"]["answer_run_id"] == carrier
    await wait_status(service, carrier, "DONE")
    closed = await wait_status(service, paused, "DONE")  # the paused run follows its invocation
    assert closed["status"] == "DONE"
    detail = (await service.client.get(f"/v1/runs/{carrier}")).json()
    assert last_text(detail) == "Shipped."
    (answer,) = [
        a for a in (await service.client.get("/v1/actions")).json()["actions"]
        if a["action"] == "answer"
    ]  # fmt: skip
    assert answer["actor"] == "ana" and answer["run_id"] == paused
    assert answer["reason"] == "checked the address"
    assert answer["detail"]["response"] == {"confirmed": True}

    # Answered once: a second answer is refused and changes nothing.
    before = await state(service)
    again = await service.client.post(url, json={"by": "bo", "decision": "deny"})
    assert again.status_code == 409 and "already answered by ana" in again.text
    assert await state(service) == before
    # The other session still waits, alone in the inbox.
    left = (await service.client.get("/v1/interrupts")).json()["interrupts"]
    assert [i["run_id"] for i in left] == [other]


@approvals
async def test_a_denial_continues_the_run_without_shipping(service: Service) -> None:
    paused, interrupt = await pause(service, "d1", "O-3")
    denied = await service.client.post(
        f"/v1/interrupts/{interrupt['call_id']}", json={"by": "ana", "decision": "deny"}
    )
    assert denied.status_code == 200, denied.text
    carrier = denied.json()["run"]["run_id"]
    await wait_status(service, carrier, "DONE")
    await wait_status(service, paused, "DONE")
    detail = (await service.client.get(f"/v1/runs/{carrier}")).json()
    assert last_text(detail) == "Not shipped: it was not approved."


@approvals
async def test_bad_answers_are_refused_and_change_nothing(service: Service) -> None:
    _, interrupt = await pause(service, "b1", "O-4")
    url = f"/v1/interrupts/{interrupt['call_id']}"
    before = await state(service)
    for path, body, status, says in (
        ("/v1/interrupts/no-such-call", {"by": "ana", "decision": "approve"}, 404, "no interrupt"),
        (url, {"by": "ana", "payload": {"x": 1}}, 422, "answer approve or deny"),
        (url, {"by": "ana", "decision": "maybe"}, 422, ""),
        (url, {"by": "a/b", "decision": "approve"}, 422, ""),
        (url, {"by": "ana", "decision": "approve", "extra": 1}, 422, ""),
        (url, {"decision": "approve"}, 422, ""),
        ("/v1/interrupts/bad%00id", {"by": "ana", "decision": "approve"}, 422, ""),
    ):
        answer = await service.client.post(path, json=body)
        assert answer.status_code == status, (body, answer.text)
        assert says in answer.text
    assert (
        await service.anon.post(url, json={"by": "x", "decision": "approve"})
    ).status_code == 401
    wrong = await service.anon.post(
        url, json={"by": "x", "decision": "approve"}, headers={"Authorization": "Bearer nope"}
    )
    assert wrong.status_code == 401
    huge = await service.client.post(
        url, content=b'{"by": "ana", "payload": "' + b"x" * (2 << 20) + b'"}'
    )
    assert huge.status_code == 413
    assert await state(service) == before


@pytest.mark.parametrize(
    "service",
    [{**APPROVALS, "interrupt_deadlines": (("ship_order", 3600.0),), "expiry_interval": 0.2}],
    indirect=True,
)
async def test_a_deadline_applies_the_safe_default(service: Service) -> None:
    paused, interrupt = await pause(service, "t1", "O-5")
    assert interrupt["deadline_at"] is not None
    # Instead of waiting an hour: the deadline is moved back on the database clock.
    await InterruptTable(service.store).backdate(interrupt["call_id"], 1)
    await wait_status(service, paused, "DONE")  # the worker's deadline loop denied it
    (expired,) = (await service.client.get("/v1/interrupts", params={"status": "EXPIRED"})).json()[
        "interrupts"
    ]
    assert expired["answered_by"] == "deadline" and expired["answer"]["confirmed"] is False
    detail = (await service.client.get(f"/v1/runs/{expired['answer_run_id']}")).json()
    assert detail["run"]["status"] == "DONE"
    assert last_text(detail) == "Not shipped: it was not approved."
    before = await state(service)
    late = await service.client.post(
        f"/v1/interrupts/{interrupt['call_id']}", json={"by": "ana", "decision": "approve"}
    )
    assert late.status_code == 409 and "expired" in late.text
    assert await state(service) == before


@approvals
async def test_cancelling_a_paused_run_closes_its_interrupt(service: Service) -> None:
    paused, interrupt = await pause(service, "c1", "O-6")
    cancelled = await service.client.post(f"/v1/runs/{paused}/cancel", json={"by": "ana"})
    assert cancelled.json()["run"]["status"] == "CANCELLED"
    assert (await service.client.get("/v1/interrupts")).json()["interrupts"] == []
    before = await state(service)
    late = await service.client.post(
        f"/v1/interrupts/{interrupt['call_id']}", json={"by": "bo", "decision": "approve"}
    )
    assert late.status_code == 409 and "cancelled" in late.text
    assert await state(service) == before


async def test_a_long_running_call_found_by_recovery_is_answered_with_a_payload(
    service: Service,
) -> None:
    # A worker died while its run waited on a long-running call: recovery marks
    # the run PAUSED and the call goes in the inbox.
    sessions = service.worker.sessions
    await sessions.create_session(app_name=APP, user_id="u1", session_id="lr-1")
    ledger = RunLedger(service.store)
    run = await ledger.submit(
        app_name=APP, user_id="u1", session_id="lr-1",
        request={"role": "user", "parts": [{"text": "desks"}]}, owner="dead-worker",
    )  # fmt: skip
    claimed = await ledger.claim_queued(run.run_id, "dead-worker")
    assert claimed is not None
    stamp = {RUN_METADATA_KEY: {"run_id": run.run_id, "epoch": claimed.epoch}}
    loaded = await sessions.get_session(app_name=APP, user_id="u1", session_id="lr-1")
    assert loaded is not None
    call = types.FunctionCall(id="lr-call-1", name="check_stock", args={"item": "desks"})
    for event in (
        Event(
            invocation_id=run.invocation_id, author="user", custom_metadata=stamp,
            content=types.Content(role="user", parts=[types.Part(text="desks")]),
        ),
        Event(
            invocation_id=run.invocation_id, author=APP, custom_metadata=stamp,
            content=types.Content(role="model", parts=[types.Part(function_call=call)]),
            long_running_tool_ids={"lr-call-1"},
        ),
    ):  # fmt: skip
        await sessions.append_event(loaded, event)
    await ledger.backdate(run.run_id, 3600)
    await wait_status(service, run.run_id, "PAUSED")
    listed = (await service.client.get("/v1/interrupts", params={"kind": "long_running"})).json()
    (interrupt,) = listed["interrupts"]
    assert interrupt["call_id"] == "lr-call-1" and interrupt["name"] == "check_stock"
    assert interrupt["run_id"] == run.run_id and interrupt["args"] == {"item": "desks"}

    url = "/v1/interrupts/lr-call-1"
    before = await state(service)
    for body, says in (
        ({"by": "ana", "decision": "approve"}, "not a confirmation: give a payload"),
        ({"by": "ana"}, "needs a payload"),
        ({"by": "ana", "payload": "x" * (DEFAULT_MAX_BYTES + 1)}, ""),
    ):
        refused = await service.client.post(url, json=body)
        assert refused.status_code in (413, 422) and says in refused.text, refused.text
    assert await state(service) == before

    answered = await service.client.post(
        url, json={"by": "ana", "payload": {"item": "desks", "in_stock": 3}}
    )
    assert answered.status_code == 200, answered.text
    carrier = answered.json()["run"]["run_id"]
    await wait_status(service, carrier, "DONE")
    await wait_status(service, run.run_id, "DONE")
    detail = (await service.client.get(f"/v1/runs/{carrier}")).json()
    assert last_text(detail) == "3 in stock for 'desks'."
