"""Observability of one process: Prometheus metrics and OpenTelemetry spans.

Every component takes an optional :class:`Metrics`; the default is a no-op
instance, so the library records nothing unless asked and tests never share
global counters. A worker builds one ``Metrics()`` (its own
``CollectorRegistry``), hands it to every component and serves
:meth:`Metrics.exposition` at ``/metrics``.

Spans (:meth:`Metrics.span`) go to the tracer given to the constructor, else
to OpenTelemetry's configured tracer provider: a no-op until the application
installs an SDK, so the library never exports anything by itself. Spans are
made even when the Prometheus half is disabled.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Seconds, from a fast compensation to a long outage of a downstream system.
_COMPENSATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
_APPEND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)


class Metrics:
    """The durable-adk metrics of one process."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        enabled: bool = True,
        tracer: trace.Tracer | None = None,
    ) -> None:
        """Creates the metrics.

        Args:
            registry: Where to register (default: a new registry of its own).
            enabled: False makes every recording a no-op (the library default).
            tracer: Where spans go (default: OpenTelemetry's global tracer
                provider, a no-op unless the application configured one).
        """
        self.enabled = enabled
        self._tracer = tracer
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.runs_finished = Counter(
            "durable_adk_runs_finished", "Runs that reached an end status.", ["status"], registry=r
        )
        self.runs_by_status = Gauge(
            "durable_adk_runs", "Runs on the ledger by status (sampled).", ["status"], registry=r
        )
        self.recoveries = Counter(
            "durable_adk_recoveries",
            "Runs recovered by the sweeper, by class found.",
            ["cls", "action"],
            registry=r,
        )
        self.parked = Counter("durable_adk_runs_parked", "Runs parked for a person.", registry=r)
        self.lease_renewal_failures = Counter(
            "durable_adk_lease_renewal_failures",
            "Lease renewals that failed (run lost).",
            registry=r,
        )
        self.append_seconds = Histogram(
            "durable_adk_append_seconds",
            "Session append latency.",
            buckets=_APPEND_BUCKETS,
            registry=r,
        )
        self.saga_outcomes = Counter(
            "durable_adk_saga_outcomes",
            "Sagas by final status (committed, compensated, compensation_failed).",
            ["status"],
            registry=r,
        )
        self.compensation_seconds = Histogram(
            "durable_adk_compensation_seconds",
            "Time from a saga's failure to fully compensated.",
            buckets=_COMPENSATION_BUCKETS,
            registry=r,
        )
        self.purged_rows = Counter(
            "durable_adk_purged_rows",
            "Rows the purge deleted (or emptied of their payload), by table.",
            ["table"],
            registry=r,
        )
        self.purged_bytes = Counter(
            "durable_adk_purged_bytes",
            "Bytes of payload the purge deleted, by table.",
            ["table"],
            registry=r,
        )
        self.oldest_kept_seconds = Gauge(
            "durable_adk_oldest_kept_seconds",
            "Age of the oldest row kept after the last purge, by table (sessions, runs).",
            ["table"],
            registry=r,
        )
        self.job_completions = Counter(
            "durable_adk_job_completions",
            "Job completions received, by outcome (applied, duplicate, late).",
            ["outcome"],
            registry=r,
        )
        self.values_by_key = Gauge(
            "durable_adk_encrypted_values",
            "Stored payload values on each key, as last counted by `keys status` or "
            "`keys rotate` ('clear': not encrypted; 'user keys': users' own data keys).",
            ["key_id"],
            registry=r,
        )

    def purged(self, table: str, rows: int, size: int) -> None:
        """Counts rows and bytes a purge deleted (or emptied) in ``table``."""
        if self.enabled and (rows or size):
            self.purged_rows.labels(table).inc(rows)
            self.purged_bytes.labels(table).inc(size)

    def oldest_kept(self, table: str, age: float | None) -> None:
        """Sets the age (seconds) of the oldest row of ``table`` a purge kept (0: none)."""
        if self.enabled:
            self.oldest_kept_seconds.labels(table).set(0.0 if age is None else age)

    def saga_outcome(self, status: str, *, compensation_seconds: float | None = None) -> None:
        """Counts a saga's outcome and, when it compensated, how long that took."""
        if not self.enabled:
            return
        self.saga_outcomes.labels(status=status).inc()
        if compensation_seconds is not None:
            self.compensation_seconds.observe(compensation_seconds)

    def run_finished(self, status: str) -> None:
        """Counts a run reaching an end status (and names it on the current span)."""
        trace.get_current_span().set_attribute("durable_adk.status", status)
        if self.enabled:
            self.runs_finished.labels(status=status).inc()

    def recovered(self, cls: str, action: str) -> None:
        """Counts one recovery (a parking is counted where the ledger parks: :meth:`run_parked`)."""
        if self.enabled:
            self.recoveries.labels(cls=cls, action=action).inc()

    def run_parked(self) -> None:
        """Counts a run parked for a person (its dead letter was written)."""
        if self.enabled:
            self.parked.inc()

    def lease_lost(self) -> None:
        """Counts a failed lease renewal."""
        if self.enabled:
            self.lease_renewal_failures.inc()

    def append_latency(self, seconds: float) -> None:
        """Records one session append's latency."""
        if self.enabled:
            self.append_seconds.observe(seconds)

    def job_completion(self, outcome: str) -> None:
        """Counts one job completion by outcome."""
        if self.enabled:
            self.job_completions.labels(outcome=outcome).inc()

    def set_runs_by_status(self, counts: Mapping[str, int]) -> None:
        """Sets the sampled runs-by-status gauge (statuses absent from ``counts`` read 0)."""
        if not self.enabled:
            return
        for status in ("QUEUED", "RUNNING", "PAUSED", "DONE", "FAILED", "PARKED", *counts):
            self.runs_by_status.labels(status=status).set(counts.get(status, 0))

    def set_values_by_key(self, counts: Mapping[str, int]) -> None:
        """Sets the values-by-key gauge (keys counted before and absent now read 0)."""
        if not self.enabled:
            return
        seen = {labels[0] for labels in self.values_by_key._metrics}
        for key_id in {*seen, *counts}:
            self.values_by_key.labels(key_id=key_id).set(counts.get(key_id, 0))

    @property
    def tracer(self) -> trace.Tracer:
        """The tracer spans go to."""
        return self._tracer or trace.get_tracer("durable_adk")

    @contextmanager
    def span(
        self, name: str, attributes: Mapping[str, AttributeValue | None] | None = None
    ) -> Iterator[trace.Span]:
        """A span around a block; an exception escaping the block marks it as an error.

        Args:
            name: The span's name, e.g. ``"durable_adk.run"``.
            attributes: Span attributes; None values are left out.
        """
        given = {k: v for k, v in (attributes or {}).items() if v is not None}
        with self.tracer.start_as_current_span(
            name, attributes=given, record_exception=True, set_status_on_exception=True
        ) as current:
            yield current

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return bytes(generate_latest(self.registry))


NO_METRICS = Metrics(enabled=False)
"""The default: records nothing."""
