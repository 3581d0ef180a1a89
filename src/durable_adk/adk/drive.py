"""A drive's machinery: its task and reader hand-over, its heartbeat, the retry policy.

What it guarantees (used by :class:`~durable_adk.adk.runner.DurableRunner`):

* :class:`Drive` hands events from the drive's own task (the pump) to its
  reader lock-step: the pump waits until the reader asks for the next event,
  so ADK never runs ahead of the reader; once the reader is gone
  (:meth:`Drive.detach`) the pump runs on without waiting.
* :func:`heartbeat` renews a lease every third of it, each renewal bounded in
  time, retried after a failure until the fence's local deadline (last
  renewal sent + lease * (1 - :data:`LEASE_MARGIN_FRACTION`)); it calls
  ``on_lost`` exactly once when a renewal finds the run no longer ours or the
  deadline passes without a renewal answering, and then returns.
* :class:`RetryPolicy` says which errors of a drive are transient.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from google.adk.agents.base_agent import BaseAgent
from google.adk.agents.callback_context import CallbackContext
from google.adk.errors import StaleSessionError
from google.adk.events.event import Event
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import errors as genai_errors
from google.genai import types
from typing_extensions import override

from durable_adk import errors
from durable_adk.adk.barrier import EventBatch
from durable_adk.fence import RunFence
from durable_adk.ledger import Run

logger = logging.getLogger("durable_adk.runner")


def model_error_is_retryable(exc: BaseException) -> bool:
    """The default :attr:`RetryPolicy.retryable`: a model API error 429 (rate limit) or 5xx."""
    if not isinstance(exc, genai_errors.APIError):
        return False
    code = exc.code if isinstance(exc.code, int) else 0
    return code == 429 or 500 <= code <= 599


TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    errors.DatabaseBusy,
    errors.StoreUnavailable,
    TimeoutError,
    StaleSessionError,
)
"""The errors :class:`RetryPolicy` treats as transient by default."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Which errors of a drive are transient: the run is handed back, not failed.

    An error is transient when it, or any error in its cause/context chain
    (ADK wraps agent errors), is an instance of ``transient`` or satisfies
    ``retryable``. A transient error hands the run back to recovery
    (:meth:`durable_adk.ledger.RunLedger.release`): it stays RUNNING, its
    lease expires now and the sweeper takes it after
    ``backoff * 2 ** (attempts - 1)`` seconds, counting an attempt; past the
    runner's ``max_attempts`` the sweeper parks it with a dead letter. Every
    other error ends the run FAILED for good (an error the app raised
    deterministically would fail again). See docs/runs.md, "Transient and
    terminal errors".

    Attributes:
        transient: Error types that are transient wherever they appear in the
            chain. Default: :data:`TRANSIENT_ERRORS` (the store busy or
            unreachable, a timeout, a session appended to by another writer).
            A bare ``StoreError`` (a constraint, a schema mismatch) is not.
        retryable: A predicate for other errors, meant for model errors.
            Default: :func:`model_error_is_retryable` (google.genai API errors
            with code 429 or 5xx).
    """

    transient: tuple[type[BaseException], ...] = field(default=TRANSIENT_ERRORS)
    retryable: Callable[[BaseException], bool] = field(default=model_error_is_retryable)

    def is_transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` (or an error behind it) is transient under this policy."""
        return any(isinstance(e, self.transient) or self.retryable(e) for e in causes(exc))


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the errors behind it (cause, else context), each once.

    ADK's node runner wraps agent errors, so what a drive meets is often a
    wrapper around the error that decides what to do.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        yield current
        seen.add(id(current))
        current = current.__cause__ or current.__context__


LEASE_MARGIN_FRACTION = 1 / 6
"""The share of the lease a drive gives up to be safe: its local deadline is
``last renewal sent + lease * (1 - LEASE_MARGIN_FRACTION)``."""


