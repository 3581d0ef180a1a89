"""The one driver: runs a claimed run through ADK under its lease and returns its outcome.

What it guarantees (the run path's :meth:`~durable_adk.adk.runs.path.RunPath.drive`
and :meth:`~durable_adk.adk.runs.path.RunPath.run_to_end` start every drive here):

* A drive runs in a task of its own (the pump) and hands its events to the
  reader lock-step (:class:`~durable_adk.adk.commits.drive.Drive`). With barrier
  commits, nothing is handed over before it is stored.
* The lease is kept by the path's :class:`~durable_adk.fencing.leases.LeaseKeeper`;
  a lost lease loses the fence for good and cancels the pump. A renewal that
  says an operator asked the run to stop refuses new acts at once, lets the
  acts under way finish (``cancel_grace``) and then aborts ADK's invocation.
* A continuation whose invocation was cancelled meanwhile is not driven: it
  ends CANCELLED (the submit refused it too; this closes the race between
  the submit's check and a cancel).
* However the drive ends, the ending is decided by
  :func:`durable_adk.adk.runs.ending.decide` and recorded by
  :func:`durable_adk.adk.runs.ending.record`: one place, with its bookkeeping.
  The pump's last item carries the :class:`~durable_adk.adk.runs.ending.Outcome`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from typing import Any, Protocol

from google.adk.agents.run_config import RunConfig, ToolThreadPoolConfig
from google.adk.errors import StaleSessionError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.runners import Runner
from google.genai import types

from durable_adk import errors
from durable_adk.adk.commits.barrier import CommitMode, EventBatch, using_batch
from durable_adk.adk.commits.drive import Drive, trust_from, using_drive
from durable_adk.adk.eventlog.classify import INTERIM_KEY, Classification
from durable_adk.adk.eventlog.unreadable import UNREADABLE, unreadable_in, unreadable_note
from durable_adk.adk.runs.admission import Admission
from durable_adk.adk.runs.drift import RecordedStep, RunDrifted, drift, key_drift
from durable_adk.adk.runs.ending import (
    FINISHING,
    Ending,
    EndKind,
    Outcome,
    Recording,
    decide,
    outage_hand_back,
    record,
)
from durable_adk.adk.runs.fingerprint import Known
from durable_adk.adk.runs.policy import RetryPolicy, RunPolicy, SyncTools, causes
from durable_adk.adk.services.sessions import RUN_METADATA_KEY
from durable_adk.adk.tools.workflow_nodes import answer_lost_calls
from durable_adk.effect_tables.jobs import JobTable
from durable_adk.effect_tables.journal import Journal, OutcomeUnknown
from durable_adk.faults import crash_point
from durable_adk.fencing.fence import RunFence, using_fence
from durable_adk.fencing.leases import Holding, LeaseKeeper
from durable_adk.runlog import run_event
from durable_adk.store.base import Store
from durable_adk.store.outage import using_patience
from durable_adk.tables.ledger import RenewResult, Run
from durable_adk.versions import Serving


class PathParts(Recording, Protocol):
    """What a driver uses of the run path that owns it.

    :class:`~durable_adk.adk.runs.path.RunPath` is the one implementation: it
    makes its driver with ``Driver(self)``. Declared here, beside its user, so
    the driver never imports the path it serves (no circle, not even for types).
    """

    store: Store
    policy: RunPolicy
    retry_policy: RetryPolicy
    serving: Serving
    keeper: LeaseKeeper
    run_config: RunConfig
    sync_tools: SyncTools
    commits: CommitMode
    admission: Admission
    look_ahead: bool

    @property
    def adk(self) -> Runner:
        """ADK's Runner the path drives through."""

    @property
    def known(self) -> Known:
        """The app's definition, as the drift check reads it."""

    @property
    def lease_seconds(self) -> float:
        """How long a lease lasts."""

    def classify(self, events: Sequence[Event], invocation_id: str | None) -> Classification:
        """What the events say about an invocation (the app's facts applied)."""

    async def refuse_if_cancelled(self, user_id: str, session_id: str, invocation_id: str) -> None:
        """Raises if the invocation was cancelled."""


logger = logging.getLogger("durable_adk.runner")

RECORDS_READ = 1000
"""Most journal entries (and jobs) of one invocation the drift check reads."""

