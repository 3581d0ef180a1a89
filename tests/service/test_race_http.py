"""Racing callers over HTTP, one to each of two workers on one database (issue 47).

The issue's own reproduction: the same job completed through two workers at
the same instant (SUCCEEDED on one, FAILED on the other); on PostgreSQL the
loser was sometimes told ``200 {"state": "STARTED", "changed": false}``
while the job had already finished. Every answer must carry the state and
result the job kept. Operators racing on one parked run through the two
workers are likewise each told where the run stands as stored.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any

import httpx
from op_support import park_in_store
from svc_support import settings_for, threaded_worker

from durable_adk.effect_tables.jobs import JobTable
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger

ROUNDS = 12


def race(*calls: tuple[httpx.Client, str, dict[str, Any]]) -> list[httpx.Response]:
    """POSTs each call from its own thread at the same instant."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(calls))
    go = threading.Barrier(len(calls))

    def send(call: tuple[httpx.Client, str, dict[str, Any]]) -> httpx.Response:
        client, path, body = call
        go.wait()
        return client.post(path, json=body)

    with pool:
        return list(pool.map(send, calls))


async def _job(url: str, job_id: str) -> None:
    async with open_store(url) as store:
        await JobTable(store).create(job_id, tool_name="start_report", deadline=60)


async def _kept_job(url: str, job_id: str) -> tuple[str, Any]:
    async with open_store(url) as store:
        job = await JobTable(store).get(job_id)
    assert job is not None
    return job.state.value, job.result


async def _parked(url: str, session: str) -> str:
    async with open_store(url) as store:
        run, _ = await park_in_store(store, session)
    return run.run_id


async def _kept_run(url: str, run_id: str) -> str:
    async with open_store(url) as store:
        run = await RunLedger(store).get(run_id)
    assert run is not None
    return run.status.value


def test_two_workers_tell_every_completion_what_the_job_kept(store_url: str) -> None:
    settings = settings_for(store_url, sweep_interval=3600.0, resume_interval=3600.0)
    with (
        threaded_worker(settings) as one,
        threaded_worker(settings) as two,
        one.client() as a,
        two.client() as b,
    ):
        for n in range(ROUNDS):
            job_id = f"report:{n}"
            asyncio.run(_job(store_url, job_id))
            path = f"/v1/jobs/{job_id}/complete"
            answers = race(
                (a, path, {"state": "SUCCEEDED", "result": {"rows": n}}),
                (b, path, {"state": "FAILED", "result": {"error": f"boom {n}"}}),
            )
            assert [r.status_code for r in answers] == [200, 200]
            kept = asyncio.run(_kept_job(store_url, job_id))
            bodies = [r.json() for r in answers]
            assert [x["changed"] for x in bodies].count(True) == 1, bodies
            for body in bodies:
                assert (body["state"], body["result"]) == kept, (n, body, kept)


def test_two_workers_tell_every_racing_operator_where_the_run_stands(store_url: str) -> None:
    settings = settings_for(store_url, sweep_interval=3600.0, resume_interval=3600.0)
    with (
        threaded_worker(settings) as one,
        threaded_worker(settings) as two,
        one.client() as a,
        two.client() as b,
    ):
        for n in range(ROUNDS):
            run_id = asyncio.run(_parked(store_url, f"s{n}"))
            action = ("cancel", "abandon")[n % 2]
            body = {"by": "ops", "reason": "race"}
            answers = race(
                (a, f"/v1/runs/{run_id}/{action}", body),
                (b, f"/v1/runs/{run_id}/{action}", body),
            )
            status = asyncio.run(_kept_run(store_url, run_id))
            assert [r.status_code for r in answers] == [200, 200], [r.text for r in answers]
            outcomes = [r.json() for r in answers]
            assert [o["changed"] for o in outcomes].count(True) == 1, outcomes
            for outcome in outcomes:
                assert outcome["run"]["status"] == status, (n, outcome, status)
                assert status in outcome["message"]
