"""Durable runs under ADK's own servers (``adk api_server``, ``adk web``, ``get_fast_api_app``).

ADK's servers drive runs with their plain ``Runner``. :class:`DurableRunsPlugin`,
given to them with ``--extra_plugins durable_adk.DurableRunsPlugin`` (or in an
``App``'s ``plugins``), puts each of those runs on the ledger on a durable
session URI (:mod:`durable_adk.adk.servers.uri`). What it guarantees:

* The run has its ledger row (request, ADK's invocation id) before the user
  message is stored: ``on_user_message_callback`` is the first hook with the
  invocation context, and ADK calls it before it appends the message.
* One run per session drives at a time: a turn for a busy session waits
  ``QUEUED`` in the session's queue, in order (across processes), and then
  runs on the session *as it now is*: the Session object ADK loaded before
  the wait is refreshed in place from the store (events, state, fence
  marker) before ADK appends the new message. No ``StaleSessionError``.
* The run's fence (run id, epoch) is put in the invocation's
  ``RunConfig.custom_metadata``, so ADK stamps every event with it and the
  session service refuses the appends of a run that was taken over;
  journaled tools use it for their journal entries.
* The lease is renewed by DurableRunner's own heartbeat
  (:meth:`RunPath.keep_lease`); when it is lost the request's task is
  cancelled, so ADK and the tool in flight stop. An operator's cancel seen by
  a renewal refuses new acts at once, lets the acts under way finish (up to
  ``cancel_grace``), then aborts ADK's invocation (``InvocationContext.abort``);
  the run ends CANCELLED.
* ``after_run_callback`` ends the row with DurableRunner's end-of-run rule
  (:func:`durable_adk.adk.eventlog.classify.classify`): DONE only when the invocation
  is done, PAUSED on an unanswered long-running call, otherwise handed back
  for recovery; ``on_run_error_callback``: FAILED, or handed back when the
  error is transient (:class:`RetryPolicy`), or parked on an unknown outcome.
* Recovery runs with the server: :class:`ServerRuns` keeps, per app, one
  :class:`DurableRunner` (built from the App the server runs: its root, its
  plugins and configuration, a Workflow root loaded from the agents folder;
  with the services the app's module names in ``durable_adk_services()``,
  :mod:`durable_adk.adk.services.app_services`, which the server's runs of the app use
  too, and resumability on for them as for its recoveries) and its
  background loops (:class:`Background`: the recovery sweeper, the job
  loops, the interrupts' deadlines and the saga sweepers, as under a worker
  or ``async with DurableRunner``). They start when the durable store is
  first opened in the server's event loop (ADK's CLI gives session services
  no start-up hook) and when a plugin first sees an app.

Runs the plugin sees inside a DurableRunner drive (recovery re-drives, whose
App may carry the plugin too) are left alone: DurableRunner holds them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any

from google.adk.agents import BaseAgent
from google.adk.agents.callback_context import CallbackContext
from google.adk.agents.invocation_context import InvocationContext
from google.adk.agents.run_config import RunConfig
from google.adk.apps import App, ResumabilityConfig
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.adk.workflow import BaseNode
from google.genai import types

from durable_adk import errors
from durable_adk.adk.commits.drive import Drive
from durable_adk.adk.loops.background import Background, BackgroundSettings
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.runs.driver import unreadable_ending
from durable_adk.adk.runs.ending import decide, record
from durable_adk.adk.runs.policy import DEFAULT_POLICY
from durable_adk.adk.services.app_services import AppServices, load_services
from durable_adk.adk.services.sessions import RUN_METADATA_KEY, DurableSessionService
from durable_adk.adk.tools.result_limits import ResultLimitsPlugin
from durable_adk.fencing.fence import current_fence, using_fence
from durable_adk.tables.ledger import Run, RunLedger, RunStatus

logger = logging.getLogger("durable_adk.server")

PLUGIN_NAME = "durable_adk"
"""The plugin's default name (ADK names an ``--extra_plugins`` class by its path)."""


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """How the durable side of an ADK server runs (``register(...)`` sets it).

    Attributes:
        lease: Run lease in seconds, renewed every third of it.
        sweep_interval: Seconds between recovery passes.
        max_attempts: Recovery claims before a run is parked.
        backoff: First back-off between recovery attempts, doubled each time.
        queue_poll: The first back-off of a queued turn's claim attempts
            (doubling to 2 s; a run of the session that ends wakes it at once).
    """

    lease: float = DEFAULT_POLICY.lease
    sweep_interval: float = 5.0
    max_attempts: int = DEFAULT_POLICY.max_attempts
    backoff: float = DEFAULT_POLICY.backoff
    queue_poll: float = DEFAULT_POLICY.queue_poll

    def __post_init__(self) -> None:
        if self.lease <= 0 or self.sweep_interval <= 0 or self.queue_poll <= 0:
            raise errors.InvalidArgument("lease, sweep_interval and queue_poll must be > 0")


