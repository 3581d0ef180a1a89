"""Process-level fencing of effects, with real ``durable-adk serve`` workers.

A worker frozen with SIGSTOP past its lease (both backends), and a worker cut
off by a network partition (PostgreSQL, root only), while their tool is at
work: another worker takes the run over and finishes it, and the old worker,
thawed or healed, makes no outside call at all after the takeover. PostgreSQL
stopped and started while a run is in flight: the run ends DONE with each
effect acted once.

Evidence comes from outside the workers: the fake services log every request on
arrival, with the ``X-Caller-Run`` and ``X-Caller-Epoch`` its sender put on it
(:mod:`durable_adk.chaos.app`), and the soak's observer trigger logs,
with the database clock, when each epoch of each run was claimed. Each test
also runs the soak's whole verdict (:func:`durable_adk.chaos.check.judge`).
"""

from __future__ import annotations

import signal
import socket
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from chaos_support import (
    Worker,
    describe,
    fake_services,
    launch,
    outcome,
    prepare,
    ready,
    run_row,
    stop,
    submit,
    wait_given_up,
    wait_marker,
    wait_until,
)

from durable_adk.chaos.check import TERMINAL
from durable_adk.chaos.net import Namespace, partitions_available
from durable_adk.chaos.soak import read_log, restart_postgres
from durable_adk.store import _sqlite_target
from durable_adk.testing.pg_cluster import TempPostgres
from postgres_required import postgres_or_skip

pytestmark = pytest.mark.slow

# After the old worker said it gave its drive up (its tool cancelled with it)
# and its tool's own time is over, how long a request it had already sent
# gets to reach the service (local sockets: milliseconds).
GRACE = 1.0


def finished(worker: Worker, run_id: str) -> Callable[[], dict[str, Any] | None]:
    """A poll: the run's row once it has ended, else None."""

    def check() -> dict[str, Any] | None:
        row = run_row(worker, run_id)
        return row if row is not None and row["status"] in TERMINAL else None

    return check


def held(payments: str) -> Callable[[], bool]:
    """A poll: whether payments has received epoch 1's charge (the one the cut held)."""
    return lambda: any(r.epoch == 1 and r.mutating for r in read_log("payments", payments))


def partition_test(store_url: str, tmp_path: Path) -> Path:
    """Skips without partitions; else prepares the database and returns a markers folder."""
    why = partitions_available()
    if why is not None:
        pytest.skip(why)
    prepare(store_url)
    markers = tmp_path / "markers"
    markers.mkdir()
    return markers


def cut_off_and_rescuer(
    store_url: str,
    urls: dict[str, str],
    tmp_path: Path,
    markers: Path,
    *,
    tool_seconds: float,
    gate: bool = False,
) -> tuple[Namespace, Worker, Worker]:
    """A worker in its own network namespace (``cut-off``) and one on the host (``rescuer``)."""
    ports = [urlsplit(store_url).port or 5432, *(urlsplit(u).port or 80 for u in urls.values())]
    name = f"dadk-zombie-{time.monotonic_ns() % 10**9}"
    net = Namespace(name, tmp_path / "net", ports, [_free_port()]).create()
    cut = launch(
        store_url,
        "cut-off",
        urls,
        tmp_path,
        tool_seconds=tool_seconds,
        marker_dir=markers,
        prefix=net.prefix(),
        port=net.inbound[0],
        gate=gate,
    )
    rescuer = launch(store_url, "rescuer", urls, tmp_path, tool_seconds=0.1)
    return net, cut, rescuer


