"""The seam of ``durable_adk.a2a.adk_server`` in process: its guard, its refusals, its fallbacks.

ADK's own ``get_fast_api_app`` (the function ``adk api_server`` calls) is
built in the test's process; its lifespan is entered as uvicorn enters it
and its routes are called through httpx's ASGI transport. (The kill -9 test
through a real ``adk api_server --a2a`` process is test_a2a_adk_api_server.py.)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from a2a.server.tasks import InMemoryTaskStore
from a2a_support import rows
from google.adk.a2a import _compat
from google.adk.a2a.executor.a2a_agent_executor import A2aAgentExecutor
from google.adk.cli import fast_api
from google.adk.cli.fast_api import get_fast_api_app
from google.adk.cli.utils.service_factory import _create_task_store_from_options
from starlette.routing import Route, Router
from test_a2a_adk_api_server import card

from durable_adk import errors, register_session_uris
from durable_adk.a2a import adk_server
from durable_adk.a2a.adk_server import RegistryTaskStore, ServedAgent
from durable_adk.a2a.registry import register_task_store_uris

AGENT = """
from google.adk.agents import LlmAgent
from durable_adk.testing import Say, ScriptedModel

root_agent = LlmAgent(name="greeter", model=ScriptedModel([Say("hello")]))
"""

GET_UNKNOWN = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "no-such"}}
V1 = {"A2A-Version": "1.0"}


def folder(tmp_path: Path, name: str) -> Path:
    """An agents folder with one app, ``name`` (a module name of its own: ADK's loader caches)."""
    agents = tmp_path / "agents"
    (agents / name).mkdir(parents=True)
    (agents / name / "__init__.py").write_text("from . import agent\n")
    (agents / name / "agent.py").write_text(AGENT)
    (agents / name / "agent.json").write_text(json.dumps(card(8000)))
    return agents


@pytest.fixture
def seam_restored() -> Iterator[None]:
    """ADK's own functions back after the test, as in a process no services.py asked."""
    yield None
    adk_server.uninstall()


@pytest.mark.parametrize("sessions", ["durable", "memory"])
async def test_a_task_store_not_on_the_sessions_database_is_refused_when_the_server_starts(
    sessions: str, backend: str, store_url: str, tmp_path: Path, seam_restored: None
) -> None:
    name = f"seam_other_{sessions}_{backend}"
    agents = folder(tmp_path, name)
    assert register_task_store_uris() is True
    registration = register_session_uris()
    other = tmp_path / "other.db"
    task_store_uri = (
        f"durable+sqlite:///{other}" if sessions == "durable" else f"durable+{store_url}"
    )
    app = get_fast_api_app(
        agents_dir=str(agents),
        session_service_uri=f"durable+{store_url}" if sessions == "durable" else "memory://",
        task_store_uri=task_store_uri,
        a2a=True,
        web=False,
        lifespan=registration.lifespan,
    )
    with pytest.raises(errors.InvalidArgument, match="same database"):
        async with app.router.lifespan_context(app):
            pass
    assert not other.exists()  # refused before the other database was opened


async def test_sessions_not_durable_get_adks_own_a2a_in_memory(
    tmp_path: Path, seam_restored: None
) -> None:
    agents = folder(tmp_path, "seam_memory")
    assert register_task_store_uris() is True
    app = get_fast_api_app(
        agents_dir=str(agents), session_service_uri="memory://", a2a=True, web=False
    )
    async with app.router.lifespan_context(app):
        [served] = app.state.durable_adk_a2a
        assert served.server is None  # ADK's routes, in memory
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            got = await http.get("/a2a/seam_memory/.well-known/agent-card.json")
            assert got.status_code == 200 and "pushNotifications" not in got.json()["capabilities"]
            unknown = await http.post("/a2a/seam_memory", json=GET_UNKNOWN, headers=V1)
            assert unknown.json()["error"]["code"] == -32001


def _other_attach(app: object, *, card: object, executor: object, store: object) -> None:
    """An ADK whose attach function takes other parameters."""


@pytest.mark.parametrize(
    "change",
    ["attach gone", "attach takes other parameters", "factory gone", "resolve gone"],
)
def test_the_seam_stands_down_with_a_warning_when_adk_differs(
    change: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    seam_restored: None,
) -> None:
    adk_server.uninstall()
    if change == "attach gone":
        monkeypatch.delattr(_compat, "attach_a2a_routes_to_app")
        named = "attach_a2a_routes_to_app is gone"
    elif change == "attach takes other parameters":
        monkeypatch.setattr(_compat, "attach_a2a_routes_to_app", _other_attach)
        named = "attach_a2a_routes_to_app takes no agent_card, agent_executor, task_store"
    elif change == "factory gone":
        monkeypatch.delattr(fast_api, "_create_task_store_from_options")
        named = "fast_api._create_task_store_from_options is gone"
    else:
        monkeypatch.delattr(A2aAgentExecutor, "_resolve_runner")
        named = "A2aAgentExecutor._resolve_runner is gone"
    before = (
        getattr(fast_api, "_create_task_store_from_options", None),
        getattr(_compat, "attach_a2a_routes_to_app", None),
    )
    with caplog.at_level(logging.WARNING, logger="durable_adk.a2a"):
        assert register_task_store_uris() is False
    [warning] = [r for r in caplog.records if "durable A2A under ADK's server is off" in r.message]
    assert named in warning.getMessage()
    after = (
        getattr(fast_api, "_create_task_store_from_options", None),
        getattr(_compat, "attach_a2a_routes_to_app", None),
    )
    assert after == before  # nothing replaced
    # The durable URI is registered all the same (served as before the seam).
    made = _create_task_store_from_options(task_store_uri="durable+sqlite:///never-opened.db")
    assert isinstance(made, RegistryTaskStore)


async def test_a_durable_store_adk_uses_without_the_seam_says_so(
    backend: str,
    store_url: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    seam_restored: None,
) -> None:
    # An ADK that stopped calling the attach function (simulated: the seam is
    # not installed, the URI is): the store works as before and says why.
    register_task_store_uris()
    adk_server.uninstall()
    name = f"seam_bypassed_{backend}"
    agents = folder(tmp_path, name)
    registration = register_session_uris()
    app = get_fast_api_app(
        agents_dir=str(agents),
        session_service_uri=f"durable+{store_url}",
        task_store_uri=f"durable+{store_url}",
        a2a=True,
        web=False,
        lifespan=registration.lifespan,
    )
    assert getattr(app.state, "durable_adk_a2a", None) is None
    with caplog.at_level(logging.WARNING, logger="durable_adk.a2a"):
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
                for _ in range(2):
                    unknown = await http.post(f"/a2a/{name}", json=GET_UNKNOWN, headers=V1)
                    assert unknown.json()["error"]["code"] == -32001
    bypassed = [r for r in caplog.records if "seam was not reached" in r.getMessage()]
    assert len(bypassed) == 1  # once, at the first use


def test_stores_of_others_go_to_adks_own_function(seam_restored: None) -> None:
    assert register_task_store_uris() is True
    router = Router()
    _compat.attach_a2a_routes_to_app(
        router,
        agent_card=_compat.parse_agent_card(card(8000)),
        agent_executor=A2aAgentExecutor(runner=lambda: None),
        task_store=InMemoryTaskStore(),
        push_config_store=None,
        prefix="/a2a/theirs",
    )
    endpoints = [r.endpoint for r in router.routes if isinstance(r, Route)]
    assert endpoints and not any(isinstance(e, ServedAgent) for e in endpoints)


@pytest.mark.parametrize("uri", ["none", "durable"])
async def test_one_broken_agent_does_not_stop_the_others(
    uri: str, backend: str, store_url: str, tmp_path: Path, seam_restored: None
) -> None:
    # With no task store URI (adk api_server) and with the sessions' own
    # durable URI (get_fast_api_app(task_store_uri=...)), the good agent is
    # served durably.
    good = f"seam_good_{uri}_{backend}"
    broken = f"seam_broken_{uri}_{backend}"
    agents = folder(tmp_path, good)
    (agents / broken).mkdir()
    (agents / broken / "__init__.py").write_text("from . import agent\n")
    (agents / broken / "agent.py").write_text("raise RuntimeError('this agent is broken')\n")
    (agents / broken / "agent.json").write_text(json.dumps(card(8000)))
    assert register_task_store_uris() is True
    registration = register_session_uris()
    app = get_fast_api_app(
        agents_dir=str(agents),
        session_service_uri=f"durable+{store_url}",
        task_store_uri=None if uri == "none" else f"durable+{store_url}",
        a2a=True,
        web=False,
        lifespan=registration.lifespan,
    )
    async with app.router.lifespan_context(app):
        built = {s.prefix: s.server is not None for s in app.state.durable_adk_a2a}
        assert built == {f"/a2a/{good}": True, f"/a2a/{broken}": False}
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            served = await http.get(f"/a2a/{good}/.well-known/agent-card.json")
            assert served.json()["capabilities"]["pushNotifications"] is True
            unknown = await http.post(f"/a2a/{good}", json=GET_UNKNOWN, headers=V1)
            assert unknown.json()["error"]["code"] == -32001
            failed = await http.post(f"/a2a/{broken}", json=GET_UNKNOWN, headers=V1)
            assert failed.status_code == 500


async def test_push_hosts_from_the_environment_refuse_other_hosts(
    backend: str,
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    seam_restored: None,
) -> None:
    name = f"seam_hosts_{backend}"
    agents = folder(tmp_path, name)
    monkeypatch.setenv("DURABLE_ADK_A2A_PUSH_HOSTS", "hooks.example.com")
    assert register_task_store_uris() is True
    registration = register_session_uris()
    app = get_fast_api_app(
        agents_dir=str(agents),
        session_service_uri=f"durable+{store_url}",
        a2a=True,
        web=False,
        lifespan=registration.lifespan,
    )
    send_with_push = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "SendMessage",
        "params": {
            "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
            "configuration": {
                "taskPushNotificationConfig": {"url": "http://127.0.0.1/push", "token": "t"}
            },
        },
    }
    async with app.router.lifespan_context(app):
        before = await rows(store_url)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            refused = await http.post(f"/a2a/{name}", json=send_with_push, headers=V1)
        error = refused.json()["error"]
        assert error["code"] == -32602 and "is not one" in error["message"], error
        assert await rows(store_url) == before  # no task, run, claim or config
