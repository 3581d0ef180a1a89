"""Timers on the job table, both backends (issue 26): create, wake once on the db clock, cancel."""

from __future__ import annotations

import asyncio
import time

import pytest

from durable_adk import errors
from durable_adk.effect_tables.jobs import JobState, JobTable
from durable_adk.store import Store, open_store

CALL = {
    "app_name": "reminders",
    "user_id": "u1",
    "session_id": "s1",
    "invocation_id": "e-1",
    "function_call_id": "call-1",
}


async def sleeping(jobs: JobTable, timer_id: str = "sleep:e-1:call-1", seconds: float = 60) -> None:
    await jobs.create_timer(timer_id, tool_name="durable_sleep", seconds=seconds)
    await jobs.attach(timer_id, **{**CALL, "function_call_id": timer_id})


async def test_a_timer_is_due_on_the_database_clock_and_created_once(store: Store) -> None:
    jobs = JobTable(store)
    now = await jobs.now()
    timer, created = await jobs.create_timer("t", tool_name="durable_sleep", seconds=60)
    again, created_again = await jobs.create_timer("t", tool_name="durable_sleep", seconds=5)
    assert (created, created_again) == (True, False) and again == timer
    assert timer.timer and timer.state is JobState.STARTED and timer.submitted_at is not None
    assert timer.deadline_at - now == pytest.approx(60, abs=2)
    absolute, _ = await jobs.create_timer("u", tool_name="durable_sleep", until=now + 7200)
    assert absolute.deadline_at == pytest.approx(now + 7200)


@pytest.mark.parametrize(
    ("seconds", "until"), [(None, None), (5.0, 1e9), (-1.0, None), (float("nan"), None)]
)
async def test_bad_timers_are_refused_and_store_nothing(
    store: Store, seconds: float | None, until: float | None
) -> None:
    jobs = JobTable(store)
    with pytest.raises(errors.InvalidArgument):
        await jobs.create_timer("t", tool_name="durable_sleep", seconds=seconds, until=until)
    assert await jobs.list_jobs() == []


async def test_a_timer_wakes_once_at_its_due_time_and_not_before(store: Store) -> None:
    jobs = JobTable(store)
    await sleeping(jobs)
    assert await jobs.wake() == []  # not due: the database clock decides
    await jobs.backdate("sleep:e-1:call-1", 61)
    woken = await jobs.wake()
    assert [j.job_id for j in woken] == ["sleep:e-1:call-1"]
    job = woken[0]
    assert job.state is JobState.SUCCEEDED and job.completed_at is not None
    assert job.result["status"] == "woke"
    assert job.result["due"] == pytest.approx(job.deadline_at)
    assert job.result["woke_at"] >= job.result["due"]
    assert await jobs.wake() == []  # once
    ready = await jobs.claim_for_resume("w1", app_name="reminders")
    assert [j.job_id for j in ready] == ["sleep:e-1:call-1"]


async def test_a_skewed_worker_clock_wakes_nothing_early(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = JobTable(store)
    await sleeping(jobs, seconds=30)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 86400)  # this worker is a day ahead
    assert await jobs.wake() == []
    assert (await jobs.get("sleep:e-1:call-1")).state is JobState.STARTED  # type: ignore[union-attr]


async def test_the_expiry_sweep_leaves_timers_alone(store: Store) -> None:
    jobs = JobTable(store)
    await sleeping(jobs)
    await jobs.create("report", tool_name="start_report", deadline=60)
    await jobs.backdate("sleep:e-1:call-1", 3600)
    await jobs.backdate("report", 3600)
    assert [j.job_id for j in await jobs.expire()] == ["report"]
    assert [j.job_id for j in await jobs.wake()] == ["sleep:e-1:call-1"]


async def test_a_cancelled_timer_never_wakes_and_is_listed_cancelled(store: Store) -> None:
    jobs = JobTable(store)
    await sleeping(jobs)
    cancelled = await jobs.cancel_of_invocation(
        app_name="reminders",
        user_id="u1",
        session_id="s1",
        invocation_id="e-1",
        result={"status": "cancelled"},
    )
    assert cancelled == ["sleep:e-1:call-1"]
    await jobs.backdate("sleep:e-1:call-1", 3600)
    assert await jobs.wake() == []
    listed = await jobs.list_jobs(state=JobState.CANCELLED)
    assert [(j.job_id, j.timer) for j in listed] == [("sleep:e-1:call-1", True)]


async def test_racing_wakers_wake_each_timer_once(store_url: str) -> None:
    async with open_store(store_url) as one, open_store(store_url) as two:
        a, b = JobTable(one), JobTable(two)
        for i in range(20):
            await sleeping(a, f"sleep:e-1:call-{i}")
            await a.backdate(f"sleep:e-1:call-{i}", 120)
        rounds = await asyncio.gather(*(t.wake(limit=5) for t in (a, b, a, b, a, b)))
        woken = [j.job_id for r in rounds for j in r]
        woken += [j.job_id for j in await a.wake(limit=100)]
        assert sorted(woken) == sorted(f"sleep:e-1:call-{i}" for i in range(20))
