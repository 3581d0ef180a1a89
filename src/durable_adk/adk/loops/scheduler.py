"""The schedule poller: fires an app's due ticks through the one run path.

A :class:`Scheduler` is one of the background loops
(:class:`~durable_adk.adk.loops.background.Background`), so ``async with
DurableRunner``, ``durable-adk serve`` and ``durable-adk recover`` (one
pass) all fire due ticks. Each poll:

1. does nothing if an operator drained the worker's version;
2. syncs the app's declared schedules into the store when the set in force
   is not this code's and this version may take it over (:func:`takes_over`:
   the newest version that is not drained owns the schedules), looked at at
   most every :data:`SET_CHECK_EVERY` seconds; a one-off pass never syncs;
3. claims the due schedules its version synced in one statement
   (:meth:`~durable_adk.tables.schedules.ScheduleTable.claim`), by the database clock
   (again at once while a claim returns a full batch);
4. for each, records the due ticks the catch-up policy fires, each with its
   run id chosen in advance, and advances the schedule, in one unit of work;
5. submits each PENDING tick's run through :meth:`RunPath.submit` under that
   id (a second submit of the id records nothing), unless the overlap policy
   skips it or makes it wait for the previous run; marks it SUBMITTED;
6. releases the schedule until its next tick (or until the next poll, when a
   tick waits for the previous run), and drives the submitted runs.

A crash anywhere leaves either a claim whose lease runs out (the schedule is
due again and the next claim records the same ticks under the same keys) or
PENDING ticks that the next claim submits under their run ids: the tick is
neither lost nor doubled, and a run on the ledger is recovered like any other.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from google.genai import types

from durable_adk import errors
from durable_adk.adk.runs.path import HasRunPath
from durable_adk.faults import crash_point
from durable_adk.schedules import Overlap, Schedule, ScheduleRow, Tick, TickState, plan
from durable_adk.tables.ledger import Run, RunStatus
from durable_adk.tables.schedules import ScheduleSet, ScheduleTable, digest_of
from durable_adk.versions import is_newer

logger = logging.getLogger("durable_adk.schedules")

MAX_CLAIMS_PER_POLL = 10
"""Claims one poll makes at most while each returns a full batch (a burst of due
schedules, such as a thousand crons at 9:00, is served at once, not one batch
per poll interval)."""

ACTIVE = frozenset({RunStatus.QUEUED, RunStatus.RUNNING})
"""The statuses of a previous run that the overlap policy waits for or skips against."""

SET_CHECK_EVERY = 2.0
"""Seconds a poller trusts what it read of the set of schedules in force (one
indexed read) before reading it again: a set another version synced is taken
back within this."""


@dataclass(frozen=True, slots=True)
class Fired:
    """What a poll did with one tick.

    Attributes:
        schedule: The schedule.
        tick_key: The tick's key.
        run_id: Its run (for a skipped tick, the run it would have started).
        state: SUBMITTED or SKIPPED (PENDING: it waits for the previous run).
    """

    schedule: str
    tick_key: str
    run_id: str
    state: TickState


class Scheduler:
    """Fires the due ticks of an app's schedules over one run path."""

    def __init__(
        self,
        runner: HasRunPath,
        schedules: Sequence[Schedule] | None,
        *,
        interval: float = 1.0,
        lease: float = 30.0,
        batch: int = 100,
        sync: bool = True,
    ) -> None:
        """Creates the poller (nothing runs until :meth:`poll_once`).

        Args:
            runner: The run path (or DurableRunner) the ticks' runs are submitted to.
            schedules: The schedules the app declares; None: this process has
                no say on them and its polls do nothing.
            interval: Seconds between polls; a tick waiting for the previous
                run is looked at again after this long.
            lease: Seconds a claim holds a schedule (a worker dying with it
                leaves it due again after this).
            batch: Most schedules one claim takes.
            sync: Whether this process may sync the declared schedules into
                the store; False for a one-off pass (``durable-adk recover``),
                which fires the due ticks of its version's schedules as stored.
        """
        self.path = runner.path
        self.schedules = None if schedules is None else tuple(schedules)
        self.table = ScheduleTable(self.path.store, self.path.app_name)
        self.interval = interval
        self.lease = lease
        self.batch = batch
        self.may_sync = sync
        self.version = self.path.serving.version
        self._synced = False  # this process made its set the app's at least once
        self._checked_at: float | None = None
        self._warned = False
        self._left_to: tuple[str | None, str] | None = None  # the set it last left in force
        self._said_drained = False
        self._drives: set[asyncio.Task[None]] = set()

    async def sync(self, seen: ScheduleSet | Literal["read"] | None = "read") -> list[ScheduleRow]:
        """Makes the declared schedules the app's, stamped with this worker's version.

        Raises:
            Conflict: Another sync came after ``seen`` (nothing written).
        """
        rows = await self.table.sync(
            self.schedules or (), version=self.version, by=self.path.worker_id, seen=seen
        )
        self._synced = True
        return rows

    async def sync_if_due(self) -> bool:
        """Syncs when the set in force is not this code's and this version may take it over.

        Read at most every :data:`SET_CHECK_EVERY` seconds. Returns whether it synced.
        """
        now = time.monotonic()
        if self._checked_at is not None and now - self._checked_at < SET_CHECK_EVERY:
            return False
        self._checked_at = now
        current = await self.table.in_force()
        if current is not None and current.version == self.version:
            if current.digest == digest_of(self.schedules or ()):
                return False  # in force already
            if self._synced:
                # The same version with other schedules (a version string deployed
                # twice with different code): the process that synced last wins.
                if not self._warned:
                    logger.warning(
                        "schedules of app %r: another process of version %s synced other "
                        "schedules; they stay in force",
                        self.path.app_name,
                        self.version or "(none)",
                    )
                    self._warned = True
                return False
        elif current is not None and not await self._takes_over(current.version):
            if self._left_to != (current.version, current.digest):  # said once per set
                self._left_to = (current.version, current.digest)
                logger.info(
                    "schedules of app %r: %s leaves those of %s in force (a newer version "
                    "not drained)",
                    self.path.app_name,
                    self.version or "unversioned",
                    current.version or "unversioned",
                )
            return False
        try:
            await self.sync(current)
        except errors.Conflict:
            self._checked_at = None  # another sync came first: look again next poll
            return False
        logger.info(
            "schedules of app %r: %s synced them (took them over from %s)",
            self.path.app_name,
            self.version or "unversioned",
            "nobody" if current is None else (current.version or "unversioned"),
        )
        return True

    async def _takes_over(self, theirs: str | None) -> bool:
        return await takes_over(self.version, theirs, drained=self.path.versions.is_drained)

    async def poll_once(self, *, wait: bool = False) -> list[Fired]:
        """One poll: claim the due schedules, record and submit their ticks.

        Args:
            wait: Drive the submitted runs to their end before returning (a
                one-off pass); else they are driven in tasks of their own.
        """
        if self.schedules is None:
            return []  # this process has no say on the app's schedules
        try:
            await self.path.refuse_if_drained()
        except errors.Draining:
            # A drained version starts no run and never touches the schedules:
            # a worker of the version in force takes the ticks.
            if not self._said_drained:
                self._said_drained = True
                logger.info(
                    "schedules of app %r: %s is drained: it leaves the schedules to the "
                    "version in force",
                    self.path.app_name,
                    self.version or "unversioned",
                )
            return []
        if self.may_sync:
            await self.sync_if_due()
        fired: list[Fired] = []
        for _ in range(MAX_CLAIMS_PER_POLL):
            rows = await self.table.claim(
                self.path.worker_id, lease=self.lease, batch=self.batch, version=self.version
            )
            if not rows:
                break
            crash_point("schedule.after_claim")
            served = await asyncio.gather(*(self._serve_logged(row) for row in rows))
            fired.extend(f for some in served for f in some)
            if len(rows) < self.batch:
                break  # a full batch may leave more due: claim again at once
        if wait:
            await self.wait()
        return fired

    async def _serve_logged(self, row: ScheduleRow) -> list[Fired]:
        """Serves one claimed schedule; a failure is logged and leaves it to a later claim
        (its claim runs out; recorded ticks wait PENDING) without stopping the others."""
        try:
            return await self._serve(row)
        except Exception:
            logger.exception("schedule %r failed; retried after its lease", row.name)
            return []

    async def _serve(self, row: ScheduleRow) -> list[Fired]:
        assert row.db_now is not None  # the claim reads the database clock
        now = row.db_now
        chosen = plan(row.schedule, row.next_tick_at, now)
        if chosen.next_tick != row.next_tick_at:
            if not await self.table.record(row, chosen):
                logger.info("schedule %r changed while claimed: left to its next claim", row.name)
                return []
            crash_point("schedule.after_record")
            if chosen.missed:
                logger.warning(
                    "schedule %r: %d tick(s) missed while no worker ran (catch-up %s)",
                    row.name,
                    chosen.missed,
                    row.schedule.catch_up,
                )
        fired, waiting = await self._fire_open(row)
        next_look = now + self.interval if waiting else row.schedule.fire_at(chosen.next_tick)
        await self.table.release(row.pk, row.epoch, next_look)
        return fired

    async def _fire_open(self, row: ScheduleRow) -> tuple[list[Fired], bool]:
        """Submits (or skips) the schedule's PENDING ticks in order; True if one waits."""
        schedule = row.schedule
        previous = await self._active(row.last_run_id)
        fired: list[Fired] = []
        for tick in await self.table.open_ticks(row.name):
            if previous and schedule.overlap is Overlap.SKIP:
                why = f"previous run {row.last_run_id} still active"
                await self.table.tick_done(tick, TickState.SKIPPED, why)
                fired.append(Fired(row.name, tick.tick_key, tick.run_id, TickState.SKIPPED))
                continue
            if previous and schedule.overlap is Overlap.QUEUE:
                fired.append(Fired(row.name, tick.tick_key, tick.run_id, TickState.PENDING))
                return fired, True
            run, content, fresh = await self._submit(tick, schedule)
            crash_point("schedule.after_submit")
            await self.table.tick_done(tick, TickState.SUBMITTED)
            row = _with_last_run(row, run.run_id)
            previous = run.status in ACTIVE
            fired.append(Fired(row.name, tick.tick_key, run.run_id, TickState.SUBMITTED))
            if fresh:
                self._drive(run, content)
        return fired, False

    async def _active(self, run_id: str | None) -> bool:
        if run_id is None:
            return False
        run = await self.path.ledger.get(run_id)
        return run is not None and run.status in ACTIVE

    async def _submit(self, tick: Tick, schedule: Schedule) -> tuple[Run, types.Content, bool]:
        """Submits a tick's run under its chosen id; ``fresh`` is False if it was there already."""
        known = await self.path.ledger.get(tick.run_id)
        content = types.Content(role="user", parts=[types.Part(text=schedule.message)])
        if known is not None:
            return known, content, False  # submitted before a crash: recovery owns it
        run, content = await self.path.submit(
            user_id=tick.user_id,
            session_id=tick.session_id,
            message=content,
            run_id=tick.run_id,
        )
        logger.info(
            "schedule %r: tick %s started run %s", tick.schedule_name, tick.tick_key, run.run_id
        )
        return run, content, run.owner == self.path.worker_id

    def _drive(self, run: Run, content: types.Content) -> None:
        task = asyncio.create_task(self._drive_one(run, content), name=f"durable-adk-{run.run_id}")
        self._drives.add(task)
        task.add_done_callback(self._drives.discard)

    async def _drive_one(self, run: Run, content: types.Content) -> None:
        try:
            await self.path.drive_submitted(run, content, resume=False)
        except (errors.Fenced, errors.RunCancelled) as exc:
            logger.info("scheduled run %s: %s", run.run_id, exc)
        except errors.StoreError:
            logger.exception("scheduled run %s: left to recovery", run.run_id)

    async def wait(self) -> None:
        """Waits for the runs this poller started to end."""
        while self._drives:
            await asyncio.gather(*list(self._drives), return_exceptions=True)

    async def stop(self) -> None:
        """Stops waiting for its drives (each goes on detached, or its lease runs out)."""
        drives, self._drives = self._drives, set()
        for task in drives:
            task.cancel()
        await asyncio.gather(*drives, return_exceptions=True)


async def takes_over(
    mine: str | None, theirs: str | None, *, drained: Callable[[str], Awaitable[bool]]
) -> bool:
    """Whether a worker of version ``mine`` (not drained) may take over the schedules
    that version ``theirs`` synced.

    The schedules belong to the newest version that is not drained: ``mine``
    takes them when it is newer (PEP 440 order; unversioned is older than any
    version), or when ``theirs`` was drained (a rollback: the operator drained
    the newer version). An older worker never rewrites a newer version's
    schedules while that version takes runs.
    """
    if theirs is None:
        return True
    if mine is not None:
        try:
            if is_newer(mine, theirs):
                return True
        except errors.InvalidVersion:
            return True  # not a version this code can order: never written by a check
    return await drained(theirs)


def _with_last_run(row: ScheduleRow, run_id: str) -> ScheduleRow:
    return replace(row, last_run_id=run_id)
