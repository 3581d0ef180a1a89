"""An ADK 2.x Workflow with a human approval that survives every kill.

The graph ``fulfilment``: START -> ``intake`` -> ``clerk`` -> ``charge``.

* ``intake`` (a FunctionNode marked ``@idempotent``) reads the order into
  session state; running it twice is harmless.
* ``clerk`` (an LlmAgent node) reserves the stock with the journaled tool
  ``reserve_stock`` (key ``reserve:{order_id}``, inventory service).
* ``charge`` (a :func:`~durable_adk.journaled_node`, key ``charge:{order_id}``,
  payments service) asks a person to approve before it charges: the run is
  PAUSED on ADK's confirmation request until ``approve`` answers it.

Kill the process anywhere; a fresh worker finishes with one reservation, one
charge, one answer per message. ``--plain-charge`` builds the control: the
charge as a plain FunctionNode, which a crash in the middle of leaves parked
for a person ("node in flight") instead of charging twice.

Command line (each action in its own process)::

    python -m examples.approvals.app run --db URL --session S --inventory URL --payments URL
    python -m examples.approvals.app approve --db URL --session S --inventory URL --payments URL
    python -m examples.approvals.app recover --db URL --inventory URL --payments URL

Crash points (``DURABLE_ADK_CRASH_AT``): ``journal.before_intent`` and
``journal.after_act`` (in ``run``: around the reservation; in ``approve``:
around the charge), ``approvals.clerk_answer`` (the tool's answer is stored,
the model not yet asked), ``approvals.charge_after_act`` (the charge went out,
the node has not returned), ``runner.before_finish``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.context import Context
from google.adk.models.llm_request import LlmRequest
from google.adk.workflow import FunctionNode, Workflow
from google.genai import types

from durable_adk import (
    DurableRunner,
    Store,
    errors,
    idempotent,
    journaled,
    journaled_node,
    open_store,
)
from durable_adk.testing import Call, Say, ScriptedModel, crash_point
from durable_adk.testing.harness import sweep_as_fresh_worker
from durable_adk.testing.scripted_model import Turn
from durable_adk.testing.services import LookupUnavailable, ResourceClient

APP_NAME = "approvals"
USER_ID = "shop"
ORDER = {"order_id": "ORD-7", "sku": "lamp", "quantity": 2, "customer": "ACME", "amount": 80.0}
REQUEST = "Fulfil order ORD-7: two lamps for ACME, 80.00 EUR."
CONFIRMATION_CALL = "adk_request_input"


def _found(find: Callable[[str], dict[str, Any] | None]) -> Callable[[str], Any]:
    """A lookup that says "cannot tell" (LookupUnavailable) the journal's way."""

    def lookup(idempotency_key: str) -> dict[str, Any] | None:
        try:
            return find(idempotency_key)
        except LookupUnavailable as exc:
            raise errors.LookupUnavailable(str(exc)) from exc

    return lookup


@idempotent
def intake(ctx: Context) -> dict[str, Any]:
    """Reads the order into session state (the same every time)."""
    for field, value in ORDER.items():
        ctx.state[field] = value
    return dict(ORDER)


def _clerk_answer(request: LlmRequest) -> Turn:
    crash_point("approvals.clerk_answer")  # the tool's answer is stored; the model is asked
    return Say("Reserved 2 lamps for ORD-7.")


def build_workflow(
    inventory_url: str, payments_url: str, worker: str = "", *, plain_charge: bool = False
) -> Workflow:
    """The graph; ``worker`` tags the services' requests (``X-Caller-Worker``)."""
    caller = {"worker": worker} if worker else None
    reservations = ResourceClient(inventory_url, "reservations", caller=caller)
    charges = ResourceClient(payments_url, "charges", caller=caller)

    @journaled(key="reserve:{order_id}", lookup=_found(reservations.find))
    def reserve_stock(order_id: str, sku: str, quantity: int, idempotency_key: str) -> Any:
        """Reserves the order's stock."""
        return reservations.create(
            {"order_id": order_id, "sku": sku, "quantity": quantity}, idempotency_key
        )

    model = ScriptedModel(
        {
            "clerk": [
                Call("reserve_stock", {k: ORDER[k] for k in ("order_id", "sku", "quantity")}),
                _clerk_answer,
            ]
        }
    )
    clerk = LlmAgent(
        name="clerk", model=model, instruction="Reserve the order's stock.", tools=[reserve_stock]
    )

    def charge_card(order_id: str, customer: str, amount: float, idempotency_key: str) -> Any:
        """Charges the customer for the order."""
        charged = charges.create(
            {"order_id": order_id, "customer": customer, "amount": amount}, idempotency_key
        )
        crash_point("approvals.charge_after_act")
        return charged

    charge: FunctionNode
    if plain_charge:

        def charge_plain(order_id: str, customer: str, amount: float) -> Any:
            """Charges the customer (no journal: the control)."""
            return charge_card(order_id, customer, amount, f"plain-charge:{order_id}")

        charge = FunctionNode(
            func=charge_plain, name="charge", rerun_on_resume=True, require_confirmation=True
        )
    else:
        charge = journaled_node(
            key="charge:{order_id}",
            lookup=_found(charges.find),
            name="charge",
            require_confirmation=True,
        )(charge_card)
    return Workflow(name="fulfilment", edges=[("START", intake, clerk, charge)])


