"""Helpers of the A2A service tests: ``durable-adk serve --a2a`` workers and the SDK's client."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from a2a.client import ClientCallContext, ClientConfig, ClientFactory
from a2a.client.auth import AuthInterceptor, CredentialService
from a2a.client.card_resolver import A2ACardResolver
from a2a.client.client import Client
from a2a.types import (
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskPushNotificationConfig,
)
from typer.testing import CliRunner

from children import spawn
from durable_adk.store import open_store
from durable_adk.store.queries import parse_queries
from durable_adk.tables.ledger import Run, RunLedger

HERE = Path(__file__).parent
APP = "a2a_app:app"
TOKEN = "a2a-test-token"


@dataclass
class A2aWorker:
    """A ``durable-adk serve --a2a`` child process and its address."""

    process: subprocess.Popen[str]
    base_url: str
    lines: list[str]

    def kill(self) -> None:
        """SIGKILL: nothing handed back."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)


def start_worker(
    db: str, worker_id: str, env: dict[str, str], *, port: int = 0, extra: tuple[str, ...] = ()
) -> A2aWorker:
    """Starts a worker serving the invoicer over A2A; returns once it listens.

    ``extra``: more ``durable-adk serve`` options.
    """
    command = [
        sys.executable, "-m", "durable_adk.cli", "serve", APP, "--a2a",
        "--db", db, "--port", str(port), "--token", TOKEN, "--worker-id", worker_id,
        "--lease", "2", "--sweep-interval", "0.2", "--drain-seconds", "1",
        "--max-body-bytes", "65536", *extra,
    ]  # fmt: skip
    process = spawn(
        command,
        env={**os.environ, "PYTHONWARNINGS": "ignore", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=HERE,
    )
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
            threading.Thread(target=_drain, args=(process, lines), daemon=True).start()
            return A2aWorker(process, url, lines)
    process.kill()
    raise AssertionError("serve --a2a did not start:\n" + "".join(lines))


def _drain(process: subprocess.Popen[str], lines: list[str]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)


@contextlib.contextmanager
def workers(
    db: str, env: dict[str, str], *names: str, extra: tuple[str, ...] = ()
) -> Iterator[list[A2aWorker]]:
    """Starts the named workers side by side (each import of google-adk takes seconds)."""
    started: list[A2aWorker] = []
    try:
        with concurrent.futures.ThreadPoolExecutor(max(1, len(names))) as pool:
            futures = [pool.submit(start_worker, db, name, env, extra=extra) for name in names]
            failures: list[BaseException] = []
            for future in futures:
                try:
                    started.append(future.result())
                except BaseException as exc:  # the others still get stopped
                    failures.append(exc)
            if failures:
                raise failures[0]
        yield started
    finally:
        with concurrent.futures.ThreadPoolExecutor(max(1, len(started))) as pool:
            list(pool.map(A2aWorker.stop, started))


class BearerCredentials(CredentialService):
    """The SDK's credential service with one token for every scheme (None: no token)."""

    def __init__(self, token: str | None) -> None:
        self.token = token

    async def get_credentials(
        self, security_scheme_name: str, context: ClientCallContext | None
    ) -> str | None:
        return self.token


@contextlib.asynccontextmanager
async def a2a_client(
    base_url: str, *, streaming: bool = False, token: str | None = TOKEN
) -> AsyncIterator[Client]:
    """The SDK's client for the worker at ``base_url`` (from its agent card).

    The SDK's AuthInterceptor sends ``token`` as the card's security scheme asks.
    """
    async with httpx.AsyncClient(timeout=60) as http:
        card = await A2ACardResolver(http, base_url).get_agent_card()
        auth = AuthInterceptor(BearerCredentials(token))
        yield ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(
            card, interceptors=[auth]
        )


def message(
    text: str, *, context_id: str = "", task_id: str = "", message_id: str | None = None
) -> Message:
    return Message(
        message_id=message_id or uuid.uuid4().hex,
        role=Role.ROLE_USER,
        context_id=context_id,
        task_id=task_id,
        parts=[Part(text=text)],
    )


async def send(
    client: Client, msg: Message, *, return_immediately: bool = False, push_url: str | None = None
) -> Task:
    """Sends ``msg`` (with a push config for ``push_url``, token ``t``, if given);
    returns the task of the last response."""
    configuration = SendMessageConfiguration(return_immediately=return_immediately)
    if push_url is not None:  # "" too: a bad URL the server must refuse
        configuration.task_push_notification_config.CopyFrom(
            TaskPushNotificationConfig(url=push_url, token="t")
        )
    request = SendMessageRequest(message=msg, configuration=configuration)
    found: Task | None = None
    async for response in client.send_message(request):
        if response.HasField("task"):
            found = response.task
    assert found is not None, "no task in the answer"
    return found


async def stream(client: Client, msg: Message) -> list[StreamResponse]:
    request = SendMessageRequest(message=msg)
    return [response async for response in client.send_message(request)]


def answer_text(task: Task) -> str:
    return "".join(p.text for a in task.artifacts for p in a.parts)


async def runs_of(db: str, app_name: str = "invoicer") -> list[Run]:
    async with open_store(db) as store:
        found = await RunLedger(store).list_runs(limit=1000)
    return [r for r in found if r.app_name == app_name]


def wait_for_file(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def meta(task: Task, key: str) -> Any:
    return task.metadata[key] if key in task.metadata else None  # noqa: SIM401 - a Struct has no get


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``durable-adk ARGS`` run in this process by typer's runner (as tests/service/test_cli.py).

    The CLI's own code, without a child process that imports google-adk again
    (seconds of CPU each). One call at a time: the runner swaps ``sys.stdout``.
    """
    from durable_adk.cli import app

    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    return subprocess.CompletedProcess(
        ["durable-adk", *args], result.exit_code, result.stdout, result.stderr
    )


class Receiver:
    """Counts every POST; answers 503 while ``down``."""

    def __init__(self) -> None:
        self.down = True
        self.refused = 0
        self.received: list[tuple[dict[str, str], dict[str, Any]]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if receiver.down:
                    receiver.refused += 1
                    self.send_response(503)
                    self.end_headers()
                    return
                receiver.received.append((dict(self.headers), json.loads(body)))
                self.send_response(200)
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/push"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


COUNT_SQL = """
-- name: test_a2a_service_rows
SELECT (SELECT COUNT(*) FROM runs) AS runs, (SELECT COUNT(*) FROM sessions) AS sessions,
       (SELECT COUNT(*) FROM events) AS events,
       (SELECT COUNT(*) FROM a2a_tasks) AS tasks,
       (SELECT COUNT(*) FROM a2a_task_events) AS task_events,
       (SELECT COUNT(*) FROM a2a_task_runs) AS links,
       (SELECT COUNT(*) FROM a2a_messages) AS messages,
       (SELECT COUNT(*) FROM a2a_push_configs) AS push_configs,
       (SELECT COUNT(*) FROM a2a_push_outbox) AS outbox;
"""


async def rows(db: str) -> dict[str, int]:
    """How many rows the runs, sessions and every A2A table hold."""
    async with open_store(db) as store:
        store.add_queries(parse_queries(COUNT_SQL, store.dialect))
        row = await store.fetchrow("test_a2a_service_rows", {})
    assert row is not None
    return {k: int(v) for k, v in row.items()}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_to_a2a(db: str, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """Starts ``uvicorn a2a_to_a2a_app:app`` (``to_a2a(agent, db=)``); its process and base URL."""
    port = free_port()
    process = spawn(
        [sys.executable, "-m", "uvicorn", "a2a_to_a2a_app:app", "--port", str(port),
         "--log-level", "warning"],
        cwd=HERE,
        env={**os.environ, "PYTHONWARNINGS": "ignore", "DADK_A2A_DB": db,
             "DADK_A2A_PORT": str(port), **env},
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{base}/.well-known/agent-card.json", timeout=2).status_code == 200:
                return process, base
        except httpx.HTTPError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "to_a2a did not start"
        time.sleep(0.2)
