"""Schedules on both backends: one run per tick across racing workers, catch-up, overlap,
DST, orphans, pause/resume/trigger, bad input.

Time is the database's: a test moves a schedule's next tick back in SQL
(``ScheduleTable.rewind``) instead of waiting for it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from google.adk.agents import LlmAgent

from durable_adk import errors
from durable_adk.adk.loops.background import Background
from durable_adk.adk.loops.every import BackgroundSettings
from durable_adk.adk.loops.scheduler import Scheduler
from durable_adk.adk.runner import DurableRunner
from durable_adk.cron import Cron
from durable_adk.schedules import Plan, Schedule, TickState
from durable_adk.store import Store, open_store
from durable_adk.tables.ledger import Run, RunLedger, RunStatus
from durable_adk.tables.schedules import ScheduleTable
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.harness import clear_of_a_tick

APP = "sched"
BERLIN = ZoneInfo("Europe/Berlin")


class Gate:
    """Holds the slow tool until the test opens it."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.entered = 0

    async def work(self) -> dict[str, Any]:
        """Works slowly."""
        self.entered += 1
        await self.opened.wait()
        return {"done": True}


def runner_for(
    store: Store, schedules: list[Schedule], worker: str, gate: Gate | None = None
) -> DurableRunner:
    if gate is None:
        agent = LlmAgent(name="root", model=ScriptedModel([Say("Report sent.")] * 20))
    else:
        script = [Call("work", {}), Say("Worked.")]
        agent = LlmAgent(name="root", model=ScriptedModel(script), tools=[gate.work])
    return DurableRunner(
        app=agent,
        app_name=APP,
        store=store,
        worker_id=worker,
        schedules=schedules,
        background=False,
        lease=5.0,
    )


def poller(runner: DurableRunner, **kw: Any) -> Scheduler:
    return Scheduler(runner, runner.path.schedules, **kw)


async def runs_of(store: Store) -> list[Run]:
    return await RunLedger(store).list_runs(limit=1000)


def every_minute(name: str = "report", **kw: Any) -> Schedule:
    minute = timedelta(seconds=60)
    return Schedule(name=name, message="send the report", user_id="ops", every=minute, **kw)


async def rewind_to_now(table: ScheduleTable, name: str, schedule: Schedule) -> float:
    """Puts the schedule's next tick at the last tick at or before now (database clock),
    away from the next one (which, once due, the catch-up policy would fire instead)."""
    now = await clear_of_a_tick(table.store, schedule, margin=15)
    tick = max(t for t in _ticks_before(schedule, now))
    await table.rewind(name, next_tick_at=tick, next_fire_at=tick)
    return tick


def _ticks_before(schedule: Schedule, now: float, span: float = 7 * 86400) -> list[float]:
    found = []
    for tick in schedule.ticks(now - span):
        if tick > now:
            return found
        found.append(tick)
    return found


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"cron": "61 * * * *"}, "outside 0-59"),
        ({"cron": "0 0 30 2 *"}, "never fires"),
        ({"cron": "* * *"}, "5 fields"),
        ({"cron": "0 9 * * FRI", "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"cron": "0 9 * * *", "overlap": "sometimes"}, "overlap must be one of"),
        ({"cron": "0 9 * * *", "catch_up": "most"}, "catch_up must be one of"),
        ({"cron": "0 9 * * *", "every": timedelta(hours=1)}, "exactly one of"),
        ({}, "exactly one of"),
        ({"every": timedelta(milliseconds=10)}, "at least 1 second"),
        ({"cron": "0 9 * * *", "catch_up_limit": 0}, "catch_up_limit"),
    ],
)
async def test_bad_schedule_is_refused_and_nothing_stored(
    store: Store, kwargs: dict[str, Any], words: str
) -> None:
    with pytest.raises(errors.InvalidArgument, match=words):
        Schedule(name="bad", message="m", user_id="u", **kwargs)
    assert await ScheduleTable(store, APP).list_schedules() == []


