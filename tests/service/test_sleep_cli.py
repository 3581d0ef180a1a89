"""Sleeping runs where operators look, both backends: runs show (wakes at), jobs list, cancel."""

from __future__ import annotations

import asyncio
import json

from examples.reminders.app import APP_NAME, ASK, USER_ID, build_agent
from typer.testing import CliRunner

from durable_adk.adk.runner import DurableRunner
from durable_adk.cli import app
from durable_adk.effect_tables.jobs import JobTable
from durable_adk.store import open_store

runner = CliRunner()


def cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


async def sleeping(url: str) -> tuple[str, float]:
    """A reminder run asleep for an hour; returns its id and due time."""
    async with open_store(url) as store:
        durable = DurableRunner(
            app=build_agent(3600), app_name=APP_NAME, store=store, worker_id="w1"
        )
        async for _ in durable.run(user_id=USER_ID, session_id="s", message=ASK):
            pass
        (run,) = await durable.ledger.list_runs()
        (timer,) = await JobTable(store).list_jobs(session_id="s")
        return run.run_id, timer.deadline_at


def test_a_sleeping_run_shows_when_it_wakes_and_a_cancel_lists_its_timer_cancelled(
    store_url: str,
) -> None:
    run_id, due = asyncio.run(sleeping(store_url))
    db = ["--db", store_url]
    code, out = cli("runs", "list", *db)
    assert code == 0 and run_id in out and "PAUSED" in out
    code, out = cli("runs", "show", run_id, *db)
    assert code == 0 and "wakes at" in out
    code, out = cli("runs", "show", run_id, "--json", *db)
    assert code == 0 and json.loads(out)["wakes_at"] == due
    code, out = cli("runs", "cancel", run_id, "--reason", "not needed", *db)
    assert code == 0 and "CANCELLED" in out
    code, out = cli("runs", "show", run_id, "--json", *db)
    assert code == 0 and json.loads(out)["wakes_at"] is None
    code, out = cli("jobs", "list", "--json", *db)
    assert code == 0
    (timer,) = json.loads(out)["items"]
    assert (timer["tool_name"], timer["state"], timer["timer"]) == (
        "durable_sleep",
        "CANCELLED",
        True,
    )
