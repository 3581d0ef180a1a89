"""The purge's pacing (issue 43): rests in proportion to the time each statement held
the writer (the store's figure; the clock's time around it where there is none),
batches sized by that time; driven by an injected clock and sleep (nothing here waits)."""

from __future__ import annotations

import pytest

from durable_adk import errors
from durable_adk.lifecycle import RetentionPolicy
from durable_adk.lifecycle.pacing import MAX_REST, Pacer
from pacing_clock import Clock


def pacer(duty: float, batch: int = 1000, **kw: float) -> tuple[Pacer, Clock]:
    clock = Clock()
    return Pacer(duty, batch, clock=clock, sleep=clock.sleep, **kw), clock  # type: ignore[arg-type]


def held_pacer(duty: float, batch: int = 1000, **kw: float) -> tuple[Pacer, Clock]:
    """A pacer billing the store's figure of the time held (the clock only times the rest)."""
    clock = Clock()
    p = Pacer(duty, batch, clock=clock, sleep=clock.sleep, by_clock=False, **kw)  # type: ignore[arg-type]
    return p, clock


async def statement(
    p: Pacer, clock: Clock, took: float, *, full: bool = True, held: float | None = None
) -> None:
    began = p.clock()
    clock.now += took
    await p.rest(began, full, held)


async def test_rest_keeps_the_purge_to_its_duty() -> None:
    p, clock = pacer(0.05, target=0.004)
    for took in (0.004, 0.002, 0.006):
        await statement(p, clock, took)
    assert clock.slept == pytest.approx([0.076, 0.038, 0.114])
    assert p.busy == pytest.approx(0.012)
    assert p.busy / (p.busy + p.rested) == pytest.approx(0.05)


async def test_duty_one_never_rests_and_keeps_the_policys_batch() -> None:
    p, clock = pacer(1.0, batch=700)
    assert p.batch == 700
    for took in (0.5, 0.0001, 2.0):
        await statement(p, clock, took)
    assert clock.slept == [] and p.batch == 700


async def test_batches_grow_while_quick_and_halve_when_slow_within_bounds() -> None:
    p, clock = pacer(0.1, batch=1000, target=0.004, min_batch=100)
    assert p.batch == 100  # a paced purge starts at min_batch
    sizes = []
    for _ in range(5):  # quick and full: doubles up to the policy's batch
        await statement(p, clock, 0.001)
        sizes.append(p.batch)
    assert sizes == [200, 400, 800, 1000, 1000]
    await statement(p, clock, 0.001, full=False)  # quick but not full: nothing more to find
    assert p.batch == 1000
    await statement(p, clock, 0.004)  # on target: kept
    assert p.batch == 1000
    sizes = []
    for _ in range(8):  # slow (the floor stays low): halves down to min_batch
        await statement(p, clock, 0.05)
        await statement(p, clock, 0.0005, full=False)  # a quick one keeps the floor down
        sizes.append(p.batch)
    assert sizes == [500, 250, 125, 100, 100, 100, 100, 100]


async def test_where_every_statement_is_slow_batches_are_not_shrunk_for_nothing() -> None:
    p, clock = pacer(0.1, batch=1000, target=0.004, min_batch=200)
    for _ in range(6):  # even the smallest statements take 20 ms (a loaded machine)
        await statement(p, clock, 0.02)
    assert p.batch == 200  # kept: 20 ms is the floor, the aim is 40 ms
    await statement(p, clock, 0.1)  # more than twice the aim: halves, not below min_batch
    assert p.batch == 200
    p.batch = 800
    await statement(p, clock, 0.2)
    assert p.batch == 400


async def test_a_statement_waiting_for_the_writer_is_billed_up_to_twice_the_aim() -> None:
    p, clock = pacer(0.05, target=0.004)
    await statement(p, clock, 0.002)  # floor 2 ms: the aim is 4 ms
    await statement(p, clock, 0.060)  # 60 ms, most of it waiting: billed 2 x 2 x 2.2 ms
    assert clock.slept == pytest.approx([0.038, 0.0088 * 19])  # the floor rose 10 %
    p, clock = pacer(0.01, target=0.004)
    await statement(p, clock, 30.0)  # a stall: the rest is at most MAX_REST
    assert clock.slept == [MAX_REST]


async def test_the_rest_is_billed_on_the_time_held_not_the_wait_for_the_writer() -> None:
    p, clock = held_pacer(0.05, target=0.004)
    # 60 ms around each statement, of which it held the writer 2, 4, then 6 ms.
    for held in (0.002, 0.004, 0.006):
        await statement(p, clock, 0.060, held=held)
    assert clock.slept == pytest.approx([0.038, 0.076, 0.114])
    assert p.busy == pytest.approx(0.012)
    assert p.waited == pytest.approx(0.168)
    assert p.busy / (p.busy + p.rested) == pytest.approx(0.05)
    # Timed from outside (as before), the same statements would have rested
    # 2 x aim x 19 each, whatever they held.
    q, outside = pacer(0.05, target=0.004)
    for _ in range(3):
        await statement(q, outside, 0.060)
    assert min(outside.slept) > max(clock.slept) / 2 and q.waited == 0


async def test_batches_are_sized_on_the_time_held_not_the_wait() -> None:
    p, clock = held_pacer(0.1, batch=1000, target=0.004, min_batch=100)
    for _ in range(3):  # long waits for the writer, 1 ms held: batches grow
        await statement(p, clock, 0.5, held=0.001)
    assert p.batch == 800
    await statement(p, clock, 0.001, held=0.020)  # quick around, but held 20 ms: halves
    assert p.batch == 400


async def test_a_long_hold_is_billed_whole_up_to_max_rest() -> None:
    p, clock = held_pacer(0.05, target=0.004)
    await statement(p, clock, 0.002, held=0.002)  # floor 2 ms, aim 4 ms
    await statement(p, clock, 0.030, held=0.030)  # held 30 ms: all of it, not 2 x aim
    assert clock.slept == pytest.approx([0.038, 0.570])
    await statement(p, clock, 5.0, held=5.0)  # held for a stall: at most MAX_REST
    assert clock.slept[-1] == MAX_REST


async def test_where_the_store_gives_no_figure_the_clock_bills_up_to_twice_the_aim() -> None:
    p, clock = held_pacer(0.05, target=0.004)
    await statement(p, clock, 0.002)  # no figure (a unit written in a group): the clock's
    await statement(p, clock, 0.060)
    assert clock.slept == pytest.approx([0.038, 0.0088 * 19])
    by_clock, c2 = pacer(0.05, target=0.004)
    assert by_clock.by_clock and not p.by_clock
    await statement(by_clock, c2, 0.004, held=0.001)  # a given clock: the figure is not used
    assert c2.slept == pytest.approx([0.076])


async def test_duty_one_never_rests_whatever_is_held() -> None:
    p, clock = held_pacer(1.0, batch=300)
    await statement(p, clock, 0.1, held=0.05)
    assert clock.slept == [] and p.batch == 300 and p.busy == pytest.approx(0.05)


def test_pacer_and_policy_refuse_a_duty_outside_zero_to_one() -> None:
    for bad in (0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="duty"):
            Pacer(bad, 100)
        with pytest.raises(errors.InvalidArgument, match="duty must be a share"):
            RetentionPolicy(done=0, duty=bad)
    with pytest.raises(errors.InvalidArgument, match="duty"):
        RetentionPolicy(done=0, duty=True)
    assert RetentionPolicy(done=0).duty == 0.05
    assert RetentionPolicy.parse("done=1d", duty=1).duty == 1.0
