"""Long-running calls answered through DurableRunner, on both backends (DESIGN.md 3.5).

The agent is the sales report example's; the outside builder is an in-process
recorder here (the crash tests use the real builder process and webhooks).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from examples.sales_report.app import (
    APP_NAME,
    ASK,
    JOB_ID,
    USER_ID,
    build_agent,
    reply_to_report,
    report_tool,
    start_sales_report,
)
from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from durable_adk.adk.loops.resume import ExpirySweeper, ProgressSender, Resumer, Submitter
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.tools.long_running import long_running_tool
from durable_adk.effect_tables.jobs import JobState, JobTable
from durable_adk.store import Store, open_store
from durable_adk.tables.ledger import RunStatus
from durable_adk.testing import Call, Say, ScriptedModel

DONE = {"status": "done", "url": "https://r/q3.xlsx", "row_count": 7}
READY = "Your report is ready: https://r/q3.xlsx (7 rows)."


class Recorder:
    """The outside builder, in process: records submissions and cancellations."""

    def __init__(self) -> None:
        self.submitted: list[tuple[str, str, str]] = []
        self.cancelled: list[str] = []

    def submit(self, job_id: str, quarter: str, region: str) -> None:
        self.submitted.append((job_id, quarter, region))

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)


def runner_for(store: Store, agent: Any, worker: str = "w1") -> DurableRunner:
    return DurableRunner(
        app=agent, app_name=APP_NAME, store=store, worker_id=worker, queue_poll=0.02
    )


async def turn(runner: DurableRunner, session: str, text: str = ASK) -> list[Event]:
    return [e async for e in runner.run(user_id=USER_ID, session_id=session, message=text)]


async def events_of(runner: DurableRunner, session: str) -> list[Event]:
    found = await runner.sessions.get_session(
        app_name=APP_NAME, user_id=USER_ID, session_id=session
    )
    assert found is not None
    return list(found.events)


def user_answers(events: list[Event]) -> list[types.FunctionResponse]:
    return [r for e in events if e.author == "user" for r in e.get_function_responses()]


def texts(events: list[Event]) -> list[str]:
    return [
        p.text
        for e in events
        if e.author != "user" and e.content
        for p in e.content.parts or ()
        if p.text
    ]


def the_call(events: list[Event]) -> types.FunctionCall:
    calls = [c for e in events for c in e.get_function_calls()]
    assert len(calls) == 1
    return calls[0]


async def test_bad_input_gets_an_error_answer_and_no_job(store: Store) -> None:
    recorder = Recorder()
    model = ScriptedModel(
        {"reports": [Call("start_sales_report", {"quarter": "Q3", "region": "EMEA"}), Say("ok")]}
    )
    agent = LlmAgent(name="reports", model=model, tools=[report_tool(recorder, minute=1.0)])
    runner = runner_for(store, agent)
    events = await turn(runner, "s")
    answers = [r.response for e in events for r in e.get_function_responses()]
    assert answers == [
        {"status": "error", "message": "quarter must look like 2026-Q3", "final": True}
    ]
    assert await JobTable(store).list_jobs() == [] and recorder.submitted == []
    # The refusal closed the call and the agent finished: DONE, not PAUSED (issue 41).
    assert [r.status for r in await runner.ledger.list_runs()] == [RunStatus.DONE]


async def test_the_tool_starts_attaches_submits_and_answers_pending(store: Store) -> None:
    recorder = Recorder()
    runner = runner_for(store, build_agent(recorder, minute=1.0))
    events = await turn(runner, "s")
    call = the_call(events)
    interim = [r.response for e in events for r in e.get_function_responses()]
    assert interim == [
        {
            "status": "pending",
            "job_id": JOB_ID,
            "message": "Report build started; typical time is 15-25 minutes.",
        }
    ]
    job = await JobTable(store).get(JOB_ID)
    assert job is not None and job.state is JobState.STARTED
    assert (job.app_name, job.user_id, job.session_id) == (APP_NAME, USER_ID, "s")
    assert job.function_call_id == call.id and job.invocation_id == events[0].invocation_id
    assert job.request == {"quarter": "2026-Q3", "region": "EMEA"}
    assert job.deadline_at - job.created_at == pytest.approx(45, abs=1)
    assert recorder.submitted == [(JOB_ID, "2026-Q3", "EMEA")]
    assert [r.status for r in await runner.ledger.list_runs()] == [RunStatus.PAUSED]


@pytest.mark.parametrize("root", ["llm", "sequential"])
async def test_a_finished_job_answers_its_call_once_with_its_id_and_name(
    store: Store, root: str
) -> None:
    runner = runner_for(store, build_agent(Recorder(), minute=1.0, root=root))
    jobs = JobTable(store)
    first = await turn(runner, "s")
    call = the_call(first)
    assert (await jobs.complete(JOB_ID, JobState.SUCCEEDED, DONE)).changed
    assert not (await jobs.complete(JOB_ID, JobState.SUCCEEDED, DONE)).changed  # duplicate
    resumer = Resumer(runner, gather=0.0)
    done = await resumer.resume_once(wait=True)
    assert [(r.job_ids, r.status) for r in done] == [((JOB_ID,), RunStatus.DONE)]
    assert await resumer.resume_once(wait=True) == []
    events = await events_of(runner, "s")
    answers = user_answers(events)
    assert [(a.id, a.name) for a in answers] == [(call.id, "start_sales_report")]
    assert answers[0].response == {**DONE, "job_id": JOB_ID}
    answer_event = next(e for e in events if e.author == "user" and e.get_function_responses())
    assert answer_event.invocation_id == first[0].invocation_id  # the invocation continued
    assert READY in texts(events)
    if root == "sequential":  # the paused sub-agent finished, then the next one ran
        assert texts(events)[-1] == "I emailed the report link to the sales team."
    run = await runner.ledger.get(done[0].run_id)
    assert run is not None and run.invocation_id == first[0].invocation_id
    job = await jobs.get(JOB_ID)
    assert job is not None and job.resume_run_id == done[0].run_id


async def test_a_resume_during_a_user_turn_waits_then_runs(store: Store) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()

    async def q2_revenue(region: str) -> dict[str, Any]:
        """Looks up last quarter's revenue."""
        entered.set()  # the user's turn is RUNNING now
        await gate.wait()
        return {"region": region, "revenue": "4.2M EUR"}

    model = ScriptedModel(
        {
            "reports": [
                Call("start_sales_report", {"quarter": "2026-Q3", "region": "EMEA"}),
                reply_to_report,
                Call("q2_revenue", {"region": "EMEA"}),
                Say("Q2 revenue in EMEA was 4.2M EUR."),
            ]
        }
    )
    agent = LlmAgent(
        name="reports", model=model, tools=[report_tool(Recorder(), minute=1.0), q2_revenue]
    )
    runner = runner_for(store, agent)
    await turn(runner, "s")
    await JobTable(store).complete(JOB_ID, JobState.SUCCEEDED, DONE)
    user_turn = asyncio.create_task(turn(runner, "s", "What was Q2 revenue?"))
    await entered.wait()
    resume = asyncio.create_task(Resumer(runner, gather=0.0).resume_once(wait=True))
    await asyncio.sleep(0.5)
    assert not resume.done()
    statuses = sorted(r.status.value for r in await runner.ledger.list_runs())
    assert statuses == ["PAUSED", "QUEUED", "RUNNING"]  # the resume waits its turn
    assert user_answers(await events_of(runner, "s")) == []
    gate.set()
    await user_turn
    done = await resume
    assert [r.status for r in done] == [RunStatus.DONE]
    events = await events_of(runner, "s")
    order = texts(events)
    assert order.index("Q2 revenue in EMEA was 4.2M EUR.") < order.index(READY)
    assert len(user_answers(events)) == 1
    # The live run was not broken by the resume (no stale append, no failure):
    # the user's turn and the resume both ended DONE, one after the other, and
    # the run that paused on the report followed its invocation to DONE.
    runs = await runner.ledger.list_runs()
    assert sorted(r.status.value for r in runs) == ["DONE", "DONE", "DONE"]


