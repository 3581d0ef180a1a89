"""Fixtures shared by the whole suite: one store per test, on each backend.

``backend`` runs a test once on SQLite (a fresh file) and once on PostgreSQL (a
fresh database copied from a template that already has the schema). The
PostgreSQL server is a private cluster started for the test session (one per
xdist worker); a thread of the session clones the next databases from the
template and drops the used ones while tests run (:class:`Clones`), so a
test waits for neither (a clone with fsync on takes 0.3-1 s). Where the
binaries are missing the PostgreSQL half is skipped, unless
``DURABLE_ADK_REQUIRE_POSTGRES=1`` (as CI sets) makes that a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
import queue
import threading
from collections.abc import AsyncIterator, Iterator

import pytest
from hypothesis import settings

# Every event the suite reads back from a store is rebuilt without validation
# and, with this set, validated as well and compared (durable_adk.adk.
# stored_events): the whole suite, child processes included, is a
# differential test of that fast path. Set before durable_adk is imported.
os.environ.setdefault("DURABLE_ADK_VERIFY_STORED_EVENTS", "1")

import children
from durable_adk.store import Store, open_store
from durable_adk.testing.fakes.process import FakeService
from durable_adk.testing.pg_cluster import TempPostgres
from postgres_required import postgres_or_skip

# The machines are shared and noisy: a property is judged by its examples,
# never by how long one took (hypothesis' default 200 ms deadline failed
# tests/unit/test_fold.py under a loaded run).
settings.register_profile("durable-adk", deadline=None)
settings.load_profile("durable-adk")

# The fake services' children (hundreds a run) are forked from the tests' fork
# server instead of exec'd: each start takes some 0.02 s instead of 0.2 s.
FakeService.launch = functools.partial(children.spawn_parented, parent_option="--parent-pid")

BACKENDS = ["sqlite", "postgresql"]
TEMPLATE = "dadk_template"
_counter = itertools.count()


class Clones:
    """Databases cloned from the template ahead of the tests that take them.

    One thread does every clone and every drop, in order: ``AHEAD`` clones
    are kept ready; taking one asks for the next; a test's database is
    handed back to be dropped. An error of the thread reaches the test that
    takes the database it was making.

    ``AHEAD`` is a bank, not only a lead of one test: while a slow test runs
    (a serve worker's lease, a kill), the thread fills it, and the quick
    PostgreSQL tests that follow take their database at once instead of
    waiting a clone each (the thread makes about 3 a second).
    """

    AHEAD = 8

    def __init__(self, cluster: TempPostgres) -> None:
        self.cluster = cluster
        self._work: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._ready: queue.Queue[tuple[str, BaseException | None]] = queue.Queue()
        self._thread = threading.Thread(target=self._main, name="pg-clones", daemon=True)
        self._thread.start()
        for _ in range(self.AHEAD):
            self._ask()

    def _ask(self) -> None:
        self._work.put(("create", f"t{os.getpid()}_{next(_counter)}"))

    def _main(self) -> None:
        while (job := self._work.get()) is not None:
            action, name = job
            if action == "drop":
                # A cluster a test stopped: the session's end removes it all.
                with contextlib.suppress(Exception):
                    self.cluster.drop_database(name)
                continue
            try:
                self.cluster.create_database(name, template=TEMPLATE)
                self._ready.put((name, None))
            except BaseException as exc:  # handed to the test that takes it
                self._ready.put((name, exc))

    def take(self) -> str:
        """A fresh database's name (waits for the thread when none is ready)."""
        name, error = self._ready.get(timeout=300)
        self._ask()
        if error is not None:
            raise error
        return name

    def give_back(self, name: str) -> None:
        self._work.put(("drop", name))

    def close(self) -> None:
        """Stops the thread (the cluster's end removes what is left)."""
        while True:
            try:
                self._work.get_nowait()
            except queue.Empty:
                break
        self._work.put(None)
        self._thread.join(timeout=60)


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


@pytest.fixture(scope="session")
def pg_clones(pg_cluster: TempPostgres) -> Iterator[Clones]:
    clones = Clones(pg_cluster)
    try:
        yield clones
    finally:
        clones.close()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path: object, request: pytest.FixtureRequest) -> Iterator[str]:
    """A URL to a fresh database with the current schema, on the test's backend."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path}/durable.db"
        return
    clones: Clones = request.getfixturevalue("pg_clones")
    name = clones.take()
    try:
        yield clones.cluster.url(name)
    finally:
        clones.give_back(name)


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    async with open_store(store_url) as opened:
        yield opened
