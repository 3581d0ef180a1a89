"""Admission (issue 13): drives let in by a limit that follows the event loop's lag.

The limit's rule is driven with lag samples given by the test (``observe``),
so each step is deterministic; one test lets the real sampler see a loop that
a blocking drive holds up.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from durable_adk import Admission, errors


async def admitted_now(admission: Admission, n: int) -> list[asyncio.Task[bool]]:
    """Starts ``n`` entries and lets the loop run once."""
    tasks = [asyncio.create_task(admission.enter()) for _ in range(n)]
    await asyncio.sleep(0)
    return tasks


async def test_below_the_limit_every_drive_is_let_in_at_once() -> None:
    admission = Admission(min_active=4, initial=8)
    tasks = await admitted_now(admission, 8)
    assert all(t.done() and t.result() for t in tasks)
    assert (admission.active, admission.waiting) == (8, 0)
    for _ in tasks:
        admission.leave()
    assert admission.active == 0
    await admission.aclose()


async def test_beyond_the_limit_drives_wait_in_order_and_enter_as_others_leave() -> None:
    admission = Admission(min_active=2, initial=2, max_active=2)
    first = await admitted_now(admission, 2)
    later = await admitted_now(admission, 3)
    assert all(t.done() for t in first) and not any(t.done() for t in later)
    assert admission.waiting == 3
    admission.leave()
    await asyncio.sleep(0)
    assert [t.done() for t in later] == [True, False, False]  # arrival order
    admission.leave()
    await asyncio.sleep(0)
    assert [t.done() for t in later] == [True, True, False]
    assert admission.active == 2
    await admission.aclose()
    later[2].cancel()


async def test_lag_above_the_target_cuts_the_limit_and_calm_with_waiters_raises_it() -> None:
    admission = Admission(min_active=4, initial=64, lag_target=0.05, interval=0.05)
    admission.observe(0.2, now=10.0)
    assert admission.limit == 48  # cut by a quarter
    admission.observe(0.2, now=10.1)
    assert admission.limit == 48  # at most one cut per 5 intervals
    admission.observe(0.2, now=10.3)
    assert admission.limit == 36
    for step in range(40):
        admission.observe(0.3, now=11.0 + step)
    assert admission.limit == 4  # never below min_active
    # Calm but nobody waits: the limit stays.
    for step in range(10):
        admission.observe(0.0, now=60.0 + step)
    assert admission.limit == 4
    tasks = await admitted_now(admission, 6)
    assert admission.active == 4 and admission.waiting == 2
    admission.observe(0.0, now=71.0)  # calm, every slot taken, runs waiting: +1
    await asyncio.sleep(0)
    assert admission.limit == 5 and admission.active == 5 and admission.waiting == 1
    # One sample above the target in the last ten holds the growth back, and,
    # alone among calm ones (a pause: a garbage collection, one slow statement),
    # cuts nothing either.
    admission.observe(0.06, now=72.0)
    admission.observe(0.0, now=73.0)
    assert admission.limit == 5
    for step in range(9):
        admission.observe(0.04, now=74.0 + step)  # busy, but below the target: grows
    assert admission.limit == 6
    for task in tasks:
        task.cancel()
    await admission.aclose()


async def test_a_cap_bounds_the_limit_and_a_fixed_admission_never_moves() -> None:
    capped = Admission(min_active=2, initial=10, max_active=10)
    await admitted_now(capped, 12)
    for step in range(50):
        capped.observe(0.0, now=float(step))
    assert capped.limit == 10 and capped.active == 10
    await capped.aclose()
    fixed = Admission(adaptive=False, max_active=3, min_active=1)
    fixed.observe(5.0, now=1.0)
    assert fixed.limit == 3


async def test_an_abort_ends_the_wait_without_a_slot() -> None:
    admission = Admission(min_active=1, initial=1, max_active=1)
    assert await admission.enter()
    abort = asyncio.Event()
    waiting = asyncio.create_task(admission.enter(abort))
    await asyncio.sleep(0)
    abort.set()
    assert await asyncio.wait_for(waiting, 5) is False
    admission.leave()
    assert admission.active == 0 and admission.waiting == 0
    already = asyncio.Event()
    already.set()
    assert await admission.enter(already) is False
    await admission.aclose()


async def test_a_cancelled_waiter_gives_its_place_up() -> None:
    admission = Admission(min_active=1, initial=1, max_active=1)
    assert await admission.enter()
    waiting = asyncio.create_task(admission.enter())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    admission.leave()
    assert admission.active == 0
    assert await admission.enter()  # the slot is free, not held by the cancelled waiter
    await admission.aclose()


async def cut_within(admission: Admission, seconds: float) -> None:
    """Waits for the sampler's next samples to cut the limit from 32 to 24 or less."""
    deadline = time.monotonic() + seconds
    while admission.limit > 24:  # a busy machine may delay the sampler's ticks
        assert time.monotonic() < deadline, f"not cut: {admission.limit}"
        await asyncio.sleep(0.01)


async def test_the_sampler_sees_a_loop_held_up_and_cuts_the_limit() -> None:
    admission = Admission(min_active=2, initial=32, lag_target=0.02, interval=0.01)
    tasks = await admitted_now(admission, 3)  # enough to run the sampler
    await asyncio.sleep(0.03)
    for _ in range(4):  # drives that hold the loop again and again (CPU, blocking calls)
        time.sleep(0.1)  # noqa: ASYNC251
        await asyncio.sleep(0.015)
    await cut_within(admission, 5)  # by a quarter (again, at most once per 5 intervals)
    for _ in tasks:
        admission.leave()
    await admission.aclose()


async def test_the_stores_wait_for_connections_counts_as_overload() -> None:
    waits = [0.5, 0.5, 0.5]  # statements waited half a second for the pool, then no more

    def pressure() -> float:
        return waits.pop() if waits else 0.0

    admission = Admission(min_active=2, initial=32, interval=0.01, pressure=pressure)
    tasks = await admitted_now(admission, 3)
    await cut_within(admission, 5)  # the loop did not lag; the pool's waits cut it
    for _ in tasks:
        admission.leave()
    await admission.aclose()


def test_bad_settings_are_refused() -> None:
    with pytest.raises(errors.InvalidArgument, match="min_active"):
        Admission(min_active=0)
    with pytest.raises(errors.InvalidArgument, match="max_active"):
        Admission(min_active=8, max_active=4)
    with pytest.raises(errors.InvalidArgument, match="needs max_active"):
        Admission(adaptive=False)
    with pytest.raises(errors.InvalidArgument, match="> 0"):
        Admission(lag_target=0)
