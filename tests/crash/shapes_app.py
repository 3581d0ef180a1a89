"""The ADK app shapes of issue 11 in one child-process program, for the crash matrices.

Each shape's outside effects go through ``@journaled`` tools that create
invoices in a fake billing service (a real process), tagged with the worker
(``X-Caller-Worker``), so a test counts the acts and tells who made them.

Shapes:
  input_loop  Workflow root: ``ask`` requests input with ONE interrupt id
              (``review``) in a loop; "no" asks again, "yes" finishes.
  confirm     LlmAgent root, ``pay`` journaled and requiring confirmation.
              ``confirm_plain``: ``pay`` is a plain (unjournaled) tool.
              ``confirm_option``: ``ship_order`` (function ``_ship``, no
              lookup) built with ``journaled(require_confirmation=True)``.
  transfer    triage root hands over to the ``billing`` specialist (turn 1:
              a journaled refund and an answer; turn 2: an answer).
  agent_tool  ``desk`` calls AgentTool(``clerk``); the clerk's journaled refund
              runs in ADK's throw-away child session. ``agent_tool_unsafe``:
              the clerk's refund is a plain (unjournaled) tool.
  parallel    ParallelAgent root, two workers, one journaled invoice each.
  loop        LoopAgent root, two rounds, one journaled invoice per round.

Command line (each action in its own process)::

    python -m tests.crash.shapes_app SHAPE run --db URL --session S --billing URL [--text T]
    python -m tests.crash.shapes_app SHAPE answer --db URL --session S --billing URL --payload JSON
    python -m tests.crash.shapes_app SHAPE recover --db URL --billing URL

``run`` and ``answer`` print ``{"error": ...}`` (None when the drive ended
normally; the ledger says how); ``answer`` answers the session's newest
interrupt, open or not (a repeat must be refused); ``recover`` prints the sweep
report of a fresh worker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import warnings
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent, LoopAgent, ParallelAgent
from google.adk.apps import App
from google.adk.events.event import Event
from google.adk.events.request_input import RequestInput
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.agent_tool import AgentTool
from google.adk.tools.function_tool import FunctionTool
from google.adk.workflow import BaseNode, FunctionNode, Workflow
from google.genai import types

from durable_adk import DurableRunner, Store, errors, idempotent, journaled, open_store
from durable_adk.testing import Call, Say, ScriptedModel, crash_point
from durable_adk.testing.harness import sweep_as_fresh_worker
from durable_adk.testing.services import BillingClient

APP = "shapes"
USER = "u"


def invoice_tool(billing: BillingClient, name: str = "invoice") -> Any:
    """A journaled tool that creates one invoice per business id."""

    def find(idempotency_key: str) -> dict[str, Any] | None:
        return billing.find_invoice(idempotency_key)

    def create(invoice_id: str, idempotency_key: str) -> dict[str, Any]:
        """Creates the invoice (or refund) in billing."""
        return billing.create_invoice(invoice_id, "ACME", 10.0, idempotency_key)

    create.__name__ = name
    return journaled(key=name + ":{invoice_id}", lookup=find, name=name)(create)


def _ask(ctx: Any) -> Any:
    got = ctx.resume_inputs.get("review")
    if got is not None:
        return got
    return RequestInput(interrupt_id="review", message="Approve the draft? (yes/no)")


def _decide(node_input: Any) -> Event:
    answer = node_input.get("answer") if isinstance(node_input, dict) else node_input
    return Event(output=answer, route="again" if answer != "yes" else "done")


def _finish(node_input: Any) -> str:
    return f"approved: {node_input}"


class Tally(BaseNode):
    """A plain node root (neither agent nor Workflow): its answer is an output event."""

    async def _run_impl(self, *, ctx: Any, node_input: Any) -> AsyncGenerator[Any, None]:
        yield {"tally": 3}


class AuditPlugin(BasePlugin):
    """An app's own plugin that acts in before_tool_callback (says which call, then may die)."""

    def __init__(self) -> None:
        super().__init__(name="audit")

    async def before_tool_callback(
        self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any
    ) -> dict[str, Any] | None:
        print(f"PLUGIN {tool_context.function_call_id}", flush=True)
        crash_point("shapes.in_plugin_before_tool")
        return None


