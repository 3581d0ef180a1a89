"""The recovery sweeper: every orphaned run is found, classified and ended.

``Sweeper.recover_once()`` claims expired runs through the ledger's single
atomic statement (so a duplicate sweep by another worker is harmless), at most
``batch`` per pass, classifies the invocation from its events and acts on the
class. The claim reads each run's session in the same statement
(``RunLedger.claim_expired(read=True)``); the session service caches that read
(``adopt_read``), so the classification and ADK's re-drive read nothing more
(a claim that may have missed an append, on PostgreSQL, leaves the session to
be read again: docs/runs.md, "Recovery: the sweeper"):

=================  ==========================================================
NOT_STARTED        drive it from the stored request, same invocation id
MODEL_INFLIGHT     re-drive the invocation (ADK resumability continues it)
TOOL_UNANSWERED    re-drive when every unanswered tool is declared idempotent
                   (or journaled) and ADK can still replay the call; otherwise
                   park: "outcome unknown", or "left behind" for a call the
                   agent moved past (a re-drive would not answer it)
PAUSED             mark PAUSED: only the job resumer may answer the call; but a
                   run that carries that answer (a resume whose worker died
                   before ADK stored it) is re-driven with it
NODE_INFLIGHT      (Workflow roots) re-drive when every node in flight is
                   idempotent or journaled (ADK runs it again); otherwise
                   park: "node in flight", with a dead letter
ACTUALLY_DONE      mark DONE; never re-drive (that would ask the model again)
=================  ==========================================================

On a Workflow root, a TOOL_UNANSWERED re-drive first answers the dangling
calls (``RunPath.run_to_end(answer_first=...)``, under the run's fence):
ADK itself would write the node's end marker over them and move on.

A claim past ``max_attempts`` parks the run with a dead letter holding the
request, the classification, the last events and the error. ``serve()`` runs a
pass at start-up and then periodically.

Claims are never held unheartbeated. A claimed run's lease is renewed only
while the run path's driver drives it, so a pass claims only as many
runs as it has free slots (``concurrency``) and claims more as recoveries end,
up to ``batch`` per pass, stopping early once a claim finds fewer runs than it
asked for. A run therefore waits in no queue of ours after its claim: the
time between a claim and the heartbeat of its drive is the classification (and
at most one session read), not the length of other runs' drives, so its lease
cannot run out while it waits and no other worker claims (and drives) it again,
burning an attempt with nothing failing. Handing claimed runs to a queue with
their leases renewed from the claim would keep that guarantee too, but it
would hold runs another idle worker could be driving; claiming on demand
leaves them to whichever worker has room first.

A re-drive that meets a transient fault ends as ``errors.RunInterrupted``
from the runner: the run is back on the ledger for a later recovery, and the
result says so (``redrive``, status RUNNING). A takeover during a recovery
(``errors.Fenced``) is logged and left out of the results.

ADK does not replay a call followed by its error event (a tool that raised on
a store fault): on re-drive it pauses the agent and writes its end marker with
no answer (docs/adk-notes.md, "A call followed by its error event"). For a
TOOL_UNANSWERED re-drive the sweeper therefore shows ADK the invocation
without those content-less events (:func:`classify.replay_blockers`; the log
itself is unchanged), through a plugin on the runner's ADK ``Runner``: ADK
then replays the call with its id, and a journaled tool answers from its
journal or looks its effect up before acting again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from google.adk.agents.invocation_context import InvocationContext
from google.adk.events.event import Event
from google.adk.plugins.base_plugin import BasePlugin
from google.genai import types

from durable_adk import errors
from durable_adk.adk.eventlog.classify import (
    Classification,
    OrphanClass,
    recover_invocation_id,
    replay_blockers,
)
from durable_adk.adk.loops.every import periodically
from durable_adk.adk.runs.ending import Ending, EndKind, Outcome, after_cancel, record
from durable_adk.adk.runs.path import HasRunPath, RunPath
from durable_adk.adk.services.sessions import RUN_METADATA_KEY
from durable_adk.adk.tools.long_running import long_running_tools
from durable_adk.effect_tables.jobs import JobTable
from durable_adk.metrics import Metrics
from durable_adk.runlog import run_event, taken_over
from durable_adk.tables.ledger import Run, RunStatus
from durable_adk.tables.sweeps import BEAT_EVERY, record_sweep

logger = logging.getLogger("durable_adk.recovery")


def _request_text(request: str) -> str | None:
    """The text of a stored request (a Content as JSON), if it has any."""
    try:
        parts = json.loads(request).get("parts") or []
    except (ValueError, AttributeError):
        return None
    texts = [str(p["text"]) for p in parts if isinstance(p, dict) and p.get("text")]
    return "".join(texts) or None


def _answered_by(events: list[Event], invocation_id: str | None, run_id: str) -> set[str]:
    """Ids of the calls of the invocation that ``run_id`` stored an answer to."""
    answered: set[str] = set()
    for event in events:
        stamp = (event.custom_metadata or {}).get(RUN_METADATA_KEY)
        if (
            event.invocation_id == invocation_id
            and event.author == "user"
            and isinstance(stamp, dict)
            and stamp.get("run_id") == run_id
        ):
            answered.update(r.id for r in event.get_function_responses() if r.id)
    return answered


class _ReplayUnansweredCalls(BasePlugin):
    """Shows ADK a re-driven invocation without the events that keep it from replaying a call.

    ``before_run_callback`` runs once per ``run_async``, after ADK read the
    session and before any agent looks at its events. It replaces the list of
    events of ADK's own ``Session`` object (a copy made for this read by
    DurableSessionService.get_session, not the service's cache), so only what
    ADK decides from changes: the stored log and the session service's cache
    keep every event, and later appends are fenced by the store's sequence
    number, not by the list.
    """

    NAME = "durable_adk_replay_unanswered_calls"

    def __init__(self) -> None:
        super().__init__(name=self.NAME)
        self.hidden: dict[str, frozenset[str]] = {}

    async def before_run_callback(
        self, *, invocation_context: InvocationContext
    ) -> types.Content | None:
        hidden = self.hidden.get(invocation_context.invocation_id)
        session = invocation_context.session
        if hidden and session is not None:
            session.events = [e for e in session.events if e.id not in hidden]
        return None


def _replay_plugin(runner: RunPath) -> _ReplayUnansweredCalls:
    """The runner's replay plugin, registered on its ADK Runner the first time."""
    manager = runner.adk.plugin_manager
    existing = manager.get_plugin(_ReplayUnansweredCalls.NAME)
    if isinstance(existing, _ReplayUnansweredCalls):
        return existing
    plugin = _ReplayUnansweredCalls()
    manager.register_plugin(plugin)
    return plugin


