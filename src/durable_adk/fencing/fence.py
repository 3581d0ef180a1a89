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

What no worker-side check can stop is a request sent while the lease was
trusted that the network then holds until after another worker took the run
over. For that the fence travels with the request: :func:`fence_headers`
(:meth:`RunFence.headers`) gives the headers of a :class:`FenceToken` (run
id, epoch, and a wall-clock *valid until* at or before the local deadline, so
before the database lease runs out and before any takeover), and the outside
service refuses a request whose valid-until has passed or whose epoch is lower
than the highest it has seen for the run (:meth:`FenceToken.refusal`), before
acting. See docs/journal.md, "Fencing at the outside service".
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from email.message import Message
from typing import Final

from durable_adk import errors

_current: ContextVar[RunFence | None] = ContextVar("durable_adk_run_fence", default=None)

FENCE_RUN_HEADER: Final = "Durable-Fence-Run"
"""The run the request is made for (its run id)."""
FENCE_EPOCH_HEADER: Final = "Durable-Fence-Epoch"
"""The fencing epoch the sender holds for that run (a non-negative integer)."""
FENCE_VALID_UNTIL_HEADER: Final = "Durable-Fence-Valid-Until"
"""Unix seconds (wall clock, decimal, milliseconds) after which the request must not act."""
FENCE_HEADERS: Final = (FENCE_RUN_HEADER, FENCE_EPOCH_HEADER, FENCE_VALID_UNTIL_HEADER)

FENCE_REFUSED_STATUS: Final = 412
"""What a fencing service answers a refused request with (412 Precondition Failed)."""
FENCE_EXPIRED: Final = "fence_expired"
"""Refusal reason: the request's valid-until had passed when the service got to it."""
FENCE_SUPERSEDED: Final = "fence_superseded"
"""Refusal reason: the service has seen a higher epoch of the same run."""


@dataclass(frozen=True, slots=True)
class FenceToken:
    """The fence a request carries to an outside service: who sends it, and until when.

    Attributes:
        run_id: The durable run the request belongs to.
        epoch: The fencing epoch its sender held when it sent the request.
        valid_until: Unix seconds (the sender's wall clock) after which the
            request must not act: no later than the sender's local lease
            deadline, which is before the database lease runs out.
    """

    run_id: str
    epoch: int
    valid_until: float

    def headers(self) -> dict[str, str]:
        """The request headers (:data:`FENCE_HEADERS`) that carry this token."""
        return {
            FENCE_RUN_HEADER: self.run_id,
            FENCE_EPOCH_HEADER: str(self.epoch),
            # rounded down to the millisecond: never later than the deadline
            FENCE_VALID_UNTIL_HEADER: f"{math.floor(self.valid_until * 1000) / 1000:.3f}",
        }

    @classmethod
    def from_headers(cls, headers: Mapping[str, str] | Message) -> FenceToken | None:
        """Reads the token of a received request; None when it carries none of the headers.

        ``headers`` is looked up case-insensitively when it is an
        ``email.message.Message`` (``http.server``'s), else by the exact names
        of :data:`FENCE_HEADERS`, or their lower-case forms.

        Raises:
            durable_adk.errors.InvalidArgument: Some of the headers are
                missing, repeated or malformed: refuse the request as bad
                input, without acting.
        """
        values: dict[str, str] = {}
        for name in FENCE_HEADERS:
            if isinstance(headers, Message):
                found = [str(v) for v in headers.get_all(name) or []]
            else:
                value = headers.get(name, headers.get(name.lower()))
                found = [] if value is None else [str(value)]
            if len(found) > 1:
                raise errors.InvalidArgument(f"the {name} header appears more than once")
            if found:
                values[name] = found[0].strip()
        if not values:
            return None
        missing = [name for name in FENCE_HEADERS if name not in values]
        if missing:
            raise errors.InvalidArgument(
                f"a fenced request needs all of {', '.join(FENCE_HEADERS)}; missing {missing}"
            )
        run_id, epoch, until = (values[name] for name in FENCE_HEADERS)
        if not run_id or len(run_id) > 256:
            raise errors.InvalidArgument(f"{FENCE_RUN_HEADER} must be 1..256 characters")
        if not (epoch.isascii() and epoch.isdigit()) or len(epoch) > 18:
            raise errors.InvalidArgument(
                f"{FENCE_EPOCH_HEADER} must be a non-negative integer, got {epoch!r:.40}"
            )
        try:
            valid_until = float(until)
        except ValueError:
            valid_until = math.nan
        if not math.isfinite(valid_until) or valid_until < 0:
            raise errors.InvalidArgument(
                f"{FENCE_VALID_UNTIL_HEADER} must be Unix seconds, got {until!r:.40}"
            )
        return cls(run_id, int(epoch), valid_until)

    def refusal(self, *, now: float, highest_epoch: int | None) -> str | None:
        """Why a service must refuse this request, or None if it may act.

        Args:
            now: The service's wall clock (Unix seconds) at the moment it would act.
            highest_epoch: The highest epoch the service has seen for this
                run (None if none).

        Returns:
            :data:`FENCE_SUPERSEDED` (a later epoch of the run has been seen),
            :data:`FENCE_EXPIRED` (``now`` is past the valid-until), or None.
        """
        if highest_epoch is not None and self.epoch < highest_epoch:
            return FENCE_SUPERSEDED
        if now >= self.valid_until:
            return FENCE_EXPIRED
        return None


