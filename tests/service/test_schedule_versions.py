"""Schedules belong to a version; one-off commands never sync them; only live workers serve
(issue 41). Real ``durable-adk serve`` workers and real kills, both backends.

The app (``versioned_schedules_app``) declares ``pulse`` every 3 s under 1.0,
and under 2.0 ``pulse`` every 2 s with another message plus a new ``fresh``
every 2 s. Ticks are counted by the runs they started (the ledger and the
``schedule_ticks`` rows): a tick missing from the 2 s rhythm is a lost tick, a
run carrying 1.0's message after 2.0 took over is a tick fired with the old
definition.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from svc_support import AUTH, TOKEN, ServeProcess, wait_ready

from children import run_child, spawn
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.tables.schedules import ScheduleTable
from durable_adk.tables.versions import VersionTable

HERE = Path(__file__).parent
APP = "root"
MODULE = "versioned_schedules_app:root_agent"
T = TypeVar("T")


@pytest.fixture
def workers() -> Iterator[list[ServeProcess]]:
    started: list[ServeProcess] = []
    yield started
    for worker in started:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait()


def serve(
    started: list[ServeProcess], db: str, worker_id: str, version: str, declared: str
) -> ServeProcess:
    """``durable-adk serve`` of the app as version ``version`` with the set ``declared``."""
    command = [
        sys.executable, "-m", "durable_adk.cli", "serve", MODULE, "--db", db, "--port", "0",
        "--token", TOKEN, "--worker-id", worker_id, "--app-version", version,
        "--lease", "2", "--sweep-interval", "0.2", "--drain-seconds", "1",
    ]  # fmt: skip
    process = spawn(
        command,
        env={**os.environ, "DADK_SCHEDULES": declared},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=HERE,
    )
    worker = wait_ready(process)
    started.append(worker)
    return worker


def on(db: str, work: Callable[[Any], Any]) -> Any:
    async def main() -> Any:
        async with open_store(db) as store:
            return await work(store)

    return asyncio.run(main())


def until(what: str, check: Callable[[], T | None], timeout: float = 120.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.2)


def in_force(db: str) -> Any:
    return on(db, lambda store: ScheduleTable(store, APP).in_force())  # type: ignore[no-any-return]


def rows(db: str) -> dict[str, dict[str, Any]]:
    async def work(store: Any) -> dict[str, dict[str, Any]]:
        listed = await ScheduleTable(store, APP).list_schedules()
        return {r.name: {**r.describe(), "message": r.schedule.message} for r in listed}

    return on(db, work)  # type: ignore[no-any-return]


def db_now(db: str) -> float:
    return float(on(db, lambda store: store.now()))


def fired(db: str, name: str) -> list[dict[str, Any]]:
    """The ticks of a schedule, oldest first, each with its run's status, version and message."""

    async def work(store: Any) -> list[dict[str, Any]]:
        ledger = RunLedger(store)
        found = []
        for tick in reversed(await ScheduleTable(store, APP).recent_ticks(name, limit=500)):
            run = await ledger.get(tick.run_id)
            found.append(
                {
                    "at": tick.tick_at,
                    "state": tick.state.value,
                    "status": None if run is None else run.status,
                    "version": None if run is None else run.app_version,
                    "request": "" if run is None else run.request,
                }
            )
        return found

    return on(db, work)  # type: ignore[no-any-return]


def restart_killed(
    started: list[ServeProcess], old: ServeProcess, db: str, worker_id: str
) -> ServeProcess:
    old.process.kill()
    old.process.wait()
    return serve(started, db, worker_id, "1.0", "1.0")


def left_alone(db: str, old: ServeProcess, says: str) -> None:
    """Waits until the restarted old worker has checked the set in force (or its drain)
    and left 2.0's schedules alone (it ``says`` so, once), and then for a tick
    recorded after that: its polls had their round beside the 2.0 worker's."""
    until(
        f"the old worker saying {says!r}",
        lambda: any(says in line for line in old.lines),
    )
    since = db_now(db)
    until(
        "a tick after that",
        lambda: any(t["at"] > since for name in ("fresh", "pulse") for t in fired(db, name)),
    )


def has_2_0_set(db: str) -> bool:
    found = rows(db)
    return {n: (r["state"], r["message"]) for n, r in found.items()} == {
        "pulse": ("active", "pulse of 2.0"),
        "fresh": ("active", "fresh of 2.0"),
    }


def assert_2_0_in_force(db: str) -> None:
    found = rows(db)
    assert {n: (r["state"], r["message"], r["every_seconds"]) for n, r in found.items()} == {
        "pulse": ("active", "pulse of 2.0", 2.0),
        "fresh": ("active", "fresh of 2.0", 2.0),
    }
    # Each row, and the set, record the version that declared them.
    assert [r.get("app_version") for r in found.values()] == ["2.0", "2.0"]
    current = in_force(db)
    assert current is not None and current.version == "2.0", current


def assert_every_tick_once(db: str, name: str, since: float, up_to: float, message: str) -> None:
    """Every 2 s tick in (since, up_to] fired once, by 2.0, with 2.0's definition, and ended."""
    ticks = [t for t in fired(db, name) if since < t["at"] <= up_to]
    times = [t["at"] for t in ticks]
    expected = [float(s) for s in range(int(since) + 1, int(up_to) + 1) if s % 2 == 0]
    assert times == expected, f"{name}: lost or doubled ticks: {times} != {expected}"
    for tick in ticks:
        assert tick["state"] == "SUBMITTED" and tick["status"] is RunStatus.DONE, tick
        assert tick["version"] == "2.0" and message in tick["request"], tick


