"""Two sleeps in one ParallelAgent (issue 41): the shape is refused when the app is loaded.

ADK resumes a ParallelAgent by running every unfinished branch again; a
branch whose sleep answered ``sleeping`` at once is then asked again and
ends, so the second wake-up would find an invocation that is over and never
act. The app is refused before any run, through DurableRunner and through
``durable-adk serve`` (a real process), with an error naming the
ParallelAgent, both branches and their tools; a sleep in one branch only is
accepted and wakes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from google.adk.agents import LlmAgent, ParallelAgent, SequentialAgent
from parallel_sleeps_app import WOKE, app, branches, one_branch

from durable_adk import errors, long_running_tool
from durable_adk.adk.loops.resume import Resumer
from durable_adk.adk.loops.sleep import Waker, sleep_tool
from durable_adk.adk.runner import DurableRunner
from durable_adk.effect_tables.jobs import JobTable
from durable_adk.store import Store
from durable_adk.tables.ledger import RunStatus
from durable_adk.testing import ScriptedModel

HERE = Path(__file__).parent


def test_two_sleeping_branches_are_refused_at_load(store: Store) -> None:
    with pytest.raises(errors.InvalidArgument) as refused:
        DurableRunner(app=app, store=store)
    message = str(refused.value)
    assert "ParallelAgent 'fan_out'" in message
    assert "'north' (durable_sleep)" in message and "'south' (durable_sleep)" in message
    assert "never be acted on" in message and "docs/time.md" in message


def test_a_sleep_and_a_job_in_nested_branches_are_refused_too(store: Store) -> None:
    def start(quarter: str) -> dict[str, str]:
        """Starts a report."""
        return {"status": "pending"}

    model = ScriptedModel({})
    report = LlmAgent(
        name="report",
        model=model,
        tools=[long_running_tool(start, job_key="report:{quarter}", deadline=60)],
    )
    nap = LlmAgent(name="nap", model=model, tools=[sleep_tool()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        inner = SequentialAgent(name="then_report", sub_agents=[report])
        root = SequentialAgent(
            name="root",
            sub_agents=[ParallelAgent(name="side_by_side", sub_agents=[inner, nap])],
        )
    with pytest.raises(errors.InvalidArgument, match=r"'then_report' \(start\); 'nap'"):
        DurableRunner(app=root, store=store, app_name="x")


async def test_a_sleep_in_one_branch_is_accepted_and_wakes(store: Store) -> None:
    runner = DurableRunner(app=one_branch, store=store, queue_poll=0.02)
    async for _ in runner.run(user_id="u", session_id="s", message="go"):
        pass
    assert [r.status for r in await runner.ledger.list_runs()] == [RunStatus.PAUSED]
    jobs = JobTable(store)
    (timer,) = [j for j in await jobs.list_jobs() if j.timer]
    await jobs.backdate(timer.job_id, 60)
    await Waker(jobs, resumer=Resumer(runner, jobs, gather=0.0)).wake_once(wait=True)
    session = await runner.sessions.get_session(
        app_name="parallel_sleeps", user_id="u", session_id="s"
    )
    assert session is not None
    said = [p.text for e in session.events if e.content for p in e.content.parts or () if p.text]
    assert said.count(WOKE) == 1 and said.count("east is done") == 1
    assert sorted(r.status.value for r in await runner.ledger.list_runs()) == ["DONE", "DONE"]


def test_durable_adk_serve_refuses_the_app_before_serving(store_url: str) -> None:
    command = [str(Path(sys.executable).with_name("durable-adk")), "serve"]
    ran = subprocess.run(
        [*command, "parallel_sleeps_app:app", "--db", store_url, "--port", "0"],
        cwd=HERE,
        env={**os.environ, "COLUMNS": "1000"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    said = ran.stdout + ran.stderr
    assert ran.returncode != 0, said
    assert "ParallelAgent 'fan_out'" in said and "'north' (durable_sleep)" in said, said


def test_the_refusal_names_the_shape_not_a_runtime_state() -> None:
    # The same tree, built again: the guard reads the shape alone.
    from durable_adk.adk.shapes.parallel import refuse_parallel_pauses

    with pytest.raises(errors.InvalidArgument, match="fan_out"):
        refuse_parallel_pauses(branches(both_sleep=True))
    refuse_parallel_pauses(branches(both_sleep=False))
