"""Durable A2A task stores by URI, for ADK's own servers.

``adk api_server --a2a`` and ``get_fast_api_app(a2a=True, task_store_uri=...)``
build their task store through ADK's service registry. After
:func:`register_task_store_uris` (call it where you call
``register_session_uris``: the agents folder's ``services.py``), the same
``durable+sqlite:///path.db`` and ``durable+postgresql://...`` URIs as the
durable sessions name the task store's database, and, with no task store
URI (``adk api_server`` has no option for one), the tasks follow the
sessions. Registering also installs the seam of
:mod:`durable_adk.a2a.adk_server`: ADK's server then serves its A2A routes
with durable-adk's executor, push config store, task sync and push
delivery, so a task whose server died is ended by the next server on the
database, and its pushes are sent.
"""

from __future__ import annotations

from typing import Any, cast

from google.adk.cli.service_registry import (
    ServiceFactory,
    ServiceRegistry,
    get_service_registry,
)

from durable_adk.a2a.adk_server import ADK_SERVER_APP, RegistryTaskStore, install
from durable_adk.adk.servers.uri import SCHEMES, store_url

__all__ = ["ADK_SERVER_APP", "register_task_store_uris", "task_store_from_uri"]


def task_store_from_uri(uri: str, **kwargs: Any) -> RegistryTaskStore:
    """The factory ADK's registry calls for a ``durable+...`` task store URI.

    Raises:
        durable_adk.errors.UnsupportedUrl: Not a durable URI, or a bad query parameter.
    """
    del kwargs
    return RegistryTaskStore(store_url(uri))


def register_task_store_uris(registry: ServiceRegistry | None = None) -> bool:
    """Registers the ``durable+...`` task store URI schemes and installs the A2A seam.

    Args:
        registry: The registry (default: ADK's own, which ``adk api_server`` uses).

    Returns:
        Whether the seam is installed (False, with a WARNING in the log, when
        the installed google-adk is not the one it was written for; the
        URIs are registered either way).
    """
    target = registry if registry is not None else get_service_registry()
    for scheme in SCHEMES:
        # ADK types its factories as making sessions, artifacts or memories; its
        # task store registry (the only way in) takes any maker of a task store.
        factory = cast(ServiceFactory, task_store_from_uri)
        target._register_task_store_service(scheme, factory)
    return install()
