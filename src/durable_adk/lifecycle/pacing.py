"""The purge's pace: how much of the time it may hold the writer, and how big a batch is.

A purge that deletes as fast as it can takes the database's writer (SQLite has
one; on PostgreSQL it takes the CPU and the WAL) from the appends of the runs
under way, and their p99 latency pays for it. A :class:`Pacer` keeps the purge
to a **duty cycle**: after each statement it sleeps for the statement's own
time multiplied by ``(1 - duty) / duty``, so the purge holds the writer at most
``duty`` of the time (0.05: a 4 ms batch, then 76 ms of rest). And it sizes the
batches by time, not by rows: it aims each statement at ``target`` seconds
(a few milliseconds, so an append arriving during a batch waits little),
halving the rows after a batch that took much longer and doubling them after
one that took much less, between ``min_batch`` and the policy's ``batch``.
The aim is never below twice the quickest statement seen lately (its
``floor``, what a statement costs whatever its rows: a round trip, a loaded
machine's scheduling): where even an empty statement takes 10 ms, batches of
20 rows would only make the purge slower, not the appends' wait shorter.

``duty=1.0`` is a one-off purge by an operator (``durable-adk purge --duty
1``): no rest, and the policy's ``batch`` rows in every statement.

The clock and the sleep are given, so tests drive a pacer without waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

TARGET_SECONDS = 0.004
"""What a paced purge aims each statement's time at (an append waits at most about this)."""

MIN_BATCH = 200
"""The fewest rows a paced statement deletes, however slow the database is."""

MAX_REST = 0.25
"""The longest rest after one statement. A statement's time includes its wait for
the writer (SQLite's lock, held by the appends) and the machine's stalls, not only
the time it held the writer; billing all of it made a pass over a busy database
rest for seconds after every statement and fall behind the load it must keep up
with (bench/retention.py)."""


class Pacer:
    """Times each statement of a purge, rests after it, and sizes the next batch.

    Use: ``size = pacer.batch``; ``began = pacer.clock()``; run the statement
    with ``size`` rows; ``await pacer.rest(began, len(rows) == size)``.

    Args:
        duty: The share of the time the purge may spend in its statements
            (0 < duty <= 1; 1: no rest, fixed batches).
        batch: The most rows one statement deletes (the policy's ``batch``).
        target: The seconds each statement aims at (when ``duty`` < 1).
        min_batch: The fewest rows one statement deletes.
        clock: Seconds, monotonic (default :func:`time.perf_counter`).
        sleep: Awaited with the seconds of each rest (default :func:`asyncio.sleep`).
    """

    def __init__(
        self,
        duty: float,
        batch: int,
        *,
        target: float = TARGET_SECONDS,
        min_batch: int = MIN_BATCH,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        if not 0 < duty <= 1:
            raise ValueError(f"duty must be in (0, 1], got {duty!r}")
        self.duty = duty
        self.max_batch = batch
        self.min_batch = min(min_batch, batch)
        self.target = target
        self.clock = clock
        self._sleep = sleep
        self.batch = batch if duty >= 1 else self.min_batch
        """The rows the next statement deletes."""
        self.busy = 0.0
        """Seconds spent in statements so far."""
        self.rested = 0.0
        """Seconds spent resting so far."""
        self.floor: float | None = None
        """The quickest statement lately (seconds; rises 10 % a statement until beaten)."""

    def aim(self) -> float:
        """The seconds the next statement aims at: ``target``, or twice the floor."""
        return max(self.target, 2 * (self.floor or 0.0))

    def rest_for(self, took: float) -> float:
        """The rest after a statement that took ``took`` seconds: its time, billed
        up to twice the aim (beyond that it was waiting for the writer, not
        holding it), times ``(1 - duty) / duty``, at most :data:`MAX_REST`."""
        if self.duty >= 1 or took <= 0:
            return 0.0
        billed = min(took, 2 * self.aim())
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

    async def rest(self, began: float, full: bool) -> None:
        """After a statement begun at ``began`` (by :attr:`clock`): resizes, then rests."""
        took = max(0.0, self.clock() - began)
        self.busy += took
        self.resize(took, full)
        pause = self.rest_for(took)
        if pause > 0:
            self.rested += pause
            await self._sleep(pause)
