"""``durable+sqlite://`` and ``durable+postgresql://`` session URIs for ADK's own servers.

``adk web`` and ``adk api_server`` build their session service from
``--session_service_uri`` through ADK's service registry, which loads
``services.py`` (or ``services.yaml``) from the agents folder before it
builds anything. Registering our schemes there makes ADK's servers keep their
sessions in a durable-adk store (fenced, append-only event logs)::

    # my_agents/services.py
    from durable_adk.adk.servers.uri import register

    register()

or, with no code, ``my_agents/services.yaml``::

    services:
      - scheme: durable+sqlite
        type: session
        class: durable_adk.adk.servers.uri.DurableUriSessionService
      - scheme: durable+postgresql
        type: session
        class: durable_adk.adk.servers.uri.DurableUriSessionService

then ``adk api_server --session_service_uri durable+sqlite:///sessions.db my_agents``.
The URI after ``durable+`` is a store URL (``sqlite:///relative.db``,
``sqlite:////absolute.db``, ``postgresql://user@host/db``), query parameters
included (``durable+sqlite:///sessions.db?timeout=5``, ``?mode=ro`` for a
read-only view; see :func:`durable_adk.store.connect`). A parameter that
cannot apply is refused when ADK builds the service, before anything is
opened or created.

ADK builds the service synchronously, before its event loop runs, so the
store is opened on first use, in the loop that uses it (an empty database
gets the schema; one that is behind raises ``SchemaBehind``). Opening it also
starts the server's durable side (:class:`~durable_adk.adk.servers.plugin.ServerRuns`:
recovery of the apps with open runs). With ``--extra_plugins
durable_adk.DurableRunsPlugin`` the server's runs go on the ledger (see
:mod:`durable_adk.adk.servers.plugin`); without it the sessions are durable but the
runs are not, and the service says so in the log once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import fields
from typing import Any

from google.adk.cli.service_registry import ServiceRegistry, get_service_registry
from google.adk.events.event import Event
from google.adk.sessions.session import Session

from durable_adk import errors
from durable_adk.adk.servers.plugin import ServerRuns, ServerSettings
from durable_adk.adk.services.sessions import RUN_METADATA_KEY, DurableSessionService
from durable_adk.store import check_schema, check_url, connect
from durable_adk.store.base import Params, Row, Store
from durable_adk.store.sealing.codec import Codec, keyring_from_env

logger = logging.getLogger("durable_adk.service_uri")

SCHEMES = ("durable+sqlite", "durable+postgresql", "durable+postgres")
"""The session URI schemes :func:`register` adds."""

_SNAPSHOT_OPTION = "snapshot_every"


def store_url(uri: str) -> str:
    """The store URL inside a ``durable+...`` session URI.

    Raises:
        UnsupportedUrl: Another scheme.
    """
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme not in SCHEMES:
        raise errors.UnsupportedUrl(
            f"{uri!r} is not a durable session URI: use durable+sqlite:///path.db "
            "or durable+postgresql://user@host/db"
        )
    return f"{scheme.removeprefix('durable+')}://{rest}"


class LazyStore(Store):
    """A store opened (and its schema checked) on first use, in the loop that uses it."""

    def __init__(self, url: str, *, on_open: Callable[[], None] | None = None) -> None:
        """Names the store without opening it.

        Raises:
            UnsupportedUrl: The URL, or one of its query parameters, cannot
                apply (nothing is opened or created).

        Args:
            url: ``sqlite:///...`` or ``postgresql://...``, with the query
                parameters :func:`durable_adk.store.connect` takes.
            on_open: Called once, in the loop, right after the store opened
                (the ADK server's durable side starts there).
        """
        check_url(url)  # a bad URL fails when ADK builds the service, not at first use
        self.url = url
        self.dialect = "sqlite" if url.startswith("sqlite:") else "postgresql"
        self._store: Store | None = None
        self._lock: asyncio.Lock | None = None
        self._on_open = on_open
        keyring = keyring_from_env()  # DURABLE_ADK_KEY_FILE: values are sealed from the first
        self.codec = Codec(keyring) if keyring is not None else None

    async def opened(self) -> Store:
        """The open store (opened now if it was not)."""
        if self._store is not None:
            return self._store
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._store is None:
                store = await connect(self.url)
                store.codec = self.codec  # one codec: user keys loaded once
                try:
                    await check_schema(store)
                except BaseException:
                    await store.close()
                    raise
                self._store = store
                if self._on_open is not None:
                    self._on_open()
        return self._store

    async def fetch(self, query: str, params: Params | None = None) -> Sequence[Row]:
        return await (await self.opened()).fetch(query, params)

    @property
    def failed_over_at(self) -> float | None:  # type: ignore[override]
        return None if self._store is None else self._store.failed_over_at

    async def now(self) -> float:
        return await (await self.opened()).now()

    async def schema_version(self) -> int:
        return await (await self.opened()).schema_version()

    async def run_script(self, sql: str) -> None:
        await (await self.opened()).run_script(sql)

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()
            self._store = None


class DurableUriSessionService(DurableSessionService):
    """DurableSessionService built from a session URI, as ADK's registry builds services.

    It also carries the server's durable side (:class:`~durable_adk.adk.servers.plugin.ServerRuns`):
    the runners and recovery loops :class:`~durable_adk.adk.servers.plugin.DurableRunsPlugin`
    uses. Recovery starts when the store is first opened, in the server's loop.
    """

    def __init__(self, uri: str, *, settings: ServerSettings | None = None, **kwargs: Any) -> None:
        """Creates the service; the store opens on first use.

        Args:
            uri: ``durable+sqlite:///path.db`` or ``durable+postgresql://...``.
            settings: How the server's durable runs go (default: from ``kwargs``).
            **kwargs: What ADK passes (``agents_dir``, where recovery loads
                apps from) and, optionally, ``snapshot_every`` and the fields
                of :class:`~durable_adk.adk.servers.plugin.ServerSettings` (``lease``,
                ``sweep_interval``, ...), e.g. from ``get_fast_api_app``'s
                ``session_db_kwargs``.
        """
        snapshot_every = int(kwargs.get(_SNAPSHOT_OPTION, 100))
        if settings is None:
            known = {f.name for f in fields(ServerSettings)}
            given: dict[str, Any] = {
                k: float(v) if k != "max_attempts" else int(v)
                for k, v in kwargs.items()
                if k in known
            }
            settings = ServerSettings(**given)
        self.durable_runs = ServerRuns(self, agents_dir=kwargs.get("agents_dir"), settings=settings)
        super().__init__(
            LazyStore(store_url(uri), on_open=self.durable_runs.start_soon),
            snapshot_every=snapshot_every,
        )
        self._unledgered_warned = False

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Creates the session, refusing first an app of the agents folder that will not load.

        Raises:
            durable_adk.errors.InvalidArgument: As :meth:`ServerRuns.check_loadable`
                (ADK's server answers 400), or a bad id or state.
        """
        self.durable_runs.check_loadable(app_name)
        return await super().create_session(
            app_name=app_name, user_id=user_id, state=state, session_id=session_id
        )

    async def append_event(self, session: Session, event: Event) -> Event:
        if (
            not self._unledgered_warned
            and event.author == "user"
            and RUN_METADATA_KEY not in (event.custom_metadata or {})
        ):
            self._unledgered_warned = True
            logger.warning(
                "a run of session %r is not on the durable ledger: it will not be recovered "
                "and a second turn fails as stale; add --extra_plugins %s",
                session.id,
                PLUGIN_PATH,
            )
        return await super().append_event(session, event)


PLUGIN_PATH = "durable_adk.DurableRunsPlugin"
"""What to give ``--extra_plugins`` (or ``get_fast_api_app(extra_plugins=[...])``)."""


class Registration:
    """What :func:`register` did: the services ADK then built from our URIs.

    ``get_fast_api_app(..., lifespan=registration.lifespan)`` starts the
    durable side (recovery) of the services it built when the server starts
    and stops it when the server stops. ``adk api_server`` and ``adk web``
    take no lifespan: there recovery starts when the store is first opened
    (the first request that touches sessions).

    Attributes:
        services: The services built so far, oldest first.
    """

    def __init__(self, settings: ServerSettings | None) -> None:
        self.settings = settings
        self.services: list[DurableUriSessionService] = []

    def factory(self, uri: str, **kwargs: Any) -> DurableSessionService:
        """The factory ADK's registry calls for our schemes."""
        service = DurableUriSessionService(uri, settings=self.settings, **kwargs)
        self.services.append(service)
        return service

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        """A FastAPI lifespan: opens the stores (recovery starts), and stops recovery at exit."""
        del app
        for service in self.services:
            store = service.store
            if isinstance(store, LazyStore):
                await store.opened()
        try:
            yield
        finally:
            for service in self.services:
                await service.durable_runs.aclose()


def register(
    registry: ServiceRegistry | None = None, *, settings: ServerSettings | None = None
) -> Registration:
    """Registers the durable session URI schemes with ADK's service registry.

    Args:
        registry: The registry (default: ADK's own, which ``adk web`` and
            ``adk api_server`` use).
        settings: Lease, sweep interval and the rest for the server's durable
            runs (default: ``ServerSettings()``).

    Returns:
        The registration; its ``lifespan`` starts recovery with a
        ``get_fast_api_app`` server.
    """
    target = registry if registry is not None else get_service_registry()
    registration = Registration(settings)
    for scheme in SCHEMES:
        target.register_session_service(scheme, registration.factory)
    return registration
