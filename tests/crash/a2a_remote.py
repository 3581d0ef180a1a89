"""A remote A2A agent for the calling-side crash tests: ADK's own ``to_a2a`` app.

Usage: python tests/crash/a2a_remote.py PORT LOG SERVICE_URL GATE [MODE [ADVERTISED]]

* PORT: where it listens, on 127.0.0.1 (the card names that address).
* LOG: a file where every JSON-RPC request is appended as one JSON line
  (``method`` and, for a message, its ``message_id``, ``task_id``), written
  when the request arrives, before it is handled: what the tests count.
* SERVICE_URL: a fake outside service (``notifications``); the remote agent's
  tool creates one item there per call: the remote's outside act.
* GATE: a file path; the tool waits (at most 60 s) until it exists, so a
  test can hold the remote task WORKING while it kills the caller.
* While a file ``LOG.nolist`` exists, ``tasks/list`` is answered with A2A's
  UnsupportedOperation error (a remote that cannot be asked).
* MODE: ``work`` (default: the tool acts, the agent answers with a text) or
  ``ask`` (a long-running tool: the task ends input-required, and the answer
  the caller sends back finishes it).
* ADVERTISED: the port its card names (default PORT), for a test that puts a
  forwarder in front of it.

Its stores are ADK's in-memory defaults: this process is never killed.
Prints ``READY <port>`` once it accepts connections.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn
from google.adk.a2a.utils.agent_to_a2a import to_a2a
from google.adk.agents import LlmAgent
from google.adk.tools import LongRunningFunctionTool

from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.services import ResourceClient

PORT, LOG, SERVICE_URL, GATE = sys.argv[1:5]
MODE = sys.argv[5] if len(sys.argv) > 5 else "work"
ADVERTISED = int(sys.argv[6]) if len(sys.argv) > 6 else int(PORT)


def _wait_for_gate() -> None:
    deadline = time.monotonic() + 60
    while not Path(GATE).exists() and time.monotonic() < deadline:
        time.sleep(0.05)


async def do_research(topic: str) -> dict[str, Any]:
    """Researches a topic (the remote's outside act), once the gate opens."""
    await asyncio.to_thread(_wait_for_gate)
    item = await asyncio.to_thread(
        ResourceClient(SERVICE_URL, "notifications", fenced=False).create,
        {"to": "researcher", "message": f"researched {topic}"},
        f"research:{topic}:{time.time_ns()}",  # a new key per act: every act counts
    )
    return {"topic": topic, "finding": f"{topic} is fine", "item": item["id"]}


def ask_approval(topic: str) -> None:
    """Asks a person to approve the research (the answer comes later)."""
    return None


def _script() -> list[Any]:
    if MODE == "ask":
        return [Call("ask_approval", {"topic": "tides"}), Say("approved research on tides")]
    return [Call("do_research", {"topic": "tides"}), Say("tides are fine")]


agent = LlmAgent(
    name="researcher",
    description="Researches topics.",
    model=ScriptedModel(_script()),
    tools=[LongRunningFunctionTool(ask_approval)] if MODE == "ask" else [do_research],
)
app = to_a2a(agent, host="127.0.0.1", port=ADVERTISED)
_log_lock = threading.Lock()


def _note(body: bytes) -> str | None:
    try:
        request = json.loads(body)
    except ValueError:
        request = {}
    params = request.get("params") or {} if isinstance(request, dict) else {}
    message = params.get("message") or {} if isinstance(params, dict) else {}
    line = {
        "method": request.get("method") if isinstance(request, dict) else None,
        "message_id": message.get("messageId"),
        "task_id": message.get("taskId") or params.get("id"),
    }
    with _log_lock, open(LOG, "a", encoding="utf-8") as log:
        log.write(json.dumps(line) + "\n")
    method = line["method"]
    return method if isinstance(method, str) else None


async def counting(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Logs every JSON-RPC request's method and message id, then hands it to the app."""
    if scope["type"] != "http" or scope["method"] != "POST":
        await app(scope, receive, send)
        return
    chunks: list[bytes] = []
    more = True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    body = b"".join(chunks)
    if _note(body) == "ListTasks" and _no_listing():
        await _unsupported(body, send)
        return
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    await app(scope, replay, send)


def _no_listing() -> bool:
    return Path(f"{LOG}.nolist").exists()


async def _unsupported(body: bytes, send: Any) -> None:
    """A2A's error for a method this server does not offer (while ``LOG.nolist`` exists)."""
    try:
        request_id = json.loads(body).get("id")
    except (ValueError, AttributeError):
        request_id = None
    error = {"code": -32004, "message": "tasks/list is not offered here"}
    payload = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # the default handlers, not uvicorn's
        pass


async def main() -> None:
    config = uvicorn.Config(counting, host="127.0.0.1", port=int(PORT), log_level="warning")
    server = _Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn offers no event for it
        await asyncio.sleep(0.02)
    print(f"READY {PORT}", flush=True)
    await task


if __name__ == "__main__":
    asyncio.run(main())
