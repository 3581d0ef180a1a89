"""The one run path where features meet: cancel with jobs, answers and the inbox.

Both backends. The outside act after a continuation (a refund) goes to a fake
payments service, a process of its own that counts every request: the asserts
are on acts, not only on ledger rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from examples.sales_report.app import JOB_ID, _latest_answer, report_tool
from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.models.llm_request import LlmRequest
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.genai import types
from test_cancel import Gate
from test_jobs_resume import DONE, Recorder

from durable_adk import errors
from durable_adk.adk.loops.resume import Resumer
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.runs.inbox import answer_interrupt
from durable_adk.adk.runs.operators import cancel_run
from durable_adk.adk.tools.journaling import journaled
from durable_adk.effect_tables.jobs import JobState, JobTable
from durable_adk.store import Store
from durable_adk.tables.interrupts import InterruptStatus, InterruptTable
from durable_adk.tables.ledger import Run, RunStatus
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.scripted_model import Turn
from durable_adk.testing.services import FakeService, ResourceClient

APP = "one-path"
USER = "u"


@pytest.fixture
def payments(tmp_path: Path) -> Iterator[FakeService]:
    with FakeService("payments", tmp_path / "payments.db") as service:
        yield service


def refund_tool(charges: ResourceClient, gate: Gate | None = None) -> Any:
    @journaled(key="refund:{order_id}", lookup=charges.find)
    async def refund(order_id: str, idempotency_key: str) -> dict[str, Any]:
        """Refunds an order."""
        if gate is not None:
            await gate.hold()
        return await asyncio.to_thread(
            charges.create, {"order_id": order_id, "customer": "c", "amount": 10.0}, idempotency_key
        )

    return refund


def after_report(request: LlmRequest) -> Turn:
    """Pending: say so and pause; the report's result: refund the order."""
    answer = _latest_answer(request)
    if answer.get("status") == "pending":
        return Say("the report is being built")
    return Call("refund", {"order_id": "ORD-1"})


def asked_of_a_person() -> LongRunningFunctionTool:
    """``start_sales_report`` as a plain long-running tool: a person answers it (the inbox)."""

    def start_sales_report(quarter: str, region: str) -> dict[str, str]:
        """Asks the analyst for the sales report."""
        return {"status": "pending"}

    return LongRunningFunctionTool(start_sales_report)


def agent(
    payments: FakeService, recorder: Recorder, gate: Gate | None = None, *, person: bool = False
) -> LlmAgent:
    """Starts a report (a long-running job, or with ``person`` a call the inbox lists), and
    once it is answered refunds an order."""
    model = ScriptedModel(
        {
            "clerk": [
                Call("start_sales_report", {"quarter": "2026-Q3", "region": "EMEA"}),
                after_report,
                Say("unused: ADK hides the turn between a call and its late answer"),
                Say("refunded"),
            ]
        }
    )
    return LlmAgent(
        name="clerk",
        model=model,
        tools=[
            asked_of_a_person() if person else report_tool(recorder, minute=1.0),
            refund_tool(payments.client("charges"), gate),
        ],
    )


def runner_for(store: Store, root: Any) -> DurableRunner:
    return DurableRunner(app=root, app_name=APP, store=store, queue_poll=0.02, background=False)


async def paused(runner: DurableRunner, session: str = "s") -> tuple[Run, types.FunctionCall]:
    events = [e async for e in runner.run(user_id=USER, session_id=session, message="go")]
    (call,) = [c for e in events for c in e.get_function_calls()]
    (run,) = [r for r in await runner.ledger.list_runs() if r.session_id == session]
    assert run.status is RunStatus.PAUSED
    return run, call


def answer(call: types.FunctionCall, body: dict[str, Any] | None = None) -> types.Content:
    response = types.FunctionResponse(id=call.id, name=call.name, response=body or DONE)
    return types.Content(role="user", parts=[types.Part(function_response=response)])


async def session_events(runner: DurableRunner, session: str = "s") -> list[Event]:
    found = await runner.sessions.get_session(app_name=APP, user_id=USER, session_id=session)
    assert found is not None
    return list(found.events)


