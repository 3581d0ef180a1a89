"""A versioned worker through the HTTP API, both backends: versions shown, drift parked."""

from __future__ import annotations

import pytest
from google.adk.events.event import Event
from google.genai import types
from op_support import APP
from svc_support import Service
from test_api import start, wait_status

from durable_adk import errors
from durable_adk.ledger import RunLedger, RunStatus
from durable_adk.service.settings import ServiceSettings
from durable_adk.versions import Serving


@pytest.mark.parametrize(
    "service", [{"app_version": "1.4.0", "compatible_versions": ("1.3.0",)}], indirect=True
)
async def test_the_api_shows_the_version_a_run_was_started_under(service: Service) -> None:
    body = await start(service, "s1")
    run = await wait_status(service, body["run"]["run_id"], "DONE")
    assert run["app_version"] == "1.4.0"
    assert run["app_fingerprint"] == service.worker.runner.path.serving.fingerprint
    listed = (await service.client.get("/v1/runs")).json()["runs"]
    assert [r["app_version"] for r in listed] == ["1.4.0"]


def test_a_bad_version_setting_is_refused() -> None:
    with pytest.raises(errors.InvalidVersion):
        ServiceSettings(db="sqlite:///x.db", app_version="green")
    with pytest.raises(errors.InvalidVersion):
        ServiceSettings(db="sqlite:///x.db", app_version="1.0", compatible_versions=("1.1",))


@pytest.mark.parametrize(
    "service", [{"app_version": "1.1", "compatible_versions": ("1.0",)}], indirect=True
)
async def test_an_answer_through_the_api_to_a_run_whose_tool_is_gone_is_parked(
    service: Service,
) -> None:
    """A 1.0 run paused on a tool 1.1 no longer has: the answer's drive parks it, nothing runs."""
    sessions = service.worker.sessions
    await sessions.create_session(app_name=APP, user_id="u1", session_id="old")
    old = RunLedger(service.store, serving=Serving.declare("1.0", fingerprint="fp-of-1.0"))
    run = await old.submit(
        app_name=APP, user_id="u1", session_id="old",
        request={"role": "user", "parts": [{"text": "desks"}]}, owner="w-1.0",
    )  # fmt: skip
    claimed = await old.claim_queued(run.run_id, "w-1.0")
    assert claimed is not None
    loaded = await sessions.get_session(app_name=APP, user_id="u1", session_id="old")
    assert loaded is not None
    call = types.FunctionCall(id="lr-1", name="reserve_desk", args={"item": "desks"})
    for event in (
        Event(invocation_id=run.invocation_id, author="user",
              content=types.Content(role="user", parts=[types.Part(text="desks")])),
        Event(invocation_id=run.invocation_id, author=APP, long_running_tool_ids={"lr-1"},
              content=types.Content(role="model", parts=[types.Part(function_call=call)])),
    ):  # fmt: skip
        await sessions.append_event(loaded, event)
    assert await old.finish(claimed.lease, RunStatus.PAUSED)

    answer = {"function_response": {"id": "lr-1", "name": "reserve_desk", "response": {}}}
    started = await service.client.post(
        "/v1/users/u1/sessions/old/runs",
        json={"invocation_id": run.invocation_id, "content": {"role": "user", "parts": [answer]}},
    )
    assert started.status_code == 202, started.text
    answer_run = started.json()["run"]
    assert answer_run["app_version"] == "1.0"  # it continues 1.0's invocation
    parked = await wait_status(service, answer_run["run_id"], "PARKED")
    assert "drift" in parked["last_error"] and "tool 'reserve_desk'" in parked["last_error"]
    session = await sessions.get_session(app_name=APP, user_id="u1", session_id="old")
    assert session is not None
    assert [e.author for e in session.events] == ["user", APP]  # nothing after the pause
