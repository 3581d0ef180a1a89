"""``adk api_server --session_service_uri durable+...`` keeps its sessions in our store.

ADK's own server is started in a child process, with the schemes registered
from the agents folder (``services.py`` on one backend, ``services.yaml`` on
the other); a session is created and a turn run through ADK's HTTP API, then
read back from the store with DurableSessionService.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from google.adk.cli.service_registry import ServiceRegistry
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.database_session_service import DatabaseSessionService

from children import spawn
from durable_adk import errors
from durable_adk.adk.servers.uri import DurableUriSessionService, register, store_url
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.store import open_store

AGENT = """
from google.adk.agents import LlmAgent
from durable_adk.testing import Say, ScriptedModel

root_agent = LlmAgent(name="shop", model=ScriptedModel([Say("hello from shop")] * 10))
"""
SERVICES_PY = "from durable_adk.adk.servers.uri import register\n\nregister()\n"
SERVICES_YAML = """services:
  - scheme: durable+sqlite
    type: session
    class: durable_adk.adk.servers.uri.DurableUriSessionService
  - scheme: durable+postgresql
    type: session
    class: durable_adk.adk.servers.uri.DurableUriSessionService
"""


def test_uris_map_to_store_urls_and_register() -> None:
    assert store_url("durable+sqlite:///a.db") == "sqlite:///a.db"
    assert store_url("durable+postgresql://u@h:5/db") == "postgresql://u@h:5/db"
    assert store_url("durable+sqlite:///a.db?mode=ro") == "sqlite:///a.db?mode=ro"
    with pytest.raises(errors.UnsupportedUrl):
        store_url("sqlite:///a.db")
    registry = ServiceRegistry()
    register(registry)
    service = registry.create_session_service("durable+sqlite:///x.db", agents_dir="/tmp")
    assert isinstance(service, DurableUriSessionService)
    assert registry.create_session_service("memory://") is None  # nothing else touched


async def close(service: DurableUriSessionService) -> None:
    await service.durable_runs.aclose()
    await service.store.close()


async def test_a_sqlite_uri_with_query_parameters_is_taken_and_honoured(tmp_path: Path) -> None:
    """``durable+sqlite:///x.db?timeout=5`` is built, as ADK builds ``sqlite+aiosqlite:///x.db?timeout=5``."""
    registry = ServiceRegistry()
    register(registry)
    uri = f"durable+sqlite:///{tmp_path}/s.db?timeout=2.5&uri=true&cache=private"
    service = registry.create_session_service(uri, agents_dir=str(tmp_path))
    assert isinstance(service, DurableUriSessionService)
    try:
        await service.create_session(app_name="shop", user_id="ann", session_id="s1")
        assert await service.get_session(app_name="shop", user_id="ann", session_id="s1")
        opened = await service.store.opened()  # type: ignore[attr-defined]
        assert opened._busy_timeout_ms == 2500
    finally:
        await close(service)
    assert [n for n in sorted(os.listdir(tmp_path)) if n.endswith(".db")] == ["s.db"]


async def test_a_read_only_sqlite_uri_reads_and_refuses_every_write(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path}/s.db") as store:
        writer = DurableSessionService(store)
        session = await writer.create_session(
            app_name="shop", user_id="ann", session_id="s1", state={"plan": "gold"}
        )
        await writer.append_event(
            session, Event(author="user", invocation_id="i1", actions=EventActions())
        )
    before = (tmp_path / "s.db").read_bytes()
    reader = DurableUriSessionService(f"durable+sqlite:///{tmp_path}/s.db?mode=ro")
    try:
        loaded = await reader.get_session(app_name="shop", user_id="ann", session_id="s1")
        assert loaded is not None and loaded.state == {"plan": "gold"}
        assert [e.author for e in loaded.events] == ["user"]
        listed = await reader.list_sessions(app_name="shop")
        assert [s.id for s in listed.sessions] == ["s1"]
        with pytest.raises(errors.StoreError, match="readonly"):
            await reader.append_event(loaded, Event(author="user", invocation_id="i2"))
        with pytest.raises(errors.StoreError, match="readonly"):
            await reader.create_session(app_name="shop", user_id="ann", session_id="s2")
        with pytest.raises(errors.StoreError, match="readonly"):
            await reader.delete_session(app_name="shop", user_id="ann", session_id="s1")
    finally:
        await close(reader)
    assert (tmp_path / "s.db").read_bytes() == before
    async with open_store(f"sqlite:///{tmp_path}/s.db") as store:
        again = await DurableSessionService(store).get_session(
            app_name="shop", user_id="ann", session_id="s1"
        )
        assert again is not None and len(again.events) == 1


