"""Durable A2A task stores by URI, for ADK's own servers.

``adk api_server --a2a`` and ``get_fast_api_app(a2a=True, task_store_uri=...)``
build their task store from a URI through ADK's service registry. After
:func:`register_task_store_uris` (call it where you call
``register_session_uris``: the agents folder's ``services.py``), the same
``durable+sqlite:///path.db`` and ``durable+postgresql://...`` URIs as the
durable sessions give the SDK's VersionedTaskStore on the runs' database
(:class:`~durable_adk.a2a.stores.DurableVersionedTaskStore`): a task survives
a restart of the server, and another server on the same database answers
tasks/get for it.

What ADK's servers do not let us change, and docs/a2a.md says: ADK makes
their push config store in memory and runs ADK's own executor (not
:class:`~durable_adk.a2a.executor.DurableA2aExecutor`), so there a task's
run is durable through DurableRunsPlugin but a task whose worker died is not
ended by the task sync; ``durable-adk serve --a2a`` and :func:`to_a2a` do both.
"""

from __future__ import annotations

from typing import Any, cast

from google.adk.cli.service_registry import (
    ServiceFactory,
    ServiceRegistry,
    get_service_registry,
)

from durable_adk.a2a.stores import DurableVersionedTaskStore
from durable_adk.adk.servers.uri import SCHEMES, LazyStore, store_url

ADK_SERVER_APP = "adk-a2a"
"""The app name the tasks of ADK's servers are kept under (one store serves every agent)."""


def task_store_from_uri(uri: str, **kwargs: Any) -> DurableVersionedTaskStore:
    """The factory ADK's registry calls for a ``durable+...`` task store URI.

    Raises:
        durable_adk.errors.UnsupportedUrl: Not a durable URI, or a bad query parameter.
    """
    del kwargs
    return DurableVersionedTaskStore(LazyStore(store_url(uri)), ADK_SERVER_APP)


def register_task_store_uris(registry: ServiceRegistry | None = None) -> None:
    """Registers the ``durable+...`` task store URI schemes with ADK's service registry.

    Args:
        registry: The registry (default: ADK's own, which ``adk api_server`` uses).
    """
    target = registry if registry is not None else get_service_registry()
    for scheme in SCHEMES:
        # ADK types its factories as making sessions, artifacts or memories; its
        # task store registry (the only way in) takes any maker of a task store.
        factory = cast(ServiceFactory, task_store_from_uri)
        target._register_task_store_service(scheme, factory)