async def test_two_calls_of_one_turn_are_answered_in_one_message(store: Store) -> None:
    model = ScriptedModel(
        {
            "reports": [
                (
                    Call("start_sales_report", {"quarter": "2026-Q3", "region": "EMEA"}),
                    Call("start_sales_report", {"quarter": "2026-Q3", "region": "APAC"}),
                ),
                reply_to_report,
            ]
        }
    )
    agent = LlmAgent(name="reports", model=model, tools=[report_tool(Recorder(), minute=1.0)])
    runner = runner_for(store, agent)
    jobs = JobTable(store)
    await turn(runner, "s")
    resumer = Resumer(runner, gather=30.0)
    await jobs.complete("report:2026-Q3:EMEA", JobState.SUCCEEDED, DONE)
    assert await resumer.resume_once(wait=True) == []  # waits for its sibling
    await jobs.complete("report:2026-Q3:APAC", JobState.SUCCEEDED, DONE)
    done = await resumer.resume_once(wait=True)
    assert [sorted(r.job_ids) for r in done] == [["report:2026-Q3:APAC", "report:2026-Q3:EMEA"]]
    events = await events_of(runner, "s")
    answer_events = [e for e in events if e.author == "user" and e.get_function_responses()]
    assert len(answer_events) == 1 and len(answer_events[0].get_function_responses()) == 2
    calls = {c.id for e in events for c in e.get_function_calls()}
    assert {r.id for r in answer_events[0].get_function_responses()} == calls
    assert READY in texts(events)


