"""``durable-adk serve --a2a``: the app's A2A routes beside the worker's run API.

The agent card at ``/.well-known/agent-card.json`` (its capabilities say
what this worker serves), JSON-RPC at ``/a2a`` (it needs the worker's bearer
token or an A2A caller's, :mod:`durable_adk.a2a.auth`); every task is a
durable run of the worker's own runner (:mod:`durable_adk.a2a`), so any
worker on the same database answers tasks/get, tasks/resubscribe and tasks/cancel for any
task. Imported only with ``--a2a``: the A2A SDK is the ``a2a`` extra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fastapi import FastAPI

from durable_adk.a2a.server import DurableA2aServer
from durable_adk.adk.runner import DurableRunner

RPC_PATH = "/a2a"


async def mount_a2a(
    http: FastAPI,
    runner: DurableRunner,
    *,
    host: str,
    port: int,
    callers: Mapping[str, str],
    push_hosts: Sequence[str] = (),
) -> DurableA2aServer:
    """Adds the A2A routes of ``runner``'s app to a worker's HTTP app; returns the A2A server.

    Args:
        http: The worker's HTTP app.
        runner: The worker's runner.
        host: The host the card names.
        port: The port the card names (named again once bound).
        callers: ``{bearer token: owner}`` admitted to the JSON-RPC routes.
        push_hosts: The only hosts push URLs may name (empty: any).
    """
    served = DurableA2aServer(
        runner,
        rpc_url=f"http://{host}:{port}{RPC_PATH}",
        callers=callers,
        push_hosts=push_hosts or None,
    )
    http.router.routes.extend(await served.routes(rpc_path=RPC_PATH))
    return served