def _resumable(app: App) -> App:
    if app.resumability_config and app.resumability_config.is_resumable:
        return app
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # ADK flags resumability as experimental
        resumable = ResumabilityConfig(is_resumable=True)
    return app.model_copy(update={"resumability_config": resumable})


def _others(plugins: list[BasePlugin]) -> list[BasePlugin]:
    """The plugins but this one: DurableRunner holds its own drives."""
    return [p for p in plugins if not isinstance(p, DurableRunsPlugin)]


_SERVICE_NAMES = ("artifact_service", "memory_service", "credential_service")


@dataclass(eq=False)
class ServerRuns:
    """The durable side of one ADK server: a DurableRunner and its background loops per app.

    One per durable session service (the server has one). The runner of an
    app puts the server's runs of that app on the ledger under one worker id
    and re-drives recovered runs itself.

    An app's services (artifacts, memory, credentials) come from its module's
    ``durable_adk_services()`` (:func:`durable_adk.adk.services.app_services.load_services`,
    as for ``durable-adk serve`` and ``recover``), for recovery drives and for
    the server's own runs of the app alike, so both halves of a run use the
    same backends. A service the app does not name is the server's (ADK's
    ``--artifact_service_uri``, ``--memory_service_uri``), adopted from the
    app's first live run; a recovery before that has none.
    """

    sessions: DurableSessionService
    agents_dir: str | None = None
    settings: ServerSettings = field(default_factory=ServerSettings)
    worker_id: str = field(
        default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:adk:{uuid.uuid4().hex[:6]}"
    )
    _runners: dict[str, DurableRunner] = field(default_factory=dict)
    _declared: dict[str, AppServices] = field(default_factory=dict)
    _adopted: set[str] = field(default_factory=set)
    _backgrounds: dict[str, Background] = field(default_factory=dict)
    _starting: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _started: asyncio.Task[None] | None = None

    def start_soon(self) -> None:
        """Starts recovery of the apps with open runs, once, in the running loop."""
        if self._started is None:
            self._started = asyncio.get_running_loop().create_task(
                self._start(), name="durable-adk-server-start"
            )

    async def _start(self) -> None:
        ledger = self._ledger()
        apps: set[str] = set()
        try:
            for status in (RunStatus.RUNNING, RunStatus.QUEUED):
                apps.update(r.app_name for r in await ledger.list_runs(status=status, limit=1000))
        except errors.StoreError:
            logger.exception("could not list the open runs; recovery starts with the first run")
            return
        for app_name in sorted(apps - set(self._runners)):
            try:
                loaded = self._load(app_name)
                services = self._app_services(app_name)
            except Exception:  # one broken agent must not stop the others' recovery
                logger.exception("cannot load app %r to recover its runs", app_name)
                continue
            self._serve(app_name, loaded, services)

    def _ledger(self) -> RunLedger:
        return RunLedger(self.sessions.store, lease_seconds=self.settings.lease)

    def _load(self, app_name: str) -> App:
        """The App of ``app_name`` from the agents folder (the objects the server runs)."""
        if self.agents_dir is None:
            raise errors.InvalidArgument(
                f"no agents folder known to load app {app_name!r} from (a Workflow root is "
                "found only there: ADK's invocation context does not carry it; for a Runner "
                "of your own, use DurableRunner)"
            )
        from google.adk.cli.utils.agent_loader import AgentLoader

        # ADK's loader imports the app's module once (sys.modules), so this
        # is the same App, agent or Workflow object the server's Runner holds.
        loaded = AgentLoader(self.agents_dir).load_agent(app_name)
        if isinstance(loaded, App):
            return loaded.model_copy(update={"name": app_name, "plugins": _others(loaded.plugins)})
        if not isinstance(loaded, BaseNode):
            raise errors.InvalidArgument(f"app {app_name!r} is not an ADK agent, Workflow or App")
        return App(name=app_name, root_agent=loaded)

    def check_loadable(self, app_name: str) -> None:
        """Refuses, before anything is written, an app of the agents folder that will not load.

        A new session of such an app would be left behind by the run that
        fails next (a retry of both requests then answers ``Session already
        exists``). Apps not in the agents folder are not checked.

        Raises:
            InvalidArgument: The app's module (or its agent) fails to load;
                the message says why and how ADK's loader finds modules.
        """
        if self.agents_dir is None or not app_name.isidentifier():
            return
        folder = os.path.abspath(self.agents_dir)
        if not (
            os.path.isdir(os.path.join(folder, app_name))
            or os.path.isfile(os.path.join(folder, f"{app_name}.py"))
        ):
            return
        from google.adk.cli.utils.agent_loader import AgentLoader

        try:
            AgentLoader(self.agents_dir).load_agent(app_name)
        except Exception as exc:
            raise errors.InvalidArgument(
                f"app {app_name!r} of {folder} cannot be loaded ({type(exc).__name__}: {exc}); "
                "no session was created. ADK's loader puts only the agents folder on "
                "sys.path, not the working directory: put the app's other modules on "
                "PYTHONPATH (or install them) and restart the server"
            ) from exc

    def _app_services(self, app_name: str) -> AppServices:
        """What ``durable_adk_services()`` in the app's module names (none without one).

        Raises:
            InvalidArgument: The factory is broken (see ``load_services``).
        """
        if self.agents_dir is None:
            return AppServices()  # a Runner of the caller's own: its services are the ones
        # ADK's loader imports ``<app>`` and, when that has no agent, ``<app>.agent``.
        names = (app_name, f"{app_name}.agent")
        return load_services(modules=[sys.modules[n] for n in names if n in sys.modules])

    def _app_of(self, ic: InvocationContext) -> App:
        """The App this invocation runs, as the server's Runner holds it.

        The invocation context carries the App's plugins and configuration,
        and its root agent; a Workflow root it does not carry (``ic.agent`` is
        None), so that one is loaded from the agents folder.
        """
        if isinstance(ic.agent, BaseAgent):
            root: BaseNode = ic.agent.root_agent
        else:
            root = self._load(ic.app_name).root_agent  # type: ignore[assignment]
        return App(
            name=ic.app_name,
            root_agent=root,
            plugins=_others(ic.plugin_manager.plugins),
            resumability_config=ic.resumability_config,
            events_compaction_config=ic.events_compaction_config,
            context_cache_config=ic.context_cache_config,
        )

    def runner_for(self, ic: InvocationContext) -> DurableRunner:
        """The app's runner (made on first use), with the invocation on the app's services.

        The services the app's module names replace the server's in this
        invocation (the live half of the run uses what a recovery of it
        would); the services it does not name are the server's, which the
        runner adopts from the app's first live run.

        Raises:
            InvalidArgument: The app's services factory is broken, or a
                Workflow root cannot be found (no agents folder).
        """
        app_name = ic.app_name
        runner = self._runners.get(app_name)
        if runner is None:
            runner = self._serve(app_name, self._app_of(ic), self._app_services(app_name))
        if not (ic.resumability_config and ic.resumability_config.is_resumable):
            # ADK wraps a bare root in an App without resumability; the run
            # is driven as its recovery would be, or its end (a Workflow's
            # end marker) is never written and it cannot be told done.
            ic.resumability_config = runner.app.resumability_config
        declared = self._declared[app_name]
        for name, service in declared.runner_kwargs().items():
            if name in _SERVICE_NAMES:  # not the app's schedules: the runner's loops fire them
                setattr(ic, name, service)
        self._adopt(app_name, runner, ic)
        return runner

    def _adopt(self, app_name: str, runner: DurableRunner, server: Any) -> None:
        """Gives the runner, once, the server's services its app's module does not name.

        Args:
            server: What carries the server's services (an invocation
                context of the app's live run, or the server's Runner).
        """
        if app_name in self._adopted:
            return
        self._adopted.add(app_name)
        declared = self._declared[app_name]
        for name in _SERVICE_NAMES:
            server_service = getattr(server, name, None)
            if getattr(declared, name) is None and server_service is not None:
                # ADK's Runner keeps its services as public attributes.
                setattr(runner.adk, name, server_service)

    def runner_of_app(self, app_name: str, *, services_from: Any = None) -> DurableRunner:
        """The app's runner (made on first use, loops started) for a driver of the server's own.

        For the A2A routes of ADK's server (:mod:`durable_adk.a2a.adk_server`),
        which drive their runs through the runner instead of ADK's Runner.
        The app is loaded from the agents folder, as for recovery; the
        services its module does not name are taken from ``services_from``
        (the server's Runner of the app), as :meth:`runner_for` adopts them.

        Raises:
            InvalidArgument: No agents folder is known, the app will not
                load, or its services factory is broken.
        """
        runner = self._runners.get(app_name)
        if runner is None:
            runner = self._serve(app_name, self._load(app_name), self._app_services(app_name))
        if services_from is not None:
            self._adopt(app_name, runner, services_from)
        return runner

    def _serve(self, app_name: str, app: App, services: AppServices) -> DurableRunner:
        s = self.settings
        runner = DurableRunner(
            app=_resumable(app),
            store=self.sessions.store,
            session_service=self.sessions,
            worker_id=self.worker_id,
            lease=s.lease,
            max_attempts=s.max_attempts,
            backoff=s.backoff,
            queue_poll=s.queue_poll,
            **services.runner_kwargs(),
        )
        self._runners[app_name] = runner
        self._declared[app_name] = services
        # The same loops as a worker's (Background.start only creates their tasks).
        background = Background(runner, BackgroundSettings(sweep_interval=s.sweep_interval))
        self._backgrounds[app_name] = background
        self._starting[app_name] = asyncio.get_running_loop().create_task(
            background.start(), name=f"durable-adk-start-{app_name}"
        )
        logger.info("recovery of app %r started (worker %s)", app_name, self.worker_id)
        return runner

    async def aclose(self) -> None:
        """Stops the background loops and waits for (or cancels) the recovery drives."""
        for task in self._starting.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._starting.clear()
        for background in self._backgrounds.values():
            await background.stop()
        self._backgrounds.clear()
        for runner in self._runners.values():
            await runner.aclose(grace=0)
        self._runners.clear()
        self._declared.clear()
        self._adopted.clear()


