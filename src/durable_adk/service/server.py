"""``durable-adk serve``: one worker process (HTTP API, runner, sweeper) on uvicorn.

Shutdown order on SIGTERM or SIGINT (what "graceful" means here):

1. the worker stops taking work: new runs get 503 ``draining``, the recovery
   loop stops claiming, live event streams end with ``reason: draining`` and
   the sequence number to reconnect from (on another worker);
2. uvicorn closes its listening socket and waits for open requests;
3. runs in progress get ``drain_seconds`` to finish; the rest are cancelled
   and their leases handed back (expired, no back-off), so another worker's
   next sweep re-drives them at once;
4. the store is closed and the process exits 0.

A worker killed without warning (SIGKILL, a crash) hands nothing back: its
leases run out and another worker recovers its runs after ``lease`` seconds.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Awaitable, Callable, Generator
from pathlib import Path
from types import FrameType

import uvicorn
from google.adk.agents import BaseAgent
from google.adk.apps import App

from durable_adk import errors
from durable_adk.adk.services.app_services import import_app_module
from durable_adk.metrics import Metrics
from durable_adk.service.api import create_app
from durable_adk.service.settings import ServiceSettings
from durable_adk.service.worker import Worker
from durable_adk.store import open_store

logger = logging.getLogger("durable_adk.service")


def load_app(spec: str, *, search: Path | None = None) -> App | BaseAgent:
    """Loads ``MODULE:NAME``: an ADK App, a root agent, or a zero-argument factory of one.

    Args:
        spec: ``package.module:attribute`` (a dotted attribute path is allowed).
        search: A folder put first on ``sys.path`` (default: the working
            directory, as uvicorn does).

    Raises:
        InvalidArgument: The spec is malformed, or names something else.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise errors.InvalidArgument(
            f"{spec!r}: expected MODULE:APP, e.g. my_agents.app:root_agent"
        )
    found: object = import_app_module(module_name, search=search)
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise errors.InvalidArgument(f"{module_name!r} has no attribute {attribute!r}")
        found = getattr(found, part)
    if not isinstance(found, (App, BaseAgent)) and callable(found):
        found = found()
    if not isinstance(found, (App, BaseAgent)):
        raise errors.InvalidArgument(
            f"{spec!r} is a {type(found).__name__}: expected an ADK App, a root agent "
            "or a zero-argument function returning one"
        )
    return found


def require_a2a() -> None:
    """Refuses ``--a2a`` without the A2A SDK, naming the extra to install."""
    try:
        import durable_adk.a2a  # noqa: F401
    except ImportError as exc:
        raise errors.InvalidArgument(str(exc)) from exc


class WorkerServer(uvicorn.Server):
    """uvicorn's server, taught to drain the worker before it exits."""

    def __init__(
        self,
        config: uvicorn.Config,
        worker: Worker,
        *,
        on_ready: Callable[[WorkerServer], None] | None = None,
        before_drain: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Wraps a uvicorn config and the worker it fronts.

        Args:
            config: uvicorn's configuration.
            worker: The started worker.
            on_ready: Called once the socket listens.
            before_drain: Awaited at shutdown before the worker drains (the
                A2A side stops there: its drives then drain with the others).
        """
        super().__init__(config)
        self.worker = worker
        self.on_ready = on_ready
        self.before_drain = before_drain

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Listens, then tells ``on_ready``."""
        await super().startup(sockets)
        if self.started and self.on_ready is not None:
            self.on_ready(self)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """A signal: stop taking work at once, then let uvicorn shut down."""
        self.worker.begin_drain()
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Closes the listener and open requests, then drains the worker."""
        self.worker.begin_drain()
        await super().shutdown(sockets)
        if self.before_drain is not None:
            await self.before_drain()
        await self.worker.drain()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """Installs the exit handlers; unlike uvicorn, does not re-raise the signal after.

        The worker has drained by then, and the process should exit 0.
        """
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def bound_port(self) -> int:
        """The port actually bound (useful with port 0)."""
        for server in self.servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        raise errors.InvalidArgument("the server is not listening")


async def serve(
    app: App | BaseAgent,
    settings: ServiceSettings,
    *,
    metrics: Metrics | None = None,
    on_ready: Callable[[WorkerServer], None] | None = None,
    log_level: str = "warning",
) -> None:
    """Runs one worker until SIGTERM/SIGINT (or ``server.should_exit``), then drains.

    Args:
        app: The ADK App or root agent to serve.
        settings: Where and how.
        metrics: Where metrics and spans go (default: a registry of its own).
        on_ready: Called once the socket listens (tests read the port here).
        log_level: uvicorn's log level.
    """
    async with open_store(
        settings.db,
        limits=settings.payload_limits,
        keyring=settings.keyring(),
        per_user_keys=settings.per_user_keys,
    ) as store:
        worker = Worker(app=app, store=store, settings=settings, metrics=metrics)
        http = create_app(worker)
        served_a2a = None
        if settings.a2a:
            require_a2a()
            from durable_adk.a2a.mount import mount_a2a

            served_a2a = await mount_a2a(
                http,
                worker.runner,
                host=settings.host,
                port=settings.port,
                callers=settings.a2a_owners(),
                push_hosts=settings.a2a_push_hosts,
            )
        config = uvicorn.Config(
            http,
            host=settings.host,
            port=settings.port,
            lifespan="off",
            log_level=log_level,
            timeout_graceful_shutdown=max(1, int(settings.drain_seconds)),
            access_log=False,
        )
        ready = on_ready
        if served_a2a is not None:
            served = served_a2a

            def ready(server: WorkerServer) -> None:
                served.card_names(f"http://{settings.host}:{server.bound_port()}/a2a")
                if on_ready is not None:
                    on_ready(server)

        server = WorkerServer(
            config,
            worker,
            on_ready=ready,
            before_drain=None if served_a2a is None else served_a2a.stop,
        )
        async with worker.running():
            if served_a2a is None:
                await server.serve()
                return
            served_a2a.start()
            try:
                await server.serve()
            finally:
                await served_a2a.stop()
