"""Durable runs under a real ``adk api_server`` (DurableRunsPlugin + the durable session URI).

Each test starts ADK's own server (the venv's ``adk`` command) in a child
process on an agents folder it writes: ``services.py`` registers the durable
URIs, ``--extra_plugins durable_adk.DurableRunsPlugin`` puts the runs on the
ledger. The agent is scripted (no network); its journaled tool creates an
invoice in a fake billing service in another process, which counts the
create requests (acts).

* A server killed mid-tool (after the invoice was created, before the
  journal recorded it; or by SIGKILL while the tool is blocked before it
  acts) leaves a RUNNING row; a new server on the same database recovers it:
  the answer is in the session and the invoice was created once.
* Two turns posted at once on one session both succeed, in order: the second
  waits QUEUED (seen in the ledger) and then runs on the session as the
  first left it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from children import spawn
from durable_adk import RunLedger, RunStatus, open_store
from durable_adk.testing import FakeService, arm

AGENT = '''
import asyncio
import os
import time
from pathlib import Path

from google.adk.agents import LlmAgent

from durable_adk import journaled
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.fakes.clients import BillingClient


def _billing() -> BillingClient:
    return BillingClient(os.environ["DADK_BILLING_URL"])


def find_invoice(idempotency_key: str):
    return _billing().find_invoice(idempotency_key)


@journaled(key="invoice:{invoice_id}", lookup=find_invoice)
def send_invoice(invoice_id: str, amount: float, idempotency_key: str) -> dict:
    """Sends an invoice."""
    block = os.environ.get("DADK_BLOCK_BEFORE_ACT")
    if block:  # tells the test it got here, then waits to be killed
        Path(block).write_text("reached")
        while True:
            time.sleep(0.05)
    invoice = _billing().create_invoice(invoice_id, "acme", amount, idempotency_key)
    return {"invoice": invoice["id"]}


async def wait_for_go() -> dict:
    """Waits until the test says go (async: ADK runs a plain sync tool on its loop)."""
    go = Path(os.environ["DADK_GO_FILE"])
    Path(str(go) + ".reached").write_text("reached")
    deadline = time.monotonic() + 120
    while not go.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return {"went": go.exists()}


if os.environ.get("DADK_APP") == "chat":
    root_agent = LlmAgent(
        name="shop",
        model=ScriptedModel([Call("wait_for_go", {}), Say("first done"), Say("second done")]),
        tools=[wait_for_go],
    )
else:
    root_agent = LlmAgent(
        name="shop",
        model=ScriptedModel(
            [Call("send_invoice", {"invoice_id": "INV-1", "amount": 10.0}), Say("INV-1 sent")]
        ),
        tools=[send_invoice],
    )
'''

SERVICES_PY = """
from durable_adk import ServerSettings, register_session_uris

register_session_uris(settings=ServerSettings(lease=30.0, sweep_interval=0.5))
"""

APP, USER, SESSION = "shop", "ann", "s1"
FINAL = "INV-1 sent"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class AdkServer:
    """One ``adk api_server`` child process on the durable URI, with the plugin."""

    def __init__(
        self,
        agents: Path,
        store_url: str,
        env: dict[str, str],
        log: Path,
        command: str = "api_server",
        *,
        extra: Sequence[str] = (),
        port: int | None = None,
        ready: str = "/list-apps",
    ) -> None:
        """Starts it and waits until ``ready`` answers 200 (``extra``: more options,
        ``--a2a`` say; ``port``: a port chosen first, for a card that names it)."""
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        adk = Path(sys.executable).with_name("adk")
        self.log = log
        self._out = log.open("w")
        # The console script, run by this interpreter as its shebang says: forked
        # from the tests' zygote (tests/children.py) instead of an exec.
        self.process = spawn(
            [sys.executable, str(adk), command, *extra,
             "--host", "127.0.0.1", "--port", str(self.port),
             "--extra_plugins", "durable_adk.DurableRunsPlugin",
             "--session_service_uri", f"durable+{store_url}", str(agents)],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env={**env, "ADK_DISABLE_TELEMETRY": "1"},
        )  # fmt: skip
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{self.base}{ready}", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert self.process.poll() is None, self.output()
            assert time.monotonic() < deadline, "adk api_server did not start\n" + self.output()
            time.sleep(0.2)

    def output(self) -> str:
        self._out.flush()
        return self.log.read_text()

    def run(self, text: str, timeout: float = 60) -> httpx.Response:
        return httpx.post(
            f"{self.base}/run",
            json={
                "app_name": APP,
                "user_id": USER,
                "session_id": SESSION,
                "new_message": {"role": "user", "parts": [{"text": text}]},
            },
            timeout=timeout,
        )

    def session(self) -> dict[str, Any]:
        got = httpx.get(f"{self.base}/apps/{APP}/users/{USER}/sessions/{SESSION}", timeout=30)
        assert got.status_code == 200, got.text
        body: dict[str, Any] = got.json()
        return body

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._out.close()


def texts(session: dict[str, Any]) -> list[tuple[str, str]]:
    """(author, text) of the session's events with text, in order."""
    out = []
    for event in session.get("events", []):
        for part in (event.get("content") or {}).get("parts") or []:
            if part.get("text"):
                out.append((event["author"], part["text"]))
    return out


