"""A drive's machinery: its task and reader hand-over, its heartbeat, its barriers.

What it guarantees (used by :class:`~durable_adk.adk.runner.DurableRunner`):

* :class:`Drive` hands events from the drive's own task (the pump) to its
  reader lock-step: the pump waits until the reader asks for the next event,
  so ADK never runs ahead of the reader; once the reader is gone
  (:meth:`Drive.detach`) the pump runs on without waiting.
* A drive's lease is kept by the runner's
  :class:`~durable_adk.fencing.leases.LeaseKeeper` (one batched heartbeat per
  worker); the drive remembers the last renewal's result
  (:attr:`Drive.renewal`, with ``cancel_requested_by``).
  A renewal that says an operator asked the run to stop makes the runner
  cancel the drive (once): it sets :attr:`Drive.abort` when the acts in
  flight have ended, and the keeper goes on renewing, since the holder needs
  its lease to end the run CANCELLED.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from google.adk.agents.base_agent import BaseAgent
from google.adk.agents.callback_context import CallbackContext
from google.adk.events.event import Event
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from typing_extensions import override

from durable_adk.adk.commits.barrier import EventBatch
from durable_adk.adk.shapes.marks import writes_with_its_call
from durable_adk.fencing.fence import RunFence
from durable_adk.fencing.leases import LEASE_MARGIN_FRACTION as LEASE_MARGIN_FRACTION
from durable_adk.fencing.leases import trust_from as trust_from
from durable_adk.store.outage import Patience, quiet_logger
from durable_adk.tables.ledger import RenewResult, Run

logger = logging.getLogger("durable_adk.runner")

# ADK's plugin manager logs a barrier's store error with a traceback before it
# raises it: for a store outage (said once by the store) that is a DEBUG line.
# So do its node runner and its Runner (a Workflow or agent root whose drive met it).
for _name in ("plugins.plugin_manager", "workflow._node_runner", "runners"):
    quiet_logger(f"google_adk.google.adk.{_name}")


def only_asks_for_confirmation(tool: BaseTool, tool_context: ToolContext) -> bool:
    """Whether this call of ``tool`` can only ask for (or be refused) its confirmation.

    ADK's FunctionTool built with ``require_confirmation=True`` answers a call
    that carries no confirmation with a request for one, and a rejected one
    with an error, without running its function. Such a call acts on nothing:
    no barrier is needed before it, and its call is written with the pause.
    Without this, a crash between that barrier and the pause would leave a
    stored call with no answer, which recovery must treat as a tool that may
    have acted (parked, for a plain tool) when it never ran. A predicate
    (``require_confirmation=callable``) or a subclass's own ``run_async`` is
    app code whose outcome is not known here: those keep the barrier.
    """
    if not isinstance(tool, FunctionTool) or type(tool).run_async is not FunctionTool.run_async:
        return False
    if getattr(tool, "_require_confirmation", False) is not True:
        return False
    confirmation = tool_context.tool_confirmation
    return confirmation is None or not confirmation.confirmed


class End:
    """The pump's last item: the drive's outcome, or the error that stopped it unrecorded."""

    __slots__ = ("error", "outcome")

    def __init__(self, outcome: Any, error: BaseException | None = None) -> None:
        self.outcome = outcome
        self.error = error


class Drive:
    """One drive: its pump task, its fence and the lock-step hand-over to its reader."""

    def __init__(
        self,
        run: Run,
        fence: RunFence,
        transient: Callable[[BaseException], bool] | None = None,
    ) -> None:
        self.run = run
        self.fence = fence
        # Which errors hand the run back (its RetryPolicy's is_transient; none: no error).
        self.transient = transient or _never
        # Barrier commits (docs/runs.md): the drive's buffered appends, how to
        # write them, the events held back until they are written, and whether
        # ADK may run ahead of the reader between barriers.
        self.batch: EventBatch | None = None
        self.flush: Callable[..., Awaitable[Any]] | None = None
        self.look_ahead = False
        self.held: list[Event] = []
        self._barrier_lock = asyncio.Lock()
        self.task: asyncio.Task[Any] | None = None
        self.detached = False
        self.stop_reason: str | None = None  # "fenced" or "shutdown", set before cancelling
        self.run_config: Any = None  # the caller's RunConfig for this drive (None: the runner's)
        self.state_delta: dict[str, Any] | None = None  # applied with the message, as in ADK
        self.answer_first: tuple[str, ...] = ()  # lost calls to answer before ADK re-enters
        self.ended = False  # the pump has handed over how the drive ended
        self.renewal: RenewResult | None = None  # the last renewal's result (cancel_requested_by)
        self.abort = asyncio.Event()  # ADK's abort_signal for this drive (an operator's cancel)
        self.cancelled_by: str | None = None  # who cancelled it, once a heartbeat saw it
        self.lease_lost: str | None = None  # why the lease was lost, if it was
        self.holding: Any = None  # the keeper's holding of the lease while ADK drives
        # How long its statements may wait out a store outage: the lease's local
        # deadline, moved by each renewal, given up when the lease is lost.
        self.patience = Patience(run.run_id, fence.trusted_until)
        self.yield_user_message = False  # ADK yields the stored user message first
        self.stopper: asyncio.Task[None] | None = None  # aborts ADK once the acts in flight end
        self.on_abort: Callable[[], None] | None = None  # aborts an invocation ADK's Runner drives
        # The hand-over: the reader has asked for ``_asked`` events and been handed
        # ``_handed``; ``_wanted`` is set when it waits for one not handed yet.
        self._asked = 0
        self._handed = 0
        self._wanted = asyncio.Event()
        self._items: asyncio.Queue[Event | End] = asyncio.Queue()

    async def wanted(self) -> None:
        """Waits until the reader asks for an event not handed yet (at once once detached)."""
        while not self.detached and self._asked <= self._handed:
            self._wanted.clear()
            await self._wanted.wait()

    async def barrier(self, *, before_work: bool = False, last: bool = False) -> None:
        """Writes the buffered events, then hands the held ones over, lock-step.

        Returns when the reader has taken every held event and asked for the
        next one (at once once detached): only then may ADK go on.

        Args:
            before_work: A barrier before an agent, a model call or a tool
                (ADK's callbacks), not one before handing events over. It
                writes nothing while the batch holds only what the run's
                stored request makes again (:func:`echoes_request`: the
                user's message): that message is then written with the
                run's first decision (a function call, before its tool runs)
                or its end, one unit fewer per run. A crash before then
                leaves the run NOT_STARTED, and recovery drives it from its
                request, as it would after a crash before the message was
                written.
            last: The drive's last hand-over (its finish is written): nothing
                of ADK runs after it, so it returns once the events are
                handed, without waiting for the reader to ask for more (the
                drive's end follows them).
        """
        async with self._barrier_lock:
            # Only what is held now is in the batch the flush writes: an event a
            # parallel branch yields while the flush is out waits for the next
            # barrier, so nothing is handed over before it is stored.
            durable = len(self.held)
            if before_work and not durable and self._only_the_request():
                return
            if self.batch is not None and self.flush is not None:
                await self.flush(self.batch)
            await self._hand_over(durable, then_wait=not last)

    async def begin_with_events(self, journal: Mapping[str, Any]) -> Any:
        """A journaled tool's intent, written in one unit with the buffered events.

        The barrier before a journaled tool is left to its intent
        (:class:`BarrierPlugin`): the model's function call and the intent to
        act on it become durable together, one unit fewer per journaled call,
        and no crash leaves a call stored without its intent (nor the
        reverse). Then the held events are handed over, as at a barrier.

        Args:
            journal: The parameters of the journal's ``journal_begin`` unit.

        Returns:
            The journal's verdict row, or None when nothing is buffered (the
            caller begins alone).
        """
        return await self._write_with_events(journal=journal)

    async def start_job_with_events(self, job: Mapping[str, Any]) -> Any:
        """A long-running call's job, started in one unit with the buffered events.

        As :meth:`begin_with_events`, for the job table: the call is durable
        exactly when its job is.

        Args:
            job: The parameters of the job table's ``job_start`` unit.

        Returns:
            The job's row with the append's ``status`` (``'ok'``; a refusal
            raises), or None when nothing is buffered (the caller starts the
            job alone).
        """
        return await self._write_with_events(job=job)

    async def _write_with_events(self, **joined: Mapping[str, Any]) -> Any:
        async with self._barrier_lock:
            batch = self.batch
            if batch is None or self.flush is None or not batch.pending:
                return None
            durable = len(self.held)
            row = await self.flush(batch, **joined)
            await self._hand_over(durable)
            return row

    async def _hand_over(self, durable: int, *, then_wait: bool = True) -> None:
        """Hands the ``durable`` first held events over, lock-step (they are stored).

        Once the reader asks for the first, all of them are queued for it
        (each is durable: the reader takes one per ask, with no round trip
        to the pump between two); then, unless ``then_wait`` is False, it
        waits until the reader has taken them all and asked for the next.
        """
        if not durable:
            return
        await self.wanted()
        for _ in range(durable):
            self.hand(self.held.pop(0))
        if then_wait:
            await self.wanted()  # the reader has asked for the next event

    def _only_the_request(self) -> bool:
        batch = self.batch
        return batch is not None and all(
            echoes_request(p.event, self.run.invocation_id) for p in batch.pending
        )

    def hand(self, event: Event) -> None:
        if not self.detached:
            self._handed += 1
            self._items.put_nowait(event)

    def end(self, outcome: Any, error: BaseException | None = None) -> None:
        self.ended = True
        self._items.put_nowait(End(outcome, error))

    async def next_item(self) -> Event | End:
        self._asked += 1
        if self._asked > self._handed:
            self._wanted.set()  # the pump may hand it (it waits for no earlier one)
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


def echoes_request(event: Event, invocation_id: str | None) -> bool:
    """Whether ``event`` is one that driving the run from its stored request makes again.

    The user's message of the run's own invocation: text (or other data) from
    the user, no function call or response (an answer is not in the request
    as such) and no state or artifact change (a request does not keep them).
    """
    content = event.content
    actions = event.actions
    return (
        invocation_id is not None
        and event.invocation_id == invocation_id
        and event.author == "user"
        and content is not None
        and bool(content.parts)
        and not any(p.function_call or p.function_response for p in content.parts or ())
        and not actions.state_delta
        and not actions.artifact_delta
    )


def _never(exc: BaseException) -> bool:
    return False


_current_drive: ContextVar[Drive | None] = ContextVar("durable_adk_drive", default=None)


def hands_back(exc: BaseException) -> bool:
    """Whether the current drive hands its run back for ``exc``: its retry policy calls
    it transient (a store busy or unreachable, a timeout), so the run is re-driven
    later, not ended. Outside a drive, never (no one would re-drive it).

    For code that catches an app's errors inside a drive (a saga's stage): such an
    error is the run's, not the app's, and must reach the drive as it is.
    """
    drive = _current_drive.get()
    return drive is not None and drive.transient(exc)


@contextlib.contextmanager
def using_drive(drive: Drive) -> Iterator[Drive]:
    """Makes ``drive`` the current drive inside the block (its pump, ADK's tasks under it)."""
    token = _current_drive.set(drive)
    try:
        yield drive
    finally:
        _current_drive.reset(token)


async def barrier(*, before_work: bool = False) -> None:
    """A barrier of the current drive (see :meth:`Drive.barrier`); nothing outside a drive."""
    drive = _current_drive.get()
    if drive is not None and drive.batch is not None:
        await drive.barrier(before_work=before_work)


def begin_with_events_of(
    run_id: str | None,
) -> Callable[[Mapping[str, Any]], Awaitable[Any]] | None:
    """How a journaled tool of run ``run_id`` writes its intent with the buffered events.

    :meth:`Drive.begin_with_events` of the current drive when it drives that
    run with barrier commits, else None (the intent is written alone).
    """
    drive = _current_drive.get()
    if drive is None or drive.batch is None or run_id is None or drive.run.run_id != run_id:
        return None
    return drive.begin_with_events


def start_job_with_events_of(
    invocation_id: str, session_id: str
) -> Callable[[Mapping[str, Any]], Awaitable[Any]] | None:
    """How a long-running call of an invocation starts its job with the buffered events.

    :meth:`Drive.start_job_with_events` of the current drive when it drives
    that invocation on that session with barrier commits, else None (the
    job is started alone).
    """
    drive = _current_drive.get()
    if (
        drive is None
        or drive.batch is None
        or drive.run.invocation_id != invocation_id
        or drive.run.session_id != session_id
    ):
        return None
    return drive.start_job_with_events


class BarrierPlugin(BasePlugin):
    """ADK's callbacks where a drive's buffered events must be durable: a barrier each.

    Before an agent starts or ends, before a model call and before a tool
    runs. Plugin callbacks run before the agent's own, so an agent's callback
    that acts sees its events durable too. Returns None: ADK goes on as usual.
    """

    def __init__(self) -> None:
        super().__init__(name="durable_adk_barriers")
        # Whether another plugin of the app acts when an agent ends, or before
        # a tool runs (set by the run path once the App's plugins are known;
        # True until then).
        self.others_after_agent = True
        self.others_before_tool = True

    def see_plugins(self, plugins: Sequence[BasePlugin]) -> None:
        """Notes which of the App's other plugins act when an agent ends or before a tool."""
        others = [type(p) for p in plugins if p is not self]
        self.others_after_agent = any(
            getattr(p, "after_agent_callback", None) is not BasePlugin.after_agent_callback
            for p in others
        )
        self.others_before_tool = any(
            getattr(p, "before_tool_callback", None) is not BasePlugin.before_tool_callback
            for p in others
        )

    @override
    async def before_agent_callback(
        self, *, agent: BaseAgent, callback_context: CallbackContext
    ) -> types.Content | None:
        await barrier(before_work=True)
        return None

    @override
    async def after_agent_callback(
        self, *, agent: BaseAgent, callback_context: CallbackContext
    ) -> types.Content | None:
        # Only app code that runs when the agent ends needs its events durable
        # first: otherwise they go with the next barrier (the next agent's
        # start, a model call, a tool) or with the run's finish.
        if self.others_after_agent or getattr(agent, "after_agent_callback", None):
            await barrier(before_work=True)
        return None

    @override
    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        await barrier(before_work=True)
        return None

    @override
    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        # A journaled tool writes the buffered events with its intent, and a
        # durable long-running tool with its job, in one unit
        # (Drive.begin_with_events, Drive.start_job_with_events); a tool that
        # is only asking for its confirmation acts on nothing, and its call
        # goes with the pause. Nothing outside happens before then, unless app
        # code runs here first (another plugin's or the agent's own
        # before_tool_callback), which needs its events durable.
        if (
            writes_with_its_call(tool) or only_asks_for_confirmation(tool, tool_context)
        ) and not self.others_before_tool:
            agent = getattr(tool_context.get_invocation_context(), "agent", None)
            if not getattr(agent, "before_tool_callback", None):
                return None
        await barrier(before_work=True)
        return None
