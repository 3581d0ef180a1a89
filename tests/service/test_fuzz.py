"""The API fuzzed from its own OpenAPI spec (schemathesis), on a real socket.

Valid and invalid requests for every operation, with and without the token.
Whatever comes, the worker never answers 5xx, every answer matches the spec,
and a refused request (4xx) leaves the store exactly as it was.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode
from svc_support import AUTH, ThreadedWorker, settings_for, threaded_worker, wait_until


@pytest.fixture
def worker(store_url: str) -> Iterator[ThreadedWorker]:
    with threaded_worker(settings_for(store_url)) as running:
        yield running


def settled(client: httpx.Client) -> dict[str, Any] | None:
    """The store's totals once no run is queued or running (None before that)."""
    counts = client.get("/v1/runs-by-status").json()["counts"]
    if counts["QUEUED"] or counts["RUNNING"]:
        return None
    stats: dict[str, Any] = client.get("/v1/stats").json()
    return stats


def test_fuzzed_requests_never_fail_the_worker_nor_change_anything_when_refused(
    worker: ThreadedWorker,
) -> None:
    schema = schemathesis.openapi.from_url(f"{worker.base_url}/openapi.json")
    cases = st.one_of(
        schema.as_strategy(GenerationMode.POSITIVE),
        schema.as_strategy(GenerationMode.NEGATIVE),
    )
    client = worker.client()
    seen: dict[int, int] = {}

    @given(case=cases, authorized=st.booleans())
    @settings(
        max_examples=250,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any, authorized: bool) -> None:
        before = wait_until(lambda: settled(client))
        headers = dict(AUTH) if authorized else {}
        if case.path == "/webhooks/jobs":
            headers = {}  # the webhook's own signature is fuzzed, not the token
        response = case.call(base_url=worker.base_url, headers=headers, timeout=30)
        seen[response.status_code] = seen.get(response.status_code, 0) + 1
        assert response.status_code < 500, (case.method, case.formatted_path, response.text)
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
            after = wait_until(lambda: settled(client))
            assert after == before, (case.method, case.formatted_path, response.status_code)

    started = time.monotonic()
    check()
    client.close()
    # The fuzzer reached past the guards: some requests were accepted, some refused.
    assert seen.get(401) and any(200 <= code < 300 for code in seen), seen
    assert any(code in seen for code in (404, 409, 422)), seen
    assert time.monotonic() - started < 120
