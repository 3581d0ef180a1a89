"""An app's artifact, memory and credential services, taken from one place by every entry point.

The app (services_app.py) names its services in ``durable_adk_services()``.
Each crash test kills a process for real in the middle of the run
(``os._exit(137)`` at ``services_app.in_ship``, before the tool that reads
the artifact, the memory and the credential answers) and a fresh process
recovers the run through one entry point: ``durable-adk recover``, a
``durable-adk serve`` worker, or ``adk api_server`` with DurableRunsPlugin.
Each run ends DONE with the tool's answer made in the recovering process
from the services: the artifact saved before the crash, a memory found, the
API key. Without them the recovered run fails ("Memory service is not
available").

Bad factories and ``--services`` specs are refused with a clear error (exit
code 2 for the commands), before any database is created.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.adk.artifacts.in_memory_artifact_service import InMemoryArtifactService
from google.adk.memory import InMemoryMemoryService
from svc_support import AUTH, TOKEN, wait_ready
from test_adk_server_runs import AdkServer
from typer.testing import CliRunner

from children import run_child, spawn
from durable_adk.adk.services.app_services import SERVICES_FACTORY, AppServices, load_services
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.cli import app as cli_app
from durable_adk.errors import InvalidArgument
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.testing import arm

HERE = Path(__file__).parent
APP, USER, SESSION = "services_app", "ann", "s1"
CRASH = "services_app.in_ship"
SERVICES_PY = """
from durable_adk import ServerSettings, register_session_uris

register_session_uris(settings=ServerSettings(lease=30.0, sweep_interval=0.3))
"""


@pytest.fixture(autouse=True)
def own_imports(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Folders the loaders put on sys.path, and the modules they import, go with the test.

    (An agents folder left on sys.path would give a later ADK server in this
    process its ``services.py``.)
    """
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name in ("services_app", "services", "good_services") or name.startswith("broken_"):
            del sys.modules[name]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder holding the app's module: the working directory, or ADK's agents folder."""
    agents = tmp_path / "agents"
    agents.mkdir()
    shutil.copy(HERE / "services_app.py", agents / "services_app.py")
    (agents / "services.py").write_text(SERVICES_PY)
    return agents


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DADK_ARTIFACTS": str(tmp_path / "artifacts"),
        "ADK_DISABLE_TELEMETRY": "1",
    }


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "durable_adk.cli", *args]


async def runs(db: str) -> list[Any]:
    async with open_store(db) as store:
        return await RunLedger(store).list_runs()


async def expire_all(db: str) -> None:
    """The dead process's leases run out now (the database clock moves, no sleep)."""
    async with open_store(db) as store:
        ledger = RunLedger(store)
        for run in await ledger.list_runs(status=RunStatus.RUNNING):
            await ledger.backdate(run.run_id, 120)


