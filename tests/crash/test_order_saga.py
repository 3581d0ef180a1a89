"""The order saga's fault matrix on both backends, asserted on the outside world.

Real services (inventory, payments, carrier, notifications) run as processes;
the saga runs in a child process that fails or is killed; a fresh process
recovers. Whatever happened, the world must be consistent: no charge without a
shipment, no reservation leaked, every refund and release exactly once. Each
case also counts the requests that reached the services (acts, from their
request logs): the records alone cannot tell a second charge request that an
idempotency key absorbed from none.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from children import run_module
from durable_adk.adk.runs.operators import cancel_run
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.effect_tables.sagas import SagaLedger, SagaStatus
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger
from durable_adk.testing import arm
from durable_adk.testing.services import FakeService

ROOT = Path(__file__).resolve().parents[2]
DELIVERABLE = "7 Main Street, Springfield"


@dataclass
class World:
    inventory: FakeService
    payments: FakeService
    carrier: FakeService
    notifications: FakeService
    urls_file: Path

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        return {
            "reservations": self.inventory.items("reservations"),
            "charges": self.payments.items("charges"),
            "shipments": self.carrier.items("shipments"),
            "notifications": self.notifications.items("notifications"),
        }

    def acts(self) -> dict[str, int]:
        """The outside requests that reached the services, by kind (reads excluded)."""
        counted = {
            "reserve": self.inventory.acts("reservations", "create"),
            "release": self.inventory.acts("reservations", "release"),
            "charge": self.payments.acts("charges", "create"),
            "refund": self.payments.acts("charges", "refund"),
            "ship": self.carrier.acts("shipments", "create"),
            "cancel": self.carrier.acts("shipments", "cancel"),
            "notify": self.notifications.acts("notifications", "create"),
        }
        return {kind: n for kind, n in counted.items() if n}

    def assert_consistent(self, outcome: str) -> dict[str, list[dict[str, Any]]]:
        world = self.snapshot()
        reservations, charges, shipments = (
            world["reservations"],
            world["charges"],
            world["shipments"],
        )
        assert len(reservations) <= 1 and len(charges) <= 1 and len(shipments) <= 1
        assert all(r["releases"] <= 1 for r in reservations)  # released at most once
        assert all(c["refunds"] <= 1 for c in charges)  # refunded at most once
        booked = [s for s in shipments if s["status"] == "booked"]
        if outcome == "committed":
            assert [r["status"] for r in reservations] == ["held"]
            assert [c["status"] for c in charges] == ["captured"]
            assert len(booked) == 1
        else:
            assert not booked  # nothing ships
            assert all(r["status"] == "released" and r["releases"] == 1 for r in reservations)
            if outcome == "compensated":
                assert all(c["status"] == "refunded" and c["refunds"] == 1 for c in charges)
        return world


def make_world(tmp: Path, **options: dict[str, Any]) -> Iterator[World]:
    with ExitStack() as stack:
        services = {
            name: stack.enter_context(
                FakeService(name, tmp / f"{name}.db", **options.get(name, {}))
            )
            for name in ("inventory", "payments", "carrier", "notifications")
        }
        urls = tmp / "urls.json"
        urls.write_text(json.dumps({n: s.url for n, s in services.items()}))
        yield World(urls_file=urls, **services)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    yield from make_world(tmp_path)


@pytest.fixture
async def url(store_url: str) -> str:
    async with open_store(store_url):
        pass
    return store_url


def example(
    action: str, url: str, w: World, *extra: str, crash_at: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = arm(dict(os.environ), crash_at) if crash_at else dict(os.environ)
    args = [action, "--db", url, "--services", str(w.urls_file), *extra]
    return run_module("examples.order_saga.app", args, env=env, cwd=ROOT)


def last_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


async def saga_status(url: str) -> list[SagaStatus]:
    async with open_store(url) as store:
        return [s.status for s in await SagaLedger(store).list_sagas()]


async def test_order_that_cannot_ship_is_compensated(url: str, world: World) -> None:
    outcome = last_json(example("run", url, world))
    assert outcome["saga_status"] == "compensated"
    assert "does not deliver" in outcome["saga_reason"]
    seen = world.assert_consistent("compensated")
    assert [n["message"] for n in seen["notifications"]] == [
        "Sorry: order ORD-9 could not ship; you were not charged."
    ]
    assert await saga_status(url) == [SagaStatus.COMPENSATED]
    # The carrier refused the one shipment request; one refund, one release, one apology.
    assert world.acts() == {
        "reserve": 1,
        "charge": 1,
        "ship": 1,
        "refund": 1,
        "release": 1,
        "notify": 1,
    }


async def test_deliverable_order_commits(url: str, world: World) -> None:
    outcome = last_json(example("run", url, world, "--address", DELIVERABLE))
    assert outcome == {"saga_status": "committed", "saga_reason": None}
    assert world.assert_consistent("committed")["notifications"] == []  # no apology
    assert await saga_status(url) == [SagaStatus.COMMITTED]
    assert world.acts() == {"reserve": 1, "charge": 1, "ship": 1}


@pytest.mark.parametrize("failing", ["reserve", "charge"])
async def test_each_stage_failing_in_turn(url: str, tmp_path: Path, failing: str) -> None:
    service = {"reserve": "inventory", "charge": "payments"}[failing]
    for w in make_world(tmp_path, **{service: {"fail_times": 99}}):
        outcome = last_json(example("run", url, w, "--address", DELIVERABLE))
        assert outcome["saga_status"] == "compensated"
        seen = w.assert_consistent("compensated")
        assert seen["charges"] == [] and seen["shipments"] == []
        if failing == "reserve":
            assert seen["reservations"] == []
            # One refused reservation request; its lookup found nothing to undo.
            assert w.acts() == {"reserve": 1, "notify": 1}
        else:
            assert w.acts() == {"reserve": 1, "charge": 1, "release": 1, "notify": 1}


@pytest.mark.parametrize("stage", ["reserve", "charge", "ship"])
@pytest.mark.parametrize("moment", ["before_call", "after_call", "after_event"])
async def test_kill_at_every_stage_moment_then_recover(
    url: str, world: World, stage: str, moment: str
) -> None:
    crashed = example(
        "run", url, world, "--address", DELIVERABLE, crash_at=f"saga.{stage}.{moment}"
    )
    assert crashed.returncode == 137, crashed.stderr
    report = last_json(example("recover", url, world, "--address", DELIVERABLE))
    assert [r["status"] for r in report] == ["DONE"]
    world.assert_consistent("committed")
    assert await saga_status(url) == [SagaStatus.COMMITTED]
    # The journal kept the re-drive from calling out again: one request per stage.
    assert world.acts() == {"reserve": 1, "charge": 1, "ship": 1}


async def test_kill_in_the_middle_of_compensation(url: str, world: World) -> None:
    crashed = example("run", url, world, crash_at="saga.undo.charge.after")
    assert crashed.returncode == 137
    mid = world.snapshot()
    assert [c["refunds"] for c in mid["charges"]] == [1]  # refunded, then killed
    assert [r["status"] for r in mid["reservations"]] == ["held"]  # not yet released
    report = last_json(example("recover", url, world))
    assert [r["status"] for r in report] == ["DONE"]
    world.assert_consistent("compensated")  # the refund was not repeated
    assert await saga_status(url) == [SagaStatus.COMPENSATED]
    # The refund was asked for again (its step was not yet COMPENSATED when the
    # process died) under the same key, so the payments service refunded once.
    assert world.acts() == {
        "reserve": 1,
        "charge": 1,
        "ship": 1,
        "refund": 2,
        "release": 1,
        "notify": 1,
    }


async def test_compensator_failing_twice_then_succeeding(url: str, tmp_path: Path) -> None:
    for w in make_world(tmp_path, payments={"fail_actions": 2}):
        outcome = last_json(example("run", url, w))
        assert outcome["saga_status"] == "compensated"
        w.assert_consistent("compensated")
        # Two refund requests answered 503, the third refunded.
        assert w.acts() == {
            "reserve": 1,
            "charge": 1,
            "ship": 1,
            "refund": 3,
            "release": 1,
            "notify": 1,
        }


async def test_compensator_that_always_fails_is_dead_lettered(url: str, tmp_path: Path) -> None:
    for w in make_world(tmp_path, payments={"fail_actions": 99}):
        outcome = last_json(example("run", url, w))
        assert outcome["saga_status"] == "compensation_failed"
        seen = w.assert_consistent("compensation_failed")
        assert [c["status"] for c in seen["charges"]] == ["captured"]  # left for a person
        assert [r["status"] for r in seen["reservations"]] == ["released"]  # the others still ran
        async with open_store(url) as store:
            letters = await RunLedger(store).dead_letters()
        assert [d.kind for d in letters] == ["compensation"]
        assert "charge" in (letters[0].classification or "")
        assert await saga_status(url) == [SagaStatus.COMPENSATION_FAILED]
        # compensation_retries (3) refund requests, then the dead letter; no apology.
        assert w.acts() == {"reserve": 1, "charge": 1, "ship": 1, "refund": 3, "release": 1}


async def test_saga_sweeper_finishes_a_saga_no_run_will_redrive(url: str, world: World) -> None:
    crashed = example(
        "run-unmanaged", url, world, "--address", DELIVERABLE, crash_at="saga.ship.after_call"
    )
    assert crashed.returncode == 137
    assert [s["status"] for s in world.snapshot()["shipments"]] == ["booked"]
    swept = last_json(example("sweep-sagas", url, world, "--address", DELIVERABLE))
    assert [s["status"] for s in swept] == ["COMPENSATED"]
    world.assert_consistent("compensated")
    assert [s["status"] for s in world.snapshot()["shipments"]] == ["cancelled"]
    acts = {"reserve": 1, "charge": 1, "ship": 1, "cancel": 1, "refund": 1, "release": 1}
    assert world.acts() == acts
    assert last_json(example("sweep-sagas", url, world, "--address", DELIVERABLE)) == []
    assert world.acts() == acts  # the second sweep asked for nothing
    async with open_store(url) as store:
        # The outcome went into the session through its queue: one run, DONE.
        runs = await RunLedger(store).list_runs()
        assert [r.status.value for r in runs] == ["DONE"]
        sessions = DurableSessionService(store)
        session = await sessions.get_session(app_name="shop", user_id="acme", session_id="order-9")
        assert session is not None and session.state["saga_status"] == "compensated"
        assert session.events[-1].author == "order_saga"


async def test_a_saga_whose_owner_was_killed_then_cancelled_is_compensated_never_redriven(
    url: str, world: World
) -> None:
    # The worker is killed right after the charge went out; an operator then
    # cancels the run while its lease still looks live.
    crashed = example(
        "run", url, world, "--address", DELIVERABLE, crash_at="saga.charge.after_call"
    )
    assert crashed.returncode == 137, crashed.stderr
    async with open_store(url) as store:
        ledger = RunLedger(store)
        (run,) = await ledger.list_runs()
        asked = await cancel_run(ledger, run.run_id, by="ana", reason="customer called")
        assert asked.run.status.value == "RUNNING" and "recovery cancels it" in asked.message
    # A fresh worker's recovery finds the owner dead: the run is cancelled, not re-driven.
    assert last_json(example("recover", url, world, "--address", DELIVERABLE)) == []
    async with open_store(url) as store:
        after = await RunLedger(store).get(run.run_id)
        assert after is not None and after.status.value == "CANCELLED"
        assert after.epoch == run.epoch  # never claimed again
    assert world.acts() == {"reserve": 1, "charge": 1}  # nothing shipped, nothing repeated
    # The saga sweeper rolls back what the saga did: one refund, one release.
    swept = last_json(example("sweep-sagas", url, world, "--address", DELIVERABLE))
    assert [s["status"] for s in swept] == ["COMPENSATED"]
    world.assert_consistent("compensated")
    assert world.acts() == {"reserve": 1, "charge": 1, "refund": 1, "release": 1}
    async with open_store(url) as store:
        still = await RunLedger(store).get(run.run_id)
        assert still is not None and still.status.value == "CANCELLED"


async def test_a_saga_killed_mid_compensation_is_finished_across_a_deploy(
    url: str, world: World
) -> None:
    """Killed while compensating under 1.0; a pinned 1.1 worker leaves it alone, one that
    declares 1.0 compatible finishes the compensation: each undo acted on once."""
    crashed = example("run", url, world, "--app-version", "1.0", crash_at="saga.undo.charge.after")
    assert crashed.returncode == 137
    pinned = last_json(example("recover", url, world, "--app-version", "1.1"))
    assert pinned == []  # not its version: left waiting, never parked
    assert await saga_status(url) == [SagaStatus.COMPENSATING]
    report = last_json(
        example("recover", url, world, "--app-version", "1.1", "--compatible-version", "1.0")
    )
    assert [r["status"] for r in report] == ["DONE"]
    world.assert_consistent("compensated")
    assert await saga_status(url) == [SagaStatus.COMPENSATED]
    assert world.acts() == {
        "reserve": 1, "charge": 1, "ship": 1, "refund": 2, "release": 1, "notify": 1,
    }  # fmt: skip
