"""The sweeper holds no claim it is not driving, on both backends.

Five runs whose worker died wait for recovery. Two sweepers (two workers, one
process, each its own store connection) recover them with ``concurrency=1`` and
``batch=5`` while every drive is held inside its tool by an ``asyncio.Event``.
A claim that waited for a free slot would sit with nobody renewing its lease;
its lease running out is simulated by moving it back in the database, as the
clock would. The runs must each be claimed once, by one sweeper, and act once.

A re-drive that a transient fault interrupts is a normal outcome of a pass: the
run is back on the ledger (RUNNING, for a later recovery), not FAILED. A call
the agent moved past without its answer is never marked done: the run parks.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from durable_adk import errors
from durable_adk.adk.loops.recovery import Sweeper
from durable_adk.adk.runner import DurableRunner
from durable_adk.store import Store, open_store
from durable_adk.tables.ledger import Run, RunLedger, RunStatus
from durable_adk.testing import Call, Say, ScriptedModel

SESSIONS = [f"s{i}" for i in range(5)]
WAIT = 120.0  # generous: the machine may be loaded; nothing here waits on a clock


class World:
    """The outside world of the slow tool: acts per session, and a gate per session."""

    def __init__(self) -> None:
        self.acts: collections.Counter[str] = collections.Counter()
        self.entered = {s: asyncio.Event() for s in SESSIONS}
        self.gates = {s: asyncio.Event() for s in SESSIONS}

    async def slow_lookup(self, q: str, tool_context: ToolContext) -> dict[str, str]:
        session_id = tool_context.session.id
        self.acts[session_id] += 1
        self.entered[session_id].set()
        await self.gates[session_id].wait()
        return {"q": q, "found": "yes"}


def make_runner(store: Store, worker_id: str, world: World) -> DurableRunner:
    async def slow_lookup(q: str, tool_context: ToolContext) -> dict[str, str]:
        """Looks something up in a slow outside system."""
        return await world.slow_lookup(q, tool_context)

    script = [Call("slow_lookup", {"q": "lamps"}), Say("found it")]
    agent = LlmAgent(
        name="assistant", model=ScriptedModel({"assistant": script}), tools=[slow_lookup]
    )
    return DurableRunner(
        app=agent,
        app_name="shop",
        store=store,
        worker_id=worker_id,
        idempotent_tools=["slow_lookup"],
    )


def record_claims(runner: DurableRunner, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The run ids every claim of ``runner``'s ledger returned, in order."""
    claims: list[str] = []
    claim = runner.ledger.claim_expired

    async def recorded(owner: str, **kw: Any) -> list[Run]:
        runs = await claim(owner, **kw)
        claims.extend(r.run_id for r in runs)
        return runs

    monkeypatch.setattr(runner.ledger, "claim_expired", recorded)
    return claims


async def orphans(store: Store, runner: DurableRunner) -> dict[str, str]:
    """Five runs submitted by a worker that died before its runs' turn came: session -> run."""
    ledger = RunLedger(store)
    runs = {}
    for session_id in SESSIONS:
        await runner.sessions.create_session(app_name="shop", user_id="u", session_id=session_id)
        run = await ledger.submit(
            app_name="shop",
            user_id="u",
            session_id=session_id,
            request={"role": "user", "parts": [{"text": "Any lamps?"}]},
            owner="dead",
        )
        await ledger.backdate(run.run_id, 3600)
        runs[session_id] = run.run_id
    return runs


async def held_by(ledger: RunLedger, owner: str) -> set[str]:
    return {r.run_id for r in await ledger.list_runs(status=RunStatus.RUNNING) if r.owner == owner}


