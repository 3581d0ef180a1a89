"""Run fences: how code inside a drive knows whether its run's lease is still trusted.

What it guarantees (framework-agnostic: no ADK import here):

* While :class:`~durable_adk.adk.runner.DurableRunner` drives a run, the
  drive's :class:`RunFence` is the current fence of every task the drive
  starts (ADK's agent and tool tasks inherit it, sync tools in ADK's thread
  pool too): :func:`current_fence` returns it, and None outside a drive.
* A fence is trusted only while its holder can still prove the lease: until
  the local monotonic deadline *last successful renewal sent + lease -
  margin* (see docs/runs.md, "Lease loss stops the work"). Past the deadline
  it is not trusted until the heartbeat has either renewed (the row is still
  ours at our epoch: nobody took over, trust comes back) or lost the lease.
  Lost means the run was found taken over or finished, the store could not
  confirm the lease before the deadline, or the drive ended; a lost fence
  never becomes trusted again.
* :meth:`RunFence.confirm` (async) returns only while the fence is trusted,
  waiting out an undecided moment, and raises
  :class:`~durable_adk.errors.Fenced` once it is lost: code about to act on
  the outside world awaits it right before acting, so a worker that lost its
  run acts no more. :meth:`RunFence.check` is the same test without waiting
  (undecided counts as not trusted).

* A fence can also be asked to stop (:meth:`RunFence.stop`, an operator's
  cancel seen at a heartbeat): the lease is still held, but :meth:`confirm`
  and :meth:`check` raise :class:`~durable_adk.errors.RunCancelled`, so
  no new outside act starts. Work already under way inside
  :meth:`RunFence.busy` (a journaled act and the recording of its result, a
  saga's compensation) is let finish: the runner waits for
  :meth:`RunFence.idle` before it aborts the drive.

The fence is advisory for code that calls out; writes to the store are fenced
by the run's epoch in the database whatever this object says.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar

from durable_adk import errors

_current: ContextVar[RunFence | None] = ContextVar("durable_adk_run_fence", default=None)


class RunFence:
    """The local view of one drive's lease: trusted, or lost for good.

    Attributes:
        run_id: The run being driven.
        epoch: The fencing epoch the drive holds.
    """

    def __init__(
        self, run_id: str, epoch: int, *, trusted_until: float, invocation_id: str | None = None
    ) -> None:
        """Creates a trusted fence.

        Args:
            run_id: The run.
            epoch: Its fencing epoch.
            trusted_until: The local deadline, on ``time.monotonic()``.
            invocation_id: The ADK invocation the run drives (for writes that
                record it, such as artifacts).
        """
        self.run_id = run_id
        self.epoch = epoch
        self.invocation_id = invocation_id
        self._trusted_until = trusted_until
        self._lost: str | None = None
        self._lost_event = asyncio.Event()
        self._changed = asyncio.Event()
        self._stopping: str | None = None
        self._busy = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def trusted_until(self) -> float:
        """The local deadline (``time.monotonic()``) after which the lease is not trusted."""
        return self._trusted_until

    @property
    def lost(self) -> str | None:
        """Why the lease was lost, or None while it has not been."""
        return self._lost

    @property
    def stopping(self) -> str | None:
        """Why the drive was asked to stop (an operator's cancel), or None."""
        return self._stopping

    def stop(self, reason: str) -> None:
        """Asks the drive to stop acting (the runner's call on a cancel); keeps the first reason."""
        if self._stopping is None:
            self._stopping = reason
            self._notify()

    def check_not_stopping(self) -> None:
        """Raises if the drive was asked to stop.

        Raises:
            durable_adk.errors.RunCancelled: An operator cancelled the run.
        """
        if self._stopping is not None:
            raise errors.RunCancelled(
                f"run {self.run_id} (epoch {self.epoch}): {self._stopping}; it acts no more"
            )

    @contextlib.asynccontextmanager
    async def busy(self) -> AsyncIterator[None]:
        """Marks work a cancel must let finish (an act and the recording of its result)."""
        self._busy += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._busy -= 1
            if self._busy == 0:
                self._idle.set()

    async def idle(self) -> None:
        """Waits until no :meth:`busy` section is open."""
        await self._idle.wait()

    def trusted(self) -> bool:
        """Whether the drive may still act for the run (not lost, deadline not passed)."""
        return self._lost is None and time.monotonic() < self._trusted_until

    def check(self) -> None:
        """Raises unless the fence is trusted; call right before acting on the outside world.

        Raises:
            durable_adk.errors.Fenced: The lease was lost or could not be
                proven in time.
            durable_adk.errors.RunCancelled: The run was cancelled.
        """
        self.check_not_lost()
        self.check_not_stopping()
        if time.monotonic() >= self._trusted_until:
            raise errors.Fenced(
                f"run {self.run_id} (epoch {self.epoch}): the lease was not renewed in time"
            )

    async def confirm(self) -> None:
        """Returns while the fence is trusted; raises once it is lost; waits while undecided.

        Undecided is the short moment past the local deadline before the
        heartbeat's next renewal answers (the event loop was blocked, say):
        a renewal at our epoch brings trust back, anything else loses it.

        Raises:
            durable_adk.errors.Fenced: The lease was lost (or the drive ended).
            durable_adk.errors.RunCancelled: The run was cancelled.
        """
        while True:
            self.check_not_lost()
            self.check_not_stopping()
            if time.monotonic() < self._trusted_until:
                return
            await self._changed.wait()

    def check_not_lost(self) -> None:
        """Raises if the lease was lost; an undecided fence passes.

        Raises:
            durable_adk.errors.Fenced: The lease was lost (or the drive ended).
        """
        if self._lost is not None:
            raise errors.Fenced(
                f"run {self.run_id} (epoch {self.epoch}) lost its lease: {self._lost}"
            )

    async def wait_lost(self) -> str:
        """Waits until the lease is lost; returns why."""
        await self._lost_event.wait()
        assert self._lost is not None
        return self._lost

    def renewed(self, trusted_until: float) -> None:
        """Moves the deadline after a successful renewal (the heartbeat's call); no-op once lost."""
        if self._lost is None:
            self._trusted_until = max(self._trusted_until, trusted_until)
            self._notify()

    def lose(self, reason: str) -> None:
        """Marks the lease lost for good (the heartbeat's call); the first reason is kept."""
        if self._lost is None:
            self._lost = reason
            self._trusted_until = float("-inf")
            self._lost_event.set()
            self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def __repr__(self) -> str:
        state = f"lost: {self._lost}" if self._lost else "stopping" if self._stopping else "trusted"
        return f"RunFence({self.run_id!r}, epoch={self.epoch}, {state})"


def check_lease() -> None:
    """Raises unless the durable run this code belongs to still trusts its lease.

    Call it right before an outside call that no journal guards: in a tool,
    after any slow preparation, or in the HTTP client a tool uses (it works
    from ADK's worker threads too: they inherit the fence). The check is
    local and costs nothing: the lease's deadline on ``time.monotonic()``, so
    a process that was frozen past its lease refuses at once on waking,
    whatever ran first. Outside a durable run it does nothing.

    Raises:
        durable_adk.errors.Fenced: The run's lease was lost or has run out.
        durable_adk.errors.RunCancelled: An operator cancelled the run.
    """
    fence = _current.get()
    if fence is not None:
        fence.check()


def current_fence() -> RunFence | None:
    """The fence of the drive this code runs in, or None outside a durable drive."""
    return _current.get()


@contextlib.contextmanager
def using_fence(fence: RunFence | None) -> Iterator[RunFence | None]:
    """Makes ``fence`` the current fence inside the block (the runner's, and tests')."""
    token = _current.set(fence)
    try:
        yield fence
    finally:
        _current.reset(token)
