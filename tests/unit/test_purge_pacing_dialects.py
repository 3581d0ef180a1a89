"""The purge's pace per dialect (issue 43): SQLite's short unsynced batches, the
checkpoint's cadence, and the checkpoint billed to the rest but not to the batch's
size; driven by an injected clock and sleep (nothing here waits)."""

from __future__ import annotations

import pytest

from durable_adk.lifecycle.pacing import (
    CHECKPOINT_ROWS,
    MAX_REST,
    MIN_BATCH,
    SQLITE_MIN_BATCH,
    SQLITE_TARGET_SECONDS,
    TARGET_SECONDS,
    Pacer,
    pace_for,
)
from pacing_clock import Clock


def held_pacer(duty: float, batch: int = 1000, **kw: float) -> tuple[Pacer, Clock]:
    clock = Clock()
    p = Pacer(duty, batch, clock=clock, sleep=clock.sleep, by_clock=False, **kw)  # type: ignore[arg-type]
    return p, clock


def test_sqlite_aims_at_half_a_millisecond_and_postgresql_keeps_its_pace() -> None:
    assert pace_for("sqlite") == (SQLITE_TARGET_SECONDS, SQLITE_MIN_BATCH)
    assert SQLITE_TARGET_SECONDS < TARGET_SECONDS and SQLITE_MIN_BATCH < MIN_BATCH
    assert pace_for("postgresql") == (TARGET_SECONDS, MIN_BATCH)
    lite = Pacer.for_dialect("sqlite", 0.05, 1000)
    assert (lite.target, lite.min_batch, lite.batch) == (0.0005, 20, 20)
    assert not lite.sync and lite.checkpoint_rows == CHECKPOINT_ROWS
    pg = Pacer.for_dialect("postgresql", 0.05, 1000)
    assert (pg.target, pg.min_batch, pg.batch) == (0.004, 200, 200)
    flat = Pacer.for_dialect("sqlite", 1.0, 700)
    assert flat.sync and flat.batch == 700 and flat.checkpoint_rows == 1
    with pytest.raises(ValueError, match="duty"):
        Pacer.for_dialect("sqlite", 0.0, 100)


def test_a_paced_purge_checkpoints_every_so_many_rows_and_at_the_end() -> None:
    p = Pacer(0.05, 1000, checkpoint_rows=100)
    due = [p.deleted(n) for n in (40, 40, 40, 100, 5, 0)]
    assert due == [False, False, True, True, False, False]
    assert p.checkpoint_left() is True  # 5 rows since the last one
    assert p.checkpoint_left() is False  # nothing since
    flat = Pacer(1.0, 1000, checkpoint_rows=100)
    assert [flat.deleted(n) for n in (1, 3)] == [True, True]  # duty 1: after every batch
    assert flat.deleted(0) is False and flat.checkpoint_left() is False


async def test_the_checkpoint_is_billed_to_the_rest_not_to_the_batchs_size() -> None:
    p, clock = held_pacer(0.05, target=0.0005, min_batch=20)
    began = p.clock()
    clock.now += 0.0061  # 0.1 ms holding the lock, then a 6 ms checkpoint
    await p.rest(began, True, 0.0001, upkeep=0.006)
    assert p.batch == 40  # the batch held 0.1 ms, under half the aim: it doubles
    assert p.aim() == pytest.approx(0.0005)
    assert clock.slept == pytest.approx([0.0061 * 19])  # both billed to the rest
    assert p.busy == pytest.approx(0.0061)
    assert p.waited == pytest.approx(0.0)  # the clock's time, less the upkeep, was held
    assert p.busy / (p.busy + p.rested) == pytest.approx(0.05)
    # Billed as the statement's hold (as before), the checkpoint would set the
    # floor: the aim would be 12 ms, 24 times the target, and the batches sized on it.
    q, other = held_pacer(0.05, target=0.0005, min_batch=20)
    began = q.clock()
    other.now += 0.0061
    await q.rest(began, True, 0.0061)
    assert q.aim() == pytest.approx(0.0122)


async def test_upkeep_rests_are_capped_and_a_flat_out_purge_never_rests() -> None:
    p, clock = held_pacer(0.01)
    began = p.clock()
    await p.rest(began, True, 0.001, upkeep=30.0)  # a checkpoint stalled for 30 s
    assert clock.slept == [MAX_REST]
    flat, flat_clock = held_pacer(1.0)
    await flat.rest(flat.clock(), True, 0.001, upkeep=0.5)
    assert flat_clock.slept == [] and flat.busy == pytest.approx(0.501)
