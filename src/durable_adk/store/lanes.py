"""Who gets a pooled connection next, and when waiting for one is a fault.

A :class:`Lane` hands out the slots of one connection pool (as many as the
pool has connections) in front of the pool itself. What it guarantees:

* **Work in progress first.** A waiter of the *intake* class (a unit that
  takes new work in: a run submitted) is served only when no other waiter is
  left. A burst of thousands of submissions then queues in the process, while
  the runs already driven keep getting connections for their events and ends.
  Within a class, waiters are served in arrival order.
* **A cap per class.** ``caps`` bounds how many slots a class may hold at once
  (PostgreSQL's lease pool keeps one connection for heartbeats: claims may
  hold all but one).
* **A wait fails when the pool stalls, not when it is busy.** A waiter gives
  up (:class:`LaneStalled`) only if no slot was given back during the last
  ``stall_after`` seconds of its wait. A long queue behind a pool that keeps
  turning over is load: the caller waits, which is the back-pressure. A pool
  whose every connection is held by a statement that does not end is a fault,
  noticed within ``stall_after``.

Nothing here knows about databases; a slot is a count, and the caller takes
the actual connection from the pool after :meth:`Lane.take` (there is always
one free then, or one the pool may open).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Mapping

URGENT = "urgent"
"""The class of every unit that is not intake."""

INTAKE = "intake"
"""The class of units that take new work in; served when nothing else waits."""

CLAIM = "claim"
"""The class of lease-pool units that take a lease (not the heartbeat's renewals)."""

_ORDER = (URGENT, CLAIM, INTAKE)


class LaneStalled(Exception):
    """No slot of the lane was given back within the timeout of a wait."""


class Lane:
    """The slots of one pool, handed out by class, then in arrival order."""

    def __init__(self, size: int, *, caps: Mapping[str, int] | None = None) -> None:
        """Makes a lane of ``size`` slots.

        Args:
            size: The pool's connections (>= 1).
            caps: Most slots a class may hold at once (default: ``size``).

        Raises:
            ValueError: ``size`` or a cap is below 1, or a class is unknown.
        """
        if size < 1:
            raise ValueError("a lane needs at least one slot")
        self.size = size
        self.caps = {kind: size for kind in _ORDER}
        for kind, cap in (caps or {}).items():
            if kind not in self.caps or cap < 1:
                raise ValueError(f"bad cap {kind}={cap}")
            self.caps[kind] = min(cap, size)
        self.free = size
        self.held = dict.fromkeys(_ORDER, 0)
        self.waiting = {kind: deque[asyncio.Future[None]]() for kind in _ORDER}
        self.queued = 0  # the turns in ``waiting``, all classes (0: nothing to look at)
        self.last_given_back = time.monotonic()

    def _may_take(self, kind: str) -> bool:
        return self.free > 0 and self.held[kind] < self.caps[kind]

    def idle(self, kind: str = URGENT) -> bool:
        """Whether a :meth:`take` of class ``kind`` now would get a slot without waiting."""
        if not self.queued:
            return self._may_take(kind)
        ahead = any(
            self.waiting[k] and self.held[k] < self.caps[k]
            for k in _ORDER[: _ORDER.index(kind) + 1]
        )
        return not ahead and self._may_take(kind)

    def try_take(self, kind: str = URGENT) -> bool:
        """Takes a slot of class ``kind`` if one is free now (no coroutine: the common case)."""
        if self.idle(kind):
            self.free -= 1
            self.held[kind] += 1
            return True
        return False

    async def take(self, stall_after: float, kind: str = URGENT) -> float:
        """Waits for a slot of class ``kind``; returns the seconds waited.

        Raises:
            LaneStalled: No slot was given back during the last
                ``stall_after`` seconds of the wait (nothing is held then).
        """
        if self.try_take(kind):
            return 0.0
        asked = time.monotonic()
        turn = asyncio.get_running_loop().create_future()
        self.waiting[kind].append(turn)
        self.queued += 1
        try:
            while not turn.done():
                stalled_at = max(asked, self.last_given_back) + stall_after
                left = stalled_at - time.monotonic()
                if left <= 0:
                    raise LaneStalled(f"no slot was given back within {stall_after:g} s")
                await asyncio.wait((turn,), timeout=left)
        except BaseException:
            if turn.done() and not turn.cancelled():
                self.give_back(kind)  # handed to us as we left: pass it on
            else:
                turn.cancel()
                self.waiting[kind].remove(turn)
                self.queued -= 1
            raise
        return time.monotonic() - asked

    def give_back(self, kind: str = URGENT) -> None:
        """Returns a slot of class ``kind``; the next waiter that may take it gets it."""
        self.last_given_back = time.monotonic()
        self.held[kind] -= 1
        self.free += 1
        if not self.queued:
            return
        for next_kind in _ORDER:
            queue = self.waiting[next_kind]
            while queue and self._may_take(next_kind):
                turn = queue.popleft()
                self.queued -= 1
                if turn.done():  # cancelled, being removed by its waiter
                    continue
                self.free -= 1
                self.held[next_kind] += 1
                turn.set_result(None)
                return