def wait_for_status(db: str, status: RunStatus, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        [run] = asyncio.run(runs(db))
        if run.status is status:
            return run
        assert time.monotonic() < deadline, f"the run stayed {run.status}: {run.last_error}"
        time.sleep(0.2)


def crash_in_serve(db: str, folder: Path, env: dict[str, str]) -> int:
    """A ``durable-adk serve`` worker takes the run and dies in ``ship_order``; its pid."""
    process = spawn(
        command("serve", "services_app:app", "--db", db, "--port", "0", "--token", TOKEN,
                "--worker-id", "doomed", "--sweep-interval", "60"),
        cwd=folder, env=arm(env, CRASH),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    served = wait_ready(process)
    try:
        started = httpx.post(
            f"{served.base_url}/v1/users/{USER}/sessions/{SESSION}/runs",
            json={"message": "ship a lamp"},
            headers=AUTH,
            timeout=30,
        )
        assert started.status_code == 202, started.text
    except httpx.HTTPError:
        pass  # the worker may die before its answer is sent: the ledger says what happened
    assert process.wait(60) == 137, "".join(served.lines)
    return process.pid


def crash_in_api_server(
    db: str, folder: Path, env: dict[str, str], log: Path, servers: list[AdkServer]
) -> int:
    """An ``adk api_server`` with the plugin runs the turn and dies in ``ship_order``."""
    server = AdkServer(folder, db, arm(env, CRASH), log)
    servers.append(server)
    made = httpx.post(f"{server.base}/apps/{APP}/users/{USER}/sessions/{SESSION}", timeout=30)
    assert made.status_code == 200, made.text

    def post() -> None:
        body = {
            "app_name": APP,
            "user_id": USER,
            "session_id": SESSION,
            "new_message": {"role": "user", "parts": [{"text": "ship a lamp"}]},
        }
        with contextlib.suppress(httpx.HTTPError):  # the server dies under the request
            httpx.post(f"{server.base}/run", json=body, timeout=60)

    poster = threading.Thread(target=post)
    poster.start()
    assert server.process.wait(60) == 137, server.output()
    poster.join(60)
    return server.process.pid


async def shipped(db: str) -> list[dict[str, Any]]:
    """The answers of ship_order stored in the session."""
    async with open_store(db) as store:
        session = await DurableSessionService(store).get_session(
            app_name=APP, user_id=USER, session_id=SESSION
        )
    assert session is not None
    answers = [
        dict(r.response or {})
        for e in session.events
        for r in e.get_function_responses()
        if r.name == "ship_order"
    ]
    finals = [p.text for e in session.events if e.content for p in e.content.parts or [] if p.text]
    assert finals[-1] == "Shipped the lamp.", finals
    return answers


@pytest.fixture
def servers() -> Iterator[list[AdkServer]]:
    started: list[AdkServer] = []
    yield started
    for server in started:
        server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["recover", "serve", "api_server"])
def test_a_run_killed_mid_tool_is_recovered_with_the_apps_services(
    entry: str,
    store_url: str,
    folder: Path,
    env: dict[str, str],
    tmp_path: Path,
    servers: list[AdkServer],
) -> None:
    if entry == "api_server":
        dead = crash_in_api_server(store_url, folder, env, tmp_path / "first.log", servers)
    else:
        dead = crash_in_serve(store_url, folder, env)
    [orphan] = asyncio.run(runs(store_url))
    assert orphan.status is RunStatus.RUNNING and orphan.app_name == APP
    asyncio.run(expire_all(store_url))

    if entry == "recover":
        done = run_child(
            command("recover", "services_app:app", "--db", store_url, "--json"),
            cwd=folder, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        report = json.loads(done.stdout)
        assert [r["status"] for r in report["runs"]] == ["DONE"], report
    elif entry == "serve":
        fresh = spawn(
            command("serve", "services_app:app", "--db", store_url, "--port", "0",
                    "--token", TOKEN, "--worker-id", "fresh", "--sweep-interval", "0.2"),
            cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        served = wait_ready(fresh)
        try:
            wait_for_status(store_url, RunStatus.DONE)
        finally:
            fresh.terminate()
            assert fresh.wait(30) == 0, "".join(served.lines)
    else:
        server = AdkServer(folder, store_url, env, tmp_path / "second.log")
        servers.append(server)
        # The first use of the store starts the server's recovery.
        httpx.get(f"{server.base}/apps/{APP}/users/{USER}/sessions/{SESSION}", timeout=30)
        wait_for_status(store_url, RunStatus.DONE)

    run = wait_for_status(store_url, RunStatus.DONE)
    assert run.run_id == orphan.run_id and run.attempts == 2
    [answer] = asyncio.run(shipped(store_url))  # made once, by the recovering process
    assert answer["pid"] != dead
    assert answer["order"] == "lamp"  # the artifact saved before the crash
    assert answer["memories"] >= 1  # search_memory answered from the memory service
    assert answer["api_key"] == "key-of-ann"  # and the credential service


# ------------------------------------------------------------------ bad input


def write_module(folder: Path, name: str, body: str) -> str:
    (folder / f"{name}.py").write_text(body)
    return name


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("def durable_adk_services():\n    return [1]\n", "returned list: expected AppServices"),
        ("def durable_adk_services():\n    return None\n", "returned NoneType"),
        (
            "def durable_adk_services():\n    return {'memory': None}\n",
            "unknown service(s) 'memory'",
        ),
        (
            "def durable_adk_services():\n    return {'memory_service': 'in memory'}\n",
            "memory_service must be an ADK BaseMemoryService",
        ),
        ("def durable_adk_services():\n    raise KeyError('API_KEY')\n", "raised KeyError"),
        ("async def durable_adk_services():\n    return {}\n", "is async"),
        ("durable_adk_services = 3\n", "is a int, not a function"),
    ],
)
def test_a_broken_factory_in_the_apps_module_is_refused(
    body: str, reason: str, tmp_path: Path
) -> None:
    name = write_module(tmp_path, f"broken_{abs(hash(body))}", body)
    with pytest.raises(InvalidArgument, match="durable_adk_services") as caught:
        load_services(modules=[name], search=tmp_path)
    assert reason in str(caught.value)


def test_services_from_a_spec_a_module_or_nowhere(tmp_path: Path) -> None:
    name = write_module(
        tmp_path,
        "good_services",
        "from google.adk.memory import InMemoryMemoryService\n"
        "def durable_adk_services():\n    return {'memory_service': InMemoryMemoryService()}\n"
        "def other():\n    return {}\n",
    )
    found = load_services(modules=[name], search=tmp_path)
    assert isinstance(found.memory_service, InMemoryMemoryService)
    assert list(found.runner_kwargs()) == ["memory_service"]
    assert load_services(f"{name}:other", modules=[name], search=tmp_path) == AppServices()
    assert load_services(modules=["json"]) == AppServices()  # a module without the factory
    given = AppServices(artifact_service=InMemoryArtifactService())
    assert AppServices.of(given, source="x") is given
    with pytest.raises(InvalidArgument, match="artifact_service must be an ADK"):
        AppServices(artifact_service=InMemoryMemoryService())  # type: ignore[arg-type]
    assert SERVICES_FACTORY == "durable_adk_services"


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("no_colon", "expected MODULE:FUNCTION"),
        ("durable_adk.nope:services", "cannot import 'durable_adk.nope'"),
        ("services_app:nope", "has no function 'nope'"),
        ("services_app:APP_NAME", "is a str, not a function"),
        ("services_app:app", "is a App, not a function"),
    ],
)
@pytest.mark.parametrize("entry", ["serve", "recover"])
def test_the_commands_refuse_bad_services_and_create_nothing(
    entry: str,
    spec: str,
    reason: str,
    folder: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(folder)
    monkeypatch.setenv("DADK_ARTIFACTS", str(tmp_path / "artifacts"))
    db = tmp_path / "x.db"
    if entry == "recover":
        asyncio.run(_make_schema(f"sqlite:///{db}"))
        before = db.read_bytes()
    result = CliRunner().invoke(
        cli_app,
        [entry, "services_app:app", "--db", f"sqlite:///{db}", "--services", spec],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 2, result.output
    assert reason in " ".join(result.output.split())
    if entry == "recover":
        assert db.read_bytes() == before  # nothing written
    else:
        assert not db.exists()  # refused before anything was opened


def test_a_factory_that_raises_stops_serve_with_exit_2(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(folder)
    monkeypatch.delenv("DADK_ARTIFACTS", raising=False)  # the factory reads it: KeyError
    db = tmp_path / "x.db"
    result = CliRunner().invoke(
        cli_app, ["serve", "services_app:app", "--db", f"sqlite:///{db}"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 2, result.output
    assert "services_app:durable_adk_services() raised KeyError" in " ".join(result.output.split())
    assert not db.exists()


async def _make_schema(db: str) -> None:
    async with open_store(db):
        pass
