"""Continuing a paused invocation through the HTTP API (issue 14, item 3), both backends.

The run API takes function-response parts and an invocation id; unknown call
ids, wrong names and calls already answered are refused and change nothing.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from google.adk.events.event import Event
from google.genai import types
from op_support import APP
from svc_support import Service

from durable_adk.adk.services.sessions import RUN_METADATA_KEY
from durable_adk.tables.ledger import RunLedger, RunStatus


async def pause_on_a_long_running_call(service: Service, session: str) -> tuple[str, str]:
    """A run whose invocation waits for the answer of a long-running call, PAUSED."""
    sessions = service.worker.sessions
    await sessions.create_session(app_name=APP, user_id="u1", session_id=session)
    ledger = RunLedger(service.store)
    run = await ledger.submit(
        app_name=APP, user_id="u1", session_id=session,
        request={"role": "user", "parts": [{"text": "desks"}]}, owner="w-1",
    )  # fmt: skip
    claimed = await ledger.claim_queued(run.run_id, "w-1")
    assert claimed is not None
    stamp = {RUN_METADATA_KEY: {"run_id": run.run_id, "epoch": claimed.epoch}}
    loaded = await sessions.get_session(app_name=APP, user_id="u1", session_id=session)
    assert loaded is not None
    call_id = f"lr-{session}"
    call = types.FunctionCall(id=call_id, name="check_stock", args={"item": "desks"})
    for event in (
        Event(
            invocation_id=run.invocation_id, author="user", custom_metadata=stamp,
            content=types.Content(role="user", parts=[types.Part(text="desks")]),
        ),
        Event(
            invocation_id=run.invocation_id, author=APP, custom_metadata=stamp,
            content=types.Content(role="model", parts=[types.Part(function_call=call)]),
            long_running_tool_ids={call_id},
        ),
    ):  # fmt: skip
        await sessions.append_event(loaded, event)
    assert await ledger.finish(claimed.lease, RunStatus.PAUSED)
    return run.invocation_id, call_id


def answer(call_id: str, name: str = "check_stock", **response: Any) -> dict[str, Any]:
    part = {"function_response": {"id": call_id, "name": name, "response": response}}
    return {"role": "user", "parts": [part]}


async def test_an_http_client_continues_a_paused_invocation(service: Service) -> None:
    invocation, call_id = await pause_on_a_long_running_call(service, "paused-1")
    url = "/v1/users/u1/sessions/paused-1/runs"
    before = await service.stats()
    refused = [
        ({"invocation_id": "e-nope", "content": answer(call_id)}, 404, "no invocation"),
        ({"invocation_id": invocation, "content": answer("lr-x")}, 422, "made no call 'lr-x'"),
        (
            {"invocation_id": invocation, "content": answer(call_id, name="send_invoice")},
            422,
            "is 'check_stock', not 'send_invoice'",
        ),
        (
            {"invocation_id": invocation, "content": {"role": "user", "parts": [{"text": "hi"}]}},
            422,
            "only of function_response parts",
        ),
        ({"invocation_id": invocation, "message": "hi"}, 422, "function_response parts"),
        ({"content": answer(call_id)}, 422, f"'invocation_id': {invocation!r}"),
    ]
    for body, status, words in refused:
        response = await service.client.post(url, json=body)
        assert response.status_code == status, (body, response.text)
        assert words in response.json()["error"]["message"], (body, response.text)
    assert await service.stats() == before

    started = await service.client.post(
        url,
        json={
            "invocation_id": invocation,
            "by": "ana",
            "content": answer(call_id, item="desks", in_stock=3),
        },
    )
    assert started.status_code == 202, started.text
    run = started.json()["run"]
    assert run["invocation_id"] == invocation
    deadline = time.monotonic() + 60
    while True:
        detail = (await service.client.get(f"/v1/runs/{run['run_id']}")).json()
        if detail["run"]["status"] in ("DONE", "FAILED", "PARKED"):
            break
        assert time.monotonic() < deadline, detail["run"]
        await asyncio.sleep(0.05)
    assert detail["run"]["status"] == "DONE", detail["run"]
    said = [
        p["text"]
        for e in detail["events"]
        for p in (e["event"].get("content") or {}).get("parts") or []
        if p.get("text")
    ]
    assert said[-1] == "3 in stock for 'desks'."
    assert [(a["action"], a["actor"]) for a in detail["actions"]] == [("answer", "ana")]

    # A second answer to the same call is refused and changes nothing.
    before = await service.stats()
    again = await service.client.post(
        url, json={"invocation_id": invocation, "content": answer(call_id, in_stock=4)}
    )
    assert again.status_code == 409 and "already answered" in again.text
    assert await service.stats() == before
