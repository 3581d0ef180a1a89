"""Helpers of the chaos tests: the fake services, chaos workers, runs over HTTP, the verdict."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from children import spawn
from durable_adk.chaos.check import Request, Verdict, claim_times, judge
from durable_adk.chaos.soak import (
    AUTH,
    install_observer,
    read_log,
    read_store,
    serve_command,
    start_logged,
    wait_listening,
    worker_env,
)
from durable_adk.testing.services import FakeService

LEASE = 3.0


@dataclass
class Worker:
    """A chaos worker process."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    url: str = ""

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def signal(self, sig: int) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)


@contextlib.contextmanager
def fake_services(folder: Path) -> Iterator[dict[str, str]]:
    """The payments and notifications services; yields their URLs by name."""
    with (
        FakeService("payments", folder / "payments.db", quiet=True) as payments,
        FakeService("notifications", folder / "notifications.db", quiet=True) as notifications,
    ):
        yield {"payments": payments.url, "notifications": notifications.url}


def prepare(db: str) -> None:
    """Creates the schema if needed and installs the soak's claim observer."""
    asyncio.run(install_observer(db))


def launch(
    db: str,
    name: str,
    urls: dict[str, str],
    folder: Path,
    *,
    tool_seconds: float,
    marker_dir: Path | None = None,
    prefix: list[str] | None = None,
    port: int = 0,
    gate: bool = False,
    lease: float = LEASE,
) -> Worker:
    """Starts ``durable-adk serve`` with the chaos app (lease 3 s unless given, sweeps
    every 0.3 s).

    ``gate``: each tool waits for ``<marker>.go`` before it calls out.
    """
    command = serve_command(db, name, lease=lease, sweep_interval=0.3, port=port)
    env = worker_env(name, urls, tool_seconds=tool_seconds, marker_dir=marker_dir, gate=gate)
    log = folder / f"{name}.log"
    if prefix:  # ``ip netns exec ...``: exec'd inside the namespace
        return Worker(name, start_logged(prefix + command, env, log), log)
    with open(log, "wb") as out:  # as start_logged, forked (tests/children.py)
        process = spawn(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
    return Worker(name, process, log)


def ready(*workers: Worker) -> None:
    for worker in workers:
        worker.url = wait_listening(worker.process, worker.log)


def stop(*workers: Worker) -> None:
    for worker in workers:
        worker.signal(signal.SIGCONT)
        worker.signal(signal.SIGTERM)
    for worker in workers:
        try:
            worker.process.wait(30)
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait()


def submit(worker: Worker, session: str, order: str) -> str:
    """Starts a run on ``worker``; returns its id."""
    body = {"message": f"Please charge order {order} and tell the customer."}
    answer = httpx.post(
        f"{worker.url}/v1/users/chaos/sessions/{session}/runs", json=body, headers=AUTH, timeout=30
    )
    assert answer.status_code == 202, answer.text
    return str(answer.json()["run"]["run_id"])


def run_row(worker: Worker, run_id: str) -> dict[str, Any] | None:
    try:
        answer = httpx.get(f"{worker.url}/v1/runs/{run_id}", headers=AUTH, timeout=10)
    except httpx.HTTPError:
        return None
    return dict(answer.json()["run"]) if answer.status_code == 200 else None


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.1)


def wait_marker(folder: Path, suffix: str, worker: Worker, timeout: float = 240) -> Path:
    """Waits for a tool's marker file (``<run>.<epoch>.<tool>``)."""

    def found() -> Path | None:
        assert worker.process.poll() is None, worker.output()
        return next(iter(sorted(folder.glob(f"*{suffix}"))), None)

    try:
        marker: Path = wait_until(found, timeout, f"a tool marker *{suffix}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- {worker.name} ---\n{worker.output()}") from None
    return marker


def wait_given_up(worker: Worker, run_id: str, epoch: int, timeout: float = 120) -> None:
    """Waits until ``worker`` logs that it gave up its drive of ``run_id`` at ``epoch``.

    A worker that finds its lease lost (or its writes fenced) cancels the
    drive, its tools with it (the chaos app's tools are coroutines), and says
    so: ``run <id> (epoch <n>, caller gone): TAKEN_OVER (...)``. From then on
    it holds nothing of the run that could still call out.
    """
    head = f"run {run_id} (epoch {epoch}, caller gone): TAKEN_OVER"

    def said() -> bool:
        return any(head in line for line in worker.log.read_text(errors="replace").splitlines())

    try:
        wait_until(said, timeout, f"{worker.name} giving up run {run_id}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- {worker.name} ---\n{worker.output()}") from None


@dataclass
class Outcome:
    """What the world holds at the end of a test."""

    verdict: Verdict
    requests: list[Request]
    takeovers: dict[str, dict[int, float]]

    def calls_of(self, run_id: str, epoch: int, *, after: float = 0.0) -> list[Request]:
        """Requests tagged with this run and epoch that arrived after ``after``."""
        return [
            r for r in self.requests if r.run_id == run_id and r.epoch == epoch and r.at > after
        ]

    def acts(self, key: str) -> int:
        """Acts under ``key`` the services did not refuse as fenced off."""
        return sum(1 for r in self.requests if r.acted and r.key == key)


def outcome(db: str, urls: dict[str, str], accepted: list[str]) -> Outcome:
    records = asyncio.run(read_store(db))
    requests = [r for name, url in urls.items() for r in read_log(name, url)]
    verdict = judge(accepted=accepted, requests=requests, **records)
    return Outcome(verdict, requests, claim_times(records["claims"]))


def describe(result: Outcome, *workers: Worker) -> str:
    """Evidence for a failed assertion: the findings and the workers' logs."""
    lines = [f"{name}: {found}" for name, found in result.verdict.findings.items() if found]
    lines += [f"--- {w.name} ---\n{w.output()}" for w in workers]
    return "\n".join(lines)