def make_runner(
    store: Store, worker: str, inventory_url: str, payments_url: str, *, plain_charge: bool = False
) -> DurableRunner:
    """The DurableRunner every process of this example uses."""
    return DurableRunner(
        app=build_workflow(inventory_url, payments_url, worker, plain_charge=plain_charge),
        app_name=APP_NAME,
        store=store,
        worker_id=worker,
        lease=30.0,
    )


async def _drive(runner: DurableRunner, **kwargs: Any) -> None:
    try:
        async for _ in runner.run(user_id=USER_ID, **kwargs):
            pass
    except Exception as exc:  # parked, handed back or failed: the ledger says which
        print(f"run ended with {type(exc).__name__}: {exc}")


async def pending_approval(runner: DurableRunner, session_id: str) -> tuple[str, str] | None:
    """``(invocation id, call id)`` of the confirmation request the session waits on."""
    session = await runner.sessions.get_session(
        app_name=APP_NAME, user_id=USER_ID, session_id=session_id
    )
    answered = {
        r.id for e in (session.events if session else []) for r in e.get_function_responses()
    }
    for event in reversed(session.events if session else []):
        for call in event.get_function_calls():
            if call.name == CONFIRMATION_CALL and call.id not in answered:
                return event.invocation_id, str(call.id)
    return None


async def run(db: str, session_id: str, urls: tuple[str, str], plain: bool) -> str:
    """Drives the order until the approval; returns the run's status."""
    async with open_store(db) as store:
        runner = make_runner(store, "worker-A", *urls, plain_charge=plain)
        await _drive(runner, session_id=session_id, message=REQUEST)
        runs = [r for r in await runner.ledger.list_runs() if r.session_id == session_id]
        return runs[0].status.value if runs else "NONE"


async def approve(db: str, session_id: str, urls: tuple[str, str], plain: bool) -> str:
    """A person approves the charge: the paused invocation continues."""
    async with open_store(db) as store:
        runner = make_runner(store, "worker-A", *urls, plain_charge=plain)
        waiting = await pending_approval(runner, session_id)
        if waiting is None:
            return "NOTHING_TO_APPROVE"
        invocation_id, call_id = waiting
        answer = types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(
                        id=call_id, name=CONFIRMATION_CALL, response={"confirmed": True}
                    )
                )
            ],
        )
        await _drive(runner, session_id=session_id, message=answer, invocation_id=invocation_id)
        runs = await runner.ledger.list_runs()
        mine = [r for r in runs if r.session_id == session_id and r.invocation_id == invocation_id]
        return mine[0].status.value if mine else "NONE"


async def recover(urls: tuple[str, str], db: str, plain: bool) -> list[dict[str, Any]]:
    """A fresh worker takes over and finishes what the dead one left."""
    async with open_store(db) as store:
        return await sweep_as_fresh_worker(
            make_runner(store, "worker-B", *urls, plain_charge=plain)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["run", "approve", "recover"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--session", default="order-7")
    parser.add_argument("--inventory", required=True)
    parser.add_argument("--payments", required=True)
    parser.add_argument("--plain-charge", action="store_true")
    args = parser.parse_args()
    urls = (args.inventory, args.payments)
    if args.action == "run":
        print(asyncio.run(run(args.db, args.session, urls, args.plain_charge)))
    elif args.action == "approve":
        print(asyncio.run(approve(args.db, args.session, urls, args.plain_charge)))
    else:
        print(json.dumps(asyncio.run(recover(urls, args.db, args.plain_charge))))


if __name__ == "__main__":
    main()
