"""Real crashes, recovered by fresh processes, on both backends.

Each case starts a child process that drives a run through DurableRunner and
dies with os._exit(137) at a named crash point; a fresh child process (another
worker) backdates the dead worker's lease in the database and sweeps once. The
assertions read the ledger and the event log afterwards, and the outside
world: the demo's ``check_stock`` reads a fake inventory service (a real
process) before it answers, tagged with the worker's id, so each case also
says how many times, and in which worker, the tool really ran.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from children import run_module
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.demo import recovery_demo as demo
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.testing import arm
from durable_adk.testing.services import FakeService

MODULE = "durable_adk.demo.recovery_demo"


def child(args: list[str], crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = arm(dict(os.environ), crash_at) if crash_at else dict(os.environ)
    return run_module(MODULE, args, env=env)


def recover(url: str, *extra: str, crash_at: str | None = None) -> list[dict[str, Any]]:
    done = child(["recover", "--db", url, *extra], crash_at)
    if crash_at:
        assert done.returncode == 137, done.stderr
        return []
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


async def facts(url: str, session_id: str) -> dict[str, Any]:
    async with open_store(url) as store:
        session = await DurableSessionService(store).get_session(
            app_name=demo.APP_NAME, user_id=demo.USER_ID, session_id=session_id
        )
        runs = [r for r in await RunLedger(store).list_runs() if r.session_id == session_id]
        letters = await RunLedger(store).dead_letters()
    assert session is not None
    calls = [c for e in session.events for c in e.get_function_calls()]
    responses = [r for e in session.events for r in e.get_function_responses()]
    finals = [
        e
        for e in session.events
        if e.author == "assistant" and e.content and e.content.parts and e.content.parts[0].text
    ]
    return {
        "status": [r.status for r in runs],
        "calls": [c.id for c in calls],
        "responses": [r.id for r in responses],
        "finals": len(finals),
        "dead_letters": [d for d in letters if d.run_id in {r.run_id for r in runs}],
        "state": session.state,
    }


@pytest.fixture
def inventory(tmp_path: Path) -> Iterator[FakeService]:
    with FakeService("inventory", tmp_path / "inventory.db") as service:
        yield service


def tool_runs(inventory: FakeService) -> list[str | None]:
    """The workers whose check_stock reached the warehouse, in order."""
    return [r.caller.get("worker") for r in inventory.requests("reservations", "lookup")]


@pytest.fixture
async def url(store_url: str) -> str:
    async with open_store(store_url):
        pass  # schema first, so child processes never race to create it
    return store_url


@pytest.mark.parametrize(
    ("point", "expected_class", "runs", "mode"),
    [
        ("runner.before_first_event", "NOT_STARTED", ["worker-B"], []),
        ("demo.in_model_call", "MODEL_INFLIGHT", ["worker-A"], []),  # answered: not run again
        # The crash came after the tool's outside read; check_stock is declared
        # idempotent, so the fresh worker runs it again: two reads are expected.
        ("demo.in_check_stock", "TOOL_UNANSWERED", ["worker-A", "worker-B"], []),
        # Barrier commits write the final answer in the finish's own unit: a
        # kill before that unit loses the answer (asked again), never an act.
        ("runner.before_finish", "MODEL_INFLIGHT", ["worker-A"], []),
        # One unit per event: the answer is stored, the row not finished yet.
        ("runner.before_finish", "ACTUALLY_DONE", ["worker-A"], ["--per-event"]),
    ],
)
async def test_each_crash_window_is_recovered_to_done(
    url: str,
    inventory: FakeService,
    point: str,
    expected_class: str,
    runs: list[str],
    mode: list[str],
) -> None:
    shop = ["--inventory", inventory.url]
    crashed = child(["run", "--db", url, "--session", "s1", *mode, *shop], point)
    assert crashed.returncode == 137, crashed.stderr
    report = recover(url, *shop)
    assert [(r["found"], r["status"]) for r in report] == [(expected_class, "DONE")]
    seen = await facts(url, "s1")
    assert seen["status"] == [RunStatus.DONE]
    assert seen["finals"] == 1  # the answer was given once, never twice
    assert len(seen["calls"]) == 1 and seen["calls"] == seen["responses"]  # one call, answered once
    assert seen["state"] == {"stock:lamp": 7}
    assert recover(url, *shop) == []  # nothing left to recover
    assert tool_runs(inventory) == runs
    assert inventory.acts() == 0  # a read-only tool: no act at all


async def test_unanswered_call_of_an_unsafe_tool_is_parked_with_a_dead_letter(
    url: str, inventory: FakeService
) -> None:
    shop = ["--inventory", inventory.url]
    crashed = child(
        ["run", "--db", url, "--session", "s1", "--unsafe", *shop], "demo.in_check_stock"
    )
    assert crashed.returncode == 137
    report = recover(url, "--unsafe", *shop)
    assert [(r["found"], r["action"], r["status"]) for r in report] == [
        ("TOOL_UNANSWERED", "park", "PARKED")
    ]
    seen = await facts(url, "s1")
    assert seen["status"] == [RunStatus.PARKED]
    assert seen["responses"] == []  # the tool was not run again
    assert tool_runs(inventory) == ["worker-A"]  # not even without an answer
    (letter,) = seen["dead_letters"]
    assert "outcome unknown" in letter.error and letter.classification == "TOOL_UNANSWERED"
    assert json.loads(letter.request)["parts"][0]["text"] == "Any lamps?"
    assert json.loads(letter.last_events)


async def test_poison_run_is_parked_after_three_attempts_while_others_finish(
    url: str, inventory: FakeService
) -> None:
    shop = ["--inventory", inventory.url]
    poison = child(["run", "--db", url, "--session", "poison", *shop], "demo.in_check_stock")
    assert poison.returncode == 137
    # Every worker that re-drives it dies in the tool again.
    recover(url, "--worker", "w2", *shop, crash_at="demo.in_check_stock")
    recover(url, "--worker", "w3", *shop, crash_at="demo.in_check_stock")
    assert child(["run", "--db", url, "--session", "healthy", *shop]).returncode == 0
    report = recover(url, "--worker", "w4", *shop)
    assert [(r["session"], r["action"], r["status"]) for r in report] == [
        ("poison", "park", "PARKED")
    ]
    seen = await facts(url, "poison")
    assert seen["status"] == [RunStatus.PARKED]
    (letter,) = seen["dead_letters"]
    assert "gave up after 3 attempts" in letter.error
    assert (await facts(url, "healthy"))["status"] == [RunStatus.DONE]
    # Three attempts at the poison run (each died after its read), one healthy
    # run; the worker that parked the poison run did not run the tool again.
    assert tool_runs(inventory) == ["worker-A", "w2", "w3", "worker-A"]