async def test_duplicate_names_and_unknown_schedules(store: Store) -> None:
    table = ScheduleTable(store, APP)
    with pytest.raises(errors.InvalidArgument, match="unique"):
        await table.sync([every_minute(), every_minute()])
    assert await table.list_schedules() == []
    with pytest.raises(errors.NotFound):
        await table.pause("nope", by="alice")
    with pytest.raises(errors.NotFound):
        await table.trigger("nope", by="alice")


# --------------------------------------------------------- one run per tick


async def test_a_new_schedule_fires_only_from_its_next_tick(store: Store) -> None:
    schedule = every_minute()
    runner = runner_for(store, [schedule], "w1")
    sched = poller(runner)
    assert await sched.poll_once(wait=True) == []  # declared now: nothing is due yet
    (row,) = await sched.table.list_schedules()
    now = await store.now()
    assert now < row.next_tick_at <= now + 60 and row.state == "active"
    tick = await rewind_to_now(sched.table, "report", schedule)
    fired = await sched.poll_once(wait=True)
    assert [f.state for f in fired] == [TickState.SUBMITTED]
    run = await runner.ledger.get(fired[0].run_id)
    assert run is not None and run.status is RunStatus.DONE
    assert run.session_id == f"report@{fired[0].tick_key.removeprefix('at:')}"
    assert await sched.poll_once(wait=True) == []  # the tick fired once
    (row,) = await sched.table.list_schedules()
    assert row.last_tick_at == tick and row.next_tick_at == tick + 60
    await runner.aclose()


async def test_three_workers_racing_for_due_ticks_start_one_run_each(store_url: str) -> None:
    schedule = every_minute(catch_up="all", catch_up_limit=10, overlap="allow")
    async with (
        open_store(store_url) as s1,
        open_store(store_url) as s2,
        open_store(store_url) as s3,
    ):
        runners = [runner_for(s, [schedule], f"w{i}") for i, s in enumerate((s1, s2, s3))]
        pollers = [poller(r) for r in runners]
        await pollers[0].sync()
        now = await clear_of_a_tick(s1, schedule, margin=15)
        first = max(_ticks_before(schedule, now)) - 4 * 60  # five ticks due
        await pollers[0].table.rewind("report", next_tick_at=first, next_fire_at=first)
        for _ in range(3):  # a few rounds: whoever claims it, each tick fires once
            await asyncio.gather(*(p.poll_once() for p in pollers))
        await asyncio.gather(*(p.wait() for p in pollers))
        runs = await runs_of(s1)
        assert len(runs) == 5
        assert len({r.session_id for r in runs}) == 5
        assert {r.status for r in runs} == {RunStatus.DONE}
        ticks = await pollers[0].table.recent_ticks("report")
        assert sorted(t.tick_at for t in ticks) == [first + 60 * i for i in range(5)]
        assert {t.run_id for t in ticks} == {r.run_id for r in runs}
        for r in runners:
            await r.aclose()


# ----------------------------------------------------------------- catch-up


def hourly_half_an_hour_away(now: float, **kw: Any) -> Schedule:
    """An hourly cron whose minute came ~30 minutes ago: every due tick is late."""
    minute = (datetime.fromtimestamp(now, BERLIN).minute + 30) % 60
    return Schedule(name="hourly", message="check", user_id="ops", cron=f"{minute} * * * *", **kw)


@pytest.mark.parametrize("policy, fired, missed", [("none", 0, 3), ("latest", 1, 2), ("all", 2, 1)])
async def test_missed_ticks_follow_the_catch_up_policy(
    store: Store, policy: str, fired: int, missed: int
) -> None:
    now = await store.now()
    schedule = hourly_half_an_hour_away(
        now, catch_up=policy, catch_up_limit=2, overlap="allow", timezone="Europe/Berlin"
    )
    runner = runner_for(store, [schedule], "w1")
    sched = poller(runner)
    await sched.sync()
    due = _ticks_before(schedule, now, span=3 * 3600 + 60)[-3:]
    await sched.table.rewind("hourly", next_tick_at=due[0], next_fire_at=due[0])
    done = await sched.poll_once(wait=True)
    assert len(done) == fired
    ticks = await sched.table.recent_ticks("hourly")
    assert sorted(t.tick_at for t in ticks) == due[len(due) - fired :]
    (row,) = await sched.table.list_schedules()
    assert row.missed == missed
    assert row.next_tick_at == schedule.next_tick(now) and row.next_tick_at > now
    assert len(await runs_of(store)) == fired
    await runner.aclose()


