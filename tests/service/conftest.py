"""A worker and its HTTP API in the test's own event loop, on each backend.

The API is called through httpx's ASGI transport (no socket); spans go to an
in-memory exporter of a private tracer provider (no global OpenTelemetry state).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from svc_support import AUTH, Service, settings_for

from durable_adk.demo.service_app import app as stock_app
from durable_adk.metrics import Metrics
from durable_adk.service import Worker, create_app
from durable_adk.store import open_store
from durable_adk.testing.fakes.process import FakeService


def telemetry() -> tuple[Metrics, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Metrics(tracer=provider.get_tracer("durable-adk-tests")), exporter


@pytest.fixture
async def service(store_url: str, request: pytest.FixtureRequest) -> AsyncIterator[Service]:
    overrides = dict(getattr(request, "param", {}))
    agent = overrides.pop("app", None) or stock_app()
    settings = settings_for(store_url, **overrides)
    metrics, exporter = telemetry()
    async with open_store(store_url) as store:
        worker = Worker(app=agent, store=store, settings=settings, metrics=metrics)
        http = create_app(worker)
        transport = httpx.ASGITransport(app=http)
        async with (
            worker.running(),
            httpx.AsyncClient(transport=transport, base_url="http://w", headers=AUTH) as client,
            httpx.AsyncClient(transport=transport, base_url="http://w") as anon,
        ):
            yield Service(worker, http, store, client, anon, metrics, exporter)


@pytest.fixture
def billing(tmp_path: Path) -> Iterator[FakeService]:
    """The counting billing service, a process of its own on 127.0.0.1."""
    with FakeService("billing", tmp_path / "billing.db") as started:
        yield started


@pytest.fixture
def receiver() -> Iterator[Any]:
    """A push receiver on 127.0.0.1 that counts every POST, up from the start."""
    from a2a_support import Receiver  # the A2A SDK: only the tests that ask for it

    started = Receiver()
    started.down = False
    try:
        yield started
    finally:
        started.close()
