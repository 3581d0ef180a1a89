"""Compensations make a span and count their outcome; the default Metrics records
nothing and exports nothing by itself."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from durable_adk.effect_tables.sagas import Compensation, SagaLedger, SagaStatus, Undo
from durable_adk.metrics import NO_METRICS, Metrics
from durable_adk.store import Store


async def test_a_compensation_is_a_span_and_an_outcome(store: Store) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    metrics = Metrics(tracer=provider.get_tracer("t"))
    ledger = SagaLedger(store)
    saga = await ledger.begin(
        saga_id="e-1/trip",
        name="trip",
        app_name="a",
        user_id="u",
        session_id="s",
        invocation_id="e-1",
    )
    await ledger.step_pending(saga.saga_id, "book_hotel")
    await ledger.step_done(saga.saga_id, "book_hotel", {"booking": "H-1"})
    undone: list[Any] = []

    async def cancel_hotel(record: Any, key: str) -> None:
        undone.append((dict(record), key))

    result = await Compensation(
        ledger, {"book_hotel": Undo(compensate=cancel_hotel)}, metrics=metrics
    ).run(saga, "the flight was full")
    assert result.status is SagaStatus.COMPENSATED and len(undone) == 1
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "durable_adk.compensation"]
    assert span.attributes is not None
    assert span.attributes["durable_adk.saga_id"] == "e-1/trip"
    assert span.attributes["durable_adk.status"] == "COMPENSATED"
    text = metrics.exposition().decode()
    assert 'durable_adk_saga_outcomes_total{status="compensated"} 1.0' in text


def test_the_default_metrics_record_nothing() -> None:
    NO_METRICS.run_finished("DONE")
    NO_METRICS.recovered("NOT_STARTED", "redrive")
    NO_METRICS.set_runs_by_status({"DONE": 3})
    assert b'status="DONE"' not in NO_METRICS.exposition()
    # Spans go to the application's tracer provider; with none installed they
    # are no-ops. Checked in a fresh interpreter: other tests in this process
    # (ADK's own FastAPI app among them) install a global provider.
    script = (
        "from durable_adk.metrics import NO_METRICS\n"
        "with NO_METRICS.span('durable_adk.run') as span:\n"
        "    assert not span.is_recording()\n"
        "print('no-op')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "no-op" in done.stdout, done.stderr