def test_an_old_worker_restarting_mid_rollout_never_rewrites_the_new_versions_schedules(
    store_url: str, workers: list[ServeProcess]
) -> None:
    db = store_url
    first = serve(workers, db, "w-old", "1.0", "1.0")
    until("1.0's schedules synced", lambda: "pulse" in rows(db))
    serve(workers, db, "w-new", "2.0", "2.0")
    until("2.0 took the schedules over", lambda: has_2_0_set(db))
    assert_2_0_in_force(db)
    took_over = db_now(db)

    # An older worker (1.0, still taking runs) restarts: it leaves 2.0's set alone.
    again = restart_killed(workers, first, db, "w-old-2")
    left_alone(db, again, "1.0 leaves those of 2.0 in force")  # drain check, set check
    assert_2_0_in_force(db)

    # 1.0 is drained (the rollout goes on); its worker restarts once more.
    with httpx.Client(base_url=workers[1].base_url, headers=AUTH, timeout=30) as client:
        drained = client.post("/v1/versions/1.0/drain", json={"by": "ops"})
        assert drained.status_code == 200, drained.text
    left_alone(db, restart_killed(workers, again, db, "w-old-3"), "1.0 is drained")
    assert_2_0_in_force(db)

    # Not a tick lost nor fired with 1.0's definition, the new schedule included.
    up_to = db_now(db) - 2  # the ticks of the last 2 s may still be running
    until(
        "the ticks' runs ended",
        lambda: all(
            t["status"] is RunStatus.DONE
            for name in ("fresh", "pulse")
            for t in fired(db, name)
            if t["at"] <= up_to
        ),
    )
    assert_every_tick_once(db, "fresh", took_over + 2, up_to, "fresh of 2.0")
    assert_every_tick_once(db, "pulse", took_over + 2, up_to, "pulse of 2.0")
    # The operator sees which version's schedules are in force.
    listing = run_child(
        [sys.executable, "-m", "durable_adk.cli", "schedules", "list", "--app", APP,
         "--db", db, "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert listing.returncode == 0, listing.stderr
    assert [(s["name"], s["app_version"]) for s in json.loads(listing.stdout)["items"]] == [
        ("fresh", "2.0"),
        ("pulse", "2.0"),
    ]


def test_a_one_off_recover_never_syncs_nor_re_times_the_fleets_schedules(
    store_url: str, workers: list[ServeProcess]
) -> None:
    db = store_url
    serve(workers, db, "w-1", "2.0", "2.0")
    until("2.0's schedules synced", lambda: has_2_0_set(db))
    synced = db_now(db)
    # A shell whose module declares another timing for `pulse` runs one pass.
    recover = run_child(
        [sys.executable, "-m", "durable_adk.cli", "recover", MODULE, "--db", db,
         "--app-version", "2.0", "--json"],
        env={**os.environ, "DADK_SCHEDULES": "1.0"},
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert recover.returncode == 0, recover.stdout + recover.stderr
    json.loads(recover.stdout)
    assert_2_0_in_force(db)
    # The ticks up to one after the pass came in 2.0's rhythm, with its definition.
    recovered = db_now(db)
    up_to = until(
        "a tick after the pass",
        lambda: max((t["at"] for t in fired(db, "pulse") if t["at"] > recovered), default=None),
    )
    assert_2_0_in_force(db)
    until(
        "the ticks' runs ended",
        lambda: all(t["status"] is RunStatus.DONE for t in fired(db, "pulse") if t["at"] <= up_to),
    )
    assert_every_tick_once(db, "pulse", synced + 2, up_to, "pulse of 2.0")


def listed_workers(db: str) -> dict[str, list[str]]:
    async def work(store: Any) -> dict[str, list[str]]:
        report = await VersionTable(store, APP).report()
        return {v.version: sorted(v.own_workers) for v in report}

    return on(db, work)  # type: ignore[no-any-return]


def test_versions_list_shows_only_live_serving_workers(
    store_url: str, workers: list[ServeProcess]
) -> None:
    db = store_url
    stopped = serve(workers, db, "w-stopped", "1.0", "1.0")
    killed = serve(workers, db, "w-killed", "1.0", "1.0")
    until(
        "both workers listed",
        lambda: listed_workers(db).get("1.0") == ["w-killed", "w-stopped"],
    )
    # 1.0 keeps its line once it has a run (a tick of `pulse`, every 3 s): the
    # line the end of this test reads, with its workers gone. (Started by exec,
    # the children below took long enough for a tick; forked, they may not.)
    until("a run of 1.0", lambda: any(t["version"] == "1.0" for t in fired(db, "pulse")))
    # A one-off recover pass is not a server.
    recover = run_child(
        [sys.executable, "-m", "durable_adk.cli", "recover", MODULE, "--db", db,
         "--app-version", "1.0", "--worker-id", "one-off"],
        env={**os.environ, "DADK_SCHEDULES": "1.0"},
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert recover.returncode == 0, recover.stdout + recover.stderr
    assert listed_workers(db)["1.0"] == ["w-killed", "w-stopped"]

    # A stopped worker says goodbye: gone as soon as it has exited.
    stopped.process.terminate()
    assert stopped.process.wait(30) == 0
    assert listed_workers(db)["1.0"] == ["w-killed"]

    # A killed one drops out after one missed beat (it beats every 2 s here: gone
    # within 4 s of its last beat; before, a beat counted for 30 s and more).
    killed.process.kill()
    killed.process.wait()
    gone_at = time.monotonic()
    until("the killed worker dropped out", lambda: not listed_workers(db).get("1.0"), 15)
    assert time.monotonic() - gone_at < 8
    code = run_child(
        [sys.executable, "-m", "durable_adk.cli", "versions", "list", "--app", APP,
         "--db", db, "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert code.returncode == 0, code.stderr
    (line,) = json.loads(code.stdout)["items"]
    assert line["version"] == "1.0" and line["own_workers"] == [], line