class End:
    """The pump's last item: how the drive ended (None: it finished normally)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class Drive:
    """One drive: its pump task, its fence and the lock-step hand-over to its reader."""

    def __init__(self, run: Run, fence: RunFence) -> None:
        self.run = run
        self.fence = fence
        # Barrier commits (docs/runs.md): the drive's buffered appends, how to
        # write them, the events held back until they are written, and whether
        # ADK may run ahead of the reader between barriers.
        self.batch: EventBatch | None = None
        self.flush: Callable[[EventBatch], Awaitable[None]] | None = None
        self.look_ahead = False
        self.held: list[Event] = []
        self._barrier_lock = asyncio.Lock()
        self.task: asyncio.Task[Any] | None = None
        self.detached = False
        self.stop_reason: str | None = None  # "fenced" or "shutdown", set before cancelling
        self.run_config: Any = None  # the caller's RunConfig for this drive (None: the runner's)
        self.state_delta: dict[str, Any] | None = None  # applied with the message, as in ADK
        self.ended = False  # the pump has handed over how the drive ended
        self._wanted = asyncio.Event()
        self._items: asyncio.Queue[Event | End] = asyncio.Queue()

    async def wanted(self) -> None:
        """Waits until the reader asks for the next event (at once once detached)."""
        await self._wanted.wait()
        if not self.detached:
            self._wanted.clear()

    async def barrier(self) -> None:
        """Writes the buffered events, then hands the held ones over, lock-step.

        Returns when the reader has taken every held event and asked for the
        next one (at once once detached): only then may ADK go on.
        """
        async with self._barrier_lock:
            if self.batch is not None and self.flush is not None:
                await self.flush(self.batch)
            if not self.held:
                return
            while self.held:
                await self.wanted()
                self.hand(self.held.pop(0))
            await self._wanted.wait()  # left set: the reader has asked for the next event

    def hand(self, event: Event) -> None:
        if not self.detached:
            self._items.put_nowait(event)

    def end(self, error: BaseException | None) -> None:
        self.ended = True
        self._items.put_nowait(End(error))

    async def next_item(self) -> Event | End:
        self._wanted.set()
        return await self._items.get()

    def detach(self) -> None:
        self.detached = True
        self._wanted.set()
        while not self._items.empty():
            self._items.get_nowait()

    def stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        if self.task is not None and not self.task.done():
            self.task.cancel()


_current_drive: ContextVar[Drive | None] = ContextVar("durable_adk_drive", default=None)


@contextlib.contextmanager
def using_drive(drive: Drive) -> Iterator[Drive]:
    """Makes ``drive`` the current drive inside the block (its pump, ADK's tasks under it)."""
    token = _current_drive.set(drive)
    try:
        yield drive
    finally:
        _current_drive.reset(token)


async def barrier() -> None:
    """A barrier of the current drive (see :meth:`Drive.barrier`); nothing outside a drive."""
    drive = _current_drive.get()
    if drive is not None and drive.batch is not None:
        await drive.barrier()


class BarrierPlugin(BasePlugin):
    """ADK's callbacks where a drive's buffered events must be durable: a barrier each.

    Before an agent starts or ends, before a model call and before a tool
    runs. Plugin callbacks run before the agent's own, so an agent's callback
    that acts sees its events durable too. Returns None: ADK goes on as usual.
    """

    def __init__(self) -> None:
        super().__init__(name="durable_adk_barriers")

    @override
    async def before_agent_callback(
        self, *, agent: BaseAgent, callback_context: CallbackContext
    ) -> types.Content | None:
        await barrier()
        return None

    @override
    async def after_agent_callback(
        self, *, agent: BaseAgent, callback_context: CallbackContext
    ) -> types.Content | None:
        await barrier()
        return None

    @override
    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        await barrier()
        return None

    @override
    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        await barrier()
        return None


def trust_from(sent: float | None, lease_seconds: float) -> float:
    """The local deadline of a lease renewed or claimed at monotonic ``sent`` (None: now)."""
    at = time.monotonic() if sent is None else sent
    return at + lease_seconds * (1 - LEASE_MARGIN_FRACTION)


async def heartbeat(
    drive: Drive,
    renew: Callable[[], Awaitable[bool]],
    *,
    lease_seconds: float,
    on_lost: Callable[[Drive, str], None],
) -> None:
    """Renews the drive's lease every third of it; cancels the drive when it is lost.

    A renewal that fails (a store error, or no answer within 80% of the
    renewal interval) is retried with a short back-off until the fence's
    local deadline (the last renewal *sent* + lease - margin: the database
    extended the lease no earlier than that). A renewal that finds the row
    no longer ours, or the deadline passing, loses the fence for good and
    cancels the pump, so ADK and the tool in flight stop.
    """
    fence = drive.fence
    interval = lease_seconds / 3
    next_renewal = time.monotonic() + interval
    # The deadline is enforced by a timer of its own, not only when this loop
    # gets round to it: a process frozen (SIGSTOP, a partition, a long pause)
    # past the deadline wakes with the tool's timers and this one due
    # together, and the drive must be cancelled before the tool's next step,
    # not after a renewal's round trip. loop.call_at runs on time.monotonic(),
    # the fence's clock.
    loop = asyncio.get_running_loop()

    def expire() -> None:
        if fence.lost is None and time.monotonic() >= fence.trusted_until:
            on_lost(drive, "the lease's local deadline passed before a renewal succeeded")

    guards: list[asyncio.TimerHandle] = []

    def rearm() -> None:
        for handle in guards:
            handle.cancel()
        guards[:] = [loop.call_at(fence.trusted_until, expire)]

    rearm()
    try:
        await _renewals(drive, renew, lease_seconds, interval, next_renewal, on_lost, rearm)
    finally:
        for handle in guards:
            handle.cancel()


async def _renewals(
    drive: Drive,
    renew: Callable[[], Awaitable[bool]],
    lease_seconds: float,
    interval: float,
    next_renewal: float,
    on_lost: Callable[[Drive, str], None],
    rearm: Callable[[], None],
) -> None:
    """The renewal loop of :func:`heartbeat`; ``rearm`` moves the deadline's timer."""
    run, fence = drive.run, drive.fence
    while True:
        await asyncio.sleep(max(0.0, next_renewal - time.monotonic()))
        retry_in = min(interval / 4, 0.5)
        # Woken up past the deadline without having tried (the loop was blocked,
        # not the store): keep asking for one more bounded window; a renewal at
        # our epoch proves nobody took over. The fence is not trusted meanwhile.
        late_until = (
            time.monotonic() + interval * 0.8 if time.monotonic() >= fence.trusted_until else None
        )
        while True:
            sent = time.monotonic()
            until = max(fence.trusted_until, late_until or 0.0)
            if sent >= until:
                on_lost(drive, "no renewal succeeded before the lease's local deadline")
                return
            try:
                renewed = await asyncio.wait_for(renew(), timeout=min(interval * 0.8, until - sent))
            except Exception as exc:  # the store's, or the timeout: retried until the deadline
                until = max(fence.trusted_until, late_until or 0.0)
                if time.monotonic() >= until:
                    on_lost(
                        drive,
                        f"no renewal succeeded before the lease's local deadline ({exc!r})",
                    )
                    return
                logger.warning(
                    "run %s (epoch %d): lease renewal failed (%s: %s); retrying for %.1fs more",
                    run.run_id,
                    run.epoch,
                    type(exc).__name__,
                    exc,
                    max(0.0, until - time.monotonic()),
                )
                await asyncio.sleep(max(0.0, min(retry_in, until - time.monotonic())))
                retry_in = min(retry_in * 2, interval)
                continue
            if not renewed:
                on_lost(drive, "the run was taken over or has ended")
                return
            fence.renewed(trust_from(sent, lease_seconds))
            rearm()
            next_renewal = sent + interval
            break
