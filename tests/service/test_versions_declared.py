"""An app's version declared in its module reaches every entry point that loads the module.

``durable_adk_version`` (and ``durable_adk_compatible_versions``) in the app's
module are read by the one loader (:func:`load_services`), so ``durable-adk
recover`` and the api_server plugin claim runs as ``durable-adk serve
--app-version`` does; a command line's ``--app-version`` replaces the
module's declaration. Bad declarations are refused before anything is
written. SQLite and PostgreSQL; the recover pass is the real CLI in its own
process, the run a real orphan (a 1.0 worker's claim whose lease ran out).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from children import run_child
from durable_adk.adk.services.app_services import AppServices, load_services
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.cli import app as cli_app
from durable_adk.errors import InvalidArgument, InvalidVersion
from durable_adk.service.settings import ServiceSettings
from durable_adk.service.worker import declared_with
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.versions import Serving

APP = "greeter"
AGENT = """
from google.adk.agents import LlmAgent
from durable_adk.testing import Say, ScriptedModel

app = LlmAgent(name="greeter", model=ScriptedModel([Say("Hello.")] * 5))
"""


COMPATIBLE = "durable_adk_version = '1.1'\ndurable_adk_compatible_versions = ['1.0']\n"


@pytest.fixture(autouse=True)
def own_imports(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The modules the loader imports from the test's folder go with the test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("greeter_"):
            del sys.modules[name]


def module(folder: Path, name: str, declaration: str) -> str:
    (folder / f"{name}.py").write_text(AGENT + declaration)
    return name


def test_the_loader_reads_the_modules_version_and_hands_it_to_the_runner(tmp_path: Path) -> None:
    name = module(
        tmp_path,
        "greeter_ok",
        "durable_adk_version = '1.1'\ndurable_adk_compatible_versions = ['1.0']\n",
    )
    found = load_services(modules=[name], search=tmp_path)
    assert (found.version, found.compatible_versions) == ("1.1", ("1.0",))
    assert found.runner_kwargs() == {"version": "1.1", "compatible_versions": ("1.0",)}
    assert load_services(modules=["json"]).runner_kwargs() == {}  # unversioned: nothing
    # serve: --app-version replaces the module's whole declaration; without it, the module's.
    settings = ServiceSettings(db="sqlite:///x.db", services=found)
    assert declared_with(settings) == {"version": "1.1", "compatible_versions": ("1.0",)}
    pinned = ServiceSettings(db="sqlite:///x.db", services=found, app_version="2.0")
    assert declared_with(pinned) == {"version": "2.0", "compatible_versions": ()}


@pytest.mark.parametrize(
    ("declaration", "reason"),
    [
        ("durable_adk_version = 'green'\n", "durable_adk_version"),
        ("durable_adk_version = 11\n", "durable_adk_version"),
        ("durable_adk_compatible_versions = ['1.0']\n", "needs durable_adk_version beside it"),
        (
            "durable_adk_version = '1.1'\ndurable_adk_compatible_versions = '1.0'\n",
            "must be a list of version strings",
        ),
        (
            "durable_adk_version = '1.1'\ndurable_adk_compatible_versions = ['1.2']\n",
            "is not older than",
        ),
    ],
)
def test_a_bad_declaration_is_refused(declaration: str, reason: str, tmp_path: Path) -> None:
    name = module(tmp_path, f"greeter_bad{abs(hash(declaration))}", declaration)
    with pytest.raises(InvalidVersion) as caught:
        load_services(modules=[name], search=tmp_path)
    assert reason in str(caught.value)
    with pytest.raises(InvalidArgument):
        AppServices(version="1.0", compatible_versions=("2.0",))


async def orphan_of_1_0(db: str, app_name: str = APP) -> str:
    """A run of ``app_name`` started by a 1.0 worker that died: RUNNING, its lease run out."""
    async with open_store(db) as store:
        sessions = DurableSessionService(store)
        await sessions.create_session(app_name=app_name, user_id="u", session_id="s")
        ledger = RunLedger(store, serving=Serving.declare("1.0", fingerprint="fp-1.0"))
        run = await ledger.submit(
            app_name=app_name, user_id="u", session_id="s",
            request={"role": "user", "parts": [{"text": "hi"}]}, owner="w-1.0",
        )  # fmt: skip
        claimed = await ledger.claim_queued(run.run_id, "w-1.0")
        assert claimed is not None
        await ledger.backdate(run.run_id, 3600)
        return run.run_id


async def status_of(db: str, run_id: str) -> tuple[RunStatus, str | None]:
    async with open_store(db) as store:
        run = await RunLedger(store).get(run_id)
    assert run is not None
    return run.status, run.app_version


@pytest.mark.parametrize(
    ("declaration", "flags", "recovered"),
    [
        (COMPATIBLE, [], True),
        ("durable_adk_version = '1.0'\n", [], True),
        ("", [], False),  # an unversioned pass claims no versioned run
        (COMPATIBLE, ["--app-version", "2.0"], False),  # the command line's 2.0 replaces it
        ("", ["--app-version", "1.1", "--compatible-version", "1.0"], True),
    ],
    ids=["module-compatible", "module-same", "unversioned", "flag-replaces", "flag-only"],
)
def test_durable_adk_recover_claims_as_the_declared_version(
    declaration: str, flags: list[str], recovered: bool, store_url: str, tmp_path: Path
) -> None:
    name = module(tmp_path, f"greeter_{abs(hash((declaration, tuple(flags))))}", declaration)
    run_id = asyncio.run(orphan_of_1_0(store_url))
    done = run_child(
        [sys.executable, "-m", "durable_adk.cli", "recover", f"{name}:app",
         "--db", store_url, "--json", *flags],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 3), done.stdout + done.stderr
    report = json.loads(done.stdout)
    status, version = asyncio.run(status_of(store_url, run_id))
    if recovered:
        assert [r["status"] for r in report["runs"]] == ["DONE"], report
        assert status is RunStatus.DONE and version == "1.0"  # it keeps its version
    else:
        assert report["runs"] == [] and status is RunStatus.RUNNING


def test_recover_refuses_a_bad_version_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = module(tmp_path, "greeter_flagbad", "")
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "x.db"
    run_id = asyncio.run(orphan_of_1_0(f"sqlite:///{db}"))
    result = CliRunner().invoke(
        cli_app,
        ["recover", f"{name}:app", "--db", f"sqlite:///{db}", "--app-version", "green"],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 2, result.output
    assert "green" in result.output
    assert asyncio.run(status_of(f"sqlite:///{db}", run_id)) == (RunStatus.RUNNING, "1.0")


async def test_the_api_server_plugin_serves_the_version_the_agents_module_declares(
    store_url: str, tmp_path: Path
) -> None:
    """adk api_server + DurableRunsPlugin: a 1.0 orphan recovered by code declaring 1.1."""
    from test_adk_server_workflow import server

    agents = tmp_path / "agents"
    (agents / "vgreeter").mkdir(parents=True)
    (agents / "vgreeter" / "__init__.py").write_text("from . import agent\n")
    (agents / "vgreeter" / "agent.py").write_text(
        AGENT.replace("app = ", "root_agent = ").replace('name="greeter"', 'name="vgreeter"')
        + COMPATIBLE
    )
    run_id = await orphan_of_1_0(store_url, "vgreeter")
    app, service = server(agents, store_url)
    try:
        async with app.router.lifespan_context(app):

            async def ended() -> tuple[RunStatus, str | None]:
                while True:
                    run = await RunLedger(service.store).get(run_id)
                    assert run is not None
                    if run.status is not RunStatus.RUNNING:
                        return run.status, run.app_version
                    await asyncio.sleep(0.1)

            # Without the module's declaration the plugin's unversioned sweeper
            # would never claim it (the run would stay RUNNING: a timeout here).
            assert await asyncio.wait_for(ended(), 60) == (RunStatus.DONE, "1.0")
    finally:
        for name in [n for n in sys.modules if n == "vgreeter" or n.startswith("vgreeter.")]:
            del sys.modules[name]
