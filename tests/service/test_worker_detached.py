"""A worker's drain waits for the drives whose caller stopped reading, then hands back the rest."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from google.adk.agents import LlmAgent

from durable_adk.service.settings import ServiceSettings
from durable_adk.service.worker import Worker
from durable_adk.store import Store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.testing import Call, Say, ScriptedModel


def slow_agent(acts: list[str], seconds: float) -> LlmAgent:
    async def work(job: str) -> dict[str, Any]:
        """Works on a job for a while, then acts."""
        await asyncio.sleep(seconds)
        acts.append(job)
        return {"job": job}

    script = [Call("work", {"job": "j"}), Say("finished")]
    return LlmAgent(name="assistant", model=ScriptedModel({"assistant": script}), tools=[work])


async def leave_after_first_event(worker: Worker) -> None:
    events = worker.runner.run(user_id="u", session_id="s", message="go")
    async with contextlib.aclosing(events):
        async for _ in events:
            break


async def test_drain_waits_for_a_detached_drive_to_end(store_url: str, store: Store) -> None:
    acts: list[str] = []
    settings = ServiceSettings(db=store_url, worker_id="w1", drain_seconds=60)
    worker = Worker(app=slow_agent(acts, 1.0), store=store, settings=settings)
    await leave_after_first_event(worker)
    assert len(worker.runner.detached_runs) == 1
    assert await worker.drain() == []  # nothing left to hand back
    (run,) = await worker.runner.ledger.list_runs()
    assert run.status is RunStatus.DONE and acts == ["j"]


async def test_drain_cancels_a_detached_drive_past_its_time_and_hands_it_back(
    store_url: str, store: Store
) -> None:
    acts: list[str] = []
    settings = ServiceSettings(db=store_url, worker_id="w1", drain_seconds=0.5)
    worker = Worker(app=slow_agent(acts, 600.0), store=store, settings=settings)
    await leave_after_first_event(worker)
    (run,) = await worker.runner.ledger.list_runs()
    assert await asyncio.wait_for(worker.drain(), 30) == [run.run_id]
    assert worker.runner.detached_runs == [] and acts == []
    (taken,) = await RunLedger(store).claim_expired("next-worker")
    assert taken.run_id == run.run_id and taken.epoch == run.epoch + 1