async def first_entered(world: World, among: set[str]) -> str:
    async def wait(session_id: str) -> str:
        await world.entered[session_id].wait()
        return session_id

    waits = [asyncio.create_task(wait(s)) for s in among]
    try:
        done, _ = await asyncio.wait(waits, timeout=WAIT, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waits:
            task.cancel()
    assert done, "no drive reached its tool"
    return next(iter(done)).result()


async def test_no_claim_waits_unheartbeated_and_no_run_is_driven_twice(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = World()
    async with open_store(store_url) as store_a, open_store(store_url) as store_b:
        runner_a = make_runner(store_a, "worker-a", world)
        runner_b = make_runner(store_b, "worker-b", world)
        runs = await orphans(store_a, runner_a)
        session_of = {run_id: s for s, run_id in runs.items()}
        claims_a = record_claims(runner_a, monkeypatch)
        claims_b = record_claims(runner_b, monkeypatch)
        ledger = RunLedger(store_a)
        pass_a = asyncio.create_task(Sweeper(runner_a, batch=5, concurrency=1).recover_once())
        pass_b: asyncio.Task[Any] | None = None
        try:
            driven_a = await first_entered(world, set(SESSIONS))
            # Worker A holds exactly the run it drives: no claim waits for a slot.
            assert await held_by(ledger, "worker-a") == {runs[driven_a]}
            # Time passes: a claim nobody renews would now have run out.
            waiting = await held_by(ledger, "worker-a") - {runs[driven_a]}
            for run_id in waiting:
                await ledger.backdate(run_id, 3600)
            pass_b = asyncio.create_task(Sweeper(runner_b, batch=5, concurrency=1).recover_once())
            driven_b = await first_entered(world, set(SESSIONS) - {driven_a})
            assert await held_by(ledger, "worker-b") == {runs[driven_b]}
            assert not set(claims_a) & set(claims_b)
            for gate in world.gates.values():
                gate.set()
            done_a, done_b = await asyncio.wait_for(asyncio.gather(pass_a, pass_b), WAIT)
        finally:
            for gate in world.gates.values():
                gate.set()
            for task in (pass_a, pass_b):
                if task is not None and not task.done():
                    task.cancel()
    # Every run claimed once, by one sweeper, in one pass of each.
    assert not set(claims_a) & set(claims_b)
    assert sorted(claims_a + claims_b) == sorted(runs.values())
    assert [r.run_id for r in done_a] == claims_a and [r.run_id for r in done_b] == claims_b
    for recovery in done_a + done_b:
        assert (recovery.found.value, recovery.action, recovery.status) == (
            "NOT_STARTED",
            "redrive",
            RunStatus.DONE,
        )
    async with open_store(store_url) as store:
        final = await RunLedger(store).list_runs()
    assert len(final) == 5
    for run in final:
        owner = "worker-a" if run.run_id in claims_a else "worker-b"
        assert (run.status, run.attempts, run.epoch, run.owner) == (RunStatus.DONE, 1, 1, owner)
    assert world.acts == {session_of[r]: 1 for r in runs.values()}  # each tool acted once


async def test_an_interrupted_redrive_is_a_normal_outcome_not_a_failure(
    store_url: str,
) -> None:
    """A store fault during the re-drive hands the run back; the pass reports it RUNNING."""
    faults = {"left": 1}

    def look(q: str) -> dict[str, str]:
        """Looks something up."""
        if faults["left"]:
            faults["left"] -= 1
            raise errors.DatabaseBusy("the database is locked")
        return {"q": q}

    script = [Call("look", {"q": "x"}), Say("found")]
    agent = LlmAgent(name="assistant", model=ScriptedModel({"assistant": script}), tools=[look])
    async with open_store(store_url) as store:
        runner = DurableRunner(
            app=agent,
            app_name="shop",
            store=store,
            worker_id="w1",
            idempotent_tools=["look"],
            backoff=30.0,  # the hand-back waits it out: no sweep may take the run at once
        )
        await runner.sessions.create_session(app_name="shop", user_id="u", session_id="s")
        run = await runner.ledger.submit(
            app_name="shop",
            user_id="u",
            session_id="s",
            request={"role": "user", "parts": [{"text": "look"}]},
            owner="dead",
        )
        await runner.ledger.backdate(run.run_id, 3600)
        (first,) = await Sweeper(runner).recover_once()
        assert (first.found.value, first.action, first.status) == (
            "NOT_STARTED",
            "redrive",
            RunStatus.RUNNING,
        )
        assert "DatabaseBusy" in first.reason
        after = await runner.ledger.get(run.run_id)
        assert after is not None and after.status is RunStatus.RUNNING  # back for recovery
        assert after.last_error is not None and "DatabaseBusy" in after.last_error
        assert await Sweeper(runner).recover_once() == []  # its back-off has not passed
        await runner.ledger.backdate(run.run_id, 3600)
        (second,) = await Sweeper(runner).recover_once()
        assert (second.found.value, second.action, second.status) == (
            "TOOL_UNANSWERED",
            "redrive",
            RunStatus.DONE,
        )
        final = await runner.ledger.get(run.run_id)
        assert final is not None and (final.status, final.attempts) == (RunStatus.DONE, 2)


async def test_a_call_left_behind_by_a_later_model_turn_parks_never_done(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The agent made a call, then (its answer lost) a final text: not done, not re-driven."""
    acts: list[str] = []

    def look(q: str) -> dict[str, str]:
        """Looks something up."""
        acts.append(q)
        return {"q": q}

    agent = LlmAgent(
        name="assistant", model=ScriptedModel({"assistant": [Say("never asked")]}), tools=[look]
    )
    async with open_store(store_url) as store:
        runner = DurableRunner(
            app=agent, app_name="shop", store=store, worker_id="w1", idempotent_tools=["look"]
        )
        session = await runner.sessions.create_session(app_name="shop", user_id="u", session_id="s")
        run = await runner.ledger.submit(
            app_name="shop",
            user_id="u",
            session_id="s",
            request={"role": "user", "parts": [{"text": "look"}]},
            owner="dead",
        )
        call = types.Part(function_call=types.FunctionCall(id="c1", name="look", args={"q": "x"}))
        for author, role, part in (
            ("user", "user", types.Part(text="look")),
            ("assistant", "model", call),
            ("assistant", "model", types.Part(text="Here you are.")),
        ):
            event = Event(
                invocation_id=run.invocation_id,
                author=author,
                content=types.Content(role=role, parts=[part]),
            )
            await runner.sessions.append_event(session, event)
        await runner.ledger.backdate(run.run_id, 3600)
        with caplog.at_level(logging.INFO, logger="durable_adk.recovery"):
            (recovery,) = await Sweeper(runner).recover_once()
        assert (recovery.found.value, recovery.action, recovery.status) == (
            "TOOL_UNANSWERED",
            "park",
            RunStatus.PARKED,
        )
        (logged,) = [r for r in caplog.records if r.getMessage().startswith("recovered run=")]
        assert f"run={run.run_id} epoch=1 class=TOOL_UNANSWERED" in logged.getMessage()
        assert "action=park status=PARKED" in logged.getMessage()
        (parked,) = [r for r in caplog.records if r.getMessage().startswith("parked run=")]
        assert parked.levelno == logging.WARNING  # a park: a person must look
        assert "left unanswered: look" in recovery.reason
        (letter,) = await runner.ledger.dead_letters(run_id=run.run_id)
        assert letter.classification == "TOOL_UNANSWERED" and "left unanswered" in letter.error
        assert acts == []  # nothing was run again
