"""The operator's commands (cancel, resolve, abandon, retry, actions, --app), straight on
the database (both backends) and through a running worker that then drives the run on."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from op_support import APP, park_in_store
from svc_support import TOKEN, settings_for, threaded_worker
from typer.testing import CliRunner

from durable_adk.cli import app
from durable_adk.store import open_store
from durable_adk.tables.ledger import Run, RunLedger

runner = CliRunner()


def cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(
        app, list(args), env={"COLUMNS": "200", "DURABLE_ADK_OPERATOR": "ops-ana"}
    )
    return result.exit_code, result.output


async def parked(url: str, session: str, app_name: str = APP) -> tuple[Run, str]:
    async with open_store(url) as store:
        return await park_in_store(store, session, app_name=app_name)


async def queued(url: str, session: str) -> str:
    async with open_store(url) as store:
        run = await RunLedger(store).submit(
            app_name=APP, user_id="u1", session_id=session, request={"parts": []}, owner="w"
        )
        return run.run_id


async def stats(url: str) -> Any:
    async with open_store(url) as store:
        return dict(await store.fetchrow("service_store_stats") or {})


def test_operator_commands_on_the_database(store_url: str) -> None:
    db = ["--db", store_url]
    run, call_id = asyncio.run(parked(store_url, "cli-1"))
    other, _ = asyncio.run(parked(store_url, "cli-2", app_name="billing_app"))
    code, out = cli("runs", "list", "--app", "billing_app", "--json", *db)
    assert code == 0 and [r["run_id"] for r in json.loads(out)["items"]] == [other.run_id]
    code, out = cli("dead-letters", "list", "--app", APP, "--json", *db)
    assert code == 0 and [d["run_id"] for d in json.loads(out)["items"]] == [run.run_id]

    before = asyncio.run(stats(store_url))
    for args, words in (
        (("runs", "resolve", run.run_id), "exactly one of --result and --call"),
        (("runs", "resolve", run.run_id, "--result", "{nope"), "not JSON"),
        (("runs", "resolve", run.run_id, "--call", "nope"), "CALL_ID=JSON"),
    ):
        code, out = cli(*args, *db)
        assert code == 2 and words in out, out
    code, out = cli("runs", "resolve", run.run_id, "--call", 'call-x={"a": 1}', *db)
    assert code == 2 and "not an unanswered call" in out and call_id in out  # rejected input
    code, out = cli("runs", "abandon", "run-nope", "--reason", "x", *db)
    assert code == 1 and "no run 'run-nope'" in out
    assert asyncio.run(stats(store_url)) == before

    code, out = cli(
        "runs", "resolve", run.run_id, "--result", '{"item": "stools", "in_stock": 5}',
        "--reason", "counted them", "--json", *db,
    )  # fmt: skip
    assert code == 0, out
    outcome = json.loads(out)
    assert outcome["changed"] and outcome["run"]["status"] == "QUEUED"
    code, out = cli("runs", "resolve", run.run_id, "--result", "1", *db)
    assert code == 0 and "already resolved by ops-ana" in out

    code, out = cli("runs", "abandon", other.run_id, "--reason", "refunded", *db)
    assert code == 0 and "abandoned" in out and "FAILED" in out
    code, out = cli("runs", "abandon", other.run_id, "--reason", "again", *db)
    assert code == 0 and "already abandoned" in out

    waiting = asyncio.run(queued(store_url, "cli-3"))
    code, out = cli("runs", "cancel", waiting, "--reason", "not wanted", *db)
    assert code == 0 and "cancelled; it is CANCELLED" in out
    code, out = cli("runs", "cancel", waiting, *db)
    assert code == 0 and "already CANCELLED: nothing changed" in out

    code, out = cli("runs", "actions", "--json", *db)
    assert code == 0
    trail = [(a["action"], a["run_id"], a["actor"]) for a in json.loads(out)["items"]]
    assert trail == [
        ("cancel", waiting, "ops-ana"),
        ("abandon", other.run_id, "ops-ana"),
        ("resolve", run.run_id, "ops-ana"),
    ]
    code, out = cli("runs", "show", run.run_id, *db)
    assert code == 0 and "resolve" in out and "counted them" in out and "epoch 2" in out
    assert "operator ops-ana" in out


def test_resolve_through_a_running_worker_drives_the_run_on(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cli-op.db"
    run, call_id = asyncio.run(parked(url, "remote-1"))
    with threaded_worker(settings_for(url)) as worker:
        remote = ["--url", worker.base_url, "--token", TOKEN]
        answer = f'{call_id}={{"item": "stools", "in_stock": 9}}'
        code, out = cli("runs", "resolve", run.run_id, "--call", answer, "--by", "bo", *remote)
        assert code == 0 and "resolved" in out, out
        deadline = time.monotonic() + 60
        while True:
            code, out = cli("runs", "show", run.run_id, "--json", *remote)
            detail = json.loads(out)
            if detail["run"]["status"] == "DONE":
                break
            assert time.monotonic() < deadline, detail["run"]
            time.sleep(0.1)
        said = [
            part["text"]
            for e in detail["events"]
            for part in (e["event"].get("content") or {}).get("parts") or []
            if part.get("text")
        ]
        assert said[-1] == "9 in stock for 'stools'."
        assert [a["actor"] for a in detail["actions"]] == ["bo"]
        code, out = cli("runs", "cancel", run.run_id, *remote)
        assert code == 0 and "it has ended, nothing to cancel" in out
        code, out = cli(
            "runs", "cancel", run.run_id, "--token", "wrong-token1", "--url", worker.base_url
        )
        assert code == 1 and "bearer token" in out