def build(shape: str, billing: BillingClient) -> Any:
    """The root agent of a shape."""
    if shape == "basenode":
        return Tally(name="tally")
    if shape == "audited":
        model = ScriptedModel({"clerk": [Call("invoice", {"invoice_id": "A-1"}), Say("done")]})
        clerk = LlmAgent(name="clerk", model=model, tools=[invoice_tool(billing)])
        return App(name=APP, root_agent=clerk, plugins=[AuditPlugin()])
    if shape == "parallel_slow":
        model = ScriptedModel(
            {
                "north": [Call("invoice", {"invoice_id": "P-N"}), Say("North invoiced.")],
                "south": [Call("tally_up", {"n": 1}), Say("South tallied.")],
            }
        )

        @idempotent
        async def tally_up(n: int) -> dict[str, int]:
            """Slow: the other branch runs ahead meanwhile."""
            await asyncio.sleep(1.0)
            crash_point("shapes.in_slow_branch")
            return {"n": n}

        north = LlmAgent(name="north", model=model, tools=[invoice_tool(billing)])
        south = LlmAgent(name="south", model=model, tools=[tally_up])
        return ParallelAgent(name="fanout", sub_agents=[north, south])
    if shape == "input_loop":
        ask = FunctionNode(func=_ask, name="ask", rerun_on_resume=True)
        decide = FunctionNode(func=_decide, name="decide")
        finish = FunctionNode(func=_finish, name="finish")
        return Workflow(
            name="review_loop",
            edges=[("START", ask, decide), (decide, {"again": ask, "done": finish})],
        )
    if shape in ("confirm", "confirm_plain"):
        if shape == "confirm":
            pay = invoice_tool(billing, "pay").func
        else:

            def pay(invoice_id: str) -> dict[str, Any]:
                """Pays, with no journal (the billing service still dedupes by key)."""
                return billing.create_invoice(invoice_id, "ACME", 10.0, f"pay:{invoice_id}")

        model = ScriptedModel({"cashier": [Call("pay", {"invoice_id": "C-1"}), Say("Paid C-1.")]})
        return LlmAgent(
            name="cashier", model=model, tools=[FunctionTool(pay, require_confirmation=True)]
        )
    if shape == "confirm_option":

        def _ship(invoice_id: str, idempotency_key: str) -> dict[str, Any]:
            """Ships (bills) the order; no lookup, so a kill after the act parks."""
            made = billing.create_invoice(invoice_id, "ACME", 10.0, idempotency_key)
            crash_point("shapes.in_ship")
            return made

        ship = journaled(key="ship:{invoice_id}", name="ship_order", require_confirmation=True)
        model = ScriptedModel(
            {"cashier": [Call("ship_order", {"invoice_id": "C-1"}), Say("Done with C-1.")]}
        )
        return LlmAgent(name="cashier", model=model, tools=[ship(_ship)])
    if shape == "transfer":
        model = ScriptedModel(
            {
                "triage": [Call("transfer_to_agent", {"agent_name": "billing"})],
                "billing": [
                    Call("refund", {"invoice_id": "R-1"}),
                    Say("Refunded R-1."),
                    Say("You are welcome."),
                ],
            }
        )
        specialist = LlmAgent(
            name="billing",
            model=model,
            description="Billing questions and refunds.",
            tools=[invoice_tool(billing, "refund")],
        )
        return LlmAgent(name="triage", model=model, sub_agents=[specialist])
    if shape in ("agent_tool", "agent_tool_unsafe"):
        model = ScriptedModel(
            {
                "desk": [Call("clerk", {"request": "refund R-7"}), Say("The clerk refunded R-7.")],
                "clerk": [Call("refund", {"invoice_id": "R-7"}), Say("refunded R-7")],
            }
        )
        if shape == "agent_tool":
            refund = invoice_tool(billing, "refund")
        else:

            def refund(invoice_id: str) -> dict[str, Any]:
                """Refunds, with no journal."""
                done = billing.create_invoice(invoice_id, "ACME", 10.0, f"plain:{invoice_id}")
                crash_point("shapes.after_plain_refund")
                return done

        clerk = LlmAgent(name="clerk", model=model, description="Refunds.", tools=[refund])
        return LlmAgent(name="desk", model=model, tools=[AgentTool(clerk)])
    if shape == "parallel":
        model = ScriptedModel(
            {
                "north": [Call("invoice", {"invoice_id": "P-N"}), Say("North invoiced.")],
                "south": [Call("invoice", {"invoice_id": "P-S"}), Say("South invoiced.")],
            }
        )
        tool = invoice_tool(billing)
        workers = [LlmAgent(name=n, model=model, tools=[tool]) for n in ("north", "south")]
        return ParallelAgent(name="fanout", sub_agents=workers)
    if shape == "loop":
        model = ScriptedModel(
            {
                "charger": [
                    Call("invoice", {"invoice_id": "L-1"}),
                    Say("Round 1 invoiced."),
                    Call("invoice", {"invoice_id": "L-2"}),
                    Say("Round 2 invoiced."),
                ]
            }
        )
        charger = LlmAgent(name="charger", model=model, tools=[invoice_tool(billing)])
        return LoopAgent(name="rounds", sub_agents=[charger], max_iterations=2)
    raise SystemExit(f"unknown shape {shape!r}")


