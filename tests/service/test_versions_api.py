"""A versioned worker through the HTTP API, both backends: versions shown, drift parked."""

from __future__ import annotations

import pytest
from google.adk.events.event import Event
from google.genai import types
from op_support import APP
from svc_support import Service
from test_api import start, wait_status

from durable_adk import errors
from durable_adk.adk.eventlog.classify import classify
from durable_adk.adk.runs import path as runpath
from durable_adk.adk.runs.inbox import inbox_at_finish
from durable_adk.service.settings import ServiceSettings
from durable_adk.tables.interrupts import InterruptTable
from durable_adk.tables.ledger import RunLedger, RunStatus
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
@pytest.mark.parametrize("via", ["run-api", "inbox"])
async def test_an_answer_through_the_api_to_a_run_whose_tool_is_gone_is_parked(
    service: Service, via: str
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
    # The pause is in the interrupts inbox, written with the finish (as a run's ending does).
    found = classify(loaded.events, run.invocation_id, root_agent_name=APP)
    inbox = inbox_at_finish(claimed, loaded.events, found, done=False)
    assert await old.finish(claimed.lease, RunStatus.PAUSED, inbox=inbox)
    assert [i.call_id for i in await InterruptTable(service.store).list_interrupts()] == ["lr-1"]

    if via == "inbox":
        started = await service.client.post(
            "/v1/interrupts/lr-1", json={"by": "ops", "payload": {"reserved": True}}
        )
        assert started.status_code == 200, started.text
    else:
        answer = {"function_response": {"id": "lr-1", "name": "reserve_desk", "response": {}}}
        content = {"role": "user", "parts": [answer]}
        started = await service.client.post(
            "/v1/users/u1/sessions/old/runs",
            json={"invocation_id": run.invocation_id, "content": content},
        )
        assert started.status_code == 202, started.text
    answer_run = started.json()["run"]
    # It continues 1.0's invocation: its version and fingerprint, so the drift check runs.
    assert answer_run["app_version"] == "1.0"
    assert answer_run["app_fingerprint"] == "fp-of-1.0"
    parked = await wait_status(service, answer_run["run_id"], "PARKED")
    assert "drift" in parked["last_error"] and "tool 'reserve_desk'" in parked["last_error"]
    session = await sessions.get_session(app_name=APP, user_id="u1", session_id="old")
    assert session is not None
    assert [e.author for e in session.events] == ["user", APP]  # nothing after the pause


@pytest.mark.parametrize(
    "service", [{"app_version": "1.4.0", "compatible_versions": ("1.3.0",)}], indirect=True
)
async def test_versions_through_the_api_list_drain_and_undrain(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runpath, "DRAIN_CHECK_EVERY", 0.0)  # every submit reads the drain
    body = await start(service, "s1")
    await wait_status(service, body["run"]["run_id"], "DONE")
    await service.worker.background.beat()  # a beat now: live, however loaded the machine
    listed = (await service.client.get("/v1/versions")).json()["versions"]
    me = service.worker.runner.worker_id
    assert [v["version"] for v in listed] == ["1.4.0", "1.3.0"]
    line, older = listed
    assert line["runs"] == {"DONE": 1} and line["total"] == 1 and line["own_workers"] == [me]
    assert line["drained_at"] is None and line["waiting"] == 0
    assert older["runs"] == {} and older["continued_by"] == [me]  # declared compatible

    refused = [
        ("/v1/versions/blue/drain", {"by": "ana"}, 422),
        ("/v1/versions/1.4.0/drain", {}, 422),
        ("/v1/versions/1.4.0/drain", {"by": "ana", "extra": 1}, 422),
    ]
    for url, payload, status in refused:
        answer = await service.client.post(url, json=payload)
        assert answer.status_code == status, (url, answer.text)
    assert (await service.client.get("/v1/versions")).json()["versions"] == listed

    drained = await service.client.post(
        "/v1/versions/1.4.0/drain", json={"by": "ana", "reason": "1.5.0 is out"}
    )
    assert drained.status_code == 200 and drained.json()["changed"] is True
    again = await service.client.post("/v1/versions/1.4.0/drain", json={"by": "ana"})
    assert again.json()["changed"] is False
    new_run = await service.client.post("/v1/users/u1/sessions/s2/runs", json={"message": "x"})
    assert new_run.status_code == 503 and "drained" in new_run.text
    line = (await service.client.get("/v1/versions")).json()["versions"][0]
    assert line["drained_by"] == "ana" and line["reason"] == "1.5.0 is out"

    undrained = await service.client.post("/v1/versions/1.4.0/undrain", json={"by": "bo"})
    assert undrained.json() == {"version": "1.4.0", "drained": False, "changed": True}
    await start(service, "s2")
    actions = (await service.client.get("/v1/actions")).json()
    found = [
        (a["action"], a["actor"]) for a in actions["actions"] if a["run_id"] == "version:1.4.0"
    ]
    assert found == [("version_undrain", "bo"), ("version_drain", "ana")]


@pytest.mark.parametrize("service", [{"app_version": "1.4.0"}], indirect=True)
async def test_moving_and_abandoning_a_versions_runs_through_the_api(service: Service) -> None:
    old = RunLedger(  # a lease of an hour: no worker claims it while the test acts on it
        service.store, lease_seconds=3600, serving=Serving.declare("1.3.0", fingerprint="fp-1")
    )
    run = await old.submit(app_name=APP, user_id="u1", session_id="o", request={}, owner="gone")
    refused = [
        ("/v1/versions/1.3.0/move", {"by": "ana", "to": "1.2.0"}, "only move to a newer"),
        ("/v1/versions/1.3.0/move", {"by": "ana", "to": "blue"}, "PEP 440"),
        ("/v1/versions/1.3.0/abandon", {"by": "ana"}, "reason"),
    ]
    for url, payload, words in refused:
        answer = await service.client.post(url, json=payload)
        assert answer.status_code == 422 and words in answer.text, (url, answer.text)
    assert (await old.get(run.run_id)).app_version == "1.3.0"  # type: ignore[union-attr]

    moved = await service.client.post(
        "/v1/versions/1.3.0/move", json={"by": "ana", "to": "1.4.0", "reason": "retired"}
    )
    assert moved.json() == {"version": "1.3.0", "to": "1.4.0", "moved": 1}
    assert (await old.get(run.run_id)).app_version == "1.4.0"  # type: ignore[union-attr]
    abandoned = await service.client.post(
        "/v1/versions/1.4.0/abandon", json={"by": "bo", "reason": "bad release"}
    )
    assert abandoned.json() == {"version": "1.4.0", "cancelled": [run.run_id]}
    assert (await old.get(run.run_id)).status is RunStatus.CANCELLED  # type: ignore[union-attr]
