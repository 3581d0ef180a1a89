"""Seed 000's worked example, on both backends, with real kills and real services.

Each case kills the invoicing flow's process at one window, lets a fresh
process recover it, and counts invoices and notifications in the fake billing
and notification services (separate processes with their own SQLite files).

Records alone prove little: the services dedupe by key, so a tool re-run with
the same key leaves one invoice. Each case therefore also counts the acts, the
create requests the services received (deduplicated or not), and which worker
sent them (the example tags its requests with ``X-Caller-Worker``): the
crashed ``worker-A`` or the recovering ``worker-B``.
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
from durable_adk.adk.runs.operators import resolve_run
from durable_adk.effect_tables.journal import Journal, JournalStatus
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.testing import arm
from durable_adk.testing.services import FakeService, RequestRecord

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def services(tmp_path: Path) -> Iterator[tuple[FakeService, FakeService]]:
    with (
        FakeService("billing", tmp_path / "billing.db") as billing,
        FakeService("notifications", tmp_path / "notify.db") as notify,
    ):
        yield billing, notify


@pytest.fixture
def no_lookup_billing(tmp_path: Path) -> Iterator[FakeService]:
    with FakeService("billing", tmp_path / "billing-nolookup.db", lookup=False) as billing:
        yield billing


def example(*args: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = arm(dict(os.environ), crash_at) if crash_at else dict(os.environ)
    return run_module("examples.invoicing.app", args, env=env, cwd=ROOT)


def calls(service: FakeService) -> list[tuple[str | None, str | None, str | None]]:
    """Every request but the test's own reads: (worker, action, outcome), in order."""
    return [(r.caller.get("worker"), r.action, r.outcome) for r in service.requests() if _tool(r)]


def _tool(record: RequestRecord) -> bool:
    return "worker" in record.caller


async def ledger_status(url: str) -> list[RunStatus]:
    async with open_store(url) as store:
        return [r.status for r in await RunLedger(store).list_runs()]


@pytest.fixture
async def url(store_url: str) -> str:
    async with open_store(store_url):
        pass
    return store_url


@pytest.mark.parametrize(
    ("window", "point", "expected_class"),
    [
        ("W1", "runner.before_first_event", "NOT_STARTED"),
        ("W2", "invoicing.draft_model", "MODEL_INFLIGHT"),
        # The model's call to send_invoice is written with the journal's
        # intent (one unit): a kill before the intent loses the call too, so
        # the model is asked again. With one unit per event the call is
        # stored alone first: the per-event row below.
        ("W3", "journal.before_intent", "MODEL_INFLIGHT"),
        ("W3-per-event", "journal.before_intent", "TOOL_UNANSWERED"),
        ("W4", "journal.after_act", "TOOL_UNANSWERED"),
        # Both effects are stored; the final answer is written with the finish
        # (one unit), so a kill before it loses only the answer: asked again.
        ("W5", "runner.before_finish", "MODEL_INFLIGHT"),
    ],
)
async def test_every_window_ends_with_one_invoice_one_notification_done(
    url: str,
    services: tuple[FakeService, FakeService],
    window: str,
    point: str,
    expected_class: str,
) -> None:
    billing, notify = services
    urls = ["--billing", billing.url, "--notify", notify.url]
    per_event = ["--per-event"] if window.endswith("per-event") else []
    crashed = example("run", "--db", url, "--session", "s1", *urls, *per_event, crash_at=point)
    assert crashed.returncode == 137, crashed.stderr
    if window == "W4":
        assert billing.count("invoices") == 1  # the invoice went out before the crash
        assert billing.acts("invoices", "create") == 1
    report: list[dict[str, Any]] = json.loads(
        example("recover", "--db", url, *urls).stdout.strip().splitlines()[-1]
    )
    assert [(r["found"], r["status"]) for r in report] == [(expected_class, "DONE")]
    assert billing.count("invoices") == 1
    assert notify.count("notifications") == 1
    # One create request per effect, whoever sent it: a second send_invoice with
    # the same key would leave one invoice, but not one act.
    assert billing.acts() == 1 and notify.acts() == 1, (calls(billing), calls(notify))
    if window == "W4":
        # The invoice went out before the crash; the fresh worker found it by
        # its key (one lookup that answered) instead of sending it again.
        assert calls(billing) == [
            ("worker-A", "create", "created"),
            ("worker-B", "lookup", "found"),
        ]
    elif window == "W5":
        # Both effects went out before the crash; the fresh worker called nothing.
        assert calls(billing) == [("worker-A", "create", "created")]
        assert calls(notify) == [("worker-A", "create", "created")]
    else:
        # The crash came before the invoice: only the fresh worker sent it, once.
        assert calls(billing) == [("worker-B", "create", "created")]
    if window != "W5":
        assert calls(notify) == [("worker-B", "create", "created")]
    (invoice,) = billing.items("invoices")
    assert invoice["invoice_id"] == "INV-77" and invoice["idempotency_key"] == "send-invoice:INV-77"
    assert await ledger_status(url) == [RunStatus.DONE]