class RunFence:
    """The local view of one drive's lease: trusted, or lost for good.

    Attributes:
        run_id: The run being driven.
        epoch: The fencing epoch the drive holds.
    """

    def __init__(
        self,
        run_id: str,
        epoch: int,
        *,
        trusted_until: float,
        invocation_id: str | None = None,
        store: object | None = None,
    ) -> None:
        """Creates a trusted fence.

        Args:
            run_id: The run.
            epoch: Its fencing epoch.
            trusted_until: The local deadline, on ``time.monotonic()``.
            invocation_id: The ADK invocation the run drives (for writes that
                record it, such as artifacts).
            store: The durable store the run's writes go to: code the drive
                runs on another session service (an ADK ``AgentTool``'s child
                agent, on a throw-away in-memory session) finds the run's
                journal through it.
        """
        self.run_id = run_id
        self.epoch = epoch
        self.invocation_id = invocation_id
        self.store = store
        self._trusted_until = trusted_until
        self._lost: str | None = None
        self._lost_event = asyncio.Event()
        self._guard = threading.Lock()  # extend() may come from the lease watchdog's thread
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
        self._check_in_time()

    def _check_in_time(self) -> None:
        """Raises once the local deadline has passed without a renewal."""
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

    def token(self) -> FenceToken:
        """The fence to send with an outside request; raises unless the fence is trusted.

        Its valid-until is the local deadline on the wall clock,
        ``time.time() + (trusted_until - time.monotonic())``, read now: a
        later renewal does not extend a token already sent.

        An act already under way when an operator cancelled the run (inside
        a :meth:`busy` section) still gets its token: a cancel lets such acts
        finish; any other request of a cancelled run is refused.

        Raises:
            durable_adk.errors.Fenced: As :meth:`check`.
            durable_adk.errors.RunCancelled: The run was cancelled and no act
                is under way.
        """
        self.check_not_lost()
        if not self._busy:
            self.check_not_stopping()
        self._check_in_time()
        return FenceToken(
            self.run_id, self.epoch, time.time() + (self._trusted_until - time.monotonic())
        )

    def headers(self) -> dict[str, str]:
        """The headers of :meth:`token`: put them on the outside request about to be sent.

        Raises:
            durable_adk.errors.Fenced: As :meth:`check`.
        """
        return self.token().headers()

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
        self.extend(trusted_until)
        if self._lost is None:
            self._notify()

    def extend(self, trusted_until: float) -> None:
        """Moves the deadline only, from any thread (the lease watchdog's renewal while the
        event loop is blocked); no-op once lost. The loop is told later, by :meth:`renewed`."""
        with self._guard:
            if self._lost is None:
                self._trusted_until = max(self._trusted_until, trusted_until)

    def lose(self, reason: str) -> None:
        """Marks the lease lost for good (the heartbeat's call); the first reason is kept."""
        with self._guard:
            if self._lost is not None:
                return
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


def fence_headers() -> dict[str, str]:
    """The fence headers for an outside request made now, from the current durable run.

    Inside a durable drive: the current fence's :meth:`RunFence.headers`
    (``Durable-Fence-Run``, ``Durable-Fence-Epoch``,
    ``Durable-Fence-Valid-Until``), after the same check as
    :func:`check_lease`. Outside one: ``{}``. Call it right before sending
    (in the tool, or in the HTTP client it uses; ADK's worker threads inherit
    the fence) and add the result to the request's headers.

    Raises:
        durable_adk.errors.Fenced: The run's lease was lost or has run out.
    """
    fence = _current.get()
    return {} if fence is None else fence.headers()


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
