"""The agent the A2A service tests serve: invoices through a counting billing service.

``invoice N`` makes the scripted model call ``send_invoice`` (journaled by
``invoice:N``, one invoice in the billing service at ``$DADK_BILLING_URL``),
then say ``N sent``. With ``$DADK_GO_DIR`` set, the tool writes
``N.reached`` there and waits for ``N.go`` before it acts, so a test can
kill the worker in the middle of the tool. ``slow invoice N`` first calls
``prepare_invoice`` (no outside act, waits for ``N.go`` the same way), then
``send_invoice``. ``approve N`` calls
``approve_invoice``, which asks for a person's confirmation first (the task
is input-required until the client answers), then says ``N approved``.
``ledger A`` calls ``read_ledger``, which asks the client for a credential
(the task is auth-required). ``report N`` saves files with ADK's artifact
service: ``draft_report`` saves ``report-N.txt`` (a text part) and
``notes-N.md`` (text/markdown bytes, never saved again), then
``send_invoice`` (which waits as above), then ``final_report`` saves a new
version of ``report-N.txt`` (text/plain bytes) and ``chart-N.png`` (image
bytes), then it says ``N reported``. ``remind N`` calls ``durable_sleep``
for an hour (the run sleeps with no worker holding it), then, woken, says
``N reminded``.

Deploys: ``$DADK_INVOICE_KEY`` (default ``invoice:{invoice_id}``) is
``send_invoice``'s journal key template, so a test can deploy code that keys
it otherwise (drift the deploy rules park); the version comes from the
worker's ``--app-version``.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from fastapi.openapi.models import APIKey, APIKeyIn
from google.adk.agents import LlmAgent
from google.adk.auth.auth_tool import AuthConfig
from google.adk.models.llm_request import LlmRequest
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from durable_adk import journaled, sleep_tool
from durable_adk.demo.service_app import EveryTurn, last_user_text
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.fakes.clients import BillingClient
from durable_adk.testing.scripted_model import Turn

APP_NAME = "invoicer"
SECRET = "SECRET-ARTIFACT-5150"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(32))


def _billing() -> BillingClient:
    return BillingClient(os.environ["DADK_BILLING_URL"])


def find_invoice(idempotency_key: str) -> Any:
    return _billing().find_invoice(idempotency_key)


async def _wait_for_go(invoice_id: str) -> None:
    folder = os.environ.get("DADK_GO_DIR")
    if not folder:
        return
    (Path(folder) / f"{invoice_id}.reached").write_text("reached")
    deadline = time.monotonic() + 120
    while not (Path(folder) / f"{invoice_id}.go").exists() and time.monotonic() < deadline:  # noqa: ASYNC110 - another process writes the file
        await asyncio.sleep(0.05)


async def send_invoice(invoice_id: str, idempotency_key: str) -> dict[str, Any]:
    """Sends invoice ``invoice_id`` (once, whatever crashes)."""
    await _wait_for_go(invoice_id)
    invoice = await asyncio.to_thread(
        _billing().create_invoice, invoice_id, "acme", 10.0, idempotency_key
    )
    return {"invoice": invoice["id"]}


async def prepare_invoice(invoice_id: str) -> dict[str, Any]:
    """Prepares invoice ``invoice_id`` (no outside act; waits like send_invoice)."""
    await _wait_for_go(invoice_id)
    return {"prepared": invoice_id}


@journaled(key="approve:{invoice_id}", lookup=find_invoice, require_confirmation=True)
async def approve_invoice(invoice_id: str, idempotency_key: str) -> dict[str, Any]:
    """Approves and sends invoice ``invoice_id`` once a person confirmed."""
    invoice = await asyncio.to_thread(
        _billing().create_invoice, invoice_id, "acme", 20.0, idempotency_key
    )
    return {"approved": invoice["id"]}


async def read_ledger(account: str, tool_context: ToolContext) -> dict[str, Any]:
    """Reads an account's ledger: asks the client for an API key first (auth-required)."""
    tool_context.request_credential(
        AuthConfig(
            auth_scheme=APIKey(**{"in": APIKeyIn.header}, name="X-Api-Key"),
            credential_key="ledger-key",
        )
    )
    return {"status": f"waiting for a credential to read {account}"}