def kill_after_the_invoice_then_recover(url: str, urls: list[str]) -> list[dict[str, Any]]:
    """Kills the worker right after the invoice went out (W4); a fresh one recovers."""
    crashed = example("run", "--db", url, "--session", "s1", *urls, crash_at="journal.after_act")
    assert crashed.returncode == 137
    report: list[dict[str, Any]] = json.loads(
        example("recover", "--db", url, *urls).stdout.strip().splitlines()[-1]
    )
    return report


async def test_billing_without_lookup_parks_the_run_at_w4(
    url: str, no_lookup_billing: FakeService, services: tuple[FakeService, FakeService]
) -> None:
    _, notify = services
    urls = ["--billing", no_lookup_billing.url, "--notify", notify.url]
    report = kill_after_the_invoice_then_recover(url, urls)
    assert [(r["found"], r["action"], r["status"]) for r in report] == [
        ("TOOL_UNANSWERED", "park", "PARKED")
    ]
    assert "outcome unknown" in report[0]["reason"]
    assert no_lookup_billing.count("invoices") == 1  # never a second guess
    assert notify.count("notifications") == 0
    # One create (before the crash), one lookup the service could not answer,
    # and no second create: the run was parked instead of guessing.
    assert calls(no_lookup_billing) == [
        ("worker-A", "create", "created"),
        ("worker-B", "lookup", "error"),
    ]
    assert no_lookup_billing.acts() == 1 and notify.acts() == 0
    async with open_store(url) as store:
        (letter,) = await RunLedger(store).dead_letters()
    assert "outcome unknown" in letter.error and "send-invoice:INV-77" in letter.error


async def test_resolving_a_run_parked_on_a_journaled_effect_continues_it_from_the_journal(
    url: str, no_lookup_billing: FakeService, services: tuple[FakeService, FakeService]
) -> None:
    _, notify = services
    urls = ["--billing", no_lookup_billing.url, "--notify", notify.url]
    parked = kill_after_the_invoice_then_recover(url, urls)
    assert [r["status"] for r in parked] == ["PARKED"]
    # The operator looked the invoice up in billing by hand and gives what it holds.
    (invoice,) = no_lookup_billing.items("invoices")
    async with open_store(url) as store:
        ledger = RunLedger(store)
        (run,) = await ledger.list_runs()
        first = await resolve_run(
            ledger, run.run_id, by="ana", reason="found it in billing", result=invoice
        )
        assert first.changed and first.run.status is RunStatus.QUEUED
        assert "in the journal, under send-invoice:INV-77" in first.message
        entry = await Journal(store).get("send-invoice:INV-77")
        assert entry is not None and entry.status is JournalStatus.DONE
        assert entry.resolved_by == "ana" and entry.result == invoice
        again = await resolve_run(ledger, run.run_id, by="bo", result=invoice)
        assert not again.changed and "already resolved by ana" in again.message
        (action,) = [a for a in await ledger.actions(run_id=run.run_id) if a.action == "resolve"]
        assert action.actor == "ana" and json.loads(action.detail or "{}")["journal"]
    report = json.loads(example("recover", "--db", url, *urls).stdout.strip().splitlines()[-1])
    assert [(r["found"], r["status"]) for r in report] == [("TOOL_UNANSWERED", "DONE")]
    # The re-drive's send_invoice was answered from the journal: billing saw no
    # second create (nor even a lookup); the run went on and notified once.
    assert calls(no_lookup_billing) == [
        ("worker-A", "create", "created"),
        ("worker-B", "lookup", "error"),
    ]
    assert no_lookup_billing.acts() == 1 and no_lookup_billing.count("invoices") == 1
    assert notify.acts() == 1 and notify.count("notifications") == 1
    assert await ledger_status(url) == [RunStatus.DONE]


async def test_control_keyed_by_call_id_sends_a_second_invoice(
    url: str, services: tuple[FakeService, FakeService]
) -> None:
    billing, _ = services
    args = ["--db", url, "--session", "c1", "--billing", billing.url]
    crashed = example("control-crash", *args, crash_at="journal.after_act")
    assert crashed.returncode == 137, crashed.stderr
    assert billing.count("invoices") == 1
    assert billing.acts("invoices", "create") == 1
    redriven = example("control-redrive", *args)
    assert redriven.returncode == 0, redriven.stderr
    # The re-asked model made a new call id, so the call-id key missed: twice.
    assert billing.count("invoices") == 2
    assert len({i["idempotency_key"] for i in billing.items("invoices")}) == 2
    # Two create requests under two keys: the double act the call-id key let through.
    assert billing.acts("invoices", "create") == 2
    keys = [r.key for r in billing.requests("invoices", "create")]
    assert len(set(keys)) == 2
