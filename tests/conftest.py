"""Fixtures shared by the whole suite: one store per test, on each backend.

``backend`` runs a test once on SQLite (a fresh file) and once on PostgreSQL (a
fresh database copied from a template that already has the schema). The
PostgreSQL server is a private cluster started for the test session; where the
binaries are missing the PostgreSQL half is skipped, unless
``DURABLE_ADK_REQUIRE_POSTGRES=1`` (as CI sets) makes that a failure.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
from collections.abc import AsyncIterator, Iterator

import pytest
from hypothesis import settings

# Every event the suite reads back from a store is rebuilt without validation
# and, with this set, validated as well and compared (durable_adk.adk.
# stored_events): the whole suite, child processes included, is a
# differential test of that fast path. Set before durable_adk is imported.
os.environ.setdefault("DURABLE_ADK_VERIFY_STORED_EVENTS", "1")

from durable_adk.store import Store, open_store
from durable_adk.testing.pg_cluster import TempPostgres
from postgres_required import postgres_or_skip

# The machines are shared and noisy: a property is judged by its examples,
# never by how long one took (hypothesis' default 200 ms deadline failed
# tests/unit/test_fold.py under a loaded run).
settings.register_profile("durable-adk", deadline=None)
settings.load_profile("durable-adk")

BACKENDS = ["sqlite", "postgresql"]
TEMPLATE = "dadk_template"
_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[TempPostgres]:
    postgres_or_skip()
    cluster = TempPostgres()
    cluster.start()
    cluster.create_database(TEMPLATE)

    async def prepare() -> None:
        async with open_store(cluster.url(TEMPLATE)):
            pass

    # A thread of its own: this fixture may be first requested from inside a
    # running event loop (an async fixture), where asyncio.run is refused.
    worker = threading.Thread(target=asyncio.run, args=(prepare(),))
    worker.start()
    worker.join()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path: object, request: pytest.FixtureRequest) -> Iterator[str]:
    """A URL to a fresh database with the current schema, on the test's backend."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path}/durable.db"
        return
    cluster: TempPostgres = request.getfixturevalue("pg_cluster")
    name = f"t{os.getpid()}_{next(_counter)}"
    url = cluster.create_database(name, template=TEMPLATE)
    try:
        yield url
    finally:
        cluster.drop_database(name)


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    async with open_store(store_url) as opened:
        yield opened