async def runs_of(store_url: str, status: RunStatus | None = None) -> list[Any]:
    async with open_store(store_url) as store:
        return await RunLedger(store).list_runs(status=status)


async def backdate_all(store_url: str, seconds: float) -> None:
    """The dead server's leases run out now (the database clock moves, no sleep)."""
    async with open_store(store_url) as store:
        ledger = RunLedger(store)
        for run in await ledger.list_runs(status=RunStatus.RUNNING):
            await ledger.backdate(run.run_id, seconds)


@pytest.fixture
def agents(tmp_path: Path) -> Path:
    folder = tmp_path / "agents"
    (folder / APP).mkdir(parents=True)
    (folder / APP / "__init__.py").write_text("from . import agent\n")
    (folder / APP / "agent.py").write_text(AGENT)
    (folder / "services.py").write_text(SERVICES_PY)
    return folder


@pytest.fixture
def billing(tmp_path: Path) -> Iterator[FakeService]:
    with FakeService("billing", tmp_path / "billing.db") as service:
        yield service


@pytest.fixture
def servers() -> Iterator[list[AdkServer]]:
    started: list[AdkServer] = []
    yield started
    for server in started:
        server.stop()


def create_session(server: AdkServer) -> None:
    made = httpx.post(f"{server.base}/apps/{APP}/users/{USER}/sessions/{SESSION}", timeout=30)
    assert made.status_code == 200, made.text