def freeze(worker: Worker, store_url: str) -> None:
    """SIGSTOPs ``worker`` outside a SQLite write transaction.

    A process frozen inside a SQLite write transaction holds the database's
    write lock until it thaws or dies: no other worker can write, so none
    can take its runs over (SQLite's locking, not ours; on PostgreSQL a
    frozen session's row locks are what the lease's fence is for). Its
    transactions are short (one unit, one heartbeat), so a freeze that
    lands in one is thawed and tried again a moment later.
    """
    for _ in range(50):
        worker.signal(signal.SIGSTOP)
        if not store_url.startswith("sqlite:"):
            return
        probe = sqlite3.connect(_sqlite_target(store_url)[0], timeout=0.2)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:  # "database is locked": the frozen one holds it
            worker.signal(signal.SIGCONT)
            time.sleep(0.01)
        finally:
            probe.close()
    raise AssertionError("the worker held SQLite's write lock at each of 50 freezes")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_worker_frozen_past_its_lease_calls_out_no_more_after_takeover(
    store_url: str, tmp_path: Path
) -> None:
    prepare(store_url)
    markers = tmp_path / "markers"
    markers.mkdir()
    with fake_services(tmp_path) as urls:
        frozen = launch(store_url, "frozen", urls, tmp_path, tool_seconds=2.0, marker_dir=markers)
        rescuer = launch(store_url, "rescuer", urls, tmp_path, tool_seconds=0.1)
        try:
            ready(frozen, rescuer)
            run_id = submit(frozen, "s1", "ORD-F1")
            marker = wait_marker(markers, ".1.charge", frozen)  # epoch 1's charge is at work
            freeze(frozen, store_url)
            row = wait_until(finished(rescuer, run_id), 120, "the rescuer finishing the run")
            frozen.signal(signal.SIGCONT)
            # Thawed, it finds its lease lost and gives the drive up: then nothing of
            # the run is left in it that could call out (a non-event cannot be
            # polled for; its cause's end can).
            wait_given_up(frozen, run_id, 1)
            time.sleep(max(0.0, marker.stat().st_mtime + 2.0 - time.time()) + GRACE)
        finally:
            stop(frozen, rescuer)
        result = outcome(store_url, urls, [run_id])
    assert (row["status"], row["owner"]) == ("DONE", "rescuer"), describe(result, frozen, rescuer)
    takeover = result.takeovers[run_id][2]
    late = result.calls_of(run_id, 1, after=takeover)
    assert late == [], describe(result, frozen, rescuer)
    assert (result.acts("charge:ORD-F1"), result.acts("notify:ORD-F1")) == (1, 1)
    assert result.verdict.violations == 0, describe(result, frozen, rescuer)


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_worker_cut_off_by_a_partition_calls_out_no_more_after_takeover(
    store_url: str, tmp_path: Path
) -> None:
    markers = partition_test(store_url, tmp_path)
    with fake_services(tmp_path) as urls:
        net, cut, rescuer = cut_off_and_rescuer(
            store_url, urls, tmp_path, markers, tool_seconds=12.0
        )
        try:
            ready(cut, rescuer)
            run_id = submit(cut, "s1", "ORD-P1")
            marker = wait_marker(markers, ".1.charge", cut)
            started = marker.stat().st_mtime
            net.link(up=False)
            row = wait_until(finished(rescuer, run_id), 120, "the rescuer finishing the run")
            net.link(up=True)
            # The cut-off worker gives its drive up (its lease ran out with the
            # database out of reach) and its tool's 12 s are over: nothing of the
            # run is left in it that could call out.
            wait_given_up(cut, run_id, 1)
            time.sleep(max(0.0, started + 12.0 - time.time()) + GRACE)
        finally:
            stop(cut, rescuer)
            net.delete()
        result = outcome(store_url, urls, [run_id])
    assert (row["status"], row["owner"]) == ("DONE", "rescuer"), describe(result, cut, rescuer)
    takeover = result.takeovers[run_id][2]
    late = result.calls_of(run_id, 1, after=takeover)
    assert late == [], describe(result, cut, rescuer)
    assert (result.acts("charge:ORD-P1"), result.acts("notify:ORD-P1")) == (1, 1)
    assert result.verdict.violations == 0, describe(result, cut, rescuer)


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_request_the_partition_held_past_the_takeover_is_refused_by_the_service(
    store_url: str, tmp_path: Path
) -> None:
    """The cut-off worker sends its charge into the cut while its lease is valid.

    The network holds the request (a new connection's SYN waits for the link)
    until the partition heals, after the rescuer took the run over and
    charged: the service receives it late, its fence's valid-until has passed,
    and it is refused unacted. Zero acts after the takeover; one charge.
    """
    markers = partition_test(store_url, tmp_path)
    with fake_services(tmp_path) as urls:
        net, cut, rescuer = cut_off_and_rescuer(
            store_url, urls, tmp_path, markers, tool_seconds=0.1, gate=True
        )
        try:
            ready(cut, rescuer)
            run_id = submit(cut, "s1", "ORD-H1")
            marker = wait_marker(markers, ".1.charge", cut)
            net.link(up=False)
            marker.with_name(marker.name + ".go").touch()  # the charge goes out into the cut
            wait_until(
                lambda: (run_row(rescuer, run_id) or {}).get("epoch", 1) > 1,
                120,
                "the rescuer taking the run over",
            )
            wait_until(
                lambda: any(r.acted for r in read_log("payments", urls["payments"])),
                120,
                "the rescuer's charge",
            )
            net.link(up=True)  # the held request is delivered now, late
            wait_until(held(urls["payments"]), 60, "the held request reaching payments")
            row = wait_until(finished(rescuer, run_id), 120, "the rescuer finishing the run")
        finally:
            stop(cut, rescuer)
            net.delete()
        result = outcome(store_url, urls, [run_id])
    assert (row["status"], row["owner"]) == ("DONE", "rescuer"), describe(result, cut, rescuer)
    takeover = result.takeovers[run_id][2]
    late = result.calls_of(run_id, 1, after=takeover)
    # The held request did reach the service after the takeover...
    assert [(r.service, r.action, r.key) for r in late] == [
        ("payments", "create", "charge:ORD-H1")
    ], describe(result, cut, rescuer)
    # ...and was refused there before acting: no act after the takeover.
    (refused,) = late
    assert refused.outcome == "fenced", describe(result, cut, rescuer)
    # The rescuer's requests (epoch 2) came first, so the epoch check refuses
    # it; its valid-until had passed as well.
    assert refused.reason in ("fence_superseded", "fence_expired"), describe(result, cut, rescuer)
    assert (result.acts("charge:ORD-H1"), result.acts("notify:ORD-H1")) == (1, 1)
    assert result.verdict.violations == 0, describe(result, cut, rescuer)
    assert len(result.verdict.fenced) == 1


