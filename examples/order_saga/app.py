"""An order that cannot ship is rolled back, even across crashes (seed 001).

plan (a scripted LlmAgent) -> reserve (inventory) -> charge (payments) ->
ship (carrier) -> notify (an LlmAgent, after the pivot: it cannot be undone).
The carrier refuses addresses in "Nowhere", so by default ship fails and the
saga compensates newest first: refund the charge, release the reservation;
then the apology stage tells the customer. Every outside call carries an
idempotency key derived from the invocation; each compensation has its own.

Command line (each action in its own process)::

    python -m examples.order_saga.app run --db URL --services FILE [--address ADDR]
    python -m examples.order_saga.app recover --db URL --services FILE
    python -m examples.order_saga.app sweep-sagas --db URL --services FILE
    python -m examples.order_saga.app run-unmanaged --db URL --services FILE

``FILE`` is a JSON object of service URLs (inventory, payments, carrier,
notifications). ``run-unmanaged`` runs the saga on plain ADK (resumable, no
DurableRunner): when it dies only the saga sweeper can finish it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import warnings
from pathlib import Path
from typing import Any

from google.adk.agents import BaseAgent, LlmAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.apps import App, ResumabilityConfig
from google.adk.events.event import Event
from google.adk.runners import Runner
from google.genai import types
from typing_extensions import override

from durable_adk import (
    DurableRunner,
    DurableSessionService,
    SagaSequence,
    SagaStage,
    SagaSweeper,
    Store,
    attempt_in,
    open_store,
)
from durable_adk.testing import Say, ScriptedModel
from durable_adk.testing.harness import sweep_as_fresh_worker
from durable_adk.testing.services import ResourceClient, ServiceError

APP_NAME = "shop"
USER_ID = "acme"
SESSION_ID = "order-9"
UNDELIVERABLE = "1 Nowhere Lane, Atlantis"


def plan_of(state: dict[str, Any]) -> dict[str, Any]:
    """The order plan the plan stage wrote (JSON text under ``order_plan``)."""
    raw = state["order_plan"]
    return dict(json.loads(raw) if isinstance(raw, str) else raw)


def _undo(client: ResourceClient, id_field: str, action: str) -> Any:
    """A compensator: undo once by key; a missing or already-undone item counts as done."""

    def compensate(record: dict[str, Any], key: str) -> None:
        try:
            client.act(record[id_field], action, key)
        except ServiceError as exc:
            if exc.status in (404, 409):  # never happened, or already undone
                return
            raise

    return compensate


class Apology(BaseAgent):
    """Tells the customer the order was cancelled (once: journaled under the order)."""

    notifications: Any

    @override
    async def _run_async_impl(self, ctx: InvocationContext) -> Any:
        plan = plan_of(dict(ctx.session.state))
        journal, attempt = attempt_in(ctx, self.name)
        assert journal is not None
        client: ResourceClient = self.notifications

        async def send(key: str) -> Any:
            message = f"Sorry: order {plan['order_id']} could not ship; you were not charged."
            return await asyncio.to_thread(
                client.create, {"to": f"{USER_ID}@example.com", "message": message}, key
            )

        async def find(key: str) -> Any:
            return await asyncio.to_thread(client.find, key)

        sent = await journal.execute(f"apology:{plan['order_id']}", attempt, send, find)
        yield Event(
            invocation_id=ctx.invocation_id,
            author=self.name,
            content=types.Content(role="model", parts=[types.Part(text="Apology sent.")]),
            actions={"state_delta": {"apology_id": sent["id"]}},  # type: ignore[arg-type]
        )


def build_saga(urls: dict[str, str], *, address: str = UNDELIVERABLE) -> SagaSequence:
    """The order saga over the services at ``urls``."""
    inventory = ResourceClient(urls["inventory"], "reservations")
    payments = ResourceClient(urls["payments"], "charges")
    carrier = ResourceClient(urls["carrier"], "shipments")
    notifications = ResourceClient(urls["notifications"], "notifications")
    plan = {
        "order_id": "ORD-9",
        "customer": USER_ID,
        "sku": "LAMP-1",
        "quantity": 2,
        "amount": 99.0,
        "address": address,
    }
    model = ScriptedModel(
        {
            "plan": [Say(json.dumps(plan))],
            "notify": [Say(f"Your order {plan['order_id']} is on its way.")],
        }
    )
    reserve = SagaStage(
        name="reserve",
        action=lambda state, key: inventory.create(
            {k: plan_of(state)[k] for k in ("order_id", "sku", "quantity")}, key
        ),
        find=inventory.find,
        state_of=lambda r: {"reservation_id": r["id"]},
        undo_of=lambda r: {"reservation_id": r["id"]},
    )
    charge = SagaStage(
        name="charge",
        action=lambda state, key: payments.create(
            {k: plan_of(state)[k] for k in ("order_id", "customer", "amount")}, key
        ),
        find=payments.find,
        state_of=lambda r: {"charge_id": r["id"]},
        undo_of=lambda r: {"charge_id": r["id"]},
    )
    ship = SagaStage(
        name="ship",
        action=lambda state, key: carrier.create(
            {k: plan_of(state)[k] for k in ("order_id", "address")}, key
        ),
        find=carrier.find,
        state_of=lambda r: {"shipment_id": r["id"]},
        undo_of=lambda r: {"shipment_id": r["id"]},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        planner = LlmAgent(name="plan", model=model, output_key="order_plan")
        notify = LlmAgent(name="notify", model=model, instruction="Tell the customer.")
    return SagaSequence(
        "order_saga",
        [planner, reserve, charge, ship, notify],
        {
            "reserve": _undo(inventory, "reservation_id", "release"),
            "charge": _undo(payments, "charge_id", "refund"),
            "ship": _undo(carrier, "shipment_id", "cancel"),
        },
        uncompensatable=["notify"],
        apology=Apology(name="apology", notifications=notifications),
        compensation_backoff=0.05,
    )


def load_urls(path: str) -> dict[str, str]:
    """The services file written by the caller."""
    return dict(json.loads(Path(path).read_text()))


def make_runner(
    store: Store,
    worker: str,
    urls: dict[str, str],
    address: str,
    version: str | None = None,
    compatible: tuple[str, ...] = (),
) -> DurableRunner:
    """The DurableRunner every process of this example uses (of an app version, if given)."""
    return DurableRunner(
        app=build_saga(urls, address=address),
        app_name=APP_NAME,
        store=store,
        worker_id=worker,
        lease=30.0,
        version=version,
        compatible_versions=compatible,
    )


async def run(
    db: str, urls: dict[str, str], address: str, version: str | None = None
) -> dict[str, Any]:
    """Places the order once; returns the saga's outcome from the session state."""
    async with open_store(db) as store:
        runner = make_runner(store, "worker-A", urls, address, version)
        async for _ in runner.run(user_id=USER_ID, session_id=SESSION_ID, message="Order 2 lamps"):
            pass
        session = await runner.sessions.get_session(
            app_name=APP_NAME, user_id=USER_ID, session_id=SESSION_ID
        )
        assert session is not None
        return {k: session.state.get(k) for k in ("saga_status", "saga_reason")}


