"""The pool lanes: work in progress before intake, caps per class, stalls not queues fail."""

from __future__ import annotations

import asyncio
import time

import pytest

from durable_adk.store.lanes import CLAIM, INTAKE, URGENT, Lane, LaneStalled


async def test_a_free_slot_is_taken_at_once_and_given_back() -> None:
    lane = Lane(2)
    assert await lane.take(1.0) == 0.0
    assert await lane.take(1.0, INTAKE) == 0.0
    assert lane.free == 0 and lane.held == {URGENT: 1, CLAIM: 0, INTAKE: 1}
    lane.give_back(INTAKE)
    lane.give_back()
    assert lane.free == 2 and lane.held == {URGENT: 0, CLAIM: 0, INTAKE: 0}


async def test_waiting_work_in_progress_is_served_before_intake_that_came_first() -> None:
    lane = Lane(1)
    await lane.take(5.0)
    served: list[str] = []

    async def wait(name: str, kind: str) -> None:
        await lane.take(5.0, kind)
        served.append(name)
        await asyncio.sleep(0)
        lane.give_back(kind)

    tasks = [asyncio.create_task(wait("intake-1", INTAKE))]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(wait("intake-2", INTAKE)))
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(wait("urgent-1", URGENT)))
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(wait("urgent-2", URGENT)))
    await asyncio.sleep(0)
    lane.give_back()
    await asyncio.gather(*tasks)
    assert served == ["urgent-1", "urgent-2", "intake-1", "intake-2"]
    assert lane.free == 1


async def test_intake_does_not_jump_the_queue_of_intake_between_hand_overs() -> None:
    lane = Lane(1)
    await lane.take(5.0)
    first = asyncio.create_task(lane.take(5.0, INTAKE))
    await asyncio.sleep(0)
    late = asyncio.create_task(lane.take(5.0, INTAKE))
    await asyncio.sleep(0)
    lane.give_back()  # handed to the first intake waiter, not left free
    assert lane.free == 0
    await first
    assert not late.done()
    lane.give_back(INTAKE)
    await late
    lane.give_back(INTAKE)
    assert lane.free == 1


async def test_claims_leave_one_slot_to_the_heartbeat() -> None:
    lane = Lane(2, caps={CLAIM: 1})
    await lane.take(5.0, CLAIM)
    second_claim = asyncio.create_task(lane.take(5.0, CLAIM))
    await asyncio.sleep(0.01)
    assert not second_claim.done()  # a slot is free, but claims hold their cap
    assert await lane.take(5.0, URGENT) == 0.0  # the renewal gets it at once
    lane.give_back(URGENT)
    assert not second_claim.done()
    lane.give_back(CLAIM)
    await second_claim
    assert lane.held[CLAIM] == 1
    lane.give_back(CLAIM)


async def test_a_wait_behind_a_pool_that_turns_over_outlasts_the_timeout() -> None:
    lane = Lane(1)
    stop = asyncio.Event()

    async def holder() -> None:
        # Two of these hand the slot to each other every 0.05 s, ahead of the intake waiter.
        while not stop.is_set():
            await lane.take(0.2)
            await asyncio.sleep(0.05)
            lane.give_back()

    holders = [asyncio.create_task(holder()) for _ in range(2)]
    await asyncio.sleep(0.01)
    started = time.monotonic()
    waiter = asyncio.create_task(lane.take(0.2, INTAKE))
    await asyncio.sleep(0.6)  # three timeouts' worth: not stalled, only queued
    assert not waiter.done()
    stop.set()
    await asyncio.gather(*holders)
    waited = await waiter
    assert waited >= 0.5 and time.monotonic() - started >= 0.5
    lane.give_back(INTAKE)
    assert lane.free == 1


async def test_a_wait_fails_when_no_slot_is_given_back_for_the_timeout() -> None:
    lane = Lane(1)
    await lane.take(1.0)
    started = time.monotonic()
    with pytest.raises(LaneStalled, match=r"within 0\.2 s"):
        await lane.take(0.2, INTAKE)
    assert 0.15 <= time.monotonic() - started < 2.0
    assert not any(lane.waiting.values())  # the failed waiter left the queue
    lane.give_back()
    assert lane.free == 1 and lane.held[INTAKE] == 0


async def test_a_waiter_cancelled_as_the_slot_reaches_it_passes_the_slot_on() -> None:
    lane = Lane(1)
    await lane.take(5.0)
    first = asyncio.create_task(lane.take(5.0))
    await asyncio.sleep(0)
    second = asyncio.create_task(lane.take(5.0))
    await asyncio.sleep(0)
    lane.give_back()  # handed to the first waiter...
    first.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    await second  # the slot went on to the next waiter
    assert lane.free == 0 and lane.held[URGENT] == 1
    lane.give_back()
    assert lane.free == 1


async def test_a_cancelled_waiter_leaves_the_queue_and_holds_nothing() -> None:
    lane = Lane(1)
    await lane.take(5.0)
    waiter = asyncio.create_task(lane.take(5.0, INTAKE))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not lane.waiting[INTAKE]
    lane.give_back()
    assert lane.free == 1 and lane.held == {URGENT: 0, CLAIM: 0, INTAKE: 0}


def test_bad_sizes_and_caps_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        Lane(0)
    with pytest.raises(ValueError, match="bad cap"):
        Lane(2, caps={CLAIM: 0})
    with pytest.raises(ValueError, match="bad cap"):
        Lane(2, caps={"heartbeat": 1})


async def test_the_count_of_waiting_turns_follows_every_wait_cancel_and_hand_over() -> None:
    # The fast paths of idle() and give_back() trust it: with it wrong, a waiter
    # would never be handed a slot, or a slot would be taken past a waiter.
    lane = Lane(1)
    await lane.take(5.0)

    def counted() -> int:
        return sum(len(q) for q in lane.waiting.values())

    waiters = [asyncio.create_task(lane.take(5.0, kind)) for kind in (INTAKE, URGENT, CLAIM)]
    await asyncio.sleep(0)
    assert lane.queued == counted() == 3
    assert not lane.idle(URGENT)
    waiters[1].cancel()  # the urgent one leaves before its turn
    await asyncio.gather(waiters[1], return_exceptions=True)
    assert lane.queued == counted() == 2
    lane.give_back()  # to the claim (served before intake)
    assert lane.queued == counted() == 1
    await waiters[2]
    lane.give_back(CLAIM)  # to the intake
    await waiters[0]
    assert lane.queued == counted() == 0
    lane.give_back(INTAKE)
    assert lane.idle(URGENT) and lane.free == 1
