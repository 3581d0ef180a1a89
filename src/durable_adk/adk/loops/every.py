"""Background passes: run some work every N seconds while a block runs.

Used by the recovery sweeper, the job resumer, the progress sender and the
expiry sweeper; :class:`BackgroundSettings` is their cadence
(:mod:`durable_adk.adk.loops.background` runs them). A pass that fails is logged
and the next one runs on time: one bad row must not end a loop that every
other row depends on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from durable_adk import errors
from durable_adk.lifecycle.policy import RetentionPolicy

logger = logging.getLogger("durable_adk.loops")


def require_positive(**values: float) -> None:
    """Raises InvalidArgument naming the first of ``values`` that is not > 0."""
    for name, value in values.items():
        if value <= 0:
            raise errors.InvalidArgument(f"{name} must be > 0, got {value}")


@dataclass(frozen=True, slots=True)
class BackgroundSettings:
    """How often an app's background loops run.

    Attributes:
        sweep_interval: Seconds between recovery passes (and saga sweeps).
        sweep_batch: Most runs one recovery pass claims.
        sweep_concurrency: How many claimed runs are recovered at a time.
        resume_interval: Seconds between passes of the job submitter and resumer.
        expiry_interval: Seconds between passes of the job deadline sweep.
        progress_interval: At most one progress delivery per job per this many seconds.
        saga_quiet: Quiet seconds before a saga with no final status counts as stuck.
        schedule_interval: Seconds between polls of the schedule poller.
        schedule_lease: Seconds a claim holds a schedule.
        drain_seconds: On leaving ``async with DurableRunner``, how long the
            recoveries still in progress get to finish before they are
            cancelled (their leases then expire and another sweeper takes
            them over); None waits for all.
        retention: The app's retention policy: with one, a purge loop deletes
            what it lets go every ``retention.interval`` seconds (None, the
            default: nothing is ever purged; docs/data.md).
    """

    sweep_interval: float = 5.0
    sweep_batch: int = 10
    sweep_concurrency: int = 4
    resume_interval: float = 1.0
    expiry_interval: float = 30.0
    progress_interval: float = 60.0
    saga_quiet: float = 300.0
    schedule_interval: float = 1.0
    schedule_lease: float = 30.0
    drain_seconds: float | None = 10.0
    retention: RetentionPolicy | None = None

    def __post_init__(self) -> None:
        require_positive(
            sweep_interval=self.sweep_interval,
            resume_interval=self.resume_interval,
            expiry_interval=self.expiry_interval,
            progress_interval=self.progress_interval,
            saga_quiet=self.saga_quiet,
            schedule_interval=self.schedule_interval,
            schedule_lease=self.schedule_lease,
        )
        if self.sweep_batch < 1 or self.sweep_concurrency < 1:
            raise errors.InvalidArgument("sweep_batch and sweep_concurrency must be >= 1")
        if self.retention is not None and not isinstance(self.retention, RetentionPolicy):
            raise errors.InvalidArgument(
                f"retention must be a RetentionPolicy, not {type(self.retention).__name__}"
            )
        if self.drain_seconds is not None and self.drain_seconds < 0:
            raise errors.InvalidArgument(f"drain_seconds must be >= 0, got {self.drain_seconds}")


async def every(
    interval: float,
    work: Callable[[], Awaitable[Any]],
    what: str,
    *,
    first_after: float = 0.0,
    stop: asyncio.Event | None = None,
    nudge: Nudge | None = None,
) -> None:
    """Runs ``work`` every ``interval`` seconds (first after ``first_after``).

    Forever, or until ``stop`` is set: then it returns at once, also from a
    wait between passes (a pass in progress is finished first). A ``nudge``
    ends the wait early: the next pass runs at once (the store came back, or
    a run was handed back when it did).

    A pass that fails because the store is unavailable is said at DEBUG,
    without a traceback: the outage has its own line (``store.health``).
    """
    if await _stopped_within(first_after, stop, nudge):
        return
    while True:
        try:
            await work()
        except errors.StoreUnavailable as exc:  # the outage is said once, by the store
            logger.debug("%s pass failed: the store is unavailable (%s)", what, exc)
        except Exception:  # logged, and retried at the next interval
            logger.exception("%s pass failed; retrying at the next interval", what)
        if await _stopped_within(interval, stop, nudge):
            return


class Nudge:
    """Ends the waits of the loops that share it: their next pass runs now."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def __call__(self) -> None:
        """Nudges: every loop waiting on it passes at once."""
        event, self._event = self._event, asyncio.Event()
        event.set()

    async def wait(self) -> None:
        """Returns at the next nudge."""
        await self._event.wait()


async def _stopped_within(
    seconds: float, stop: asyncio.Event | None, nudge: Nudge | None = None
) -> bool:
    """Waits ``seconds``, or less if ``stop`` is set (or a nudge comes) meanwhile; True if
    ``stop`` is set."""
    if stop is None and nudge is None:
        await asyncio.sleep(seconds)
        return False
    if seconds <= 0:  # no wait: the pass runs in this turn of the loop
        return stop is not None and stop.is_set()
    if stop is not None and stop.is_set():
        return True
    waits = [asyncio.ensure_future(w.wait()) for w in (stop, nudge) if w is not None]
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
    return stop is not None and stop.is_set()


@contextlib.asynccontextmanager
async def periodically(
    interval: float, work: Callable[[], Awaitable[Any]], what: str, *, first_after: float = 0.0
) -> AsyncIterator[None]:
    """Runs :func:`every` in a task for the duration of the block, then cancels it."""
    task = asyncio.create_task(every(interval, work, what, first_after=first_after))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
