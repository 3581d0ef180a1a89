"""Admission: how many drives one process runs at once, set by its event loop's lag.

A worker that drives more runs than its CPU keeps up with falls behind on
everything at once: events reach their callers seconds late, statements wait
so long for their answers that pool and statement timeouts fail the runs, and
the local lease deadlines fire before the renewal's answer is read, so the
worker gives its runs up as lost. Admission keeps the loop responsive
instead: a claimed run waits its turn to be driven (its lease renewed by the
batched heartbeat meanwhile, as for any held run) while the loop lags.

What it guarantees (framework-agnostic: no ADK import here):

* At most ``limit`` drives run at once, ``min_active <= limit <= max_active``;
  the others wait in arrival order and are let in as drives end or the limit
  rises. A waiter whose ``abort`` event is set stops waiting (an operator's
  cancel, a lost lease) without being admitted.
* The limit adapts to overload, sampled every ``interval`` seconds while
  drives are active. The signal is the larger of the loop's lag and the
  store's pressure (the longest a statement waited for a pooled connection:
  a database-bound worker saturates its pool before its loop lags). When the
  median of the last five samples is above ``lag_target`` the limit is cut
  by a quarter (at most every ``5 x interval``): overload that lasts, not
  one pause (a garbage collection, one slow statement), which would
  otherwise cost a quarter of the drives for the seconds it takes to grow
  back. When every sample of the last ``10 x interval`` stayed below the
  target, and runs wait with every slot taken, it grows by a thirty-second
  (at least one). This is additive increase, multiplicative decrease, as
  TCP does for congestion.
* Below ``min_active`` drives nothing waits and no sampler runs: a single run
  pays a counter, nothing more.
* ``Admission(adaptive=False, max_active=N)`` is a fixed limit of N;
  ``Admission.unlimited()`` admits everything (the old behaviour).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
import math
from collections.abc import Callable
from typing import Any

from durable_adk import errors

logger = logging.getLogger("durable_adk.admission")


class Admission:
    """Bounds the drives a process runs at once (see the module docstring)."""

    def __init__(
        self,
        *,
        max_active: int | None = None,
        min_active: int = 16,
        initial: int = 64,
        lag_target: float = 0.25,
        interval: float = 0.05,
        adaptive: bool = True,
        pressure: Callable[[], float] | None = None,
    ) -> None:
        """Creates an admission gate.

        Args:
            max_active: Most drives at once (None: no cap but the adaptive limit).
            min_active: Drives always let in, whatever the lag.
            initial: The limit to start from (adaptive).
            lag_target: The event-loop lag (seconds) above which the limit is cut.
            interval: Seconds between lag samples while drives run.
            adaptive: False: the limit stays ``max_active`` (required then).
            pressure: Read at each sample: the store's wait for connections
                since the last read (:meth:`durable_adk.store.Store.take_pressure`;
                the runner sets its store's when this is None).

        Raises:
            durable_adk.errors.InvalidArgument: A value out of range.
        """
        if min_active < 1:
            raise errors.InvalidArgument(f"min_active must be >= 1, got {min_active}")
        if max_active is not None and max_active < min_active:
            raise errors.InvalidArgument(
                f"max_active ({max_active}) must be >= min_active ({min_active})"
            )
        if not adaptive and max_active is None:
            raise errors.InvalidArgument("a fixed admission (adaptive=False) needs max_active")
        if lag_target <= 0 or interval <= 0:
            raise errors.InvalidArgument("lag_target and interval must be > 0")
        self.max_active = max_active
        self.min_active = min_active
        self.lag_target = lag_target
        self.interval = interval
        self.adaptive = adaptive
        cap = math.inf if max_active is None else float(max_active)
        self.limit: float = cap if not adaptive else min(cap, float(max(initial, min_active)))
        self.active = 0
        self.lag = 0.0  # the last sample
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._queued = 0  # waiters neither admitted nor gone (the deque keeps gone ones lazily)
        self._sampler: asyncio.Task[None] | None = None
        self._last_cut = -math.inf
        self.pressure = pressure
        self._recent: collections.deque[float] = collections.deque(maxlen=10)

    @classmethod
    def unlimited(cls) -> Admission:
        """Admits every drive at once (no limit, no sampler)."""
        return cls(adaptive=False, max_active=2**62, min_active=2**62)

    @property
    def waiting(self) -> int:
        """Drives waiting to be let in."""
        return self._queued

    async def enter(self, abort: asyncio.Event | None = None) -> bool:
        """Waits for a slot; True once admitted (call :meth:`leave` after), False if aborted."""
        if abort is not None and abort.is_set():
            return False
        if self.active < self._slots() and not self.waiting:
            self.active += 1
            self._start_sampler()
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._queued += 1
        self._start_sampler()
        aborted: asyncio.Future[Any] | None = None
        try:
            if abort is None:
                await waiter
            else:
                aborted = asyncio.ensure_future(abort.wait())
                pending: set[asyncio.Future[Any]] = {waiter, aborted}
                await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            if _admitted(waiter):
                self.leave()  # let in at the moment we were cancelled: give the slot back
            else:
                self._withdraw(waiter)
            raise
        finally:
            if aborted is not None:
                aborted.cancel()
        if _admitted(waiter):
            return True
        self._withdraw(waiter)  # aborted while waiting
        return False

    def _withdraw(self, waiter: asyncio.Future[None]) -> None:
        """A waiter leaves the queue without a slot (once per waiter not admitted)."""
        waiter.cancel()
        self._queued -= 1

    def leave(self) -> None:
        """Gives a slot back and lets the next waiter in."""
        self.active -= 1
        self._let_in()

    def observe(self, lag: float, now: float) -> None:
        """One overload sample (seconds) at loop time ``now``: sets the limit, lets waiters in."""
        self.lag = lag
        self._recent.append(lag)
        if not self.adaptive:
            return
        cap = math.inf if self.max_active is None else float(self.max_active)
        overload = _median_of_last(self._recent, CUT_SAMPLES)
        if overload > self.lag_target:
            if now - self._last_cut >= 5 * self.interval:
                self._last_cut = now
                cut = max(float(self.min_active), self.limit * 0.75)
                if cut < self.limit:
                    logger.debug("overloaded (%.0f ms): admission limit %d", overload * 1e3, cut)
                self.limit = cut
        elif (
            max(self._recent) < self.lag_target and self.waiting and self.active >= int(self.limit)
        ):
            self.limit = min(cap, self.limit + max(1.0, self.limit / 32))
        self._let_in()

    def _slots(self) -> float:
        return max(float(self.min_active), self.limit)

    def _let_in(self) -> None:
        while self._waiters and self.active < self._slots():
            waiter = self._waiters.popleft()
            if waiter.done():
                continue  # cancelled or aborted meanwhile
            self.active += 1
            self._queued -= 1
            waiter.set_result(None)

    def _start_sampler(self) -> None:
        if not self.adaptive or self.active + self.waiting < self.min_active:
            return
        if self._sampler is None or self._sampler.done():
            # Started by a drive: in a context of its own, not that drive's.
            self._sampler = asyncio.get_running_loop().create_task(
                self._sample(), name="durable-adk-admission", context=contextvars.Context()
            )

    async def _sample(self) -> None:
        """Samples the loop's lag while enough drives run to matter."""
        loop = asyncio.get_running_loop()
        while self.active + self.waiting >= self.min_active:
            started = loop.time()
            await asyncio.sleep(self.interval)
            now = loop.time()
            lag = max(0.0, now - started - self.interval)
            waited = self.pressure() if self.pressure is not None else 0.0
            self.observe(max(lag, waited), now)

    async def aclose(self) -> None:
        """Stops the sampler (waiters stay; a closed runner lets in no one new)."""
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler


CUT_SAMPLES = 5
"""Samples whose median decides a cut: overload in most of the last five, not one."""


def _median_of_last(samples: collections.deque[float], n: int) -> float:
    """The median of the last ``n`` samples (of all when fewer; the lower of two middles)."""
    last = sorted(list(samples)[-n:])
    return last[(len(last) - 1) // 2]


def _admitted(waiter: asyncio.Future[None]) -> bool:
    """Whether :meth:`Admission._let_in` gave ``waiter`` a slot."""
    return waiter.done() and not waiter.cancelled()


__all__ = ["Admission"]