def agent_for(quarter: str) -> LlmAgent:
    model = ScriptedModel(
        {
            "reports": [
                Call("start_sales_report", {"quarter": quarter, "region": "EMEA"}),
                reply_to_report,
            ]
        }
    )
    return LlmAgent(name="reports", model=model, tools=[report_tool(Recorder(), minute=1.0)])


async def test_two_resumers_racing_answer_each_call_once(store_url: str) -> None:
    async with open_store(store_url) as one, open_store(store_url) as two:
        jobs = JobTable(one)
        for i in range(10):
            quarter = f"{2010 + i}-Q3"
            first = runner_for(one, agent_for(quarter), "w1")
            second = runner_for(two, agent_for(quarter), "w2")
            session = f"race-{i}"
            await turn(first, session)
            await jobs.complete(f"report:{quarter}:EMEA", JobState.SUCCEEDED, DONE)
            a, b = await asyncio.gather(
                Resumer(first, gather=0.0).resume_once(wait=True),
                Resumer(second, gather=0.0).resume_once(wait=True),
            )
            assert len(a) + len(b) == 1, f"round {i}"
            events = await events_of(first, session)
            assert len(user_answers(events)) == 1 and texts(events).count(READY) == 1


async def test_progress_is_delivered_with_the_same_id_throttled_then_the_result(
    store: Store,
) -> None:
    runner = runner_for(store, build_agent(Recorder(), minute=1.0))
    jobs = JobTable(store)
    call = the_call(await turn(runner, "s"))
    sender = ProgressSender(runner, interval=60.0)
    assert await sender.send_once() == []  # nothing reported yet
    assert await jobs.progress(JOB_ID, {"percent": 40})
    assert [j.job_id for j in await sender.send_once()] == [JOB_ID]
    assert await sender.send_once() == []  # unchanged
    assert await jobs.progress(JOB_ID, {"percent": 60})
    assert await sender.send_once() == []  # changed, but within the interval
    await jobs.backdate(JOB_ID, 61)
    assert [j.progress_sent for j in await sender.send_once()] == [{"percent": 60}]
    events = await events_of(runner, "s")
    interim = user_answers(events)
    assert [(r.id, r.name, r.response and r.response["progress"]) for r in interim] == [
        (call.id, "start_sales_report", {"percent": 40}),
        (call.id, "start_sales_report", {"percent": 60}),
    ]
    assert "Still building: {'percent': 40}." in texts(events)
    await jobs.complete(JOB_ID, JobState.SUCCEEDED, DONE)
    assert len(await Resumer(runner, gather=0.0).resume_once(wait=True)) == 1
    events = await events_of(runner, "s")
    assert len(user_answers(events)) == 3 and texts(events)[-1] == READY