async def test_a_cancelled_pause_takes_no_job_result_and_acts_no_more(
    store: Store, payments: FakeService
) -> None:
    recorder = Recorder()
    runner = runner_for(store, agent(payments, recorder))
    run, call = await paused(runner)
    await runner.cancel(run.run_id, by="ops", reason="customer withdrew")
    cancelled = await runner.ledger.get(run.run_id)
    assert cancelled is not None and cancelled.status is RunStatus.CANCELLED
    jobs = JobTable(store)
    job = await jobs.get(JOB_ID)
    assert job is not None and job.state is JobState.CANCELLED
    # The outside system's result arrives late: acknowledged, nothing changes.
    late = await jobs.complete(JOB_ID, JobState.SUCCEEDED, DONE)
    assert not late.changed
    done = await Resumer(runner, gather=0.0).resume_once(wait=True)
    assert [(r.job_ids, r.status) for r in done] == [((JOB_ID,), RunStatus.CANCELLED)]
    assert await Resumer(runner, gather=0.0).resume_once(wait=True) == []  # acknowledged once
    assert recorder.cancelled == [JOB_ID]  # the tool's cancel hook, once
    assert payments.acts("charges", "create") == 0
    # An answer through the run API is refused, and nothing is written.
    before = await runner.ledger.list_runs()
    with pytest.raises(errors.InvocationCancelled):
        async for _ in runner.run(
            user_id=USER, session_id="s", message=answer(call), invocation_id=run.invocation_id
        ):
            pass
    assert len(await runner.ledger.list_runs()) == len(before)
    assert payments.acts("charges", "create") == 0
    # Its open call was sealed as ADK seals an aborted invocation's.
    seals = [e for e in await session_events(runner) if e.error_code == "INVOCATION_ABORTED"]
    assert [r.id for e in seals for r in e.get_function_responses()] == [call.id]
    assert all(e.author == "clerk" for e in seals)


async def test_the_inbox_and_the_deadline_refuse_a_cancelled_invocation(
    store: Store, payments: FakeService
) -> None:
    # A call that waits on a person (a job's call is not in the inbox: issue 41).
    runner = runner_for(store, agent(payments, Recorder(), person=True))
    run, call = await paused(runner)
    await cancel_run(runner.ledger, run.run_id, by="ops")
    table = InterruptTable(store)
    assert await table.list_interrupts(session_id="s") == []  # nothing open any more
    with pytest.raises(errors.Conflict):
        await answer_interrupt(store, call.id or "", by="alice", payload=DONE)
    assert payments.acts("charges", "create") == 0


async def test_a_queued_answer_run_cancelled_gives_its_answer_claim_back(
    store: Store, payments: FakeService
) -> None:
    runner = runner_for(store, agent(payments, Recorder()))
    run, call = await paused(runner)
    queued, _ = await runner.submit(
        user_id=USER, session_id="s", message=answer(call), invocation_id=run.invocation_id
    )
    assert queued.status is RunStatus.QUEUED
    with pytest.raises(errors.Conflict):  # one answer per pause
        await runner.submit(
            user_id=USER, session_id="s", message=answer(call), invocation_id=run.invocation_id
        )
    await runner.cancel(queued.run_id, by="ops")
    # The pause is open again: the invocation was not cancelled, only that answer.
    still = await runner.ledger.get(run.run_id)
    assert still is not None and still.status is RunStatus.PAUSED
    events = [
        e
        async for e in runner.run(
            user_id=USER, session_id="s", message=answer(call), invocation_id=run.invocation_id
        )
    ]
    texts = [p.text for e in events if e.content for p in e.content.parts or () if p.text]
    assert texts[-1:] == ["refunded"], [(e.author, e.content) for e in events]
    assert payments.acts("charges", "create") == 1
    ended = await runner.ledger.get(run.run_id)
    assert ended is not None and ended.status is RunStatus.DONE


async def test_an_answer_run_cancelled_after_its_answer_was_stored_closes_the_pause(
    store: Store, payments: FakeService
) -> None:
    gate = Gate()
    runner = runner_for(store, agent(payments, Recorder(), gate))
    run, call = await paused(runner)
    answering = asyncio.create_task(
        _drain(
            runner.run(
                user_id=USER, session_id="s", message=answer(call), invocation_id=run.invocation_id
            )
        )
    )
    await asyncio.wait_for(gate.entered.wait(), 60)  # the answer is stored, the refund acting
    (answer_run,) = [r for r in await runner.ledger.list_runs() if r.status is RunStatus.RUNNING]
    await runner.cancel(answer_run.run_id, by="ops")
    gate.open.set()  # the act under way may finish and record its result
    with pytest.raises(errors.RunCancelled):
        await asyncio.wait_for(answering, 60)
    original = await runner.ledger.get(run.run_id)
    assert original is not None and original.status is RunStatus.CANCELLED
    table = InterruptTable(store)
    assert await table.list_interrupts(session_id="s", status=InterruptStatus.OPEN) == []
    assert payments.acts("charges", "create") == 1  # the act in flight, once, nothing more
    with pytest.raises(errors.InvocationCancelled):
        await runner.submit(
            user_id=USER, session_id="s", message=answer(call), invocation_id=run.invocation_id
        )
    # A later turn in the same session starts clean.
    later = runner_for(
        store, LlmAgent(name="clerk", model=ScriptedModel({"clerk": [Say("hi")] * 8}))
    )
    events = [e async for e in later.run(user_id=USER, session_id="s", message="hello")]
    assert [p.text for e in events if e.content for p in e.content.parts or () if p.text] == ["hi"]


async def _drain(events: Any) -> None:
    async for _ in events:
        pass


