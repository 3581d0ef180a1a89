"""The remote side of the example: a research agent served over A2A by ADK's own ``to_a2a``.

Command line::

    python -m examples.a2a_research.remote --port 8011 [--seconds 3]

Its tool takes ``--seconds`` to look the tides up (the remote's slow outside
work). Every message the server receives is printed as ``RECEIVED <message
id>`` when it arrives, so a caller that sends a message twice shows it. Prints
``READY <port>`` once it accepts connections. Its task store is ADK's
in-memory default: it is the caller that this example kills.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import uvicorn
from google.adk.a2a.utils.agent_to_a2a import to_a2a
from google.adk.agents import LlmAgent

from durable_adk.testing import Call, Say, ScriptedModel


def build_app(port: int, seconds: float) -> Any:
    """The A2A app: an agent whose one tool takes ``seconds``, behind a logger of messages."""

    async def look_up_tides(place: str) -> dict[str, str]:
        """Looks up today's tides at a place (slowly)."""
        await asyncio.sleep(seconds)
        return {"place": place, "high": "06:12", "low": "12:31"}

    agent = LlmAgent(
        name="researcher",
        description="Looks up tides.",
        model=ScriptedModel(
            [Call("look_up_tides", {"place": "Brest"}), Say("High tide at Brest is 06:12.")]
        ),
        tools=[look_up_tides],
    )
    app = to_a2a(agent, host="127.0.0.1", port=port)

    async def logged(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        try:
            request = json.loads(body)
            sent = request["params"]["message"]["messageId"]
        except (ValueError, KeyError, TypeError):
            sent = None
        if sent:
            print(f"RECEIVED {sent}", flush=True)
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)

    return logged


async def serve(port: int, seconds: float) -> None:
    server = uvicorn.Server(
        uvicorn.Config(build_app(port, seconds), host="127.0.0.1", port=port, log_level="warning")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn offers no event for it
        await asyncio.sleep(0.02)
    print(f"READY {port}", flush=True)
    await task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.seconds))


if __name__ == "__main__":
    main()
