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

``duty=1.0`` is a one-off purge by an operator (``durable-adk purge --duty
1``): no rest, and the policy's ``batch`` rows in every statement.

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

    async def rest(self, began: float, full: bool, held: float | None = None) -> None:
        """After a statement begun at ``began`` (by :attr:`clock`) that held the writer
        ``held`` seconds (the store's figure; None: none given): resizes, then rests."""
        took = max(0.0, self.clock() - began)
        measured = held is not None and not self.by_clock
        billed = max(0.0, held) if measured and held is not None else took
        self.busy += billed
        self.waited += max(0.0, took - billed)
        self.resize(billed, full)
        pause = self.rest_for(billed, held=measured)
        if pause > 0:
            self.rested += pause
            await self._sleep(pause)
