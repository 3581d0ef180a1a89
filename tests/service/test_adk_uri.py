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

from durable_adk import errors
from durable_adk.adk.service_uri import DurableUriSessionService, register, store_url
from durable_adk.adk.session_service import DurableSessionService
from durable_adk.store import open_store

AGENT = """
from google.adk.agents import LlmAgent
from durable_adk.testing import Say, ScriptedModel

root_agent = LlmAgent(name="shop", model=ScriptedModel([Say("hello from shop")] * 10))
"""
SERVICES_PY = "from durable_adk.adk.service_uri import register\n\nregister()\n"
SERVICES_YAML = """services:
  - scheme: durable+sqlite
    type: session
    class: durable_adk.adk.service_uri.DurableUriSessionService
  - scheme: durable+postgresql
    type: session
    class: durable_adk.adk.service_uri.DurableUriSessionService
"""


def test_uris_map_to_store_urls_and_register() -> None:
    assert store_url("durable+sqlite:///a.db") == "sqlite:///a.db"
    assert store_url("durable+postgresql://u@h:5/db") == "postgresql://u@h:5/db"
    with pytest.raises(errors.UnsupportedUrl):
        store_url("sqlite:///a.db")
    registry = ServiceRegistry()
    register(registry)
    service = registry.create_session_service("durable+sqlite:///x.db", agents_dir="/tmp")
    assert isinstance(service, DurableUriSessionService)
    assert registry.create_session_service("memory://") is None  # nothing else touched


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
    server = subprocess.Popen(
        [str(adk), "api_server", "--host", "127.0.0.1", "--port", str(port),
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
