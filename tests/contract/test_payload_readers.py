"""The deepest events the payload limits let through load in every reader of a log (issue 47).

On each backend: ADK's own ``DatabaseSessionService`` (JSON text on SQLite,
JSONB on PostgreSQL) stores and loads, on a fresh service, an event holding a
payload ``MAX_DEPTH_CEILING`` deep in every place an event holds one; so does
our ``DurableSessionService`` on a fresh store (no cache). The JSON-level
readers are measured in tests/unit/test_payload_limits.py.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from google.adk.sessions.database_session_service import DatabaseSessionService

from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.limits import MAX_DEPTH_CEILING, PayloadLimits
from durable_adk.store import open_store
from payload_places import PLACES, nested


@pytest.fixture
def adk_url(backend: str, tmp_path: Any, request: pytest.FixtureRequest) -> Any:
    """An empty database for ADK's DatabaseSessionService, on the test's backend."""
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path}/adk.db"
        return
    cluster = request.getfixturevalue("pg_cluster")
    name = f"adk{os.getpid()}_{id(request)}"
    url = cluster.create_database(name)
    try:
        yield url.replace("postgresql://", "postgresql+asyncpg://", 1)
    finally:
        cluster.drop_database(name)


async def test_adks_database_session_service_loads_the_deepest_accepted_events(
    adk_url: str,
) -> None:
    payload = nested(MAX_DEPTH_CEILING)
    PayloadLimits(max_depth=MAX_DEPTH_CEILING).check(payload, "the payload")
    writer = DatabaseSessionService(adk_url)
    session = await writer.create_session(app_name="a", user_id="u", session_id="s")
    for make in PLACES.values():
        await writer.append_event(session, make(payload))
    await writer.close()
    reader = DatabaseSessionService(adk_url)
    loaded = await reader.get_session(app_name="a", user_id="u", session_id="s")
    await reader.close()
    assert loaded is not None and len(loaded.events) == len(PLACES)


async def test_a_fresh_worker_loads_the_deepest_accepted_events(store_url: str) -> None:
    payload = nested(MAX_DEPTH_CEILING)
    limits = PayloadLimits(max_depth=MAX_DEPTH_CEILING)
    async with open_store(store_url, limits=limits) as store:
        sessions = DurableSessionService(store)
        session = await sessions.create_session(app_name="a", user_id="u", session_id="s")
        for make in PLACES.values():
            await sessions.append_event(session, make(payload))
    async with open_store(store_url) as store:
        loaded = await DurableSessionService(store, cache_sessions=0).get_session(
            app_name="a", user_id="u", session_id="s"
        )
    assert loaded is not None and len(loaded.events) == len(PLACES)
    assert loaded.state["k"] == payload
