"""Recovery demo: runs killed mid-model-call and mid-tool, recovered by a fresh worker.

``run`` drives one turn through DurableRunner; a crash point armed by the
parent kills it. ``recover`` is the fresh worker: it backdates the dead
worker's leases (instead of waiting them out), runs one sweep and prints, as
JSON, what it found and did for each run. ``serve`` is a fresh process that
does nothing but ``async with DurableRunner(...)`` (the runner's own
background loops recover) until no run of the app is open, then prints each
run's status as JSON. :func:`app` is the same app for ``durable-adk serve``
and ``durable-adk recover durable_adk.demo.recovery_demo:app``.

With ``--inventory URL`` (a fake ``inventory`` service, see
:mod:`durable_adk.testing.services`), ``check_stock`` first reads the
warehouse over HTTP, tagged with ``X-Caller-Worker``, so a test can count how
many times, and by which worker, the tool really ran.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import warnings
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode  # type: ignore[attr-defined]
from google.adk.apps import App, ResumabilityConfig
from google.adk.models.llm_request import LlmRequest
from google.adk.tools.tool_context import ToolContext

from durable_adk.adk.commits.barrier import CommitMode
from durable_adk.adk.loops.every import BackgroundSettings
from durable_adk.adk.runner import DurableRunner
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunStatus
from durable_adk.testing import Call, Say, ScriptedModel, crash_point
from durable_adk.testing.harness import sweep_as_fresh_worker
from durable_adk.testing.scripted_model import Turn
from durable_adk.testing.services import ResourceClient

APP_NAME = "recovery_demo"
USER_ID = "demo-user"
INVENTORY_ENV = "DURABLE_ADK_DEMO_INVENTORY"
"""A fake inventory service's URL that :func:`app`'s ``check_stock`` reads first, if set."""


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


def _inventory(url: str, worker: str) -> ResourceClient | None:
    return ResourceClient(url, "reservations", caller={"worker": worker}) if url else None


def app() -> App:
    """The demo's app for ``durable-adk serve`` / ``recover`` (check_stock is not marked
    idempotent: pass ``--idempotent-tool check_stock``); reads ``$DURABLE_ADK_DEMO_INVENTORY``.
    """
    worker = os.environ.get("DURABLE_ADK_DEMO_WORKER", f"pid-{os.getpid()}")
    agent = build_agent(_inventory(os.environ.get(INVENTORY_ENV, ""), worker))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # ADK flags resumability as experimental
        resumable = ResumabilityConfig(is_resumable=True)
    return App(name=APP_NAME, root_agent=agent, resumability_config=resumable)


def make_runner(
    store: Any,
    worker: str,
    *,
    unsafe: bool = False,
    inventory_url: str = "",
    background: bool | BackgroundSettings = True,
    commits: CommitMode = "barrier",
) -> DurableRunner:
    """The runner every process of this demo uses (``unsafe``: check_stock not idempotent)."""
    return DurableRunner(
        commits=commits,
        app=build_agent(_inventory(inventory_url, worker)),
        app_name=APP_NAME,
        store=store,
        worker_id=worker,
        lease=30.0,
        idempotent_tools=[] if unsafe else ["check_stock"],
        background=background,
    )


async def run(
    db: str,
    session_id: str,
    unsafe: bool = False,
    inventory_url: str = "",
    streaming: bool = False,
    commits: CommitMode = "barrier",
) -> None:
    """Drives one turn; dies at the armed crash point."""
    async with open_store(db) as store:
        runner = make_runner(
            store, "worker-A", unsafe=unsafe, inventory_url=inventory_url, commits=commits
        )
        config = RunConfig(streaming_mode=StreamingMode.SSE) if streaming else None
        async for _ in runner.run(
            user_id=USER_ID, session_id=session_id, message="Any lamps?", run_config=config
        ):
            pass


async def recover(
    db: str, unsafe: bool = False, worker: str = "worker-B", inventory_url: str = ""
) -> list[dict[str, Any]]:
    """A fresh worker: expire the dead workers' leases, sweep once, report."""
    async with open_store(db) as store:
        runner = make_runner(store, worker, unsafe=unsafe, inventory_url=inventory_url)
        return await sweep_as_fresh_worker(runner)


async def _open_runs(runner: DurableRunner) -> int:
    runs = await runner.ledger.list_runs(limit=1000)
    return sum(r.status in (RunStatus.RUNNING, RunStatus.QUEUED) for r in runs)


async def serve_until_idle(
    db: str, worker: str = "worker-B", inventory_url: str = ""
) -> dict[str, str]:
    """A fresh process with no hand wiring: ``async with`` the runner until no run is open.

    Returns:
        Every run's status, by run id.
    """
    async with open_store(db) as store:
        settings = BackgroundSettings(sweep_interval=0.1)
        async with make_runner(
            store, worker, inventory_url=inventory_url, background=settings
        ) as runner:
            # Polls the ledger (the loops recover meanwhile); the parent bounds the wait.
            while await _open_runs(runner):  # noqa: ASYNC110
                await asyncio.sleep(0.1)
        return {r.run_id: r.status.value for r in await runner.ledger.list_runs(limit=1000)}


def main() -> None:
    """Command line of the demo's child processes."""
    parser = argparse.ArgumentParser(prog="python -m durable_adk.demo.recovery_demo")
    parser.add_argument("action", choices=["run", "recover", "serve"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--session", default="")
    parser.add_argument("--unsafe", action="store_true", help="check_stock is not idempotent")
    parser.add_argument("--worker", default="worker-B")
    parser.add_argument("--inventory", default="", help="a fake inventory service's URL")
    parser.add_argument("--streaming", action="store_true", help="stream the model's text")
    parser.add_argument(
        "--per-event", action="store_true", help="run: one unit per event (commits='per_event')"
    )
    args = parser.parse_args()
    if args.action == "run":
        commits: CommitMode = "per_event" if args.per_event else "barrier"
        asyncio.run(
            run(args.db, args.session, args.unsafe, args.inventory, args.streaming, commits)
        )
    elif args.action == "serve":
        print(json.dumps(asyncio.run(serve_until_idle(args.db, args.worker, args.inventory))))
    else:
        print(json.dumps(asyncio.run(recover(args.db, args.unsafe, args.worker, args.inventory))))


if __name__ == "__main__":
    main()