def server_runs_of(sessions: DurableSessionService) -> ServerRuns:
    """The durable side of the server ``sessions`` belongs to (made on first use)."""
    existing = getattr(sessions, "durable_runs", None)
    if isinstance(existing, ServerRuns):
        return existing
    made = ServerRuns(sessions)
    sessions.durable_runs = made  # type: ignore[attr-defined]
    return made


@dataclass(eq=False)
class _Live:
    """A run this plugin admitted, while ADK drives it."""

    runner: DurableRunner
    run: Run
    drive: Drive
    heartbeat: asyncio.Task[None]
    _scopes: contextlib.ExitStack

    def stop(self) -> None:
        self.heartbeat.cancel()
        # The fence and stamp were set for the rest of the invocation's task;
        # reset there. From another context (the task's done callback) the
        # reset fails harmlessly: the task is over, and closing here keeps the
        # scopes from being finalized later.
        with contextlib.suppress(ValueError):
            self._scopes.close()


async def refresh_in_place(sessions: DurableSessionService, session: Any) -> None:
    """Makes ``session`` (the object ADK loaded) what the store now holds.

    A queued turn's Session was loaded before the turns ahead of it ran; the
    events, state and fence marker are replaced in the same object, which ADK's
    invocation context holds.

    Raises:
        google.adk.errors.session_not_found_error.SessionNotFoundError: The
            session was deleted meanwhile.
    """
    fresh = await sessions.get_session(
        app_name=session.app_name, user_id=session.user_id, session_id=session.id
    )
    if fresh is None:
        raise SessionNotFoundError(f"Session {session.id} was deleted while its turn waited")
    session.events[:] = fresh.events
    session.state.clear()
    session.state.update(fresh.state)
    session.last_update_time = fresh.last_update_time
    session._storage_update_marker = fresh._storage_update_marker


