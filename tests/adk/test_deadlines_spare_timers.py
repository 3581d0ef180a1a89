"""Approvals deadlines apply to approvals only (issue 41), both backends.

With ``interrupt_deadlines={"*": N}``, a sleep (the tool or a Workflow's
``sleep_node``) and a job-backed call wait on the job table, not on a person:
they are not listed in the inbox, the deadline sweep never answers them, and
the real wake-up (or result) is what continues the run. A confirmation beside
them still gets its deadline.
"""

from __future__ import annotations

from typing import Any

from examples.reminders.app import APP_NAME, ASK, REMINDER, USER_ID, build_agent, texts
from google.adk.agents import LlmAgent
from google.adk.tools.function_tool import FunctionTool

from durable_adk.adk.loops.resume import Resumer
from durable_adk.adk.loops.sleep import Waker, sleep_node, sleep_tool
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.runs.inbox import InterruptSweeper
from durable_adk.effect_tables.jobs import JobTable
from durable_adk.store import Store
from durable_adk.tables.interrupts import InterruptKind
from durable_adk.tables.ledger import RunStatus
from durable_adk.testing import Call, Say, ScriptedModel


def runner_for(store: Store, agent: Any) -> DurableRunner:
    return DurableRunner(
        app=agent,
        app_name=APP_NAME,
        store=store,
        worker_id="w1",
        queue_poll=0.02,
        interrupt_deadlines={"*": 1.0},
    )


async def wake_all(runner: DurableRunner, store: Store) -> None:
    jobs = JobTable(store)
    for timer in [j for j in await jobs.list_jobs() if j.timer]:
        await jobs.backdate(timer.job_id, 7200)
    await Waker(jobs, resumer=Resumer(runner, jobs, gather=0.0)).wake_once(wait=True)


async def test_a_sleep_is_not_in_the_inbox_and_no_deadline_denies_it(store: Store) -> None:
    runner = runner_for(store, build_agent(3600))
    async for _ in runner.run(user_id=USER_ID, session_id="s", message=ASK):
        pass
    assert [r.status for r in await runner.ledger.list_runs()] == [RunStatus.PAUSED]
    table = runner.path.interrupts
    assert await table.list_interrupts() == []  # it waits on its timer, not on a person
    sweeper = InterruptSweeper(store, app_name=APP_NAME, owner="w1")
    assert await sweeper.expire_once() == []
    await wake_all(runner, store)
    session = await runner.sessions.get_session(app_name=APP_NAME, user_id=USER_ID, session_id="s")
    assert session is not None
    answers = [r.response for e in session.events for r in e.get_function_responses()]
    assert not any((a or {}).get("denied") for a in answers)
    assert texts(list(session.events)).count(REMINDER) == 1
    assert sorted(r.status.value for r in await runner.ledger.list_runs()) == ["DONE", "DONE"]


async def test_a_confirmation_beside_a_sleep_keeps_its_deadline(store: Store) -> None:
    def pay(invoice: str) -> dict[str, str]:
        """Pays an invoice."""
        return {"paid": invoice}

    model = ScriptedModel(
        {
            "clerk": [
                (Call("durable_sleep", {"seconds": 3600}), Call("pay", {"invoice": "I-1"})),
                Say("waiting"),
            ]
        }
    )
    agent = LlmAgent(
        name="clerk",
        model=model,
        tools=[sleep_tool(), FunctionTool(pay, require_confirmation=True)],
    )
    runner = runner_for(store, agent)
    async for _ in runner.run(user_id=USER_ID, session_id="s", message="pay I-1 in an hour"):
        pass
    (listed,) = await runner.path.interrupts.list_interrupts()
    assert listed.kind is InterruptKind.CONFIRMATION and listed.deadline_at is not None


async def test_a_sleep_node_is_not_in_the_inbox(store: Store) -> None:
    from google.adk.workflow import Workflow

    def after(node_input: Any) -> dict[str, Any]:
        """Runs once the sleep is over."""
        return {"after": node_input["status"]}

    flow = Workflow(name="flow", edges=[("START", sleep_node(seconds=600), after)])
    runner = runner_for(store, flow)
    async for _ in runner.run(user_id=USER_ID, session_id="w", message="go"):
        pass
    assert [r.status for r in await runner.ledger.list_runs()] == [RunStatus.PAUSED]
    assert await runner.path.interrupts.list_interrupts() == []
    assert await InterruptSweeper(store, app_name=APP_NAME, owner="w1").expire_once() == []
    await wake_all(runner, store)
    session = await runner.sessions.get_session(app_name=APP_NAME, user_id=USER_ID, session_id="w")
    assert session is not None
    assert {"after": "woke"} in [e.output for e in session.events if e.output is not None]


async def test_a_sleep_indexed_by_an_older_version_is_settled_not_denied(store: Store) -> None:
    """A sleep's call an older worker put in the inbox, its deadline passed: the sweep of a
    worker that knows the sleep tool takes it out of the inbox and denies nothing."""
    runner = runner_for(store, build_agent(3600))
    async for _ in runner.run(user_id=USER_ID, session_id="s", message=ASK):
        pass
    (paused,) = await runner.ledger.list_runs()
    (timer,) = [j for j in await JobTable(store).list_jobs() if j.timer]
    table = runner.path.interrupts
    await table.open(
        paused,
        call_id=timer.function_call_id or "",
        kind=InterruptKind.LONG_RUNNING,
        name="durable_sleep",
        args={"seconds": 3600},
        deadline_seconds=1.0,
    )  # as 906f6a7 indexed it
    await table.backdate(timer.function_call_id or "", 60)
    sweeper = InterruptSweeper(
        store, app_name=APP_NAME, owner="w1", job_tools=runner.path.job_tools
    )
    assert await sweeper.expire_once() == []
    assert await table.list_interrupts() == []
    assert [r.status for r in await runner.ledger.list_runs()] == [RunStatus.PAUSED]
    await wake_all(runner, store)
    session = await runner.sessions.get_session(app_name=APP_NAME, user_id=USER_ID, session_id="s")
    assert session is not None
    answers = [r.response or {} for e in session.events for r in e.get_function_responses()]
    assert [a.get("status") for a in answers] == ["sleeping", "woke"]
    assert texts(list(session.events)).count(REMINDER) == 1
