"""Recovery demo: runs killed mid-model-call and mid-tool, recovered by a fresh worker.

``run`` drives one turn through DurableRunner; a crash point armed by the
parent kills it. ``recover`` is the fresh worker: it backdates the dead
worker's leases (instead of waiting them out), runs one sweep and prints, as
JSON, what it found and did for each run.
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

APP_NAME = "recovery_demo"
USER_ID = "demo-user"


def check_stock(item: str, tool_context: ToolContext) -> dict[str, Any]:
    """Reads stock for an item (read-only: safe to run again)."""
    crash_point("demo.in_check_stock")
    tool_context.state[f"stock:{item}"] = 7
    return {"item": item, "in_stock": 7}


def _answer(request: LlmRequest) -> Turn:
    crash_point("demo.in_model_call")
    return Say("We have 7 in stock.")


def build_agent() -> LlmAgent:
    """One assistant with a read-only tool; the final answer can crash mid-call."""
    model = ScriptedModel({"assistant": [Call("check_stock", {"item": "lamp"}), _answer]})
    return LlmAgent(
        name="assistant", model=model, instruction="Answer stock questions.", tools=[check_stock]
    )


def make_runner(store: Any, worker: str, *, unsafe: bool = False) -> DurableRunner:
    """The runner every process of this demo uses (``unsafe``: check_stock not idempotent)."""
    return DurableRunner(
        app=build_agent(),
        app_name=APP_NAME,
        store=store,
        worker_id=worker,
        lease=5.0,
        idempotent_tools=[] if unsafe else ["check_stock"],
    )


async def run(db: str, session_id: str, unsafe: bool = False) -> None:
    """Drives one turn; dies at the armed crash point."""
    async with open_store(db) as store:
        runner = make_runner(store, "worker-A", unsafe=unsafe)
        async for _ in runner.run(user_id=USER_ID, session_id=session_id, message="Any lamps?"):
            pass


async def recover(db: str, unsafe: bool = False, worker: str = "worker-B") -> list[dict[str, Any]]:
    """A fresh worker: expire the dead workers' leases, sweep once, report."""
    async with open_store(db) as store:
        return await sweep_as_fresh_worker(make_runner(store, worker, unsafe=unsafe))


def main() -> None:
    """Command line of the demo's child processes."""
    parser = argparse.ArgumentParser(prog="python -m durable_adk.demo.recovery_demo")
    parser.add_argument("action", choices=["run", "recover"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--session", default="")
    parser.add_argument("--unsafe", action="store_true", help="check_stock is not idempotent")
    parser.add_argument("--worker", default="worker-B")
    args = parser.parse_args()
    if args.action == "run":
        asyncio.run(run(args.db, args.session, args.unsafe))
    else:
        print(json.dumps(asyncio.run(recover(args.db, args.unsafe, args.worker))))


if __name__ == "__main__":
    main()
