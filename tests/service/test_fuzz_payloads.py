"""The routes that store, fuzzed with deep and large values; what they accept loads back (issue 47).

Items 1 and 5, on both backends, against a real worker on a socket. Each
example pauses a fresh run on a long-running call (its own job), then sends
one request made by schemathesis from the worker's own OpenAPI spec to a route
that stores (a job's completion, the signed webhook, a run continuing the
invocation, a new run's message; an interrupt's answer is covered against an
approval in test_payload_limits_api.py, as a job's call is not in the inbox),
with the value it stores drawn from nesting and size strategies: trees from
0 to 300 levels deep of objects and arrays, strings around the size limit,
ordinary JSON. Whatever comes: never a 5xx, the answer matches the spec, a
refused request changes nothing, and (the property) after every accepted one
the session loads on a fresh worker (a new store and session service, no
cache) and the run that carried the value ends DONE (PAUSED for a new
message, which starts another build).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from google.adk.agents import LlmAgent
from google.adk.models.llm_request import LlmRequest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode
from svc_support import AUTH, ThreadedWorker, settings_for, threaded_worker

from durable_adk import webhooks
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.adk.tools.long_running import long_running_tool
from durable_adk.demo.service_app import last_user_text
from durable_adk.limits import DEFAULT_MAX_DEPTH
from durable_adk.store import open_store
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.scripted_model import Turn

MAX_BYTES = 4096
APP = "builder"
ROUTES = {
    "complete": "/v1/jobs/{job_id}/complete",
    "webhook": "/webhooks/jobs",
    "continue": "/v1/users/{user_id}/sessions/{session_id}/runs",
    "message": "/v1/users/{user_id}/sessions/{session_id}/runs",
}


def start_build(name: str) -> dict[str, Any]:
    """Starts building ``name``; the result arrives later."""
    return {"building": name}


def _step(request: LlmRequest) -> Turn:
    last = request.contents[-1].parts[-1] if request.contents[-1].parts else None
    if last is not None and last.function_response is not None:
        return Say("noted")
    return Call("start_build", {"name": last_user_text(request)[:40]})


def builder() -> LlmAgent:
    tool = long_running_tool(start_build, job_key="build:{name}", deadline=600)
    model = ScriptedModel({APP: [_step] * 64})
    return LlmAgent(name=APP, model=model, tools=[tool])


def trees(depth: int, kinds: list[bool], leaf: Any) -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if kinds[level % len(kinds)] else {"k": value}
    return value


ordinary = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=12,
)
deep = st.builds(
    trees,
    depth=st.one_of(st.integers(0, 300), st.integers(DEFAULT_MAX_DEPTH - 2, DEFAULT_MAX_DEPTH + 2)),
    kinds=st.lists(st.booleans(), min_size=1, max_size=4),
    leaf=st.one_of(st.just(1), st.text(max_size=10)),
)
large = st.integers(MAX_BYTES - 64, MAX_BYTES + 64).map(lambda n: {"blob": "x" * n})
payloads = st.one_of(ordinary, deep, large)


@pytest.fixture
def worker(store_url: str) -> Iterator[ThreadedWorker]:
    settings_ = settings_for(store_url, max_payload_bytes=MAX_BYTES)
    with threaded_worker(settings_, app=builder()) as running:
        yield running


def wait(client: httpx.Client, session: str, count: int) -> list[dict[str, Any]]:
    """The session's runs once there are ``count`` and none is queued or running."""
    deadline = time.monotonic() + 60
    while True:
        runs: list[dict[str, Any]] = client.get(f"/v1/users/u/sessions/{session}/runs").json()[
            "runs"
        ]
        if len(runs) >= count and all(r["status"] not in ("QUEUED", "RUNNING") for r in runs):
            return runs
        assert time.monotonic() < deadline, runs
        time.sleep(0.05)


def totals(client: httpx.Client, session: str) -> Any:
    return (
        client.get("/v1/stats").json(),
        client.get("/v1/jobs").json(),
        client.get(f"/v1/users/u/sessions/{session}/events").json(),
    )


async def _fresh_load(url: str, session: str) -> int:
    async with open_store(url) as store:
        loaded = await DurableSessionService(store, cache_sessions=0).get_session(
            app_name=APP, user_id="u", session_id=session
        )
    assert loaded is not None
    return len(loaded.events)


