"""Durable A2A: an ADK agent served over the A2A protocol, every task a run of the ledger.

An A2A task is a run and its continuations: the context id is the session,
the task's state follows its run (submitted while it waits its turn, working,
input-required or auth-required while paused, then completed, failed,
canceled or rejected), and ``tasks/cancel`` is the run's cancel. The task
store, its event stream (read from a version, on any worker) and the push
configs live on the runs' own database (:mod:`durable_adk.a2a_tables.tasks`).

Modules: ``codec`` (the SDK's protobuf values as stored text, owners),
``stores`` (TaskStore, VersionedTaskStore, TaskEventStream,
PushNotificationConfigStore), ``executor`` (the AgentExecutor that drives
ADK's A2A conversion through DurableRunner), ``artifacts`` (the files a run
saved as the task's artifacts), ``sync`` (tasks whose run ended while no
worker watched it), ``auth`` (the bearer tokens admitted and the owner each
names), ``push_urls`` (which push URLs a client may register), ``push``
(the outbox's delivery), ``server`` (the request handler with message-id
dedupe, the routes, :func:`to_a2a`), ``mount`` (the routes of
``durable-adk serve --a2a``), ``registry`` (the ``durable+`` task store URIs
of ADK's service registry), ``adk_server`` (the seam that serves them with
all of the above under ``adk api_server --a2a``).

Needs the ``a2a`` extra (``pip install 'durable-adk[a2a]'``): importing this
package without it raises an ImportError that says so. It sits beside
``adk/servers`` (it imports the ADK layer, DurableRunner included, and the
tables); ``service/`` mounts its routes.
"""

from __future__ import annotations

import importlib.util

EXTRA_HINT = (
    "durable_adk.a2a needs the A2A SDK: install the a2a extra, "
    "pip install 'durable-adk[a2a]' (a2a-sdk[http-server] >=0.3.4,<2)"
)


def require_sdk() -> None:
    """Raises an ImportError naming the ``a2a`` extra when the A2A SDK is not installed."""
    try:
        found = importlib.util.find_spec("a2a.server.cluster") is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        raise ImportError(EXTRA_HINT)


require_sdk()
