"""The worker service: HTTP API, event stream and reconnect, operations, dashboard.

``durable-adk serve MODULE:APP --db URL`` runs :func:`serve`: a
:class:`Worker` (DurableRunner, recovery sweeper, graceful drain) behind the
FastAPI app of :func:`create_app`. Any number of workers may share one
PostgreSQL; each answers for every run, because everything it reports is read
from the store.
"""

from __future__ import annotations

from durable_adk.service.api import create_app
from durable_adk.service.ops import Operations, SessionKey
from durable_adk.service.server import WorkerServer, load_app, serve
from durable_adk.service.settings import ServiceSettings
from durable_adk.service.worker import Worker

__all__ = [
    "Operations",
    "ServiceSettings",
    "SessionKey",
    "Worker",
    "WorkerServer",
    "create_app",
    "load_app",
    "serve",
]