async def test_expiry_answers_the_call_cancels_the_work_and_a_late_result_is_a_no_op(
    store: Store,
) -> None:
    recorder = Recorder()
    runner = runner_for(store, build_agent(recorder, minute=1.0))
    jobs = JobTable(store)
    await turn(runner, "s")
    resumer = Resumer(runner, gather=0.0)
    sweeper = ExpirySweeper(jobs, resumer=resumer)
    assert await sweeper.expire_once(wait=True) == []
    await jobs.backdate(JOB_ID, 3600)
    expired = await sweeper.expire_once(wait=True)
    assert [j.job_id for j in expired] == [JOB_ID] and recorder.cancelled == [JOB_ID]
    events = await events_of(runner, "s")
    assert [a.response and a.response["status"] for a in user_answers(events)] == ["expired"]
    assert texts(events)[-1] == "Sorry, the report did not finish in time. Shall I try again?"
    late = await jobs.complete(JOB_ID, JobState.SUCCEEDED, DONE)
    assert not late.changed and late.job.state is JobState.EXPIRED
    assert await resumer.resume_once(wait=True) == [] and await sweeper.expire_once(wait=True) == []
    assert len(user_answers(await events_of(runner, "s"))) == 1


async def test_outside_a_durable_run_the_tool_answers_with_an_error() -> None:
    model = ScriptedModel(
        {"a": [Call("start_sales_report", {"quarter": "2026-Q3", "region": "EMEA"}), Say("ok")]}
    )
    tool = long_running_tool(start_sales_report, job_key="report:{quarter}:{region}", deadline=60)
    runner = Runner(
        app_name="x",
        agent=LlmAgent(name="a", model=model, tools=[tool]),
        session_service=InMemorySessionService(),
    )
    await runner.session_service.create_session(app_name="x", user_id="u", session_id="s")
    message = types.Content(role="user", parts=[types.Part(text="go")])
    events = [e async for e in runner.run_async(user_id="u", session_id="s", new_message=message)]
    answers = [r.response for e in events for r in e.get_function_responses()]
    assert answers and answers[0] is not None and answers[0]["status"] == "error"


# ------------------------------------------- a second call with the same identity


async def test_two_sessions_calling_one_job_get_one_submission_and_one_answer_each(
    store: Store,
) -> None:
    recorder = Recorder()
    runner = runner_for(store, build_agent(recorder, minute=1.0))
    jobs = JobTable(store)
    call_a = the_call(await turn(runner, "a"))
    call_b = the_call(await turn(runner, "b"))  # same quarter and region: the same job
    assert recorder.submitted == [(JOB_ID, "2026-Q3", "EMEA")]  # handed over once
    assert [c.function_call_id for c in await jobs.calls(JOB_ID)] == [call_b.id]
    await jobs.complete(JOB_ID, JobState.SUCCEEDED, DONE)
    resumer = Resumer(runner, gather=0.0)
    done = await resumer.resume_once(wait=True)
    assert sorted((r.session_id, r.status) for r in done) == [
        ("a", RunStatus.DONE),
        ("b", RunStatus.DONE),
    ]
    assert await resumer.resume_once(wait=True) == []
    for session, call in (("a", call_a), ("b", call_b)):
        events = await events_of(runner, session)
        answers = user_answers(events)
        assert [(r.id, r.name) for r in answers] == [(call.id, "start_sales_report")]
        assert answers[0].response == {**DONE, "job_id": JOB_ID}
        assert texts(events).count(READY) == 1


