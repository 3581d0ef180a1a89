"""Durable sleep through DurableRunner, both backends (issue 26).

The agent is the reminder example's. Time moves on the database clock
(``JobTable.backdate`` moves a timer's due time into the past), never by
waiting.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from examples.reminders.app import APP_NAME, ASK, REMINDER, USER_ID, build_agent, texts
from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.genai import types

from durable_adk.adk.loops.background import Background
from durable_adk.adk.loops.resume import Resumer
from durable_adk.adk.loops.sleep import Waker, parse_sleep, sleep_tool
from durable_adk.adk.runner import DurableRunner
from durable_adk.effect_tables.jobs import Job, JobState, JobTable
from durable_adk.errors import InvalidArgument
from durable_adk.store import Store, open_store
from durable_adk.tables.ledger import RunStatus
from durable_adk.testing import Call, Say, ScriptedModel


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


def wakes(events: list[Event]) -> list[types.FunctionResponse]:
    return [
        r
        for e in events
        if e.author == "user"
        for r in e.get_function_responses()
        if (r.response or {}).get("status") == "woke"
    ]


def waker_of(runner: DurableRunner) -> Waker:
    jobs = JobTable(runner.path.store)
    return Waker(jobs, resumer=Resumer(runner, jobs, gather=0.0))


async def the_timer(store: Store) -> Job:
    timers = [j for j in await JobTable(store).list_jobs() if j.timer]
    assert len(timers) == 1
    return timers[0]


async def test_a_sleep_pauses_then_wakes_once_with_the_wake_up_as_the_answer(
    store: Store,
) -> None:
    runner = runner_for(store, build_agent(3600))
    first = await turn(runner, "s")
    calls = [c for e in first for c in e.get_function_calls()]
    assert [c.name for c in calls] == ["durable_sleep"]
    assert [r.status for r in await runner.ledger.list_runs()] == [RunStatus.PAUSED]
    timer = await the_timer(store)
    assert timer.state is JobState.STARTED and timer.function_call_id == calls[0].id
    assert timer.deadline_at - timer.created_at == pytest.approx(3600, abs=2)
    waker = waker_of(runner)
    assert await waker.wake_once(wait=True) == []  # an hour early: nothing
    await JobTable(store).backdate(timer.job_id, 3601)
    assert [j.job_id for j in await waker.wake_once(wait=True)] == [timer.job_id]
    assert await waker.wake_once(wait=True) == []
    events = await events_of(runner, "s")
    answers = wakes(events)
    assert [(a.id, a.name) for a in answers] == [(calls[0].id, "durable_sleep")]
    assert answers[0].response is not None
    assert answers[0].response["due"] == pytest.approx(timer.deadline_at - 3601)
    assert answers[0].response["woke_at"] >= answers[0].response["due"]
    assert texts(events).count(REMINDER) == 1
    assert sorted(r.status.value for r in await runner.ledger.list_runs()) == ["DONE", "DONE"]


async def test_until_with_a_zone_sets_the_due_time(store: Store) -> None:
    at = datetime.now(UTC).astimezone(datetime.now().astimezone().tzinfo) + timedelta(days=3)
    runner = runner_for(store, build_agent(until=at.isoformat()))
    first = await turn(runner, "s")
    sleeping = [r.response for e in first for r in e.get_function_responses()]
    assert sleeping[0] is not None and sleeping[0]["status"] == "sleeping"
    assert (await the_timer(store)).deadline_at == pytest.approx(at.timestamp())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"seconds": -5}, "seconds must be 0 or more"),
        ({"until": "next monday"}, "until is not an ISO-8601 time"),
        ({"until": "2026-12-07T09:00:00"}, "until needs a time zone"),
        ({"seconds": 60, "until": "2026-12-07T09:00:00Z"}, "exactly one of"),
        ({}, "exactly one of"),
        ({"seconds": "soon"}, "seconds must be a number"),
    ],
)
async def test_bad_input_gets_an_error_answer_and_nothing_is_stored(
    store: Store, args: dict[str, Any], message: str
) -> None:
    model = ScriptedModel({"reminder": [Call("durable_sleep", args), Say("ok")]})
    agent = LlmAgent(name="reminder", model=model, tools=[sleep_tool()])
    runner = runner_for(store, agent)
    events = await turn(runner, "s")
    answers = [r.response for e in events for r in e.get_function_responses()]
    assert len(answers) == 1 and answers[0] is not None
    assert answers[0]["status"] == "error" and message in answers[0]["message"]
    assert await JobTable(store).list_jobs() == []
    assert texts(events) == ["ok"]  # the model read the error and answered
    # The agent finished: the refused call waits on nothing (issue 41), so
    # the run is DONE, never PAUSED for ever, and no interrupt is listed.
    assert [r.status for r in await runner.ledger.list_runs()] == [RunStatus.DONE]
    assert await runner.path.interrupts.list_interrupts() == []


def test_parse_sleep_refuses_what_the_tool_refuses() -> None:
    assert parse_sleep(1.5, None) == (1.5, None)
    assert parse_sleep(None, "2026-12-07T08:00:00Z") == (None, 1796630400.0)
    for bad in [(True, None), (float("inf"), None), (None, 5), (10**9, None)]:
        with pytest.raises(InvalidArgument):
            parse_sleep(*bad)


async def test_a_cancelled_run_never_wakes_and_its_timer_is_listed_cancelled(
    store: Store,
) -> None:
    runner = runner_for(store, build_agent(60))
    await turn(runner, "s")
    (paused,) = await runner.ledger.list_runs()
    outcome = await runner.cancel(paused.run_id, by="ops", reason="no longer needed")
    assert outcome.run.status is RunStatus.CANCELLED
    timer = await the_timer(store)
    assert timer.state is JobState.CANCELLED
    await JobTable(store).backdate(timer.job_id, 3600)
    assert await waker_of(runner).wake_once(wait=True) == []
    assert await Background(runner, one_off=True).once() is not None
    assert wakes(await events_of(runner, "s")) == []
    assert REMINDER not in texts(await events_of(runner, "s"))
    assert (await the_timer(store)).state is JobState.CANCELLED


async def test_a_user_message_while_sleeping_is_served_and_the_wake_still_comes(
    store: Store,
) -> None:
    agent = build_agent(3600, extra=[Say("It is a quiet afternoon.")])
    runner = runner_for(store, agent)
    await turn(runner, "s")
    meanwhile = await turn(runner, "s", "What is going on?")
    assert "It is a quiet afternoon." in texts(meanwhile)
    timer = await the_timer(store)
    assert timer.state is JobState.STARTED  # the message did not wake it
    await JobTable(store).backdate(timer.job_id, 3601)
    assert len(await waker_of(runner).wake_once(wait=True)) == 1
    events = await events_of(runner, "s")
    order = texts(events)
    assert order.index("It is a quiet afternoon.") < order.index(REMINDER)
    assert len(wakes(events)) == 1


async def test_a_recovery_pass_wakes_a_due_timer(store: Store) -> None:
    runner = runner_for(store, build_agent(60))
    await turn(runner, "s")
    await JobTable(store).backdate((await the_timer(store)).job_id, 61)
    fresh = runner_for(store, build_agent(60), "w2")
    report = await Background(fresh, one_off=True).once()
    assert len(report.woken) == 1 and [r.status for r in report.resumed] == [RunStatus.DONE]
    again = await Background(fresh, one_off=True).once()
    assert again.woken == [] and again.resumed == []
    assert len(wakes(await events_of(runner, "s"))) == 1


async def test_two_workers_racing_for_one_due_timer_wake_it_once(store_url: str) -> None:
    async with open_store(store_url) as one, open_store(store_url) as two:
        for i in range(5):
            first = runner_for(one, build_agent(60), "w1")
            second = runner_for(two, build_agent(60), "w2")
            session = f"race-{i}"
            await turn(first, session)
            timers = await JobTable(one).list_jobs(session_id=session)
            await JobTable(one).backdate(timers[0].job_id, 61)
            a, b = await asyncio.gather(
                waker_of(first).wake_once(wait=True), waker_of(second).wake_once(wait=True)
            )
            assert len(a) + len(b) == 1, f"round {i}"
            # The resumer loops' next passes, on both workers: a claim the
            # winner's immediate resume skipped (the losing waker's statement
            # still held the row lock on PostgreSQL) is taken here, once.
            await asyncio.gather(
                Resumer(first, gather=0.0).resume_once(wait=True),
                Resumer(second, gather=0.0).resume_once(wait=True),
            )
            events = await events_of(first, session)
            woken = await JobTable(one).get(timers[0].job_id)
            runs = [(r.status.value, r.last_error) for r in await first.ledger.list_runs()]
            why = f"round {i}: a={len(a)} b={len(b)} timer={woken} runs={runs}"
            assert len(wakes(events)) == 1 and texts(events).count(REMINDER) == 1, why


async def test_a_workflow_sleep_node_pauses_the_graph_and_outputs_its_wake_up(
    store: Store,
) -> None:
    from google.adk.workflow import Workflow

    from durable_adk.adk.loops.sleep import sleep_node

    def after(node_input: Any) -> dict[str, Any]:
        """Runs once the sleep is over."""
        return {"after": node_input["status"]}

    flow = Workflow(name="flow", edges=[("START", sleep_node(seconds=600), after)])
    runner = runner_for(store, flow)
    outputs = [e.output async for e in runner.run(user_id=USER_ID, session_id="w", message="go")]
    assert [o for o in outputs if o is not None] == []
    assert [r.status for r in await runner.ledger.list_runs()] == [RunStatus.PAUSED]
    timer = await the_timer(store)
    assert timer.tool_name == "adk_request_input"
    assert timer.deadline_at - timer.created_at == pytest.approx(600, abs=2)
    waker = waker_of(runner)
    assert await waker.wake_once(wait=True) == []
    await JobTable(store).backdate(timer.job_id, 601)
    assert len(await waker.wake_once(wait=True)) == 1
    assert await waker.wake_once(wait=True) == []
    events = await events_of(runner, "w")
    done = [e.output for e in events if e.output is not None]
    assert {"after": "woke"} in done
    assert sum(1 for o in done if o == {"after": "woke"}) == 1
    assert sorted(r.status.value for r in await runner.ledger.list_runs()) == ["DONE", "DONE"]


def test_a_sleep_node_with_both_or_bad_arguments_is_refused() -> None:
    from durable_adk.adk.loops.sleep import sleep_node

    with pytest.raises(InvalidArgument):
        sleep_node(seconds=5, until="2026-12-07T09:00:00Z")
    with pytest.raises(InvalidArgument):
        sleep_node(seconds=-1)


async def test_operators_see_when_a_sleeping_run_wakes(store: Store) -> None:
    from durable_adk.service.ops import Operations
    from durable_adk.service.schemas import detail_out

    runner = runner_for(store, build_agent(3600))
    await turn(runner, "s")
    (paused,) = await runner.ledger.list_runs()
    ops = Operations(store, root_agent_name=runner.root_agent_name, app_name=APP_NAME)
    detail = await ops.run_detail(paused.run_id)
    timer = await the_timer(store)
    assert detail.run.status is RunStatus.PAUSED and detail.wakes_at == timer.deadline_at
    assert detail_out(detail).wakes_at == timer.deadline_at  # the API's run answer
    await JobTable(store).backdate(timer.job_id, 3601)
    await waker_of(runner).wake_once(wait=True)
    assert (await ops.run_detail(paused.run_id)).wakes_at is None  # awake: nothing due


async def test_a_runners_background_loops_wake_a_due_timer_within_a_poll(store: Store) -> None:
    from durable_adk.adk.loops.every import BackgroundSettings

    settings = BackgroundSettings(resume_interval=0.05)
    durable = DurableRunner(
        app=build_agent(60), app_name=APP_NAME, store=store, worker_id="w1", background=settings
    )
    async with durable:
        await turn(durable, "s")
        await JobTable(store).backdate((await the_timer(store)).job_id, 61)
        for _ in range(200):  # the loop's own poll wakes it: no call here does
            if wakes(await events_of(durable, "s")):
                break
            await asyncio.sleep(0.02)
    events = await events_of(durable, "s")
    assert len(wakes(events)) == 1 and texts(events).count(REMINDER) == 1