_ALREADY_ANSWERED = types.Content(role="user", parts=[])
"""Sentinel of :func:`unanswered`: every call the message answers is already answered."""


def has_answers(message: types.Content | None) -> bool:
    """Whether ``message`` carries function responses (a continuation's answers)."""
    return message is not None and any(p.function_response for p in message.parts or ())


def unanswered(
    events: Iterable[Event], message: types.Content, run_id: str, invocation_id: str | None
) -> types.Content | None:
    """What to send for a message of function responses, given the stored events.

    Each time an interrupt was asked it takes one answer; calls and answers
    of the invocation are matched by count, in log order, as ADK matches
    them (an id reused by a loop is open again after its answer). A part
    this run already stored (a crash after ADK stored it) is not sent again;
    with nothing left to send, the invocation is re-driven without a message.
    A part whose call is asked but not open (another run answered it) is
    dropped: two resumes of one call, the second changes nothing.

    Returns:
        The message (possibly with fewer parts), ``None`` to re-drive without a
        message, or ``_ALREADY_ANSWERED``.
    """
    open_count: dict[str, int] = {}
    own: set[str] = set()
    for event in events:
        if event.invocation_id != invocation_id:
            continue
        if event.author != "user":
            for call in event.get_function_calls():
                if call.id:
                    open_count[call.id] = open_count.get(call.id, 0) + 1
            continue
        stamp = (event.custom_metadata or {}).get(RUN_METADATA_KEY)
        by_this_run = isinstance(stamp, dict) and stamp.get("run_id") == run_id
        for response in event.get_function_responses():
            if not response.id or (response.response or {}).get(INTERIM_KEY):
                continue
            if by_this_run:
                own.add(response.id)
            if open_count.get(response.id, 0) > 0:
                open_count[response.id] -= 1
    parts = message.parts or []

    def answered_elsewhere(call_id: str) -> bool:
        return call_id in open_count and open_count[call_id] == 0

    kept = [
        p
        for p in parts
        if not (
            p.function_response
            and (
                (p.function_response.id or "") in own
                or answered_elsewhere(p.function_response.id or "")
            )
        )
    ]
    if len(kept) == len(parts):
        return message
    if kept:
        return message.model_copy(update={"parts": kept})
    stored_by_me = any(p.function_response and p.function_response.id in own for p in parts)
    return None if stored_by_me else _ALREADY_ANSWERED


class UnreadableLog(OutcomeUnknown):
    """The session's log holds an event the reader cannot parse: the run is parked.

    What the log says there is unknown, so no one can tell what the model
    would be shown: the run waits for an operator's repair
    (:mod:`durable_adk.adk.services.repairs`), then a retry.
    """


def unreadable_ending(run: Run, events: Sequence[Event]) -> Ending | None:
    """The PARKED ending of a run whose session holds unreadable events, or None.

    Decided before ADK is called, by every way a run is driven (the driver,
    ADK's own Runner under the api_server plugin).
    """
    found = unreadable_in(events)
    if not found:
        return None
    note = unreadable_note(
        found, app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
    )
    return Ending(EndKind.PARKED, note, UnreadableLog(f"run {run.run_id}: {note}"), UNREADABLE)


def off_the_loop(config: RunConfig, sync_tools: SyncTools = "pool") -> RunConfig:
    """``config`` with sync tools and FunctionNodes run on ADK's tool thread pool.

    ADK runs a synchronous tool (and a sync FunctionNode) on the event loop
    unless ``RunConfig.tool_thread_pool_config`` is set; one that blocks would
    block every drive of the worker. An app's own setting is kept, and so is
    ``config`` with ``sync_tools="loop"`` (ADK's default: no thread hop, but a
    tool that blocks stalls every drive beside it; the lease watchdog keeps
    their leases meanwhile).
    """
    if config.tool_thread_pool_config is not None or sync_tools == "loop":
        return config
    return config.model_copy(update={"tool_thread_pool_config": ToolThreadPoolConfig()})


