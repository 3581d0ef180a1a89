"""The demo's tour: the worked examples, each killed for real and recovered by a fresh process.

``durable-adk demo`` runs :func:`run`. It lives with the demos (which use the
testing kit's scripted model and fake services by design), so the CLI's own
module imports nothing from :mod:`durable_adk.testing`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from rich.console import Console
from rich.table import Table

from durable_adk.demo.saga_demo import run_saga_demo
from durable_adk.faults import EXIT_CODE, arm
from durable_adk.store.migrate import redact
from durable_adk.testing.services import FakeService


class DemoFailed(Exception):
    """A step of the demo did not go as shown."""


def _fail(message: str) -> None:
    raise DemoFailed(message)


def _child(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], env=env, capture_output=True, text=True, check=False
    )


def run(db: str, console: Console) -> None:
    """Runs the worked examples: an agent killed mid-run, read back by a fresh process.

    Raises:
        DemoFailed: A step did not behave as the demo shows it.
    """
    session_id = f"demo-{uuid.uuid4().hex[:8]}"
    console.rule("[bold]durable-adk demo: a run killed mid-tool")
    console.print(f"store: {redact(db)}   session: {session_id}")
    module = "durable_adk.demo.quickstart"
    crashed = _child(
        [module, "run", "--db", db, "--session", session_id],
        arm(dict(os.environ), "demo.in_book_delivery"),
    )
    if crashed.returncode != EXIT_CODE:
        _fail(
            f"the child should have died with {EXIT_CODE}, "
            f"got {crashed.returncode}:\n{crashed.stderr}"
        )
    console.print(
        f"child process running the agent died with exit code {crashed.returncode} "
        "(os._exit at crash point demo.in_book_delivery)"
    )
    shown = _child([module, "show", "--db", db, "--session", session_id], dict(os.environ))
    if shown.returncode != 0:
        _fail(f"the fresh process could not read the session:\n{shown.stderr}")
    report = json.loads(shown.stdout)
    if not report.get("found"):
        _fail(f"session {session_id} was not found in {redact(db)}")
    table = Table(title="history that survived, read by a fresh process")
    table.add_column("#", justify="right")
    table.add_column("author")
    table.add_column("event")
    for event in report["events"]:
        table.add_row(str(event["seq"]), event["author"], event["what"])
    console.print(table)
    console.print(f"state folded from the log: {json.dumps(report['state'])}")
    console.print(
        "The call to book_delivery has no response: the process died inside the tool. "
        "Finishing such runs is the recovery sweeper's job, shown next."
    )
    _recovery_demo(db, console)
    _invoicing_demo(db, console)
    _approvals_demo(console)
    run_saga_demo(console)


def _recovery_demo(db: str, console: Console) -> None:
    console.rule("[bold]durable-adk demo: runs killed mid-model-call and mid-tool, recovered")
    module = "durable_adk.demo.recovery_demo"
    tag = uuid.uuid4().hex[:6]
    kills = [("demo.in_model_call", f"model-{tag}"), ("demo.in_check_stock", f"tool-{tag}")]
    for point, session in kills:
        crashed = _child(
            [module, "run", "--db", db, "--session", session], arm(dict(os.environ), point)
        )
        if crashed.returncode != EXIT_CODE:
            _fail(
                f"{point}: expected exit {EXIT_CODE}, got {crashed.returncode}:\n{crashed.stderr}"
            )
        console.print(f"worker-A killed at {point} (exit {crashed.returncode}), session {session}")
    recovered = _child([module, "recover", "--db", db], dict(os.environ))
    if recovered.returncode != 0:
        _fail(f"the fresh worker failed:\n{recovered.stderr}")
    table = Table(title="a fresh worker (worker-B) sweeps once")
    for column in ("run", "session", "class found", "action", "end state"):
        table.add_column(column)
    for row in json.loads(recovered.stdout.strip().splitlines()[-1]):
        table.add_row(row["run"], row["session"], row["found"], row["action"], row["status"])
    console.print(table)


INVOICING_WINDOWS = [
    ("W1", "runner.before_first_event"),
    ("W2", "invoicing.draft_model"),
    ("W3", "journal.before_intent"),
    ("W4", "journal.after_act"),
    ("W5", "runner.before_finish"),
]


def _invoicing_demo(db: str, console: Console) -> None:
    console.rule("[bold]durable-adk demo: the invoicing flow killed at each window")
    if not db.startswith("sqlite"):
        console.print("the invoicing demo runs on SQLite (a fresh database per window)")
        return
    if not Path("examples/invoicing/app.py").exists():
        console.print("examples/invoicing is not here: run `make demo` from a checkout to see it")
        return
    table = Table(
        title="five kills, each recovered by a fresh worker (real billing and notify services)"
    )
    for column in (
        "window",
        "crash point",
        "class found",
        "action",
        "invoices",
        "notifications",
        "status",
    ):
        table.add_column(column)
    with tempfile.TemporaryDirectory(prefix="durable-adk-demo-") as scratch:
        for window, point in INVOICING_WINDOWS:
            # Each window gets its own database and services: INV-77 is one invoice.
            where = Path(scratch) / window
            where.mkdir()
            url = f"sqlite:///{where / 'durable_adk.db'}"
            with (
                FakeService("billing", where / "billing.db") as billing,
                FakeService("notifications", where / "notify.db") as notify,
            ):
                urls = ["--billing", billing.url, "--notify", notify.url]
                module = ["examples.invoicing.app"]
                crashed = _child(
                    [*module, "run", "--db", url, "--session", "invoice-77", *urls],
                    arm(dict(os.environ), point),
                )
                if crashed.returncode != EXIT_CODE:
                    _fail(f"{window}: expected exit {EXIT_CODE}, got {crashed.returncode}")
                recovered = _child([*module, "recover", "--db", url, *urls], dict(os.environ))
                if recovered.returncode != 0:
                    _fail(f"{window}: the fresh worker failed:\n{recovered.stderr}")
                rows = json.loads(recovered.stdout.strip().splitlines()[-1])
                found = rows[0] if rows else {"found": "-", "action": "-", "status": "-"}
                table.add_row(
                    window,
                    point,
                    found["found"],
                    found["action"],
                    str(billing.count("invoices")),
                    str(notify.count("notifications")),
                    found["status"],
                )
    console.print(table)


APPROVAL_STEPS = [
    ("run", "journal.after_act", "the clerk's reservation went out, its answer was not stored"),
    ("recover", None, "a fresh worker answers the lost call first, then pauses on the approval"),
    ("approve", "journal.after_act", "approved; the charge went out, the node's output was lost"),
    ("recover", None, "a fresh worker re-runs the journaled node: it finds the charge"),
]


def _approvals_demo(console: Console) -> None:
    console.rule("[bold]durable-adk demo: a Workflow with a human approval, killed twice")
    if not Path("examples/approvals/app.py").exists():
        console.print("examples/approvals is not here: run `make demo` from a checkout to see it")
        return
    table = Table(title="intake -> clerk (journaled tool) -> approved charge (journaled node)")
    for column in ("step", "crash point", "what happened", "result", "reservations", "charges"):
        table.add_column(column)
    with tempfile.TemporaryDirectory(prefix="durable-adk-demo-") as scratch:
        where = Path(scratch)
        url = f"sqlite:///{where / 'durable_adk.db'}"
        with (
            FakeService("inventory", where / "inventory.db") as inventory,
            FakeService("payments", where / "payments.db") as payments,
        ):
            common = ["--db", url, "--inventory", inventory.url, "--payments", payments.url]
            for step, point, what in APPROVAL_STEPS:
                session = [] if step == "recover" else ["--session", "order-7"]
                env = arm(dict(os.environ), point) if point else dict(os.environ)
                done = _child(["examples.approvals.app", step, *common, *session], env)
                if done.returncode != (EXIT_CODE if point else 0):
                    _fail(f"approvals {step}: exit {done.returncode}:\n{done.stderr}")
                result = f"killed (exit {EXIT_CODE})"
                if not point:
                    rows = json.loads(done.stdout.strip().splitlines()[-1])
                    result = ", ".join(f"{r['found']} -> {r['status']}" for r in rows) or "-"
                table.add_row(
                    step,
                    point or "-",
                    what,
                    result,
                    str(inventory.acts("reservations", "create")),
                    str(payments.acts("charges", "create")),
                )
    console.print(table)
    console.print(
        "Each outside effect happened once (the columns count create requests). A plain "
        "FunctionNode killed after its effect is parked instead: examples/approvals --plain-charge."
    )
