"""Seed 003's sales report, killed for real, on both backends.

The report builder is a real process that posts signed webhooks (twice) to a
receiver in this test process; the worker and the resumer are child processes
killed with ``os._exit(137)`` at named crash points; the fresh worker runs
here. Each case asserts on the outside world: the builder's submission count,
the submit requests it received (its request log counts repeats and refused
ones too) and which worker sent them, and the session's stored answers.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from examples.sales_report.app import (
    APP_NAME,
    JOB_ID,
    SECRET,
    SESSION_ID,
    USER_ID,
    make_runner,
    recover,
    run,
)
from examples.sales_report.app import texts as texts_of
from google.adk.events.event import Event

from children import run_child
from durable_adk.adk.loops.resume import Resumer, Submitter
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.effect_tables.jobs import JobState, JobTable
from durable_adk.store import Store, open_store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.testing import arm
from durable_adk.testing.report_builder import ReportBuilder, ReportBuilderClient
from durable_adk.testing.webhook_receiver import WebhookReceiver

ROOT = Path(__file__).resolve().parents[2]
READY = "Your report is ready: https://reports.example/2026-Q3-EMEA.xlsx (1284 rows)."


async def example(*args: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = arm(dict(os.environ), crash_at) if crash_at else dict(os.environ)
    return await asyncio.to_thread(
        run_child,
        [sys.executable, "-m", "examples.sales_report.app", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


class World:
    """The store, the webhook receiver and the builder process of one test."""

    def __init__(self, url: str, store: Store, receiver: WebhookReceiver, builder: str) -> None:
        self.url = url
        self.store = store
        self.jobs = JobTable(store)
        self.receiver = receiver
        self.builder = builder
        self.client = ReportBuilderClient(builder)

    async def wait_for_job(self, state: JobState = JobState.SUCCEEDED) -> None:
        for _ in range(200):
            job = await self.jobs.get(JOB_ID)
            if job is not None and job.state is state:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"job never reached {state}")

    async def events(self) -> list[Event]:
        session = await DurableSessionService(self.store).get_session(
            app_name=APP_NAME, user_id=USER_ID, session_id=SESSION_ID
        )
        assert session is not None
        return list(session.events)

    def submitters(self) -> list[str | None]:
        """The workers whose submit requests reached the builder, in order."""
        return [r.caller.get("worker") for r in self.client.requests("submit")]

    async def assert_answered_once(self) -> None:
        events = await self.events()
        answers = [r for e in events if e.author == "user" for r in e.get_function_responses()]
        calls = [c for e in events for c in e.get_function_calls()]
        assert len(calls) == 1
        assert [(a.id, a.name) for a in answers] == [(calls[0].id, "start_sales_report")]
        assert texts_of(events).count(READY) == 1
        runs = await RunLedger(self.store).list_runs()
        assert not [r for r in runs if r.status in (RunStatus.QUEUED, RunStatus.RUNNING)]
        assert self.client.stats()["submissions"] == 1
        # One submit request in all, for this job, and no cancel: a second
        # submit of the same job would still be one build.
        assert self.client.acts("submit", JOB_ID) == 1 and self.client.acts() == 1


@pytest.fixture
async def world(store_url: str) -> AsyncIterator[World]:
    async with (
        open_store(store_url) as store,
        WebhookReceiver(JobTable(store), SECRET) as receiver,
    ):
        with ReportBuilder(receiver.url, SECRET, delay=0.3, repeat_after=0.1) as builder:
            yield World(store_url, store, receiver, builder.url)


@pytest.mark.parametrize(
    "point",
    ["resume.after_claim", "resume.after_submit", "resume.after_mark", "sales_report.final_model"],
)
async def test_the_resumer_killed_mid_resume_is_recovered_and_answers_once(
    world: World, point: str
) -> None:
    assert await run(world.url, SESSION_ID, world.builder) == "PAUSED"  # the user's turn
    await world.wait_for_job()
    killed = await example("resume", "--db", world.url, "--builder", world.builder, crash_at=point)
    assert killed.returncode == 137, killed.stderr
    report = await recover(world.store, world.builder)
    await world.assert_answered_once()
    job = await world.jobs.get(JOB_ID)
    assert job is not None and job.resumed_at is not None
    if point == "resume.after_submit":  # the sweeper delivered; the later resume was dropped
        assert [r["found"] for r in report["recovered"]] == ["PAUSED"]
        assert report["resumed"] == [[JOB_ID]]
    # The builder's second webhook changed nothing.
    assert [r["changed"] for r in world.receiver.received].count(True) == 1
    assert world.submitters() == ["worker-A"]  # submitted in the user's turn, never again


async def test_the_call_and_its_job_are_written_in_one_unit(world: World) -> None:
    """No window "call stored, no job" (nor the reverse): killed right before
    the unit, neither is stored and the fresh worker's re-drive makes both;
    killed right after it, both are, and the job is already attached."""
    killed = await example(
        "run", "--db", world.url, "--builder", world.builder, crash_at="long_running.before_start"
    )
    assert killed.returncode == 137, killed.stderr
    assert await world.jobs.get(JOB_ID) is None
    assert not [c for e in await world.events() for c in e.get_function_calls()]
    report = await recover(world.store, world.builder)
    assert [r["found"] for r in report["recovered"]] and report["reattached"] == [JOB_ID]
    job = await world.jobs.get(JOB_ID)
    assert job is not None and job.attached and job.submitted_at is not None
    calls = [c for e in await world.events() for c in e.get_function_calls()]
    assert [c.id for c in calls] == [job.function_call_id]  # the re-drive's call, once
    await world.wait_for_job()
    await Resumer(make_runner(world.store, "worker-B", world.builder), gather=0.0).resume_once(
        wait=True
    )
    await world.assert_answered_once()
    assert world.submitters() == ["worker-B"]


@pytest.mark.parametrize("point", ["long_running.after_start", "long_running.after_submit"])
async def test_the_worker_killed_while_the_job_runs_outside_is_resumed(
    world: World, point: str
) -> None:
    killed = await example("run", "--db", world.url, "--builder", world.builder, crash_at=point)
    assert killed.returncode == 137, killed.stderr
    job = await world.jobs.get(JOB_ID)
    # Written with its call: attached whichever side of the submission the kill fell.
    assert job is not None and job.attached
    calls = [c for e in await world.events() for c in e.get_function_calls()]
    assert [c.id for c in calls] == [job.function_call_id]
    report = await recover(world.store, world.builder)
    # Found attached: the re-attach only submits it if it never was.
    assert report["reattached"] == [JOB_ID]
    job = await world.jobs.get(JOB_ID)
    assert job is not None and job.submitted_at is not None
    await world.wait_for_job()
    await Resumer(make_runner(world.store, "worker-B", world.builder), gather=0.0).resume_once(
        wait=True
    )
    await world.assert_answered_once()
    build = world.client.build(JOB_ID)
    assert build is not None and build["submissions"] == 1
    # Killed before the submit, the fresh worker submitted; killed after it, nobody again.
    expected = ["worker-B"] if point.endswith("start") else ["worker-A"]
    assert world.submitters() == expected


async def submit_pass(world: World) -> list[str]:
    """A fresh worker's submitter pass (dead attempts' leases moved back on the database clock)."""
    await world.jobs.backdate_submit(JOB_ID, 3600)
    runner = make_runner(world.store, "worker-B", world.builder)
    return [j.job_id for j in await Submitter(world.jobs, runner=runner).submit_once()]


async def test_a_refused_submission_is_retried_and_the_build_runs_once(store_url: str) -> None:
    async with (
        open_store(store_url) as store,
        WebhookReceiver(JobTable(store), SECRET) as receiver,
    ):
        with ReportBuilder(receiver.url, SECRET, delay=0.3, repeat_after=0.1, fail_first=1) as b:
            world = World(store_url, store, receiver, b.url)
            assert await run(world.url, SESSION_ID, world.builder) == "PAUSED"
            job = await world.jobs.get(JOB_ID)
            assert job is not None and job.submitted_at is None and job.submit_error
            assert world.client.stats()["refused"] == 1 and world.client.build(JOB_ID) is None
            assert await submit_pass(world) == [JOB_ID]
            assert await submit_pass(world) == []  # accepted: nothing more to do
            await world.wait_for_job()
            await Resumer(make_runner(store, "worker-B", world.builder), gather=0.0).resume_once(
                wait=True
            )
            events = await world.events()
            answers = [r for e in events if e.author == "user" for r in e.get_function_responses()]
            assert len(answers) == 1 and texts_of(events).count(READY) == 1
            stats = world.client.stats()
            assert (stats["refused"], stats["submissions"], stats["builds"]) == (1, 1, 1)
            # Two submit requests in all: refused in the user's turn, accepted on the retry.
            assert world.client.acts("submit", JOB_ID) == 2 and world.client.acts() == 2
            assert world.submitters() == ["worker-A", "worker-B"]


@pytest.fixture
async def slow_world(store_url: str) -> AsyncIterator[World]:
    """A builder whose webhook comes 3 s after a submission: later than a fresh worker's retry."""
    async with (
        open_store(store_url) as store,
        WebhookReceiver(JobTable(store), SECRET) as receiver,
    ):
        with ReportBuilder(receiver.url, SECRET, delay=3.0, repeat_after=0.1) as builder:
            yield World(store_url, store, receiver, builder.url)


