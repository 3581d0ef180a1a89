"""examples/a2a_invoicer: the served side's task survives a SIGKILL of its process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from examples.a2a_invoicer.app import get

from children import run_child, spawn
from durable_adk.testing.fakes.process import FakeService

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.timeout(240)


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(db: str, billing: str, port: int, slow: str) -> subprocess.Popen[bytes]:
    process = spawn(
        [sys.executable, "-m", "uvicorn", "examples.a2a_invoicer.app:asgi", "--port", str(port),
         "--log-level", "warning"],
        cwd=ROOT,
        env={**os.environ, "PYTHONWARNINGS": "ignore", "DB": db, "PORT": str(port),
             "BILLING_URL": billing, "SLOW_SECONDS": slow, "LEASE_SECONDS": "2"},
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        try:
            card = f"http://127.0.0.1:{port}/.well-known/agent-card.json"
            if httpx.get(card, timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "the example did not start"
        time.sleep(0.2)


def _client(*args: str) -> dict[str, object]:
    done = run_child(
        [sys.executable, "-m", "examples.a2a_invoicer.app", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_example_task_completes_after_a_kill_of_the_served_side(
    store_url: str, billing: FakeService
) -> None:
    port = _port()
    url = f"http://127.0.0.1:{port}"
    first = _serve(store_url, billing.url, port, slow="3")
    try:
        accepted = _client("send", "--url", url, "INV-7")
        time.sleep(1.0)  # in the tool's wait, before it acts
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    second = _serve(store_url, billing.url, port, slow="0")
    try:
        deadline = time.monotonic() + 60
        while True:
            seen = asyncio.run(get(url, str(accepted["task"])))
            if seen["state"] == "TASK_STATE_COMPLETED":
                break
            assert time.monotonic() < deadline, seen
            time.sleep(0.5)
        assert seen["answer"] == "INV-7 sent"
    finally:
        second.terminate()
        second.wait(30)
    assert billing.acts("invoices", "create") == 1