@pytest.mark.parametrize("overlap", ["skip", "allow"])
async def test_a_recorded_tick_fires_though_a_newer_one_came_due_first(
    store: Store, overlap: str
) -> None:
    # A worker recorded a tick and died before submitting it; by the time a fresh
    # claim looks, the next tick is due too. "latest" picks among ticks not yet
    # recorded: the recorded one is owed and fires, the newer one follows the
    # overlap policy.
    schedule = every_minute(overlap=overlap)
    runner = runner_for(store, [schedule], "w1")
    sched = poller(runner)
    await sched.sync()
    now = await clear_of_a_tick(store, schedule, margin=15)  # no third tick comes due
    older, newer = _ticks_before(schedule, now, span=180)[-2:]
    await sched.table.rewind("report", next_tick_at=older, next_fire_at=older)
    (claimed,) = await sched.table.claim("dead", lease=5.0, batch=1)
    assert await sched.table.record(claimed, Plan((older,), 0, newer))  # then it died
    await sched.table.rewind("report", next_tick_at=newer, next_fire_at=newer)  # lease gone
    fired = await sched.poll_once(wait=True)
    second = TickState.SKIPPED if overlap == "skip" else TickState.SUBMITTED
    assert [f.state for f in fired] == [TickState.SUBMITTED, second]
    ticks = await sched.table.recent_ticks("report")
    assert sorted((t.tick_at, t.state) for t in ticks) == [
        (older, TickState.SUBMITTED),
        (newer, second),
    ]
    runs = await runs_of(store)
    assert {r.status for r in runs} == {RunStatus.DONE}
    assert len(runs) == (1 if overlap == "skip" else 2)
    (row,) = await sched.table.list_schedules()
    assert row.next_tick_at == newer + 60 and row.missed == 0
    await runner.aclose()


async def test_none_still_fires_a_tick_on_time(store: Store) -> None:
    schedule = every_minute(catch_up="none", grace=timedelta(seconds=90))
    runner = runner_for(store, [schedule], "w1")
    sched = poller(runner)
    await sched.sync()
    await rewind_to_now(sched.table, "report", schedule)
    assert [f.state for f in await sched.poll_once(wait=True)] == [TickState.SUBMITTED]
    await runner.aclose()


# ------------------------------------------------------------------ overlap


@pytest.mark.parametrize("overlap", ["skip", "queue", "allow"])
async def test_overlap_with_a_slow_run(store: Store, overlap: str) -> None:
    gate = Gate()
    schedule = every_minute(overlap=overlap)
    runner = runner_for(store, [schedule], "w1", gate)
    sched = poller(runner, interval=0.05)
    await sched.sync()
    await sched.table.trigger("report", by="alice", trigger_id="one")
    await sched.poll_once()
    await wait_until(lambda: gate.entered == 1)
    await sched.table.trigger("report", by="alice", trigger_id="two")
    (second,) = await sched.poll_once()
    runs = await runs_of(store)
    if overlap == "skip":
        assert second.state is TickState.SKIPPED and len(runs) == 1
    elif overlap == "queue":
        assert second.state is TickState.PENDING and len(runs) == 1
        await asyncio.sleep(0.06)  # the waiting tick is looked at again after one interval
        assert (await sched.poll_once()) == [second]  # still waits: the first run is running
    else:
        assert second.state is TickState.SUBMITTED and len(runs) == 2
        await wait_until(lambda: gate.entered == 2)
    gate.opened.set()
    await sched.wait()
    if overlap == "queue":
        await asyncio.sleep(0.06)
        (late,) = await sched.poll_once(wait=True)
        assert late.state is TickState.SUBMITTED and late.run_id == second.run_id
    runs = await runs_of(store)
    assert len(runs) == (1 if overlap == "skip" else 2)
    assert {r.status for r in runs} == {RunStatus.DONE}
    await runner.aclose()