def _require_recorded(outcome: Outcome, when: str) -> None:
    """Raises unless the ledger took the outcome.

    Raises:
        durable_adk.errors.StoreError: The store failed (nothing recorded: the
            run is recovered again after its lease).
        durable_adk.errors.Fenced: Another worker took the run over ``when``.
    """
    if outcome.store_error is not None:
        raise outcome.store_error
    if not outcome.recorded:
        raise errors.Fenced(f"run {outcome.run.run_id} was taken over {when}")


@dataclass(frozen=True, slots=True)
class Recovery:
    """What one recovery did.

    Attributes:
        run_id: The run.
        found: The class found in the event log.
        action: What the sweeper did: ``redrive``, ``mark_done``, ``mark_paused``, ``park``.
        status: The run's status afterwards: RUNNING after a re-drive that a
            transient fault interrupted (the run is back for a later recovery).
        reason: Why (the classifier's reason, or the parking reason).
        reattached: The jobs (timers included) of the open long-running calls
            of a run recovered to PAUSED: its dead worker may have stored the
            call and died before the job, which nothing would then answer.
    """

    run_id: str
    found: OrphanClass
    action: str
    status: RunStatus
    reason: str
    reattached: tuple[str, ...] = ()


class Sweeper:
    """Recovers the runs whose workers died."""

    def __init__(
        self,
        runner: HasRunPath,
        *,
        batch: int = 10,
        interval: float = 5.0,
        metrics: Metrics | None = None,
        concurrency: int = 4,
        one_off: bool = False,
    ) -> None:
        """Creates a sweeper that recovers through ``runner``.

        Args:
            runner: The run path (or a DurableRunner) that re-drives runs; its
                worker id owns the claims.
            batch: Most runs claimed per pass by this worker.
            interval: Seconds between passes in :meth:`serve`.
            metrics: Where recoveries, parkings and recovery spans go
                (default: the runner's).
            concurrency: How many runs are recovered at a time; a pass holds no
                more claims than that.
            one_off: This sweeper makes a single pass (``durable-adk recover``):
                its beat counts as a live sweeper for
                :data:`durable_adk.tables.sweeps.ONE_OFF_WINDOW`, not for three
                intervals.
        """
        if batch < 1 or concurrency < 1 or interval <= 0:
            raise errors.InvalidArgument("batch and concurrency must be >= 1, interval > 0")
        self.concurrency = concurrency
        path = runner.path
        self.runner = path
        self.metrics = metrics if metrics is not None else path.metrics
        self.ledger = path.ledger
        self.batch = batch
        self.interval = interval
        self.one_off = one_off
        self._last_beat: float | None = None
        self._replay = _replay_plugin(path)
        # The job-backed tools (durable sleep included) whose open calls a run
        # recovered to PAUSED gets re-attached: none, and nothing is read.
        self._job_tools = list(long_running_tools(path.app.root_agent).values())

    async def _beat(self) -> None:
        """Stamps this sweeper's beat in the store (:mod:`durable_adk.tables.sweeps`).

        At most once per :data:`~durable_adk.tables.sweeps.BEAT_EVERY` seconds (a
        write per pass of a fast sweeper would only add load: a beat counts
        for three intervals plus :data:`~durable_adk.tables.sweeps.GRACE`). A failed
        stamp is logged and the pass goes on: recovering matters more than
        saying so (the next beat tries again).
        """
        now = time.monotonic()
        if self._last_beat is not None and now - self._last_beat < BEAT_EVERY:
            return
        self._last_beat = now
        try:
            await record_sweep(
                self.runner.store,
                app_name=self.runner.app_name,
                worker_id=self.runner.worker_id,
                interval=None if self.one_off else self.interval,
                serving=self.runner.serving,
            )
        except errors.StoreError as exc:
            outage = isinstance(exc, errors.StoreUnavailable)  # said once, by the store
            logger.log(
                logging.DEBUG if outage else logging.WARNING,
                "could not record the sweeper's beat: %s",
                exc,
            )

    async def cancel_expired(self) -> list[str]:
        """Ends CANCELLED the runs asked to stop whose owner died: they are never re-driven.

        The claims of :meth:`recover_once` skip runs asked to stop, so this is
        how such a run ends when nobody holds it any more.

        Returns:
            The ids of the runs ended CANCELLED.
        """
        cancelled = await self.ledger.cancel_expired(app_name=self.runner.app_name)
        for run_id in cancelled:
            run_event(
                logger,
                logging.INFO,
                "cancelled",
                run_id=run_id,
                epoch=None,
                reason="asked to stop; its owner died",
            )
            run = await self.ledger.get(run_id)
            if run is not None:  # the ending's bookkeeping, as the owner would have done it
                path = self.runner
                await after_cancel(
                    path.ledger,
                    path.sessions,
                    path.interrupts,
                    run,
                    drove=True,
                    reason=run.last_error or "cancelled",
                )
        return cancelled

    async def recover_once(self, *, cancel_expired: bool = True) -> list[Recovery]:
        """Claims and recovers up to ``batch`` expired runs; returns what was done, in claim order.

        First (unless ``cancel_expired`` is False: the caller did it), the
        runs an operator asked to stop whose owner stopped renewing are ended
        CANCELLED (:meth:`cancel_expired`).

        At most ``concurrency`` runs are claimed and in recovery at any moment;
        each freed slot claims the next expired run, until ``batch`` were
        claimed or a claim finds fewer runs than it asked for. A failure (the
        store going away, say) stops the claiming and is raised once every
        recovery in progress has ended.
        """
        owner, app_name = self.runner.worker_id, self.runner.app_name
        if cancel_expired:
            await self.cancel_expired()
        started: list[asyncio.Task[Recovery | None]] = []
        running: set[asyncio.Task[Recovery | None]] = set()
        failure: BaseException | None = None
        claimed = 0
        more = True
        await self._beat()
        try:
            while True:
                wanted = min(self.concurrency - len(running), self.batch - claimed)
                if more and failure is None and wanted > 0:
                    try:
                        runs = await self.ledger.claim_expired(
                            owner, limit=wanted, app_name=app_name, read=True
                        )
                    except Exception as exc:  # raised below, once the others end
                        failure, runs = exc, []
                    claimed += len(runs)
                    more = len(runs) == wanted and claimed < self.batch
                    for run in runs:
                        run_event(
                            logger,
                            logging.INFO,
                            "takeover",
                            run_id=run.run_id,
                            epoch=run.epoch,
                            attempt=run.attempts,
                            owner=owner,
                            session=run.session_id,
                        )
                        task = asyncio.create_task(self._recover_in_span(run))
                        started.append(task)
                        running.add(task)
                if not running:
                    break
                # Recoveries drive runs to their end: the beat goes on meanwhile,
                # so a long pass still counts as a live sweeper.
                done, running = await asyncio.wait(
                    running, timeout=self.interval, return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    await self._beat()
                for task in done:
                    if failure is None and not task.cancelled() and task.exception() is not None:
                        failure = task.exception()
        finally:
            # Cancelled (serve() ending): no recovery is left running unseen.
            for task in running:
                task.cancel()
            if running:
                await asyncio.wait(running)
        if failure is not None:
            raise failure
        await self._beat()
        return [r for r in (t.result() for t in started if not t.cancelled()) if r is not None]

    async def _recover_in_span(self, run: Run) -> Recovery | None:
        # The run goes on without its session's read (a whole log): the cache holds it.
        read = run.session_read
        if read is not None:
            run = dataclasses.replace(run, session_read=None)
        try:
            with self.metrics.span(
                "durable_adk.recovery",
                {
                    "durable_adk.run_id": run.run_id,
                    "durable_adk.session_id": run.session_id,
                    "durable_adk.attempt": run.attempts,
                },
            ) as span:
                if read is not None:
                    # The claim read the session in its own statement: _recover's
                    # read is served from it (or reads, when it may be incomplete).
                    key = (run.app_name, run.user_id, run.session_id)
                    await self.runner.sessions.adopt_read(key, read)
                recovery = await self._recover(run)
                if recovery.status is RunStatus.PAUSED and self._job_tools:
                    recovery = dataclasses.replace(recovery, reattached=await self._reattach(run))
                span.set_attribute("durable_adk.found", recovery.found.value)
                span.set_attribute("durable_adk.action", recovery.action)
        except errors.Fenced as exc:
            taken_over(logger, run_id=run.run_id, epoch=run.epoch, during="recovery", reason=exc)
            return None
        self.metrics.recovered(recovery.found.value, recovery.action)
        run_event(
            logger,
            logging.INFO,
            "recovered",
            run_id=run.run_id,
            epoch=run.epoch,
            cls=recovery.found.value,
            attempt=run.attempts,
            action=recovery.action,
            status=recovery.status.value,
            reason=recovery.reason,
        )
        return recovery

    async def _recover(self, run: Run) -> Recovery:
        session = await self.runner.sessions.get_session(
            app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
        )
        events: list[Event] = list(session.events) if session else []
        invocation_id: str | None = run.invocation_id
        if not invocation_id:
            # Only a row written without an id needs the user event to find it:
            # DurableRunner always chooses the id first, and searching by time
            # could pick the previous turn's invocation and end this run unseen.
            invocation_id = recover_invocation_id(
                events, started_at=run.created_at, request_text=_request_text(run.request)
            )
        found = self.runner.classify(events, invocation_id)
        if run.attempts > self.ledger.max_attempts:
            return await self._park(
                run,
                found,
                events,
                f"gave up after {run.attempts - 1} attempts: {run.last_error or found.reason}",
            )
        if found.cls is OrphanClass.ACTUALLY_DONE:
            await self._finish(run, RunStatus.DONE, found, events)
            return Recovery(run.run_id, found.cls, "mark_done", RunStatus.DONE, found.reason)
        message = types.Content.model_validate(json.loads(run.request))
        answers = {p.function_response.id for p in message.parts or () if p.function_response}
        # An answer this run already stored was delivered: with a reused interrupt id
        # (a loop asking again) the id is open again, for the next answer, not this one.
        answers -= _answered_by(events, invocation_id, run.run_id)
        if found.cls is OrphanClass.PAUSED and not answers & set(found.pending_long_running):
            await self._finish(run, RunStatus.PAUSED, found, events)
            return Recovery(run.run_id, found.cls, "mark_paused", RunStatus.PAUSED, found.reason)
        hidden: frozenset[str] = frozenset()
        answer_first: tuple[str, ...] = ()
        if found.cls is OrphanClass.NODE_INFLIGHT and found.unsafe_nodes:
            return await self._park(
                run,
                found,
                events,
                f"node in flight: {', '.join(found.unsafe_nodes)} was running when its worker "
                "died and may have acted; it is neither idempotent nor journaled, so it is not "
                "run again (mark its function @idempotent, or make it a journaled_node)",
            )
        if found.cls is OrphanClass.TOOL_UNANSWERED:
            names = dict(found.unanswered_calls)
            if found.abandoned_calls:
                left = sorted({names[c] for c in found.abandoned_calls})
                return await self._park(
                    run,
                    found,
                    events,
                    f"left unanswered: {', '.join(left)} was called and the agent moved on "
                    "without its answer; a re-drive would not run it",
                )
            unsafe = [name for name in names.values() if name not in self.runner.idempotent_tools]
            if unsafe:
                return await self._park(
                    run,
                    found,
                    events,
                    f"outcome unknown: {', '.join(sorted(set(unsafe)))} may have acted",
                )
            if self.runner.is_workflow:
                # ADK would write the node's end marker over the call (docs/adk-notes.md,
                # section 6): the drive answers it first, then ADK continues the node.
                answer_first = tuple(call_id for call_id, _ in found.unanswered_calls)
            else:
                hidden = replay_blockers(events, found)
        resume = found.cls is not OrphanClass.NOT_STARTED
        # This worker holds the run and has just read its session: ADK's read,
        # next, is served from that.
        self.runner.sessions.trust_next_read((run.app_name, run.user_id, run.session_id))
        if hidden:
            logger.info(
                "run %s: ADK re-drives the call without the %d event(s) after it (error event "
                "or end marker) that would make it skip the call",
                run.run_id,
                len(hidden),
            )
            self._replay.hidden[run.invocation_id or invocation_id or ""] = hidden
        try:
            outcome = await self.runner.run_to_end(
                run,
                message,
                resume=resume,
                classification=found.cls.value,
                answer_first=answer_first,
            )
        finally:
            self._replay.hidden.pop(run.invocation_id or invocation_id or "", None)
        # What recovery did, said truthfully: a paused invocation whose answer this run
        # carries was continued with it, not left waiting for one.
        why = (
            f"re-driven with the answer it carries ({found.reason} before)"
            if found.cls is OrphanClass.PAUSED
            else found.reason
        )
        return self._recovery_of(outcome, found, why)

    async def _reattach(self, run: Run) -> tuple[str, ...]:
        """Starts the jobs of the recovered run's open long-running calls that have none.

        Only the run's own invocation's calls are looked at (an older call
        of the session, a cancelled run's say, is not this recovery's to
        restart); the user's answers of the whole session count.
        Idempotent: a job that exists is found, attached and submitted as the
        tool would have (nothing twice).

        The session is read again, not taken from the cache: the run is PAUSED
        by now, so it no longer holds the session, and another run (an answer's)
        may have appended to it. The read costs the events appended since the
        claim read the log (``load_session_tail`` from the cached position).
        """
        session = await self.runner.sessions.get_session(
            app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
        )
        if session is None or not run.invocation_id:
            return ()
        mine = [
            e for e in session.events if e.invocation_id == run.invocation_id or e.author == "user"
        ]
        jobs = JobTable(self.runner.store)
        found: list[str] = []
        for tool in self._job_tools:
            started = await tool.reattach(
                jobs, mine, app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
            )
            found.extend(job.job_id for job in started)
        return tuple(found)

    @staticmethod
    def _recovery_of(outcome: Outcome, found: Classification, why: str) -> Recovery:
        """What a re-drive did, from its outcome (the one ending decided it)."""
        run, ending = outcome.run, outcome.ending
        if ending.kind is EndKind.TAKEN_OVER:
            raise errors.Fenced(f"run {run.run_id}: {ending.reason or 'taken over'}")
        _require_recorded(outcome, "before it could end")
        status = outcome.status
        assert status is not None
        action = "park" if ending.kind is EndKind.PARKED else "redrive"
        if ending.kind is EndKind.FAILED:
            logger.warning("run %s failed on re-drive: %s", run.run_id, ending.reason)
        reason = why if ending.kind in (EndKind.DONE, EndKind.PAUSED) else ending.reason
        return Recovery(run.run_id, found.cls, action, status, reason or why)

    async def _finish(
        self, run: Run, status: RunStatus, found: Classification, events: list[Event]
    ) -> None:
        kind = EndKind.DONE if status is RunStatus.DONE else EndKind.PAUSED
        outcome = await record(
            self.runner,
            run,
            Ending(kind),
            events=events,
            verdict=found,
            classification=found.cls.value,
        )
        _require_recorded(outcome, "during recovery")

    async def _park(
        self, run: Run, found: Classification, events: list[Event], reason: str
    ) -> Recovery:
        """Parks the run for ``reason``; a run that drifted says so too.

        A run recorded under another definition of the app is drift-checked
        first, as its drive would have been: when this code lacks what its log
        refers to, the reason names that (no worker of this code can continue
        it) before the other reason (its tool's outcome is unknown, say).
        """
        missing = await self.runner.driver.drift_of(run, events)
        if missing:
            reason = f"{self.runner.driver.drift_reason(run, missing)}. Also: {reason}"
        ending = Ending(EndKind.PARKED, reason, found=found.cls.value)
        outcome = await record(self.runner, run, ending, events=events)
        _require_recorded(outcome, "during recovery")
        return Recovery(run.run_id, found.cls, "park", RunStatus.PARKED, reason)

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[Sweeper]:
        """Runs a pass now, then one every ``interval`` seconds, until the block exits."""
        await self.recover_once()
        async with periodically(
            self.interval, self.recover_once, "recovery", first_after=self.interval
        ):
            yield self
