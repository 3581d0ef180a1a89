"""One CLI grammar (issue 42, item 1): every command group works on the
database (``--db``) and through a real ``durable-adk serve`` worker (``--url
--token``) with the same options, the same answers and the same exit codes;
``--app`` may be left out when there is one app, and an unclear app is bad
input (exit 2) listing the apps."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from svc_support import TOKEN, ServeProcess, wait_ready
from test_cli import prepare
from typer.testing import CliRunner

from durable_adk.cli import app
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger

runner = CliRunner()

_MODULE = """\
from durable_adk.demo.service_app import app
from durable_adk.schedules import Schedule

durable_adk_version = "1.0"
durable_adk_schedules = [
    Schedule(name="nightly", message="report", user_id="ops", cron="0 2 * * *"),
]
"""


def cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "400"})
    return result.exit_code, result.output


@pytest.fixture
def worker(store_url: str, tmp_path: Path) -> Iterator[ServeProcess]:
    (tmp_path / "parity_app.py").write_text(_MODULE)
    command = [
        sys.executable, "-m", "durable_adk.cli", "serve", "parity_app:app",
        "--db", store_url, "--port", "0", "--token", TOKEN, "--worker-id", "parity",
        "--sweep-interval", "60", "--drain-seconds", "1",
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env={**os.environ},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield wait_ready(process)
    finally:
        process.terminate()
        process.wait(timeout=30)


def _both(db: str, worker: ServeProcess, *args: str) -> tuple[tuple[int, str], tuple[int, str]]:
    return cli(*args, "--db", db), cli(*args, "--url", worker.base_url, "--token", TOKEN)


def _same_json(db: str, worker: ServeProcess, *args: str) -> Any:
    (code_db, out_db), (code_url, out_url) = _both(db, worker, *args, "--json")
    assert code_db == code_url == 0, (args, out_db, out_url)
    from_db, from_url = json.loads(out_db), json.loads(out_url)
    if args[:2] == ("runs", "show"):  # the worker knows the agent; a bare database does not
        for key in ("finding", "note"):
            from_db.pop(key), from_url.pop(key)
    assert from_db == from_url, args
    if set(from_db) == {"available", "note", "items"}:  # a list: the one envelope
        return from_db["items"]
    return from_db


def _tick_settled(db: str, schedule: str) -> None:
    """Waits until no tick of ``schedule`` is PENDING (a live worker submits them)."""
    deadline = time.monotonic() + 30
    while True:
        code, out = cli("schedules", "ticks", schedule, "--json", "--db", db)
        assert code == 0, out
        if all(t["state"] != "PENDING" for t in json.loads(out)["items"]):
            return
        assert time.monotonic() < deadline, out
        time.sleep(0.1)


def _same_refusal(db: str, worker: ServeProcess, code: int, *args: str) -> str:
    (code_db, out_db), (code_url, out_url) = _both(db, worker, *args)
    assert code_db == code_url == code, (args, out_db, out_url)
    assert out_db == out_url, args
    return out_db


def test_every_command_answers_the_same_on_the_database_and_through_a_worker(
    store_url: str, worker: ServeProcess
) -> None:
    run_id = asyncio.run(prepare(store_url))
    db = store_url
    # Reads: the same JSON either way.
    assert [r["run_id"] for r in _same_json(db, worker, "runs", "list")] == [run_id]
    _same_json(db, worker, "runs", "list", "--app", "stock_assistant", "--status", "parked")
    assert _same_json(db, worker, "runs", "show", run_id)["run"]["status"] == "PARKED"
    _same_json(db, worker, "runs", "actions", "--app", "stock_assistant")
    assert len(_same_json(db, worker, "dead-letters", "list")) == 1
    _same_json(db, worker, "jobs", "list")
    _same_json(db, worker, "sagas", "list")
    _same_json(db, worker, "interrupts", "list", "--app", "stock_assistant")
    _same_json(db, worker, "sessions", "unreadable", "stock_assistant", "ann", "order-7")
    listed = _same_json(db, worker, "schedules", "list")  # no --app: the only app
    assert [s["name"] for s in listed] == ["nightly"]
    assert _same_json(db, worker, "schedules", "list", "--app", "stock_assistant") == listed
    assert _same_json(db, worker, "schedules", "ticks", "nightly") == []
    versions = _same_json(db, worker, "versions", "list")
    assert "parity" in {w for v in versions for w in v["own_workers"]}

    # Actions, each through one transport and then the other: the same shape,
    # and the second sees what the first did.
    first = ["--url", worker.base_url, "--token", TOKEN]
    second = ["--db", db]
    code, out = cli("schedules", "pause", "nightly", "--json", *first)
    paused = json.loads(out)
    assert code == 0 and paused["changed"] and paused["state"] == "paused"
    code, out = cli("schedules", "pause", "nightly", "--json", *second)
    again = json.loads(out)
    assert code == 0 and not again["changed"] and set(again) == set(paused)
    code, out = cli("schedules", "resume", "nightly", "--json", *second)
    assert code == 0 and json.loads(out)["changed"]
    code, out = cli("schedules", "resume", "nightly", "--json", *first)
    assert code == 0 and not json.loads(out)["changed"]
    code, out = cli("schedules", "trigger", "nightly", "--id", "t1", "--json", *first)
    tick = json.loads(out)
    code2, out2 = cli("schedules", "trigger", "nightly", "--id", "t1", "--json", *second)
    assert code == code2 == 0 and json.loads(out2)["tick_key"] == tick["tick_key"]
    _tick_settled(db, "nightly")  # the worker submits it: both reads then see one state
    ticks = _same_json(db, worker, "schedules", "ticks", "nightly")
    assert [t["tick_key"] for t in ticks][:1] == [tick["tick_key"]]
    code, out = cli("versions", "drain", "1.0", "--json", *first)
    assert code == 0 and json.loads(out) == {"version": "1.0", "drained": True, "changed": True}
    code, out = cli("versions", "drain", "1.0", "--json", *second)
    assert code == 0 and json.loads(out)["changed"] is False
    code, out = cli("versions", "undrain", "1.0", "--json", *second)
    assert code == 0 and json.loads(out)["changed"] is True
    code, out = cli("versions", "undrain", "1.0", "--json", *first)
    assert code == 0 and json.loads(out)["changed"] is False
    code, out = cli("runs", "retry", run_id, "--json", *first)
    assert code == 0 and json.loads(out)["status"] == "QUEUED"
    code, out = cli("jobs", "complete", "report:Q3", "--json", *second)
    assert code == 0 and json.loads(out)["changed"] is True
    code, out = cli("jobs", "complete", "report:Q3", "--json", *first)
    assert code == 0 and json.loads(out)["changed"] is False

    # Refusals: the same exit code and the same words either way.
    _same_refusal(db, worker, 1, "runs", "retry", run_id)  # not parked any more
    for args in (
        ("runs", "show", "run-nope"),
        ("runs", "cancel", "run-nope"),
        ("runs", "abandon", "run-nope", "--reason", "x"),
        ("runs", "resolve", "run-nope", "--result", "{}"),
        ("jobs", "complete", "job-nope"),
        ("interrupts", "answer", "call-nope", "--approve", "--session", "order-7"),
        ("schedules", "pause", "nope"),
        ("schedules", "ticks", "nope"),
        ("versions", "drain", "blue"),
        ("versions", "move", "1.0", "--to", "0.5"),
    ):
        said = _same_refusal(db, worker, 1, *args)
        assert said.startswith("error: "), said
    # Bad input: exit 2 either way.
    _same_refusal(db, worker, 2, "runs", "list", "--status", "sideways")
    _same_refusal(db, worker, 2, "runs", "resolve", run_id, "--result", "{nope")
    (code_db, out_db), (code_url, out_url) = _both(db, worker, "schedules", "list", "--app", "x")
    assert code_db == code_url == 2
    assert "no app 'x'" in out_db and "stock_assistant" in out_db
    assert "serves app 'stock_assistant', not 'x'" in out_url


async def _second_app(url: str) -> None:
    async with open_store(url) as store:
        await RunLedger(store).submit(
            app_name="billing",
            user_id="u",
            session_id="s",
            request={"role": "user", "parts": [{"text": "hi"}]},
            owner="w",
        )


def test_app_is_asked_for_only_when_the_database_holds_several(store_url: str) -> None:
    asyncio.run(prepare(store_url))
    code, out = cli("versions", "list", "--json", "--db", store_url)
    assert code == 0 and [v["version"] for v in json.loads(out)["items"]] == ["(none)"]
    asyncio.run(_second_app(store_url))
    for args in (("versions", "list"), ("schedules", "list"), ("versions", "drain", "1.0")):
        code, out = cli(*args, "--db", store_url)
        assert code == 2 and "holds 2 apps (billing, stock_assistant): give --app" in out, out
    code, out = cli("versions", "list", "--app", "billing", "--json", "--db", store_url)
    assert code == 0 and json.loads(out)["items"][0]["total"] == 1
