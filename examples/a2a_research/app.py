"""A desk agent that asks a remote research agent over A2A, and survives a kill mid-call.

The desk's model hands the user's question to ``researcher``, a
:class:`~durable_adk.adk.tools.remote_a2a.DurableRemoteA2aAgent` for the
research agent that ``examples.a2a_research.remote`` serves over A2A (ADK's
own ``to_a2a``). The message the desk sends is an outside effect: its id is
derived from the call, written to the journal before it is sent, and the
remote task it starts is on record before the run goes on. Kill the desk
mid-call and a fresh process re-attaches to that task (``tasks/get``) instead
of sending the question again.

Command line::

    python -m examples.a2a_research.app demo [--db URL]
    python -m examples.a2a_research.app ask --db URL --card URL [--session S]
    python -m examples.a2a_research.app recover --db URL --card URL
    RESEARCH_CARD_URL=URL durable-adk serve examples.a2a_research.app:app

``demo`` starts the remote on a free port, runs ``ask`` in a child process,
kills it with SIGKILL as soon as the remote received the question, runs
``recover`` in a fresh process and prints what the remote received (one
message) and the answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from google.adk.agents import LlmAgent
from google.adk.apps import App

from durable_adk import DurableRunner, open_store
from durable_adk.adk.tools.remote_a2a import DurableRemoteA2aAgent
from durable_adk.testing import Call, ScriptedModel
from durable_adk.testing.harness import sweep_as_fresh_worker

APP_NAME = "tides_desk"
USER = "ann"


def build_app(card_url: str) -> App:
    """The desk: its model hands every question to the remote researcher."""
    researcher = DurableRemoteA2aAgent(
        name="researcher",
        agent_card=card_url,
        description="Looks up tides.",
        poll_interval=0.1,
        max_poll_interval=1.0,
    )
    desk = LlmAgent(
        name="desk",
        model=ScriptedModel({"desk": [Call("transfer_to_agent", {"agent_name": "researcher"})]}),
        sub_agents=[researcher],
    )
    return App(name=APP_NAME, root_agent=desk)


# For ``durable-adk serve examples.a2a_research.app:app``.
app = build_app(os.environ["RESEARCH_CARD_URL"]) if "RESEARCH_CARD_URL" in os.environ else None


async def ask(db: str, card: str, session: str) -> None:
    async with open_store(db) as store:
        runner = DurableRunner(app=build_app(card), store=store)
        async for event in runner.run(
            user_id=USER, session_id=session, message="When is high tide at Brest?"
        ):
            if event.content and event.content.parts and event.content.parts[0].text:
                print(f"{event.author}: {event.content.parts[0].text}", flush=True)


async def recover(db: str, card: str) -> None:
    async with open_store(db) as store:
        runner = DurableRunner(app=build_app(card), store=store, worker_id="fresh-worker")
        for found in await sweep_as_fresh_worker(runner):
            print(json.dumps(found), flush=True)
        for row in await runner.ledger.list_runs():
            session = await runner.session_service.get_session(
                app_name=APP_NAME, user_id=USER, session_id=row.session_id
            )
            texts = [
                p.text
                for e in (session.events if session else [])
                for p in (e.content.parts if e.content and e.content.parts else [])
                if p.text and e.author == "researcher"
            ]
            print(f"run {row.run_id}: {row.status.value}; answer: {texts[-1] if texts else None}")


def demo(db: str | None) -> int:
    scratch = tempfile.mkdtemp(prefix="a2a-research-")
    db = db or f"sqlite:///{scratch}/desk.db"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    card = f"http://127.0.0.1:{port}/.well-known/agent-card.json"
    me = [sys.executable, "-m", "examples.a2a_research.app"]
    remote = subprocess.Popen(
        [sys.executable, "-m", "examples.a2a_research.remote", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    received: list[str] = []
    try:
        assert remote.stdout is not None
        if not remote.stdout.readline().startswith("READY"):
            print("the remote did not start", file=sys.stderr)
            return 1

        def read() -> None:
            assert remote.stdout is not None
            for line in remote.stdout:
                if line.startswith("RECEIVED "):
                    received.append(line.split()[1])

        threading.Thread(target=read, daemon=True).start()
        print(f"remote research agent on port {port}; the desk asks it...")
        desk = subprocess.Popen([*me, "ask", "--db", db, "--card", card])
        deadline = time.monotonic() + 60
        while not received and time.monotonic() < deadline:
            time.sleep(0.05)
        desk.send_signal(signal.SIGKILL)
        desk.wait()
        print(f"the remote received message {received}; the desk was killed (SIGKILL)")
        print("a fresh process recovers the run:")
        subprocess.run([*me, "recover", "--db", db, "--card", card], check=True)
        print(f"messages the remote received in all: {len(received)} {received}")
        return 0 if len(received) == 1 else 1
    finally:
        remote.terminate()
        remote.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("ask", "recover", "demo"):
        command = commands.add_parser(name)
        command.add_argument("--db", required=name != "demo")
        if name != "demo":
            command.add_argument("--card", required=True)
        if name == "ask":
            command.add_argument("--session", default="tides")
    args = parser.parse_args()
    if args.command == "demo":
        return demo(args.db)
    if args.command == "ask":
        asyncio.run(ask(args.db, args.card, args.session))
    else:
        asyncio.run(recover(args.db, args.card))
    return 0


if __name__ == "__main__":
    sys.exit(main())