def _fill(case: Any, route: str, payload: Any, paused: dict[str, Any]) -> dict[str, str]:
    """Points the generated case at the paused run and puts the payload where it stores."""
    headers = dict(AUTH)
    if route == "complete":
        case.path_parameters = {"job_id": paused["job_id"]}
        case.body = {"state": "SUCCEEDED", "result": payload}
    elif route == "webhook":
        case.body = {"job_id": paused["job_id"], "state": "SUCCEEDED", "result": payload}
        raw = json.dumps(case.body).encode()
        headers = webhooks.sign("webhook-secret", raw, time.time())
    elif route == "continue":
        case.path_parameters = {"user_id": "u", "session_id": paused["session"]}
        response = payload if isinstance(payload, dict) else {"result": payload}
        part = {"id": paused["call_id"], "name": "start_build", "response": response}
        case.body = {
            "invocation_id": paused["invocation_id"],
            "content": {"role": "user", "parts": [{"function_response": part}]},
        }
    else:
        case.path_parameters = {"user_id": "u", "session_id": paused["session"]}
        case.body = {"message": json.dumps(payload)[: 2 * MAX_BYTES] or "hi"}
    case.headers = {**(case.headers or {}), "content-type": "application/json"}
    return headers


def test_values_past_the_limits_are_refused_and_whatever_is_accepted_loads_on_a_fresh_worker(
    worker: ThreadedWorker, store_url: str
) -> None:
    schema = schemathesis.openapi.from_url(f"{worker.base_url}/openapi.json")
    cases = {
        route: schema[path]["POST"].as_strategy(GenerationMode.POSITIVE)
        for route, path in ROUTES.items()
    }
    client = worker.client()
    seen: dict[tuple[str, int], int] = {}
    counter = iter(range(10_000))

    def check(data: st.DataObject, route: str, payload: Any) -> None:
        session = f"f{next(counter)}"
        started = client.post(f"/v1/users/u/sessions/{session}/runs", json={"message": session})
        assert started.status_code == 202, started.text
        (run,) = wait(client, session, 1)
        assert run["status"] == "PAUSED", run
        events = client.get(f"/v1/users/u/sessions/{session}/events").json()["events"]
        (call_id,) = [
            part["function_call"]["id"]
            for item in events
            for part in (item["event"].get("content") or {}).get("parts") or []
            if part.get("function_call")
        ]
        paused = {
            "session": session,
            "job_id": f"build:{session}",
            "call_id": call_id,
            "invocation_id": run["invocation_id"],
        }
        case = data.draw(cases[route])
        headers = _fill(case, route, payload, paused)
        before = totals(client, session)
        response = case.call(base_url=worker.base_url, headers=headers, timeout=30)
        seen[route, response.status_code] = seen.get((route, response.status_code), 0) + 1
        assert response.status_code < 500, (route, response.text)
        case.validate_response(
            response,
            checks=[
                not_a_server_error,
                status_code_conformance,
                content_type_conformance,
                response_schema_conformance,
            ],
            headers=headers,
        )
        if response.status_code >= 400:
            assert response.status_code in (413, 422), (route, response.text)
            wait(client, session, 1)
            assert totals(client, session) == before, (route, response.status_code)
            return
        # Accepted: its run ends DONE and the session loads on a fresh worker.
        runs = wait(client, session, 2)
        # (a new message asks the model again, which starts another build: PAUSED)
        ended = ("DONE", "PAUSED") if route == "message" else ("DONE",)
        assert runs[0]["status"] in ended, (route, runs[0])
        assert asyncio.run(_fresh_load(store_url, session)) >= 4

    def fuzz(route: Any, payload: Any, examples: int) -> None:
        @given(data=st.data(), route=route, payload=payload)
        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            phases=[Phase.generate],  # each example runs an agent: no shrinking pass
            suppress_health_check=list(HealthCheck),
        )
        def one(data: st.DataObject, route: str, payload: Any) -> None:
            check(data, route, payload)

        one()

    fuzz(st.sampled_from(sorted(ROUTES)), payloads, 25)
    # Both refusals are reached whatever the draw above produced: one value too
    # deep and one too large, each through a generated case of its route.
    too_deep = trees(DEFAULT_MAX_DEPTH + 8, [True, False], 1)
    fuzz(st.just("complete"), st.just(too_deep), 1)
    assert seen.get(("complete", 422)), seen
    fuzz(st.just("continue"), st.just({"blob": "x" * (MAX_BYTES + 64)}), 1)
    assert seen.get(("continue", 413)), seen
    client.close()
    assert any(200 <= code < 300 for _, code in seen), seen
