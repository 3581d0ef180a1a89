"""Every route that stores a value from outside bounds its depth and size (issue 47, item 1).

A job's result (``POST /v1/jobs/{id}/complete`` and the signed webhook), an
interrupt's answer, a run's message and a continuation's answers, an
operator's resolve: past ``max_payload_depth`` the answer is 422
``payload_too_deep``, past ``max_payload_bytes`` 413 ``payload_too_large``,
each naming the limit, and nothing changes (no row, no event, the job still
open). At the limit the value is accepted and the session loads back on a
fresh worker (a new store and session service over the same database, no
cache). Both backends, through the worker's HTTP API.

The issue's case first: a result nested 250 levels deep (3 KB) was answered
200 and made the session unreadable on every fresh worker.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from typing import Any

import httpx
import pydantic_core
import pytest
from op_support import park_in_store
from svc_support import AUTH, Service, launch_serve, wait_ready
from test_interrupts import pause, state
from test_jobs_flow import reporter
from test_operator import wait_status

from durable_adk import webhooks
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.demo.approvals_app import app as approvals_app
from durable_adk.limits import DEFAULT_MAX_DEPTH
from durable_adk.store import open_store

MAX_BYTES = 4096
REPORTER = {"app": reporter(), "max_payload_bytes": MAX_BYTES}
APPROVALS = {"app": approvals_app(), "max_payload_bytes": MAX_BYTES}
STOCK = {"max_payload_bytes": MAX_BYTES}


def nested(depth: int, leaf: Any = 1) -> Any:
    """A value ``depth`` levels deep (objects and arrays in turn), ``leaf`` at the bottom."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def large() -> dict[str, str]:
    return {"blob": "x" * (MAX_BYTES + 1)}


