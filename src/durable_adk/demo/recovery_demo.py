"""Recovery demo: runs killed mid-model-call and mid-tool, recovered by a fresh worker.

``run`` drives one turn through DurableRunner; a crash point armed by the
parent kills it. ``recover`` is the fresh worker: it backdates the dead
worker's leases (instead of waiting them out), runs one sweep and prints, as
JSON, what it found and did for each run.

With ``--inventory URL`` (a fake ``inventory`` service, see
:mod:`durable_adk.testing.services`), ``check_stock`` first reads the
warehouse over HTTP, tagged with ``X-Caller-Worker``, so a test can count how
many times, and by which worker, the tool really ran.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.llm_request import LlmRequest
from google.adk.tools.tool_context import ToolContext

from durable_adk.adk.runner import DurableRunner
from durable_adk.store import open_store
from durable_adk.testing import Call, Say, ScriptedModel, crash_point
from durable_adk.testing.harness import sweep_as_fresh_worker
from durable_adk.testing.scripted_model import Turn
from durable_adk.testing.services import ResourceClient

APP_NAME = "recovery_demo"
USER_ID = "demo-user"


def stock_tool(inventory: ResourceClient | None = None) -> Any:
    """``check_stock``; with ``inventory``, it reads the warehouse before it answers."""

    def check_stock(item: str, tool_context: ToolContext) -> dict[str, Any]:
        """Reads stock for an item (read-only: safe to run again)."""
        if inventory is not None:
            inventory.find(f"stock:{item}")  # the outside call a test counts
        crash_point("demo.in_check_stock")
        tool_context.state[f"stock:{item}"] = 7
        return {"item": item, "in_stock": 7}

    return check_stock


check_stock = stock_tool()


def _answer(request: LlmRequest) -> Turn:
    crash_point("demo.in_model_call")
    return Say("We have 7 in stock.")


def build_agent(inventory: ResourceClient | None = None) -> LlmAgent:
    """One assistant with a read-only tool; the final answer can crash mid-call."""
    model = ScriptedModel({"assistant": [Call("check_stock", {"item": "lamp"}), _answer]})
    return LlmAgent(
        name="assistant",
        model=model,
        instruction="Answer stock questions.",
        tools=[stock_tool(inventory)],
    )


def make_runner(
    store: Any, worker: str, *, unsafe: bool = False, inventory_url: str = ""
) -> DurableRunner:
    """The runner every process of this demo uses (``unsafe``: check_stock not idempotent)."""
    inventory = (
        ResourceClient(inventory_url, "reservations", caller={"worker": worker})
        if inventory_url
        else None
    )
    return DurableRunner(
        app=build_agent(inventory),
        app_name=APP_NAME,
        store=store,
        worker_id=worker,
        lease=30.0,
        idempotent_tools=[] if unsafe else ["check_stock"],
    )


async def run(db: str, session_id: str, unsafe: bool = False, inventory_url: str = "") -> None:
    """Drives one turn; dies at the armed crash point."""
    async with open_store(db) as store:
        runner = make_runner(store, "worker-A", unsafe=unsafe, inventory_url=inventory_url)
        async for _ in runner.run(user_id=USER_ID, session_id=session_id, message="Any lamps?"):
            pass


async def recover(
    db: str, unsafe: bool = False, worker: str = "worker-B", inventory_url: str = ""
) -> list[dict[str, Any]]:
    """A fresh worker: expire the dead workers' leases, sweep once, report."""
    async with open_store(db) as store:
        runner = make_runner(store, worker, unsafe=unsafe, inventory_url=inventory_url)
        return await sweep_as_fresh_worker(runner)


def main() -> None:
    """Command line of the demo's child processes."""
    parser = argparse.ArgumentParser(prog="python -m durable_adk.demo.recovery_demo")
    parser.add_argument("action", choices=["run", "recover"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--session", default="")
    parser.add_argument("--unsafe", action="store_true", help="check_stock is not idempotent")
    parser.add_argument("--worker", default="worker-B")
    parser.add_argument("--inventory", default="", help="a fake inventory service's URL")
    args = parser.parse_args()
    if args.action == "run":
        asyncio.run(run(args.db, args.session, args.unsafe, args.inventory))
    else:
        print(json.dumps(asyncio.run(recover(args.db, args.unsafe, args.worker, args.inventory))))


if __name__ == "__main__":
    main()
