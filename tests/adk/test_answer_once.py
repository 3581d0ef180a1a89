"""Each pause takes one answer, even when two are sent at once (issue 14), both backends.

The session check alone lets two answers read against the same session both
through; the answer claim written with the run that carries the answer lets
only one in, whichever path sends it (the run API, the interrupts inbox). A
claim held by a run that ended without delivering its answer is freed.

Each test makes both answers read the session before either writes (a
barrier in ``get_session``), so the race is forced, not hoped for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.tools.function_tool import FunctionTool
from google.genai import types

from durable_adk import DurableRunner, RunStatus, errors, journaled
from durable_adk.adk.loops.recovery import Sweeper
from durable_adk.adk.runs.inbox import answer_interrupt
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.store import Store
from durable_adk.tables.ledger import Run
from durable_adk.testing import Call, Say, ScriptedModel


def cashier(store: Store, acts: list[str]) -> DurableRunner:
    @journaled(key="pay:{invoice}")
    def pay(invoice: str, idempotency_key: str) -> dict[str, str]:
        """Pays an invoice."""
        acts.append(idempotency_key)
        return {"paid": invoice}

    model = ScriptedModel({"cashier": [Call("pay", {"invoice": "I-1"}), Say("Paid I-1.")]})
    agent = LlmAgent(
        name="cashier", model=model, tools=[FunctionTool(pay.func, require_confirmation=True)]
    )
    return DurableRunner(app=agent, store=store, app_name="cashier")


async def paused_on_approval(runner: DurableRunner) -> tuple[Run, types.Content]:
    """The cashier's run PAUSED on its confirmation, and the approval that answers it."""
    async for _ in runner.run(user_id="u", session_id="s", message="pay I-1"):
        pass
    (paused,) = await runner.ledger.list_runs()
    assert paused.status is RunStatus.PAUSED
    session = await runner.sessions.get_session(app_name="cashier", user_id="u", session_id="s")
    assert session is not None
    (request,) = [
        c
        for e in session.events
        for c in e.get_function_calls()
        if c.name == "adk_request_confirmation"
    ]
    part = types.FunctionResponse(id=request.id, name=request.name, response={"confirmed": True})
    return paused, types.Content(role="user", parts=[types.Part(function_response=part)])


def both_read_first(monkeypatch: pytest.MonkeyPatch, parties: int = 2) -> None:
    """Every session read waits until ``parties`` reads are done: all answers pass the check."""
    barrier = asyncio.Barrier(parties)
    real: Callable[..., Awaitable[Any]] = DurableSessionService.get_session
    armed = [True]

    async def get_session(self: DurableSessionService, **kwargs: Any) -> Any:
        session = await real(self, **kwargs)
        if armed[0]:
            try:
                await asyncio.wait_for(barrier.wait(), 10)
            finally:
                armed[0] = False
        return session

    monkeypatch.setattr(DurableSessionService, "get_session", get_session)


async def drive_all(runner: DurableRunner) -> None:
    """Drives what the answers queued: ours at once, an operator's by a worker's sweep."""
    for run in await runner.ledger.list_runs():
        if run.status is RunStatus.QUEUED and run.owner != runner.worker_id:
            (recovered,) = await Sweeper(runner).recover_once()
            assert recovered.run_id == run.run_id
        elif run.status is RunStatus.QUEUED:
            claimed = await runner.wait_for_turn(run)
            message = types.Content.model_validate_json(claimed.request)
            async for _ in runner.drive(claimed, message, resume=True):
                pass


