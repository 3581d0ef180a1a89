"""Two parallel calls of one journaled tool with one business key, in one model turn.

ADK runs the function calls of one turn concurrently. Both calls name the same
invoice, so both map to one journal key: the first acts, the second waits for
its result (the journal logs the wait) and answers with it. The billing
service is a real HTTP fake; the test counts the tool's acts and billing's
invoices, on both backends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.runners import InMemoryRunner
from google.adk.tools import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.tools.journaling import journaled
from durable_adk.effect_tables.journal import Journal, JournalStatus
from durable_adk.store import Store
from durable_adk.tables.ledger import RunStatus
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.services import BillingClient, FakeService

INVOICE = {"invoice_id": "INV-PAR-1", "customer": "ACME", "amount": 120.0}
KEY = "send-invoice:INV-PAR-1"


@pytest.fixture
def billing(tmp_path: Path) -> Iterator[FakeService]:
    with FakeService("billing", tmp_path / "billing.db") as service:
        yield service


class WaitSeen(logging.Handler):
    """Set once the journal logs that a caller waits for ``key``'s live owner."""

    def __init__(self, key: str) -> None:
        super().__init__(logging.DEBUG)
        self.key = key
        self.seen = asyncio.Event()  # the journal logs from the event loop's thread

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "waits for" in message and repr(self.key) in message:
            self.seen.set()


@pytest.fixture
def wait_seen() -> Iterator[WaitSeen]:
    logger = logging.getLogger("durable_adk.journal")
    handler, level = WaitSeen(KEY), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


async def test_parallel_calls_of_one_key_in_one_turn_make_one_invoice(
    store: Store, billing: FakeService, wait_seen: WaitSeen
) -> None:
    client = BillingClient(billing.url)
    acts: list[str] = []

    @journaled(key="send-invoice:{invoice_id}", lookup=client.find_invoice)
    async def send_invoice(
        invoice_id: str, customer: str, amount: float, idempotency_key: str
    ) -> dict[str, Any]:
        """Sends an invoice through the billing system."""
        acts.append(idempotency_key)
        # Stay in the act until the other call of this turn is seen waiting, so
        # the two calls surely overlap (bounded: the assertions say if not).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wait_seen.seen.wait(), 60)
        return await asyncio.to_thread(
            client.create_invoice, invoice_id, customer, amount, idempotency_key
        )

    model = ScriptedModel(
        [(Call("send_invoice", dict(INVOICE)), Call("send_invoice", dict(INVOICE))), Say("Sent.")]
    )
    agent = LlmAgent(name="billing", model=model, tools=[send_invoice])
    runner = DurableRunner(app=agent, app_name="invoicing", store=store, lease=600)
    events = [e async for e in runner.run(user_id="acme", session_id="s1", message="Invoice.")]

    calls = [c for e in events for c in e.get_function_calls()]
    responses = [r for e in events for r in e.get_function_responses()]
    assert len(calls) == 2 and calls[0].id != calls[1].id
    assert {r.id for r in responses} == {c.id for c in calls}  # both calls answered
    assert all(r.response is not None for r in responses)
    ids = {r.response["id"] for r in responses if r.response}
    assert len(ids) == 1  # the same invoice in both answers
    assert wait_seen.seen.is_set()  # the second call waited for the first: they did overlap
    assert acts == [KEY] and billing.count("invoices") == 1
    (run,) = await runner.ledger.list_runs()
    assert run.status is RunStatus.DONE
    entry = await Journal(store).get(KEY)
    assert entry is not None and entry.status is JournalStatus.DONE
    assert entry.result["id"] in ids and entry.tool_name == "send_invoice"


async def test_without_a_durable_store_parallel_calls_of_one_key_share_one_call(
    billing: FakeService,
) -> None:
    """ADK's own Runner and in-memory sessions: no journal, still one act per key at once."""
    client = BillingClient(billing.url)
    acts: list[str] = []
    both_in = asyncio.Event()
    calls_seen: list[str] = []

    @journaled(key="send-invoice:{invoice_id}")
    async def send_invoice(
        invoice_id: str, customer: str, amount: float, idempotency_key: str
    ) -> dict[str, Any]:
        """Sends an invoice through the billing system."""
        acts.append(idempotency_key)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(both_in.wait(), 60)
        return await asyncio.to_thread(
            client.create_invoice, invoice_id, customer, amount, idempotency_key
        )

    def count_call(tool: BaseTool, args: dict[str, Any], tool_context: ToolContext) -> None:
        calls_seen.append(tool_context.function_call_id or "")
        if len(calls_seen) == 2:
            both_in.set()

    model = ScriptedModel(
        [(Call("send_invoice", dict(INVOICE)), Call("send_invoice", dict(INVOICE))), Say("Sent.")]
    )
    agent = LlmAgent(
        name="billing", model=model, tools=[send_invoice], before_tool_callback=count_call
    )
    runner = InMemoryRunner(agent=agent, app_name="invoicing")
    await runner.session_service.create_session(app_name="invoicing", user_id="u", session_id="s")
    message = types.Content(role="user", parts=[types.Part(text="Invoice.")])
    events = [e async for e in runner.run_async(user_id="u", session_id="s", new_message=message)]
    responses = [r for e in events for r in e.get_function_responses()]
    assert len(responses) == 2 and len({r.response["id"] for r in responses if r.response}) == 1
    assert len(calls_seen) == 2  # both calls entered the tool at once
    assert acts == [KEY] and billing.count("invoices") == 1
