"""Prometheus metrics: one module, one registry per worker, exposed by the service.

Every component takes an optional :class:`Metrics`; the default is a no-op
instance, so the library records nothing unless asked and tests never share
global counters. A worker builds one ``Metrics()`` (its own
``CollectorRegistry``), hands it to every component and serves
:meth:`Metrics.exposition` at ``/metrics``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Seconds, from a fast compensation to a long outage of a downstream system.
_COMPENSATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
_APPEND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)


class Metrics:
    """The durable-adk metrics of one process."""

    def __init__(self, registry: CollectorRegistry | None = None, *, enabled: bool = True) -> None:
        """Creates the metrics.

        Args:
            registry: Where to register (default: a new registry of its own).
            enabled: False makes every recording a no-op (the library default).
        """
        self.enabled = enabled
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
        self.job_completions = Counter(
            "durable_adk_job_completions",
            "Job completions received, by outcome (applied, duplicate, late).",
            ["outcome"],
            registry=r,
        )

    def saga_outcome(self, status: str, *, compensation_seconds: float | None = None) -> None:
        """Counts a saga's outcome and, when it compensated, how long that took."""
        if not self.enabled:
            return
        self.saga_outcomes.labels(status=status).inc()
        if compensation_seconds is not None:
            self.compensation_seconds.observe(compensation_seconds)

    def run_finished(self, status: str) -> None:
        """Counts a run reaching an end status."""
        if self.enabled:
            self.runs_finished.labels(status=status).inc()

    def recovered(self, cls: str, action: str) -> None:
        """Counts one recovery."""
        if self.enabled:
            self.recoveries.labels(cls=cls, action=action).inc()
            if action == "park":
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

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return bytes(generate_latest(self.registry))


NO_METRICS = Metrics(enabled=False)
"""The default: records nothing."""
