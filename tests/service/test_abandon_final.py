"""Abandon is final: an abandoned run is never retried, on both backends.

Through every way in: the library (``operators.retry_run``), the HTTP API
(``POST /v1/runs/{run}/retry``, 409) and the CLI (``runs retry``, on the
database and through a worker, exit 1). Each refusal says abandon is final
and changes nothing: the run stays FAILED, no run is queued, the audit trail
and the store's totals stay as they were, and no worker drives it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from op_support import park_in_store
from svc_support import TOKEN, settings_for, threaded_worker
from typer.testing import CliRunner

from durable_adk import errors
from durable_adk.adk.runs import operators
from durable_adk.cli import app
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger, RunStatus

runner = CliRunner()


def cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(
        app, list(args), env={"COLUMNS": "200", "DURABLE_ADK_OPERATOR": "ops-ana"}
    )
    return result.exit_code, result.output


async def everything(url: str, run_id: str) -> tuple[Any, ...]:
    """What a retry could change: the run, the store's totals, the audit trail."""
    async with open_store(url) as store:
        ledger = RunLedger(store)
        run = await ledger.get(run_id)
        totals = dict(await store.fetchrow("service_store_stats") or {})
        actions = await ledger.actions(run_id=run_id)
        return run, totals, actions


async def abandoned_and_parked(url: str) -> tuple[str, str]:
    """One run parked then abandoned, and one run only parked (which retry takes)."""
    async with open_store(url) as store:
        closed, _ = await park_in_store(store, "gone")
        kept, _ = await park_in_store(store, "kept")
        outcome = await operators.abandon_run(
            RunLedger(store), closed.run_id, by="ana", reason="charged by hand"
        )
        assert outcome.changed and outcome.run.status is RunStatus.FAILED
        return closed.run_id, kept.run_id


async def test_the_library_refuses_to_retry_an_abandoned_run(store_url: str) -> None:
    closed, kept = await abandoned_and_parked(store_url)
    before = await everything(store_url, closed)
    async with open_store(store_url) as store:
        ledger = RunLedger(store)
        with pytest.raises(errors.Conflict, match="abandon is final") as refused:
            await operators.retry_run(ledger, closed, by="bo", reason="try again")
        assert "abandoned by ana" in str(refused.value)
        assert "nothing changed" in str(refused.value)
        assert await everything(store_url, closed) == before
        # A parked run that was not abandoned is still retried.
        retried = await operators.retry_run(ledger, kept, by="bo")
        assert retried.changed and retried.run.status is RunStatus.QUEUED


def test_http_and_cli_refuse_to_retry_an_abandoned_run(store_url: str) -> None:
    closed, _ = asyncio.run(abandoned_and_parked(store_url))
    before = asyncio.run(everything(store_url, closed))

    code, out = cli("runs", "retry", closed, "--db", store_url)
    assert code == 1, out
    assert "abandon is final" in out and "nothing changed" in out
    assert asyncio.run(everything(store_url, closed)) == before

    with threaded_worker(settings_for(store_url)) as worker:
        with worker.client() as client:
            for body in (None, {"by": "bo", "reason": "try again"}):
                refused = client.post(f"/v1/runs/{closed}/retry", json=body)
                assert refused.status_code == 409, refused.text
                error = refused.json()["error"]
                assert error["code"] == "conflict"
                assert "abandon is final" in error["message"]
                assert "abandoned by ana" in error["message"]
        code, out = cli("runs", "retry", closed, "--url", worker.base_url, "--token", TOKEN)
        assert code == 1 and "abandon is final" in out, out
        # A worker's sweeps never pick it up either.
        with worker.client() as client:
            run = client.get(f"/v1/runs/{closed}").json()["run"]
        assert run["status"] == "FAILED"
    assert asyncio.run(everything(store_url, closed)) == before
