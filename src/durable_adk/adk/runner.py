"""DurableRunner: ADK's Runner with a ledger row, a lease, fencing and a queue.

What it guarantees:

* A run is on the ledger (with its request and the invocation id we chose)
  before ADK is called, so a crash at any instant leaves a row the sweeper
  finds.
* One run per session drives at a time across every worker; a second run for
  a busy session waits ``QUEUED``, in order, and its caller then gets its
  events. A waiting run is woken when the session's run ends (in this
  process, or through the store's notifications), and polls at a back-off
  besides (``queue_poll`` doubling to ``queue_poll_max``), never at a fixed
  pace.
* A drive runs in a task of its own (the pump) and hands its events to the
  caller lock-step: ADK never runs ahead of the caller's reading, so the crash
  windows are those of a plain generator. The lease is renewed by the
  runner's :class:`~durable_adk.leases.LeaseKeeper` (one statement per
  renewal interval for every run the runner holds, driving or queued),
  independent of how fast the caller reads. Failed renewals are retried
  until each run's local deadline (last renewal sent + lease - lease/6); when a renewal
  finds the run taken over or finished, or the deadline passes, the pump is
  cancelled (ADK's task and the running tool's task with it), the drive's
  :class:`~durable_adk.fence.RunFence` is lost for good, and the caller gets
  :class:`~durable_adk.errors.Fenced`. The store refuses the old epoch's
  writes besides (every event carries the run id and epoch in
  ``custom_metadata["durable_adk"]``).
* A caller that stops reading (closes the generator, or its task is
  cancelled) detaches from the drive: the run goes on to its end in this
  process and its events are stored; :meth:`DurableRunner.aclose` waits for
  (or, at its timeout, cancels) detached drives.
* The row ends ``DONE`` (only when the classifier finds the invocation done),
  ``PAUSED`` (stopped on an unanswered long-running call) or ``FAILED`` (a
  deterministic error). A transient fault (see :class:`RetryPolicy`), or an
  invocation that ended with a call unanswered or no final answer, hands the
  run back for recovery after a back-off and raises
  :class:`~durable_adk.errors.RunInterrupted`.
* A run that answers long-running calls (``run(..., invocation_id=...)`` with a
  message of function responses) continues the invocation that made the calls
  and answers each pause at most once (calls and answers matched by count, so
  an interrupt id a loop reuses takes one answer per ask): an answer to a pause
  that is not open is refused before anything is written (``Conflict``); one
  that another run stored meanwhile is dropped at drive time; and a re-drive of
  a run whose answer was stored continues the invocation without storing it
  again.
* The done test follows the agent that owns the turn (:meth:`DurableRunner.classify`).

Apps run with ADK resumability on: a re-driven invocation then skips finished
steps and replays an unanswered call with its original id instead of asking
the model again (see docs/adk-notes.md, section 6). A bare agent gets an App
with resumability enabled; an App without it is refused. An in-memory session
service is refused: nothing would survive the crash we are here for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import uuid
import warnings
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from google.adk.agents import BaseAgent, LlmAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.agents.run_config import RunConfig
from google.adk.apps import App, ResumabilityConfig
from google.adk.artifacts.base_artifact_service import BaseArtifactService
from google.adk.auth.credential_service.base_credential_service import BaseCredentialService
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.memory.base_memory_service import BaseMemoryService
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.sessions.session import Session
from google.adk.workflow import BaseNode
from google.genai import types

from durable_adk import errors
from durable_adk.adk import agent_tools, agent_tree, operators, optional_imports
from durable_adk.adk.artifact_service import DurableArtifactService
from durable_adk.adk.barrier import (
    CommitMode,
    EventBatch,
    check_commit_mode,
    may_look_ahead,
    using_batch,
)
from durable_adk.adk.classify import INTERIM_KEY as INTERIM_KEY
from durable_adk.adk.classify import Classification, OrphanClass, check_answers, classify
from durable_adk.adk.drive import LEASE_MARGIN_FRACTION as LEASE_MARGIN_FRACTION
from durable_adk.adk.drive import TRANSIENT_ERRORS as TRANSIENT_ERRORS
from durable_adk.adk.drive import BarrierPlugin, Drive, End, causes, trust_from, using_drive
from durable_adk.adk.drive import RetryPolicy as RetryPolicy
from durable_adk.adk.drive import model_error_is_retryable as model_error_is_retryable
from durable_adk.adk.inbox import may_have_interrupts, sync_interrupts
from durable_adk.adk.live import LiveEvents
from durable_adk.adk.marks import is_idempotent
from durable_adk.adk.session_service import RUN_METADATA_KEY, DurableSessionService
from durable_adk.adk.tools import is_journaled
from durable_adk.adk.workflow_nodes import (
    NodeInFlight,
    answer_lost_calls,
    guard_function_nodes,
    node_kinds,
)
from durable_adk.admission import Admission
from durable_adk.fence import RunFence, using_fence
from durable_adk.interrupts import InterruptTable
from durable_adk.journal import OutcomeUnknown
from durable_adk.leases import Holding, LeaseKeeper
from durable_adk.ledger import RenewResult, Run, RunLedger, RunStatus
from durable_adk.loops import BackgroundSettings
from durable_adk.metrics import NO_METRICS, Metrics
from durable_adk.runlog import run_event, taken_over
from durable_adk.sweeps import sweepers_seen
from durable_adk.faults import crash_point

if TYPE_CHECKING:
    from durable_adk.adk.background import Background

logger = logging.getLogger("durable_adk.runner")

optional_imports.remember_missing()

LAST_EVENTS_KEPT = 20
"""How many of an invocation's last events a dead letter keeps."""


class _InvocationIdRunner(Runner):
    """Runner that starts new invocations under the id we already put on the ledger.

    ``_new_invocation_context`` is ADK's documented extension point; a resumable
    non-LLM root treats any explicit ``invocation_id`` as a resume, so the id is
    handed over per session instead. One run per session drives at a time (the
    ledger's guarantee), so the session names the run.
    """

    chosen: dict[tuple[str, str], str]

    def _new_invocation_context(
        self, session: Session, *, invocation_id: str | None = None, **kwargs: Any
    ) -> InvocationContext:
        chosen = self.__dict__.setdefault("chosen", {}).get((session.user_id, session.id))
        return super()._new_invocation_context(
            session, invocation_id=invocation_id or chosen, **kwargs
        )


E = TypeVar("E", bound=BaseException)
T = TypeVar("T")

_ALREADY_ANSWERED = types.Content(role="user", parts=[])
"""Sentinel of :func:`_unanswered`: every call the message answers is already answered."""


async def _no_events() -> AsyncGenerator[Event, None]:
    return
    yield  # pragma: no cover - makes this an (empty) async generator


