"""The purge's pace: how much of the time it may hold the writer, and how big a batch is.

A purge that deletes as fast as it can takes the database's writer (SQLite has
one; on PostgreSQL it takes the CPU and the WAL) from the appends of the runs
under way, and their p99 latency pays for it. A :class:`Pacer` keeps the purge
to a **duty cycle**: after each statement it sleeps for the time the statement
*held* the writer multiplied by ``(1 - duty) / duty``, so the purge holds the
writer at most ``duty`` of the time (0.05: a 4 ms batch, then 76 ms of rest).
And it sizes the batches by that time, not by rows: it aims each statement at
``target`` seconds (a few milliseconds, so an append arriving during a batch
waits little), halving the rows after a batch that held the writer much longer
and doubling them after one that held it much less, between ``min_batch`` and
the policy's ``batch``. The aim is never below twice the quickest statement
seen lately (its ``floor``, what a statement costs whatever its rows: a
commit's fsync, a loaded machine's scheduling): where even an empty statement
takes 10 ms, batches of 20 rows would only make the purge slower, not the
appends' wait shorter.

**Held, not waited.** The time a statement holds the writer is measured inside
the store (:func:`durable_adk.store.base.fetch_held`): on SQLite from
``BEGIN IMMEDIATE`` granted to ``COMMIT`` done, on PostgreSQL the statement's
own time on its connection. Timed from outside, a statement on a busy SQLite
is mostly its wait for the appends' write lock: a pacer billing that rested in
proportion to the appends' load, fell behind it, and sized its batches on a
figure that said nothing of how long an append would wait for them. Where the
store gives no figure (a unit written in a group), the pacer falls back to
the time around the statement, billed up to twice its aim (beyond that it was
waiting, not holding).

**SQLite: small batches, committed unsynced.** SQLite has one writer: an
append that comes while a batch holds the write lock waits for the rest of it,
and about ``duty`` of the appends come then (5 % at the default: more than the
1 % a p99 looks at). So what they wait must be small, not rare: a SQLite purge
aims each statement at :data:`SQLITE_TARGET_SECONDS` (half a millisecond, well
under an append's own p99) with batches down to :data:`SQLITE_MIN_BATCH` rows,
and its batches commit without waiting for the disk (``sync=False``,
:func:`~durable_adk.store.base.fetch_held`): an fsync (0.3-1 ms here) was most
of a small batch's hold, so batches of 10-50 rows deleted a sixth to a half as
many rows per second held as batches of 200; unsynced, 25 rows hold about
0.15 ms and 50 rows 0.3 ms, at 160-170k rows per second held (BENCHMARKS.md,
retention). The log's pages go to the database file in a
checkpoint every :data:`CHECKPOINT_ROWS` rows (and at the end of a pass), not
after every batch: a checkpoint does not hold the write lock but costs two
fsyncs, billed to the rest (:meth:`Pacer.rest`'s ``upkeep``), not to the
batch's size. :func:`pace_for` gives each dialect its aim, least batch and
checkpoint cadence; PostgreSQL keeps :data:`TARGET_SECONDS` and
:data:`MIN_BATCH` (its appends do not wait for the purge's rows).

``duty=1.0`` is a one-off purge by an operator (``durable-adk purge --duty
1``): no rest, the policy's ``batch`` rows in every statement, every batch
committed synced and checkpointed.

The sleep and the clock are given, so tests drive a pacer without waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

TARGET_SECONDS = 0.004
"""What a paced purge aims each statement's time at (an append waits at most about this)."""

MIN_BATCH = 200
"""The fewest rows a paced statement deletes, however slow the database is."""

SQLITE_TARGET_SECONDS = 0.0005
"""What a paced purge aims each statement's time at on SQLite, whose appends wait
for it: well under an append's own p99 (1-10 ms here), with no fsync in it."""

SQLITE_MIN_BATCH = 20
"""The fewest rows a paced statement deletes on SQLite (0.1-0.2 ms held, unsynced)."""

CHECKPOINT_ROWS = 250
"""A paced purge checkpoints (SQLite: copies the log's pages into the database
file, :func:`durable_adk.lifecycle.purge.drain`) once its batches have deleted
this many rows since the last checkpoint, and at the end of a pass."""


def pace_for(dialect: str) -> tuple[float, int]:
    """A dialect's paced statements: the seconds each aims at, and the fewest rows."""
    if dialect == "sqlite":
        return SQLITE_TARGET_SECONDS, SQLITE_MIN_BATCH
    return TARGET_SECONDS, MIN_BATCH


MAX_REST = 5.0
"""The longest rest after one statement (a statement stalled by the machine for
seconds while it held the writer is not made up for by a minute's pause). Long
enough for a low ``duty``: at 0.01 a batch that held the writer 20 ms rests 2 s
(a cap of 0.25 s, when the pacer billed the wait too, let a purge at 0.01 hold
the writer 2 % of the time)."""