async def test_two_answers_at_the_same_instant_one_is_taken_the_other_refused(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    acts: list[str] = []
    runner = cashier(store, acts)
    paused, approval = await paused_on_approval(runner)
    before = await runner.sessions.get_session(app_name="cashier", user_id="u", session_id="s")
    assert before is not None
    both_read_first(monkeypatch)

    async def send() -> Run:
        run, _ = await runner.submit(
            user_id="u", session_id="s", message=approval, invocation_id=paused.invocation_id
        )
        return run

    outcomes = await asyncio.gather(send(), send(), return_exceptions=True)
    taken = [o for o in outcomes if isinstance(o, Run)]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(taken) == 1 and len(refused) == 1, outcomes
    assert isinstance(refused[0], errors.Conflict)
    assert "already answered" in str(refused[0]) and taken[0].run_id in str(refused[0])
    # The refused answer wrote nothing: one run carries the answer.
    runs = await runner.ledger.list_runs()
    assert [r.run_id for r in runs if r.status is RunStatus.QUEUED] == [taken[0].run_id]
    monkeypatch.undo()
    await drive_all(runner)
    assert acts == ["pay:I-1"]
    after = await runner.sessions.get_session(app_name="cashier", user_id="u", session_id="s")
    assert after is not None
    answers = [
        r for e in after.events for r in e.get_function_responses() if r.name == approval_name()
    ]
    assert len(answers) == 1
    assert {r.status for r in await runner.ledger.list_runs()} == {RunStatus.DONE}


def approval_name() -> str:
    return "adk_request_confirmation"


async def test_an_inbox_answer_and_a_run_api_answer_at_the_same_instant_one_is_taken(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    acts: list[str] = []
    runner = cashier(store, acts)
    paused, approval = await paused_on_approval(runner)
    assert approval.parts and approval.parts[0].function_response
    call_id = approval.parts[0].function_response.id
    assert call_id
    both_read_first(monkeypatch)

    async def by_api() -> Run:
        run, _ = await runner.submit(
            user_id="u", session_id="s", message=approval, invocation_id=paused.invocation_id
        )
        return run

    async def by_inbox() -> Run:
        answered = await answer_interrupt(store, call_id, by="ops-alice", decision="approve")
        return answered.run

    outcomes = await asyncio.gather(by_api(), by_inbox(), return_exceptions=True)
    taken = [o for o in outcomes if isinstance(o, Run)]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(taken) == 1 and len(refused) == 1, outcomes
    assert isinstance(refused[0], errors.Conflict) and "already answered" in str(refused[0])
    # Whichever path lost is told the run that carries the winning answer (issue 47).
    assert taken[0].run_id in str(refused[0]), refused[0]
    monkeypatch.undo()
    await drive_all(runner)
    assert acts == ["pay:I-1"]
    assert {r.status for r in await runner.ledger.list_runs()} == {RunStatus.DONE}


async def test_a_claim_held_by_a_cancelled_run_is_freed_and_the_pause_answered_again(
    store: Store,
) -> None:
    acts: list[str] = []
    runner = cashier(store, acts)
    paused, approval = await paused_on_approval(runner)
    first, _ = await runner.submit(
        user_id="u", session_id="s", message=approval, invocation_id=paused.invocation_id
    )
    with pytest.raises(errors.Conflict, match=f"by run {first.run_id} \\(QUEUED\\)"):
        await runner.submit(
            user_id="u", session_id="s", message=approval, invocation_id=paused.invocation_id
        )
    cancelled = await runner.cancel(first.run_id, by="ops-bob", reason="wrong approver")
    assert cancelled.run.status is RunStatus.CANCELLED and cancelled.changed
    second, _ = await runner.submit(
        user_id="u", session_id="s", message=approval, invocation_id=paused.invocation_id
    )
    assert second.run_id != first.run_id and second.status is RunStatus.QUEUED
    await drive_all(runner)
    assert acts == ["pay:I-1"]
    assert (await runner.ledger.get(second.run_id)).status is RunStatus.DONE  # type: ignore[union-attr]


async def test_answer_claims_need_the_invocation(store: Store) -> None:
    runner = cashier(store, [])
    with pytest.raises(errors.InvalidArgument, match="invocation"):
        await runner.ledger.submit(
            app_name="cashier",
            user_id="u",
            session_id="s",
            request={"role": "user", "parts": [{"text": "x"}]},
            owner="w",
            claims=[("c-1", 1)],
        )
    assert await runner.ledger.list_runs() == []
