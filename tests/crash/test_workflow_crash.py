"""Crash matrix of a Workflow root (examples/approvals), both backends, real kills.

The graph: an idempotent FunctionNode (intake), an LlmAgent node (clerk) with a
journaled tool (reserve_stock -> inventory), and a node that a person approves
before it charges (charge -> payments): journaled (``journaled_node``), or
plain (``--plain-charge``, the control). Each case kills the worker's process
at one point (``os._exit(137)``), lets a fresh process recover, and checks the
outside world (the fake services' request logs: acts, and who made them), the
stored answers (one final answer by the clerk, every call answered) and the
run's end state.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from examples.approvals.app import APP_NAME, USER_ID, make_runner

from children import run_module
from durable_adk.adk.eventlog.classify import OrphanClass
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.testing import arm
from durable_adk.testing.services import FakeService

ROOT = Path(__file__).resolve().parents[2]
SESSION = "order-7"
ANSWER = "Reserved 2 lamps for ORD-7."
# The turn that paused on the approval follows its invocation to DONE when the
# approval's own run finishes it (the interrupts inbox closes paused runs).
PAUSED_THEN_APPROVED = [RunStatus.DONE, RunStatus.DONE]


@pytest.fixture
def services(tmp_path: Path) -> Iterator[tuple[FakeService, FakeService]]:
    with (
        FakeService("inventory", tmp_path / "inventory.db") as inventory,
        FakeService("payments", tmp_path / "payments.db") as payments,
    ):
        yield inventory, payments


@pytest.fixture
async def url(store_url: str) -> str:
    async with open_store(store_url):
        pass
    return store_url


def example(
    action: str,
    url: str,
    services: tuple[FakeService, FakeService],
    *extra: str,
    crash_at: str | None = None,
) -> subprocess.CompletedProcess[str]:
    inventory, payments = services
    args = [action, "--db", url, "--inventory", inventory.url, "--payments", payments.url, *extra]
    if action != "recover":
        args += ["--session", SESSION]
    env = arm(dict(os.environ), crash_at) if crash_at else dict(os.environ)
    return run_module("examples.approvals.app", args, env=env, cwd=ROOT)


def recover(url: str, services: tuple[FakeService, FakeService], *extra: str) -> list[Any]:
    done = example("recover", url, services, *extra)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def calls(service: FakeService) -> list[tuple[str | None, str | None, str | None]]:
    """The example's requests (the test's own reads aside): (worker, action, outcome)."""
    return [
        (r.caller.get("worker"), r.action, r.outcome)
        for r in service.requests()
        if "worker" in r.caller
    ]


async def stored_answers(url: str, services: tuple[FakeService, FakeService]) -> dict[str, Any]:
    """What the session holds: the clerk's answers and the classifier's verdict on it."""
    inventory, payments = services
    async with open_store(url) as store:
        session = await DurableSessionService(store).get_session(
            app_name=APP_NAME, user_id=USER_ID, session_id=SESSION
        )
        assert session is not None
        runner = make_runner(store, "reader", inventory.url, payments.url)
        invocations = list(dict.fromkeys(e.invocation_id for e in session.events))
        verdicts = [runner.classify(session.events, i).cls for i in invocations]
        statuses = [r.status for r in await RunLedger(store).list_runs()]
    texts = [
        part.text
        for event in session.events
        if event.author == "clerk" and event.content
        for part in event.content.parts or ()
        if part.text
    ]
    return {"answers": texts, "verdicts": verdicts, "statuses": statuses}


async def approve_and_check(url: str, services: tuple[FakeService, FakeService]) -> None:
    """The person approves; the order ends with one reservation, one charge, one answer."""
    inventory, payments = services
    approved = example("approve", url, services)
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.strip().splitlines()[-1] == "DONE"
    assert inventory.acts("reservations", "create") == 1
    assert payments.acts("charges", "create") == 1
    assert [c["idempotency_key"] for c in payments.items("charges")] == ["charge:ORD-7"]
    stored = await stored_answers(url, services)
    assert stored["answers"] == [ANSWER]
    assert stored["verdicts"] == [OrphanClass.ACTUALLY_DONE]
    assert sorted(stored["statuses"]) == PAUSED_THEN_APPROVED


@pytest.mark.parametrize(
    ("point", "found", "reservations"),
    [
        # Before the tool acted: only the fresh worker reserves.
        ("journal.before_intent", "TOOL_UNANSWERED", [("worker-B", "create", "created")]),
        # The tool acted, its answer was never stored: ADK alone would write the node's
        # end marker over the call; the fresh worker answers it first, from a lookup.
        (
            "journal.after_act",
            "TOOL_UNANSWERED",
            [("worker-A", "create", "created"), ("worker-B", "lookup", "found")],
        ),
        # The answer is stored, the model not yet asked again.
        ("approvals.clerk_answer", "MODEL_INFLIGHT", [("worker-A", "create", "created")]),
        # Everything up to the approval request is stored; the ledger was not finished.
        ("runner.before_finish", "PAUSED", [("worker-A", "create", "created")]),
    ],
)
async def test_agent_node_with_a_journaled_tool_survives_each_kill(
    url: str,
    services: tuple[FakeService, FakeService],
    point: str,
    found: str,
    reservations: list[tuple[str, str, str]],
) -> None:
    inventory, payments = services
    crashed = example("run", url, services, crash_at=point)
    assert crashed.returncode == 137, crashed.stderr
    report = recover(url, services)
    assert [(r["found"], r["status"]) for r in report] == [(found, "PAUSED")], report
    assert calls(inventory) == reservations
    # Paused on the approval: nothing charged yet.
    assert payments.acts() == 0
    await approve_and_check(url, services)
    assert calls(inventory) == reservations  # approving reserved nothing again


@pytest.mark.parametrize(
    ("point", "charges"),
    [
        ("journal.before_intent", [("worker-B", "create", "created")]),
        # The charge went out, the node's output was never stored: the re-run node
        # finds its intent in the journal and looks the charge up instead.
        ("journal.after_act", [("worker-A", "create", "created"), ("worker-B", "lookup", "found")]),
        ("runner.before_finish", [("worker-A", "create", "created")]),
    ],
)
async def test_journaled_function_node_charges_once_after_each_kill(
    url: str,
    services: tuple[FakeService, FakeService],
    point: str,
    charges: list[tuple[str, str, str]],
) -> None:
    inventory, payments = services
    paused = example("run", url, services)
    assert paused.stdout.strip().splitlines()[-1] == "PAUSED", paused.stdout
    crashed = example("approve", url, services, crash_at=point)
    assert crashed.returncode == 137, crashed.stderr
    report = recover(url, services)
    assert [r["status"] for r in report] == ["DONE"], report
    assert calls(payments) == charges
    assert payments.acts("charges", "create") == 1
    assert inventory.acts("reservations", "create") == 1
    stored = await stored_answers(url, services)
    assert stored["answers"] == [ANSWER]
    assert stored["verdicts"] == [OrphanClass.ACTUALLY_DONE]
    assert sorted(stored["statuses"]) == PAUSED_THEN_APPROVED


async def test_plain_function_node_killed_after_its_effect_is_parked_not_rerun(
    url: str, services: tuple[FakeService, FakeService]
) -> None:
    inventory, payments = services
    paused = example("run", url, services, "--plain-charge")
    assert paused.stdout.strip().splitlines()[-1] == "PAUSED", paused.stdout
    crashed = example(
        "approve", url, services, "--plain-charge", crash_at="approvals.charge_after_act"
    )
    assert crashed.returncode == 137, crashed.stderr
    report = recover(url, services, "--plain-charge")
    # Found by its checkpoint (NODE_INFLIGHT) or, when the worker died before ADK
    # stored the node's RUNNING checkpoint, by its start record on the re-run.
    assert [(r["action"], r["status"]) for r in report] == [("park", "PARKED")], report
    assert report[0]["found"] in ("NODE_INFLIGHT", "MODEL_INFLIGHT")
    assert "node in flight: fulfilment/charge" in report[0]["reason"]
    assert calls(payments) == [("worker-A", "create", "created")]  # never a second charge
    assert payments.acts() == 1 and inventory.acts("reservations", "create") == 1
    async with open_store(url) as store:
        (letter,) = await RunLedger(store).dead_letters()
    assert "node in flight: fulfilment/charge" in letter.error
    assert letter.classification == "NODE_INFLIGHT"
    # A second sweep finds nothing to do: the run waits for a person.
    assert recover(url, services, "--plain-charge") == []
    assert payments.acts() == 1


async def test_plain_function_node_killed_before_its_effect_runs_once(
    url: str, services: tuple[FakeService, FakeService]
) -> None:
    _, payments = services
    example("run", url, services, "--plain-charge")
    crashed = example("approve", url, services, "--plain-charge", crash_at="journal.before_intent")
    assert crashed.returncode == 137, crashed.stderr
    report = recover(url, services, "--plain-charge")
    assert [r["status"] for r in report] == ["DONE"], report
    assert calls(payments) == [("worker-B", "create", "created")]
    stored = await stored_answers(url, services)
    assert stored["answers"] == [ANSWER]
    assert sorted(stored["statuses"]) == PAUSED_THEN_APPROVED