class Pacer:
    """Bills each statement of a purge, rests after it, and sizes the next batch.

    Use: ``size = pacer.batch``; ``began = pacer.clock()``; run the statement
    with ``size`` rows through :func:`~durable_adk.store.base.fetch_held`;
    ``await pacer.rest(began, len(rows) == size, held)``.

    Args:
        duty: The share of the time the purge may hold the writer
            (0 < duty <= 1; 1: no rest, fixed batches).
        batch: The most rows one statement deletes (the policy's ``batch``).
        target: The seconds each statement aims at (when ``duty`` < 1).
        min_batch: The fewest rows one statement deletes.
        clock: Seconds, monotonic (default :func:`time.perf_counter`): the time
            around each statement, billed where the store gives no figure.
        sleep: Awaited with the seconds of each rest (default :func:`asyncio.sleep`).
        by_clock: Bill every statement the clock's time around it, never the
            store's figure (default: when a ``clock`` is given; tests, or a
            caller that times its own way).
        checkpoint_rows: Rows deleted between two checkpoints (when ``duty`` < 1;
            a purge at ``duty=1`` checkpoints after every batch).
    """

    def __init__(
        self,
        duty: float,
        batch: int,
        *,
        target: float = TARGET_SECONDS,
        min_batch: int = MIN_BATCH,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        by_clock: bool | None = None,
        checkpoint_rows: int = CHECKPOINT_ROWS,
    ) -> None:
        if not 0 < duty <= 1:
            raise ValueError(f"duty must be in (0, 1], got {duty!r}")
        self.duty = duty
        self.max_batch = batch
        self.min_batch = min(min_batch, batch)
        self.target = target
        self.by_clock = clock is not None if by_clock is None else by_clock
        """The clock times the statements (the store's figure is not used)."""
        self.clock = clock or time.perf_counter
        self._sleep = sleep
        self.batch = batch if duty >= 1 else self.min_batch
        """The rows the next statement deletes."""
        self.busy = 0.0
        """Seconds billed to statements so far (held the writer, or timed by the clock)."""
        self.waited = 0.0
        """Seconds statements spent beyond what they were billed (waiting for the
        writer or a connection, round trips), by the clock."""
        self.rested = 0.0
        """Seconds spent resting so far."""
        self.floor: float | None = None
        """The quickest statement lately (seconds; rises 10 % a statement until beaten)."""
        self.sync = duty >= 1
        """Commit each batch synced (a paced purge's batches commit without waiting
        for the disk, :func:`~durable_adk.store.base.fetch_held`'s ``sync``)."""
        self.checkpoint_rows = 1 if duty >= 1 else max(1, checkpoint_rows)
        self.unchecked = 0
        """Rows deleted since the last checkpoint."""

    @classmethod
    def for_dialect(
        cls,
        dialect: str,
        duty: float,
        batch: int,
        *,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> Pacer:
        """A pacer with the dialect's aim, least batch and checkpoint cadence (:func:`pace_for`)."""
        target, min_batch = pace_for(dialect)
        return cls(duty, batch, target=target, min_batch=min_batch, sleep=sleep)

    def deleted(self, rows: int) -> bool:
        """Counts ``rows`` a batch deleted; says whether a checkpoint is due now."""
        self.unchecked += rows
        if self.unchecked >= self.checkpoint_rows:
            self.unchecked = 0
            return True
        return False

    def checkpoint_left(self) -> bool:
        """At the end of a pass: whether rows were deleted since the last checkpoint."""
        due, self.unchecked = self.unchecked > 0, 0
        return due

    def aim(self) -> float:
        """The seconds the next statement aims at: ``target``, or twice the floor."""
        return max(self.target, 2 * (self.floor or 0.0))

    def rest_for(self, took: float, *, held: bool = False) -> float:
        """The rest after a statement billed ``took`` seconds: times ``(1 - duty) / duty``,
        at most :data:`MAX_REST`. ``held``: the store measured the time it held the
        writer, billed whole; else the time around it, billed up to twice the aim
        (beyond that it was waiting for the writer, not holding it)."""
        if self.duty >= 1 or took <= 0:
            return 0.0
        billed = took if held else min(took, 2 * self.aim())
        return min(MAX_REST, billed * (1 - self.duty) / self.duty)

    def resize(self, took: float, full: bool) -> None:
        """Sizes the next batch after one that took ``took`` seconds (``full``: it
        deleted as many rows as it was let, so there may be more)."""
        if self.duty >= 1:
            return
        self.floor = took if self.floor is None else min(took, self.floor * 1.1)
        aim = self.aim()
        if took > 2 * aim:
            self.batch = max(self.min_batch, self.batch // 2)
        elif full and took < aim / 2:
            self.batch = min(self.max_batch, self.batch * 2)

    async def rest(
        self, began: float, full: bool, held: float | None = None, upkeep: float = 0.0
    ) -> None:
        """After a statement begun at ``began`` (by :attr:`clock`) that held the writer
        ``held`` seconds (the store's figure; None: none given): resizes, then rests.
        ``upkeep``: seconds of work after the statement that held no lock but is the
        purge's (a checkpoint, as the store measured it, or as timed around it),
        billed to the rest, not to the next batch's size (and not part of the
        ``took`` of the clock's time, which ends where the upkeep began)."""
        upkeep = max(0.0, upkeep)
        took = max(0.0, self.clock() - began - upkeep)
        measured = held is not None and not self.by_clock
        billed = max(0.0, held) if measured and held is not None else took
        self.busy += billed + upkeep
        self.waited += max(0.0, took - billed)
        self.resize(billed, full)
        pause = self.rest_for(billed, held=measured)
        if upkeep and self.duty < 1:
            pause = min(MAX_REST, pause + upkeep * (1 - self.duty) / self.duty)
        if pause > 0:
            self.rested += pause
            await self._sleep(pause)
