"""The operators' commands, straight on the database (both backends) and
through a running worker; the same answers either way."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from svc_support import TOKEN, settings_for, threaded_worker
from typer.testing import CliRunner

from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.cli import app
from durable_adk.effect_tables.jobs import JobTable
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger

runner = CliRunner()


async def prepare(url: str) -> str:
    """A parked run with a dead letter, and an open job."""
    async with open_store(url) as store:
        await DurableSessionService(store).create_session(
            app_name="stock_assistant", user_id="ann", session_id="order-7"
        )
        ledger = RunLedger(store)
        run = await ledger.submit(
            app_name="stock_assistant",
            user_id="ann",
            session_id="order-7",
            request={"role": "user", "parts": [{"text": "lamps"}]},
            owner="dead-worker",
        )
        claimed = await ledger.claim_queued(run.run_id, "dead-worker")
        assert claimed is not None
        await ledger.park(
            claimed.lease, error="outcome unknown: charge may have acted", classification="X"
        )
        await JobTable(store).create("report:Q3", tool_name="build_report", deadline=600)
        return run.run_id


def cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_operations_on_the_database(store_url: str) -> None:
    run_id = asyncio.run(prepare(store_url))
    db = ["--db", store_url]
    code, out = cli("runs", "list", "--status", "parked", *db)
    assert code == 0 and run_id in out and "PARKED" in out and "charge may have acted" in out
    code, out = cli("runs", "show", run_id, *db)
    assert code == 0 and "ann/order-7" in out and "outcome unknown" in out and "dead letters" in out
    code, out = cli("dead-letters", "list", "--json", *db)
    assert code == 0 and [d["run_id"] for d in json.loads(out)["items"]] == [run_id]
    code, out = cli("runs", "retry", run_id, *db)
    assert code == 0 and "QUEUED" in out
    code, out = cli("runs", "retry", run_id, *db)
    assert code == 1 and "not PARKED" in out
    code, out = cli("runs", "show", "run-nope", *db)
    assert code == 1 and "no run 'run-nope'" in out
    code, out = cli("runs", "list", "--status", "sideways", *db)
    assert code == 2
    code, out = cli("jobs", "list", *db)
    assert code == 0 and "report:Q3" in out and "STARTED" in out
    code, out = cli("jobs", "complete", "report:Q3", "--result", '{"url": "q3.pdf"}', *db)
    assert code == 0 and "completed: SUCCEEDED" in out
    code, out = cli("jobs", "complete", "report:Q3", "--state", "FAILED", *db)
    assert code == 0 and "nothing changed" in out
    code, out = cli("sagas", "list", "--json", *db)
    assert code == 0 and json.loads(out) == {"available": True, "note": None, "items": []}


def test_operations_through_a_running_worker(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cli.db"
    run_id = asyncio.run(prepare(url))
    with threaded_worker(settings_for(url, sweep_interval=60)) as worker:
        remote = ["--url", worker.base_url, "--token", TOKEN]
        code, out = cli("runs", "list", "--json", *remote)
        assert code == 0 and [r["run_id"] for r in json.loads(out)["items"]] == [run_id]
        code, direct = cli("runs", "show", run_id, "--json", "--db", url)
        code_remote, through = cli("runs", "show", run_id, "--json", *remote)
        assert code == code_remote == 0
        from_db, from_worker = json.loads(direct), json.loads(through)
        assert from_worker["finding"]["cls"] == "NOT_STARTED"  # the worker knows the agent
        assert from_db["finding"] is None  # a bare database does not
        assert "no agent is known here" in from_db["note"] and from_worker["note"] is None
        for key in ("finding", "note"):
            from_db.pop(key), from_worker.pop(key)
        assert from_db == from_worker
        code, out = cli("runs", "list", "--url", worker.base_url, "--token", "wrong-token")
        assert code == 1 and "bearer token" in out and run_id not in out
        code, out = cli("runs", "retry", run_id, *remote)
        assert code == 0 and "QUEUED" in out
        code, out = cli("jobs", "list", "--json", *remote)
        assert code == 0 and json.loads(out)["items"][0]["job_id"] == "report:Q3"
        code, out = cli("jobs", "complete", "report:Q3", *remote)
        assert code == 0 and "completed" in out
    code, out = cli("runs", "list", "--url", worker.base_url, "--token", TOKEN)
    assert code == 1 and "cannot reach the worker" in out


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("no_colon", "expected MODULE:APP"),
        ("durable_adk.nope:app", "cannot import"),
        ("durable_adk.demo.service_app:missing", "has no attribute"),
        ("durable_adk.demo.service_app:APP_NAME", "expected an ADK App"),
    ],
)
def test_serve_refuses_what_is_not_an_app(spec: str, reason: str, tmp_path: Path) -> None:
    code, out = cli("serve", spec, "--db", f"sqlite:///{tmp_path}/x.db")
    assert code == 2 and reason in out


def test_serve_refuses_a_max_attempts_below_one(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/x.db"
    code, out = cli("serve", "durable_adk.demo.service_app:app", "--db", db, "--max-attempts", "0")
    assert code == 2 and "max-attempts" in out
    assert not (tmp_path / "x.db").exists()  # refused before anything was opened


@pytest.mark.parametrize("command", ["serve", "recover"])
def test_a_bad_log_level_is_refused_and_nothing_is_created(command: str, tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    code, out = cli(
        command,
        "durable_adk.demo.service_app:app",
        "--db",
        f"sqlite:///{db}",
        "--log-level",
        "loud",
    )
    assert code == 2 and "unknown log level 'loud'" in out
    assert not db.exists()


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["no_colon"], "expected MODULE:APP"),
        (["durable_adk.demo.service_app:missing"], "has no attribute"),
        (["durable_adk.demo.service_app:app", "--db", "sqlite:///{tmp}/none.db"], "no database"),
    ],
)
def test_recover_refuses_bad_arguments(args: list[str], reason: str, tmp_path: Path) -> None:
    code, out = cli("recover", *[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert code == 2 and reason in out
    assert not (tmp_path / "none.db").exists()


def test_recover_on_an_idle_database_exits_0(store_url: str) -> None:
    async def schema() -> None:
        async with open_store(store_url):
            pass

    asyncio.run(schema())
    code, out = cli("recover", "durable_adk.demo.service_app:app", "--db", store_url)
    assert code == 0 and "0 run(s) recovered" in out
