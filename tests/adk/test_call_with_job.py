"""A long-running call and its job are one unit, on both backends.

docs/runs.md, "When events are committed"; docs/jobs.md. With barrier
commits, the barrier before a durable long-running tool is left to the
tool: the model's call (with the user's message buffered before it) is
written in the same unit as its job, created and attached, so no crash
leaves a call stored without its job or a job without its call. These
tests check:

* units: one fewer per long-running call than a barrier then the job, and
  two fewer than the old create, then attach;
* atomicity: a job that fails inside the unit (a trigger on the job table)
  writes neither the call nor the user's message, and nothing is submitted;
* app code before the tool (another plugin) still sees the call durable
  first, and the job is then started alone;
* the job's one-unit start gives the row create-then-attach gives, for a new
  job and for a second call of an existing one (kept in job_calls).

The crash matrix in tests/crash/test_jobs_crash.py kills a real process on
each side of the unit.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from examples.sales_report.app import APP_NAME, ASK, JOB_ID, USER_ID, report_tool
from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext

from durable_adk import DurableRunner, errors
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.effect_tables.jobs import JobTable
from durable_adk.store import Store
from durable_adk.testing import Call, Say, ScriptedModel
from refusals import refuse

REQUEST = {"quarter": "2026-Q3", "region": "EMEA"}
CALL = {
    "app_name": APP_NAME,
    "user_id": USER_ID,
    "session_id": "s1",
    "invocation_id": "e-1",
    "function_call_id": "call-1",
}
"""The call a job is attached to in the store-level tests."""


class Recorder:
    """The report builder, in process: what was submitted (the crash tests use a real one)."""

    def __init__(self) -> None:
        self.submitted: list[str] = []

    def submit(self, job_id: str, quarter: str, region: str) -> None:
        self.submitted.append(job_id)

    def cancel(self, job_id: str) -> None:
        raise AssertionError("nothing is cancelled here")


def reports(recorder: Recorder, region: str = "EMEA") -> LlmAgent:
    request = {**REQUEST, "region": region}
    return LlmAgent(
        name="reports",
        model=ScriptedModel([Call("start_sales_report", request), Say("Started.")]),
        tools=[report_tool(recorder, minute=1.0)],
    )


class BeforeTool(BasePlugin):
    """Another plugin with code before every tool: it must see the call stored."""

    def __init__(self, store: Store) -> None:
        super().__init__(name="before_tool_probe")
        self.store = store
        self.seen: list[list[str]] = []

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        self.seen.append(calls(await stored(self.store, tool_context.session.id)))
        return None


async def stored(store: Store, session_id: str) -> list[Event]:
    session = await DurableSessionService(store).get_session(
        app_name=APP_NAME, user_id=USER_ID, session_id=session_id
    )
    return list(session.events) if session else []


def calls(events: list[Event]) -> list[str]:
    return [c.name or "" for e in events for c in e.get_function_calls()]


async def turn(runner: DurableRunner, session_id: str) -> list[Event]:
    return [e async for e in runner.run(user_id=USER_ID, session_id=session_id, message=ASK)]


async def units_of_a_turn(store: Store, runner: DurableRunner, session_id: str) -> int:
    before = store.commits
    await turn(runner, session_id)
    return store.commits - before


async def test_the_call_and_its_job_are_one_unit_one_fewer_per_call(store: Store) -> None:
    recorder = Recorder()
    merged = DurableRunner(app=reports(recorder), app_name=APP_NAME, store=store)
    merged_units = await units_of_a_turn(store, merged, "s1")
    jobs = JobTable(store)
    first = await jobs.get(JOB_ID)
    assert first is not None and first.attached and first.submitted_at is not None

    # Another plugin acts before the tool: the call is stored first, the job alone after.
    probe = BeforeTool(store)
    alone = DurableRunner(
        app=reports(recorder, "APAC"), app_name=APP_NAME, store=store, plugins=[probe]
    )
    alone_units = await units_of_a_turn(store, alone, "s2")
    assert probe.seen == [["start_sales_report"]]
    # run_start; message + call + job; the submission's claim; its acceptance;
    # the pending answer; the pause with its inbox entry. Alone, the call is
    # written first (and before this, the job took two units more: create, attach).
    assert (merged_units, alone_units) == (6, 7)
    assert recorder.submitted == [JOB_ID, "report:2026-Q3:APAC"]
    for session_id, job_id in (("s1", JOB_ID), ("s2", "report:2026-Q3:APAC")):
        events = await stored(store, session_id)
        assert calls(events) == ["start_sales_report"]
        job = await jobs.get(job_id)
        assert job is not None and job.session_id == session_id
        assert job.function_call_id == events[1].get_function_calls()[0].id


async def refuse_jobs(store: Store, backend: str) -> None:
    """Makes every new job fail inside its unit (a trigger on the job table)."""
    await refuse(store, backend, "refuse_job", "INSERT ON jobs")


async def test_a_job_refused_inside_the_unit_writes_no_call_and_nothing_is_submitted(
    store: Store, backend: str
) -> None:
    await refuse_jobs(store, backend)
    recorder = Recorder()
    runner = DurableRunner(app=reports(recorder), app_name=APP_NAME, store=store, backoff=0.01)
    with pytest.raises(errors.DurableError):
        await turn(runner, "s1")
    # Neither the call nor the user's message buffered before it was written.
    assert await stored(store, "s1") == []
    assert recorder.submitted == []
    assert await JobTable(store).get(JOB_ID) is None


async def test_one_unit_per_event_stores_the_call_alone_first(store: Store) -> None:
    recorder = Recorder()
    runner = DurableRunner(
        app=reports(recorder), app_name=APP_NAME, store=store, commits="per_event"
    )
    await turn(runner, "s1")
    assert calls(await stored(store, "s1")) == ["start_sales_report"]
    job = await JobTable(store).get(JOB_ID)
    assert job is not None and job.attached and recorder.submitted == [JOB_ID]


def comparable(job: Any) -> dict[str, Any]:
    """A job's fields that do not depend on when or under which id it was written."""
    skip = {"job_id", "created_at", "updated_at", "deadline_at"}
    return {k: v for k, v in dataclasses.asdict(job).items() if k not in skip}


