"""The invoicing flow that survives every kill (seed 000's worked example).

A draft agent writes the invoice summary, a billing agent calls
``send_invoice``, a notify agent tells the customer. Both outside effects go
through the journal under their business identity (``send-invoice:INV-77``,
``notify:INV-77``) and reach real HTTP services (billing, notifications) with
that key as their Idempotency-Key. Kill the process anywhere; a fresh worker
finishes the run with exactly one invoice and one notification.

Command line (each action in its own process)::

    python -m examples.invoicing.app run --db URL --session S --billing URL --notify URL
    python -m examples.invoicing.app recover --db URL --billing URL --notify URL

``run`` dies at whatever crash point the environment arms
(``DURABLE_ADK_CRASH_AT``): ``runner.before_first_event`` (W1),
``invoicing.draft_model`` (W2), ``journal.before_intent`` (W3),
``journal.after_act`` (W4), ``runner.before_finish`` (W5: both effects stored,
before the unit that writes the notify agent's final answer with the finish).

``--key-by call`` builds the control: the billing agent alone, keyed by the
function call id, re-driven the way ADK re-drives a non-resumable app (the
model is asked again and makes a new call id): the second invoice that keying
by business identity prevents.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import warnings
from typing import Any

from google.adk.agents import LlmAgent, SequentialAgent
from google.adk.apps import App
from google.adk.models.llm_request import LlmRequest
from google.adk.runners import Runner
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from durable_adk import (
    DurableRunner,
    DurableSessionService,
    Store,
    attempt_of,
    errors,
    journaled,
    open_store,
)
from durable_adk.testing import Call, Say, ScriptedModel, crash_point
from durable_adk.testing.harness import sweep_as_fresh_worker
from durable_adk.testing.scripted_model import Turn
from durable_adk.testing.services import BillingClient, LookupUnavailable, NotificationClient

APP_NAME = "invoicing"
USER_ID = "acme-accounts"
INVOICE = {"invoice_id": "INV-77", "customer": "ACME", "amount": 120.0}
SUMMARY = "Invoice INV-77 for ACME: 3 widgets, 120.00 EUR, due in 30 days."
REQUEST = "Invoice ACME for the 3 widgets shipped today."


def _draft(request: LlmRequest) -> Turn:
    crash_point("invoicing.draft_model")
    return Say(SUMMARY)


def billing_tools(billing: BillingClient) -> Any:
    """``send_invoice``, journaled under the invoice's business identity."""

    def find_invoice(idempotency_key: str) -> dict[str, Any] | None:
        try:
            return billing.find_invoice(idempotency_key)
        except LookupUnavailable as exc:
            raise errors.LookupUnavailable(str(exc)) from exc

    @journaled(key="send-invoice:{invoice_id}", lookup=find_invoice)
    def send_invoice(
        invoice_id: str, customer: str, amount: float, idempotency_key: str
    ) -> dict[str, Any]:
        """Sends the invoice to the customer through the billing system."""
        return billing.create_invoice(invoice_id, customer, amount, idempotency_key)

    return send_invoice


def notify_tools(notify: NotificationClient) -> Any:
    """``notify_customer``, journaled under the invoice it announces."""

    def find_notification(idempotency_key: str) -> dict[str, Any] | None:
        try:
            return notify.find(idempotency_key)
        except LookupUnavailable as exc:
            raise errors.LookupUnavailable(str(exc)) from exc

    @journaled(key="notify:{invoice_id}", lookup=find_notification)
    def notify_customer(
        invoice_id: str, to: str, message: str, idempotency_key: str
    ) -> dict[str, Any]:
        """Tells the customer their invoice is ready."""
        return notify.send(to, message, idempotency_key)

    return notify_customer


def build_agent(billing_url: str, notify_url: str, worker: str = "") -> SequentialAgent:
    """draft -> billing -> notify, each with its scripted model.

    ``worker`` tags the services' requests (``X-Caller-Worker``), so a test can
    tell which process made each outside call.
    """
    caller = {"worker": worker} if worker else None
    model = ScriptedModel(
        {
            "draft": [_draft],
            "billing": [Call("send_invoice", dict(INVOICE)), Say("Invoice INV-77 sent.")],
            "notify": [
                Call(
                    "notify_customer",
                    {"invoice_id": "INV-77", "to": "accounts@acme.example", "message": SUMMARY},
                ),
                Say("ACME has been told their invoice is ready."),
            ],
        }
    )
    draft = LlmAgent(
        name="draft", model=model, instruction="Write the invoice summary.", output_key="summary"
    )
    billing = LlmAgent(
        name="billing",
        model=model,
        instruction="Send the invoice.",
        tools=[billing_tools(BillingClient(billing_url, caller=caller))],
    )
    notify = LlmAgent(
        name="notify",
        model=model,
        instruction="Tell the customer.",
        tools=[notify_tools(NotificationClient(notify_url, caller=caller))],
    )
    with warnings.catch_warnings():  # deprecated in ADK 2.x, yet the root whose re-drive is exact
        warnings.simplefilter("ignore", DeprecationWarning)
        return SequentialAgent(name="invoicing", sub_agents=[draft, billing, notify])


