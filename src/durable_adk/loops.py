"""Background passes: run some work every N seconds while a block runs.

Used by the recovery sweeper, the job resumer, the progress sender and the
expiry sweeper. A pass that fails is logged and the next one runs on time:
one bad row must not end a loop that every other row depends on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

logger = logging.getLogger("durable_adk.loops")


async def every(
    interval: float,
    work: Callable[[], Awaitable[Any]],
    what: str,
    *,
    first_after: float = 0.0,
    stop: asyncio.Event | None = None,
) -> None:
    """Runs ``work`` every ``interval`` seconds (first after ``first_after``).

    Forever, or until ``stop`` is set: then it returns at once, also from a
    wait between passes (a pass in progress is finished first).
    """
    if await _stopped_within(first_after, stop):
        return
    while True:
        try:
            await work()
        except Exception:  # logged, and retried at the next interval
            logger.exception("%s pass failed; retrying at the next interval", what)
        if await _stopped_within(interval, stop):
            return


async def _stopped_within(seconds: float, stop: asyncio.Event | None) -> bool:
    """Waits ``seconds``, or less if ``stop`` is set meanwhile; True if it is set."""
    if stop is None:
        await asyncio.sleep(seconds)
        return False
    if not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()


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
