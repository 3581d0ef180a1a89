"""A worker process of the hourly shipment checker (examples/shipment_checker) for the
schedule crash tests: one poll, or one recovery pass.

Usage: python tests/crash/schedule_worker.py MODE DB
  poll    -- one poll of the schedule poller (crash points armed by the test
             fire inside it: after the claim, after the tick's record, after
             the run's submit)
  recover -- one pass of every background loop, as `durable-adk recover` runs
Prints the ticks it fired as JSON lines. With $DADK_READY and $DADK_GO (file
paths) it writes the first once its store is open and polls only once the
second exists, so several processes race for the same tick.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from examples.shipment_checker.app import APP_NAME, build_agent, durable_adk_schedules, hourly_check
from google.adk.apps import App

from durable_adk.adk.loops.background import Background, BackgroundSettings
from durable_adk.adk.runner import DurableRunner
from durable_adk.store import Store, open_store

APP = APP_NAME
SCHEDULE = hourly_check


def build_runner(store: Store, worker: str) -> DurableRunner:
    return DurableRunner(
        app=App(name=APP, root_agent=build_agent()),
        store=store,
        worker_id=worker,
        schedules=durable_adk_schedules,
        background=False,
        lease=3.0,
    )


def ready_set_go() -> None:
    """With $DADK_READY and $DADK_GO set: says it is ready, then waits for the go (a race)."""
    ready, go = os.environ.get("DADK_READY"), os.environ.get("DADK_GO")
    if not ready or not go:
        return
    Path(ready).write_text(str(os.getpid()))
    while not Path(go).exists():
        time.sleep(0.005)


async def main(mode: str, url: str) -> None:
    async with open_store(url) as store:
        runner = build_runner(store, f"{mode}-worker-{os.getpid()}")
        ready_set_go()
        background = Background(runner, BackgroundSettings(), one_off=mode == "recover")
        if mode == "poll":
            fired = await background.scheduler.poll_once(wait=True)
        else:
            fired = (await background.once()).ticks
        for tick in fired:
            print(json.dumps({"tick": tick.tick_key, "run": tick.run_id, "state": tick.state}))
        print(json.dumps({"pid": os.getpid()}))
        await runner.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