@pytest.mark.parametrize("point", ["long_running.before_submit", "long_running.before_confirm"])
async def test_the_worker_killed_around_the_submission_is_submitted_by_a_fresh_process(
    slow_world: World, point: str
) -> None:
    world = slow_world
    killed = await example("run", "--db", world.url, "--builder", world.builder, crash_at=point)
    assert killed.returncode == 137, killed.stderr
    job = await world.jobs.get(JOB_ID)
    assert job is not None and job.submitted_at is None and job.submit_attempts == 1
    reached = world.client.build(JOB_ID)
    assert (reached is not None) == (point.endswith("confirm"))  # killed after the request?
    # The dead attempt's lease runs out; a fresh process's pass submits it.
    assert await submit_pass(world) == [JOB_ID]
    assert await submit_pass(world) == []
    await world.wait_for_job()
    report = await recover(world.store, world.builder)
    assert report["resumed"] == [[JOB_ID]]
    events = await world.events()
    answers = [r for e in events if e.author == "user" for r in e.get_function_responses()]
    assert len(answers) == 1 and texts_of(events).count(READY) == 1
    build = world.client.build(JOB_ID)
    assert build is not None and world.client.stats()["builds"] == 1
    # Killed before the request: one submission. Killed after it but before it was
    # recorded: the retry repeats it and the job id (the idempotency key) dedupes it.
    assert build["submissions"] == (2 if point.endswith("confirm") else 1)
    assert [r["changed"] for r in world.receiver.received].count(True) == 1
    expected = ["worker-A", "worker-B"] if point.endswith("confirm") else ["worker-B"]
    assert world.submitters() == expected and world.client.acts() == len(expected)