def refused(response: Any, status: int, code: str, limit: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and limit in error["message"], error


async def totals(service: Service, user: str, session: str) -> tuple[Any, ...]:
    """What a refused request could change: runs, jobs, the inbox, the audit trail, the log."""
    events = await service.client.get(f"/v1/users/{user}/sessions/{session}/events")
    return (
        await service.stats(),
        (await service.client.get("/v1/runs")).json(),
        (await service.client.get("/v1/jobs")).json(),
        (await service.client.get("/v1/actions")).json(),
        events.json() if events.status_code == 200 else events.status_code,
    )


async def fresh_load(url: str, app_name: str, user: str, session: str) -> int:
    """Loads the session on a fresh worker: a new store and session service, no cache."""
    async with open_store(url) as store:
        loaded = await DurableSessionService(store, cache_sessions=0).get_session(
            app_name=app_name, user_id=user, session_id=session
        )
    assert loaded is not None
    return len(loaded.events)


def signed(body: dict[str, Any] | str) -> tuple[bytes, dict[str, str]]:
    raw = (body if isinstance(body, str) else json.dumps(body)).encode()
    headers = webhooks.sign("webhook-secret", raw, time.time())
    return raw, {**headers, "content-type": "application/json"}


@pytest.mark.parametrize("service", [REPORTER], indirect=True)
async def test_a_job_result_past_the_limits_is_refused_and_the_job_stays_open(
    service: Service, store_url: str
) -> None:
    started = await service.client.post(
        "/v1/users/ann/sessions/q3/runs", json={"message": "Build the Q3 report"}
    )
    await wait_status(service, started.json()["run"]["run_id"], "PAUSED")
    before = await totals(service, "ann", "q3")
    complete = "/v1/jobs/report:Q3/complete"

    # The case: 250 levels, 3 KB.
    deep = {"state": "SUCCEEDED", "result": nested(250)}
    refused(
        await service.client.post(complete, json=deep), 422, "payload_too_deep", "max_payload_depth"
    )
    over = {"state": "SUCCEEDED", "result": nested(DEFAULT_MAX_DEPTH + 1)}
    refused(
        await service.client.post(complete, json=over), 422, "payload_too_deep", "max_payload_depth"
    )
    big = {"state": "SUCCEEDED", "result": large()}
    refused(
        await service.client.post(complete, json=big), 413, "payload_too_large", "max_payload_bytes"
    )
    for result, status, code, limit in (
        (nested(250), 422, "payload_too_deep", "max_payload_depth"),
        (large(), 413, "payload_too_large", "max_payload_bytes"),
    ):
        raw, headers = signed({"job_id": "report:Q3", "state": "SUCCEEDED", "result": result})
        refused(
            await service.anon.post("/webhooks/jobs", content=raw, headers=headers),
            status,
            code,
            limit,
        )
    # A body deeper than the JSON parser goes is refused too (never a 5xx).
    raw, headers = signed(
        '{"job_id": "report:Q3", "state": "SUCCEEDED", "result": ' + "[" * 3000 + "]" * 3000 + "}"
    )
    response = await service.anon.post("/webhooks/jobs", content=raw, headers=headers)
    assert response.status_code == 422, response.text
    assert await totals(service, "ann", "q3") == before
    (job,) = (await service.client.get("/v1/jobs")).json()["items"]
    assert job["state"] == "STARTED" and job["result"] is None

    # At the limit: accepted, resumed, and the session loads on a fresh worker.
    # At both limits at once: as deep and as large as allowed.
    result = {"url": "q3.pdf", "tree": nested(DEFAULT_MAX_DEPTH - 1), "pad": ""}
    result["pad"] = "x" * (MAX_BYTES - len(pydantic_core.to_json(result)))
    assert len(pydantic_core.to_json(result)) == MAX_BYTES
    ok = {"state": "SUCCEEDED", "result": result}
    done = await service.client.post(complete, json=ok)
    assert done.status_code == 200 and done.json()["changed"] is True, done.text
    deadline = time.monotonic() + 60
    while True:  # the resumer answers the call as a new run of the invocation
        runs = (await service.client.get("/v1/users/ann/sessions/q3/runs")).json()["runs"]
        if len(runs) == 2 and runs[0]["status"] in ("DONE", "FAILED"):
            break
        assert time.monotonic() < deadline, runs
        await asyncio.sleep(0.05)
    assert runs[0]["status"] == "DONE", runs[0]
    assert await fresh_load(store_url, "reporter", "ann", "q3") >= 4


@pytest.mark.parametrize("service", [APPROVALS], indirect=True)
async def test_an_answer_past_the_limits_is_refused_and_the_interrupt_stays_open(
    service: Service,
) -> None:
    _, interrupt = await pause(service, "p1", "O-1")
    url = f"/v1/interrupts/{interrupt['call_id']}"
    before = await state(service)
    for payload, status, code, limit in (
        (nested(250), 422, "payload_too_deep", "max_payload_depth"),
        (large(), 413, "payload_too_large", "max_payload_bytes"),
    ):
        answer = {"by": "ana", "decision": "approve", "payload": payload}
        refused(await service.client.post(url, json=answer), status, code, limit)
    assert await state(service) == before
    listed = (await service.client.get("/v1/interrupts", params={"session_id": "p1"})).json()
    assert [i["status"] for i in listed["interrupts"]] == ["OPEN"]


@pytest.mark.parametrize("service", [APPROVALS], indirect=True)
async def test_a_message_or_continuation_past_the_limits_starts_no_run(
    service: Service, store_url: str
) -> None:
    paused, interrupt = await pause(service, "m1", "O-2")
    run = (await service.client.get(f"/v1/runs/{paused}")).json()["run"]
    before = await totals(service, "u1", "m1")
    runs = "/v1/users/u1/sessions/m1/runs"
    answer = {
        "invocation_id": run["invocation_id"],
        "content": {
            "role": "user",
            "parts": [
                {
                    "function_response": {
                        "id": interrupt["call_id"],
                        "name": interrupt["name"],
                        "response": {"confirmed": True, "payload": nested(250)},
                    }
                }
            ],
        },
    }
    refused(
        await service.client.post(runs, json=answer), 422, "payload_too_deep", "max_payload_depth"
    )
    message = {"message": "y" * (MAX_BYTES + 1)}
    refused(
        await service.client.post(runs, json=message), 413, "payload_too_large", "max_payload_bytes"
    )
    assert await totals(service, "u1", "m1") == before
    assert await fresh_load(store_url, "approvals", "u1", "m1") == len(before[-1]["events"])


@pytest.mark.parametrize("service", [STOCK], indirect=True)
async def test_a_resolve_past_the_limits_leaves_the_run_parked(service: Service) -> None:
    parked, _ = await park_in_store(service.store, "r1")
    before = await totals(service, "u1", "r1")
    url = f"/v1/runs/{parked.run_id}/resolve"
    for result, status, code, limit in (
        (nested(250), 422, "payload_too_deep", "max_payload_depth"),
        (large(), 413, "payload_too_large", "max_payload_bytes"),
    ):
        response = await service.client.post(url, json={"by": "ops", "result": result})
        refused(response, status, code, limit)
    assert await totals(service, "u1", "r1") == before
    run = (await service.client.get(f"/v1/runs/{parked.run_id}")).json()["run"]
    assert run["status"] == "PARKED"


@pytest.mark.parametrize(
    "service", [{"max_payload_bytes": MAX_BYTES, "max_body_bytes": 2 * MAX_BYTES}], indirect=True
)
async def test_the_body_limit_and_the_payload_limit_each_name_themselves(service: Service) -> None:
    # Under the body limit, over the payload limit: the payload limit answers.
    result = {"state": "SUCCEEDED", "result": large()}
    response = await service.client.post("/v1/jobs/any/complete", json=result)
    refused(response, 413, "payload_too_large", "max_payload_bytes")
    # Over the body limit: refused before the body is read, naming that limit.
    result = {"state": "SUCCEEDED", "result": {"blob": "x" * (2 * MAX_BYTES)}}
    response = await service.client.post("/v1/jobs/any/complete", json=result)
    refused(response, 413, "body_too_large", "limit of 8192 bytes")


def test_durable_adk_serve_takes_the_limits_from_its_flags(store_url: str) -> None:
    process = launch_serve(
        store_url,
        worker_id="limits",
        options=["--max-payload-depth", "8", "--max-payload-bytes", "1000"],
    )
    served = wait_ready(process)
    try:
        with httpx.Client(base_url=served.base_url, headers=AUTH, timeout=30) as client:
            complete = "/v1/jobs/nothing/complete"
            deep = client.post(complete, json={"state": "SUCCEEDED", "result": nested(9)})
            refused(deep, 422, "payload_too_deep", "limit of 8 (max_payload_depth)")
            big = client.post(complete, json={"state": "SUCCEEDED", "result": "x" * 1000})
            refused(big, 413, "payload_too_large", "limit of 1000 (max_payload_bytes)")
            within = client.post(complete, json={"state": "SUCCEEDED", "result": nested(8)})
            assert within.status_code == 404, within.text  # measured fine; no such job
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
