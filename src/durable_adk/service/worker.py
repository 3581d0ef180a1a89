"""The worker: drives runs started over HTTP, recovers orphans, drains on shutdown.

What it guarantees:

* A run started through :meth:`Worker.start_run` is on the ledger (QUEUED,
  leased by this worker) before the call returns its id; it is then driven in
  the background through :class:`~durable_adk.adk.runner.DurableRunner`, in
  the session's queue, under a renewed lease. A crash anywhere leaves a row
  that any worker's sweeper recovers.
* Every worker runs the recovery sweeper, the job resumer, the job deadline
  sweep, the progress sender, the interrupts' deadline sweep and the saga
  sweepers in loops, so several
  workers on one PostgreSQL share the work: each claim is a single statement,
  so a run, a job or a saga is taken by exactly one of them.
* :meth:`Worker.drain` (graceful shutdown) stops taking work, lets the runs in
  progress (those driven for HTTP callers, and the runner's detached drives:
  a recovery whose sweep loop was stopped, a run whose caller went away)
  finish for ``drain_seconds``, then cancels the rest and hands their
  leases back in one statement: expired, without back-off and without counting
  the attempt, so another worker's next sweep takes them over at once. The
  fencing epoch still guards them: the next claim bumps it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from google.adk.agents import BaseAgent, LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode  # type: ignore[attr-defined]
from google.adk.apps import App
from google.adk.events.event import Event
from google.adk.sessions.session import Session
from google.genai import types
from typing_extensions import override

from durable_adk import errors
from durable_adk.adk.loops.background import Background, BackgroundSettings
from durable_adk.adk.loops.background import sagas_of as sagas_of
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.services.app_services import AppServices
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.metrics import Metrics
from durable_adk.service.ops import Operations
from durable_adk.service.settings import ServiceSettings
from durable_adk.store.base import Store
from durable_adk.tables.ledger import Run

logger = logging.getLogger("durable_adk.service")


class TimedSessionService(DurableSessionService):
    """A DurableSessionService that records each append's latency."""

    def __init__(self, store: Store, *, metrics: Metrics) -> None:
        """Creates the service.

        Args:
            store: The open store.
            metrics: Where append latency is recorded.
        """
        super().__init__(store)
        self._metrics = metrics

    @override
    async def append_event(self, session: Session, event: Event) -> Event:
        started = time.perf_counter()
        try:
            return await super().append_event(session, event)
        finally:
            self._metrics.append_latency(time.perf_counter() - started)


def streaming_config(base: RunConfig, *, streaming: bool) -> RunConfig:
    """``base`` with ADK's SSE streaming on (partial events) or off."""
    mode = StreamingMode.SSE if streaming else StreamingMode.NONE
    return base.model_copy(update={"streaming_mode": mode})


def declared_with(settings: ServiceSettings) -> dict[str, Any]:
    """The app's services and version as runner arguments: ``--app-version`` (with its
    ``--compatible-version``) replaces the version the app's module declares."""
    services = settings.services or AppServices()
    return services.declared_as(settings.app_version, settings.compatible_versions).runner_kwargs()


READY_PROBE_TIMEOUT = 2.0
"""Seconds ``/readyz``'s probe of the store may take before the worker says it is not ready."""