@pytest.fixture(scope="module")
def restarted_pg() -> Iterator[TempPostgres]:
    """One private server for the restart cases (each restarts it, on its own database):
    every case leaves it up again, as it found it."""
    postgres_or_skip()
    with TempPostgres() as pg:
        yield pg


@pytest.mark.parametrize(
    ("mode", "down"),
    [("fast", 0.5), ("immediate", 0.5), ("immediate", 3.0)],
    ids=["fast-short", "crash-short", "crash-long"],
)
def test_postgresql_restarted_mid_run_ends_done_with_each_effect_once(
    tmp_path: Path, mode: str, down: float, restarted_pg: TempPostgres
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    pg = restarted_pg
    with fake_services(tmp_path) as urls:
        db = pg.create_database(f"restart_{mode}_{round(down * 10)}")
        prepare(db)
        first = launch(db, "first", urls, tmp_path, tool_seconds=1.0, marker_dir=markers)
        second = launch(db, "second", urls, tmp_path, tool_seconds=1.0)
        try:
            ready(first, second)
            runs = [submit(first, "s1", "ORD-R1"), submit(second, "s2", "ORD-R2")]
            # a charge at work, whatever its epoch: on a loaded machine a cold first
            # drive can lose its 3 s lease before the tool starts
            wait_marker(markers, ".charge", first)
            # A short outage meets the tools' journal writes and the next ledger
            # write finds the server back; a long one outlasts the lease.
            restart_postgres(pg, mode=mode, down=down)
            rows = [wait_until(finished(second, r), 180, "the run ending") for r in runs]
        finally:
            stop(first, second)
        result = outcome(db, urls, runs)
    assert [row["status"] for row in rows] == ["DONE", "DONE"], describe(result, first, second)
    for order in ("ORD-R1", "ORD-R2"):
        assert (result.acts(f"charge:{order}"), result.acts(f"notify:{order}")) == (1, 1)
    assert result.verdict.violations == 0, describe(result, first, second)