class DurableRunsPlugin(BasePlugin):
    """Puts the runs of ADK's own servers on the durable ledger (see the module docstring).

    Example::

        adk api_server --extra_plugins durable_adk.DurableRunsPlugin \\
            --session_service_uri durable+sqlite:///sessions.db my_agents
    """

    def __init__(self, name: str = PLUGIN_NAME) -> None:
        """Creates the plugin.

        Args:
            name: The plugin's name (ADK passes the qualified name it was given).
        """
        super().__init__(name)
        self._live: dict[str, _Live] = {}
        self._servers: list[ServerRuns] = []
        self._warned = False

    def _durable(self, ic: InvocationContext) -> DurableSessionService | None:
        service = ic.session_service
        if isinstance(service, DurableSessionService):
            return service
        if self._in_durable_drive(ic):
            return None  # a child runner inside a durable run (an AgentTool's agent)
        if not self._warned:
            self._warned = True
            logger.warning(
                "DurableRunsPlugin: the session service is %s, not a durable one; runs are "
                "not put on the ledger (use --session_service_uri durable+sqlite:///... "
                "or durable+postgresql://...)",
                type(service).__name__,
            )
        return None

    @staticmethod
    def _in_durable_drive(ic: InvocationContext) -> bool:
        """Whether DurableRunner drives this invocation itself (a recovery re-drive)."""
        fence = current_fence()
        config = ic.run_config
        stamp = ((config.custom_metadata or {}) if config else {}).get(RUN_METADATA_KEY)
        return (
            fence is not None
            and isinstance(stamp, dict)
            and stamp.get("run_id") == fence.run_id
            and stamp.get("epoch") == fence.epoch
        )

    @staticmethod
    def _limits(ic: InvocationContext) -> ResultLimitsPlugin | None:
        """The payload limits of the run's store, as the run path applies them to outputs."""
        service = ic.session_service
        if not isinstance(service, DurableSessionService):
            return None
        return ResultLimitsPlugin(service.store.limits)

    async def after_tool_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        """A tool's output past the store's payload limits answers the model with an error."""
        limits = self._limits(tool_context.get_invocation_context())
        if limits is None:
            return None
        return await limits.after_tool_callback(
            tool=tool, tool_args=tool_args, tool_context=tool_context, result=result
        )

    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        """A model's response past the store's payload limits becomes an error response."""
        limits = self._limits(callback_context.get_invocation_context())
        if limits is None:
            return None
        return await limits.after_model_callback(
            callback_context=callback_context, llm_response=llm_response
        )

    async def on_user_message_callback(
        self, *, invocation_context: InvocationContext, user_message: types.Content
    ) -> types.Content | None:
        ic = invocation_context
        sessions = self._durable(ic)
        if sessions is None or self._in_durable_drive(ic) or ic.invocation_id in self._live:
            return None
        await self._admit(ic, sessions, user_message)
        return None

    async def before_run_callback(
        self, *, invocation_context: InvocationContext
    ) -> types.Content | None:
        ic = invocation_context
        if (
            ic.invocation_id not in self._live
            and isinstance(ic.session_service, DurableSessionService)
            and not self._in_durable_drive(ic)
        ):
            logger.warning(
                "invocation %s of session %s started without a new message: it is not on "
                "the ledger (only turns with a message are)",
                ic.invocation_id,
                ic.session.id,
            )
        return None

    async def _admit(
        self, ic: InvocationContext, sessions: DurableSessionService, message: types.Content
    ) -> None:
        server = server_runs_of(sessions)
        if server not in self._servers:
            self._servers.append(server)
        server.start_soon()
        runner = server.runner_for(ic)
        session = ic.session
        # The one submit: a message of answers continues its paused invocation
        # (each pause answered once, none of a cancelled invocation).
        run, _ = await runner.path.submit(
            user_id=session.user_id,
            session_id=session.id,
            message=message,
            chosen_invocation_id=ic.invocation_id,
        )
        run = await runner.wait_for_turn(run)
        task = asyncio.current_task()
        assert task is not None
        try:
            await refresh_in_place(sessions, session)
        except SessionNotFoundError as exc:
            # Deterministic: no later attempt finds the session either.
            ending = decide(exc, None, retry_policy=runner.retry_policy)
            await record(runner.path, run, ending)
            raise
        unreadable = unreadable_ending(run, session.events)
        if unreadable is not None:
            # Parked before ADK's model sees a history with a hole in it.
            await record(runner.path, run, unreadable)
            assert unreadable.error is not None
            raise unreadable.error
        stamp = {"run_id": run.run_id, "epoch": run.epoch}
        config = ic.run_config or RunConfig()
        # Set on the invocation's own RunConfig: ADK merges it into every event
        # of the invocation (and a caller's own value for our key is replaced).
        config.custom_metadata = {**(config.custom_metadata or {}), RUN_METADATA_KEY: stamp}
        ic.run_config = config
        drive, heartbeat = runner.path.keep_lease(run, task, abort=ic.abort)
        fence = drive.fence
        scopes = contextlib.ExitStack()
        fence.invocation_id = ic.invocation_id
        scopes.enter_context(using_fence(fence))
        live = _Live(runner, run, drive, heartbeat, scopes)
        self._live[ic.invocation_id] = live
        invocation_id = ic.invocation_id

        def ended(_: asyncio.Task[Any]) -> None:
            # The request's task ended without after_run (cancelled, or the
            # lease was lost): stop renewing; the lease expires and recovery
            # takes the run over.
            gone = self._live.pop(invocation_id, None)
            if gone is not None:
                gone.stop()

        task.add_done_callback(ended)

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        await self._end(invocation_context, None)

    async def on_run_error_callback(
        self, *, invocation_context: InvocationContext, error: Exception
    ) -> None:
        await self._end(invocation_context, error)

    async def _end(self, ic: InvocationContext, error: BaseException | None) -> None:
        """The run's end, decided and recorded as every drive's (in runs/ending.py)."""
        live = self._live.pop(ic.invocation_id, None)
        if live is None:
            return
        live.stop()
        drive, runner = live.drive, live.runner
        if drive.lease_lost is not None or (
            drive.fence.lost is not None and drive.cancelled_by is None
        ):
            return  # another worker holds the run now: write nothing
        verdict = None
        if error is None and drive.cancelled_by is None:
            verdict = runner.classify(ic.session.events, live.run.invocation_id)
        ending = decide(
            error,
            verdict,
            retry_policy=runner.retry_policy,
            cancelled_by=drive.cancelled_by,
            lease_lost=drive.lease_lost,
        )
        drive.fence.lose(f"the run ended {ending.kind.value}")
        await record(runner.path, live.run, ending, events=list(ic.session.events), verdict=verdict)

    async def close(self) -> None:
        """ADK closes its runners at server shutdown: the recovery loops stop too."""
        for live in list(self._live.values()):
            live.stop()
        self._live.clear()
        for server in self._servers:
            await server.aclose()
        self._servers.clear()