async def test_two_identical_calls_of_one_turn_are_both_answered_once(store: Store) -> None:
    same = {"quarter": "2026-Q3", "region": "EMEA"}
    model = ScriptedModel(
        {
            "reports": [
                (Call("start_sales_report", same), Call("start_sales_report", same)),
                reply_to_report,
            ]
        }
    )
    recorder = Recorder()
    agent = LlmAgent(name="reports", model=model, tools=[report_tool(recorder, minute=1.0)])
    runner = runner_for(store, agent)
    await turn(runner, "s")
    assert recorder.submitted == [(JOB_ID, "2026-Q3", "EMEA")]
    await JobTable(store).complete(JOB_ID, JobState.SUCCEEDED, DONE)
    done = await Resumer(runner, gather=0.0).resume_once(wait=True)
    assert [(len(r.job_ids), r.status) for r in done] == [(2, RunStatus.DONE)]
    events = await events_of(runner, "s")
    calls = {c.id for e in events for c in e.get_function_calls()}
    answer_events = [e for e in events if e.author == "user" and e.get_function_responses()]
    assert len(answer_events) == 1
    assert sorted(r.id or "" for r in answer_events[0].get_function_responses()) == sorted(
        c or "" for c in calls
    )
    assert texts(events).count(READY) == 1


# ---------------------------------------------------- a submission that fails


class FlakyRecorder(Recorder):
    """A builder whose first ``failures`` submissions fail (a 503, say)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.attempts = 0

    def submit(self, job_id: str, quarter: str, region: str) -> None:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise ConnectionError("503 Service Unavailable")
        super().submit(job_id, quarter, region)


async def test_a_failed_submission_is_retried_until_accepted_then_answered(store: Store) -> None:
    recorder = FlakyRecorder(failures=2)
    runner = runner_for(store, build_agent(recorder, minute=1.0))
    jobs = JobTable(store)
    events = await turn(runner, "s")
    call = the_call(events)
    # The call still gets its pending answer; the work is not handed over yet.
    assert [
        r.response and r.response["status"] for e in events for r in e.get_function_responses()
    ] == ["pending"]
    job = await jobs.get(JOB_ID)
    assert job is not None and job.submitted_at is None and job.submit_attempts == 1
    assert job.submit_error == "ConnectionError: 503 Service Unavailable"
    submitter = Submitter(jobs, runner=runner)
    assert await submitter.submit_once() == []  # backing off: nothing attempted
    assert recorder.attempts == 1
    await jobs.backdate_submit(JOB_ID, 3600)
    assert await submitter.submit_once() == []  # the second attempt fails too
    await jobs.backdate_submit(JOB_ID, 3600)
    assert [j.job_id for j in await submitter.submit_once()] == [JOB_ID]
    await jobs.backdate_submit(JOB_ID, 3600)
    assert await submitter.submit_once() == []  # accepted: never again
    assert recorder.attempts == 3 and recorder.submitted == [(JOB_ID, "2026-Q3", "EMEA")]
    job = await jobs.get(JOB_ID)
    assert job is not None and job.submitted_at is not None and job.submit_attempts == 3
    await jobs.complete(JOB_ID, JobState.SUCCEEDED, DONE)
    await Resumer(runner, gather=0.0).resume_once(wait=True)
    answers = user_answers(await events_of(runner, "s"))
    assert [(r.id, r.response and r.response["status"]) for r in answers] == [(call.id, "done")]


async def test_no_submission_is_attempted_past_the_deadline(store: Store) -> None:
    recorder = FlakyRecorder(failures=1)
    runner = runner_for(store, build_agent(recorder, minute=1.0))
    jobs = JobTable(store)
    await turn(runner, "s")
    await jobs.backdate(JOB_ID, 3600)  # past the deadline (and the back-off)
    assert await Submitter(jobs, runner=runner).submit_once() == []
    assert recorder.attempts == 1 and recorder.submitted == []