async def wait_until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10.0
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


# ---------------------------------------------------------------------- DST


@pytest.mark.parametrize(
    "cron, expected",
    [
        # Autumn: 02:30 exists twice; it fires once, at its first occurrence (CEST).
        (
            "30 0-5 25 10 *",
            ["22:30", "23:30", "00:30", "02:30", "03:30", "04:30"],
        ),
        # Spring: 02:30 does not exist; it fires at the jump (03:30 CEST), the same
        # instant as the 03:30 tick, which fires once.
        ("30 1-3 29 3 *", ["00:30", "01:30"]),
    ],
)
async def test_dst_ticks_fire_once(store: Store, cron: str, expected: list[str]) -> None:
    schedule = Schedule(
        name="dst",
        message="m",
        user_id="ops",
        cron=cron,
        timezone="Europe/Berlin",
        catch_up="all",
        catch_up_limit=50,
        overlap="skip",
    )
    runner = runner_for(store, [schedule], "w1")
    sched = poller(runner)
    await sched.sync()
    start = datetime(2026, 1, 1, tzinfo=BERLIN).timestamp()  # before both changes of 2026
    first = schedule.next_tick(start)
    await sched.table.rewind("dst", next_tick_at=first, next_fire_at=first)
    fired = await sched.poll_once(wait=True)
    ticks = sorted(await sched.table.recent_ticks("dst"), key=lambda t: t.tick_at)
    assert [t.tick_key[14:19] for t in ticks] == expected  # 'at:2026-10-25T' is 14 chars
    assert len({t.tick_at for t in ticks}) == len(ticks)
    assert [f.state for f in fired].count(TickState.SUBMITTED) == 1  # then skipped: overlap
    await runner.aclose()


# ------------------------------------------------------------ orphans, clock


async def test_a_schedule_removed_from_the_code_is_not_fired_and_listed(store: Store) -> None:
    kept, gone = every_minute("kept"), every_minute("gone")
    old = poller(runner_for(store, [kept, gone], "old"))
    await old.sync()
    for name in ("kept", "gone"):
        await rewind_to_now(old.table, name, kept)
    runner = runner_for(store, [kept], "new")
    new = poller(runner)
    fired = await new.poll_once(wait=True)
    assert [f.schedule for f in fired] == ["kept"]
    rows = {r.name: r for r in await new.table.list_schedules()}
    assert rows["gone"].state == "orphaned" and rows["kept"].state == "active"
    assert await new.table.recent_ticks("gone") == []
    with pytest.raises(errors.Conflict, match="orphaned"):
        await new.table.trigger("gone", by="alice")
    with pytest.raises(errors.Conflict, match="orphaned"):
        await new.table.pause("gone", by="alice")
    # Declared again, it is active again, from its next tick.
    await poller(runner_for(store, [kept, gone], "back")).sync()
    rows = {r.name: r for r in await new.table.list_schedules()}
    assert rows["gone"].state == "active"
    await runner.aclose()


async def test_a_worker_with_a_clock_ahead_fires_nothing_early(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    schedule = every_minute()
    runner = runner_for(store, [schedule], "w1")
    sched = poller(runner)
    await sched.sync()
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 86400.0)  # this worker is a day ahead
    assert await sched.poll_once(wait=True) == []
    assert await runs_of(store) == []
    await runner.aclose()


async def test_the_next_tick_survives_restarts_and_moves_only_with_the_timing(
    store_url: str,
) -> None:
    async with open_store(store_url) as store:
        table = ScheduleTable(store, APP)
        (before,) = await table.sync([every_minute()])
    async with open_store(store_url) as store:  # a restarted worker
        table = ScheduleTable(store, APP)
        (same,) = await table.sync([every_minute(overlap="queue")])
        assert same.next_tick_at == before.next_tick_at
        assert same.schedule.overlap == "queue"
        (moved,) = await table.sync(
            [Schedule(name="report", message="m", user_id="ops", cron="0 9 * * FRI")]
        )
        assert moved.next_tick_at == Cron("0 9 * * FRI").after(await store.now() - 5)


