"""The one run path: every run is submitted, waits its turn, is driven and ends here.

Whoever starts a run (a caller of DurableRunner, the HTTP API, recovery, the
job resumer, an answer from the inbox or the deadline sweep, ADK's own Runner
under ``DurableRunsPlugin``) goes through one :class:`RunPath`:

* :meth:`RunPath.submit` records the run on the ledger before anything drives
  it. A continuation (a message of function responses for an invocation) is
  taken only while its invocation is open: a cancelled invocation refuses it
  (:class:`~durable_adk.errors.InvocationCancelled`, nothing written), and
  each pause takes one answer (answer claims, written with the run).
* :meth:`RunPath.wait_for_turn` waits until the run heads its session's queue
  and claims it.
* :meth:`RunPath.drive` (events for a reader) and :meth:`RunPath.run_to_end`
  (no reader) drive it through the one driver
  (:class:`~durable_adk.adk.runs.driver.Driver`), which returns an
  :class:`~durable_adk.adk.runs.ending.Outcome`.
* Every ending is decided by :func:`durable_adk.adk.runs.ending.decide` and
  recorded by :func:`durable_adk.adk.runs.ending.record`, with its bookkeeping.

DurableRunner is the facade over this path: configuration and ADK's Runner
surface. The background loops (recovery, resumer, inbox deadlines) take the
path itself, so nothing here imports them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import time
import warnings
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from google.adk.agents import BaseAgent, LlmAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.agents.run_config import RunConfig
from google.adk.apps import App, ResumabilityConfig
from google.adk.artifacts.base_artifact_service import BaseArtifactService
from google.adk.auth.credential_service.base_credential_service import BaseCredentialService
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events.event import Event
from google.adk.memory.base_memory_service import BaseMemoryService
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions.session import Session
from google.adk.workflow import BaseNode
from google.genai import types

from durable_adk import errors
from durable_adk.adk.commits.barrier import CommitMode, check_commit_mode, may_look_ahead
from durable_adk.adk.commits.drive import BarrierPlugin, Drive, End, trust_from
from durable_adk.adk.eventlog.classify import Classification, check_answers, classify
from durable_adk.adk.eventlog.live import LiveEvents
from durable_adk.adk.runs import operators
from durable_adk.adk.runs.admission import Admission
from durable_adk.adk.runs.driver import Driver, off_the_loop
from durable_adk.adk.runs.ending import Outcome
from durable_adk.adk.runs.fingerprint import Known, fingerprint
from durable_adk.adk.runs.policy import RetryPolicy, RunPolicy, SyncTools, check_sync_tools
from durable_adk.adk.services.artifacts import DurableArtifactService
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.adk.shapes import agent_tree
from durable_adk.adk.shapes.marks import is_idempotent
from durable_adk.adk.shapes.parallel import refuse_parallel_pauses
from durable_adk.adk.tools import agent_tools
from durable_adk.adk.tools.journaling import is_journaled
from durable_adk.adk.tools.long_running import long_running_tools
from durable_adk.adk.tools.result_limits import ResultLimitsPlugin
from durable_adk.adk.tools.workflow_nodes import guard_function_nodes, node_kinds
from durable_adk.fencing.fence import RunFence
from durable_adk.fencing.leases import LeaseKeeper
from durable_adk.limits import MESSAGE_ENVELOPE
from durable_adk.metrics import NO_METRICS, Metrics
from durable_adk.schedules import Schedule
from durable_adk.store.outage import Patience, using_patience
from durable_adk.tables.interrupts import InterruptTable
from durable_adk.tables.ledger import Run, RunLedger, RunStatus
from durable_adk.tables.versions import VersionTable
from durable_adk.versions import Serving

logger = logging.getLogger("durable_adk.runner")

DRAIN_CHECK_EVERY = 2.0
"""Seconds a worker trusts what it read of its version's drain before reading it again."""

_warned_resumability: set[str] = set()


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


