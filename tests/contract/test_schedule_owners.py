"""Which version owns an app's schedules, both backends (issue 41): the newest version that is
not drained; an older or drained worker never rewrites them; a one-off pass never syncs; a
worker takes its set back when another version's sync changed it; two syncs never interleave.

The workers are DurableRunners of one app declaring different versions and
sets; the real ``durable-adk serve`` workers are in
``tests/service/test_schedule_versions.py``.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from google.adk.agents import LlmAgent

from durable_adk import errors
from durable_adk.adk.loops import scheduler as scheduler_module
from durable_adk.adk.loops.scheduler import Scheduler
from durable_adk.adk.runner import DurableRunner
from durable_adk.schedules import Schedule, plan
from durable_adk.store import Store
from durable_adk.tables.schedules import ScheduleTable
from durable_adk.tables.versions import VersionTable
from durable_adk.testing import Say, ScriptedModel

APP = "owners"


def pulse(seconds: int, message: str) -> Schedule:
    return Schedule(name="pulse", message=message, user_id="ops", every=timedelta(seconds=seconds))


V1 = [pulse(60, "pulse of 1.0")]
V2 = [
    pulse(120, "pulse of 2.0"),
    Schedule(name="fresh", message="f", user_id="ops", every=timedelta(minutes=5)),
]


def poller(
    store: Store, version: str | None, schedules: list[Schedule], *, sync: bool = True
) -> Scheduler:
    runner = DurableRunner(
        app=LlmAgent(name="root", model=ScriptedModel([Say("ok")] * 5)),
        app_name=APP,
        store=store,
        worker_id=f"w-{version}-{len(schedules)}-{sync}",
        version=version,
        schedules=schedules,
        background=False,
    )
    return Scheduler(runner, runner.path.schedules, sync=sync)


@pytest.fixture(autouse=True)
def look_every_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler_module, "SET_CHECK_EVERY", 0.0)


async def state(store: Store) -> dict[str, tuple[str, str | None, str]]:
    rows = await ScheduleTable(store, APP).list_schedules()
    return {r.name: (r.state, r.app_version, r.schedule.message) for r in rows}


NEW = {"fresh": ("active", "2.0", "f"), "pulse": ("active", "2.0", "pulse of 2.0")}


async def test_the_newest_version_takes_over_and_an_older_one_never_rewrites(store: Store) -> None:
    old, new = poller(store, "1.0", V1), poller(store, "2.0", V2)
    await old.poll_once()
    assert await state(store) == {"pulse": ("active", "1.0", "pulse of 1.0")}
    await new.poll_once()  # the newer version's first worker takes them over
    assert await state(store) == NEW
    in_force = await ScheduleTable(store, APP).in_force()
    assert in_force is not None and in_force.version == "2.0"
    # An older worker, fresh or not, polls: nothing it declares is written.
    for older in (old, poller(store, "1.0", V1)):
        await older.poll_once()
        assert await state(store) == NEW
    # An unversioned process is older than any version.
    await poller(store, None, V1).poll_once()
    assert await state(store) == NEW


async def test_a_drained_worker_never_syncs_and_a_rollback_takes_the_schedules_back(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from durable_adk.adk.runs import path as runpath

    monkeypatch.setattr(runpath, "DRAIN_CHECK_EVERY", 0.0)
    versions = VersionTable(store, APP)
    await poller(store, "2.0", V2).poll_once()
    await versions.drain("1.0", by="ops")
    # Even a drained *newer* version's worker writes nothing.
    await versions.drain("3.0", by="ops")
    await poller(store, "3.0", V1).poll_once()
    assert await state(store) == NEW
    # Rollback: 2.0 drained, 1.0 taking runs again: 1.0's worker takes them back.
    await versions.undrain("1.0", by="ops")
    await versions.drain("2.0", by="ops")
    await poller(store, "1.0", V1).poll_once()
    assert await state(store) == {
        "fresh": ("orphaned", "1.0", "f"),
        "pulse": ("active", "1.0", "pulse of 1.0"),
    }


async def test_a_worker_takes_its_set_back_when_an_older_sync_changed_it(store: Store) -> None:
    new = poller(store, "2.0", V2)
    await new.poll_once()
    # What an old process did before this fix: its sync rewrote the new set.
    await ScheduleTable(store, APP).sync(V1, version="1.0")
    assert (await state(store))["fresh"][0] == "orphaned"
    await new.poll_once()  # the same process: it looks again, not once per process
    assert await state(store) == NEW


async def test_a_one_off_pass_never_syncs_but_fires_its_versions_due_ticks(store: Store) -> None:
    serving = poller(store, "2.0", V2)
    await serving.poll_once()
    table = ScheduleTable(store, APP)
    row = await table.get("pulse")
    due = row.next_tick_at - 120
    await table.rewind("pulse", next_tick_at=due, next_fire_at=due)
    one_off = poller(store, "2.0", [pulse(7, "another timing")], sync=False)
    fired = await one_off.poll_once(wait=True)
    assert [(f.schedule, f.state.value) for f in fired] == [("pulse", "SUBMITTED")]
    assert await state(store) == NEW  # its own declaration changed nothing
    assert (await table.get("pulse")).next_tick_at == row.next_tick_at  # not re-timed
    # Another version's pass claims nothing of 2.0's.
    await table.rewind("pulse", next_tick_at=due, next_fire_at=due)
    assert await poller(store, "1.0", V1, sync=False).poll_once() == []


async def test_two_syncs_never_interleave(store: Store) -> None:
    table = ScheduleTable(store, APP)
    await table.sync(V1, version="1.0")
    seen = await table.in_force()
    await table.sync(V2, version="2.0")  # came first
    with pytest.raises(errors.Conflict, match="synced meanwhile"):
        await table.sync(V1, version="1.0", seen=seen)
    assert await state(store) == NEW
    with pytest.raises(errors.InvalidArgument, match="unique"):
        await table.sync([*V1, *V1], version="1.0")
    assert await state(store) == NEW


async def test_a_claim_fenced_by_a_takeover_does_not_hold_the_changed_schedule(
    store: Store,
) -> None:
    await poller(store, "1.0", V1).poll_once()
    table = ScheduleTable(store, APP)
    row = await table.get("pulse")
    due = row.next_tick_at - 60
    await table.rewind("pulse", next_tick_at=due, next_fire_at=due)
    (claimed,) = await table.claim("w-old", lease=30.0, batch=1, version="1.0")
    # 1.1 takes over with the same timing and another message, while 1.0 holds its claim.
    v11 = [pulse(60, "pulse of 1.1")]
    new = poller(store, "1.1", v11)
    await new.poll_once(wait=True)  # syncs; the tick is due again at once, not after 30 s
    assert claimed.db_now is not None
    assert not await table.record(claimed, plan(claimed.schedule, due, claimed.db_now))
    ticks = await table.recent_ticks("pulse")
    assert [(t.tick_at, t.state.value) for t in ticks] == [(due, "SUBMITTED")]
    run = await new.path.ledger.get(ticks[0].run_id)
    assert run is not None and "pulse of 1.1" in run.request and run.app_version == "1.1"
