"""An invoicing agent served over A2A whose tasks survive a kill of the serving process.

A client agent (another team's, over A2A) asks "invoice INV-7". The served
agent's scripted model calls ``send_invoice`` (journaled by the invoice id,
against the fake billing service at ``$BILLING_URL``), then answers
``INV-7 sent``. The task is a durable run: kill the serving process in the
middle of the tool and start it again, and the same task completes, with one
invoice in the billing service.

Serve it either way::

    durable-adk serve examples.a2a_invoicer.app:agent --a2a --db sqlite:///a2a.db
    DB=sqlite:///a2a.db uvicorn examples.a2a_invoicer.app:asgi --port 8001

Then, as a client (the A2A SDK's own client)::

    python -m examples.a2a_invoicer.app send --url http://127.0.0.1:8001 INV-7
    python -m examples.a2a_invoicer.app get --url http://127.0.0.1:8001 TASK_ID

A ``durable-adk serve`` worker asks for its bearer token on the A2A routes
too: give it to the client as ``$DURABLE_ADK_TOKEN`` (the worker's
``--token``, or an ``--a2a-caller`` token). ``send`` prints the task as soon
as it is accepted (``return_immediately``);
``get`` prints where it stands. A killed server's task is taken over when
its run's lease (``$LEASE_SECONDS``, 30 by default) runs out.
``$SLOW_SECONDS`` makes the tool wait before it acts, so there is time to
kill the server in the middle of it. The calling
side (an ADK agent calling this one through RemoteA2aAgent from a durable
run) is described in docs/a2a.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from typing import Any

import httpx
from google.adk.agents import LlmAgent
from google.adk.models.llm_request import LlmRequest
from starlette.applications import Starlette

from durable_adk import journaled
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.scripted_model import Turn
from durable_adk.testing.services import BillingClient

APP_NAME = "a2a_invoicer"


def _billing() -> BillingClient:
    return BillingClient(os.environ["BILLING_URL"])


def find_invoice(idempotency_key: str) -> dict[str, Any] | None:
    return _billing().find_invoice(idempotency_key)


@journaled(key="invoice:{invoice_id}", lookup=find_invoice)
async def send_invoice(invoice_id: str, idempotency_key: str) -> dict[str, Any]:
    """Sends invoice ``invoice_id`` once, whatever crashes."""
    await asyncio.sleep(float(os.environ.get("SLOW_SECONDS", "0")))
    invoice = await asyncio.to_thread(
        _billing().create_invoice, invoice_id, "acme", 10.0, idempotency_key
    )
    return {"invoice": invoice["id"]}


def _step(request: LlmRequest) -> Turn:
    text = ""
    for content in reversed(request.contents):
        if content.role == "user" and any(p.text for p in content.parts or ()):
            text = "".join(p.text or "" for p in content.parts or ())
            break
    invoice_id = text.split()[-1] if text.split() else "INV-0"
    last = request.contents[-1] if request.contents else None
    if last is not None and any(p.function_response for p in last.parts or ()):
        return Say(f"{invoice_id} sent")
    return Call("send_invoice", {"invoice_id": invoice_id})


class _EveryTurn(list[Any]):
    """The same step for every turn of the scripted model."""

    def __getitem__(self, index: Any) -> Any:
        return _step

    def __len__(self) -> int:
        return 1_000_000


def agent() -> LlmAgent:
    """The served agent (a fresh agent and model per call)."""
    return LlmAgent(
        name=APP_NAME,
        model=ScriptedModel({APP_NAME: _EveryTurn()}),
        instruction="Send the invoice the user names with send_invoice.",
        tools=[send_invoice],
    )


def _asgi() -> Starlette:
    from durable_adk.a2a.server import to_a2a

    return to_a2a(
        agent(),
        db=os.environ.get("DB", "sqlite:///a2a_invoicer.db"),
        host="127.0.0.1",
        port=int(os.environ.get("PORT", "8001")),
        lease=float(os.environ.get("LEASE_SECONDS", "30")),
    )


def __getattr__(name: str) -> Any:
    if name == "asgi":  # built on first use: importing the module opens nothing
        return _asgi()
    raise AttributeError(name)


async def _client(url: str) -> Any:
    from a2a.client import ClientConfig, ClientFactory
    from a2a.client.card_resolver import A2ACardResolver

    token = os.environ.get("DURABLE_ADK_TOKEN")  # durable-adk serve's A2A routes need it
    headers = {"Authorization": f"Bearer {token}"} if token else None
    http = httpx.AsyncClient(timeout=60, headers=headers)
    card = await A2ACardResolver(http, url).get_agent_card()
    return http, ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)


def _show(task: Any) -> dict[str, Any]:
    from a2a.types import TaskState

    return {
        "task": task.id,
        "state": TaskState.Name(task.status.state),
        "answer": "".join(p.text for a in task.artifacts for p in a.parts),
    }


async def send(url: str, invoice_id: str) -> dict[str, Any]:
    """Sends ``invoice <id>`` and returns the task as accepted."""
    from a2a.types import Message, Part, Role, SendMessageConfiguration, SendMessageRequest

    http, client = await _client(url)
    try:
        request = SendMessageRequest(
            message=Message(
                message_id=uuid.uuid4().hex,
                role=Role.ROLE_USER,
                parts=[Part(text=f"invoice {invoice_id}")],
            ),
            configuration=SendMessageConfiguration(return_immediately=True),
        )
        async for response in client.send_message(request):
            if response.HasField("task"):
                return _show(response.task)
    finally:
        await http.aclose()
    raise RuntimeError("no task in the answer")


async def get(url: str, task_id: str) -> dict[str, Any]:
    """Where the task stands."""
    from a2a.types import GetTaskRequest

    http, client = await _client(url)
    try:
        return _show(await client.get_task(GetTaskRequest(id=task_id)))
    finally:
        await http.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.a2a_invoicer.app")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, arg in (("send", "invoice_id"), ("get", "task_id")):
        command = sub.add_parser(name)
        command.add_argument("--url", required=True)
        command.add_argument(arg)
    args = parser.parse_args(argv)
    if args.command == "send":
        found = asyncio.run(send(args.url, args.invoice_id))
    else:
        found = asyncio.run(get(args.url, args.task_id))
    print(json.dumps(found), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
