"""An approvals deadline never cuts a sleep short, through a `durable-adk serve` worker (issue 41).

The reminder example served with ``--interrupt-deadline '*=1'``: its sleep
is not listed in the worker's inbox (``GET /v1/interrupts``), a one-off
``durable-adk recover`` pass (which applies due deadlines) answers nothing,
and the real wake-up, once the timer's due time is moved past on the
database clock, is what the worker delivers: one reminder, no denial.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
from examples.reminders.app import APP_NAME, REMINDER, texts
from test_saga_sleep_serve import AUTH, serve, until

from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.effect_tables.jobs import JobTable
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger

SPEC = "examples.reminders.app:app"
ROOT = Path(__file__).resolve().parents[2]


async def test_a_served_sleep_is_not_an_approval(store_url: str) -> None:
    worker, url = serve(
        store_url, "worker-A", None, spec=SPEC, extra=("--interrupt-deadline", "*=1")
    )
    try:
        async with (
            open_store(store_url) as store,
            httpx.AsyncClient(base_url=url, headers=AUTH, timeout=30) as client,
        ):
            ledger, jobs = RunLedger(store), JobTable(store)
            started = await client.post(
                "/v1/users/u/sessions/s/runs", json={"message": "Remind me in an hour."}
            )
            assert started.status_code == 202, started.text
            run_id = started.json()["run"]["run_id"]

            async def paused() -> bool:
                run = await ledger.get(run_id)
                return run is not None and run.status.value == "PAUSED"

            await until(paused)
            listed = (await client.get("/v1/interrupts")).json()["interrupts"]
            assert listed == []  # the sleep waits on its timer, not on a person
            one_off = subprocess.run(
                [str(Path(sys.executable).with_name("durable-adk")), "recover", SPEC,
                 "--db", store_url, "--json", "--worker-id", "cli-B"],
                cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert one_off.returncode == 0, one_off.stderr
            (timer,) = [j for j in await jobs.list_jobs() if j.timer]
            await jobs.backdate(timer.job_id, 3601)

            async def woke() -> bool:
                runs = await ledger.list_runs()
                return len(runs) == 2 and all(r.status.value == "DONE" for r in runs)

            await until(woke)
            session = await DurableSessionService(store).get_session(
                app_name=APP_NAME, user_id="u", session_id="s"
            )
            assert session is not None
            answers = [r.response or {} for e in session.events for r in e.get_function_responses()]
            assert not [a for a in answers if a.get("denied")]
            assert [a["status"] for a in answers] == ["sleeping", "woke"]
            assert texts(list(session.events)).count(REMINDER) == 1
    finally:
        worker.kill()
        worker.wait(30)


async def test_a_served_run_whose_sleep_was_refused_ends_done_not_paused(store_url: str) -> None:
    """A refused sleep (``seconds=-5``) answers the call with an error; the model
    replies, and the worker ends the run DONE: not PAUSED, no timer, nothing in
    the inbox."""
    worker, url = serve(store_url, "worker-A", None, spec="refused_sleep_app:app")
    try:
        async with (
            open_store(store_url) as store,
            httpx.AsyncClient(base_url=url, headers=AUTH, timeout=30) as client,
        ):
            ledger, jobs = RunLedger(store), JobTable(store)
            started = await client.post(
                "/v1/users/u/sessions/s/runs", json={"message": "Remind me 5 s ago."}
            )
            assert started.status_code == 202, started.text
            run_id = started.json()["run"]["run_id"]

            async def ended() -> bool:
                run = await ledger.get(run_id)
                return run is not None and run.status.value not in ("QUEUED", "RUNNING")

            await until(ended)
            run = await ledger.get(run_id)
            assert run is not None and run.status.value == "DONE", run
            assert [j for j in await jobs.list_jobs() if j.timer] == []
            assert (await client.get("/v1/interrupts")).json()["interrupts"] == []
            assert [r.status.value for r in await ledger.list_runs()] == ["DONE"]
            session = await DurableSessionService(store).get_session(
                app_name=APP_NAME, user_id="u", session_id="s"
            )
            assert session is not None
            (said,) = texts(list(session.events))
            assert said.startswith("I could not set the reminder"), said
    finally:
        worker.kill()
        worker.wait(30)