def _unanswered(
    events: Iterable[Event], message: types.Content, run_id: str, invocation_id: str | None
) -> types.Content | None:
    """What to send for a message of function responses, given the stored events.

    Each time an interrupt was asked it takes one answer; calls and answers
    of the invocation are matched by count, in log order, as ADK matches
    them (an id reused by a loop is open again after its answer). A part
    this run already stored (a crash after ADK stored it) is not sent again;
    with nothing left to send, the invocation is re-driven without a message.
    A part whose call is asked but not open (another run answered it) is
    dropped: two resumes of one call, the second changes nothing.

    Returns:
        The message (possibly with fewer parts), ``None`` to re-drive without a
        message, or ``_ALREADY_ANSWERED``.
    """
    open_count: dict[str, int] = {}
    own: set[str] = set()
    for event in events:
        if event.invocation_id != invocation_id:
            continue
        if event.author != "user":
            for call in event.get_function_calls():
                if call.id:
                    open_count[call.id] = open_count.get(call.id, 0) + 1
            continue
        stamp = (event.custom_metadata or {}).get(RUN_METADATA_KEY)
        by_this_run = isinstance(stamp, dict) and stamp.get("run_id") == run_id
        for response in event.get_function_responses():
            if not response.id or (response.response or {}).get(INTERIM_KEY):
                continue
            if by_this_run:
                own.add(response.id)
            if open_count.get(response.id, 0) > 0:
                open_count[response.id] -= 1
    parts = message.parts or []

    def answered_elsewhere(call_id: str) -> bool:
        return call_id in open_count and open_count[call_id] == 0

    kept = [
        p
        for p in parts
        if not (
            p.function_response
            and (
                (p.function_response.id or "") in own
                or answered_elsewhere(p.function_response.id or "")
            )
        )
    ]
    if len(kept) == len(parts):
        return message
    if kept:
        return message.model_copy(update={"parts": kept})
    stored_by_me = any(p.function_response and p.function_response.id in own for p in parts)
    return None if stored_by_me else _ALREADY_ANSWERED


def cause_of(exc: BaseException, kind: type[E]) -> E | None:
    """The ``kind`` error behind ``exc``, if any (ADK's node runner wraps agent errors)."""
    return next((e for e in causes(exc) if isinstance(e, kind)), None)


def journaled_tool_names(root: object) -> frozenset[str]:
    """Names of the tools anywhere in an app's tree that are safe to re-drive.

    Journaled tools (the journal makes a re-run harmless) and tools marked
    :func:`~durable_adk.adk.marks.idempotent`, found by the one tree walk
    (:mod:`durable_adk.adk.agent_tree`: sub-agents, Workflow graph nodes,
    AgentTool children, static toolsets), and each AgentTool whose child
    reaches only such tools (:func:`durable_adk.adk.agent_tools.safe_agent_tools`).
    The marks travel with the tools, so every worker that loads the app agrees.
    """
    direct = frozenset(
        agent_tree.tool_name(found.item)
        for found in agent_tree.tools(root)
        if is_journaled(found.item) or is_idempotent(found.item)
    )
    return direct | agent_tools.safe_agent_tools(
        root, lambda tool: is_journaled(tool) or is_idempotent(tool)
    )


