"""durable_adk.adk.loops.every: periodic passes that survive failures and stop when told."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from durable_adk import errors
from durable_adk.adk.loops.every import every, periodically


async def test_a_failing_pass_is_logged_and_the_next_one_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []
    stop = asyncio.Event()

    async def work() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise errors.StoreError("the database went away")
        if len(calls) == 2:
            raise ValueError("one bad row")
        if len(calls) == 4:
            stop.set()

    with caplog.at_level(logging.ERROR, logger="durable_adk.loops"):
        await asyncio.wait_for(every(0.001, work, "test", stop=stop), timeout=10)
    assert calls == [0, 1, 2, 3]
    failures = [r for r in caplog.records if "test pass failed" in r.getMessage()]
    assert len(failures) == 2


async def test_stop_ends_the_wait_between_passes_at_once() -> None:
    stop = asyncio.Event()
    calls = 0

    async def work() -> None:
        nonlocal calls
        calls += 1

    task = asyncio.create_task(every(3600, work, "slow", stop=stop))
    deadline = time.monotonic() + 10
    while calls == 0:  # the first pass runs at once
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    assert calls == 1  # the loop now waits an hour
    started = time.monotonic()
    stop.set()
    await asyncio.wait_for(task, timeout=5)
    assert time.monotonic() - started < 5
    assert calls == 1


async def test_a_stop_set_before_the_first_pass_runs_nothing() -> None:
    stop = asyncio.Event()
    stop.set()
    ran = False

    async def work() -> None:
        nonlocal ran
        ran = True

    await asyncio.wait_for(every(0.01, work, "never", first_after=3600, stop=stop), timeout=5)
    assert not ran


async def test_periodically_runs_during_the_block_and_stops_after_it() -> None:
    calls = 0

    async def work() -> None:
        nonlocal calls
        calls += 1

    async with periodically(0.001, work, "block"):
        deadline = time.monotonic() + 10
        while calls < 3:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.005)
    after = calls
    await asyncio.sleep(0.05)
    assert calls == after  # cancelled with the block
