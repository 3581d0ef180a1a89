"""Durable A2A tasks under ADK's server: ``adk api_server --a2a``, ``get_fast_api_app(a2a=True)``.

ADK's ``get_fast_api_app`` (google-adk 2.13, ``google/adk/cli/fast_api.py``)
builds its A2A side itself and offers one way in, the task store URI of its
service registry. The rest it makes in the function: its own
``A2aAgentExecutor`` and an ``InMemoryPushNotificationConfigStore`` per
agent folder with an ``agent.json``, handed to
``google.adk.a2a._compat.attach_a2a_routes_to_app`` (fast_api.py lines
471-523); and ``adk api_server`` passes no task store URI at all (its CLI
has no option for one: cli_tools_click.py 2501, and 2351 for ``adk web``),
so there the task store is ``_create_task_store_from_options(task_store_uri=None)``,
in memory (fast_api.py 434-439; service_factory.py 413-430).

:func:`install` (called by
:func:`~durable_adk.a2a.registry.register_task_store_uris`, i.e. only when
an agents folder's ``services.py`` asks for durable tasks) replaces the two
module attributes ADK looks up when ``get_fast_api_app`` runs:

* ``google.adk.cli.fast_api._create_task_store_from_options``: with no task
  store URI it gives :class:`SessionsTaskStore` (tasks follow the sessions);
  with a URI, ADK's own function (the registry then makes a
  :class:`RegistryTaskStore` for a ``durable+`` URI).
* ``google.adk.a2a._compat.attach_a2a_routes_to_app``: given one of those
  two stores, it mounts the same paths (``{prefix}`` JSON-RPC,
  ``{prefix}/.well-known/agent-card.json``) served by
  :class:`~durable_adk.a2a.server.DurableA2aServer` instead, built when the
  server starts: :class:`~durable_adk.a2a.executor.DurableA2aExecutor`
  through the app's DurableRunner of the server's durable side
  (:class:`~durable_adk.adk.servers.plugin.ServerRuns`, recovery included),
  push configs on the runs' database (owner-scoped), message-id dedupe, and
  the task sync and push delivery loops for the server's lifespan. Any other
  store goes to ADK's own function, untouched.

ADK's ``A2aAgentExecutor`` is still made by ADK; only its
``_resolve_runner()`` (a2a_agent_executor.py 81) is used, to reach the
server's Runner of the app (its session, artifact, memory and credential
services). When the server starts, a durable store needs ADK's session
service to be the durable one on the same database (a :class:`RegistryTaskStore`
on another is refused: the task and its run change together); a
:class:`SessionsTaskStore` with sessions not durable serves ADK's own A2A
routes, in memory, exactly as ADK would.

The check: :func:`install` first asks the installed google-adk for the
three things it replaces or calls, with the parameters used. When one is
missing or takes other parameters, it logs a WARNING naming it and installs
nothing: the ``durable+`` task store URI then works as before (tasks on the
database under ``adk-a2a``, ADK's executor, push configs in memory; a task
whose server died stays working, as ADK's executor links no run) and a
:class:`SessionsTaskStore` is never made. A durable store that ADK uses
without going through the seam (a newer ADK that no longer calls it) says
so in a WARNING at its first use. Installing is idempotent and
:func:`uninstall` puts ADK's functions back.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import logging
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryPushNotificationConfigStore, InMemoryTaskStore
from a2a.types import Task
from starlette.routing import Route, Router
from starlette.types import Receive, Scope, Send

from durable_adk import errors
from durable_adk.a2a.server import CARD_PATH, DurableA2aServer
from durable_adk.a2a.stores import DurableVersionedTaskStore
from durable_adk.adk.servers.plugin import ServerRuns, server_runs_of
from durable_adk.adk.servers.uri import LazyStore
from durable_adk.adk.services.sessions import DurableSessionService

logger = logging.getLogger("durable_adk.a2a")

ADK_SERVER_APP = "adk-a2a"
"""The app name a :class:`RegistryTaskStore` used directly by ADK keeps its tasks under."""

PUSH_HOSTS_ENV = "DURABLE_ADK_A2A_PUSH_HOSTS"
"""``HOST[,HOST...]``: the only hosts push URLs may name (as ``durable-adk serve``'s)."""


@dataclass(frozen=True)
class Seam:
    """A module attribute of google-adk the seam replaces or calls, and what it must take."""

    module: str
    name: str
    params: tuple[str, ...]


FACTORY = Seam("google.adk.cli.fast_api", "_create_task_store_from_options", ("task_store_uri",))
ATTACH = Seam(
    "google.adk.a2a._compat",
    "attach_a2a_routes_to_app",
    ("app", "agent_card", "agent_executor", "task_store", "push_config_store", "prefix"),
)
RESOLVE = Seam(
    "google.adk.a2a.executor.a2a_agent_executor",
    "A2aAgentExecutor._resolve_runner",
    ("self",),
)
SEAMS = (FACTORY, ATTACH, RESOLVE)

_MARK = "__durable_adk_seam__"
_originals: dict[Seam, Callable[..., Any]] = {}


class _Bypass:
    """Warns once when ADK uses a durable store without the seam (see the module)."""

    adopted = False
    _warned = False

    def _bypassed(self) -> None:
        if not self.adopted and not self._warned:
            self._warned = True
            logger.warning(
                "ADK's server uses the task store durable-adk made (%s) with its own A2A "
                "executor: the durable A2A seam was not reached (google-adk %s; see "
                "durable_adk.a2a.adk_server). Tasks are served as ADK serves them: a task "
                "whose server died is never ended, push configs are in memory",
                type(self).__name__,
                _adk_version(),
            )


class RegistryTaskStore(_Bypass, DurableVersionedTaskStore):
    """The task store ADK's registry makes from a ``durable+...`` task store URI.

    Served through the seam, its URL names the database; the tasks are the
    app's, on the session service's store. Used by ADK directly, it is the
    VersionedTaskStore on that database under the app name ``adk-a2a``.
    """

    def __init__(self, url: str) -> None:
        """Names the database without opening it (see LazyStore)."""
        self.lazy = LazyStore(url)
        super().__init__(self.lazy, ADK_SERVER_APP)

    async def save(self, task: Task, **kwargs: Any) -> Any:
        self._bypassed()
        return await super().save(task, **kwargs)

    async def get(self, task_id: str, context: ServerCallContext) -> Any:
        self._bypassed()
        return await super().get(task_id, context)


class SessionsTaskStore(_Bypass, InMemoryTaskStore):
    """No task store URI given: the tasks follow the sessions (see the module).

    Used by ADK directly, it is ADK's in-memory store, as without the seam.
    """

    async def save(self, task: Task, context: ServerCallContext) -> None:
        self._bypassed()
        await super().save(task, context)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        self._bypassed()
        return await super().get(task_id, context)


def _adk_version() -> str:
    try:
        from google.adk import version

        return str(version.__version__)
    except Exception:  # only for the message
        return "unknown"


def _lookup(seam: Seam) -> Any:
    """The attribute ``seam`` names in the installed google-adk (raises when it is gone)."""
    found: Any = importlib.import_module(seam.module)
    for part in seam.name.split("."):
        found = getattr(found, part)
    return found


def check() -> list[str]:
    """What the installed google-adk lacks of the seams (empty: every one is there)."""
    problems = []
    for seam in SEAMS:
        target = f"{seam.module}.{seam.name}"
        try:
            found = _lookup(seam)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{target} is gone ({type(exc).__name__}: {exc})")
            continue
        original = getattr(found, _MARK, found)
        try:
            params = inspect.signature(original).parameters
        except (TypeError, ValueError):
            problems.append(f"{target} is not a function")
            continue
        missing = [p for p in seam.params if p not in params]
        if missing:
            problems.append(f"{target} takes no {', '.join(missing)}")
    return problems


def install() -> bool:
    """Replaces ADK's two attributes (idempotent); False, with a WARNING, when ADK differs."""
    problems = check()
    if problems:
        logger.warning(
            "durable A2A under ADK's server is off: google-adk %s differs from what "
            "durable_adk.a2a.adk_server replaces (%s). A durable+ task store URI keeps the "
            "tasks on the database, served by ADK's own executor with push configs in "
            "memory; serve with durable-adk serve --a2a or to_a2a for durable tasks",
            _adk_version(),
            "; ".join(problems),
        )
        return False
    for seam, make in ((FACTORY, _task_store_factory), (ATTACH, _attach)):
        module = importlib.import_module(seam.module)
        current = getattr(module, seam.name)
        if getattr(current, _MARK, None) is not None:
            continue
        _originals[seam] = current
        replacement = make(current)
        setattr(replacement, _MARK, current)
        setattr(module, seam.name, replacement)
    return True


def uninstall() -> None:
    """Puts ADK's own functions back."""
    for seam, original in list(_originals.items()):
        setattr(importlib.import_module(seam.module), seam.name, original)
        del _originals[seam]


def _task_store_factory(original: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(original)

    def create_task_store(*args: Any, **kwargs: Any) -> Any:
        try:
            uri = signature.bind(*args, **kwargs).arguments.get("task_store_uri")
        except TypeError:
            return original(*args, **kwargs)
        if not uri:
            logger.info("A2A tasks follow the sessions (durable when the session service is)")
            return SessionsTaskStore()
        return original(*args, **kwargs)

    return create_task_store


def _attach(original: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(original)

    def attach_a2a_routes_to_app(*args: Any, **kwargs: Any) -> None:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)  # type: ignore[no-any-return]
        given = bound.arguments
        store = given.get("task_store")
        if not isinstance(store, RegistryTaskStore | SessionsTaskStore):
            return original(*args, **kwargs)  # type: ignore[no-any-return]
        store.adopted = True
        served = ServedAgent(
            card=given["agent_card"],
            adk_executor=given["agent_executor"],
            store=store,
            prefix=str(given.get("prefix") or ""),
            original=original,
        )
        served.mount(given["app"])
        return None

    return attach_a2a_routes_to_app


def _normal_url(url: str | None) -> str | None:
    """``url`` with the scheme's two spellings of PostgreSQL made one."""
    if url is not None and url.startswith("postgres://"):
        return "postgresql://" + url.removeprefix("postgres://")
    return url


def _push_hosts() -> tuple[str, ...]:
    return tuple(h.strip() for h in os.environ.get(PUSH_HOSTS_ENV, "").split(",") if h.strip())


class ServedAgent:
    """One agent folder's A2A routes under ADK's server, made when the server starts.

    An ASGI app mounted at the paths ADK would use; the first of the
    server's start-up and the first request builds what it serves.
    """

    def __init__(
        self,
        *,
        card: Any,
        adk_executor: Any,
        store: RegistryTaskStore | SessionsTaskStore,
        prefix: str,
        original: Callable[..., Any],
    ) -> None:
        self.card = card
        self.adk_executor = adk_executor
        self.store = store
        self.prefix = prefix.rstrip("/")
        self.original = original
        self.server: DurableA2aServer | None = None
        self.durable_side: ServerRuns | None = None
        self._router: Router | None = None
        self._lock = asyncio.Lock()

    def mount(self, app: Any) -> None:
        """Adds the agent's two paths to ``app`` and its start and stop to ``app``'s lifespan."""
        app.routes.extend(
            [Route(self.prefix or "/", self), Route(f"{self.prefix}{CARD_PATH}", self)]
        )
        _group(app).append(self)

    async def ready(self) -> Router:
        """Builds what the agent serves (once); see the module for the rules.

        Raises:
            durable_adk.errors.InvalidArgument: A durable task store whose
                database is not the durable session service's.
        """
        async with self._lock:
            if self._router is None:
                self._router = await self._build()
            return self._router

    async def _build(self) -> Router:
        adk_runner = await self.adk_executor._resolve_runner()
        sessions = adk_runner.session_service
        durable = isinstance(sessions, DurableSessionService)
        if isinstance(self.store, RegistryTaskStore):
            url = self.store.lazy.url
            store_url = getattr(sessions.store, "url", None) if durable else None
            if _normal_url(store_url) != _normal_url(url):
                raise errors.InvalidArgument(
                    f"the A2A task store {url!r} needs the durable session service on the "
                    f"same database (--session_service_uri durable+{url}); the sessions are "
                    f"{store_url or type(sessions).__name__}: a task and its run change together"
                )
        elif not durable:
            logger.info(
                "A2A app %r: the sessions are not durable, so its tasks are in memory, "
                "served by ADK as without durable-adk",
                adk_runner.app_name,
            )
            scratch = Router()
            self.original(
                scratch,
                agent_card=self.card,
                agent_executor=self.adk_executor,
                task_store=self.store,
                push_config_store=InMemoryPushNotificationConfigStore(),
                prefix=self.prefix,
            )
            return Router(routes=list(scratch.routes))
        self.durable_side = server_runs_of(sessions)
        if isinstance(sessions.store, LazyStore):
            await sessions.store.opened()  # recovery of the apps with open runs starts
        self.durable_side.start_soon()
        runner = self.durable_side.runner_of_app(adk_runner.app_name, services_from=adk_runner)
        self.server = DurableA2aServer(
            runner, agent_card=self.card, push_hosts=_push_hosts() or None
        )
        routes = await self.server.routes(self.prefix)
        self.server.start()
        logger.info(
            "A2A app %r: durable tasks on the runs' database (executor, push configs, task "
            "sync and push delivery of durable-adk)",
            runner.app_name,
        )
        return Router(routes=routes)

    async def stop(self) -> ServerRuns | None:
        """Stops the task sync and push delivery; returns the durable side to close after."""
        if self.server is not None:
            await self.server.stop()
            self.server = None
        side, self.durable_side = self.durable_side, None
        self._router = None
        return side

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        router = await self.ready()
        await router(scope, receive, send)


def _group(app: Any) -> list[ServedAgent]:
    """The agents served on ``app``; the first call wraps its lifespan to start and stop them."""
    group: list[ServedAgent] | None = getattr(app.state, "durable_adk_a2a", None)
    if group is not None:
        return group
    agents: list[ServedAgent] = []
    app.state.durable_adk_a2a = agents
    outer = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(instance: Any) -> AsyncIterator[Any]:
        async with outer(instance) as state:
            try:
                for agent in agents:
                    try:
                        await agent.ready()
                    except errors.InvalidArgument:
                        raise  # a configuration to fix: the server does not start
                    except Exception:
                        # One broken agent must not stop the others (as in ADK's
                        # set-up); its requests try again and fail with 500.
                        logger.exception("A2A app at %s could not start", agent.prefix)
                yield state
            finally:
                sides: list[ServerRuns] = []
                for agent in reversed(agents):
                    side = await agent.stop()
                    if side is not None and side not in sides:
                        sides.append(side)
                for side in sides:  # once every agent's loops are stopped
                    await side.aclose()

    app.router.lifespan_context = lifespan
    return agents