async def draft_report(report_id: str, tool_context: ToolContext) -> dict[str, Any]:
    """Saves the first version of ``report-<id>.txt``, and ``notes-<id>.md`` (saved once)."""
    version = await tool_context.save_artifact(
        f"report-{report_id}.txt", types.Part(text=f"report {report_id} draft")
    )
    notes = await tool_context.save_artifact(
        f"notes-{report_id}.md",
        types.Part.from_bytes(data=f"# notes {report_id}".encode(), mime_type="text/markdown"),
    )
    return {"draft": version, "notes": notes}


async def final_report(report_id: str, tool_context: ToolContext) -> dict[str, Any]:
    """Saves the report's next version and its chart."""
    text = f"report {report_id} final {SECRET}".encode()
    report = await tool_context.save_artifact(
        f"report-{report_id}.txt", types.Part.from_bytes(data=text, mime_type="text/plain")
    )
    chart = await tool_context.save_artifact(
        f"chart-{report_id}.png",
        types.Part.from_bytes(data=PNG + report_id.encode(), mime_type="image/png"),
    )
    return {"report": report, "chart": chart}


def _answered(request: LlmRequest) -> str | None:
    last = request.contents[-1] if request.contents else None
    for part in (last.parts or ()) if last is not None else ():
        response = part.function_response
        if response is not None and response.name in (
            "prepare_invoice",
            "send_invoice",
            "approve_invoice",
            "draft_report",
            "final_report",
        ):
            return response.name
        if response is not None and response.name == "durable_sleep":
            return f"durable_sleep:{(response.response or {}).get('status')}"
    return None


def _step(request: LlmRequest) -> Turn:
    words = last_user_text(request).split()
    invoice_id = words[-1] if words else "X"
    answered = _answered(request)
    if answered == "prepare_invoice" or answered == "draft_report":
        return Call("send_invoice", {"invoice_id": invoice_id})
    if answered == "send_invoice" and words and words[0] == "report":
        return Call("final_report", {"report_id": invoice_id})
    if answered == "final_report":
        return Say(f"{invoice_id} reported")
    if answered == "send_invoice":
        return Say(f"{invoice_id} sent")
    if answered == "approve_invoice":
        return Say(f"{invoice_id} approved")
    if answered == "durable_sleep:sleeping":
        return Say(f"I will remind you of {invoice_id} in an hour")
    if answered == "durable_sleep:woke":
        return Say(f"{invoice_id} reminded")
    if words and words[0] == "remind":
        return Call("durable_sleep", {"seconds": 3600})
    if words and words[0] == "report":
        return Call("draft_report", {"report_id": invoice_id})
    if words and words[0] == "slow":
        return Call("prepare_invoice", {"invoice_id": invoice_id})
    if words and words[0] == "ledger":
        return Call("read_ledger", {"account": invoice_id})
    if words and words[0] == "approve":
        return Call("approve_invoice", {"invoice_id": invoice_id})
    return Call("send_invoice", {"invoice_id": invoice_id})


def app() -> LlmAgent:
    """The invoicer (a fresh agent and model per call)."""
    return LlmAgent(
        name=APP_NAME,
        model=ScriptedModel({APP_NAME: EveryTurn(_step)}),
        instruction="Send invoices with send_invoice.",
        tools=[
            prepare_invoice,
            journaled(
                key=os.environ.get("DADK_INVOICE_KEY", "invoice:{invoice_id}"),
                lookup=find_invoice,
            )(send_invoice),
            approve_invoice,
            read_ledger,
            draft_report,
            final_report,
            sleep_tool(),
        ],
    )
