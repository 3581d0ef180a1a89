"""The operator routes fuzzed (schemathesis) against real runs, on both backends.

Invalid bodies aimed at a parked run, and any body (valid or not) aimed at a
finished run, an unknown run or without the token: the worker never answers
5xx, answers match the spec, and nothing changes: the run, the store's
totals and the audit trail stay as they were. Oversized bodies get 413.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from op_support import park_in_store
from pydantic import ValidationError
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode
from svc_support import AUTH, ThreadedWorker, settings_for, threaded_worker

from durable_adk.service.schemas import AbandonIn, ResolveIn
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger

ROUTES = ["/v1/runs/{run_id}/resolve", "/v1/runs/{run_id}/abandon", "/v1/runs/{run_id}/cancel"]


async def prepare(url: str) -> dict[str, str]:
    async with open_store(url) as store:
        parked, _ = await park_in_store(store, "fuzz-parked")
        ended, _ = await park_in_store(store, "fuzz-ended")
        done = await RunLedger(store).abandon(ended.run_id, by="setup", reason="closed")
        assert done.changed
        return {"parked": parked.run_id, "ended": ended.run_id}


@pytest.fixture
def worker(store_url: str) -> Iterator[tuple[ThreadedWorker, dict[str, str]]]:
    ids = asyncio.run(prepare(store_url))
    with threaded_worker(settings_for(store_url, max_body_bytes=4096)) as running:
        yield running, ids


def would_act(route: str, body: Any) -> bool:
    """Whether a body is a valid action (negative cases may break only a header)."""
    try:
        if route.endswith("/abandon"):
            AbandonIn.model_validate(body)
            return True
        parsed = ResolveIn.model_validate(body)
    except ValidationError:
        return False
    return (parsed.result is None) != (parsed.results is None)


def snapshot(client: httpx.Client, ids: dict[str, str]) -> Any:
    runs = [client.get(f"/v1/runs/{run_id}").json()["run"] for run_id in ids.values()]
    return client.get("/v1/stats").json(), runs, client.get("/v1/actions").json()


def test_fuzzed_operator_actions_change_nothing_when_refused(
    worker: tuple[ThreadedWorker, dict[str, str]],
) -> None:
    running, ids = worker
    schema = schemathesis.openapi.from_url(f"{running.base_url}/openapi.json")
    strategies: list[tuple[str, Any]] = []
    for route in ROUTES:
        operation = schema[route]["POST"]
        # Invalid bodies at the parked run (a valid one would act on it; so
        # would any cancel); anything at the finished and unknown runs.
        if not route.endswith("/cancel"):
            negative = operation.as_strategy(GenerationMode.NEGATIVE)
            strategies.append(
                (ids["parked"], negative.filter(lambda c, r=route: not would_act(r, c.body)))
            )
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            for target in (ids["ended"], "run-unknown"):
                strategies.append((target, operation.as_strategy(mode)))
    client = running.client()
    before = snapshot(client, ids)
    seen: dict[int, int] = {}
    first_change: list[Any] = []

    @given(data=st.data(), authorized=st.booleans())
    @settings(
        max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def check(data: Any, authorized: bool) -> None:
        target, strategy = data.draw(st.sampled_from(strategies))
        case = data.draw(strategy)
        case.path_parameters = {**(case.path_parameters or {}), "run_id": target}
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
        body = response.json()
        if response.status_code >= 400:
            assert set(body) == {"error"} and body["error"]["message"], body
        else:
            assert body["changed"] is False, (case.formatted_path, case.body, body)
        if not first_change and snapshot(client, ids) != before:
            first_change.append((case.formatted_path, case.body, response.status_code, body))
        assert not first_change, first_change

    check()
    assert seen.get(401) and seen.get(422) and seen.get(404), seen
    assert any(code in seen for code in (200, 409)), seen

    # Oversized bodies are refused before any route sees them.
    big = {"by": "ana", "result": {"blob": "x" * 10_000}}
    for route in ROUTES:
        response = client.post(route.format(run_id=ids["parked"]), json=big)
        assert response.status_code == 413, response.text
        assert response.json()["error"]["code"] == "body_too_large"
    assert snapshot(client, ids) == before
    client.close()