COMMITS_ENV = "SHAPES_COMMITS"
"""The environment variable naming the runner's commit mode (``barrier`` by default)."""


def make_runner(store: Store, shape: str, billing_url: str, worker: str) -> DurableRunner:
    billing = BillingClient(billing_url, caller={"worker": worker})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = build(shape, billing)
    # COMMITS_ENV selects the commit mode (the windows of per-event commits differ).
    commits: Any = os.environ.get(COMMITS_ENV, "barrier")
    return DurableRunner(
        app=root, app_name=APP, store=store, worker_id=worker, lease=30.0, commits=commits
    )


async def _drive(runner: DurableRunner, session: str, message: Any, invocation: str | None) -> str:
    error = None
    try:
        async for event in runner.run(
            user_id=USER, session_id=session, message=message, invocation_id=invocation
        ):
            print(f"HANDED {event.id}", flush=True)  # what the caller saw, before any kill
    except Exception as exc:  # parked, refused, handed back: the ledger says which
        error = f"{type(exc).__name__}: {exc}"
    return json.dumps({"error": error})


async def run(shape: str, db: str, session: str, billing: str, text: str) -> str:
    async with open_store(db) as store:
        runner = make_runner(store, shape, billing, "worker-A")
        return await _drive(runner, session, text, None)


async def answer(shape: str, db: str, session: str, billing: str, payload: str) -> str:
    """Answers the session's newest interrupt (open or not: a repeat must be refused)."""
    async with open_store(db) as store:
        runner = make_runner(store, shape, billing, "worker-A")
        stored = await runner.sessions.get_session(app_name=APP, user_id=USER, session_id=session)
        assert stored is not None
        asks = [
            (e.invocation_id, call)
            for e in stored.events
            for call in e.get_function_calls()
            if call.id in (e.long_running_tool_ids or ())
        ]
        invocation, call = asks[-1]
        part = types.Part(
            function_response=types.FunctionResponse(
                id=call.id, name=call.name, response=json.loads(payload)
            )
        )
        message = types.Content(role="user", parts=[part])
        return await _drive(runner, session, message, invocation)


async def recover(shape: str, db: str, billing: str) -> str:
    async with open_store(db) as store:
        return json.dumps(
            await sweep_as_fresh_worker(make_runner(store, shape, billing, "worker-B"))
        )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.crash.shapes_app")
    parser.add_argument("shape")
    parser.add_argument("action", choices=["run", "answer", "recover"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--session", default="s1")
    parser.add_argument("--billing", required=True)
    parser.add_argument("--text", default="go")
    parser.add_argument("--payload", default="{}")
    args = parser.parse_args()
    if args.action == "run":
        print(asyncio.run(run(args.shape, args.db, args.session, args.billing, args.text)))
    elif args.action == "answer":
        print(asyncio.run(answer(args.shape, args.db, args.session, args.billing, args.payload)))
    else:
        print(asyncio.run(recover(args.shape, args.db, args.billing)))


if __name__ == "__main__":
    try:
        main()
    except errors.DurableError as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
