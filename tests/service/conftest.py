"""A worker and its HTTP API in the test's own event loop, on each backend.

The API is called through httpx's ASGI transport (no socket); spans go to an
in-memory exporter of a private tracer provider (no global OpenTelemetry state).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

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
