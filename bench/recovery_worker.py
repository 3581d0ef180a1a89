"""One recovery worker process of ``bench/recovery.py``, and the app its orphans belong to.

Run by the bench (from the repository root)::

    .venv/bin/python -m bench.recovery_worker URL WORKER_ID [--batch 20]

The process opens the store, builds the same app the orphaned runs were started
with (:func:`build_agent`), warms up with one run of its own (user ``warmup``),
prints ``ready`` and waits for a ``go`` line on stdin. It then loops
``Sweeper(runner, batch=...).recover_once()`` until a pass finds nothing to
claim, prints one JSON line (runs recovered, wall-clock start and end, CPU time
of the process) and waits for an ``exit`` line before closing its connections,
so the parent can read the server's CPU use while every backend is still alive.

The app: one LlmAgent ``order_desk`` with one read-only (idempotent) tool,
``check_order``, and a ScriptedModel of two steps: call the tool for the order
named in the user's message, then answer with :func:`final_text`. Both steps
are computed from the request, so every run's answer is unique and a re-drive
in any process gives the same one. :func:`build_agent` can also build the
*dying* variants the bench uses to leave orphans behind: the worker "dies"
(raises :class:`WorkerDied`, a ``BaseException`` that neither ADK nor
DurableRunner handles, so the run stays RUNNING with the events stored so far)
in the first model call, in the tool, or in the second model call.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.llm_request import LlmRequest

from durable_adk.adk.recovery import Sweeper
from durable_adk.adk.runner import DurableRunner
from durable_adk.store import Store, open_store
from durable_adk.testing.scripted_model import Call, Say, ScriptedModel, Turn

APP = "bench_recovery"
AGENT = "order_desk"
TOOL = "check_order"
CUSTOMERS = "customer-"  # user ids of the orphans start with this
WARMUP_USER = "warmup"

_ORDER_RE = re.compile(r"order (\w+)\?")

DIES_IN = ("first_model_call", "tool", "second_model_call")


class WorkerDied(BaseException):
    """Stands for the worker process being killed at this instant."""


def request_text(order_id: str) -> str:
    """The user's message of the run for ``order_id``."""
    return f"Where is my order {order_id}?"


def final_text(order_id: str) -> str:
    """The model's final answer in the run for ``order_id`` (unique per run)."""
    return f"Order {order_id} has shipped and arrives in 2 days (tracking TRK-{order_id})."


def _order_of(request: LlmRequest) -> str:
    for content in request.contents:
        if content.role != "user":
            continue
        for part in content.parts or ():
            match = _ORDER_RE.search(part.text or "")
            if match:
                return match.group(1)
    raise ValueError("no order id in the request")


def _ask_tool(request: LlmRequest) -> Turn:
    return Call(TOOL, {"order_id": _order_of(request)})


def _answer(request: LlmRequest) -> Turn:
    return Say(final_text(_order_of(request)))


def _die(request: LlmRequest) -> Turn:
    raise WorkerDied("killed during the model call")


def build_agent(dies_in: str | None = None) -> LlmAgent:
    """The app's root agent; ``dies_in`` (one of :data:`DIES_IN`) builds a dying worker's."""
    if dies_in is not None and dies_in not in DIES_IN:
        raise ValueError(f"dies_in must be one of {DIES_IN}")

    def check_order(order_id: str) -> dict[str, Any]:
        """Looks up an order's shipping status (read-only: safe to run again)."""
        if dies_in == "tool":
            raise WorkerDied("killed during the tool call")
        return {"order_id": order_id, "status": "shipped", "eta_days": 2}

    script = [
        _die if dies_in == "first_model_call" else _ask_tool,
        _die if dies_in == "second_model_call" else _answer,
    ]
    return LlmAgent(
        name=AGENT,
        model=ScriptedModel(script),
        instruction="You answer questions about orders.",
        tools=[check_order],
    )


def make_runner(store: Store, worker_id: str, dies_in: str | None = None) -> DurableRunner:
    """The DurableRunner every process of the bench uses (same app name, agent and tools)."""
    return DurableRunner(
        app=build_agent(dies_in),
        app_name=APP,
        store=store,
        worker_id=worker_id,
        idempotent_tools=[TOOL],
    )


async def serve(url: str, worker_id: str, batch: int) -> None:
    async with open_store(url) as store:
        runner = make_runner(store, worker_id)
        # Warm-up: imports, ADK's first-run caches, prepared statements.
        async for _ in runner.run(
            user_id=WARMUP_USER,
            session_id=f"warmup-{worker_id}",
            message=request_text("W_" + re.sub(r"\W", "_", worker_id)),
        ):
            pass
        sweeper = Sweeper(runner, batch=batch)
        print("ready", flush=True)
        # Blocking reads on purpose: nothing else runs on the loop while we wait.
        if sys.stdin.readline().strip() != "go":
            return
        start = time.time()
        cpu0 = time.process_time()
        recovered = 0
        passes = 0
        largest = 0  # the most runs one pass claimed (the batch asks for at most `batch`)
        end = start
        outcomes: Counter[str] = Counter()
        while True:
            done = await sweeper.recover_once()
            if not done:
                break
            passes += 1
            recovered += len(done)
            largest = max(largest, len(done))
            outcomes.update(f"{r.found.value}->{r.status.value}" for r in done)
            end = time.time()
        cpu = time.process_time() - cpu0
        print(
            json.dumps(
                {
                    "worker": worker_id,
                    "recovered": recovered,
                    "passes": passes,
                    "largest_pass": largest,
                    "start": start,
                    "end": end,
                    "cpu": cpu,
                    "outcomes": dict(outcomes),
                }
            ),
            flush=True,
        )
        sys.stdin.readline()  # "exit": the parent has read the server's CPU use


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    batch = 20
    if "--batch" in args:
        i = args.index("--batch")
        batch = int(args[i + 1])
        del args[i : i + 2]
    if len(args) != 2:
        raise SystemExit("usage: python -m bench.recovery_worker URL WORKER_ID [--batch N]")
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    asyncio.run(serve(args[0], args[1], batch))


if __name__ == "__main__":
    main()