def wait_for_final(server: AdkServer, final: str, timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        session = server.session()  # also the first use that starts recovery
        if (APP, final) in texts(session):
            return session
        assert server.process.poll() is None, server.output()
        assert time.monotonic() < deadline, f"not recovered: {texts(session)}\n{server.output()}"
        time.sleep(0.3)


@pytest.mark.parametrize("kill", ["crash_after_act", "sigkill_before_act"])
def test_killed_server_run_is_recovered_by_the_next_server(
    kill: str,
    store_url: str,
    agents: Path,
    billing: FakeService,
    tmp_path: Path,
    servers: list[AdkServer],
) -> None:
    env = {**os.environ, "DADK_BILLING_URL": billing.url}
    reached = tmp_path / "reached"
    if kill == "crash_after_act":
        first_env = arm(env, "journal.after_act")  # os._exit(137) once the invoice exists
    else:
        first_env = {**env, "DADK_BLOCK_BEFORE_ACT": str(reached)}
    first = AdkServer(agents, store_url, first_env, tmp_path / "first.log")
    servers.append(first)
    create_session(first)
    outcome: list[Any] = []

    def post() -> None:
        try:
            outcome.append(first.run("bill acme"))
        except httpx.HTTPError as exc:
            outcome.append(exc)

    poster = threading.Thread(target=post)
    poster.start()
    if kill == "sigkill_before_act":
        deadline = time.monotonic() + 60
        while not reached.exists():
            assert time.monotonic() < deadline, first.output()
            time.sleep(0.05)
        first.process.send_signal(signal.SIGKILL)
    assert first.process.wait(60) in (137, -signal.SIGKILL), first.output()
    poster.join(60)
    assert outcome and isinstance(outcome[0], httpx.HTTPError)  # the caller got no answer
    expected_acts = 1 if kill == "crash_after_act" else 0
    assert billing.acts("invoices", "create") == expected_acts
    [orphan] = asyncio.run(runs_of(store_url, RunStatus.RUNNING))
    assert (orphan.app_name, orphan.session_id) == (APP, SESSION)

    asyncio.run(backdate_all(store_url, 120))
    second = AdkServer(agents, store_url, env, tmp_path / "second.log")
    servers.append(second)
    session = wait_for_final(second, FINAL)

    assert billing.count("invoices") == 1
    assert billing.acts("invoices", "create") == 1  # once, whoever made it
    assert texts(session)[-1] == (APP, FINAL)
    [run] = asyncio.run(runs_of(store_url))
    deadline = time.monotonic() + 30
    while run.status is not RunStatus.DONE and time.monotonic() < deadline:
        time.sleep(0.2)
        [run] = asyncio.run(runs_of(store_url))
    assert run.status is RunStatus.DONE, run
    assert run.run_id == orphan.run_id and run.attempts >= 1


@pytest.mark.parametrize("command", ["api_server", "web"])
def test_two_turns_at_once_queue_and_both_succeed_in_order(
    command: str, store_url: str, agents: Path, tmp_path: Path, servers: list[AdkServer]
) -> None:
    go = tmp_path / "go"
    env = {**os.environ, "DADK_APP": "chat", "DADK_GO_FILE": str(go)}
    server = AdkServer(agents, store_url, env, tmp_path / "server.log", command)
    servers.append(server)
    create_session(server)
    answers: dict[str, Any] = {}

    def post(text: str) -> None:
        try:
            answers[text] = server.run(text, timeout=120)
        except httpx.HTTPError as exc:
            answers[text] = exc

    one = threading.Thread(target=post, args=("one",))
    one.start()
    deadline = time.monotonic() + 60
    while not Path(str(go) + ".reached").exists():  # turn one is inside its tool
        assert time.monotonic() < deadline, server.output()
        time.sleep(0.05)
    two = threading.Thread(target=post, args=("two",))
    two.start()
    while not asyncio.run(runs_of(store_url, RunStatus.QUEUED)):  # turn two waits its turn
        assert time.monotonic() < deadline, server.output()
        time.sleep(0.05)
    go.write_text("go")
    one.join(120)
    two.join(120)

    for text in ("one", "two"):
        answer = answers[text]
        assert isinstance(answer, httpx.Response), answer
        assert answer.status_code == 200, (answer.text, server.output())
    assert texts({"events": answers["one"].json()})[-1] == (APP, "first done")
    assert texts({"events": answers["two"].json()})[-1] == (APP, "second done")
    assert texts(server.session()) == [
        ("user", "one"),
        (APP, "first done"),
        ("user", "two"),
        (APP, "second done"),
    ]
    assert "StaleSessionError" not in server.output()
    runs = asyncio.run(runs_of(store_url))
    assert sorted(r.status for r in runs) == [RunStatus.DONE, RunStatus.DONE]


def test_a_caller_that_disconnects_ends_its_run_and_frees_the_session(
    store_url: str, agents: Path, tmp_path: Path, servers: list[AdkServer]
) -> None:
    # ADK's /run aborts the run when its caller goes away and seals the
    # invocation (INVOCATION_ABORTED); the classifier counts a cancelled
    # invocation done (a re-drive would undo the cancellation). The row must
    # end, not stay RUNNING and block the session's queue.
    go = tmp_path / "go"
    env = {**os.environ, "DADK_APP": "chat", "DADK_GO_FILE": str(go)}
    server = AdkServer(agents, store_url, env, tmp_path / "server.log")
    servers.append(server)
    create_session(server)
    body = json.dumps(
        {
            "app_name": APP,
            "user_id": USER,
            "session_id": SESSION,
            "new_message": {"role": "user", "parts": [{"text": "one"}]},
        }
    ).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as caller:
        caller.sendall(
            b"POST /run HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        deadline = time.monotonic() + 90
        while not Path(str(go) + ".reached").exists():  # the tool waits for go
            assert time.monotonic() < deadline, server.output()
            time.sleep(0.05)
    # The caller has gone away mid-tool.
    deadline = time.monotonic() + 90
    while True:
        [run] = asyncio.run(runs_of(store_url))
        if run.status is not RunStatus.RUNNING:
            break
        assert time.monotonic() < deadline, server.output()
        time.sleep(0.2)
    assert run.status is RunStatus.DONE, (run, server.output())
    events = server.session()["events"]
    assert events[-1].get("errorCode") == "INVOCATION_ABORTED"
    go.write_text("go")
    again = server.run("one more")  # the session is free: the next turn runs at once
    assert again.status_code == 200, (again.text, server.output())
    runs = asyncio.run(runs_of(store_url))
    assert [r.status for r in runs] == [RunStatus.DONE, RunStatus.DONE]