class DurableRunner:
    """Drives ADK runs that survive crashes.

    Example::

        async with open_store("sqlite:///durable_adk.db") as store:
            runner = DurableRunner(app=root_agent, store=store, app_name="shop")
            async for event in runner.run(user_id="u1", session_id="s1", message="hi"):
                print(event.author, event.content)
    """

    def __init__(
        self,
        *,
        app: App | BaseAgent | BaseNode,
        store: Any,
        worker_id: str | None = None,
        lease: float = 30.0,
        app_name: str | None = None,
        session_service: BaseSessionService | None = None,
        max_attempts: int = 3,
        backoff: float = 1.0,
        idempotent_tools: Iterable[str] = (),
        queue_poll: float = 0.1,
        queue_poll_max: float | None = None,
        metrics: Metrics = NO_METRICS,
        retry_policy: RetryPolicy | None = None,
        artifact_service: BaseArtifactService | None = None,
        memory_service: BaseMemoryService | None = None,
        credential_service: BaseCredentialService | None = None,
        plugins: Iterable[BasePlugin] = (),
        run_config: RunConfig | None = None,
        cancel_grace: float = 30.0,
        interrupt_deadlines: Mapping[str, float] | None = None,
        background: bool | BackgroundSettings = True,
        commits: CommitMode = "barrier",
        admission: Admission | None = None,
    ) -> None:
        """Creates the runner.

        Args:
            app: An ADK App with resumability on, or a bare root agent or
                Workflow (an App with resumability is made for it).
            store: The open durable store.
            worker_id: This worker's name on the ledger (default: host:pid:random).
            lease: Lease length in seconds; renewed every third of it. A drive
                whose renewals fail for ``lease * 5/6`` since the last one
                sent is cancelled (docs/runs.md, "Lease loss stops the work").
            app_name: The app name for a bare agent (default: the agent's name).
            session_service: A DurableSessionService over ``store`` (default: one is made).
            max_attempts: Recovery claims before a run is parked.
            backoff: First back-off between recovery attempts, doubled each time.
            idempotent_tools: Tools safe to run again after a crash (re-driven
                rather than parked when their call is unanswered).
            queue_poll: The first back-off of a queued run's claim attempts
                (doubled after each attempt that was not woken). A run of the
                session ending in this process, or announced by the store's
                notifications, wakes the waiting run at once.
            queue_poll_max: The longest back-off between two claim attempts
                (default: 2 s, or ``queue_poll`` if that is longer).
            metrics: Where run outcomes, lost leases and run spans go.
            retry_policy: Which drive errors are transient (the run is handed
                back for recovery) rather than terminal (FAILED); default
                ``RetryPolicy()``.
            artifact_service: ADK's artifact service for the app's tools
                (default: a :class:`DurableArtifactService` on ``store``, so a
                recovered run finds what its earlier steps saved). ADK's own
                services work too.
            memory_service: ADK's memory service (``search_memory``), if any.
            credential_service: ADK's credential service, if any.
            plugins: ADK plugins, added to the App's own.
            run_config: The RunConfig of every drive of this runner, recovered
                ones included (``max_llm_calls``, streaming, ...); a call of
                :meth:`run_async` may pass its own for that live drive. The
                run's fence always goes into its ``custom_metadata``.
            cancel_grace: When an operator cancels a running run, how long
                its owner lets the outside acts already under way (and a
                saga's compensation) finish before it aborts the invocation.
            interrupt_deadlines: Seconds an interrupt waits for a person before
                its default outcome (deny) applies, by tool name (a
                confirmation goes by the tool it guards; ``"*"``: any call);
                none by default.
            background: What ``async with`` this runner starts: True (the
                default) runs the app's background loops (recovery sweeper,
                job submitter, resumer, deadline sweep, progress, saga
                sweepers; :mod:`durable_adk.adk.background`) for the block
                and stops them on exit; a :class:`BackgroundSettings` sets
                their cadence; False runs none (a process that only submits,
                while a worker or ``durable-adk recover`` recovers).
            commits: ``"barrier"`` (default): a drive's events are committed
                together at barriers (before an agent starts or ends, a model
                call or a tool, before the caller sees them, at the end; see
                docs/runs.md, "When events are committed");
                ``"per_event"``: one unit of work per event, as ADK's
                services do.
            admission: How many drives run ADK at once (default
                :class:`~durable_adk.admission.Admission`: a limit set by the
                event loop's lag, so a worker holding thousands of runs keeps
                its latency, its statements' timeouts and its leases; the
                others wait their turn, leases held). ``Admission.unlimited()``
                lets every drive in at once.

        Raises:
            durable_adk.errors.InvalidArgument: The App is not resumable, the
                session service is not durable, or an AgentTool's child holds
                a long-running tool or a saga (ADK runs it on a throw-away
                session: see :mod:`durable_adk.adk.agent_tools`).
        """
        commits = check_commit_mode(commits)
        if not isinstance(app, App):  # a bare root: an agent or a Workflow
            with warnings.catch_warnings():
                # ADK flags resumability as experimental; durable runs depend on it by design.
                warnings.simplefilter("ignore", UserWarning)
                resumable = ResumabilityConfig(is_resumable=True)
            app = App(name=app_name or app.name, root_agent=app, resumability_config=resumable)
        extra_plugins = list(plugins)
        if commits == "barrier":
            extra_plugins.append(BarrierPlugin())
        if extra_plugins:
            app = app.model_copy(update={"plugins": [*(app.plugins or []), *extra_plugins]})
        if not (app.resumability_config and app.resumability_config.is_resumable):
            raise errors.InvalidArgument(
                "durable runs need ADK resumability: build the App with "
                "resumability_config=ResumabilityConfig(is_resumable=True), or pass the bare agent"
            )
        # Never an effect unguarded: shapes whose pauses or sagas would live in
        # an AgentTool's throw-away session are refused here, loudly.
        agent_tools.refuse_unguardable(app.root_agent)
        if session_service is None:
            session_service = DurableSessionService(store)
        if not isinstance(session_service, DurableSessionService):
            raise errors.InvalidArgument(
                f"{type(session_service).__name__} cannot back durable runs: use "
                "DurableSessionService (an in-memory service loses everything in a crash)"
            )
        self.app = app
        self.store = store
        self.sessions = session_service
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.lease_seconds = lease
        self.ledger = RunLedger(
            store, lease_seconds=lease, backoff_seconds=backoff, max_attempts=max_attempts
        )
        self.idempotent_tools = frozenset(idempotent_tools) | journaled_tool_names(app.root_agent)
        if queue_poll_max is None:
            queue_poll_max = max(2.0, queue_poll)
        if not 0 < queue_poll <= queue_poll_max:
            raise errors.InvalidArgument("queue_poll must be > 0 and at most queue_poll_max")
        self.node_kinds = node_kinds(app.root_agent)
        if self.node_kinds is not None:
            guard_function_nodes(app.root_agent)
        self.queue_poll = queue_poll
        self.queue_poll_max = queue_poll_max
        self.keeper = LeaseKeeper(self.ledger, self.worker_id)
        self.metrics = metrics
        self.retry_policy = retry_policy or RetryPolicy()
        self.run_config = run_config or RunConfig()
        self.cancel_grace = cancel_grace
        self.interrupts = InterruptTable(store)
        self.interrupt_deadlines = dict(interrupt_deadlines or {})
        self.commits: CommitMode = commits
        self.admission = admission if admission is not None else Admission()
        if self.admission.pressure is None:
            self.admission.pressure = store.take_pressure
        # ADK may run ahead of the caller between barriers only when no code
        # of the app's own runs there (durable_adk.adk.barrier.may_look_ahead).
        self._look_ahead = commits == "barrier" and may_look_ahead(app.root_agent)
        self.adk = _InvocationIdRunner(
            app=app,
            session_service=session_service,
            artifact_service=(
                artifact_service if artifact_service is not None else DurableArtifactService(store)
            ),
            memory_service=memory_service,
            credential_service=credential_service,
        )
        self._drives: dict[tuple[str, int], Drive] = {}
        self._detached: set[Drive] = set()
        if background is True:
            background = BackgroundSettings()
        self.background_settings: BackgroundSettings | None = background or None
        self.background: Background | None = None
        """The background loops running over this runner, if any (set by Background)."""
        self._own_background: Background | None = None  # the loops ``async with`` started
        self._sweepers_checked = False

    @property
    def root_agent_name(self) -> str:
        """The name of the app's root agent (the classifier's done test needs it)."""
        root = self.app.root_agent
        if root is None:
            raise errors.InvalidArgument("the App has no root agent")
        return root.name

    def classify(self, events: Sequence[Event], invocation_id: str | None) -> Classification:
        """The classifier's verdict on an invocation of this app (finish and recovery alike).

        The done test follows the agent that owns the turn: for an LlmAgent
        root, whose conversation may have moved to a sub-agent by
        ``transfer_to_agent`` in an earlier turn, the agent that speaks first
        in the invocation and then each agent it transfers to. For a Workflow
        root it is node-aware: each graph node's checkpoints say whether the
        node is in flight.
        """
        return classify(
            events,
            invocation_id,
            root_agent_name=self.root_agent_name,
            nodes=self.node_kinds,
            owner_speaks_first=isinstance(self.app.root_agent, LlmAgent),
        )

    @property
    def app_name(self) -> str:
        """The ADK app's name."""
        return self.app.name

    @property
    def is_workflow(self) -> bool:
        """Whether the app's root is a Workflow graph (its nodes' checkpoints are read)."""
        return self.node_kinds is not None

    @property
    def live(self) -> LiveEvents:
        """Followers of a session's events in this process: stored ones (published by the
        session service) and the partial ones this runner's drives stream."""
        return self.sessions.live

    @property
    def detached_runs(self) -> list[str]:
        """Ids of the runs driven on although their caller stopped reading."""
        return sorted(d.run.run_id for d in self._detached)

    def fence(self, run_id: str, epoch: int) -> RunFence | None:
        """The fence of this runner's live drive of ``run_id`` at ``epoch``, if any.

        Inside a drive :func:`durable_adk.fence.current_fence` gives the same
        object without the runner.
        """
        drive = self._drives.get((run_id, epoch))
        return drive.fence if drive is not None else None

    def keep_lease(
        self,
        run: Run,
        task: asyncio.Task[Any],
        *,
        abort: Callable[[], None] | None = None,
    ) -> tuple[RunFence, asyncio.Task[None]]:
        """Renews a claimed run's lease while ``task`` drives it outside :meth:`drive`.

        For runs that ADK's own Runner drives (``DurableRunsPlugin`` under
        ``adk api_server``): the same heartbeat as a drive's, with the same
        local deadline and retries. When the lease is lost, the fence is lost
        for good and ``task`` is cancelled. The caller cancels the returned
        heartbeat task when the drive ends.

        An operator's cancel seen by a renewal is handled as in a drive: the
        fence refuses new acts at once (``fence.stopping`` says who cancelled),
        and once the acts under way end (or :attr:`cancel_grace` passes)
        ``abort`` is called: the invocation's ``InvocationContext.abort``, so
        ADK stops the invocation. The caller then ends the run CANCELLED.

        Returns:
            The drive's fence and its heartbeat task.
        """
        drive = Drive(
            run,
            RunFence(
                run.run_id,
                run.epoch,
                trusted_until=trust_from(run.claim_sent, self.lease_seconds),
                invocation_id=run.invocation_id,
                store=self.store,
            ),
        )
        drive.task = task
        drive.on_abort = abort
        heartbeat = asyncio.create_task(
            self._held_while_running(drive), name=f"durable-adk-lease-{run.run_id}"
        )
        return drive.fence, heartbeat

    async def _held_while_running(self, drive: Drive) -> None:
        """Keeps the drive's lease with the keeper until cancelled (or lost)."""
        holding = self._hold(drive)
        try:
            await drive.fence.wait_lost()
        finally:
            self.keeper.drop(holding)
            if drive.stopper is not None:  # the drive ended: nothing left to abort
                drive.stopper.cancel()

    async def aclose(self, *, grace: float | None = None) -> None:
        """Waits for the detached drives to end, cancelling those still running after ``grace``.

        A cancelled drive writes nothing more: its run stays RUNNING until its
        lease expires (or a worker's drain hands it back) and recovery takes
        it over. Safe to call twice; new drives may still start afterwards.

        Args:
            grace: Seconds to wait before cancelling; None waits for all.
        """
        await self.admission.aclose()
        drives = list(self._detached)
        tasks = [d.task for d in drives if d.task is not None]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=grace)
            for drive in drives:
                if drive.task in pending:
                    drive.stop("shutdown")
            if pending:
                await asyncio.wait(pending)
        if not self.keeper.held():
            await self.keeper.aclose()  # its task would end at its next tick anyway

    async def __aenter__(self) -> DurableRunner:
        """Starts the app's background loops (unless ``background=False``)."""
        if self.background_settings is not None and self.background is None:
            # Imported here: the loops' modules import this one.
            from durable_adk.adk.background import Background

            own = Background(self, self.background_settings)
            await own.start()
            self._own_background = own
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Stops the loops this runner started, then waits for its detached drives.

        Recoveries a stopped sweep left in progress get the settings'
        ``drain_seconds`` and are then cancelled (their leases expire and
        another sweeper takes them over).
        """
        own, self._own_background = self._own_background, None
        if own is None:
            await self.aclose()
            return
        await own.stop()
        await self.aclose(grace=own.settings.drain_seconds)

    async def warn_if_no_sweeper(self) -> bool:
        """Says in the log, once per runner, when no recovery sweeper of its app runs anywhere.

        Asked at this runner's first run unless its own background loops run:
        the ``sweepers`` table (:mod:`durable_adk.sweeps`) tells whether any
        process on the database (a worker, an ``async with DurableRunner``, a
        ``durable-adk recover`` pass) swept for the app recently.

        Returns:
            True if it warned.
        """
        if self._sweepers_checked or self.background is not None:
            return False
        self._sweepers_checked = True
        try:
            seen = await sweepers_seen(self.store, app_name=self.app_name)
        except errors.StoreError as exc:
            logger.debug("could not tell whether a sweeper runs: %s", exc)
            return False
        if seen.alive:
            return False
        logger.warning(
            "no recovery sweeper runs for app %r on this database (last sweep: %s): a run "
            "that dies now stays RUNNING and is never finished. Use `async with "
            "DurableRunner(...)` (it runs the sweeper), run a `durable-adk serve` worker, "
            "or run `durable-adk recover MODULE:APP` regularly (cron)",
            self.app_name,
            seen.describe(),
        )
        return True

    async def cancel(
        self, run_id: str, *, by: str = "library", reason: str | None = None
    ) -> operators.Outcome:
        """Cancels a run of this app; safe to call twice. The answer says where the run stands.

        A QUEUED or PAUSED run is CANCELLED at once. A RUNNING one is stopped
        by its owner: at once when this runner drives it (no heartbeat to wait
        for), else at the owner's next heartbeat, or by recovery when the owner
        is dead. Either way new outside acts are refused, acts under way may
        finish (:attr:`cancel_grace`), ADK's invocation is aborted and the run
        ends CANCELLED; it is never re-driven. The cancel is in the run's audit
        trail with ``by`` and ``reason``.

        Raises:
            durable_adk.errors.NotFound: No run of this app has this id.
            durable_adk.errors.InvalidArgument: A bad ``by`` or ``reason``.
        """
        run = await self.ledger.get(run_id)
        if run is None or run.app_name != self.app_name:
            raise errors.NotFound(f"no run {run_id!r} of app {self.app_name!r}")
        outcome = await operators.cancel_run(self.ledger, run_id, by=by, reason=reason)
        if outcome.run.status is RunStatus.RUNNING and outcome.run.owner == self.worker_id:
            drive = self._drives.get((run_id, outcome.run.epoch))
            if drive is not None and drive.cancelled_by is None:
                self._cancel(drive, by)
        return outcome

    async def run(
        self,
        *,
        user_id: str,
        session_id: str,
        message: types.Content | str,
        invocation_id: str | None = None,
        run_config: RunConfig | None = None,
        state_delta: dict[str, Any] | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Runs one turn durably and yields its events.

        The ledger row is written first; the run then waits its turn in the
        session's queue, drives ADK under a renewed lease, and finishes the row.

        Args:
            user_id: The session's user.
            session_id: The session (created if missing).
            message: The user's message; or, with ``invocation_id``, a message
                made only of function responses answering that invocation's
                long-running calls (same id and name as each call).
            invocation_id: Continue this existing invocation instead of
                starting a new one: the ledger row carries its id, so recovery
                re-drives the invocation that made the calls.
            run_config: This drive's RunConfig (default: the runner's); a
                recovered drive uses the runner's.
            state_delta: State changes applied with the message, as in ADK.
                A recovered drive whose message was never stored
                (NOT_STARTED) starts again without them.

        Raises:
            durable_adk.errors.Fenced: This worker lost the run to another.
            durable_adk.errors.InvalidArgument: ``invocation_id`` with a
                message that is not made of function responses, or one that
                answers a call the invocation never made (or by another name).
            durable_adk.errors.NotFound: ``invocation_id`` is not in the session.
            durable_adk.errors.Conflict: The message answers a pause that was
                already answered (each pause takes one answer); nothing is written.
        """
        await self.warn_if_no_sweeper()
        run, content = await self.submit(
            user_id=user_id, session_id=session_id, message=message, invocation_id=invocation_id
        )
        # A run claimed as it was recorded holds its session from now on: pinned
        # at once (no await since the submit put it in the cache), so a burst of
        # thousands of submissions does not evict it before its drive pins it too.
        key = (run.app_name, run.user_id, run.session_id)
        held = run.status is RunStatus.RUNNING and run.owner == self.worker_id
        if held:
            self.sessions.pin(key)  # pins nest: the drive's own pin overlaps this one
        try:
            claimed = await self.wait_for_turn(run)
            crash_point("runner.before_first_event")
            # Closed here, not by whoever drops this generator: an early exit of the
            # caller ends the drive (and its heartbeat) at once.
            driven = self.drive(
                claimed,
                content,
                resume=invocation_id is not None,
                run_config=run_config,
                state_delta=state_delta,
            )
            async with contextlib.aclosing(driven) as events:
                async for event in events:
                    yield event
        finally:
            if held:
                self.sessions.unpin(key)

    async def run_async(
        self,
        *,
        user_id: str,
        session_id: str,
        new_message: types.Content,
        run_config: RunConfig | None = None,
        state_delta: dict[str, Any] | None = None,
        invocation_id: str | None = None,
    ) -> AsyncGenerator[Event, None]:
        """ADK's ``Runner.run_async``, durably: the call sites of an ADK app stay as they are.

        The arguments mean what they mean to ADK's Runner; ``invocation_id``
        continues an invocation paused on long-running calls (``new_message``
        then answers them). The run's fence is merged into ``run_config``'s
        ``custom_metadata``. See :meth:`run`.
        """
        driven = self.run(
            user_id=user_id,
            session_id=session_id,
            message=new_message,
            invocation_id=invocation_id,
            run_config=run_config,
            state_delta=state_delta,
        )
        async with contextlib.aclosing(driven) as events:
            async for event in events:
                yield event

    async def submit(
        self,
        *,
        user_id: str,
        session_id: str,
        message: types.Content | str,
        invocation_id: str | None = None,
    ) -> tuple[Run, types.Content]:
        """Puts a run on the ledger, creating the session if missing.

        The first step of :meth:`run`, for callers that must know the run id
        before its turn comes (the HTTP service). A new run whose session is
        free is claimed at once (RUNNING, held by this worker); otherwise it
        waits QUEUED. Either way :meth:`wait_for_turn` comes next. Arguments
        as for :meth:`run`.

        Returns:
            The run as recorded and the message as a Content.
        """
        content = (
            types.Content(role="user", parts=[types.Part(text=message)])
            if isinstance(message, str)
            else message
        )
        if not content.parts:
            raise errors.InvalidArgument("message has no parts")
        if invocation_id is not None and not all(p.function_response for p in content.parts):
            raise errors.InvalidArgument(
                "a message continuing an invocation must be made only of function responses"
            )
        request = content.model_dump(mode="json", exclude_none=True)
        if invocation_id is None:
            # The common case in one unit of work: session made if missing, run
            # recorded and, if the session is free, claimed.
            now = time.time()
            started = await self.ledger.start(
                app_name=self.app_name,
                user_id=user_id,
                session_id=session_id,
                request=request,
                owner=self.worker_id,
                now=now,
            )
            if started is not None:
                # Trusted only while this run holds the new session: a run that
                # waits QUEUED reads it when its turn comes.
                if (
                    started.created_session_pk is not None
                    and started.run.status is RunStatus.RUNNING
                ):
                    self.sessions.adopt_created(
                        (self.app_name, user_id, session_id),
                        pk=started.created_session_pk,
                        app_state=started.app_state,
                        user_state=started.user_state,
                        created_at=now,
                    )
                return started.run, content
        if invocation_id is not None:
            return await self._submit_answer(user_id, session_id, invocation_id, content), content
        existing = await self.sessions.get_session(
            app_name=self.app_name, user_id=user_id, session_id=session_id
        )
        if existing is None:
            # Another caller may create it at the same moment; either way it exists.
            with contextlib.suppress(AlreadyExistsError):
                await self.sessions.create_session(
                    app_name=self.app_name, user_id=user_id, session_id=session_id
                )
        run = await self.ledger.submit(
            app_name=self.app_name,
            user_id=user_id,
            session_id=session_id,
            request=request,
            owner=self.worker_id,
        )
        return run, content

    async def _submit_answer(
        self, user_id: str, session_id: str, invocation_id: str, content: types.Content
    ) -> Run:
        """Records the run that answers paused calls, each pause once, whoever else answers.

        The session check refuses a pause already answered; the claims written
        with the run refuse a second answer sent at the same instant (both
        passed the check). A claim held by a run that ended CANCELLED or
        FAILED is freed, and the session read again, once.
        """
        where = {"app_name": self.app_name, "user_id": user_id, "session_id": session_id}
        for attempt in (1, 2):
            existing = await self.sessions.get_session(
                app_name=self.app_name, user_id=user_id, session_id=session_id
            )
            claims = check_answers(existing.events if existing else [], invocation_id, content)
            try:
                return await self.ledger.submit(
                    **where,
                    request=content.model_dump(mode="json", exclude_none=True),
                    owner=self.worker_id,
                    invocation_id=invocation_id,
                    claims=claims,
                )
            except errors.UniqueViolation:
                held = await self.ledger.release_claims_of_ended(
                    **where, invocation_id=invocation_id, claims=claims
                )
                if held or attempt == 2:
                    holders = ", ".join(
                        f"{call} by run {run_id} ({status.value if status else 'gone'})"
                        for call, run_id, status in held
                    )
                    raise errors.Conflict(
                        "already answered: "
                        + (holders or "another answer took the pause meanwhile")
                        + " (nothing changed)"
                    ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def wait_for_turn(self, run: Run) -> Run:
        """Waits until our QUEUED run heads its session's queue, then claims it.

        Raises:
            durable_adk.errors.Fenced: The queued run was taken by another worker.
            durable_adk.errors.RunCancelled: An operator cancelled it meanwhile.
        """
        if run.status is RunStatus.RUNNING and run.owner == self.worker_id:
            return run  # claimed when it was submitted
        lost = asyncio.Event()
        why: list[str] = []

        def on_lost(reason: str) -> None:
            why.append(reason)
            lost.set()

        fence = RunFence(
            run.run_id, run.epoch, trusted_until=trust_from(run.claim_sent, self.lease_seconds)
        )
        holding = self.keeper.hold(run.lease, fence, on_lost)
        try:
            key = (run.app_name, run.user_id, run.session_id)
            claimed = await self.ledger.wait_turn(
                run,
                self.worker_id,
                first_poll=self.queue_poll,
                max_poll=self.queue_poll_max,
                lost=lost,
                ahead_here=lambda: self.sessions.pinned(key),
            )
        finally:
            self.keeper.drop(holding)
        if claimed is None:
            now = await self.ledger.get(run.run_id)
            if now is not None and now.status is RunStatus.CANCELLED:
                raise errors.RunCancelled(
                    f"queued run {run.run_id} was cancelled: {now.last_error}"
                )
            raise errors.Fenced(
                f"queued run {run.run_id} was taken by another worker ({why[0] if why else 'lost'})"
            )
        return claimed

    async def drive(
        self,
        run: Run,
        message: types.Content,
        *,
        resume: bool,
        classification: str | None = None,
        outcome: list[RunStatus] | None = None,
        run_config: RunConfig | None = None,
        state_delta: dict[str, Any] | None = None,
        answer_first: tuple[str, ...] = (),
    ) -> AsyncGenerator[Event, None]:
        """Drives a claimed run to its end under a renewed lease, in a ``durable_adk.run`` span.

        The drive runs in a task of its own (the pump) and this generator hands
        its events over lock-step: the pump asks ADK for the next event only
        when this generator is asked for it. If the caller stops reading
        (closes the generator, or its task is cancelled) the drive detaches
        and goes on to its end without a reader; see :meth:`aclose`. See
        :meth:`_drive` for the arguments.

        Raises:
            durable_adk.errors.Fenced: The lease was lost; the drive was cancelled.
            durable_adk.errors.RunInterrupted: A transient fault: the run was
                handed back for recovery (or, if even that failed, its lease
                expires and recovery takes it over then).
            durable_adk.journal.OutcomeUnknown: The run was parked.
        """
        drive = Drive(
            run,
            RunFence(
                run.run_id,
                run.epoch,
                trusted_until=trust_from(run.claim_sent, self.lease_seconds),
                invocation_id=run.invocation_id,
                store=self.store,
            ),
        )
        drive.run_config, drive.state_delta = run_config, state_delta
        drive.answer_first = answer_first
        if self.commits == "barrier":
            drive.batch = EventBatch((run.app_name, run.user_id, run.session_id), self.sessions)
            drive.flush = self.sessions.flush_batch
            drive.look_ahead = self._look_ahead
        # Created here, in the caller's context: the run span is a child of the caller's.
        drive.task = asyncio.create_task(
            self._pump(
                drive, message, resume=resume, classification=classification, outcome=outcome
            ),
            name=f"durable-adk-drive-{run.run_id}",
        )
        try:
            while True:
                item = await drive.next_item()
                if isinstance(item, End):
                    break
                yield item
        except BaseException:
            if not drive.ended and not drive.detached:
                # GeneratorExit (the caller closed us) or CancelledError (its
                # task was cancelled): the run goes on to its end without a reader.
                drive.detach()
                self._detached.add(drive)
                logger.info(
                    "run %s (epoch %d): the caller stopped reading; driving it to its end",
                    run.run_id,
                    run.epoch,
                )
            raise
        if item.error is not None:
            raise item.error

    async def _pump(
        self,
        drive: Drive,
        message: types.Content,
        *,
        resume: bool,
        classification: str | None,
        outcome: list[RunStatus] | None,
    ) -> None:
        """The drive's task: runs :meth:`_drive`, handing each event over when it is wanted."""
        run = drive.run
        session = (run.app_name, run.user_id, run.session_id)
        self._drives[(run.run_id, run.epoch)] = drive
        error: BaseException | None = None
        self.sessions.pin(session)  # we hold the session: kept cached until the drive ends
        try:
            with (
                using_fence(drive.fence),
                using_drive(drive),
                using_batch(drive.batch),
                self.metrics.span(
                    "durable_adk.run",
                    {
                        "durable_adk.run_id": run.run_id,
                        "durable_adk.app_name": run.app_name,
                        "durable_adk.session_id": run.session_id,
                        "durable_adk.invocation_id": run.invocation_id,
                        "durable_adk.epoch": run.epoch,
                        "durable_adk.attempt": run.attempts,
                        "durable_adk.resume": resume,
                    },
                ),
            ):
                driven = self._drive(
                    drive, message, resume=resume, classification=classification, outcome=outcome
                )
                async with contextlib.aclosing(driven) as events:
                    while True:
                        if drive.batch is None:
                            await drive.wanted()
                        try:
                            event = await anext(events)
                        except StopAsyncIteration:
                            break
                        if drive.batch is not None:
                            if not event.partial:
                                # Held until it is durable; lock-step unless ADK may run ahead.
                                drive.held.append(event)
                                if not drive.look_ahead:
                                    await drive.barrier()
                                continue
                            await drive.barrier()  # what came before is durable and handed first
                        if event.partial and self.sessions.live.watched(session):
                            # Never stored: followers get it from here (stored ones
                            # come from the session service, with their numbers).
                            self.sessions.live.publish(session, event)
                        drive.hand(event)
        except asyncio.CancelledError as exc:
            if drive.stop_reason != "fenced":
                error = exc
                raise  # shut down (aclose) or the loop is closing: nothing more is written
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            error = errors.Fenced(
                f"run {run.run_id} (epoch {run.epoch}): {drive.fence.lost or 'lease lost'}; "
                "the drive was cancelled"
            )
        except BaseException as exc:
            error = exc
        finally:
            self.sessions.unpin(session)  # the last pin wakes the runs queued behind it
            self._drives.pop((run.run_id, run.epoch), None)
            drive.end(error)
            if drive.detached:
                self._detached.discard(drive)
                self._log_detached_end(run, error)

    def _log_detached_end(self, run: Run, error: BaseException | None) -> None:
        """Says how a drive nobody was reading ended (its caller cannot be told)."""
        where = f"run {run.run_id} (epoch {run.epoch}, caller gone)"
        if error is None:
            logger.info("%s: driven to its end", where)
        elif isinstance(error, asyncio.CancelledError):
            logger.warning(
                "%s: cancelled at shutdown; its lease expires (or is handed back) and "
                "recovery takes it over",
                where,
            )
        elif isinstance(error, (errors.Fenced, errors.RunInterrupted, OutcomeUnknown)):
            logger.warning("%s: %s", where, error)
        else:
            logger.error("%s: failed: %s", where, error, exc_info=error)

    async def _drive(
        self,
        drive: Drive,
        message: types.Content,
        *,
        resume: bool,
        classification: str | None = None,
        outcome: list[RunStatus] | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Drives a claimed run to its end under a renewed lease.

        Args:
            drive: The drive of a run this worker holds (RUNNING, our owner and epoch).
            message: The original request.
            resume: Re-drive the invocation id on the ledger (recovery, or an
                answer to its long-running calls) rather than start it.
            classification: What recovery found, recorded on the row when it ends.
            outcome: Receives the status the run ended with (DONE or PAUSED)
                once it is on the ledger.
        """
        run = drive.run
        lease = run.lease
        key = (run.app_name, run.user_id, run.session_id)
        new_message: types.Content | None = message
        if resume and any(p.function_response for p in message.parts or ()):
            before = await self.sessions.get_session(
                app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
            )
            new_message = _unanswered(
                before.events if before else [], message, run.run_id, run.invocation_id
            )
            # We hold the session's run and have just read it: ADK's read, next, need not.
            self.sessions.trust_next_read(key)
        holding = self._hold(drive)
        base = drive.run_config or self.run_config
        run_config = base.model_copy(
            update={
                "custom_metadata": {
                    **(base.custom_metadata or {}),
                    RUN_METADATA_KEY: {"run_id": run.run_id, "epoch": run.epoch},
                }
            }
        )
        seen: list[Event] = []
        chosen = self.adk.__dict__.setdefault("chosen", {})
        chosen[(run.user_id, run.session_id)] = run.invocation_id
        admitted = False
        try:
            # Our turn to run ADK (the lease is held meanwhile); a cancel seen
            # while waiting ends the wait, and the drive, without running it.
            admitted = await self.admission.enter(drive.abort)
            if drive.answer_first and admitted:
                await self._answer_first(drive, run_config)
            if not admitted or new_message is _ALREADY_ANSWERED:
                events_of: Any = _no_events()  # another run answered every call: nothing to do
            else:
                events_of = self.adk.run_async(
                    user_id=run.user_id,
                    session_id=run.session_id,
                    invocation_id=run.invocation_id if resume else None,
                    new_message=new_message,
                    run_config=run_config,
                    state_delta=drive.state_delta,
                    abort_signal=drive.abort,
                )
            async with contextlib.aclosing(events_of) as events:
                async for event in events:
                    drive.fence.check_not_lost()
                    seen.append(event)
                    yield event
            await drive.barrier()  # the end: every event durable and handed over
        except Exception as raised:
            await self._settle(drive, raised)
            # A barrier's store error reaches us wrapped by ADK's plugin manager.
            failed_flush = drive.batch.failed if drive.batch is not None else None
            exc = next((e for e in causes(raised) if e is failed_flush), raised)
            if drive.cancelled_by is not None or cause_of(exc, errors.RunCancelled) is not None:
                await self._end_cancelled(drive, cause=exc)
            refused = cause_of(exc, errors.FenceRefused)
            if refused is not None and drive.fence.lost is None:
                # An outside service refused a request as fenced off (it did
                # not act). The lease may still be ours (the request was late,
                # not the run taken over): hand the run back for recovery now
                # rather than leave it to expire. Fenced if it was taken over.
                why = f"an outside service refused the request as fenced off: {refused}"
                await self._hand_back(run, why, cause=exc)
            fenced = cause_of(exc, errors.Fenced)
            if fenced is not None:
                taken_over(
                    logger, run_id=run.run_id, epoch=run.epoch, during="drive", reason=fenced
                )
                raise fenced from exc
            unknown = cause_of(exc, OutcomeUnknown)
            if unknown is not None:
                await self._ledger_write(run, self._park_unknown(run, unknown), cause=exc)
                raise unknown from exc
            failed = f"{type(exc).__name__}: {exc}"
            if self.retry_policy.is_transient(exc):
                await self._hand_back(run, f"transient fault: {failed}", cause=exc)
            if not await self._ledger_write(
                run, self.ledger.finish(lease, RunStatus.FAILED, error=failed), cause=exc
            ):
                raise errors.Fenced(f"run {run.run_id} was taken over before it failed") from exc
            self.metrics.run_finished(RunStatus.FAILED.value)
            if exc is raised:
                raise
            raise exc from raised
        finally:
            if admitted:
                self.admission.leave()
            self.sessions.distrust(key)
            chosen.pop((run.user_id, run.session_id), None)
            self.keeper.drop(holding)
            if drive.stopper is not None:
                drive.stopper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await drive.stopper
            if drive.cancelled_by is None:
                # Nothing of this drive may act from here on (its writes are fenced anyway).
                drive.fence.lose("the drive has ended")
        if drive.cancelled_by is not None:
            await self._end_cancelled(drive, cause=None)
        crash_point("runner.before_finish")
        # The cache holds every event this run appended (we hold the session);
        # read only when it was dropped.
        events = self.sessions.cached_events(key)
        if events is None:
            session = await self._ledger_write(
                run,
                self.sessions.get_session(
                    app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
                ),
                cause=None,
            )
            events = session.events if session else seen
        verdict = self.classify(events, run.invocation_id)
        if new_message is _ALREADY_ANSWERED or verdict.cls is OrphanClass.ACTUALLY_DONE:
            status = RunStatus.DONE
        elif verdict.cls is OrphanClass.PAUSED:
            status = RunStatus.PAUSED
        else:
            # ADK ended the invocation with a call unanswered or no final answer
            # (an error event left by a store fault, say): never DONE.
            await self._hand_back(
                run,
                f"the invocation ended {verdict.cls.value} ({verdict.reason}): "
                "handed back for recovery",
                cause=None,
            )
        if not await self._ledger_write(
            run, self.ledger.finish(lease, status, classification=classification), cause=None
        ):
            raise errors.Fenced(f"run {run.run_id} was taken over before it could finish")
        self.metrics.run_finished(status.value)
        await self.after_finish(run, status, events, verdict)
        if outcome is not None:
            outcome.append(status)

    async def _answer_first(self, drive: Drive, run_config: RunConfig) -> None:
        """Answers the lost calls of a Workflow node before ADK re-enters the node.

        Under the drive's lease and fence, like the rest of the drive. ADK
        re-reads the session afterwards (it is not trusted from the cache).
        """
        run = drive.run
        session = await self.sessions.get_session(
            app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
        )
        if session is None or run.invocation_id is None:
            raise errors.InvalidArgument(f"run {run.run_id}: no session or invocation to answer")
        stored = await answer_lost_calls(
            self.adk,
            self.sessions,
            session,
            invocation_id=run.invocation_id,
            call_ids=drive.answer_first,
            run_config=run_config,
        )
        # We hold the session's run and have just written to it: ADK's read, next, need not.
        self.sessions.trust_next_read((run.app_name, run.user_id, run.session_id))
        logger.info(
            "run %s (epoch %d): answered %d lost call(s) before ADK re-enters the node",
            run.run_id,
            run.epoch,
            len(stored),
        )

    async def after_finish(
        self, run: Run, status: RunStatus, events: Sequence[Event], verdict: Classification
    ) -> None:
        """What follows a run's end on the ledger: its invocation's PAUSED runs and interrupts.

        A run that ends its invocation DONE ends DONE the runs that paused on
        it; the interrupts index follows the session (open calls indexed,
        answered ones out). Derived records: a store failure here is logged,
        the run's own end is already recorded, and the next end re-syncs them.
        """
        if not may_have_interrupts(events, run.invocation_id):
            return  # an ordinary run: no paused run, nothing to index, no query
        try:
            if status is RunStatus.DONE:
                await self.ledger.close_paused(run)
            await sync_interrupts(
                self.interrupts, run, events, verdict, deadlines=self.interrupt_deadlines
            )
        except (errors.StoreError, TimeoutError) as exc:
            logger.warning("run %s: could not update its interrupts index: %s", run.run_id, exc)

    async def _end_cancelled(self, drive: Drive, *, cause: BaseException | None) -> NoReturn:
        """Ends a drive an operator cancelled: the run CANCELLED, then RunCancelled raised.

        A run is cancelled once its owner saw the request, whatever the
        invocation reached meanwhile (its events say how far it got).

        Raises:
            durable_adk.errors.RunCancelled: Always, once the run is CANCELLED.
            durable_adk.errors.Fenced: The run was taken over before it could be ended.
        """
        run = drive.run
        drive.fence.lose("the drive was cancelled")
        if not await self._ledger_write(run, self.ledger.finish_cancelled(run.lease), cause=cause):
            raise errors.Fenced(f"run {run.run_id} was taken over before it was cancelled")
        self.metrics.run_finished(RunStatus.CANCELLED.value)
        by = drive.cancelled_by or "an operator"
        raise errors.RunCancelled(
            f"run {run.run_id} was cancelled by {by}: it is CANCELLED"
        ) from cause

    async def _settle(self, drive: Drive, exc: BaseException) -> None:
        """After a drive error, writes and hands over what the batch held, if the store takes it.

        What ADK produced before the error is then stored, as with per-event
        commits. When the store refuses the batch (the run was taken over, the
        session moved on) nothing of it is written and the held events are
        dropped; the drive's own error decides what happens next.
        """
        batch = drive.batch
        if batch is None or batch.failed is not None or cause_of(exc, errors.Fenced) is not None:
            drive.held.clear()
            return
        try:
            await drive.barrier()
        except (errors.DurableError, StaleSessionError, SessionNotFoundError, TimeoutError) as err:
            logger.warning(
                "run %s (epoch %d): the events before the error could not be stored: %s",
                drive.run.run_id,
                drive.run.epoch,
                err,
            )
            drive.held.clear()

    async def _ledger_write(
        self, run: Run, write: Awaitable[T], *, cause: BaseException | None
    ) -> T:
        """Awaits a ledger write that ends a drive; a store failure becomes RunInterrupted.

        The row is then still RUNNING under our lease: it expires and recovery
        takes the run over (said so, truthfully, in the log and the error).
        """
        try:
            return await write
        except (errors.StoreError, TimeoutError) as exc:
            logger.warning(
                "run %s (epoch %d): the store failed to record how the drive ended (%s); "
                "its lease expires and recovery takes it over then",
                run.run_id,
                run.epoch,
                exc,
            )
            raise errors.RunInterrupted(
                f"run {run.run_id}: the store failed to record how the drive ended ({exc}); "
                "its lease expires and recovery takes it over then"
            ) from (cause or exc)

    async def _hand_back(self, run: Run, reason: str, *, cause: BaseException | None) -> NoReturn:
        """Releases the run for recovery after a back-off, then raises RunInterrupted.

        Raises:
            durable_adk.errors.RunInterrupted: Always, unless the lease was lost.
            durable_adk.errors.Fenced: The run was taken over before it could be handed back.
        """
        if not await self._ledger_write(
            run, self.ledger.release(run.lease, error=reason), cause=cause
        ):
            raise errors.Fenced(
                f"run {run.run_id} was taken over before it could be handed back"
            ) from cause
        run_event(
            logger,
            logging.WARNING,
            "handed_back",
            run_id=run.run_id,
            epoch=run.epoch,
            attempt=run.attempts,
            reason=reason,
        )
        raise errors.RunInterrupted(
            f"run {run.run_id} was handed back for recovery after a back-off: {reason}"
        ) from cause

    async def _park_unknown(self, run: Run, unknown: OutcomeUnknown) -> None:
        """Parks a run whose outside effect cannot be confirmed either way."""
        session = await self.sessions.get_session(
            app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
        )
        mine = [
            e for e in (session.events if session else []) if e.invocation_id == run.invocation_id
        ]
        last = [json.loads(e.model_dump_json(exclude_none=True)) for e in mine[-LAST_EVENTS_KEPT:]]
        found = "NODE_INFLIGHT" if isinstance(unknown, NodeInFlight) else "TOOL_UNANSWERED"
        if not await self.ledger.park(
            run.lease, error=str(unknown), classification=found, last_events=last
        ):
            raise errors.Fenced(f"run {run.run_id} was taken over before it could be parked")
        self.metrics.run_parked()
        run_event(
            logger,
            logging.WARNING,
            "parked",
            run_id=run.run_id,
            epoch=run.epoch,
            cls="TOOL_UNANSWERED",
            attempt=run.attempts,
            reason=str(unknown),
        )
        self.metrics.run_finished(RunStatus.PARKED.value)

    def _hold(self, drive: Drive) -> Holding:
        """Has the keeper renew the drive's lease; a lost lease cancels the drive.

        A renewal that says an operator asked the run to stop cancels the
        drive (once, :meth:`_cancel`); the keeper goes on renewing, since the
        holder needs its lease to end the run CANCELLED.
        """

        def renewed(renewal: RenewResult) -> None:
            drive.renewal = renewal
            if renewal.cancel_requested_by is not None and drive.cancelled_by is None:
                self._cancel(drive, renewal.cancel_requested_by)

        return self.keeper.hold(
            drive.run.lease, drive.fence, lambda reason: self._lose(drive, reason), renewed
        )

    def _cancel(self, drive: Drive, by: str) -> None:
        """A heartbeat found the run asked to stop: stop acting, then abort ADK's invocation.

        The fence refuses every new outside act at once (a journaled tool
        that has not acted raises :class:`~durable_adk.errors.RunCancelled`);
        acts already under way, with the recording of their result, and a
        saga's compensation (the fence's busy sections) are let finish, for
        at most :attr:`cancel_grace` seconds; then ADK's abort signal stops the
        invocation (it answers the calls left open with an abort error). The
        drive then ends the run CANCELLED.
        """
        run = drive.run
        drive.cancelled_by = by
        drive.fence.stop(f"cancelled by {by}")
        logger.info("run %s (epoch %d): cancelled by %s; stopping it", run.run_id, run.epoch, by)

        async def abort_when_idle() -> None:
            try:
                await asyncio.wait_for(drive.fence.idle(), timeout=self.cancel_grace)
            except TimeoutError:
                logger.warning(
                    "run %s: work still under way %.1fs after the cancel; aborting it anyway",
                    run.run_id,
                    self.cancel_grace,
                )
            drive.abort.set()
            if drive.on_abort is not None:  # ADK's own Runner drives it (DurableRunsPlugin)
                drive.on_abort()

        drive.stopper = asyncio.create_task(
            abort_when_idle(), name=f"durable-adk-stop-{run.run_id}"
        )

    def _lose(self, drive: Drive, reason: str) -> None:
        """The lease is lost: the fence is lost for good and the drive is cancelled."""
        run = drive.run
        if drive.fence.lost is not None:
            return  # the deadline's timer and the renewal loop may both find it
        drive.fence.lose(reason)
        self.metrics.lease_lost()
        run_event(
            logger,
            logging.WARNING,
            "lease_lost",
            run_id=run.run_id,
            epoch=run.epoch,
            attempt=run.attempts,
            reason=reason,
            then="drive cancelled",
        )
        drive.stop("fenced")