class Driver:
    """Drives the claimed runs of one run path (one per path)."""

    def __init__(self, path: PathParts) -> None:
        self.path = path
        self._drives: dict[tuple[str, int], Drive] = {}
        self._detached: set[Drive] = set()

    # ------------------------------------------------------------- the drives

    def new_drive(self, run: Run) -> Drive:
        """A drive of a claimed run: its fence trusted from when the claim was sent."""
        return Drive(
            run,
            RunFence(
                run.run_id,
                run.epoch,
                trusted_until=trust_from(run.claim_sent, self.path.lease_seconds),
                invocation_id=run.invocation_id,
                store=self.path.store,
            ),
            self.path.retry_policy.is_transient,
        )

    def start(
        self,
        run: Run,
        message: types.Content,
        *,
        resume: bool,
        classification: str | None = None,
        run_config: RunConfig | None = None,
        state_delta: dict[str, Any] | None = None,
        answer_first: tuple[str, ...] = (),
        yield_user_message: bool = False,
    ) -> Drive:
        """Starts the pump of a claimed run (in the caller's context: spans nest)."""
        path = self.path
        drive = self.new_drive(run)
        drive.run_config, drive.state_delta = run_config, state_delta
        drive.answer_first = answer_first
        drive.yield_user_message = yield_user_message
        if path.commits == "barrier":
            drive.batch = EventBatch((run.app_name, run.user_id, run.session_id), path.sessions)
            drive.flush = path.sessions.flush_batch
            drive.look_ahead = path.look_ahead
        drive.task = asyncio.create_task(
            self._pump(drive, message, resume=resume, classification=classification),
            name=f"durable-adk-drive-{run.run_id}",
        )
        # What stopped the pump reaches the reader in its End item (and the
        # log); the task's own copy of it is retrieved here, not left to
        # asyncio's "exception was never retrieved" at collection.
        drive.task.add_done_callback(_retrieved)
        return drive

    def detach(self, drive: Drive) -> None:
        """The reader is gone: the drive goes on to its end without one (``aclose`` waits)."""
        if drive.ended or drive in self._detached:
            return
        was_read = not drive.detached
        drive.detach()
        self._detached.add(drive)
        if was_read:
            logger.info(
                "run %s (epoch %d): the caller stopped reading; driving it to its end",
                drive.run.run_id,
                drive.run.epoch,
            )

    @property
    def detached_runs(self) -> list[str]:
        """Ids of the runs driven on although their caller stopped reading."""
        return sorted(d.run.run_id for d in self._detached)

    def fence(self, run_id: str, epoch: int) -> RunFence | None:
        """The fence of the live drive of ``run_id`` at ``epoch``, if any."""
        drive = self._drives.get((run_id, epoch))
        return drive.fence if drive is not None else None

    def cancel_local(self, run_id: str, epoch: int | None, by: str) -> None:
        """A cancel of a run this worker drives (at ``epoch``, or any): stopped now,
        without waiting for a heartbeat."""
        for (held, at), drive in list(self._drives.items()):
            if held == run_id and epoch in (None, at) and drive.cancelled_by is None:
                self._cancel(drive, by)

    async def aclose(self, *, grace: float | None = None) -> None:
        """Waits for the detached drives to end, cancelling those still running after ``grace``.

        A cancelled drive writes nothing more: its run stays RUNNING until its
        lease expires (or a worker's drain hands it back) and recovery takes
        it over.
        """
        drives = list(self._detached)
        tasks = [d.task for d in drives if d.task is not None]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=grace)
            for drive in drives:
                if drive.task in pending:
                    drive.stop("shutdown")
            if pending:
                await asyncio.wait(pending)
        if not self.path.keeper.held():
            await self.path.keeper.aclose()  # its task would end at its next tick anyway

    # ------------------------------------------------------------------ pump

    async def _pump(
        self, drive: Drive, message: types.Content, *, resume: bool, classification: str | None
    ) -> None:
        """The drive's task: drives ADK, handing each event over when it is wanted."""
        path, run = self.path, drive.run
        session = (run.app_name, run.user_id, run.session_id)
        self._drives[(run.run_id, run.epoch)] = drive
        outcome: Outcome | None = None
        stopped: BaseException | None = None
        path.sessions.pin(session)  # we hold the session: kept cached until the drive ends
        try:
            with (
                using_fence(drive.fence),
                using_patience(drive.patience),
                using_drive(drive),
                using_batch(drive.batch),
                path.metrics.span(
                    "durable_adk.run",
                    {
                        "durable_adk.run_id": run.run_id,
                        "durable_adk.app_name": run.app_name,
                        "durable_adk.session_id": run.session_id,
                        "durable_adk.invocation_id": run.invocation_id,
                        "durable_adk.epoch": run.epoch,
                        "durable_adk.attempt": run.attempts,
                        "durable_adk.resume": resume,
                    },
                ),
            ):
                outcome = await self._drive(drive, message, resume=resume, found=classification)
        except asyncio.CancelledError as exc:
            if drive.stop_reason != "fenced":
                stopped = exc  # shut down (aclose) or the loop is closing: nothing more is written
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            why = f"{drive.fence.lost or 'lease lost'}; the drive was cancelled"
            outcome = Outcome(run, Ending(EndKind.TAKEN_OVER, why), recorded=False)
        except BaseException as exc:  # a bug of ours: the run's lease expires, recovery takes it
            stopped = exc
            raise
        finally:
            path.sessions.unpin(session)  # the last pin wakes the runs queued behind it
            self._drives.pop((run.run_id, run.epoch), None)
            drive.end(outcome, stopped)
            if drive.detached:
                self._detached.discard(drive)
                _log_detached_end(run, outcome, stopped, in_outage=path.store.health.in_outage())

    async def _drive(
        self, drive: Drive, message: types.Content, *, resume: bool, found: str | None
    ) -> Outcome:
        """Runs ADK for the drive, then decides and records its ending."""
        path, run = self.path, drive.run
        key = (run.app_name, run.user_id, run.session_id)
        seen: list[Event] = []
        error: BaseException | None = None
        unreadable = await self._unreadable(drive)
        if unreadable is not None:
            # Before ADK has the invocation: the model never sees a history
            # with a hole in it, and nothing acts.
            drive.fence.lose("the session holds an unreadable event")
            return await record(path, run, unreadable, classification=found)
        new_message = await self._message_for(drive, message, resume=resume)
        if resume and (missing := await self.drift_of(run)):
            # Before ADK has the invocation: no model call, no tool, nothing acts.
            drive.fence.lose("the run drifted")
            reason = self.drift_reason(run, missing)
            ending = Ending(EndKind.PARKED, reason, RunDrifted(f"run {run.run_id}: {reason}"))
            outcome = await record(path, run, ending, classification=found)
            if outcome.recorded and has_answers(message):
                # A continuation: the runs paused on the call it answers end with it. A
                # derived record, written after the park (a crash or a store failure in
                # between leaves them PAUSED; a retried continuation still ends them).
                try:
                    parked = await path.ledger.park_paused_of_invocation(
                        run, reason=f"its continuation, run {run.run_id}, was parked: {reason}"
                    )
                except errors.StoreError as exc:
                    logger.warning("run %s: its paused runs were not parked: %s", run.run_id, exc)
                    parked = []
                if parked:
                    logger.warning(
                        "run %s parked for drift; the paused run(s) %s of its invocation end "
                        "PARKED with it",
                        run.run_id,
                        ", ".join(parked),
                    )
            return outcome
        try:
            driven = self._adk_events(drive, new_message, resume=resume)
            async with contextlib.aclosing(driven) as stream:
                async for event in stream:
                    drive.fence.check_not_lost()
                    seen.append(event)
                    await self._hand(drive, event)
            # The end. With barrier commits the last events are not written
            # here: they join the run's finish below (one unit), and the
            # caller is handed them once that unit is written.
        except Exception as raised:
            error = await self._drive_error(drive, raised)
        finally:
            path.sessions.distrust(key)
            if drive.holding is not None:
                path.keeper.drop(drive.holding)
                # Its callbacks refer to the drive: kept, they would make the
                # drive a cycle that only the garbage collector frees.
                drive.holding = None
            if drive.stopper is not None:
                drive.stopper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await drive.stopper
            if drive.cancelled_by is None:
                # Nothing of this drive may act from here on (its writes are fenced anyway).
                drive.fence.lose("the drive has ended")
        events: list[Event] | None = None
        verdict = None
        if error is None and drive.cancelled_by is None and drive.lease_lost is None:
            crash_point("runner.before_finish")
            try:
                events = await self._events_at_end(drive, seen)
            except (errors.StoreError, TimeoutError) as exc:
                ending = Ending(EndKind.HANDED_BACK, f"the store failed: {exc}", exc)
                return Outcome(run, ending, recorded=False, store_error=exc)
            verdict = path.classify(events, run.invocation_id)
        ending = self._decide(drive, error, verdict, new_message)
        batch = drive.batch
        if batch is not None and error is None:
            if ending.kind in FINISHING and batch.pending and batch.failed is None:
                return await self._finish_with_last_events(drive, ending, events, verdict, found)
            try:
                await drive.barrier()  # not a finish: the last events in their own unit first
            except Exception as raised:
                error = await self._drive_error(drive, raised)
                events, verdict = None, None
                ending = self._decide(drive, error, None, new_message)
        return await record(path, run, ending, events=events, verdict=verdict, classification=found)

    async def _drive_error(self, drive: Drive, raised: Exception) -> BaseException:
        """What failed the drive: stores what it can of the batch, then names the error.

        A barrier's store error reaches us wrapped by ADK's plugin manager:
        the batch's own failure is the error, when it is among the causes.
        """
        await self._settle(drive, raised)
        failed_flush = drive.batch.failed if drive.batch is not None else None
        return next((e for e in causes(raised) if e is failed_flush), raised)

    def _decide(
        self,
        drive: Drive,
        error: BaseException | None,
        verdict: Classification | None,
        new_message: types.Content | None,
    ) -> Ending:
        return decide(
            error,
            verdict,
            retry_policy=self.path.retry_policy,
            cancelled_by=drive.cancelled_by,
            lease_lost=drive.lease_lost,
            nothing_to_do=new_message is _ALREADY_ANSWERED,
        )

    async def _events_at_end(self, drive: Drive, seen: list[Event]) -> list[Event]:
        """The session's events after the drive that decide its invocation, the batch's
        unwritten last ones included.

        The cache holds every event this run wrote (we hold the session): the
        part of its log from the invocation's first event on
        (:meth:`~durable_adk.adk.services.sessions.DurableSessionService.invocation_log`)
        is what the classification, the inbox and a dead letter read, the same
        verdict as the whole log gives, at the cost of the invocation alone.
        The store is read (the whole log) only when the cache dropped it.
        """
        path, run = self.path, drive.run
        key = (run.app_name, run.user_id, run.session_id)
        pending = [p.event for p in drive.batch.pending] if drive.batch is not None else []
        tail = path.sessions.invocation_log(key, run.invocation_id, pending)
        if tail is not None:
            return tail
        # A plain read, not a barrier: the batch is still to join the finish.
        with using_batch(None):
            session = await path.sessions.get_session(
                app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
            )
        if session is None:
            return list(seen)  # every event the drive produced, the unwritten ones too
        return [*session.events, *pending]  # the batch's: never in the store or cache yet

    async def _finish_with_last_events(
        self,
        drive: Drive,
        ending: Ending,
        events: list[Event] | None,
        verdict: Classification | None,
        found: str | None,
    ) -> Outcome:
        """Writes the drive's last events and the run's finish in one unit, then hands them over.

        Until that unit is written the caller holds none of them: a crash
        before it leaves neither (recovery re-drives the rest), after it both.
        When the store refuses the events (the session moved on, or was
        deleted) nothing is written and the refusal decides the ending, as a
        failed barrier does.
        """
        path, run = self.path, drive.run
        try:
            outcome = await record(
                path,
                run,
                ending,
                events=events,
                verdict=verdict,
                classification=found,
                last=drive.batch,
            )
        except (StaleSessionError, SessionNotFoundError, errors.DurableError) as refused:
            drive.held.clear()
            ending = self._decide(drive, refused, None, None)
            return await record(path, run, ending, classification=found)
        if outcome.recorded:
            # Nothing left to write: hands the held events over, the drive's end after them.
            await drive.barrier(last=True)
        else:
            drive.held.clear()  # maybe not written: never handed over
        return outcome

    def drift_reason(self, run: Run, missing: Sequence[str]) -> str:
        """The parking reason of a drifted run, naming each missing item."""
        return (
            f"drift: the run was recorded under app definition {run.app_fingerprint} and "
            f"this worker runs {self.path.serving.fingerprint}, which lacks what its log "
            f"refers to: {', '.join(missing)}. Deploy code that has it (or move the run to a "
            "version that does) and retry the run"
        )

    async def drift_of(self, run: Run, events: Sequence[Event] | None = None) -> list[str]:
        """What the run's invocation (its log, journal, jobs and sagas) refers to that this
        code lacks or would key differently (empty: none).

        Read only when the run was recorded under another definition of the
        app than the one this worker runs (both fingerprints known).

        Args:
            run: The run about to be driven (or parked by recovery).
            events: The session's events, if the caller has just read them.
        """
        path = self.path
        mine = path.serving.fingerprint
        if not run.app_fingerprint or not mine or run.app_fingerprint == mine:
            return []
        if not run.invocation_id:
            return []
        if events is None:
            session = await path.sessions.get_session(
                app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
            )
            path.sessions.trust_next_read((run.app_name, run.user_id, run.session_id))
            events = session.events if session else []
        steps = await path.store.fetch(
            "saga_steps_of_invocation",
            {"app_name": run.app_name, "invocation_id": run.invocation_id},
        )
        missing = drift(
            events, run.invocation_id, path.known, [RecordedStep.from_row(row) for row in steps]
        )
        entries = await Journal(path.store).list(
            invocation_id=run.invocation_id, limit=RECORDS_READ
        )
        jobs = [
            job
            for job in await JobTable(path.store).list_jobs(
                session_id=run.session_id, limit=RECORDS_READ
            )
            if job.invocation_id == run.invocation_id and job.app_name == run.app_name
        ]
        keyed = key_drift(events, run.invocation_id, path.known, entries, jobs)
        return missing + [item for item in keyed if item not in missing]

    async def _unreadable(self, drive: Drive) -> Ending | None:
        """The run parked on its session's unreadable events, or None (the usual case).

        The read is the one ADK would make next: once done, ADK's is
        answered from the cache (:meth:`trust_next_read`). The cached log's
        index names the unreadable events: no walk of the log, no Session built.
        """
        path, run = self.path, drive.run
        key = (run.app_name, run.user_id, run.session_id)
        trusted = path.sessions.is_trusted(key)
        # Trusted: the log ADK's read, next, is served from (a run just claimed
        # as it was recorded, or a recovery's claim that read it): nothing to read.
        found = await path.sessions.unreadable_events(key)
        if not trusted:
            path.sessions.trust_next_read(key)
        return unreadable_ending(run, found or [])

    async def _message_for(
        self, drive: Drive, message: types.Content, *, resume: bool
    ) -> types.Content | None:
        """The message ADK gets: what a continuation answers that is not stored yet."""
        path, run = self.path, drive.run
        if not (resume and has_answers(message)):
            return message
        before = await path.sessions.get_session(
            app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
        )
        # We hold the session's run and have just read it: ADK's read, next, need not.
        path.sessions.trust_next_read((run.app_name, run.user_id, run.session_id))
        return unanswered(before.events if before else [], message, run.run_id, run.invocation_id)

    async def _adk_events(
        self, drive: Drive, new_message: types.Content | None, *, resume: bool
    ) -> AsyncGenerator[Event, None]:
        """ADK's events for the drive, under its lease, once admitted."""
        path, run = self.path, drive.run
        drive.holding = self._hold(drive)
        config = path.run_config if drive.run_config is None else drive.run_config
        base = off_the_loop(config, path.sync_tools)
        run_config = base.model_copy(
            update={
                "custom_metadata": {
                    **(base.custom_metadata or {}),
                    RUN_METADATA_KEY: {"run_id": run.run_id, "epoch": run.epoch},
                }
            }
        )
        chosen = path.adk.__dict__.setdefault("chosen", {})
        chosen[(run.user_id, run.session_id)] = run.invocation_id
        admitted = False
        try:
            if resume and has_answers(new_message):
                # The race between the submit's check and a cancel: a cancelled
                # invocation takes no continuation, even one already queued.
                try:
                    await path.refuse_if_cancelled(run.user_id, run.session_id, run.invocation_id)
                except errors.InvocationCancelled as exc:
                    raise errors.RunCancelled(str(exc)) from exc  # ends the run CANCELLED
            # Our turn to run ADK (the lease is held meanwhile); a cancel seen
            # while waiting ends the wait, and the drive, without running it.
            admitted = await path.admission.enter(drive.abort)
            if drive.answer_first and admitted:
                await self._answer_first(drive, run_config)
            if not admitted or new_message is _ALREADY_ANSWERED:
                return  # cancelled while waiting, or another run answered every call
            events = path.adk.run_async(
                user_id=run.user_id,
                session_id=run.session_id,
                invocation_id=run.invocation_id if resume else None,
                new_message=new_message,
                run_config=run_config,
                state_delta=drive.state_delta,
                yield_user_message=drive.yield_user_message,
                abort_signal=drive.abort,
            )
            async with contextlib.aclosing(events) as stream:
                async for event in stream:
                    yield event
        finally:
            if admitted:
                path.admission.leave()
            chosen.pop((run.user_id, run.session_id), None)

    async def _hand(self, drive: Drive, event: Event) -> None:
        """Hands one event to the reader: stored ones only after their barrier."""
        path, run = self.path, drive.run
        if drive.batch is None:
            await drive.wanted()
        elif not event.partial:
            # Held until it is durable; lock-step unless ADK may run ahead.
            drive.held.append(event)
            if not drive.look_ahead:
                await drive.barrier()
            return
        else:
            await drive.barrier()  # what came before is durable and handed first
        session = (run.app_name, run.user_id, run.session_id)
        if event.partial and path.sessions.live.watched(session):
            # Never stored: followers get it from here (stored ones come from
            # the session service, with their numbers).
            path.sessions.live.publish(session, event)
        drive.hand(event)

    async def _answer_first(self, drive: Drive, run_config: RunConfig) -> None:
        """Answers the lost calls of a Workflow node before ADK re-enters the node.

        Under the drive's lease and fence, like the rest of the drive. ADK
        re-reads the session afterwards (it is not trusted from the cache).
        """
        path, run = self.path, drive.run
        session = await path.sessions.get_session(
            app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
        )
        if session is None or run.invocation_id is None:
            raise errors.InvalidArgument(f"run {run.run_id}: no session or invocation to answer")
        stored = await answer_lost_calls(
            path.adk,
            path.sessions,
            session,
            invocation_id=run.invocation_id,
            call_ids=drive.answer_first,
            run_config=run_config,
        )
        # We hold the session's run and have just written to it: ADK's read, next, need not.
        path.sessions.trust_next_read((run.app_name, run.user_id, run.session_id))
        logger.info(
            "run %s (epoch %d): answered %d lost call(s) before ADK re-enters the node",
            run.run_id,
            run.epoch,
            len(stored),
        )

    async def _settle(self, drive: Drive, exc: BaseException) -> None:
        """After a drive error, writes and hands over what the batch held, if the store takes it.

        What ADK produced before the error is then stored, as with per-event
        commits. When the store refuses the batch (the run was taken over, the
        session moved on) nothing of it is written and the held events are
        dropped; the drive's own error decides what happens next.
        """
        batch = drive.batch
        fenced = any(isinstance(e, errors.Fenced) for e in causes(exc))
        if batch is None or batch.failed is not None or fenced:
            drive.held.clear()
            return
        try:
            await drive.barrier()
        except (errors.DurableError, StaleSessionError, SessionNotFoundError, TimeoutError) as err:
            logger.warning(
                "run %s (epoch %d): the events before the error could not be stored: %s",
                drive.run.run_id,
                drive.run.epoch,
                err,
            )
            drive.held.clear()

    # ------------------------------------------------------------------ lease

    def hold_for(
        self, run: Run, task: asyncio.Task[Any], *, abort: Callable[[], None] | None
    ) -> tuple[Drive, asyncio.Task[None]]:
        """Keeps a claimed run's lease while ``task`` (ADK's own Runner) drives it."""
        drive = self.new_drive(run)
        drive.task = task
        drive.on_abort = abort
        heartbeat = asyncio.create_task(
            self._held_while_running(drive), name=f"durable-adk-lease-{run.run_id}"
        )
        return drive, heartbeat

    async def _held_while_running(self, drive: Drive) -> None:
        """Keeps the drive's lease with the keeper until cancelled (or lost)."""
        holding = self._hold(drive)
        try:
            await drive.fence.wait_lost()
        finally:
            self.path.keeper.drop(holding)
            if drive.stopper is not None:  # the drive ended: nothing left to abort
                drive.stopper.cancel()

    def _hold(self, drive: Drive) -> Holding:
        """Has the keeper renew the drive's lease; a lost lease cancels the drive.

        A renewal that says an operator asked the run to stop cancels the
        drive (once, :meth:`_cancel`); the keeper goes on renewing, since the
        holder needs its lease to end the run CANCELLED.
        """

        def renewed(renewal: RenewResult) -> None:
            drive.renewal = renewal
            drive.patience.until = max(drive.patience.until, drive.fence.trusted_until)
            if renewal.cancel_requested_by is not None and drive.cancelled_by is None:
                self._cancel(drive, renewal.cancel_requested_by)

        return self.path.keeper.hold(
            drive.run.lease, drive.fence, lambda reason: self._lose(drive, reason), renewed
        )

    def _cancel(self, drive: Drive, by: str) -> None:
        """The run was asked to stop: stop acting, then abort ADK's invocation.

        The fence refuses every new outside act at once (a journaled tool
        that has not acted raises :class:`~durable_adk.errors.RunCancelled`);
        acts already under way, with the recording of their result, and a
        saga's compensation (the fence's busy sections) are let finish, for
        at most the policy's ``cancel_grace``; then ADK's abort signal stops
        the invocation (it seals the calls left open with an abort error).
        The drive then ends the run CANCELLED.
        """
        run = drive.run
        drive.cancelled_by = by
        drive.fence.stop(f"cancelled by {by}")
        logger.info("run %s (epoch %d): cancelled by %s; stopping it", run.run_id, run.epoch, by)
        grace = self.path.policy.cancel_grace

        async def abort_when_idle() -> None:
            try:
                await asyncio.wait_for(drive.fence.idle(), timeout=grace)
            except TimeoutError:
                logger.warning(
                    "run %s: work still under way %.1fs after the cancel; aborting it anyway",
                    run.run_id,
                    grace,
                )
            drive.abort.set()
            if drive.on_abort is not None:  # ADK's own Runner drives it (DurableRunsPlugin)
                drive.on_abort()

        drive.stopper = asyncio.create_task(
            abort_when_idle(), name=f"durable-adk-stop-{run.run_id}"
        )

    def _lose(self, drive: Drive, reason: str) -> None:
        """The lease is lost: the fence is lost for good and the drive is cancelled."""
        run = drive.run
        if drive.fence.lost is not None:
            return  # the deadline's timer and the renewal loop may both find it
        drive.lease_lost = reason
        drive.patience.give_up()
        drive.fence.lose(reason)
        self.path.metrics.lease_lost()
        run_event(
            logger,
            logging.WARNING,
            "lease_lost",
            run_id=run.run_id,
            epoch=run.epoch,
            attempt=run.attempts,
            reason=reason,
            then="drive cancelled",
        )
        drive.stop("fenced")


def _retrieved(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _log_detached_end(
    run: Run, outcome: Outcome | None, stopped: BaseException | None, *, in_outage: bool
) -> None:
    """Says how a drive nobody was reading ended (its caller cannot be told)."""
    where = f"run {run.run_id} (epoch {run.epoch}, caller gone)"
    if isinstance(stopped, asyncio.CancelledError):
        logger.warning(
            "%s: cancelled at shutdown; its lease expires (or is handed back) and "
            "recovery takes it over",
            where,
        )
    elif stopped is not None:
        logger.error("%s: failed: %s", where, stopped, exc_info=stopped)
    elif outcome is not None:
        kind = outcome.ending.kind
        if kind is EndKind.FAILED:
            error = outcome.ending.error
            logger.error("%s: failed: %s", where, error, exc_info=error)
        elif kind in (EndKind.DONE, EndKind.PAUSED) and outcome.recorded:
            logger.info("%s: driven to its end (%s)", where, kind.value)
        elif in_outage and outage_hand_back(outcome.ending) and outcome.recorded:
            logger.info("%s: handed back to recovery as the store returned", where)
        else:
            logger.warning("%s: %s (%s)", where, kind.value, outcome.ending.reason)
