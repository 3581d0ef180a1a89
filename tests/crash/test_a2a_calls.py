"""A durable run that calls a remote A2A agent, killed mid-call, on both backends.

The remote is ADK's own ``to_a2a`` app (``a2a_remote.py``) in a process of
its own on 127.0.0.1: its agent's tool acts once per task on a counting fake
service, and every JSON-RPC request it receives is logged, so the tests
count the messages sent and the outside acts done, not only records. The
caller (``a2a_caller.py``) is a durable run whose root agent hands over to a
:class:`DurableRemoteA2aAgent`; it is killed for real (SIGKILL, or
``os._exit(137)`` at a crash point) between sending the message and
recording the answer, and a fresh process recovers it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.types import GetTaskRequest, TaskState

from children import run_child, run_module, spawn
from durable_adk.effect_tables.journal import Journal, JournalStatus
from durable_adk.store import open_store
from durable_adk.tables.interrupts import InterruptTable
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.testing import arm
from durable_adk.testing.services import FakeService

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
CALLER = str(HERE / "a2a_caller.py")
REMOTE = str(HERE / "a2a_remote.py")
ANSWER = "tides are fine"

pytestmark = pytest.mark.timeout(120)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Remote:
    """The remote A2A agent's process, its request log and its gate.

    One process serves every test of this module (its start is the slow
    part); :meth:`reset` closes the gate and makes the counts start afresh.
    """

    def __init__(
        self, tmp: Path, service: FakeService, mode: str = "work", advertised: int | None = None
    ) -> None:
        self.port = _free_port()
        self.advertised = advertised or self.port
        self.log = tmp / f"remote-{self.port}.log"
        self.gate = tmp / f"gate-{self.port}"
        self.service = service
        self.mode = mode
        self.proc: subprocess.Popen[str] | None = None
        self.since_line = 0
        self.since_seq = 0

    @property
    def card_url(self) -> str:
        return f"http://127.0.0.1:{self.advertised}/.well-known/agent-card.json"

    def start(self) -> Remote:
        args = [REMOTE, str(self.port), str(self.log), self.service.url, str(self.gate)]
        args += [self.mode, str(self.advertised)]
        self.proc = spawn(
            [PYTHON, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("READY"), f"the remote did not start (exit {self.proc.poll()})"
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def reset(self) -> Remote:
        self.gate.unlink(missing_ok=True)
        self.offer_listing(True)
        self.since_line = len(self._lines())
        seen = self.service.requests()
        self.since_seq = seen[-1].seq if seen else 0
        return self

    def offer_listing(self, offered: bool) -> None:
        """Whether the remote answers tasks/list (else: A2A's UnsupportedOperation)."""
        flag = Path(f"{self.log}.nolist")
        if offered:
            flag.unlink(missing_ok=True)
        else:
            flag.touch()

    def open_gate(self) -> None:
        self.gate.touch()

    def _lines(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def requests(self, method: str | None = None) -> list[dict[str, Any]]:
        """The JSON-RPC requests the remote received since the reset, in order."""
        lines = self._lines()[self.since_line :]
        return [r for r in lines if method is None or r["method"] == method]

    def messages(self) -> list[str]:
        """The ids of the messages the remote received, in order (re-sends included)."""
        sent = ("SendMessage", "SendStreamingMessage")
        return [r["message_id"] for r in self.requests() if r["method"] in sent]

    def acts(self) -> int:
        """How many times the remote agent's tool acted on the outside service."""
        return self.service.acts("notifications", "create", since=self.since_seq)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeService]:
    db = tmp_path_factory.mktemp("a2a-acts") / "remote-acts.db"
    with FakeService("notifications", db) as started:
        yield started


def _shared(
    tmp: Path, service: FakeService, mode: str, advertised: int | None = None
) -> Iterator[Remote]:
    started = Remote(tmp, service, mode, advertised).start()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def working_remote(
    tmp_path_factory: pytest.TempPathFactory, service: FakeService
) -> Iterator[Remote]:
    yield from _shared(tmp_path_factory.mktemp("a2a-remote"), service, "work")


@pytest.fixture(scope="module")
def asking_remote(
    tmp_path_factory: pytest.TempPathFactory, service: FakeService
) -> Iterator[Remote]:
    yield from _shared(tmp_path_factory.mktemp("a2a-asking"), service, "ask")


@pytest.fixture(scope="module")
def remote_behind_a_door(
    tmp_path_factory: pytest.TempPathFactory, service: FakeService
) -> Iterator[Remote]:
    """A remote whose card names another port: a :class:`Door` a test opens onto it."""
    yield from _shared(tmp_path_factory.mktemp("a2a-door"), service, "work", _free_port())


@pytest.fixture
def remote(working_remote: Remote) -> Remote:
    return working_remote.reset()


def caller_env(crash_at: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("DURABLE_ADK_CRASH_AT", None)
    return arm(env, crash_at) if crash_at else env


def caller(mode: str, url: str, session: str, card: str, *, crash_at: str | None = None) -> str:
    done = run_module("a2a_caller", [mode, url, session, card], env=caller_env(crash_at), cwd=HERE)
    if crash_at:
        assert done.returncode == 137, done.stderr[-3000:]
    else:
        assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def answer_of(stdout: str) -> str:
    lines = [line for line in stdout.splitlines() if line.startswith("ANSWER ")]
    assert lines, stdout
    return lines[-1].removeprefix("ANSWER ")


def recover(url: str, session: str, card: str) -> list[dict[str, Any]]:
    out = caller("recover", url, session, card)
    line = next(line for line in out.splitlines() if line.startswith("REPORT "))
    report: list[dict[str, Any]] = json.loads(line.removeprefix("REPORT "))
    return report


def wait_for(check: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


async def remote_state(remote: Remote, task_id: str) -> str:
    """The remote task's state, as the A2A SDK's own client reads it (tasks/get)."""
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, f"http://127.0.0.1:{remote.port}").get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
        task = await client.get_task(GetTaskRequest(id=task_id))
    return str(TaskState.Name(task.status.state))


async def sends(url: str) -> list[Any]:
    """The journal's A2A send entries (the caller's record of each message)."""
    async with open_store(url) as store:
        return [e for e in await Journal(store).list() if e.key.startswith("a2a-send:")]


async def runs(url: str) -> list[RunStatus]:
    async with open_store(url) as store:
        return [r.status for r in await RunLedger(store).list_runs()]


async def requests_on_record(url: str, session: str) -> list[str]:
    """The message ids of the requests the caller's stored events say it answered."""
    from durable_adk.adk.services.sessions import DurableSessionService

    async with open_store(url) as store:
        found = await DurableSessionService(store).get_session(
            app_name="a2acaller", user_id="u", session_id=session
        )
    assert found is not None
    ids = [(e.custom_metadata or {}).get("a2a:request", {}).get("messageId") for e in found.events]
    return sorted({i for i in ids if i})


async def last_text(url: str, session: str) -> str:
    from durable_adk.adk.services.sessions import DurableSessionService

    async with open_store(url) as store:
        found = await DurableSessionService(store).get_session(
            app_name="a2acaller", user_id="u", session_id=session
        )
    assert found is not None
    for event in reversed(found.events):
        parts = event.content.parts if event.content and event.content.parts else []
        text = "".join(p.text for p in parts if p.text)
        if text:
            return text
    return ""


async def test_sigkill_after_send_reattaches_to_the_working_remote_task(
    store_url: str, remote: Remote
) -> None:
    """Killed after the message left, before its task id was recorded; the remote still works.

    The fresh process finds the task by its message id (tasks/list), waits
    for it, and finishes with its answer: one message, one act.
    """
    caller("run", store_url, "s1", remote.card_url, crash_at="a2a.after_send")
    assert len(remote.messages()) == 1
    [entry] = await sends(store_url)
    assert entry.status is JournalStatus.INTENT  # sent, its task id not on record
    [working] = [r for r in remote.requests() if r["method"] == "SendMessage"]
    assert working["message_id"] == entry.key.removeprefix("a2a-send:")
    assert remote.acts() == 0  # the remote task is still working behind its gate

    reports: list[list[dict[str, Any]]] = []
    fresh = threading.Thread(
        target=lambda: reports.append(recover(store_url, "s1", remote.card_url))
    )
    fresh.start()
    # The fresh process looks the message up, then polls the task: still working.
    wait_for(lambda: remote.requests("GetTask"), "the fresh process to re-attach")
    assert remote.acts() == 0
    remote.open_gate()
    fresh.join(90)

    [report] = reports[0]
    assert report["status"] == "DONE", report
    assert remote.messages() == [entry.key.removeprefix("a2a-send:")]
    assert len(remote.requests("ListTasks")) == 1
    assert remote.acts() == 1
    [entry] = await sends(store_url)
    assert entry.status is JournalStatus.DONE and entry.result["found"] is True
    assert await runs(store_url) == [RunStatus.DONE]
    assert await last_text(store_url, "s1") == ANSWER


async def test_sigkill_mid_call_sends_the_message_once(store_url: str, remote: Remote) -> None:
    """kill -9 of the caller the moment the remote received its message; a fresh process ends it.

    Whatever the caller had recorded by then (the intent, or the task id too),
    the remote receives that one message only, and acts once. (ADK's own
    RemoteA2aAgent sends a second message here, under a new random id.)
    """
    proc = spawn(
        [PYTHON, CALLER, "run", store_url, "s1", remote.card_url],
        env=caller_env(),
        cwd=HERE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await asyncio.to_thread(wait_for, remote.messages, "the caller's message", 60.0)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert remote.acts() == 0  # the remote task is still working behind its gate
    remote.open_gate()

    [report] = recover(store_url, "s1", remote.card_url)
    assert report["status"] == "DONE", report
    assert len(remote.messages()) == 1
    assert remote.acts() == 1
    [entry] = await sends(store_url)
    assert entry.key == f"a2a-send:{remote.messages()[0]}"
    assert entry.status is JournalStatus.DONE
    assert await runs(store_url) == [RunStatus.DONE]
    assert await last_text(store_url, "s1") == ANSWER


async def test_a_remote_that_cannot_list_its_tasks_parks_the_run_instead_of_resending(
    store_url: str, remote: Remote
) -> None:
    """Killed between send and record, and the remote offers no tasks/list: outcome unknown.

    Whether the remote got the message cannot be learned, so the run parks
    for a person (ADK's RemoteA2aAgent would have made an error event of it
    and ended the run); nothing is sent again.
    """
    remote.offer_listing(False)
    caller("run", store_url, "s1", remote.card_url, crash_at="a2a.after_send")
    [report] = recover(store_url, "s1", remote.card_url)
    assert report["status"] == "PARKED", report
    assert report["reason"].startswith("outcome unknown: a2a:researcher")
    assert len(remote.messages()) == 1
    assert len(remote.requests("ListTasks")) == 1
    assert await runs(store_url) == [RunStatus.PARKED]
    remote.open_gate()  # let the remote task end, for the next test


async def test_a_remote_that_forgot_the_task_parks_the_run_instead_of_resending(
    store_url: str, tmp_path: Path, service: FakeService
) -> None:
    """The remote restarts with empty in-memory stores while the caller is dead: outcome unknown.

    tasks/get answers TaskNotFound for the recorded task: whether its work
    happened cannot be learned, so the run parks; the message is not sent again.
    """
    remote = Remote(tmp_path, service).reset().start()
    try:
        caller("run", store_url, "s1", remote.card_url, crash_at="a2a.while_following")
        remote.stop()
        remote.start()  # the same port, no memory of the task
        [report] = recover(store_url, "s1", remote.card_url)
    finally:
        remote.stop()
    assert report["status"] == "PARKED", report
    assert "no longer knows task" in report["reason"], report
    assert len(remote.messages()) == 1
    assert await runs(store_url) == [RunStatus.PARKED]


async def test_kill_while_following_answers_from_the_remote_s_stored_result(
    store_url: str, remote: Remote
) -> None:
    """Killed while following a recorded task; the remote finishes while the caller is dead.

    The fresh process asks for the task (tasks/get) and answers from its
    stored result: nothing sent again.
    """
    caller("run", store_url, "s1", remote.card_url, crash_at="a2a.while_following")
    [entry] = await sends(store_url)
    assert entry.status is JournalStatus.DONE  # the remote task id is on record
    task_id = entry.result["task_id"]
    remote.open_gate()
    wait_for(lambda: remote.acts() == 1, "the remote to finish its work")
    while await remote_state(remote, task_id) != "TASK_STATE_COMPLETED":  # noqa: ASYNC110
        await asyncio.sleep(0.05)

    seen = len(remote.requests())
    [report] = recover(store_url, "s1", remote.card_url)
    assert report["status"] == "DONE", report
    after = remote.requests()[seen:]
    assert {r["method"] for r in after} == {"GetTask"}
    assert {r["task_id"] for r in after} == {task_id}
    assert len(remote.messages()) == 1
    # The event ADK made of the answer names the message that was sent (not a random id).
    assert await requests_on_record(store_url, "s1") == remote.messages()
    assert remote.acts() == 1
    assert await runs(store_url) == [RunStatus.DONE]
    assert await last_text(store_url, "s1") == ANSWER


class Door(socketserver.ThreadingTCPServer):
    """A port on 127.0.0.1 that refuses connections until opened, then forwards them to a remote."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, target: int) -> None:
        self.door_port = port
        self.target = target
        self.opened = False
        super().__init__(("127.0.0.1", self.door_port), _Forward, bind_and_activate=False)

    def open(self) -> None:
        self.server_bind()
        self.server_activate()
        self.opened = True
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def close(self) -> None:
        if self.opened:
            self.shutdown()
        self.server_close()


class _Forward(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        assert isinstance(self.server, Door)
        with socket.create_connection(("127.0.0.1", self.server.target)) as upstream:

            def pump(source: socket.socket, sink: socket.socket) -> None:
                try:
                    while data := source.recv(65536):
                        sink.sendall(data)
                except OSError:
                    pass
                finally:
                    with contextlib.suppress(OSError):
                        sink.shutdown(socket.SHUT_WR)

            back = threading.Thread(target=pump, args=(upstream, self.request), daemon=True)
            back.start()
            pump(self.request, upstream)
            back.join(30)


@pytest.mark.parametrize("card_by", ["file", "url"])
def test_unreachable_remote_is_retried_with_back_off_and_sent_once(
    store_url: str, remote_behind_a_door: Remote, card_by: str, tmp_path: Path
) -> None:
    """The remote cannot be reached when the run starts; a second later it can: one message.

    Known by a card file that names a closed port, the first thing to fail is
    the message send itself (a connection refused, retried with back-off, its
    intent on record); known by a card URL on that port, the card fetch.
    The port then opens onto the remote.
    """
    remote = remote_behind_a_door.reset()
    door = Door(remote.advertised, remote.port)
    card = tmp_path / "card.json"
    card.write_text(
        json.dumps(
            {
                "name": "researcher",
                "description": "Researches topics.",
                "supportedInterfaces": [
                    {
                        "url": f"http://127.0.0.1:{door.door_port}",
                        "protocolBinding": "JSONRPC",
                        "protocolVersion": "1.0",
                    }
                ],
                "version": "0.0.1",
                "capabilities": {"streaming": True},
                "defaultInputModes": ["text/plain"],
                "defaultOutputModes": ["text/plain"],
                "skills": [],
            }
        )
    )
    known_by = str(card) if card_by == "file" else remote.card_url
    remote.open_gate()
    outs: list[str] = []
    run = threading.Thread(target=lambda: outs.append(caller("run", store_url, "s1", known_by)))
    run.start()
    try:
        if card_by == "file":
            wait_for(lambda: bool(_journal_keys(store_url)), "the caller to record its send")
        else:
            wait_for(lambda: bool(asyncio.run(runs(store_url))), "the caller to start its run")
        time.sleep(1.0)  # a few refused attempts
        assert remote.messages() == []
        door.open()
        run.join(60)
    finally:
        door.close()
    assert answer_of(outs[0]) == ANSWER
    assert len(remote.messages()) == 1
    assert remote.acts() == 1
    assert asyncio.run(runs(store_url)) == [RunStatus.DONE]


def _journal_keys(url: str) -> list[str]:
    return [e.key for e in asyncio.run(sends(url))]


async def test_input_required_pauses_the_run_and_its_answer_goes_to_the_same_task(
    store_url: str, asking_remote: Remote
) -> None:
    """The remote asks for input: the caller's run ends PAUSED on the remote's question.

    Answering the paused call continues the invocation and sends the answer
    to the same remote task (a message of its own, with its own id), which
    then completes. A kill right after that answer's send, before its task
    was recorded, sends nothing twice.
    """
    remote = asking_remote.reset()
    caller("run", store_url, "s1", remote.card_url)
    assert await runs(store_url) == [RunStatus.PAUSED]
    async with open_store(store_url) as store:
        [waiting] = await InterruptTable(store).list_interrupts(session_id="s1")
    assert waiting.name == "ask_approval"  # the remote's question, in the caller's inbox
    [asked] = remote.requests("SendMessage")
    caller("answer", store_url, "s1", remote.card_url, crash_at="a2a.after_send")
    [report] = recover(store_url, "s1", remote.card_url)
    assert report["status"] == "DONE", report
    first, answered = remote.requests("SendMessage")
    assert first == asked
    assert answered["task_id"] is not None  # sent to the task that asked
    assert answered["message_id"] != asked["message_id"]
    entries = await sends(store_url)
    assert {e.key.removeprefix("a2a-send:") for e in entries} == {
        asked["message_id"],
        answered["message_id"],
    }
    assert all(e.status is JournalStatus.DONE for e in entries)
    assert await last_text(store_url, "s1") == "approved research on tides"


TOKEN = "a2a-calls-token"


def serve(url: str, worker: str, card: str) -> tuple[subprocess.Popen[str], str]:
    """``durable-adk serve a2a_caller:app`` in a child process; its URL."""
    command = [
        PYTHON, "-m", "durable_adk.cli", "serve", "a2a_caller:app",
        "--db", url, "--port", "0", "--token", TOKEN, "--worker-id", worker,
        "--lease", "2", "--sweep-interval", "0.2",
    ]  # fmt: skip
    env = {
        **caller_env(),
        "DADK_A2A_CARD": card,
        "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), *sys.path]),
    }
    process = spawn(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=HERE
    )
    assert process.stdout is not None
    seen = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        seen.append(line)
        if line.startswith("listening on "):
            threading.Thread(target=process.stdout.read, daemon=True).start()
            return process, line.split()[-1]
        if not line:
            break
    process.kill()
    raise AssertionError("serve did not start:\n" + "".join(seen))


async def test_a_serve_worker_killed_mid_call_another_worker_finishes_it_with_one_message(
    store_url: str, remote: Remote
) -> None:
    """``durable-adk serve``: worker A is SIGKILLed while the remote works; worker B finishes."""
    first, url = await asyncio.to_thread(serve, store_url, "worker-A", remote.card_url)
    second = None
    try:
        async with httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
        ) as client:
            started = await client.post(
                "/v1/users/u/sessions/s1/runs", json={"message": "research tides, please"}
            )
        assert started.status_code == 202, started.text
        await asyncio.to_thread(wait_for, remote.messages, "worker A's message", 60.0)
        first.send_signal(signal.SIGKILL)
        assert first.wait(30) == -signal.SIGKILL
        remote.open_gate()
        second, _ = await asyncio.to_thread(serve, store_url, "worker-B", remote.card_url)

        async def done() -> bool:
            return await runs(store_url) == [RunStatus.DONE]

        deadline = time.monotonic() + 60
        while not await done():
            assert time.monotonic() < deadline, await runs(store_url)
            await asyncio.sleep(0.1)
        assert len(remote.messages()) == 1
        assert remote.acts() == 1
        assert await last_text(store_url, "s1") == ANSWER
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(30)


async def test_outside_a_durable_run_the_agent_calls_the_same_way_without_a_record(
    remote: Remote,
) -> None:
    """On ADK's own Runner and in-memory sessions: the same send and follow, no journal."""
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    sys.path.insert(0, str(HERE))
    try:
        from a2a_caller import build_app
    finally:
        sys.path.remove(str(HERE))
    remote.open_gate()
    runner = InMemoryRunner(app=build_app(remote.card_url))
    session = await runner.session_service.create_session(app_name="a2acaller", user_id="u")
    message = types.Content(role="user", parts=[types.Part(text="research tides, please")])
    texts = [
        p.text
        async for e in runner.run_async(user_id="u", session_id=session.id, new_message=message)
        for p in (e.content.parts if e.content and e.content.parts else [])
        if p.text
    ]
    assert texts[-1] == ANSWER
    assert len(remote.messages()) == 1
    assert remote.acts() == 1


def test_the_example_s_demo_kills_the_desk_mid_call_and_the_remote_hears_once() -> None:
    """``python -m examples.a2a_research.app demo`` (docs/a2a-calling.md) does what it says."""
    root = HERE.parents[1]
    env = {**caller_env(), "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    done = run_child(
        [PYTHON, "-m", "examples.a2a_research.app", "demo"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "DONE; answer: High tide at Brest is 06:12." in done.stdout
    assert "messages the remote received in all: 1 " in done.stdout
