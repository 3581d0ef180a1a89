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
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from svc_support import TOKEN, ServeProcess, wait_ready
from test_cli import prepare
from typer.testing import CliRunner

from children import spawn
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
    process = spawn(
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
    repairs = _same_json(db, worker, "sessions", "unreadable", "ann", "order-7")
    assert _same_json(db, worker, "sessions", "unreadable", "ann", "order-7", "--app",
                      "stock_assistant") == repairs  # fmt: skip
    # The older form, the app first, still answers the same, with a note on stderr.
    for where in (["--db", db], ["--url", worker.base_url, "--token", TOKEN]):
        older = runner.invoke(
            app, ["sessions", "unreadable", "stock_assistant", "ann", "order-7", "--json", *where]
        )
        assert older.exit_code == 0 and json.loads(older.stdout) == repairs, older.output
        assert "deprecated" in older.stderr and "--app stock_assistant" in older.stderr
    listed = _same_json(db, worker, "schedules", "list")  # no --app: the only app
    assert [s["name"] for s in listed] == ["nightly"]
    assert _same_json(db, worker, "schedules", "list", "--app", "stock_assistant") == listed
    assert _same_json(db, worker, "schedules", "ticks", "nightly") == []
    versions = _same_json(db, worker, "versions", "list")
    assert "parity" in {w for v in versions for w in v["own_workers"]}
    # The groups of data lifecycle, keys and A2A.
    dry = _same_json(db, worker, "purge", "--dry-run", "--retention", "parked=30d")
    assert dry and all(report["dry_run"] for report in dry), dry
    keys = _same_json(db, worker, "keys", "status")  # no key: every value is in clear
    assert keys["primary"] is None and [k["key_id"] for k in keys["keys"]] == ["clear"], keys
    (code_db, out_db), (code_url, out_url) = _both(db, worker, "keys", "rotate")
    assert code_db == code_url == 2 and "--key-file" in out_db, (out_db, out_url)
    assert _same_json(db, worker, "dead-letters", "pushes", "--status", "all") == []

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
    code, out = cli("users", "forget", "nobody", "--app", "stock_assistant", "--json", *first)
    forgot = json.loads(out)
    assert code == 0 and forgot["rows"] == 0, out
    code, out = cli("users", "forget", "nobody", "--app", "stock_assistant", "--json", *second)
    assert code == 0 and set(json.loads(out)) == set(forgot), out

    # A refusal: the same exit code and the same words either way (the table
    # of exit codes is test_exit_codes_are_the_same_through_either_transport).
    said = _same_refusal(db, worker, 1, "runs", "retry", run_id)  # not parked any more
    assert said.startswith("error: ") and "not PARKED" in said, said


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


# Exit codes (issue 42): 0 done, 1 refused, 2 bad input, the same through either
# transport. "Not found" is a refusal (1): the command is well formed, the
# record it names is not there. ``same`` says whether both transports print the
# same words (a worker names the app it serves where a database lists its apps).
RUN, CANCELLED = "{run}", "{cancelled}"
EXIT_CASES: list[tuple[int, tuple[str, ...], str, bool]] = [
    # refused: not found
    (1, ("runs", "show", "run-nope"), "no run 'run-nope'", True),
    (1, ("runs", "cancel", "run-nope"), "no run 'run-nope'", True),
    (1, ("runs", "abandon", "run-nope", "--reason", "x"), "no run 'run-nope'", True),
    (1, ("runs", "resolve", "run-nope", "--result", "{}"), "no run 'run-nope'", True),
    (1, ("jobs", "complete", "job-nope"), "job-nope", True),
    (1, ("interrupts", "answer", "call-nope", "--approve", "--session", "order-7"),
     "no interrupt 'call-nope'", True),
    (1, ("schedules", "pause", "nope"), "no schedule 'nope'", True),
    (1, ("schedules", "trigger", "nope"), "no schedule 'nope'", True),
    (1, ("schedules", "ticks", "nope"), "no schedule 'nope'", True),
    (1, ("sessions", "unreadable", "ann", "nope"), "no session 'nope'", True),
    (1, ("sessions", "repair", "ann", "order-7", "ev-nope", "--reason", "x", "--drop"),
     "no event 'ev-nope'", True),
    (1, ("schedules", "list", "--app", "zzz"), "'zzz'", False),
    (1, ("versions", "list", "--app", "zzz"), "'zzz'", False),
    (1, ("sessions", "unreadable", "ann", "order-7", "--app", "zzz"), "'zzz'", False),
    # refused: the record's state forbids it
    (1, ("runs", "retry", CANCELLED), "not PARKED", True),
    (1, ("runs", "abandon", CANCELLED, "--reason", "x"), CANCELLED, True),
    (1, ("schedules", "trigger", "nightly"), "paused", True),
    # bad input, caught by the CLI
    (2, ("runs", "list", "--status", "sideways"), "unknown --status 'sideways'", True),
    (2, ("runs", "list", "--limit", "0"), "--limit", True),
    (2, ("runs", "resolve", RUN, "--result", "{nope"), "line 1 column 2", True),
    (2, ("runs", "resolve", RUN, "--call", "no-equals"), "CALL_ID=JSON", True),
    (2, ("runs", "resolve", RUN), "exactly one of --result and --call", True),
    (2, ("jobs", "list", "--state", "sideways"), "unknown --state 'sideways'", True),
    (2, ("jobs", "complete", "report:Q3", "--state", "EXPIRED"), "unknown --state", True),
    (2, ("jobs", "complete", "report:Q3", "--result", "{x"), "--result is not JSON", True),
    (2, ("sagas", "list", "--status", "sideways"), "unknown --status 'sideways'", True),
    (2, ("interrupts", "list", "--status", "sideways"), "unknown --status 'sideways'", True),
    (2, ("interrupts", "list", "--kind", "sideways"), "unknown --kind 'sideways'", True),
    (2, ("interrupts", "answer", "c1", "--approve", "--deny"), "not both", True),
    (2, ("interrupts", "answer", "c1", "--payload", "{x"), "--payload is not JSON", True),
    (2, ("interrupts", "answer", "c1"), "give --approve, --deny or --payload", True),
    (2, ("sessions", "repair", "ann", "order-7", "ev", "--reason", "x"), "exactly one", True),
    (2, ("sessions", "unreadable", "stock_assistant", "ann", "order-7", "--app", "x"),
     "give the app once", True),
    (2, ("runs", "nope"), "No such command", True),
    # bad input, caught by the library (on the database) or the worker (over HTTP)
    (2, ("runs", "abandon", RUN, "--reason", " "), "a reason is required", True),
    (2, ("versions", "drain", "blue"), "'blue' is not a PEP 440 version", True),
    (2, ("versions", "undrain", "blue"), "'blue' is not a PEP 440 version", True),
    (2, ("versions", "move", "blue", "--to", "2.0"), "'blue' is not a PEP 440 version", True),
    (2, ("versions", "move", "1.0", "--to", "0.5"), "only move to a newer version", True),
    (2, ("versions", "abandon", "blue", "--reason", "x"), "not a PEP 440 version", True),
]  # fmt: skip


def test_exit_codes_are_the_same_through_either_transport(
    store_url: str, worker: ServeProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = asyncio.run(prepare(store_url))
    db = store_url
    cancelled = asyncio.run(_parked_run(store_url, "order-8"))
    assert cli("runs", "cancel", cancelled, "--db", db)[0] == 0
    assert cli("schedules", "pause", "nightly", "--db", db)[0] == 0
    before = _database_state(db)
    for code, args, words, same in EXIT_CASES:
        filled = tuple(a.replace(RUN, run_id).replace(CANCELLED, cancelled) for a in args)
        expected = words.replace(CANCELLED, cancelled)
        (code_db, out_db), (code_url, out_url) = _both(db, worker, *filled)
        assert (code_db, code_url) == (code, code), (filled, out_db, out_url)
        for out in (out_db, out_url):
            assert expected in out, (filled, out)
        if same:
            assert out_db == out_url, (filled, out_db, out_url)
    # Nothing refused or rejected changed anything.
    assert _database_state(db) == before

    # serve, recover and db work on a database only: the same codes there, the
    # library's rejections (a bad cron in the app's module, a bad version, a
    # bad URL) naming their place.
    module = f"bad_cron_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text(_MODULE.replace('cron="0 2 * * *"', 'cron="61 2 * * *"'))
    monkeypatch.syspath_prepend(str(tmp_path))
    demo = "durable_adk.demo.service_app:app"
    unreachable = "postgresql://nobody@127.0.0.1:1/none"
    for code, args, words in (
        (2, ("serve", f"{module}:app", "--db", db, "--port", "0"), "schedule 'nightly'"),
        (2, ("recover", f"{module}:app", "--db", db), f"module '{module}'"),
        (2, ("serve", demo, "--db", db, "--port", "0", "--app-version", "blue"), "'blue'"),
        (2, ("recover", demo, "--db", db, "--app-version", "blue"), "'blue'"),
        (2, ("serve", demo, "--db", "nosuch://x", "--port", "0"), "unsupported store URL"),
        (2, ("recover", demo, "--db", "nosuch://x"), "unsupported store URL"),
        (2, ("db", "upgrade", "--db", "nosuch://x"), "unsupported store URL"),
        (2, ("runs", "list", "--db", "nosuch://x"), "unsupported store URL"),
        (1, ("db", "version", "--db", unreachable), "127.0.0.1"),
        (1, ("runs", "list", "--db", unreachable), "127.0.0.1"),
        (1, ("runs", "list", "--url", "http://127.0.0.1:1", "--token", TOKEN), "cannot reach"),
        (1, ("runs", "list", "--url", worker.base_url, "--token", "wrong-token"), "--token"),
        (2, ("runs", "list", "--url", worker.base_url), "--url needs --token"),
    ):
        said_code, said = cli(*args)
        assert said_code == code and words in said, (args, said)
    assert "61 is outside 0-59" in cli("serve", f"{module}:app", "--db", db)[1]
    assert _database_state(db) == before


async def _parked_run(url: str, session_id: str) -> str:
    async with open_store(url) as store:
        ledger = RunLedger(store)
        run = await ledger.submit(
            app_name="stock_assistant",
            user_id="ann",
            session_id=session_id,
            request={"role": "user", "parts": [{"text": "lamps"}]},
            owner="dead-worker",
        )
        claimed = await ledger.claim_queued(run.run_id, "dead-worker")
        assert claimed is not None
        await ledger.park(claimed.lease, error="outcome unknown", classification="X")
        return run.run_id


def _database_state(db: str) -> list[Any]:
    """What the refused commands could have changed: runs, jobs, schedules, versions, actions."""
    reads = (
        ("runs", "list"),
        ("runs", "actions"),
        ("jobs", "list"),
        ("schedules", "list"),
        ("schedules", "ticks", "nightly"),
        ("versions", "list"),
    )
    state = []
    for args in reads:
        code, out = cli(*args, "--json", "--db", db)
        assert code == 0, out
        items = json.loads(out)["items"]
        for item in items:
            item.pop("live_workers", None), item.pop("own_workers", None)
        state.append(items)
    return state


WALKED = {
    ("runs", "list"), ("runs", "show"), ("runs", "actions"), ("runs", "retry"),
    ("dead-letters", "list"), ("dead-letters", "pushes"), ("jobs", "list"),
    ("jobs", "complete"), ("sagas", "list"), ("interrupts", "list"),
    ("sessions", "unreadable"), ("schedules", "list"), ("schedules", "ticks"),
    ("schedules", "pause"), ("schedules", "resume"), ("schedules", "trigger"),
    ("versions", "list"), ("versions", "drain"), ("versions", "undrain"), ("purge",),
    ("keys", "status"), ("keys", "rotate"), ("users", "forget"),
}  # fmt: skip
"""The commands the walk above runs through both transports."""

ELSEWHERE = {case[1][:2] for case in EXIT_CASES}
"""Commands the exit-code table above runs through both transports."""


def _commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for name, command in getattr(group, "commands", {}).items():
        if getattr(command, "commands", None):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


def test_every_command_that_takes_url_is_walked_through_both_transports() -> None:
    """A command group added later cannot skip the walk (or the exit-code table)."""
    import typer.main

    tree = typer.main.get_command(app)
    with_url = {
        path
        for path, command in _commands(tree)
        if any("--url" in getattr(p, "opts", ()) for p in command.params)
    }
    assert with_url, "no command takes --url: the walk is not reading the CLI"
    missing = with_url - WALKED - ELSEWHERE
    assert not missing, f"commands taking --url that no transport test walks: {sorted(missing)}"
    gone = WALKED - with_url
    assert not gone, f"listed commands that take no --url (renamed?): {sorted(gone)}"
