"""The background loops of an app: one wiring for every process that runs them.

`Background` builds, over one run path (a DurableRunner's), every loop a
durable app needs besides its live runs: the recovery sweeper (after ending
the runs an operator cancelled whose owner died), the job submitter, the job
resumer, the job deadline sweep, the waker of durable sleeps, the progress
sender, the interrupts' deadline sweep (an unanswered interrupt past its
deadline gets its default outcome), a saga sweeper per
:class:`SagaSequence` of the app and, when the settings carry a retention
policy, the purge (:mod:`durable_adk.lifecycle.purge`). ``async with DurableRunner(...)`` runs them
(unless ``background=False``), the worker service runs them through the same
class, and ``durable-adk recover`` runs each pass once (:meth:`once`).

What it guarantees:

* Each loop runs its pass at start-up and then every interval; a pass that
  fails is logged and the next one runs on time (:mod:`durable_adk.adk.loops.every`).
* :meth:`stop` cancels every loop and waits for them: a sweep cancelled in
  the middle of a recovery detaches that drive, which goes on to its end (the
  runner's ``aclose`` waits for it). No task outlives ``stop`` but those.
* While the loops run, the runner knows (``runner.background``), so it does
  not warn that no sweeper runs, and the process beats as a server of its
  version (``durable-adk versions`` lists it); :meth:`stop` says goodbye. A
  one-off pass (:meth:`once`) serves nothing and never syncs the schedules.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from durable_adk import errors
from durable_adk.adk.loops import every as loops
from durable_adk.adk.loops.every import BackgroundSettings as BackgroundSettings
from durable_adk.adk.loops.recovery import Recovery, Sweeper
from durable_adk.adk.loops.resume import (
    ExpirySweeper,
    ProgressSender,
    Resumer,
    Resumption,
    Submitter,
)
from durable_adk.adk.loops.scheduler import Fired, Scheduler
from durable_adk.adk.loops.sleep import Waker
from durable_adk.adk.runs.inbox import InboxAnswer, InterruptSweeper
from durable_adk.adk.runs.path import HasRunPath
from durable_adk.adk.shapes import agent_tree
from durable_adk.adk.tools.saga_agent import SagaSequence, SagaSweeper
from durable_adk.effect_tables.jobs import Job, JobTable
from durable_adk.effect_tables.sagas import Saga
from durable_adk.lifecycle.pacing import Pacer
from durable_adk.lifecycle.policy import RetentionPolicy
from durable_adk.lifecycle.purge import PurgeReport, purge
from durable_adk.metrics import Metrics
from durable_adk.tables.ledger import RunStatus
from durable_adk.tables.sweeps import record_beat, record_leave

logger = logging.getLogger("durable_adk.background")

MIN_BEAT = 2.0
"""Seconds between a serving process's beats at least (however fast it sweeps): a
beat late by less than this never drops a live worker from the list."""

MAX_BEAT = 5.0
"""Seconds between a serving process's beats at most: a killed one drops out
of ``durable-adk versions`` within two of them."""


def sagas_of(root: object) -> list[SagaSequence]:
    """Every SagaSequence in an agent tree (the one tree walk: sub-agents, graph nodes, ...)."""
    return [found.item for found in agent_tree.agents(root) if isinstance(found.item, SagaSequence)]


@dataclass(frozen=True, slots=True)
class PassReport:
    """What one pass of every loop did (:meth:`Background.once`).

    Attributes:
        cancelled: Runs ended CANCELLED (asked to stop; their owner died).
        recoveries: What the recovery sweeper did, one entry per run.
        submitted: Jobs whose submission the outside system accepted.
        expired: Jobs ended past their deadline.
        resumed: Resume runs that answered finished jobs' calls.
        sagas: Sagas finished by the saga sweepers.
        interrupts: Interrupts given their default outcome at their deadline.
        woken: Durable sleeps' timers woken (their calls answered by the resumer).
        ticks: What the schedule poller did with the ticks due.
        purged: What the purge deleted (None: the app has no retention policy).
    """

    cancelled: list[str] = field(default_factory=list)
    recoveries: list[Recovery] = field(default_factory=list)
    submitted: list[Job] = field(default_factory=list)
    expired: list[Job] = field(default_factory=list)
    resumed: list[Resumption] = field(default_factory=list)
    sagas: list[Saga] = field(default_factory=list)
    interrupts: list[InboxAnswer] = field(default_factory=list)
    woken: list[Job] = field(default_factory=list)
    ticks: list[Fired] = field(default_factory=list)
    purged: PurgeReport | None = None

    @property
    def need_a_person(self) -> list[Recovery]:
        """The recoveries that ended PARKED or FAILED."""
        bad = (RunStatus.PARKED, RunStatus.FAILED)
        return [r for r in self.recoveries if r.status in bad]

    @property
    def left_for_later(self) -> list[Recovery]:
        """The re-drives a transient fault interrupted: back on the ledger for a later pass."""
        return [r for r in self.recoveries if r.status is RunStatus.RUNNING]


class Background:
    """An app's background loops over one run path (a DurableRunner, or its path)."""

    def __init__(
        self,
        runner: HasRunPath,
        settings: BackgroundSettings | None = None,
        *,
        metrics: Metrics | None = None,
        before_sweep: Callable[[], Awaitable[object]] | None = None,
        one_off: bool = False,
    ) -> None:
        """Builds the loops (nothing runs until :meth:`start` or :meth:`once`).

        Args:
            runner: Drives the recovered and resumed runs; its worker id owns the claims.
            settings: The loops' cadence (default ``BackgroundSettings()``).
            metrics: Where recoveries, parkings and saga outcomes go (default: the runner's).
            before_sweep: Called at the start of each recovery pass (the
                worker stops the runs an operator cancelled).
            one_off: These passes run once (``durable-adk recover``): the
                sweeper's beat says so (:mod:`durable_adk.tables.sweeps`), the
                process is never listed as serving, and the schedule poller
                never syncs the schedules.
        """
        runner = runner.path
        self.runner = runner
        self.settings = settings or BackgroundSettings()
        self.metrics = metrics if metrics is not None else runner.metrics
        s = self.settings
        self.sweeper = Sweeper(
            runner,
            batch=s.sweep_batch,
            interval=s.sweep_interval,
            metrics=self.metrics,
            concurrency=s.sweep_concurrency,
            one_off=one_off,
        )
        self.jobs = JobTable(runner.store)
        self.resumer = Resumer(runner, self.jobs, interval=s.resume_interval)
        # Submissions not accepted yet are retried on the resumer's cadence.
        self.submitter = Submitter(self.jobs, runner=runner, interval=s.resume_interval)
        self.expiry = ExpirySweeper(self.jobs, resumer=self.resumer, interval=s.expiry_interval)
        # Durable sleeps wake on the resumer's cadence: at most one interval late.
        self.waker = Waker(self.jobs, resumer=self.resumer, interval=s.resume_interval)
        self.progress = ProgressSender(runner, self.jobs, interval=s.progress_interval)
        # The default outcome (deny) is queued with no lease: the next recovery sweep drives it on.
        self.inbox = InterruptSweeper(
            runner.store,
            app_name=runner.app_name,
            owner=runner.worker_id,
            job_tools=runner.path.job_tools,
        )
        self.sagas = sagas_of(runner.app.root_agent)
        for saga in self.sagas:
            saga.metrics = self.metrics  # its outcomes and compensation times
        self.saga_sweepers = [
            SagaSweeper(
                saga,
                runner.sessions,
                app_name=runner.app_name,
                owner=runner.worker_id,
                quiet_for=s.saga_quiet,
                serving=runner.serving,
            )
            for saga in self.sagas
        ]
        self.scheduler = Scheduler(
            runner,
            runner.schedules,
            interval=s.schedule_interval,
            lease=s.schedule_lease,
            sync=not one_off,  # a one-off pass fires due ticks, never rewrites the schedules
        )
        self.before_sweep = before_sweep
        self._tasks: list[asyncio.Task[None]] = []
        self._pacer: tuple[tuple[float, int], Pacer] | None = None

    @property
    def running(self) -> bool:
        """Whether the loops run."""
        return bool(self._tasks)

    async def sweep_once(self) -> list[Recovery]:
        """One recovery pass: cancelled runs of dead owners first, then the sweeper's claims."""
        if self.before_sweep is not None:
            await self.before_sweep()
        return await self.sweeper.recover_once()

    async def sweep_sagas_once(self) -> list[Saga]:
        """One pass of every saga sweeper of the app."""
        finished: list[Saga] = []
        for sweeper in self.saga_sweepers:
            finished.extend(await sweeper.sweep_once())
        return finished

    async def purge_once(self) -> PurgeReport | None:
        """One pass of the purge under the app's retention policy (None: it has none)."""
        policy = self.settings.retention
        if policy is None:
            return None
        path = self.runner
        return await purge(
            path.store,
            path.app_name,
            policy,
            metrics=self.metrics,
            must_exist=False,
            pacer=self.purge_pacer(policy),
        )

    def purge_pacer(self, policy: RetentionPolicy) -> Pacer:
        """The purge's pacer, kept from pass to pass while the policy's duty and batch
        stay: each pass starts at the batch size (and the floor) the passes before
        learned, not again at the dialect's least batch (a pass of a purge that
        keeps up with a steady load is short: started afresh, it marked and
        deleted its least batch at a time all through)."""
        key = (policy.duty, policy.batch)
        if self._pacer is None or self._pacer[0] != key:
            dialect = self.runner.store.dialect
            self._pacer = (key, Pacer.for_dialect(dialect, policy.duty, policy.batch))
        return self._pacer[1]

    async def once(self) -> PassReport:
        """One pass of each loop, in order; what a ``durable-adk recover`` run does.

        Recovery first (it may end runs a job resume would queue behind),
        then submissions, deadlines (their calls are answered at once),
        due timers (woken and answered at once), resumes and the sagas.
        """
        cancelled = await self.sweeper.cancel_expired()
        recoveries = await self.sweeper.recover_once(cancel_expired=False)
        submitted = await self.submitter.submit_once()
        expired = await self.expiry.expire_once(wait=True)
        woken = await self.waker.wake_due()  # the resumer below answers them
        resumed = await self.resumer.resume_once(wait=True)  # a one-off pass drives them
        sagas = await self.sweep_sagas_once()
        interrupts = await self.inbox.expire_once()
        ticks = await self.scheduler.poll_once(wait=True)
        purged = await self.purge_once()
        return PassReport(
            cancelled,
            recoveries,
            submitted,
            expired,
            resumed,
            sagas,
            interrupts,
            woken=woken,
            ticks=ticks,
            purged=purged,
        )

    async def start(self, *, stop: asyncio.Event | None = None) -> None:
        """Starts every loop in a task of its own (each passes at once, then every interval).

        Args:
            stop: When set, the loops make no new pass (a worker that begins
                to drain stops taking work before :meth:`stop` cancels them).
        """
        if self._tasks:
            return
        s = self.settings
        passes: list[tuple[str, float, Callable[[], Awaitable[object]]]] = [
            ("presence", self.beat_every, self.beat),
            ("sweeper", s.sweep_interval, self.sweep_once),
            ("submitter", s.resume_interval, self.submitter.submit_once),
            ("resumer", s.resume_interval, self.resumer.resume_once),
            ("expiry", s.expiry_interval, self.expiry.expire_once),
            ("waker", s.resume_interval, self.waker.wake_once),
            ("progress", s.progress_interval, self.progress.send_once),
            ("interrupt-deadlines", s.expiry_interval, self.inbox.expire_once),
        ]
        if self.scheduler.schedules is not None:  # none declared: no poll at all
            passes.append(("schedules", s.schedule_interval, self.scheduler.poll_once))
        if s.retention is not None:  # off by default: nothing is deleted without a policy
            passes.append(("purge", s.retention.interval, self.purge_once))
        passes.extend(
            (f"saga-{sweeper.saga.name}", s.sweep_interval, sweeper.sweep_once)
            for sweeper in self.saga_sweepers
        )
        # When the store comes back from an outage (or a run is handed back as it
        # does), the sweeper passes at once: no run waits out a sweep interval more.
        nudge = loops.Nudge()
        self.runner.store.health.on_back(nudge)
        for name, interval, work in passes:
            self._tasks.append(
                asyncio.create_task(
                    loops.every(
                        interval,
                        work,
                        f"{name} of {self.runner.app_name}",
                        stop=stop,
                        nudge=nudge if name == "sweeper" else None,
                    ),
                    name=f"durable-adk-{name}",
                )
            )
        self.runner.background = self
        logger.info(
            "background loops of app %r started (worker %s): recovery every %s s, %d saga "
            "sweeper(s)",
            self.runner.app_name,
            self.runner.worker_id,
            s.sweep_interval,
            len(self.saga_sweepers),
        )

    @property
    def beat_every(self) -> float:
        """Seconds between this process's beats as a server: its sweep interval, 2 to 5 s."""
        return min(MAX_BEAT, max(MIN_BEAT, self.settings.sweep_interval))

    async def beat(self) -> None:
        """Stamps this process's beat: it serves its version (``durable-adk versions``)."""
        path = self.runner
        await record_beat(
            path.store,
            app_name=path.app_name,
            worker_id=path.worker_id,
            every=self.beat_every,
            serving=path.serving,
        )

    async def stop(self) -> None:
        """Cancels every loop and waits for them (a pass in progress is cancelled too);
        then says goodbye: the process is no longer listed as serving."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if tasks:
            path = self.runner
            try:
                await record_leave(path.store, app_name=path.app_name, worker_id=path.worker_id)
            except errors.StoreError as exc:  # it drops out after one missed beat anyway
                logger.warning("could not record that worker %s left: %s", path.worker_id, exc)
        await self.scheduler.stop()
        await self.resumer.stop()
        if self.runner.background is self:
            self.runner.background = None