async def test_a_read_only_uri_names_an_existing_database(tmp_path: Path) -> None:
    reader = DurableUriSessionService(f"durable+sqlite:///{tmp_path}/none.db?mode=ro")
    try:
        with pytest.raises(errors.StoreUnavailable, match="mode=ro opens an existing database"):
            await reader.get_session(app_name="shop", user_id="ann", session_id="s1")
    finally:
        await close(reader)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("cache=shared", "cache=shared cannot apply"),
        ("mode=memory", "mode=memory cannot apply"),
        ("mode=wr", "mode takes ro, rw or rwc"),
        ("immutable=1", "'immutable' cannot apply"),
        ("check_same_thread=false", "'check_same_thread' cannot apply"),
        ("mdoe=ro", "unknown SQLite URL parameter 'mdoe'"),
        ("timeout=soon", "timeout takes a number of seconds"),
        ("mode=ro&mode=rw", "mode is given twice"),
    ],
)
def test_a_sqlite_uri_parameter_that_cannot_apply_is_refused_when_the_service_is_built(
    tmp_path: Path, query: str, words: str
) -> None:
    registry = ServiceRegistry()
    register(registry)
    with pytest.raises(errors.UnsupportedUrl, match=words):
        registry.create_session_service(
            f"durable+sqlite:///{tmp_path}/s.db?{query}", agents_dir=str(tmp_path)
        )
    assert list(tmp_path.iterdir()) == []  # nothing opened or created, under any name


async def test_the_same_sqlite_url_as_adk_database_session_service(tmp_path: Path) -> None:
    """ADK takes ``sqlite+aiosqlite:///x.db?timeout=5``; the same file and options open here."""
    adk = DatabaseSessionService(f"sqlite+aiosqlite:///{tmp_path}/adk%20x.db?timeout=5")
    try:
        await adk.create_session(app_name="shop", user_id="ann", session_id="s1")
    finally:
        await adk.close()
    async with open_store(f"sqlite:///{tmp_path}/ours%20x.db?timeout=5") as store:
        assert store._busy_timeout_ms == 5000  # type: ignore[attr-defined]
        await DurableSessionService(store).create_session(
            app_name="shop", user_id="ann", session_id="s1"
        )
    assert [n for n in sorted(os.listdir(tmp_path)) if n.endswith(".db")] == [
        "adk x.db",
        "ours x.db",
    ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def read_back(url: str) -> list[str]:
    async with open_store(url) as store:
        session = await DurableSessionService(store).get_session(
            app_name="shop", user_id="ann", session_id="s1"
        )
    assert session is not None
    assert session.state == {"plan": "gold"}
    return [e.author for e in session.events]


def test_adk_api_server_uses_the_durable_store(
    store_url: str, backend: str, tmp_path: Path
) -> None:
    agents = tmp_path / "agents"
    (agents / "shop").mkdir(parents=True)
    (agents / "shop" / "__init__.py").write_text("from . import agent\n")
    (agents / "shop" / "agent.py").write_text(AGENT)
    if backend == "sqlite":
        (agents / "services.yaml").write_text(SERVICES_YAML)
    else:
        (agents / "services.py").write_text(SERVICES_PY)
    port = free_port()
    adk = Path(sys.executable).with_name("adk")
    server = spawn(  # the console script, forked from the tests' zygote (tests/children.py)
        [sys.executable, str(adk), "api_server", "--host", "127.0.0.1", "--port", str(port),
         "--session_service_uri", f"durable+{store_url}", str(agents)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "ADK_DISABLE_TELEMETRY": "1"},
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{base}/list-apps", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None, server.communicate()[0]
            assert time.monotonic() < deadline, "adk api_server did not start"
            time.sleep(0.2)
        created = httpx.post(
            f"{base}/apps/shop/users/ann/sessions/s1", json={"plan": "gold"}, timeout=30
        )
        assert created.status_code == 200, created.text
        ran = httpx.post(
            f"{base}/run",
            json={
                "app_name": "shop",
                "user_id": "ann",
                "session_id": "s1",
                "new_message": {"role": "user", "parts": [{"text": "hi"}]},
            },
            timeout=30,
        )
        assert ran.status_code == 200, ran.text
        assert asyncio.run(read_back(store_url)) == ["user", "shop"]
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
