"""``adk api_server`` and an app module outside the agents folder (issue 42, item 4).

ADK's loader puts the agents folder on ``sys.path``, not the working
directory. An app whose agent imports a module of the project (here
``shop_tools``, in the server's working directory) does not load unless that
folder is on ``PYTHONPATH`` (docs/service.md). The session service refuses to
create a session of such an app (400, naming the cause and the fix) and
writes nothing, so the retry after the fix is not answered ``Session
already exists``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
import pytest
from test_adk_server_runs import SERVICES_PY, AdkServer

from durable_adk import open_store
from durable_adk.adk.services.sessions import DurableSessionService

TOOLS = """
from google.adk.agents import LlmAgent

from durable_adk.testing import Say, ScriptedModel

root_agent = LlmAgent(name="shop", model=ScriptedModel([Say("hello from shop_tools")]))
"""


async def stored_session(store_url: str) -> object:
    async with open_store(store_url) as store:
        return await DurableSessionService(store).get_session(
            app_name="shop", user_id="ann", session_id="s1"
        )


def test_an_app_module_off_the_path_is_refused_before_its_session_is_made(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    agents = project / "agents"
    (agents / "shop").mkdir(parents=True)
    (project / "shop_tools.py").write_text(TOOLS)
    (agents / "shop" / "__init__.py").write_text("from . import agent\n")
    (agents / "shop" / "agent.py").write_text("from shop_tools import root_agent\n")
    (agents / "services.py").write_text(SERVICES_PY)
    monkeypatch.chdir(project)  # the servers' working directory holds shop_tools.py
    asyncio.run(stored_session(store_url))  # the schema first
    sessions_url = "/apps/shop/users/ann/sessions/s1"
    base = dict(os.environ)

    first = AdkServer(agents, store_url, base, tmp_path / "first.log")
    try:
        made = httpx.post(first.base + sessions_url, timeout=60)
        assert made.status_code == 400, made.text
        detail = made.json()["detail"]
        assert "shop_tools" in detail and "PYTHONPATH" in detail, detail
        assert "no session was created" in detail
    finally:
        first.stop()
    assert asyncio.run(stored_session(store_url)) is None  # nothing left behind

    path = os.pathsep.join(p for p in (str(project), base.get("PYTHONPATH")) if p)
    second = AdkServer(agents, store_url, {**base, "PYTHONPATH": path}, tmp_path / "second.log")
    try:
        made = httpx.post(second.base + sessions_url, timeout=60)
        assert made.status_code == 200, made.text  # not "Session already exists"
        ran = httpx.post(
            second.base + "/run",
            json={
                "app_name": "shop",
                "user_id": "ann",
                "session_id": "s1",
                "new_message": {"role": "user", "parts": [{"text": "hi"}]},
            },
            timeout=60,
        )
        assert ran.status_code == 200, ran.text
        assert "hello from shop_tools" in ran.text
    finally:
        second.stop()