# --------------------------------------------------------- operator actions


async def test_pause_resume_trigger_are_audited_and_idempotent(store: Store) -> None:
    schedule = every_minute()
    runner = runner_for(store, [schedule], "w1")
    sched = poller(runner)
    await sched.sync()
    table = sched.table
    paused = await table.pause("report", by="alice", reason="holiday")
    assert paused.changed and paused.row.state == "paused"
    assert not (await table.pause("report", by="alice")).changed
    await rewind_to_now(table, "report", schedule)
    assert await sched.poll_once(wait=True) == []  # paused: nothing fires
    with pytest.raises(errors.Conflict, match="paused"):
        await table.trigger("report", by="alice")
    resumed = await table.resume("report", by="bob")
    assert resumed.changed and resumed.row.state == "active"
    assert resumed.row.next_tick_at > await store.now() - 1  # the pause's ticks are not caught up
    tick = await table.trigger("report", by="carol", reason="now please", trigger_id="t1")
    again = await table.trigger("report", by="carol", trigger_id="t1")
    assert again.run_id == tick.run_id and tick.kind == "trigger"
    fired = await sched.poll_once(wait=True)
    assert [(f.tick_key, f.state) for f in fired] == [("trigger:t1", TickState.SUBMITTED)]
    actions = await runner.ledger.actions(app_name=APP)
    assert [(a.action, a.actor, a.run_id) for a in reversed(actions)] == [
        ("schedule_pause", "alice", "schedule:report"),
        ("schedule_resume", "bob", "schedule:report"),
        ("schedule_trigger", "carol", "schedule:report"),
    ]
    await runner.aclose()


async def test_submitting_a_tick_twice_starts_one_run(store: Store) -> None:
    runner = runner_for(store, [every_minute()], "w1")
    first, _ = await runner.path.submit(user_id="u", session_id="s", message="hi", run_id="run-x")
    second, _ = await runner.path.submit(user_id="u", session_id="s", message="hi", run_id="run-x")
    assert first.run_id == second.run_id == "run-x"
    assert len(await runs_of(store)) == 1
    await runner.aclose()


async def test_jitter_delays_a_tick_but_never_fires_it_twice(store: Store) -> None:
    schedule = Schedule(
        name="report",
        message="m",
        user_id="ops",
        every=timedelta(seconds=10),
        jitter=timedelta(hours=1),
        catch_up="all",
        catch_up_limit=1,
        overlap="allow",
    )
    runner = runner_for(store, [schedule], "w1")
    sched = poller(runner)
    await sched.sync()
    now = await store.now()
    recent = _ticks_before(schedule, now, span=600)
    waiting = next(t for t in reversed(recent) if schedule.fire_at(t) > now)
    await sched.table.rewind("report", next_tick_at=waiting, next_fire_at=now - 1)
    assert await sched.poll_once(wait=True) == []  # its time has come, its jitter not yet
    (row,) = await sched.table.list_schedules()
    assert row.next_tick_at == waiting and row.next_fire_at == schedule.fire_at(waiting)
    older = _ticks_before(schedule, now - 3600, span=600)
    ready = next(t for t in older if schedule.fire_at(t) <= now)
    await sched.table.rewind("report", next_tick_at=ready, next_fire_at=now - 1)
    fired = await sched.poll_once(wait=True)
    keys = [f.tick_key for f in fired]
    assert keys and all(f.state is TickState.SUBMITTED for f in fired)
    assert len(set(keys)) == len(keys)
    await sched.table.rewind("report", next_tick_at=ready, next_fire_at=now - 1)
    again = await sched.poll_once(wait=True)  # the same ticks again: recorded, not fired twice
    assert not {f.tick_key for f in again} & set(keys)
    assert len(await runs_of(store)) == len(keys) + len(again)
    await runner.aclose()