async def test_a_resume_pass_never_blocks_behind_a_run_a_dead_worker_left(world: World) -> None:
    """Issue 41: the worker is killed after it started the job with its call; the
    completion arrives while its run is still RUNNING under the dead worker's
    lease (30 s). A resumer pass submits the answer and returns at once; the
    answer's run waits for its turn in a task of its own and is driven once
    recovery has ended the orphan."""
    killed = await example(
        "run", "--db", world.url, "--builder", world.builder, crash_at="long_running.after_submit"
    )
    assert killed.returncode == 137, killed.stderr
    await world.wait_for_job()  # the completion is delivered
    ledger = RunLedger(world.store)
    (orphan,) = await ledger.list_runs(status=RunStatus.RUNNING)
    resumer = Resumer(make_runner(world.store, "worker-B", world.builder), gather=0.0)
    passed = await asyncio.wait_for(resumer.resume_once(), 10)  # not behind the 30 s lease
    assert [(r.job_ids, r.status) for r in passed] == [((JOB_ID,), RunStatus.QUEUED)]
    assert await asyncio.wait_for(resumer.resume_once(), 10) == []  # the next pass too
    assert (await ledger.get(orphan.run_id)).status is RunStatus.RUNNING  # type: ignore[union-attr]
    await ledger.backdate(orphan.run_id, 3600)  # the dead worker's lease runs out
    from durable_adk.adk.loops.recovery import Sweeper

    await Sweeper(resumer.runner).recover_once()
    # The answer's run ends DONE: driven by the resumer's own task, which may
    # have ended before wait() is called (wait() returns only drives under way).
    await asyncio.wait_for(resumer.wait(), 60)
    (answer,) = passed
    run = await ledger.get(answer.run_id)
    assert run is not None and run.status is RunStatus.DONE, run
    await world.assert_answered_once()
    assert world.submitters() == ["worker-A"]  # submitted once, by the worker that died