def make_runner(
    store: Store, worker: str, billing_url: str, notify_url: str, *, per_event: bool = False
) -> DurableRunner:
    """The DurableRunner every process of this example uses (``per_event``: one
    unit of work per event instead of barrier commits, docs/runs.md)."""
    return DurableRunner(
        app=build_agent(billing_url, notify_url, worker),
        app_name=APP_NAME,
        store=store,
        worker_id=worker,
        lease=30.0,
        commits="per_event" if per_event else "barrier",
    )


async def run(
    db: str, session_id: str, billing_url: str, notify_url: str, *, per_event: bool = False
) -> str:
    """Drives the flow once; returns the run's final status."""
    async with open_store(db) as store:
        runner = make_runner(store, "worker-A", billing_url, notify_url, per_event=per_event)
        try:
            async for _ in runner.run(user_id=USER_ID, session_id=session_id, message=REQUEST):
                pass
        except Exception as exc:  # parked or failed: the ledger says which
            print(f"run ended with {type(exc).__name__}: {exc}")
        runs = [r for r in await runner.ledger.list_runs() if r.session_id == session_id]
        return runs[0].status.value if runs else "NONE"


async def recover(db: str, billing_url: str, notify_url: str) -> list[dict[str, Any]]:
    """A fresh worker takes over and finishes what the dead one left."""
    async with open_store(db) as store:
        return await sweep_as_fresh_worker(make_runner(store, "worker-B", billing_url, notify_url))


# ---------------------------------------------------------------- the control


def call_keyed_billing_agent(billing_url: str) -> LlmAgent:
    """The billing agent alone, its effect keyed by the function call id (the mistake)."""
    billing = BillingClient(billing_url)

    async def send_invoice(
        invoice_id: str, customer: str, amount: float, tool_context: ToolContext
    ) -> dict[str, Any]:
        """Sends the invoice, keyed by the call id."""
        journal, attempt = attempt_of(tool_context, "send_invoice")
        key = f"call:{tool_context.function_call_id}"

        async def act(idempotency_key: str) -> dict[str, Any]:
            return await asyncio.to_thread(
                billing.create_invoice, invoice_id, customer, amount, idempotency_key
            )

        async def lookup(idempotency_key: str) -> dict[str, Any] | None:
            return await asyncio.to_thread(billing.find_invoice, idempotency_key)

        assert journal is not None
        return dict(await journal.execute(key, attempt, act, lookup))

    model = ScriptedModel({"billing": [Call("send_invoice", dict(INVOICE)), Say("Sent.")]})
    return LlmAgent(name="billing", model=model, tools=[send_invoice])


async def control(db: str, session_id: str, billing_url: str, phase: str) -> None:
    """``crash``: run once (dies at W4). ``redrive``: re-drive as plain ADK would."""
    async with open_store(db) as store:
        sessions = DurableSessionService(store)
        runner = Runner(
            app=App(name=APP_NAME, root_agent=call_keyed_billing_agent(billing_url)),
            session_service=sessions,
        )
        message = types.Content(role="user", parts=[types.Part(text=REQUEST)])
        if phase == "crash":
            await sessions.create_session(app_name=APP_NAME, user_id=USER_ID, session_id=session_id)
            invocation = None
        else:
            session = await sessions.get_session(
                app_name=APP_NAME, user_id=USER_ID, session_id=session_id
            )
            assert session is not None
            invocation = session.events[0].invocation_id
        async for _ in runner.run_async(
            user_id=USER_ID, session_id=session_id, new_message=message, invocation_id=invocation
        ):
            pass


def main() -> None:
    """Command line of the example's processes."""
    parser = argparse.ArgumentParser(prog="python -m examples.invoicing.app")
    parser.add_argument("action", choices=["run", "recover", "control-crash", "control-redrive"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--session", default="invoice-77")
    parser.add_argument("--billing", required=True)
    parser.add_argument("--notify", default="")
    parser.add_argument("--per-event", action="store_true", help="run: one unit of work per event")
    args = parser.parse_args()
    if args.action == "run":
        status = asyncio.run(
            run(args.db, args.session, args.billing, args.notify, per_event=args.per_event)
        )
        print(json.dumps({"status": status}))
    elif args.action == "recover":
        print(json.dumps(asyncio.run(recover(args.db, args.billing, args.notify))))
    else:
        asyncio.run(
            control(args.db, args.session, args.billing, args.action.removeprefix("control-"))
        )


if __name__ == "__main__":
    main()