async def _settle(runner: DurableRunner, store: Store) -> None:
    """Drives whatever the race left queued or claimable, until nothing moves."""
    from durable_adk.adk.loops.recovery import Sweeper

    for _ in range(5):
        await Resumer(runner, gather=0.0).resume_once(wait=True)
        for run in await runner.ledger.list_runs():
            if run.status is RunStatus.QUEUED:
                await runner.ledger.backdate(run.run_id, 3600)
        await Sweeper(runner).recover_once()
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("other", ["job", "inbox", "deadline"])
async def test_cancel_racing_a_continuation_has_one_outcome(
    store: Store, payments: FakeService, other: str
) -> None:
    recorder = Recorder()
    runner = DurableRunner(
        # The inbox and its deadlines answer calls that wait on a person, never
        # a job's (issue 41): those two races pause on a plain long-running call.
        app=agent(payments, recorder, person=other != "job"),
        app_name=APP,
        store=store,
        queue_poll=0.02,
        background=False,
        interrupt_deadlines={"*": 3600.0},
    )
    run, call = await paused(runner)
    table = InterruptTable(store)

    async def continuation() -> None:
        try:
            if other == "job":
                await JobTable(store).complete(JOB_ID, JobState.SUCCEEDED, DONE)
                await Resumer(runner, gather=0.0).resume_once(wait=True)
            elif other == "inbox":
                await answer_interrupt(store, call.id or "", by="alice", payload=DONE)
            else:
                await table.backdate(call.id or "", 7200)
                from durable_adk.adk.runs.inbox import InterruptSweeper

                await InterruptSweeper(store, app_name=APP, owner="sweeper").expire_once()
        except errors.Conflict:
            pass  # the cancel got there first: refused, nothing changed

    await asyncio.gather(runner.cancel(run.run_id, by="ops"), continuation())
    await _settle(runner, store)
    runs = await runner.ledger.list_runs()
    original = next(r for r in runs if r.run_id == run.run_id)
    mine = [r for r in runs if r.invocation_id == run.invocation_id]
    assert original.status in (RunStatus.CANCELLED, RunStatus.DONE)
    if original.status is RunStatus.CANCELLED:
        # One outcome: nothing of the invocation runs on or ends DONE afterwards.
        assert {r.status for r in mine} <= {RunStatus.CANCELLED}, [
            (r.run_id, r.status) for r in mine
        ]
        assert payments.acts("charges", "create") <= 1  # at most the act already under way
        actions = await runner.ledger.actions(run_id=run.run_id)
        assert [a.action for a in actions].count("cancel") == 1  # audited once
    else:
        assert payments.acts("charges", "create") == 1
    assert not [r for r in runs if r.status in (RunStatus.RUNNING, RunStatus.QUEUED)]


async def test_cancel_racing_a_takeover_has_one_outcome(
    store: Store, payments: FakeService
) -> None:
    """A run whose owner died, cancelled while a sweeper takes it over: CANCELLED, once."""
    from durable_adk.adk.loops.recovery import Sweeper

    runner = runner_for(store, agent(payments, Recorder()))
    run, _ = await runner.submit(user_id=USER, session_id="t", message="go")
    assert run.status is RunStatus.RUNNING  # claimed at submit; its owner "dies" here
    await runner.ledger.backdate(run.run_id, 3600)
    outcome, recovered = await asyncio.gather(
        runner.cancel(run.run_id, by="ops"), Sweeper(runner).recover_once()
    )
    await _settle(runner, store)
    ended = await runner.ledger.get(run.run_id)
    assert ended is not None and ended.status is RunStatus.CANCELLED, (outcome, recovered)
    actions = await runner.ledger.actions(run_id=run.run_id)
    assert [a.action for a in actions].count("cancel") == 1
    assert payments.acts("charges", "create") == 0
    assert await JobTable(store).list_jobs() == [] or all(
        j.state is JobState.CANCELLED for j in await JobTable(store).list_jobs()
    )


async def test_a_recovered_answer_run_says_it_delivered_its_answer(
    store: Store, payments: FakeService, caplog: pytest.LogCaptureFixture
) -> None:
    from durable_adk.adk.loops.recovery import Sweeper

    runner = runner_for(store, agent(payments, Recorder()))
    run, call = await paused(runner)
    queued, _ = await runner.submit(
        user_id=USER, session_id="s", message=answer(call), invocation_id=run.invocation_id
    )
    await runner.ledger.backdate(queued.run_id, 3600)  # its worker died before driving it
    caplog.set_level("INFO", logger="durable_adk.recovery")
    (recovery,) = await Sweeper(runner).recover_once()
    assert (recovery.found.value, recovery.action, recovery.status) == (
        "PAUSED",
        "redrive",
        RunStatus.DONE,
    )
    assert "awaits its answer" not in recovery.reason.split("(")[0]
    assert recovery.reason.startswith("re-driven with the answer it carries")
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("recovered"))
    assert "re-driven with the answer it carries" in line
    assert payments.acts("charges", "create") == 1
