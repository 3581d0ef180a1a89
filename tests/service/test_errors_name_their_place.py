"""Errors that name their place (issue 42, item 3): a bad schedule names the
schedule, the module and the line that declared it; a malformed body names
the line, column and character where it breaks; a CLI refusal says what to
run instead. Each refusal changes nothing."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from svc_support import TOKEN, Service, settings_for, threaded_worker
from test_cli import prepare
from typer.testing import CliRunner

from children import run_child
from durable_adk import errors
from durable_adk.cli import app
from durable_adk.schedules import Schedule

runner = CliRunner()

_APP_MODULE = """\
from datetime import timedelta

from google.adk.agents import LlmAgent

from durable_adk.schedules import Schedule
from durable_adk.testing import Say, ScriptedModel

root_agent = LlmAgent(name="root", model=ScriptedModel([Say("done")]))

{declaration}
"""

_BAD_CRON = """\
durable_adk_schedules = [
    Schedule(name="heartbeat", message="ping", user_id="ops", every=timedelta(hours=1)),
    Schedule(name="nightly-report", message="report", user_id="ops", cron="61 2 * * *"),
]
"""

_BAD_ZONE_IN_FUNCTION = """\
def durable_adk_schedules():
    return [
        Schedule(
            name="hourly", message="ping", user_id="ops", every=timedelta(hours=1),
            timezone="Mars/Olympus",
        )
    ]
"""


def _serve(folder: Path, module: str, db: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "durable_adk.cli", "serve", f"{module}:root_agent",
        "--db", db, "--port", "0", "--token", TOKEN,
    ]  # fmt: skip
    return run_child(
        command,
        cwd=folder,
        env={**os.environ, "COLUMNS": "400"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("module", "declaration", "words"),
    [
        (
            "bad_cron_app",
            _BAD_CRON,
            [
                "module 'bad_cron_app'",
                "bad_cron_app.py, line 12)",  # the line of the bad schedule
                "schedule 'nightly-report' ('61 2 * * *')",
                "cron minute: 61 is outside 0-59",
            ],
        ),
        (
            "bad_zone_app",
            _BAD_ZONE_IN_FUNCTION,
            [
                "bad_zone_app:durable_adk_schedules()",
                "schedule 'hourly'",
                "unknown time zone 'Mars/Olympus'",
            ],
        ),
    ],
)
def test_serve_names_the_schedule_and_the_module_of_a_bad_declaration(
    tmp_path: Path, module: str, declaration: str, words: list[str]
) -> None:
    # The module is refused as it loads, before any database is opened: one
    # backend tells as much as two (and the SQLite file is never created).
    (tmp_path / f"{module}.py").write_text(_APP_MODULE.format(declaration=declaration))
    db = tmp_path / "never.db"
    done = _serve(tmp_path, module, f"sqlite:///{db}")
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    for word in words:
        assert word in said, said
    assert "Traceback" not in said
    assert not db.exists()  # no worker started, nothing opened


def test_a_bad_schedule_made_in_code_names_itself() -> None:
    with pytest.raises(errors.InvalidArgument, match=r"^schedule 'w' \('\* \* \* \* 9'\): cron"):
        Schedule(name="w", message="m", user_id="u", cron="* * * * 9")
    zone = r"^schedule 'z' .*unknown time zone 'Nowhere/Nada'"
    with pytest.raises(errors.InvalidArgument, match=zone):
        Schedule(name="z", message="m", user_id="u", cron="@daily", timezone="Nowhere/Nada")


@pytest.mark.parametrize(
    ("body", "where"),
    [
        (b'{"message": "unfinished', "line 1, column 13 (character 12)"),
        (b'{\n  "message": "hi",\n  "user": ,\n}', "line 3, column 11 (character 31)"),
        (b"[1, 2", "line 1, column 6 (character 5)"),
    ],
)
async def test_a_malformed_body_names_its_line_and_column(
    service: Service, body: bytes, where: str
) -> None:
    before = await service.stats()
    for url in ("/v1/users/u1/sessions/s1/runs", "/v1/runs/run-x/cancel"):
        broken = await service.client.post(
            url, content=body, headers={"content-type": "application/json"}
        )
        assert broken.status_code == 400, broken.text
        message = broken.json()["error"]["message"]
        assert message.startswith("the body is not JSON: ") and message.endswith(where), message
    assert await service.stats() == before


def _cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "400"})
    return result.exit_code, result.output


def test_cli_errors_say_what_to_run_instead(store_url: str, tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    code, out = _cli("runs", "list", "--db", f"sqlite:///{missing}")
    assert code == 2 and f"no database at {missing}" in out
    assert "pass --db URL" in out and "`durable-adk serve MODULE:APP --db URL`" in out
    assert not missing.exists()

    asyncio.run(prepare(store_url))  # app stock_assistant, a parked run, an open job
    for args, listed in (
        (("runs", "show", "run-nope"), "runs"),
        (("runs", "retry", "run-nope"), "runs"),
        (("jobs", "complete", "job-nope"), "jobs"),
        (("schedules", "pause", "nope", "--app", "stock_assistant"), "schedules"),
    ):
        code, out = _cli(*args, "--db", store_url)
        assert code == 1, out
        assert f"see them with `durable-adk {listed} list`" in out, out

    code, out = _cli("runs", "list", "--url", "http://127.0.0.1:9")
    assert code == 2 and "--url needs --token" in out and "`durable-adk serve`" in out
    code, out = _cli("runs", "list", "--url", "http://127.0.0.1:9", "--token", TOKEN)
    assert code == 1 and "cannot reach the worker" in out
    assert "start one with `durable-adk serve" in out and "--db URL" in out


def test_cli_errors_through_a_worker_say_what_to_run_instead(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/w.db"
    with threaded_worker(settings_for(url, sweep_interval=60)) as worker:
        code, out = _cli("runs", "list", "--url", worker.base_url, "--token", "wrong")
        assert code == 1 and "--token or DURABLE_ADK_TOKEN" in out, out
        remote = ["--url", worker.base_url, "--token", TOKEN]
        code, out = _cli("runs", "show", "run-nope", *remote)
        assert code == 1 and "see them with `durable-adk runs list`" in out, out