async def test_async_with_durable_runner_fires_ticks(store: Store) -> None:
    schedule = every_minute()
    agent = LlmAgent(name="root", model=ScriptedModel([Say("Report sent.")]))
    settings = BackgroundSettings(schedule_interval=0.05)
    async with DurableRunner(
        app=agent, app_name=APP, store=store, schedules=[schedule], background=settings
    ) as runner:
        table = ScheduleTable(store, APP)
        await wait_until_async(lambda: table.list_schedules())
        tick = await table.trigger("report", by="alice")
        ledger = RunLedger(store)
        deadline = time.monotonic() + 10
        while (run := await ledger.get(tick.run_id)) is None or run.status is not RunStatus.DONE:
            assert time.monotonic() < deadline, run
            await asyncio.sleep(0.02)
        assert runner.background is not None


async def wait_until_async(read: Callable[[], Any]) -> None:
    deadline = time.monotonic() + 10
    while not await read():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_a_burst_of_due_schedules_is_served_in_one_poll(store: Store) -> None:
    declared = [every_minute(f"s{i}") for i in range(5)]
    runner = runner_for(store, declared, "w1")
    sched = poller(runner, batch=2)  # three claims: 2, 2, then 1 (not a full batch)
    await sched.sync()
    for schedule in declared:
        await rewind_to_now(sched.table, schedule.name, schedule)
    fired = await sched.poll_once(wait=True)
    assert sorted(f.schedule for f in fired) == [s.name for s in declared]
    assert len(await runs_of(store)) == 5
    await runner.aclose()


async def test_a_process_that_declares_no_schedules_leaves_them_alone(store: Store) -> None:
    schedule = every_minute()
    declaring = poller(runner_for(store, [schedule], "w1"))
    await declaring.sync()
    await rewind_to_now(declaring.table, "report", schedule)
    agent = LlmAgent(name="root", model=ScriptedModel([Say("hi")]))
    silent = DurableRunner(app=agent, app_name=APP, store=store, background=False)
    assert silent.path.schedules is None
    background = Background(silent, one_off=True)
    assert (await background.once()).ticks == []  # no say: neither fired nor orphaned
    (row,) = await declaring.table.list_schedules()
    assert row.state == "active" and await runs_of(store) == []
    empty = poller(runner_for(store, [], "w3"))  # an explicit empty list is the whole set
    assert await empty.poll_once(wait=True) == []
    (row,) = await declaring.table.list_schedules()
    assert row.state == "orphaned"
    await silent.aclose()


async def test_a_worker_of_a_drained_version_leaves_due_ticks_to_the_others(store: Store) -> None:
    """Draining 1.0 stops its workers starting scheduled runs; a 1.1 worker fires the tick."""
    from durable_adk.tables.versions import VersionTable

    schedule = every_minute()

    def versioned(worker: str, version: str) -> DurableRunner:
        agent = LlmAgent(name="root", model=ScriptedModel([Say("Report sent.")] * 20))
        return DurableRunner(
            app=agent, app_name=APP, store=store, worker_id=worker, schedules=[schedule],
            background=False, lease=5.0, version=version,
        )  # fmt: skip

    old, new = versioned("w-1.0", "1.0"), versioned("w-1.1", "1.1")
    old_poller, new_poller = poller(old), poller(new)
    await old_poller.sync()
    await rewind_to_now(old_poller.table, "report", schedule)
    assert await VersionTable(store, APP).drain("1.0", by="ops", reason="rolling out 1.1")
    assert await old_poller.poll_once(wait=True) == []  # nothing claimed, nothing recorded
    (row,) = await old_poller.table.list_schedules()
    assert row.owner != "w-1.0"  # not claimed: no lease to run out before 1.1 may fire it
    (fired,) = await new_poller.poll_once(wait=True)
    run = await new.ledger.get(fired.run_id)
    assert run is not None and run.status is RunStatus.DONE and run.app_version == "1.1"
    await old.aclose()
    await new.aclose()
