"""A worker process for the crash tests: drives one run and can be frozen or killed.

Usage: python tests/crash/worker.py MODE DB SESSION
  slow   -- one tool (read-only, declared idempotent) that reads the fake
            inventory service at $DADK_INVENTORY_URL (if set), announces itself
            by creating $DADK_TOOL_MARKER, then sleeps $DADK_TOOL_SLEEP seconds
  paused -- a long-running tool that submits the report to the report builder
            at $DADK_BUILDER_URL (if set) and returns a pending answer
Crash points come from the environment (durable_adk.testing.arm). The outside
calls carry ``X-Caller-Pid``, so a test can tell this process's calls from
those of the fresh worker it runs itself.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.tools import LongRunningFunctionTool

from durable_adk import errors
from durable_adk.adk.runner import DurableRunner
from durable_adk.store import Store, open_store
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.report_builder import ReportBuilderClient
from durable_adk.testing.services import ResourceClient

APP = "crashlab"
USER = "u"


def slow_lookup(item: str) -> dict[str, Any]:
    """Reads something slowly (safe to run again)."""
    if os.environ.get("DADK_INVENTORY_URL"):
        caller = {"pid": str(os.getpid())}
        ResourceClient(os.environ["DADK_INVENTORY_URL"], "reservations", caller=caller).find(item)
    marker = os.environ.get("DADK_TOOL_MARKER")
    if marker:
        Path(marker).write_text(str(os.getpid()))
    time.sleep(float(os.environ.get("DADK_TOOL_SLEEP", "0")))
    return {"item": item, "found": True}


def start_report(quarter: str) -> dict[str, Any]:
    """Starts a long report; the result arrives later."""
    job = f"report:{quarter}"
    if os.environ.get("DADK_BUILDER_URL"):
        caller = {"pid": str(os.getpid())}
        ReportBuilderClient(os.environ["DADK_BUILDER_URL"], caller=caller).submit(
            job, quarter, "EMEA"
        )
    return {"status": "pending", "job": job}


def build_runner(store: Store, mode: str, worker: str) -> DurableRunner:
    if mode == "slow":
        script = [Call("slow_lookup", {"item": "lamp"}), Say("Found the lamp.")]
        agent = LlmAgent(name="root", model=ScriptedModel({"root": script}), tools=[slow_lookup])
        return DurableRunner(
            app=agent,
            app_name=APP,
            store=store,
            worker_id=worker,
            lease=3.0,
            idempotent_tools=["slow_lookup"],
        )
    script = [Call("start_report", {"quarter": "2026-Q3"}), Say("The report is being built.")]
    agent = LlmAgent(
        name="root",
        model=ScriptedModel({"root": script}),
        tools=[LongRunningFunctionTool(func=start_report)],
    )
    return DurableRunner(app=agent, app_name=APP, store=store, worker_id=worker, lease=3.0)


async def main(mode: str, db: str, session: str) -> int:
    async with open_store(db) as store:
        runner = build_runner(store, mode, f"worker-{os.getpid()}")
        try:
            async for _ in runner.run(user_id=USER, session_id=session, message="go"):
                pass
        except errors.Fenced as exc:
            print(f"FENCED: {exc}", file=sys.stderr)
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:4])))