class Worker:
    """One worker process's durable machinery, without its HTTP front."""

    def __init__(
        self,
        *,
        app: App | BaseAgent,
        store: Store,
        settings: ServiceSettings,
        metrics: Metrics | None = None,
    ) -> None:
        """Builds the runner, the sweeper and the operations over one store.

        Args:
            app: The ADK App (resumable) or bare root agent this worker serves.
            store: The open store (the caller closes it); its payload limits
                become the settings' (``max_payload_depth``, ``max_payload_bytes``).
            settings: Lease, recovery and drain settings.
            metrics: Where metrics and spans go (default: a registry of its own).
        """
        self.settings = settings
        store.limits = settings.payload_limits
        self.store = store
        self.metrics = metrics or Metrics()
        self.sessions = TimedSessionService(store, metrics=self.metrics)
        self.runner = DurableRunner(
            app=app,
            store=store,
            worker_id=settings.worker_id,
            lease=settings.lease,
            session_service=self.sessions,
            max_attempts=settings.max_attempts,
            backoff=settings.backoff,
            idempotent_tools=settings.idempotent_tools,
            sync_tools=settings.sync_tools,
            metrics=self.metrics,
            interrupt_deadlines=dict(settings.interrupt_deadlines),
            run_config=streaming_config(RunConfig(), streaming=settings.streaming),
            background=False,  # the worker runs them itself: self.background
            **declared_with(settings),
        )
        self.ops = Operations(
            store,
            root_agent_name=self.runner.root_agent_name,
            app_name=self.runner.app_name,
            lease_seconds=settings.lease,
            owner_speaks_first=isinstance(self.runner.app.root_agent, LlmAgent),
            nodes=self.runner.node_kinds,
        )
        # The same loops as ``async with DurableRunner``, on the worker's cadence.
        self.background = Background(
            self.runner,
            BackgroundSettings(
                sweep_interval=settings.sweep_interval,
                sweep_batch=settings.sweep_batch,
                resume_interval=settings.resume_interval,
                expiry_interval=settings.expiry_interval,
                progress_interval=settings.progress_interval,
                saga_quiet=settings.saga_quiet,
                drain_seconds=settings.drain_seconds,
                retention=settings.retention,
            ),
            metrics=self.metrics,
        )
        self.sweeper = self.background.sweeper
        self.jobs = self.background.jobs
        self.resumer = self.background.resumer
        self.sagas = self.background.sagas
        self.draining = asyncio.Event()
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._drained = False

    @property
    def worker_id(self) -> str:
        """This worker's name on the ledger."""
        return self.runner.worker_id

    @property
    def app_name(self) -> str:
        """The ADK app this worker serves."""
        return self.runner.app_name

    @property
    def active_runs(self) -> list[str]:
        """Ids of the runs this worker is driving for HTTP callers."""
        return sorted(self._runs)

    # ------------------------------------------------------------ lifecycle

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Worker]:
        """Runs the background loops; drains and hands back leases on exit.

        The loops (:class:`~durable_adk.adk.loops.background.Background`, as in
        ``async with DurableRunner``): the recovery sweeper, the job submitter
        (retries submissions not accepted yet), the job resumer (answers the
        calls of finished jobs), the job deadline sweep, the progress sender,
        and a saga sweeper per SagaSequence of the app.
        """
        # Draining (SIGTERM) ends the loops' passes at once; drain() then cancels them.
        await self.background.start(stop=self.draining)
        try:
            yield self
        finally:
            await self.drain()

    def begin_drain(self) -> None:
        """Stops taking work: new runs are refused, followers are told to reconnect."""
        self.draining.set()

    async def drain(self) -> list[str]:
        """Graceful shutdown: finish or hand back every run this worker holds.

        Returns:
            The ids of the runs whose leases were handed back.
        """
        if self._drained:
            return []
        self._drained = True
        self.begin_drain()
        await self.background.stop()
        until = time.monotonic() + self.settings.drain_seconds
        pending = list(self._runs.values())
        if pending:
            _done, still = await asyncio.wait(pending, timeout=self.settings.drain_seconds)
            for task in still:
                task.cancel()  # its drive detaches: cancelled with the others just below
            await asyncio.gather(*still, return_exceptions=True)
        # Drives whose caller stopped reading (a cancelled sweep, a cancelled
        # run task above) go on to their end until the drain time is up.
        await self.runner.aclose(grace=max(0.0, until - time.monotonic()))
        try:
            rows = await self.store.fetch("service_hand_back", {"owner": self.worker_id})
        except errors.StoreError:
            # Nothing is lost: the leases run out by themselves and a sweeper takes over.
            logger.exception("worker %s could not hand its leases back", self.worker_id)
            return []
        handed = sorted(str(r["run_id"]) for r in rows)
        if handed:
            logger.info("worker %s handed back runs %s", self.worker_id, handed)
        return handed

    async def _sweep_once(self) -> None:
        """One recovery pass (the background sweeper's), for tests that step it by hand."""
        await self.background.sweep_once()

    # ----------------------------------------------------------------- runs

    async def start_run(
        self,
        *,
        user_id: str,
        session_id: str,
        message: types.Content,
        invocation_id: str | None = None,
        streaming: bool | None = None,
        run_id: str | None = None,
    ) -> Run:
        """Puts a run on the ledger and drives it in the background.

        DurableRunner.run's steps, split (``submit``, then ``wait_for_turn`` and
        ``drive`` in a task) so that the caller learns the run id as soon as the
        row is written, before the run's turn comes.

        Args:
            user_id: The session's user.
            session_id: The session (created if missing).
            message: The user's message.
            invocation_id: A paused invocation that ``message`` (function
                responses only) continues; None starts a new one.
            streaming: Drive it with ``StreamingMode.SSE`` (True) or without
                (False); None: the worker's setting. A recovered drive uses
                the worker's setting.
            run_id: The run's id, chosen by the caller (an idempotency key's):
                if it is on the ledger already, with the same session and
                message, that run comes back ``replayed``, and nothing is
                recorded or driven here (whoever recorded it drives it, or
                recovery does).

        Returns:
            The run as recorded (QUEUED). A continuation of an invocation of a
            version this worker does not serve is not driven here: it is
            handed over (:meth:`hand_over`) and the caller tells its own
            caller so (:meth:`serves`, :meth:`elsewhere`).

        Raises:
            Draining: This worker is shutting down.
        """
        if self.draining.is_set():
            raise errors.Draining()
        run, message = await self.runner.submit(
            user_id=user_id,
            session_id=session_id,
            message=message,
            invocation_id=invocation_id,
            run_id=run_id,
        )
        if run.replayed:
            return run
        if invocation_id is not None and not self.serves(run):
            await self.hand_over(run)  # recorded; a worker of its version continues it
            return run
        self.drive_queued(run, message, resume=invocation_id is not None, streaming=streaming)
        return run

    def serves(self, run: Run) -> bool:
        """Whether this worker may drive ``run`` (its version is one this worker serves)."""
        return self.runner.path.serving.takes(run.app_version)

    async def hand_over(self, run: Run) -> None:
        """Ends this worker's lease on a queued continuation of a version it does not serve.

        The run stays QUEUED; the recovery of a worker of its version takes it
        when its turn comes.
        """
        await self.runner.path.ledger.hand_over(run.lease)

    def elsewhere(self, version: str | None, what: str) -> errors.VersionElsewhere:
        """The error a caller gets when what it sent waits for a worker of another version.

        Args:
            version: The version the continuation is recorded under.
            what: What was recorded (``"the answer (run r-1)"``).
        """
        return errors.VersionElsewhere(
            f"{what} is recorded, but it continues an invocation of app version {version}, "
            f"which this worker ({self.runner.path.serving.describe()}) does not serve: a "
            f"worker of version {version} (or one that declares it compatible) continues it; "
            "until one runs it waits (`durable-adk versions list` shows who serves it)"
        )

    def drive_queued(
        self, run: Run, message: types.Content, *, resume: bool, streaming: bool | None = None
    ) -> None:
        """Drives a run this worker put on the ledger (QUEUED, held by it) in the background.

        The second half of :meth:`start_run`; also how an answer given
        through the interrupts inbox continues its invocation at once.
        """
        run_config = (
            None
            if streaming is None
            else streaming_config(self.runner.run_config, streaming=streaming)
        )
        task = asyncio.create_task(
            self._drive(run, message, resume=resume, run_config=run_config),
            name=f"durable-adk-{run.run_id}",
        )
        self._runs[run.run_id] = task
        task.add_done_callback(lambda _t: self._runs.pop(run.run_id, None))

    async def _drive(
        self,
        run: Run,
        message: types.Content,
        *,
        resume: bool = False,
        run_config: RunConfig | None = None,
    ) -> None:
        try:
            outcome = await self.runner.path.drive_submitted(
                run, message, resume=resume, run_config=run_config
            )
        except errors.Fenced as exc:
            logger.debug("run %s: %s", run.run_id, exc)
        except errors.RunCancelled as exc:
            logger.info("run %s: %s", run.run_id, exc)
        except errors.StoreError as exc:
            # Only waiting for the run's turn talks to the store outside the
            # drive (whose store failures end in its outcome): the row is
            # still QUEUED or RUNNING under our lease, which expires, and a
            # sweeper then recovers the run. An outage (said once by the
            # store) needs no traceback.
            logger.log(
                logging.WARNING if isinstance(exc, errors.StoreUnavailable) else logging.ERROR,
                "run %s: the store failed before its drive (%s); its lease expires and "
                "recovery takes it over then",
                run.run_id,
                exc,
                exc_info=not isinstance(exc, errors.StoreUnavailable),
            )
        else:
            # The one ending logged it (taken_over, lease_lost, parked, handed_back, failed).
            logger.debug("run %s ended %s", run.run_id, outcome.ending.kind.value)

    async def refresh_gauges(self) -> dict[str, int]:
        """Samples the runs-by-status gauge from the ledger; returns the counts."""
        counts = await self.ops.run_counts()
        self.metrics.set_runs_by_status(counts)
        return counts

    async def readiness(self) -> tuple[bool, str]:
        """Whether this worker can take work now, and why not (``/readyz``).

        Not ready while it drains, while its store is in an outage (unreachable
        or read-only: :attr:`~durable_adk.store.base.Store.health`), or when a
        probe of the store finds it so now (one statement, bounded by
        :data:`READY_PROBE_TIMEOUT`); ready again when a write works.
        """
        if self.draining.is_set():
            return False, "draining: this worker takes no new work"
        health = self.store.health
        if health.down:
            return health.ready()
        try:
            await asyncio.wait_for(self.store.probe(), READY_PROBE_TIMEOUT)
        except (errors.StoreError, TimeoutError) as exc:
            failure = (
                exc
                if isinstance(exc, errors.StoreUnavailable)
                else errors.StoreUnavailable(f"the store's probe failed: {exc}")
            )
            health.failed(failure)
            return False, f"the store is unavailable: {failure}"
        return True, "ready: the store takes writes"

    def describe(self) -> dict[str, Any]:
        """This worker's identity and state, for the health endpoint."""
        return {
            "worker_id": self.worker_id,
            "app_name": self.app_name,
            "draining": self.draining.is_set(),
            "active_runs": len(self._runs),
        }
