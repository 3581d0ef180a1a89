"""Helpers of the service tests: a worker in a thread, a worker in a process, SSE parsing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from children import spawn
from durable_adk.demo.service_app import app as stock_app
from durable_adk.metrics import Metrics
from durable_adk.service import Worker
from durable_adk.service.server import WorkerServer, serve
from durable_adk.service.settings import ServiceSettings
from durable_adk.store import Store

TOKEN = "service-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
APP = "durable_adk.demo.service_app:app"


@dataclass
class Service:
    """A started worker, clients with and without the token, and its telemetry."""

    worker: Worker
    http: FastAPI
    store: Store
    client: httpx.AsyncClient
    anon: httpx.AsyncClient
    metrics: Metrics
    spans: InMemorySpanExporter

    async def stats(self) -> dict[str, Any]:
        response = await self.client.get("/v1/stats")
        assert response.status_code == 200
        body: dict[str, Any] = response.json()
        return body


def settings_for(db: str, **overrides: Any) -> ServiceSettings:
    """Fast settings for tests: short lease, quick sweeps and polls."""
    values: dict[str, Any] = {
        "db": db,
        "port": 0,
        "token": TOKEN,
        "lease": 3.0,
        "sweep_interval": 0.2,
        "poll_interval": 0.05,
        "drain_seconds": 2.0,
        "idempotent_tools": ("check_stock",),
        "webhook_secret": "webhook-secret",
        "resume_interval": 0.2,
    }
    values.update(overrides)
    return ServiceSettings(**values)


@dataclass
class ThreadedWorker:
    """A real worker (uvicorn on a socket) running in a thread of the test process."""

    settings: ServiceSettings
    metrics: Metrics = field(default_factory=Metrics)
    app: Any = None  # the ADK App or agent it serves (default: the stock assistant)
    base_url: str = ""
    server: WorkerServer | None = None
    _thread: threading.Thread | None = None
    _errors: queue.Queue[BaseException] = field(default_factory=queue.Queue)

    def start(self) -> ThreadedWorker:
        ready = threading.Event()

        def on_ready(server: WorkerServer) -> None:
            self.server = server
            self.base_url = f"http://127.0.0.1:{server.bound_port()}"
            ready.set()

        def main() -> None:
            try:
                asyncio.run(
                    serve(
                        self.app or stock_app(),
                        self.settings,
                        metrics=self.metrics,
                        on_ready=on_ready,
                    )
                )
            except BaseException as exc:  # reported to the test
                self._errors.put(exc)
                ready.set()

        self._thread = threading.Thread(target=main, daemon=True)
        self._thread.start()
        assert ready.wait(60), "the worker did not start"
        if not self._errors.empty():
            raise self._errors.get()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
            assert not self._thread.is_alive(), "the worker did not stop"
        if not self._errors.empty():
            raise self._errors.get()

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers=AUTH, timeout=30, **kwargs)


@contextlib.contextmanager
def threaded_worker(
    settings: ServiceSettings, metrics: Metrics | None = None, *, app: Any = None
) -> Iterator[ThreadedWorker]:
    worker = ThreadedWorker(settings, metrics or Metrics(), app=app).start()
    try:
        yield worker
    finally:
        worker.stop()


@dataclass
class ServeProcess:
    """``durable-adk serve`` in a child process."""

    process: subprocess.Popen[str]
    base_url: str
    lines: list[str]


def launch_serve(
    db: str,
    *,
    worker_id: str,
    env: dict[str, str] | None = None,
    options: Sequence[str] = (),
) -> subprocess.Popen[str]:
    """Starts ``durable-adk serve`` on a free port (see :func:`wait_ready`), with ``options``."""
    command = [
        sys.executable, "-m", "durable_adk.cli", "serve", APP,
        "--db", db, "--port", "0", "--token", TOKEN, "--worker-id", worker_id,
        "--lease", "2", "--sweep-interval", "0.2", "--idempotent-tool", "check_stock",
        "--drain-seconds", "1", *options,
    ]  # fmt: skip
    return spawn(
        command,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=Path(__file__).parent,
    )


def wait_ready(process: subprocess.Popen[str]) -> ServeProcess:
    """Waits until a launched worker listens; returns it with its URL."""
    lines: list[str] = []
    deadline = time.monotonic() + 90
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("listening on "):
            url = line.split()[-1]
            threading.Thread(target=_drain_output, args=(process, lines), daemon=True).start()
            return ServeProcess(process, url, lines)
    process.kill()
    raise AssertionError("serve did not start:\n" + "".join(lines))


def _drain_output(process: subprocess.Popen[str], lines: list[str]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)


@dataclass(frozen=True)
class SseMessage:
    event: str
    id: str | None
    data: dict[str, Any]


def parse_sse(lines: Iterator[str]) -> Iterator[SseMessage]:
    """Server-Sent Events from a stream of lines (comments skipped)."""
    event, ident, data = "message", None, []
    for line in lines:
        if line == "":
            if data:
                yield SseMessage(event, ident, json.loads("\n".join(data)))
            event, ident, data = "message", None, []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "id":
                ident = value
            elif name == "data":
                data.append(value)


def wait_until(predicate: Any, timeout: float = 30.0, interval: float = 0.05) -> Any:
    """Polls ``predicate`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in {timeout}s")
        time.sleep(interval)