def journaled_tool_names(root: object) -> frozenset[str]:
    """Names of the tools anywhere in an app's tree that are safe to re-drive.

    Journaled tools (the journal makes a re-run harmless) and tools marked
    :func:`~durable_adk.adk.shapes.marks.idempotent`, found by the one tree walk
    (:mod:`durable_adk.adk.shapes.agent_tree`: sub-agents, Workflow graph nodes,
    AgentTool children, static toolsets), and each AgentTool whose child
    reaches only such tools (:func:`durable_adk.adk.tools.agent_tools.safe_agent_tools`).
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


def durable_app(
    app: App | BaseAgent | BaseNode, *, app_name: str | None, plugins: Sequence[BasePlugin]
) -> App:
    """The App a durable run drives: resumable, with the barrier plugin first.

    A bare root (an agent, a Workflow or any BaseNode) gets an App; an App
    without resumability gets it turned on (logged once per app: durable runs
    depend on it, docs/runs.md). The barrier plugin comes before every other
    plugin (ADK runs plugin callbacks in order and stops at the first that
    answers), so no plugin acts for an event that is not yet stored; the
    result limits plugin (:mod:`durable_adk.adk.tools.result_limits`) comes
    next, so it sees each tool's own result.
    """
    with warnings.catch_warnings():
        # ADK flags resumability as experimental; durable runs depend on it by design.
        warnings.simplefilter("ignore", UserWarning)
        resumable = ResumabilityConfig(is_resumable=True)
    if not isinstance(app, App):
        app = App(name=app_name or app.name, root_agent=app, resumability_config=resumable)
    elif not (app.resumability_config and app.resumability_config.is_resumable):
        if app.name not in _warned_resumability:
            _warned_resumability.add(app.name)
            logger.info(
                "app %r has no ResumabilityConfig(is_resumable=True): durable runs turn it on "
                "(a re-driven invocation skips finished steps; docs/runs.md)",
                app.name,
            )
        app = app.model_copy(update={"resumability_config": resumable})
    first = (BarrierPlugin, ResultLimitsPlugin)
    ours = [p for p in plugins if not isinstance(p, first)]
    barrier = [p for p in plugins if isinstance(p, BarrierPlugin)]
    limits = [p for p in plugins if isinstance(p, ResultLimitsPlugin)]
    theirs = [p for p in (app.plugins or []) if not isinstance(p, first)]
    for plugin in barrier:
        plugin.see_plugins([*theirs, *ours])
    return app.model_copy(update={"plugins": [*barrier, *limits, *theirs, *ours]})


def only_answers(message: types.Content) -> bool:
    """Whether ``message`` is made only of function responses (the answers to paused calls)."""
    parts = message.parts or []
    return bool(parts) and all(p.function_response for p in parts)


class RunningLoops(Protocol):
    """The background loops over a path, as the path knows them: running, and stoppable.

    :class:`~durable_adk.adk.loops.background.Background` puts itself on
    :attr:`RunPath.background` while it runs. The loops sit above the path and
    import it; the path names them by this protocol, never by import.
    """

    async def stop(self) -> None:
        """Stops the loops."""


class HasRunPath(Protocol):
    """Anything that drives through a run path (DurableRunner, or the path itself)."""

    @property
    def path(self) -> RunPath: ...


class RunPath:
    """Submit, wait for turn, drive and end: the one path of every run of one app."""

    def __init__(
        self,
        *,
        app: App | BaseAgent | BaseNode,
        store: Any,
        worker_id: str,
        policy: RunPolicy,
        app_name: str | None = None,
        session_service: Any = None,
        idempotent_tools: Iterable[str] = (),
        metrics: Metrics = NO_METRICS,
        retry_policy: RetryPolicy | None = None,
        artifact_service: BaseArtifactService | None = None,
        memory_service: BaseMemoryService | None = None,
        credential_service: BaseCredentialService | None = None,
        plugins: Iterable[BasePlugin] = (),
        run_config: RunConfig | None = None,
        interrupt_deadlines: Mapping[str, float] | None = None,
        commits: CommitMode = "barrier",
        admission: Admission | None = None,
        schedules: Iterable[Schedule] | None = None,
        version: str | None = None,
        compatible_versions: Iterable[str] = (),
        sync_tools: SyncTools = "pool",
    ) -> None:
        """Builds the path; DurableRunner's arguments of the same names are documented there."""
        commits = check_commit_mode(commits)
        self.sync_tools = check_sync_tools(sync_tools)
        extra: list[BasePlugin] = [BarrierPlugin()] if commits == "barrier" else []
        extra.append(ResultLimitsPlugin(store.limits))
        app = durable_app(app, app_name=app_name, plugins=[*extra, *plugins])
        # Never an effect unguarded: shapes whose pauses or sagas would live in
        # an AgentTool's throw-away session are refused here, loudly.
        agent_tools.refuse_unguardable(app.root_agent)
        # Two ParallelAgent branches that could both pause: the second answer
        # would be lost (ADK ends the other branches on the first), so refused.
        refuse_parallel_pauses(app.root_agent)
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
        self.worker_id = worker_id
        self.policy = policy
        self.serving = Serving.declare(
            version,
            fingerprint=fingerprint(app.root_agent) if version is not None else None,
            compatible=compatible_versions,
        )
        """The version this path runs and those whose runs it may claim (docs/deploying.md)."""
        self._drained = False
        self._drain_checked_at = -DRAIN_CHECK_EVERY  # read at the first new invocation
        self.ledger = RunLedger(
            store,
            lease_seconds=policy.lease,
            backoff_seconds=policy.backoff,
            max_attempts=policy.max_attempts,
            serving=self.serving,
        )
        self.idempotent_tools = frozenset(idempotent_tools) | journaled_tool_names(app.root_agent)
        self.node_kinds = node_kinds(app.root_agent)
        if self.node_kinds is not None:
            guard_function_nodes(app.root_agent)
        self.keeper = LeaseKeeper(self.ledger, self.worker_id)
        self.metrics = metrics
        self.retry_policy = retry_policy or RetryPolicy()
        self.run_config = off_the_loop(run_config or RunConfig(), self.sync_tools)
        self.interrupts = InterruptTable(store)
        self.interrupt_deadlines = dict(interrupt_deadlines or {})
        self.job_tools = frozenset(long_running_tools(app.root_agent))
        """The job-backed tools (sleep among them): their calls wait on jobs, not on a person."""
        self.commits: CommitMode = commits
        self.admission = admission if admission is not None else Admission()
        if self.admission.pressure is None:
            self.admission.pressure = store.take_pressure
        # ADK may run ahead of the caller between barriers only when no code
        # of the app's own runs there (durable_adk.adk.commits.barrier.may_look_ahead).
        self.look_ahead = commits == "barrier" and may_look_ahead(app.root_agent)
        self.adk = _InvocationIdRunner(
            app=app,
            session_service=session_service,
            artifact_service=(
                artifact_service if artifact_service is not None else DurableArtifactService(store)
            ),
            memory_service=memory_service,
            credential_service=credential_service,
        )
        self.driver = Driver(self)
        self.schedules = None if schedules is None else tuple(schedules)
        """The app's schedules (fired by the background loops' poller); None: this
        process declares none and leaves the app's schedules to the processes that do."""
        self.background: RunningLoops | None = None
        """The background loops running over this path, if any (set by
        :class:`~durable_adk.adk.loops.background.Background`)."""

    @property
    def path(self) -> RunPath:
        """The path itself (so the loops take a path or a DurableRunner alike)."""
        return self

    # ------------------------------------------------------------ what it knows

    @property
    def app_name(self) -> str:
        """The ADK app's name."""
        return self.app.name

    @property
    def root_agent_name(self) -> str:
        """The name of the app's root agent (the classifier's done test needs it)."""
        root = self.app.root_agent
        if root is None:
            raise errors.InvalidArgument("the App has no root agent")
        return root.name

    @functools.cached_property
    def known(self) -> Known:
        """The names the app's code knows (agents, nodes, tools, sagas), for drift detection."""
        return Known.of(self.app.root_agent)

    @property
    def is_workflow(self) -> bool:
        """Whether the app's root is a Workflow graph (its nodes' checkpoints are read)."""
        return self.node_kinds is not None

    @property
    def live(self) -> LiveEvents:
        """Followers of a session's events in this process (stored and partial)."""
        return self.sessions.live

    @property
    def lease_seconds(self) -> float:
        """The lease of this path's runs."""
        return self.policy.lease

    def classify(self, events: Sequence[Event], invocation_id: str | None) -> Classification:
        """The classifier's verdict on an invocation of this app (a drive's end and recovery).

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

    # ------------------------------------------------------------------ submit

    async def submit(
        self,
        *,
        user_id: str,
        session_id: str,
        message: types.Content | str,
        invocation_id: str | None = None,
        chosen_invocation_id: str | None = None,
        run_id: str | None = None,
        checked: bool = False,
    ) -> tuple[Run, types.Content]:
        """Records a run (the one submit), creating the session if missing.

        A new run whose session is free is claimed at once (RUNNING, held by
        this worker); otherwise it waits QUEUED. ``chosen_invocation_id``
        records a new run under an invocation id ADK already chose (its own
        Runner, under DurableRunsPlugin); a message of function responses
        there continues that invocation. A continuation
        (``invocation_id`` with a message of function responses) is refused
        when its invocation was cancelled, and takes each pause's answer
        claim with the run (one answer per pause, whoever else answers).
        ``run_id`` records the run under an id chosen in advance (a
        schedule's tick carries it; the HTTP run API derives it from the
        client's ``Idempotency-Key``): a submit of an id already on the
        ledger with the same session and message records nothing and returns
        that run, marked ``replayed``, so a client that lost the answer to
        its submit may send it again; the same id with another session or
        message is refused. A run whose message retention has cleared is
        returned as a replay by its session alone.
        The message is checked against the store's payload limits
        (:mod:`durable_adk.limits`, the ``Content`` around its answers not
        counted) unless ``checked``: the library's own answers (a job's
        result, its progress) were checked when they came in, and one of them
        wraps its value while several travel together.

        Returns:
            The run as recorded and the message as a Content.

        Raises:
            durable_adk.errors.InvalidArgument: An empty message, or a
                continuation that is not made of function responses (or
                answers a call the invocation never made), or a message past
                the store's :class:`~durable_adk.limits.PayloadLimits`
                (``PayloadTooDeep``, ``PayloadTooLarge``), or a ``run_id``
                submitted before with another session or message.
            durable_adk.errors.InvocationCancelled: The invocation was cancelled.
            durable_adk.errors.Conflict: A pause it answers was already answered.
            durable_adk.errors.NotFound: The invocation is not in the session.
        """
        content = (
            types.Content(role="user", parts=[types.Part(text=message)])
            if isinstance(message, str)
            else message
        )
        if not content.parts:
            raise errors.InvalidArgument("message has no parts")
        if not checked:
            self.store.limits.check(content, "the run's message", envelope=MESSAGE_ENVELOPE)
        request = content.model_dump(mode="json", exclude_none=True)
        if run_id is not None:
            if chosen_invocation_id is not None:
                raise errors.InvalidArgument(
                    "a run id chosen in advance is not for a run under an invocation ADK chose"
                )
            before = await self.ledger.get(run_id)
            if before is not None:
                return self._replay(before, user_id, session_id, request, invocation_id), content
        if invocation_id is not None:
            try:
                run = await self.submit_answer(
                    user_id, session_id, invocation_id, content, run_id=run_id
                )
            except errors.Conflict:
                # Two sends of one continuation at once: the other one recorded it.
                again = None if run_id is None else await self.ledger.get(run_id)
                if again is None:
                    raise
                return self._replay(again, user_id, session_id, request, invocation_id), content
            return run, content
        if chosen_invocation_id is None or not only_answers(content):
            await self.refuse_if_drained()  # a new invocation: not on a drained version
        if chosen_invocation_id is not None:
            if only_answers(content):
                run = await self.submit_answer(user_id, session_id, chosen_invocation_id, content)
                return run, content
            return await self._record(user_id, session_id, request, chosen_invocation_id), content
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
            run_id=run_id,
        )
        if started is not None:
            # Trusted only while this run holds the new session: a run that
            # waits QUEUED reads it when its turn comes.
            if started.created_session_pk is not None and started.run.status is RunStatus.RUNNING:
                self.sessions.adopt_created(
                    (self.app_name, user_id, session_id),
                    pk=started.created_session_pk,
                    app_state=started.app_state,
                    user_state=started.user_state,
                    created_at=now,
                )
            return started.run, content
        await self.ensure_session(user_id, session_id)
        try:
            return await self._record(user_id, session_id, request, None, run_id), content
        except errors.UniqueViolation:
            existing = None if run_id is None else await self.ledger.get(run_id)
            if existing is None:
                raise
            # Submitted at the same moment under this id: nothing recorded here.
            return self._replay(existing, user_id, session_id, request, None), content

    def _replay(
        self,
        run: Run,
        user_id: str,
        session_id: str,
        request: dict[str, Any],
        invocation_id: str | None,
    ) -> Run:
        """``run``, found under the id a submit chose, marked replayed if the submit is its own.

        Raises:
            durable_adk.errors.InvalidArgument: The id names a run of another
                app, user or session, or one that carries another message
                (or continues another invocation): nothing is recorded.
        """
        stored = json.loads(run.request) if run.request else None  # '' once retention cleared it
        if (
            (run.app_name, run.user_id, run.session_id) != (self.app_name, user_id, session_id)
            or (stored is not None and stored != request)
            or (invocation_id is not None and run.invocation_id != invocation_id)
        ):
            raise errors.InvalidArgument(
                f"run id {run.run_id!r} was submitted before with another session or message "
                "(an idempotency key names one request); nothing was recorded"
            )
        return dataclasses.replace(run, replayed=True)

    async def refuse_if_drained(self) -> None:
        """Refuses a new invocation when an operator drained this worker's version.

        Read at most every :data:`DRAIN_CHECK_EVERY` seconds (one indexed
        read); continuations (answers, resumes, recovery) are never refused.

        Raises:
            durable_adk.errors.Draining: The version is drained (nothing written).
        """
        version = self.serving.version
        if version is None:
            return
        now = time.monotonic()
        if now - self._drain_checked_at >= DRAIN_CHECK_EVERY:
            self._drained = await self.versions.is_drained(version)
            self._drain_checked_at = now
        if self._drained:
            raise errors.Draining(
                f"version {version} of app {self.app_name!r} is drained: it starts no new "
                "run (its runs in flight finish); send the run to a worker of another version"
            )

    @functools.cached_property
    def versions(self) -> VersionTable:
        """The app's versions on this store (reports, drain)."""
        return VersionTable(self.store, self.app_name)

    async def ensure_session(self, user_id: str, session_id: str) -> None:
        """Creates the session if it is missing (a run under a chosen invocation id
        needs it; ADK's own Runner, under the plugin, has made it already)."""
        existing = await self.sessions.get_session(
            app_name=self.app_name, user_id=user_id, session_id=session_id
        )
        if existing is None:
            # Another caller may create it at the same moment; either way it exists.
            with contextlib.suppress(AlreadyExistsError):
                await self.sessions.create_session(
                    app_name=self.app_name, user_id=user_id, session_id=session_id
                )

    async def _record(
        self,
        user_id: str,
        session_id: str,
        request: dict[str, Any],
        invocation_id: str | None,
        run_id: str | None = None,
    ) -> Run:
        """A new run on the ledger, QUEUED and held by this worker (no answer claims)."""
        return await self.ledger.submit(
            app_name=self.app_name,
            user_id=user_id,
            session_id=session_id,
            request=request,
            owner=self.worker_id,
            invocation_id=invocation_id,
            run_id=run_id,
        )

    async def refuse_if_cancelled(self, user_id: str, session_id: str, invocation_id: str) -> None:
        """Refuses a continuation of a cancelled invocation.

        Raises:
            durable_adk.errors.InvocationCancelled: The invocation was cancelled.
        """
        cancelled = await self.ledger.invocation_cancelled(
            app_name=self.app_name,
            user_id=user_id,
            session_id=session_id,
            invocation_id=invocation_id,
        )
        if cancelled is not None:
            run_id, by = cancelled
            raise errors.InvocationCancelled(
                f"invocation {invocation_id} was cancelled by {by} (run {run_id}): it takes no "
                "answer and no job result any more (nothing changed)"
            )

    async def submit_answer(
        self,
        user_id: str,
        session_id: str,
        invocation_id: str,
        content: types.Content,
        *,
        run_id: str | None = None,
    ) -> Run:
        """Records the run that answers paused calls, each pause once, whoever else answers.

        The session check refuses a pause already answered; the claims written
        with the run refuse a second answer sent at the same instant (both
        passed the check). A claim held by a run that ended CANCELLED or
        FAILED is freed, and the session read again, once.
        """
        if not only_answers(content):
            raise errors.InvalidArgument(
                "a message continuing an invocation must be made only of function responses"
            )
        await self.refuse_if_cancelled(user_id, session_id, invocation_id)
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
                    run_id=run_id,
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

    async def submit_resume(
        self, *, user_id: str, session_id: str, invocation_id: str
    ) -> tuple[Run, types.Content]:
        """Records a run that resumes an invocation from its stored events (ADK's
        ``run_async(invocation_id=...)`` without a message).

        The run carries the invocation's own user message, as a recovery
        re-drive does (re-driving with it does not store it again).

        Raises:
            durable_adk.errors.NotFound: The invocation is not in the session.
            durable_adk.errors.InvocationCancelled: The invocation was cancelled.
        """
        session = await self.sessions.get_session(
            app_name=self.app_name, user_id=user_id, session_id=session_id
        )
        mine = [e for e in (session.events if session else []) if e.invocation_id == invocation_id]
        original = next(
            (
                e.content
                for e in mine
                if e.author == "user"
                and e.content
                and e.content.parts
                and not e.get_function_responses()
            ),
            None,
        )
        if original is None:
            raise errors.NotFound(
                f"invocation {invocation_id!r} has no user message in session {session_id!r}"
            )
        await self.refuse_if_cancelled(user_id, session_id, invocation_id)
        request = original.model_dump(mode="json", exclude_none=True)
        return await self._record(user_id, session_id, request, invocation_id), original

    async def invocation_of_answers(
        self, user_id: str, session_id: str, message: types.Content
    ) -> str:
        """The invocation whose calls ``message`` answers (as ADK finds it for ``run_async``).

        Raises:
            durable_adk.errors.InvalidArgument: No call of the session has these ids,
                or they belong to different invocations.
        """
        ids = {p.function_response.id for p in message.parts or () if p.function_response}
        session = await self.sessions.get_session(
            app_name=self.app_name, user_id=user_id, session_id=session_id
        )
        found = {
            e.invocation_id
            for e in (session.events if session else [])
            for call in e.get_function_calls()
            if call.id in ids
        }
        if len(found) != 1:
            what = "no call" if not found else "calls of several invocations"
            raise errors.InvalidArgument(
                f"the function responses answer {what} in session {session_id!r}"
            )
        return found.pop()

    # ----------------------------------------------------------- wait for turn

    async def wait_for_turn(self, run: Run) -> Run:
        """Waits until the QUEUED run heads its session's queue, then claims it.

        Raises:
            durable_adk.errors.Fenced: The queued run was taken by another worker.
            durable_adk.errors.VersionElsewhere: (a Fenced) The run continues an
                invocation of an app version this worker does not serve: it
                was handed over, queued for a worker of its version.
            durable_adk.errors.RunCancelled: An operator cancelled it meanwhile.
        """
        if run.status is RunStatus.RUNNING and run.owner == self.worker_id:
            return run  # claimed when it was submitted
        if not self.serving.takes(run.app_version):
            # A continuation of an invocation of another version: a worker of
            # that version continues it (its recovery claims the run).
            await self.ledger.hand_over(run.lease)
            raise errors.VersionElsewhere(
                f"run {run.run_id} continues an invocation of app version {run.app_version}, "
                f"which this worker ({self.serving.describe()}) does not serve: it is queued "
                "for a worker of its version"
            )
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
            # Its polls wait out a store outage while the claim's lease is trusted.
            with using_patience(Patience(run.run_id, fence.trusted_until)):
                claimed = await self._wait_turn(run, lost, key)
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

    async def _wait_turn(
        self, run: Run, lost: asyncio.Event, key: tuple[str, str, str]
    ) -> Run | None:
        return await self.ledger.wait_turn(
            run,
            self.worker_id,
            first_poll=self.policy.queue_poll,
            max_poll=self.policy.poll_max,
            lost=lost,
            ahead_here=lambda: self.sessions.pinned(key),
        )

    # ------------------------------------------------------------------- drive

    async def drive(
        self,
        run: Run,
        message: types.Content,
        *,
        resume: bool,
        classification: str | None = None,
        run_config: RunConfig | None = None,
        state_delta: dict[str, Any] | None = None,
        answer_first: tuple[str, ...] = (),
        yield_user_message: bool = False,
    ) -> AsyncGenerator[Event, None]:
        """Drives a claimed run to its end and yields its events, lock-step with the reader.

        If the reader stops reading (closes the generator, or its task is
        cancelled) the drive detaches and goes on to its end without a
        reader (see :meth:`aclose`).

        Raises:
            durable_adk.errors.Fenced: The lease was lost; the drive was cancelled.
            durable_adk.errors.RunInterrupted: A transient fault: the run was
                handed back for recovery (or, if even that failed, its lease
                expires and recovery takes it over then).
            durable_adk.effect_tables.journal.OutcomeUnknown: The run was parked.
            durable_adk.errors.RunCancelled: It was cancelled; it is CANCELLED.
            Exception: The app's own error; the run is FAILED.
        """
        drive = self.driver.start(
            run,
            message,
            resume=resume,
            classification=classification,
            run_config=run_config,
            state_delta=state_delta,
            answer_first=answer_first,
            yield_user_message=yield_user_message,
        )
        end = End(None)
        async with contextlib.aclosing(self._handed(drive, end)) as handed:
            async for event in handed:
                yield event
        self._outcome(end).raise_for_caller()

    async def run_to_end(
        self,
        run: Run,
        message: types.Content,
        *,
        resume: bool,
        classification: str | None = None,
        run_config: RunConfig | None = None,
        answer_first: tuple[str, ...] = (),
        on_event: Callable[[Event], Any] | None = None,
    ) -> Outcome:
        """Drives a claimed run with no reader and returns its outcome (no error for an ending).

        Raises:
            asyncio.CancelledError: The drive was cancelled at shutdown
                (nothing recorded: its lease expires and recovery takes it over).
        """
        drive = self.driver.start(
            run,
            message,
            resume=resume,
            classification=classification,
            run_config=run_config,
            answer_first=answer_first,
        )
        if on_event is None:
            drive.detach()  # no reader: nothing is handed over, only the end arrives
        end = End(None)
        async with contextlib.aclosing(self._handed(drive, end)) as handed:
            async for event in handed:
                result = on_event(event) if on_event is not None else None
                if asyncio.iscoroutine(result):
                    await result
        return self._outcome(end)

    async def _handed(self, drive: Drive, end: End) -> AsyncGenerator[Event, None]:
        """The drive's events as they are handed over; its last item is copied into ``end``.

        If the reader goes (GeneratorExit, or its task is cancelled) the
        drive is detached and goes on to its end without one (``aclose``
        waits for it).
        """
        try:
            while True:
                item = await drive.next_item()
                if isinstance(item, End):
                    end.outcome, end.error = item.outcome, item.error
                    return
                yield item
        except BaseException:
            self.driver.detach(drive)
            raise

    @staticmethod
    def _outcome(end: End) -> Outcome:
        """The drive's outcome, or the error that stopped it unrecorded (a shutdown)."""
        if end.error is not None:
            raise end.error
        outcome: Outcome = end.outcome
        return outcome

    async def drive_submitted(
        self,
        run: Run,
        message: types.Content,
        *,
        resume: bool,
        run_config: RunConfig | None = None,
        on_event: Callable[[Event], Any] | None = None,
    ) -> Outcome:
        """Waits for a submitted run's turn, then drives it with no reader: its outcome.

        For entry points that hand events elsewhere or nowhere (the worker
        service, the job resumer, progress, answers from the inbox).

        Raises:
            durable_adk.errors.RunCancelled: It was cancelled while it waited.
            durable_adk.errors.Fenced: Another worker took it while it waited.
            durable_adk.errors.StoreError: The store failed before its drive
                (its lease expires and recovery takes it over).
        """
        claimed = await self.wait_for_turn(run)
        return await self.run_to_end(
            claimed, message, resume=resume, run_config=run_config, on_event=on_event
        )

    # ------------------------------------------------------------- operators

    async def cancel(self, run_id: str, *, by: str, reason: str | None) -> operators.Outcome:
        """Cancels a run of this app (see DurableRunner.cancel); a drive here stops at once."""
        run = await self.ledger.get(run_id)
        if run is None or run.app_name != self.app_name:
            raise errors.NotFound(f"no run {run_id!r} of app {self.app_name!r}")
        outcome = await operators.cancel_run(
            self.ledger, run_id, by=by, reason=reason, sessions=self.sessions
        )
        if outcome.run.status is RunStatus.RUNNING and outcome.run.owner == self.worker_id:
            self.driver.cancel_local(run_id, outcome.run.epoch, by)
        return outcome

    def keep_lease(
        self,
        run: Run,
        task: asyncio.Task[Any],
        *,
        abort: Callable[[], None] | None = None,
    ) -> tuple[Drive, asyncio.Task[None]]:
        """Renews a claimed run's lease while ADK's own Runner drives it (DurableRunsPlugin).

        The same heartbeat as a drive's, with the same local deadline and
        retries; a lost lease cancels ``task``; an operator's cancel refuses
        new acts at once and calls ``abort`` once the acts under way end.
        The caller cancels the returned heartbeat task when the run ends, and
        ends the run with :func:`durable_adk.adk.runs.ending.record`.

        Returns:
            The drive (its fence, ``cancelled_by``, ``lease_lost``) and its heartbeat task.
        """
        return self.driver.hold_for(run, task, abort=abort)

    @property
    def detached_runs(self) -> list[str]:
        """Ids of the runs driven on although their caller stopped reading."""
        return self.driver.detached_runs

    async def aclose(self, *, grace: float | None = None) -> None:
        """Waits for the detached drives, cancelling those still running after ``grace``."""
        await self.admission.aclose()
        await self.driver.aclose(grace=grace)
