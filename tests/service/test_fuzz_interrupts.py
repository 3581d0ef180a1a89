"""The interrupt routes fuzzed (schemathesis) against real paused runs, on both backends.

Invalid answers aimed at an open interrupt, and any answer (valid or not) at
one already answered, at an unknown call id, or without the token; any
listing query: the worker never answers 5xx, answers match the spec, and
nothing changes (the inbox, the runs, the store's totals and the audit trail
stay as they were). Oversized bodies get 413.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode
from svc_support import AUTH, ThreadedWorker, settings_for, threaded_worker

from durable_adk.adk.runner import DurableRunner
from durable_adk.demo.approvals_app import APP_NAME
from durable_adk.demo.approvals_app import app as approvals_app
from durable_adk.service.schemas import AnswerIn
from durable_adk.store import open_store

ANSWER = "/v1/interrupts/{call_id}"


async def pause(url: str, orders: list[str]) -> None:
    async with open_store(url) as store:
        durable = DurableRunner(app=approvals_app(), app_name=APP_NAME, store=store)
        for order in orders:
            async for _ in durable.run(user_id="u", session_id=order, message=order):
                pass


@pytest.fixture
def worker(store_url: str) -> Iterator[tuple[ThreadedWorker, dict[str, str]]]:
    asyncio.run(pause(store_url, ["fuzz-open", "fuzz-answered"]))
    settings_ = settings_for(store_url, max_body_bytes=4096)
    with threaded_worker(settings_, app=approvals_app()) as running, running.client() as client:
        listed = client.get("/v1/interrupts").json()["interrupts"]
        ids = {i["session_id"]: i["call_id"] for i in listed}
        answered = client.post(
            ANSWER.format(call_id=ids["fuzz-answered"]), json={"by": "setup", "decision": "deny"}
        )
        assert answered.status_code == 200, answered.text
        carrier = answered.json()["run"]["run_id"]
        deadline = time.monotonic() + 60
        while client.get(f"/v1/runs/{carrier}").json()["run"]["status"] != "DONE":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        yield running, {"open": ids["fuzz-open"], "answered": ids["fuzz-answered"]}


def would_act(body: Any) -> bool:
    """Whether a body would answer the open confirmation (a valid decision)."""
    try:
        return AnswerIn.model_validate(body).decision is not None
    except ValidationError:
        return False


def snapshot(client: httpx.Client) -> Any:
    inbox = [
        client.get("/v1/interrupts", params={"status": s}).json()
        for s in ("OPEN", "ANSWERED", "EXPIRED", "CLOSED")
    ]
    return (
        client.get("/v1/stats").json(),
        inbox,
        client.get("/v1/runs").json(),
        client.get("/v1/actions").json(),
    )


def test_fuzzed_answers_change_nothing_when_refused(
    worker: tuple[ThreadedWorker, dict[str, str]],
) -> None:
    running, ids = worker
    schema = schemathesis.openapi.from_url(f"{running.base_url}/openapi.json")
    answer = schema[ANSWER]["POST"]
    listing = schema["/v1/interrupts"]["GET"]
    strategies: list[tuple[str | None, Any]] = [
        (ids["open"], answer.as_strategy(GenerationMode.NEGATIVE).filter(
            lambda c: not would_act(c.body)
        )),
    ]  # fmt: skip
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        for target in (ids["answered"], "call-unknown"):
            strategies.append((target, answer.as_strategy(mode)))
        strategies.append((None, listing.as_strategy(mode)))
    client = running.client()
    before = snapshot(client)
    seen: dict[int, int] = {}
    first_change: list[Any] = []

    @given(data=st.data(), authorized=st.booleans())
    @settings(
        max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def check(data: Any, authorized: bool) -> None:
        target, strategy = data.draw(st.sampled_from(strategies))
        case = data.draw(strategy)
        if target is not None:
            case.path_parameters = {**(case.path_parameters or {}), "call_id": target}
        headers = dict(AUTH) if authorized else {}
        response = case.call(base_url=running.base_url, headers=headers, timeout=30)
        seen[response.status_code] = seen.get(response.status_code, 0) + 1
        assert response.status_code < 500, (case.formatted_path, response.text)
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
            body = response.json()
            assert set(body) == {"error"} and body["error"]["message"], body
        else:
            assert target is None, (case.formatted_path, case.body, response.text)  # only reads
        if not first_change and snapshot(client) != before:
            first_change.append((case.formatted_path, case.body, response.status_code))
        assert not first_change, first_change

    check()
    # The draws are random: 409 (a valid answer to the one already answered) is
    # not always among them, so it is asked once here besides.
    again = client.post(
        ANSWER.format(call_id=ids["answered"]), json={"by": "ana", "decision": "approve"}
    )
    assert again.status_code == 409 and again.json()["error"]["message"], again.text
    seen[409] = seen.get(409, 0) + 1
    assert snapshot(client) == before
    assert seen.get(401) and seen.get(422) and seen.get(404), seen

    big = {"by": "ana", "decision": "approve", "payload": {"blob": "x" * 10_000}}
    response = client.post(ANSWER.format(call_id=ids["open"]), json=big)
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "body_too_large"
    assert snapshot(client) == before
    client.close()
