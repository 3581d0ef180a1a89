"""bench/recovery.py's baselines, small: the in-memory ADK finish, the floor, the step timer.

The bench itself is not part of the suite (it takes minutes); these check, on
a few orphans, that ADK's in-memory Runner given an orphan's events finishes
the same remaining work a recovery does (the final text once, every call
answered once), and that each worker mode speaks the bench's protocol, so the
baselines do not rot between runs.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.recovery import build_fixture, dying_is_quiet, is_read
from bench.recovery_worker import (
    STEP_NAMES,
    _spread,
    finish_in_memory,
    finished_once,
    in_memory_copies,
    make_runner,
    read_orphans,
)
from bench.runner import StoreCalls

from children import run_child
from durable_adk.adk.loops.recovery import Sweeper
from durable_adk.store import open_store
from durable_adk.testing.pg_cluster import TempPostgres

ROOT = Path(__file__).resolve().parents[2]
ORPHANS = 10  # every place a fixture's worker dies, three times over, and one more
_databases = itertools.count()


async def _fixture(url: str) -> None:
    asyncio.get_running_loop().set_exception_handler(dying_is_quiet)
    await build_fixture(url, ORPHANS)


async def test_adk_in_memory_finishes_each_orphans_remaining_work_once(store_url: str) -> None:
    await _fixture(store_url)
    orphans = await read_orphans(store_url)
    assert len(orphans) == ORPHANS
    runner = await in_memory_copies(orphans)
    runs = [run for run, _ in orphans]
    assert await finished_once(runner, runs) == 0  # the copies are unfinished, as the orphans

    await finish_in_memory(runner, orphans, concurrency=4)

    assert await finished_once(runner, runs) == ORPHANS


def _worker(url: str, *args: str) -> dict[str, object]:
    """One worker process through ready / go / report / exit; returns its report."""
    done = run_child(
        [sys.executable, "-m", "bench.recovery_worker", url, "w-test", *args],
        input="go\nexit\n",
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ready, report = done.stdout.splitlines()
    assert ready == "ready"
    parsed: dict[str, object] = json.loads(report)
    return parsed


async def test_the_adk_and_steps_modes_report_every_orphan(store_url: str) -> None:
    await _fixture(store_url)

    adk = _worker(store_url, "--mode", "adk", "--concurrency", "1")
    steps = _worker(store_url, "--mode", "steps", "--concurrency", "1")

    assert adk["recovered"] == adk["checked"] == ORPHANS
    assert steps["recovered"] == ORPHANS
    split = steps["steps"]
    assert isinstance(split, dict) and set(split) == set(STEP_NAMES)
    cpu = steps["cpu"]
    assert isinstance(cpu, float) and 0 < sum(split.values()) <= cpu
    assert split["drive"] > 0 and split["claim"] > 0


@pytest.fixture
def pg_url(pg_cluster: TempPostgres) -> Iterator[str]:
    """A fresh PostgreSQL database (the floor and the inline runner talk to PostgreSQL only)."""
    name = f"bench_rec_{os.getpid()}_{next(_databases)}"
    try:
        yield pg_cluster.create_database(name)
    finally:
        pg_cluster.drop_database(name)


def test_the_floor_mode_makes_its_statements(pg_url: str) -> None:
    report = _worker(pg_url, "--mode", "floor", "--runs", "7", "--writes", "2.5")

    assert report["recovered"] == report["checked"] == 7


def test_a_fractional_mean_of_statements_is_spread_evenly() -> None:
    made = [_spread(3.2, i) for i in range(500)]

    assert sum(made) == 1600
    assert set(made) == {3, 4}
    assert [_spread(1.0, i) for i in range(3)] == [1, 1, 1]


def test_reads_and_writes_are_told_apart_by_query_name() -> None:
    assert is_read("load_session_tail") and is_read("run_get")
    assert not is_read("run_claim_expired") and not is_read("append_events_finish")


async def test_the_inline_mode_makes_a_recoverys_statements_where_it_makes_them(
    pg_url: str,
) -> None:
    # The CPU bound's runner: ADK finishing each orphan while making, at the
    # points of a recovery's units, as many bare statements as the recovery
    # writes and reads (counted here on the same orphans, afterwards).
    await _fixture(pg_url)
    # A recovery reads its session in its claim (issue 45): no read of its own.
    report = await asyncio.to_thread(_worker, pg_url, "--mode", "inline", "--reads", "0")
    assert report["recovered"] == report["checked"] == ORPHANS

    async with open_store(pg_url) as store:
        sweeper = Sweeper(make_runner(store, "counter"), batch=ORPHANS, concurrency=1)
        with StoreCalls(store) as calls:
            assert len(await sweeper.recover_once()) == ORPHANS
    per_pass = {"run_cancel_expired", "sweeper_beat"}  # the inline runner has no passes
    writes = sum(n for q, n in calls.calls.items() if not is_read(q) and q not in per_pass)
    reads = sum(n for q, n in calls.calls.items() if is_read(q))
    assert report["statements"] == {"writes": writes, "reads": reads}


async def test_the_essentials_mode_finishes_every_orphan_once_with_the_bounds_statements(
    pg_url: str,
) -> None:
    # The bound with a durable recovery's essential work: the same statements as
    # the bound's (a bare commit at each unit's point, no read), every orphan
    # finished once, its stored events and its end classified on the way.
    await _fixture(pg_url)
    bound = await asyncio.to_thread(_worker, pg_url, "--mode", "inline", "--reads", "0")
    report = await asyncio.to_thread(_worker, pg_url, "--mode", "essentials", "--reads", "0")
    assert report["recovered"] == report["checked"] == ORPHANS
    assert report["statements"] == bound["statements"]