async def recover(
    db: str,
    urls: dict[str, str],
    address: str,
    version: str | None = None,
    compatible: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """A fresh worker re-drives what the dead one left (the saga resumes where it was)."""
    async with open_store(db) as store:
        runner = make_runner(store, "worker-B", urls, address, version, compatible)
        return await sweep_as_fresh_worker(runner)


async def run_unmanaged(db: str, urls: dict[str, str], address: str) -> None:
    """Runs the saga on plain ADK (no ledger row): only the saga sweeper can finish it."""
    async with open_store(db) as store:
        sessions = DurableSessionService(store)
        app = App(
            name=APP_NAME,
            root_agent=build_saga(urls, address=address),
            resumability_config=ResumabilityConfig(is_resumable=True),
        )
        await sessions.create_session(app_name=APP_NAME, user_id=USER_ID, session_id=SESSION_ID)
        message = types.Content(role="user", parts=[types.Part(text="Order 2 lamps")])
        async for _ in Runner(app=app, session_service=sessions).run_async(
            user_id=USER_ID, session_id=SESSION_ID, new_message=message
        ):
            pass


async def sweep_sagas(db: str, urls: dict[str, str], address: str) -> list[dict[str, Any]]:
    """The saga sweeper: compensates sagas that died with no run to re-drive them."""
    async with open_store(db) as store:
        sessions = DurableSessionService(store)
        sweeper = SagaSweeper(
            build_saga(urls, address=address), sessions, app_name=APP_NAME, owner="saga-sweeper"
        )
        for saga in await sweeper.ledger.list_sagas():
            await sweeper.ledger.backdate(
                saga.saga_id, 3600
            )  # instead of waiting out the quiet time
        return [
            {"saga": s.saga_id, "status": s.status.value, "reason": s.reason}
            for s in await sweeper.sweep_once()
        ]


def main() -> None:
    """Command line of the example's processes."""
    parser = argparse.ArgumentParser(prog="python -m examples.order_saga.app")
    parser.add_argument("action", choices=["run", "recover", "sweep-sagas", "run-unmanaged"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--services", required=True, help="JSON file of service URLs")
    parser.add_argument("--address", default=UNDELIVERABLE)
    parser.add_argument("--app-version", default=None, help="this process's app version")
    parser.add_argument(
        "--compatible-version", action="append", default=[], help="an earlier version it continues"
    )
    args = parser.parse_args()
    urls = load_urls(args.services)
    version, compatible = args.app_version, tuple(args.compatible_version)
    if args.action == "run":
        print(json.dumps(asyncio.run(run(args.db, urls, args.address, version))))
    elif args.action == "recover":
        print(json.dumps(asyncio.run(recover(args.db, urls, args.address, version, compatible))))
    elif args.action == "sweep-sagas":
        print(json.dumps(asyncio.run(sweep_sagas(args.db, urls, args.address))))
    else:
        asyncio.run(run_unmanaged(args.db, urls, args.address))


if __name__ == "__main__":
    main()
