"""A new run's message made of function responses, over a real worker, both backends.

A function response answers a paused call; it does not start a run. Sent to
``POST .../runs`` without ``invocation_id``, it is refused with a 422 that
names the route that takes it (the same route with the paused invocation's
id, or the interrupts inbox) and the invocation it answers, and nothing
changes; sent again as the error says, it is taken as the answer.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from svc_support import ThreadedWorker, settings_for, threaded_worker

from durable_adk.demo.approvals_app import app as approvals_app

RUNS = "/v1/users/u1/sessions/e1/runs"


@pytest.fixture
def worker(store_url: str) -> Iterator[ThreadedWorker]:
    with threaded_worker(settings_for(store_url), app=approvals_app()) as running:
        yield running


def wait_status(client: httpx.Client, run_id: str, *statuses: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        run: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()["run"]
        if run["status"] in statuses:
            return run
        assert time.monotonic() < deadline, f"run {run_id} stayed {run['status']}"
        time.sleep(0.05)


def state(client: httpx.Client) -> tuple[Any, ...]:
    return (
        client.get("/v1/stats").json(),
        client.get("/v1/runs").json(),
        client.get("/v1/interrupts", params={"status": "OPEN"}).json(),
        client.get("/v1/actions").json(),
    )


def approval(call_id: str, *extra: dict[str, Any]) -> dict[str, Any]:
    answer = {
        "function_response": {
            "id": call_id,
            "name": "adk_request_confirmation",
            "response": {"confirmed": True},
        }
    }
    return {"role": "user", "parts": [answer, *extra]}


def test_function_responses_without_invocation_id_are_refused_naming_the_route(
    worker: ThreadedWorker,
) -> None:
    with worker.client() as client:
        started = client.post(RUNS, json={"message": "O-9"})
        assert started.status_code == 202, started.text
        paused = wait_status(client, started.json()["run"]["run_id"], "PAUSED")
        (interrupt,) = client.get("/v1/interrupts").json()["interrupts"]
        call_id = interrupt["call_id"]

        before = state(client)
        for content in (approval(call_id), approval(call_id, {"text": "and ship it"})):
            refused = client.post(RUNS, json={"content": content})
            assert refused.status_code == 422, refused.text
            error = refused.json()["error"]
            assert error["code"] == "invalid_argument"
            message = error["message"]
            assert "answers a paused call" in message and "nothing was changed" in message
            assert f"'invocation_id': '{paused['invocation_id']}'" in message
            assert "POST /v1/users/{user_id}/sessions/{session_id}/runs" in message
            assert "POST /v1/interrupts/{call_id}" in message
        # An answer to a call no session shows: the same refusal, without an invocation.
        stray = client.post(
            "/v1/users/u1/sessions/fresh/runs", json={"content": approval("no-such-call")}
        )
        assert stray.status_code == 422
        assert "the id of the paused invocation" in stray.json()["error"]["message"]
        assert state(client) == before

        # Sent as the error says, it is the answer.
        taken = client.post(
            RUNS,
            json={"content": approval(call_id), "invocation_id": paused["invocation_id"]},
        )
        assert taken.status_code == 202, taken.text
        wait_status(client, taken.json()["run"]["run_id"], "DONE")
        wait_status(client, paused["run_id"], "DONE")
