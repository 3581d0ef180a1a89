"""``durable+sqlite://`` and ``durable+postgresql://`` session URIs for ADK's own servers.

``adk web`` and ``adk api_server`` build their session service from
``--session_service_uri`` through ADK's service registry, which loads
``services.py`` (or ``services.yaml``) from the agents folder before it
builds anything. Registering our schemes there makes ADK's servers keep their
sessions in a durable-adk store (fenced, append-only event logs)::

    # my_agents/services.py
    from durable_adk.adk.service_uri import register

    register()

or, with no code, ``my_agents/services.yaml``::

    services:
      - scheme: durable+sqlite
        type: session
        class: durable_adk.adk.service_uri.DurableUriSessionService
      - scheme: durable+postgresql
        type: session
        class: durable_adk.adk.service_uri.DurableUriSessionService

then ``adk api_server --session_service_uri durable+sqlite:///sessions.db my_agents``.
The URI after ``durable+`` is a store URL (``sqlite:///relative.db``,
``sqlite:////absolute.db``, ``postgresql://user@host/db``).

ADK builds the service synchronously, before its event loop runs, so the
store is opened on first use, in the loop that uses it (an empty database
gets the schema; one that is behind raises ``SchemaBehind``). ADK's servers
have no shutdown hook for session services: the store's connections close
with the process. These servers drive runs with ADK's plain ``Runner``:
sessions are durable, but runs are not on the ledger (use ``durable-adk
serve`` for that).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from google.adk.cli.service_registry import ServiceRegistry, get_service_registry

from durable_adk import errors
from durable_adk.adk.session_service import DurableSessionService
from durable_adk.store import check_schema, connect
from durable_adk.store.base import Params, Row, Store

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

    def __init__(self, url: str) -> None:
        """Names the store without opening it.

        Args:
            url: ``sqlite:///...`` or ``postgresql://...``.
        """
        if not url.startswith(("sqlite:///", "postgresql://", "postgres://")):
            raise errors.UnsupportedUrl(f"unsupported store URL {url!r}")
        self.url = url
        self.dialect = "sqlite" if url.startswith("sqlite:") else "postgresql"
        self._store: Store | None = None
        self._lock: asyncio.Lock | None = None

    async def opened(self) -> Store:
        """The open store (opened now if it was not)."""
        if self._store is not None:
            return self._store
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._store is None:
                store = await connect(self.url)
                try:
                    await check_schema(store)
                except BaseException:
                    await store.close()
                    raise
                self._store = store
        return self._store

    async def fetch(self, query: str, params: Params | None = None) -> Sequence[Row]:
        return await (await self.opened()).fetch(query, params)

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
    """DurableSessionService built from a session URI, as ADK's registry builds services."""

    def __init__(self, uri: str, **kwargs: Any) -> None:
        """Creates the service; the store opens on first use.

        Args:
            uri: ``durable+sqlite:///path.db`` or ``durable+postgresql://...``.
            **kwargs: What ADK passes (``agents_dir``, ignored) and, optionally,
                ``snapshot_every``.
        """
        snapshot_every = int(kwargs.get(_SNAPSHOT_OPTION, 100))
        super().__init__(LazyStore(store_url(uri)), snapshot_every=snapshot_every)


def session_service_factory(uri: str, **kwargs: Any) -> DurableSessionService:
    """The factory ADK's registry calls for our schemes."""
    return DurableUriSessionService(uri, **kwargs)


def register(registry: ServiceRegistry | None = None) -> None:
    """Registers the durable session URI schemes with ADK's service registry.

    Args:
        registry: The registry (default: ADK's own, which ``adk web`` and
            ``adk api_server`` use).
    """
    target = registry if registry is not None else get_service_registry()
    for scheme in SCHEMES:
        target.register_session_service(scheme, session_service_factory)