async def test_starting_in_one_unit_gives_the_row_create_then_attach_gives(store: Store) -> None:
    jobs = JobTable(store)
    call = CALL
    await jobs.create("two-steps", tool_name="t", deadline=60, request=REQUEST)
    two = await jobs.attach("two-steps", **call)
    one = await jobs.start("one-unit", tool_name="t", deadline=60, request=REQUEST, **call)
    assert comparable(one) == comparable(two)
    assert one.deadline_at - one.created_at == pytest.approx(60, abs=1)
    # A second call of the same job: the row is unchanged, the call kept once.
    other = {**call, "session_id": "s2", "function_call_id": "call-2"}
    for job_id in ("two-steps", "one-unit"):
        again = await jobs.start(job_id, tool_name="other", deadline=1, request={}, **other)
        assert comparable(again) == comparable(one)
        await jobs.start(job_id, tool_name="other", deadline=1, request={}, **other)
        assert [(c.session_id, c.function_call_id) for c in await jobs.calls(job_id)] == [
            ("s2", "call-2")
        ]


async def test_a_bad_start_is_refused_before_anything_is_written(store: Store) -> None:
    jobs = JobTable(store)
    call = CALL
    bad: list[dict[str, Any]] = [
        {"job_id": "", "tool_name": "t", "deadline": 60},
        {"job_id": "j", "tool_name": "", "deadline": 60},
        {"job_id": "j", "tool_name": "t", "deadline": 0},
        {"job_id": "j", "tool_name": "t", "deadline": 60, "function_call_id": ""},
    ]
    for args in bad:
        with pytest.raises(errors.InvalidArgument):
            await jobs.start(**{**call, **args})
    assert await jobs.list_jobs() == []
