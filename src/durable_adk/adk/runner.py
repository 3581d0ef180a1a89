"""DurableRunner: ADK's Runner, durable. A facade over the one run path.

What it guarantees (each part lives in one place, named here):

* A run is on the ledger (with its request and the invocation id we chose)
  before ADK is called, so a crash at any instant leaves a row the sweeper
  finds; a continuation of a cancelled invocation is refused, and each pause
  takes one answer (:meth:`durable_adk.adk.runs.path.RunPath.submit`).
* One run per session drives at a time across every worker; a second run for
  a busy session waits ``QUEUED``, in order, woken when the run ahead ends
  (:meth:`~durable_adk.adk.runs.path.RunPath.wait_for_turn`).
* A drive runs in a task of its own and hands its events to the caller
  lock-step, under a lease the worker's one heartbeat renews; with barrier
  commits nothing reaches the caller before it is stored; a lost lease
  cancels the drive and the caller gets :class:`~durable_adk.errors.Fenced`
  (:mod:`durable_adk.adk.runs.driver`).
* A caller that stops reading detaches from the drive: the run goes on to its
  end in this process; :meth:`DurableRunner.aclose` waits for it.
* Every ending (DONE, PAUSED, handed back, PARKED, FAILED, CANCELLED) is
  decided by one pure function and recorded, with its bookkeeping, by one
  function (:mod:`durable_adk.adk.runs.ending`).

The public surface is ADK's Runner's (``app=`` or ``agent=``,
``session_service``, ``artifact_service``, ``memory_service``,
``credential_service``, ``plugin_manager``, ``run_async`` with ADK 2.13's
arguments) plus :meth:`run`, :meth:`submit`, :meth:`cancel` and the background
loops of ``async with``. Apps run with ADK resumability on (an App without it
gets it, logged once): a re-driven invocation then skips finished steps. An
in-memory session service is refused: nothing would survive the crash we are
here for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

from google.adk.agents import BaseAgent
from google.adk.agents.run_config import RunConfig
from google.adk.apps import App
from google.adk.artifacts.base_artifact_service import BaseArtifactService
from google.adk.auth.credential_service.base_credential_service import BaseCredentialService
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.memory.base_memory_service import BaseMemoryService
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.plugins.plugin_manager import PluginManager
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.workflow import BaseNode
from google.genai import types

from durable_adk import errors
from durable_adk.adk.commits.barrier import CommitMode
from durable_adk.adk.eventlog.classify import INTERIM_KEY as INTERIM_KEY
from durable_adk.adk.eventlog.classify import Classification
from durable_adk.adk.eventlog.live import LiveEvents
from durable_adk.adk.loops.background import Background
from durable_adk.adk.loops.every import BackgroundSettings
from durable_adk.adk.runs import operators
from durable_adk.adk.runs.admission import Admission
from durable_adk.adk.runs.ending import LAST_EVENTS_KEPT as LAST_EVENTS_KEPT
from durable_adk.adk.runs.path import RunPath, only_answers
from durable_adk.adk.runs.policy import DEFAULT_POLICY, causes
from durable_adk.adk.runs.policy import TRANSIENT_ERRORS as TRANSIENT_ERRORS
from durable_adk.adk.runs.policy import RetryPolicy as RetryPolicy
from durable_adk.adk.runs.policy import RunPolicy as RunPolicy
from durable_adk.adk.runs.policy import SyncTools as SyncTools
from durable_adk.adk.runs.policy import model_error_is_retryable as model_error_is_retryable
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.adk.shapes import optional_imports
from durable_adk.faults import crash_point
from durable_adk.fencing.fence import RunFence
from durable_adk.fencing.leases import LEASE_MARGIN_FRACTION as LEASE_MARGIN_FRACTION
from durable_adk.fencing.leases import LeaseKeeper
from durable_adk.metrics import NO_METRICS, Metrics
from durable_adk.schedules import Schedule
from durable_adk.tables.ledger import Run, RunLedger, RunStatus
from durable_adk.tables.sweeps import sweepers_seen

logger = logging.getLogger("durable_adk.runner")

optional_imports.remember_missing()


E = TypeVar("E", bound=BaseException)


def cause_of(exc: BaseException, kind: type[E]) -> E | None:
    """The ``kind`` error behind ``exc``, if any (ADK's node runner wraps agent errors)."""
    return next((e for e in causes(exc) if isinstance(e, kind)), None)


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
        app: App | BaseAgent | BaseNode | None = None,
        store: Any,
        agent: BaseAgent | BaseNode | None = None,
        node: BaseNode | None = None,
        auto_create_session: bool = True,
        worker_id: str | None = None,
        lease: float = DEFAULT_POLICY.lease,
        app_name: str | None = None,
        session_service: BaseSessionService | None = None,
        max_attempts: int = DEFAULT_POLICY.max_attempts,
        backoff: float = DEFAULT_POLICY.backoff,
        idempotent_tools: Iterable[str] = (),
        queue_poll: float = DEFAULT_POLICY.queue_poll,
        queue_poll_max: float | None = None,
        metrics: Metrics = NO_METRICS,
        retry_policy: RetryPolicy | None = None,
        artifact_service: BaseArtifactService | None = None,
        memory_service: BaseMemoryService | None = None,
        credential_service: BaseCredentialService | None = None,
        plugins: Iterable[BasePlugin] = (),
        run_config: RunConfig | None = None,
        cancel_grace: float = DEFAULT_POLICY.cancel_grace,
        interrupt_deadlines: Mapping[str, float] | None = None,
        background: bool | BackgroundSettings = True,
        commits: CommitMode = "barrier",
        admission: Admission | None = None,
        policy: RunPolicy | None = None,
        schedules: Iterable[Schedule] | None = None,
        version: str | None = None,
        compatible_versions: Iterable[str] = (),
        sync_tools: SyncTools = "pool",
    ) -> None:
        """Creates the runner.

        Args:
            app: An ADK App, or a bare root agent, Workflow or BaseNode (an
                App is made for it). An App without resumability gets it
                turned on (logged once): durable runs depend on it.
            store: The open durable store.
            agent: ADK Runner's other way to name the root; ``node`` too
                (exactly one of ``app``, ``agent`` and ``node``).
            node: A bare BaseNode root, as ADK's Runner takes it.
            auto_create_session: Create a missing session at the run's start
                (the default, in the same unit of work as the run's row);
                False raises ADK's ``SessionNotFoundError`` instead, as ADK's
                Runner does by default.
            worker_id: This worker's name on the ledger (default: host:pid:random).
            lease: Lease length in seconds (see :class:`RunPolicy`).
            app_name: The app name for a bare agent (default: the agent's name).
            session_service: A DurableSessionService over ``store`` (default: one is made).
            max_attempts: Recovery claims before a run is parked.
            backoff: First back-off between recovery attempts, doubled each time.
            idempotent_tools: Tools safe to run again after a crash (re-driven
                rather than parked when their call is unanswered).
            queue_poll: The first back-off of a queued run's claim attempts.
            queue_poll_max: The longest back-off between two claim attempts.
            metrics: Where run outcomes, lost leases and run spans go.
            retry_policy: Which drive errors are transient (the run is handed
                back for recovery) rather than terminal (FAILED); default
                ``RetryPolicy()``.
            artifact_service: ADK's artifact service for the app's tools
                (default: a :class:`DurableArtifactService` on ``store``, so a
                recovered run finds what its earlier steps saved).
            memory_service: ADK's memory service (``search_memory``), if any.
            credential_service: ADK's credential service, if any.
            plugins: ADK plugins, added after the App's own (the barrier
                plugin comes before all of them).
            run_config: The RunConfig of every drive of this runner, recovered
                ones included; a call of :meth:`run_async` may pass its own.
                Sync tools run on ADK's tool thread pool unless it sets
                ``tool_thread_pool_config`` itself (or ``sync_tools="loop"``).
            cancel_grace: How long a cancelled run's acts under way may finish.
            interrupt_deadlines: Seconds an interrupt waits for a person before
                its default outcome (deny) applies, by tool name (``"*"``: any).
            background: What ``async with`` this runner starts: True (the
                default) runs the app's background loops for the block; a
                :class:`BackgroundSettings` sets their cadence; False runs none.
            schedules: The app's schedules (:class:`~durable_adk.schedules.Schedule`):
                the background loops fire their ticks, each once across every
                worker (docs/time.md). None (the default): this process has no
                say on the app's schedules and its loops leave them alone (no
                poll); a list, even empty, is the whole set: stored schedules
                of the app not in it are orphaned.
            commits: ``"barrier"`` (default): a drive's events are committed
                together at barriers; ``"per_event"``: one unit per event.
            admission: How many drives run ADK at once (default: a limit set
                by the event loop's lag).
            policy: A :class:`RunPolicy`; when given, ``lease``,
                ``max_attempts``, ``backoff``, ``queue_poll``,
                ``queue_poll_max`` and ``cancel_grace`` are taken from it.
            version: The app's version (a PEP 440 string such as ``"1.4.0"``),
                recorded on every run started here with the fingerprint of
                the app's definition; this worker then claims only runs it
                serves (docs/deploying.md). None: unversioned.
            compatible_versions: Earlier versions whose runs this code can
                continue (the ``compatible`` policy); empty: ``pinned``.
            sync_tools: Where synchronous tools and FunctionNodes run:
                ``"pool"`` (default), ADK's tool thread pool, so one that
                blocks stalls only itself; ``"loop"``, the event loop, as ADK's
                Runner does by default: no thread hop (about 0.25 ms a run,
                BENCHMARKS.md), but a tool that blocks stalls every drive of
                the worker until it returns (their leases are kept by the
                lease watchdog meanwhile). A ``run_config`` that sets
                ``tool_thread_pool_config`` decides for itself.

        Raises:
            durable_adk.errors.InvalidArgument: Neither or both of ``app`` and
                ``agent``, a bad policy value, a bad ``sync_tools``, a session service that is not
                durable, or an AgentTool's child holding a long-running tool
                or a saga.
            durable_adk.errors.InvalidVersion: ``version`` or a compatible
                version is not a PEP 440 version, or a compatible version is
                not older than ``version``.
        """
        given = [
            f"{k}={type(v).__name__}"
            for k, v in (("app", app), ("agent", agent), ("node", node))
            if v is not None
        ]
        if len(given) > 1:
            raise errors.InvalidArgument(
                f"Only one of app, agent, or node may be provided, but got: {', '.join(given)}. "
                "Pass exactly one to DurableRunner()."
            )
        root = app if app is not None else agent if agent is not None else node
        if root is None:
            raise errors.InvalidArgument(
                "One of app, agent, or node must be provided. Got none. "
                "Pass exactly one to DurableRunner()."
            )
        if isinstance(root, App) and app_name and app_name != root.name:
            root = root.model_copy(update={"name": app_name})  # as ADK: app_name overrides
        if policy is None:
            policy = RunPolicy(
                lease=lease,
                max_attempts=max_attempts,
                backoff=backoff,
                queue_poll=queue_poll,
                queue_poll_max=queue_poll_max,
                cancel_grace=cancel_grace,
            )
        self.path = RunPath(
            app=root,
            store=store,
            worker_id=worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}",
            policy=policy,
            app_name=app_name,
            session_service=session_service,
            idempotent_tools=idempotent_tools,
            metrics=metrics,
            retry_policy=retry_policy,
            artifact_service=artifact_service,
            memory_service=memory_service,
            credential_service=credential_service,
            plugins=plugins,
            run_config=run_config,
            interrupt_deadlines=interrupt_deadlines,
            commits=commits,
            admission=admission,
            schedules=schedules,
            version=version,
            compatible_versions=compatible_versions,
            sync_tools=sync_tools,
        )
        if background is True:
            background = BackgroundSettings()
        self.background_settings: BackgroundSettings | None = background or None
        self._own_background: Background | None = None  # the loops ``async with`` started
        self._sweepers_checked = False
        self.auto_create_session = auto_create_session

    # ------------------------------------------------- ADK Runner's attributes

    @property
    def app(self) -> App:
        """The App driven (resumable, barrier plugin first)."""
        return self.path.app

    @property
    def app_name(self) -> str:
        """The ADK app's name."""
        return self.path.app_name

    @property
    def agent(self) -> Any:
        """The app's root agent (or Workflow), as ADK's Runner names it."""
        return self.path.app.root_agent

    @property
    def session_service(self) -> DurableSessionService:
        """The durable session service (ADK Runner's attribute)."""
        return self.path.sessions

    @property
    def sessions(self) -> DurableSessionService:
        """The durable session service."""
        return self.path.sessions

    @property
    def artifact_service(self) -> BaseArtifactService | None:
        """The artifact service the app's tools use."""
        return self.path.adk.artifact_service

    @property
    def memory_service(self) -> BaseMemoryService | None:
        """The memory service, if any."""
        return self.path.adk.memory_service

    @property
    def credential_service(self) -> BaseCredentialService | None:
        """The credential service, if any."""
        return self.path.adk.credential_service

    @property
    def plugin_manager(self) -> PluginManager:
        """ADK's plugin manager of the drives (the barrier plugin first)."""
        return self.path.adk.plugin_manager

    @property
    def adk(self) -> Any:
        """ADK's Runner that the drives use."""
        return self.path.adk

    # ---------------------------------------------------- the path's parts

    @property
    def store(self) -> Any:
        """The durable store."""
        return self.path.store

    @property
    def ledger(self) -> RunLedger:
        """The run ledger."""
        return self.path.ledger

    @property
    def worker_id(self) -> str:
        """This worker's name on the ledger."""
        return self.path.worker_id

    @property
    def policy(self) -> RunPolicy:
        """Leases, attempts, back-off, queue polling and cancel grace."""
        return self.path.policy

    @property
    def lease_seconds(self) -> float:
        """The lease of this runner's runs."""
        return self.path.policy.lease

    @property
    def retry_policy(self) -> RetryPolicy:
        """Which drive errors are transient."""
        return self.path.retry_policy

    @property
    def run_config(self) -> RunConfig:
        """The RunConfig of every drive."""
        return self.path.run_config

    @property
    def metrics(self) -> Metrics:
        """Where run outcomes go."""
        return self.path.metrics

    @property
    def keeper(self) -> LeaseKeeper:
        """The worker's heartbeat."""
        return self.path.keeper

    @property
    def admission(self) -> Admission:
        """How many drives run ADK at once."""
        return self.path.admission

    @property
    def idempotent_tools(self) -> frozenset[str]:
        """Tools safe to run again after a crash (declared, journaled or marked)."""
        return self.path.idempotent_tools

    @property
    def node_kinds(self) -> Any:
        """A Workflow root's node kinds (None for other roots)."""
        return self.path.node_kinds

    @property
    def is_workflow(self) -> bool:
        """Whether the app's root is a Workflow graph."""
        return self.path.is_workflow

    @property
    def root_agent_name(self) -> str:
        """The name of the app's root agent."""
        return self.path.root_agent_name

    @property
    def live(self) -> LiveEvents:
        """Followers of a session's events in this process."""
        return self.path.live

    @property
    def background(self) -> Background | None:
        """The background loops running over this runner, if any."""
        return cast("Background | None", self.path.background)

    @property
    def detached_runs(self) -> list[str]:
        """Ids of the runs driven on although their caller stopped reading."""
        return self.path.detached_runs

    def classify(self, events: Sequence[Event], invocation_id: str | None) -> Classification:
        """The classifier's verdict on an invocation of this app (see RunPath.classify)."""
        return self.path.classify(events, invocation_id)

    def fence(self, run_id: str, epoch: int) -> RunFence | None:
        """The fence of this runner's live drive of ``run_id`` at ``epoch``, if any."""
        return self.path.driver.fence(run_id, epoch)

    # ----------------------------------------------------------------- runs

    async def run(
        self,
        *,
        user_id: str,
        session_id: str,
        message: types.Content | str,
        invocation_id: str | None = None,
        run_config: RunConfig | None = None,
        state_delta: dict[str, Any] | None = None,
        abort_signal: asyncio.Event | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Runs one turn durably and yields its events.

        The ledger row is written first; the run then waits its turn in the
        session's queue, drives ADK under a renewed lease, and ends through
        the one ending.

        Args:
            user_id: The session's user.
            session_id: The session (created if missing).
            message: The user's message; or, with ``invocation_id``, a message
                made only of function responses answering that invocation's
                long-running calls (same id and name as each call).
            invocation_id: Continue this existing invocation instead of
                starting a new one.
            run_config: This drive's RunConfig (default: the runner's).
            state_delta: State changes applied with the message, as in ADK.
            abort_signal: Set it to cancel the run's invocation (ADK 2.13's
                ``abort_signal``): the run ends CANCELLED, and the invocation
                takes no continuation afterwards.

        Raises:
            durable_adk.errors.Fenced: This worker lost the run to another.
            durable_adk.errors.RunCancelled: The run was cancelled.
            durable_adk.errors.InvalidArgument: A bad message or continuation.
            durable_adk.errors.InvocationCancelled: The invocation it
                continues was cancelled (nothing written).
            durable_adk.errors.NotFound: ``invocation_id`` is not in the session.
            durable_adk.errors.Conflict: The message answers a pause that was
                already answered (each pause takes one answer); nothing is written.
        """
        if state_delta:
            self.path.store.limits.check(state_delta, "the run's state_delta")
        await self._require_session(user_id, session_id)
        run, content = await self.path.submit(
            user_id=user_id, session_id=session_id, message=message, invocation_id=invocation_id
        )
        driven = self._drive_submitted(
            run,
            content,
            resume=invocation_id is not None,
            run_config=run_config,
            state_delta=state_delta,
            abort_signal=abort_signal,
        )
        async with contextlib.aclosing(driven) as events:
            async for event in events:
                yield event

    async def _drive_submitted(
        self,
        run: Run,
        content: types.Content,
        *,
        resume: bool,
        run_config: RunConfig | None,
        state_delta: dict[str, Any] | None,
        abort_signal: asyncio.Event | None,
        yield_user_message: bool = False,
    ) -> AsyncGenerator[Event, None]:
        """The rest of :meth:`run` after the submit: wait for the turn, drive, end."""
        await self.warn_if_no_sweeper()
        path = self.path
        # A run claimed as it was recorded holds its session from now on: pinned
        # at once (no await since the submit put it in the cache), so a burst of
        # thousands of submissions does not evict it before its drive pins it too.
        key = (run.app_name, run.user_id, run.session_id)
        held = run.status is RunStatus.RUNNING and run.owner == self.worker_id
        if held:
            path.sessions.pin(key)  # pins nest: the drive's own pin overlaps this one
        watcher = self._watch_abort(run, abort_signal)
        try:
            claimed = await path.wait_for_turn(run)
            crash_point("runner.before_first_event")
            driven = path.drive(
                claimed,
                content,
                resume=resume,
                run_config=run_config,
                state_delta=state_delta,
                yield_user_message=yield_user_message,
            )
            # Closed here, not by whoever drops this generator: an early exit of the
            # caller ends the drive (and its heartbeat) at once.
            async with contextlib.aclosing(driven) as events:
                async for event in events:
                    yield event
        finally:
            if watcher is not None:
                watcher.cancel()
            if held:
                path.sessions.unpin(key)

    async def _require_session(self, user_id: str, session_id: str) -> None:
        """With ``auto_create_session=False``, a missing session is ADK's SessionNotFoundError."""
        if self.auto_create_session:
            return
        found = await self.path.sessions.get_session(
            app_name=self.app_name, user_id=user_id, session_id=session_id
        )
        if found is None:
            raise SessionNotFoundError(f"Session not found: {session_id}")

    def _watch_abort(self, run: Run, signal: asyncio.Event | None) -> asyncio.Task[None] | None:
        """Cancels ``run`` when the caller sets its abort signal."""
        if signal is None:
            return None

        async def watch() -> None:
            await signal.wait()
            # Stopped here at once (no await before it): a drive about to end
            # ends CANCELLED, as ADK's invocation would stop at its next check.
            self.path.driver.cancel_local(run.run_id, None, "caller")
            await self.cancel(run.run_id, by="caller", reason="abort_signal set")

        return asyncio.create_task(watch(), name=f"durable-adk-abort-{run.run_id}")

    async def run_async(
        self,
        *,
        user_id: str,
        session_id: str,
        invocation_id: str | None = None,
        new_message: types.Content | None = None,
        state_delta: dict[str, Any] | None = None,
        run_config: RunConfig | None = None,
        yield_user_message: bool = False,
        abort_signal: asyncio.Event | None = None,
    ) -> AsyncGenerator[Event, None]:
        """ADK's ``Runner.run_async``, durably: the call sites of an ADK app stay as they are.

        The arguments mean what they mean to ADK 2.13's Runner:
        ``invocation_id`` with ``new_message`` answers an invocation's
        paused calls; ``invocation_id`` alone resumes it from its stored
        events; ``yield_user_message`` yields the stored user message first;
        ``abort_signal`` cancels the run's invocation when set (see :meth:`run`).

        Raises:
            ValueError: Neither ``new_message`` nor ``invocation_id`` (as ADK).
        """
        if new_message is None and invocation_id is None:
            raise errors.InvalidArgument(
                "run_async needs new_message, or invocation_id to resume an invocation"
            )
        path = self.path
        if state_delta:
            path.store.limits.check(state_delta, "the run's state_delta")
        await self._require_session(user_id, session_id)
        chosen: str | None = None
        if new_message is None:
            assert invocation_id is not None
            run, content = await path.submit_resume(
                user_id=user_id, session_id=session_id, invocation_id=invocation_id
            )
        else:
            if invocation_id is None and only_answers(new_message):
                # As ADK: answers to paused calls continue the invocation that made them.
                invocation_id = await path.invocation_of_answers(user_id, session_id, new_message)
            elif invocation_id is not None and not only_answers(new_message):
                # As ADK: a new message under an invocation id the caller chose.
                chosen, invocation_id = invocation_id, None
                await path.ensure_session(user_id, session_id)
            run, content = await path.submit(
                user_id=user_id,
                session_id=session_id,
                message=new_message,
                invocation_id=invocation_id,
                chosen_invocation_id=chosen,
            )
        driven = self._drive_submitted(
            run,
            content,
            resume=invocation_id is not None,
            run_config=run_config,
            state_delta=state_delta,
            abort_signal=abort_signal,
            yield_user_message=yield_user_message,
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
        run_id: str | None = None,
    ) -> tuple[Run, types.Content]:
        """Puts a run on the ledger (the first step of :meth:`run`; see RunPath.submit).

        With ``run_id`` chosen by the caller, a submit sent again (its answer
        was lost) records nothing and returns the run the first one recorded,
        marked ``replayed``: drive only a run that is not.
        """
        return await self.path.submit(
            user_id=user_id,
            session_id=session_id,
            message=message,
            invocation_id=invocation_id,
            run_id=run_id,
        )

    async def wait_for_turn(self, run: Run) -> Run:
        """Waits until the QUEUED run heads its session's queue, then claims it."""
        return await self.path.wait_for_turn(run)

    def drive(
        self,
        run: Run,
        message: types.Content,
        *,
        resume: bool,
        classification: str | None = None,
        run_config: RunConfig | None = None,
        state_delta: dict[str, Any] | None = None,
        answer_first: tuple[str, ...] = (),
    ) -> AsyncGenerator[Event, None]:
        """Drives a claimed run to its end and yields its events (see RunPath.drive)."""
        return self.path.drive(
            run,
            message,
            resume=resume,
            classification=classification,
            run_config=run_config,
            state_delta=state_delta,
            answer_first=answer_first,
        )

    async def cancel(
        self, run_id: str, *, by: str = "library", reason: str | None = None
    ) -> operators.Outcome:
        """Cancels a run of this app; safe to call twice. The answer says where the run stands.

        A QUEUED or PAUSED run is CANCELLED at once. A RUNNING one is stopped
        by its owner: at once when this runner drives it, else at the owner's
        next heartbeat, or by recovery when the owner is dead. New outside
        acts are refused, acts under way may finish (``cancel_grace``), ADK's
        invocation is aborted and the run ends CANCELLED. A cancelled
        invocation takes no continuation afterwards (answers and job results
        are refused, its open jobs are cancelled); a QUEUED answer run
        cancelled before it drove gives its answer claim back instead.

        Raises:
            durable_adk.errors.NotFound: No run of this app has this id.
            durable_adk.errors.InvalidArgument: A bad ``by`` or ``reason``.
        """
        return await self.path.cancel(run_id, by=by, reason=reason)

    # ------------------------------------------------------------ lifetime

    async def aclose(self, *, grace: float | None = None) -> None:
        """Waits for the detached drives to end, cancelling those still running after ``grace``.

        Safe to call twice; new drives may still start afterwards.
        """
        await self.path.aclose(grace=grace)

    async def close(self) -> None:
        """ADK Runner's ``close``: stops the loops this runner started and its drives,
        then closes ADK's side (toolsets and plugins) as ADK's Runner does."""
        await self.__aexit__(None, None, None)
        await self.path.adk.close()

    async def __aenter__(self) -> DurableRunner:
        """Starts the app's background loops (unless ``background=False``)."""
        if self.background_settings is not None and self.path.background is None:
            own = Background(self.path, self.background_settings)
            await own.start()
            self._own_background = own
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Stops the loops this runner started, then waits for its detached drives."""
        own, self._own_background = self._own_background, None
        if own is None:
            await self.aclose()
            return
        await own.stop()
        await self.aclose(grace=own.settings.drain_seconds)

    async def warn_if_no_sweeper(self) -> bool:
        """Says in the log, once per runner, when no recovery sweeper of its app runs anywhere.

        Returns:
            True if it warned.
        """
        if self._sweepers_checked or self.path.background is not None:
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
