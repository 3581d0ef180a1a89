"""Saga demo: the order that cannot ship, killed in the middle of its compensation.

Starts fake inventory, payments, carrier and notification services, runs
``examples/order_saga`` in a child process that dies (exit 137) right after
refunding the charge and before releasing the reservation, prints the world,
lets a fresh worker finish the compensation, and prints the world again.
Needs a checkout (the example lives in ``examples/``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from durable_adk.faults import EXIT_CODE, arm
from durable_adk.testing.services import FakeService

SERVICES = ("inventory", "payments", "carrier", "notifications")


def _world_table(title: str, services: dict[str, FakeService]) -> Table:
    table = Table(title=title)
    for column in ("service", "item", "status", "undone"):
        table.add_column(column)
    rows: list[tuple[str, str, str, str]] = []
    for item in services["inventory"].items("reservations"):
        rows.append(
            (
                "inventory",
                f"reservation {item['sku']} x{item['quantity']}",
                item["status"],
                f"releases={item['releases']}",
            )
        )
    for item in services["payments"].items("charges"):
        rows.append(
            (
                "payments",
                f"charge {item['amount']:.2f}",
                item["status"],
                f"refunds={item['refunds']}",
            )
        )
    for item in services["carrier"].items("shipments"):
        rows.append(("carrier", f"shipment to {item['address']}", item["status"], ""))
    for item in services["notifications"].items("notifications"):
        rows.append(("notifications", item["message"], "sent", ""))
    for row in rows or [("(nothing)", "", "", "")]:
        table.add_row(*row)
    return table


def _child(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "examples.order_saga.app", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def run_saga_demo(console: Console) -> bool:
    """Runs the demo; False when it could not (no checkout), after saying why."""
    console.rule("[bold]durable-adk demo: an order that cannot ship, killed mid-compensation")
    if not Path("examples/order_saga/app.py").exists():
        console.print("examples/order_saga is not here: run `make demo` from a checkout to see it")
        return False
    with tempfile.TemporaryDirectory(prefix="durable-adk-saga-") as scratch:
        where = Path(scratch)
        services = {n: FakeService(n, where / f"{n}.db").start() for n in SERVICES}
        try:
            urls = where / "urls.json"
            urls.write_text(json.dumps({n: s.url for n, s in services.items()}))
            common = ["--db", f"sqlite:///{where / 'durable_adk.db'}", "--services", str(urls)]
            crashed = _child(["run", *common], arm(dict(os.environ), "saga.undo.charge.after"))
            if crashed.returncode != EXIT_CODE:
                raise RuntimeError(
                    f"expected exit {EXIT_CODE}, got {crashed.returncode}: {crashed.stderr}"
                )
            console.print(
                "the carrier refused the address; compensation began (newest first) and the "
                f"process died (exit {crashed.returncode}) right after refunding the charge"
            )
            console.print(_world_table("the world after the kill", services))
            recovered = _child(["recover", *common], dict(os.environ))
            if recovered.returncode != 0:
                raise RuntimeError(f"the fresh worker failed: {recovered.stderr}")
            report: list[dict[str, Any]] = json.loads(recovered.stdout.strip().splitlines()[-1])
            for row in report:
                found = f"found {row['found']}, {row['action']} -> {row['status']}"
                console.print(f"fresh worker: run {row['run'][:16]}… {found}")
            console.print(_world_table("the world after recovery", services))
        finally:
            for service in services.values():
                service.stop()
    return True
