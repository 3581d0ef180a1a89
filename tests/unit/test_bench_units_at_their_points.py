"""The bench bound "a runner whose only cost is its units" (bench/runner.py).

A DurableRunner run's store calls are recorded with the number of events
appended before each; ADK's in-memory Runner then makes the same units (fresh
ids) at the same points of its own run. The bound is only honest if every
replayed unit is written (a refused one costs less), at the point where the
DurableRunner wrote it.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from bench.common import (
    BareCommits,
    PlacedUnits,
    PreparedReplays,
    Replay,
    record_store_calls_at,
)
from bench.runner import (
    BareAtTheirPointsContender,
    DurableContender,
    UnitsAtTheirPoints,
    UnitsInterleavedContender,
)
from google.adk.agents import LlmAgent

from durable_adk.store import open_store


async def test_the_units_are_placed_where_the_run_wrote_them_and_replayed_there(
    tmp_path: Path,
) -> None:
    async with open_store(f"sqlite:///{tmp_path / 'bench.db'}") as store:
        ours = DurableContender("sqlite", store, "barrier")
        await ours.run_once()  # the first run also checks once for a sweeper
        placed = await UnitsInterleavedContender.record(ours)
        # The run's start before any event; the user's message and the model's
        # call before the tool runs; the tool's answer before the second model
        # call; the last events (the answer and the agent's end) with the
        # run's finish.
        assert [(query, at) for query, _params, at in placed] == [
            ("run_start", 0),
            ("append_events", 2),
            ("append_event", 3),
            ("append_events_finish", 5),
        ]
        bound = UnitsInterleavedContender(ours, placed)
        service = bound.service
        assert isinstance(service, UnitsAtTheirPoints)
        sent: list[tuple[str, int]] = []
        send_at = service._send_at

        async def noted(replay: Replay, units: PlacedUnits, appended: int) -> None:
            queries: list[str] = []
            inner = store.fetch

            async def fetch(query: str, params: object = None) -> object:
                queries.append(query)
                return await inner(query, params)  # type: ignore[arg-type]

            store.fetch = fetch  # type: ignore[method-assign]
            try:
                await send_at(replay, units, appended)
            finally:
                store.fetch = inner  # type: ignore[method-assign]
            sent.extend((query, appended) for query in queries)

        service._send_at = noted  # type: ignore[method-assign]
        for prepared in (0, 1, 2):  # fresh ids each time: never refused as a duplicate
            sent.clear()
            bound.prepare(prepared)  # made before the run (or, not made, during it)
            assert await bound.run_once() > 0
            assert sent == [(query, at) for query, _params, at in placed]


async def test_a_refused_replayed_append_fails_the_bench(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path / 'bench.db'}") as store:
        ours = DurableContender("sqlite", store, "barrier")
        await ours.run_once()
        placed = await record_store_calls_at(store, ours.run_once, ours.runner.sessions)
        assert [query for query, _params, _at in placed][:2] == ["run_start", "append_events"]
        replay = Replay(store)
        for query, params, _at in placed[:2]:
            await replay.send(query, params)
        query, params, _at = placed[1]  # the same events again: a duplicate, refused
        with pytest.raises(RuntimeError, match="refused"):
            await replay.send(query, params)


async def test_prepared_replays_send_ids_made_before_the_clock(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path / 'bench.db'}") as store:
        ours = DurableContender("sqlite", store, "barrier")
        await ours.run_once()
        calls = [(q, p) for q, p, _at in await record_store_calls_at(store, ours.run_once)]
        replays = PreparedReplays(store, calls)
        replays.prepare(2)
        made = [ids for _replay, ids in replays._ready]
        assert made[0] != made[1] and all(q for q, _p in made[0])
        before = _count_sessions(tmp_path / "bench.db")
        for _ in range(3):  # two prepared, the third made when it runs: none refused
            await replays()
        assert _count_sessions(tmp_path / "bench.db") == before + 3


def _count_sessions(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])


async def test_the_physical_bound_runs_the_tool_where_ours_does_when_asked(
    tmp_path: Path,
) -> None:
    """The bound of the pool's default runs ADK's sync tool on ADK's thread pool too, and
    makes its bare commits at the same points either way."""
    async with open_store(f"sqlite:///{tmp_path / 'bench.db'}") as store:
        ours = DurableContender("sqlite", store, "barrier")
        await ours.run_once()
        placed = await UnitsInterleavedContender.record(ours)
        bare = await BareCommits(f"sqlite:///{tmp_path / 'bare.db'}").open()
        try:
            on_loop = BareAtTheirPointsContender(ours, placed, bare)
            on_pool = BareAtTheirPointsContender(ours, placed, bare, pool=True)
            assert on_loop.run_config is None  # ADK's own default: the loop
            assert on_pool.run_config is not None
            assert on_pool.run_config.tool_thread_pool_config is not None
            assert "thread pool" in on_pool.name and on_pool.name != on_loop.name
            threads: list[str] = []
            for bound in (on_loop, on_pool):
                _note_the_tools_thread(bound, threads)
                before = bare.commits
                assert await bound.run_once() > 0
                assert bare.commits - before == 4  # one per unit of the recorded run
            assert threads[0] == threading.current_thread().name  # the loop's
            assert threads[1] != threading.current_thread().name  # one of the pool's
        finally:
            await bare.close()


def _note_the_tools_thread(bound: BareAtTheirPointsContender, threads: list[str]) -> None:
    """Wraps the bound's one sync tool (same name, signature and doc) to note its thread."""
    agent = bound.runner.agent
    assert isinstance(agent, LlmAgent)
    tool = agent.tools[0]
    assert callable(tool)

    @functools.wraps(tool)
    def noted(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return tool(*args, **kwargs)

    agent.tools[0] = noted
