"""Token streaming over the real HTTP API (uvicorn on a socket), both backends.

A run driven with streaming sends its model text as ``partial`` SSE events,
live, between the stored events: no ``id``, ``{"partial": true, ...}``, never
in the session's log. Stored events keep their sequence numbers, and a
reconnect from one gets the stored events only, as before.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from typing import Any

import httpx
from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from svc_support import SseMessage, parse_sse, settings_for, threaded_worker

from durable_adk import idempotent
from durable_adk.testing import Call, Say, ScriptedModel

ANSWER = Say("We have 7 lamps in stock.", chunks=("We have ", "7 lamps", " in stock."))
LISTENING = threading.Event()
"""Set by the test once its stream is connected: the tool waits for it."""


@idempotent
async def look_up(item: str) -> dict[str, Any]:
    """Reads the stock of an item, once the test listens."""
    await asyncio.to_thread(LISTENING.wait, 120)
    return {"item": item, "in_stock": 7}


def app() -> App:
    agent = LlmAgent(
        name="root",
        model=ScriptedModel({"root": [Call("look_up", {"item": "lamp"}), ANSWER] * 3}),
        tools=[look_up],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        resumable = ResumabilityConfig(is_resumable=True)
    return App(name="streamer", root_agent=agent, resumability_config=resumable)


def follow(client: httpx.Client, path: str, **headers: str) -> list[SseMessage]:
    """Reads a stream to its end; lets the tool go once a stored call was seen."""
    seen: list[SseMessage] = []
    with client.stream("GET", path, headers=headers) as response:
        assert response.status_code == 200
        for message in parse_sse(response.iter_lines()):
            seen.append(message)
            parts = (message.data.get("event", {}).get("content") or {}).get("parts") or []
            if message.event == "event" and any("function_call" in p for p in parts):
                LISTENING.set()
    return seen


def text(message: SseMessage) -> str:
    parts = (message.data["event"].get("content") or {}).get("parts") or []
    return "".join(p.get("text", "") for p in parts)


def test_partial_events_reach_the_event_stream_live_and_are_never_stored(
    store_url: str,
) -> None:
    LISTENING.clear()
    settings = settings_for(store_url, streaming=True, idempotent_tools=())
    with threaded_worker(settings, app=app()) as worker, worker.client() as client:
        started = client.post("/v1/users/u/sessions/s1/runs", json={"message": "lamps?"})
        assert started.status_code == 202, started.text
        run_id = started.json()["run"]["run_id"]
        seen = follow(client, started.json()["events_url"])

        assert seen[-1].event == "end" and seen[-1].data["runs"] == {run_id: "DONE"}
        partials = [m for m in seen if m.event == "partial"]
        assert [text(m) for m in partials] == list(ANSWER.chunks)
        assert all(m.id is None and m.data["partial"] is True for m in partials)
        assert all("seq" not in m.data and m.data["event"]["partial"] is True for m in partials)
        stored = [m for m in seen if m.event == "event"]
        seqs = [m.data["seq"] for m in stored]
        assert seqs == list(range(1, len(seqs) + 1))  # stored events keep their numbers
        assert [m.id for m in stored] == [str(n) for n in seqs]
        # Live, in drive order: after the tool's answer, before the final text.
        final = next(m for m in stored if text(m) == ANSWER.text)
        answer = next(m for m in stored if "function_response" in str(m.data["event"]))
        assert seen.index(answer) < seen.index(partials[0])
        assert seen.index(partials[-1]) < seen.index(final)

        log = client.get("/v1/users/u/sessions/s1/events").json()["events"]
        assert [e["seq"] for e in log] == seqs
        assert not [e for e in log if e["event"].get("partial")]

        # A reconnect from the tool's answer gets the stored events only.
        again = follow(
            client,
            f"/v1/users/u/sessions/s1/stream?run_id={run_id}",
            **{"Last-Event-ID": str(answer.data["seq"])},
        )
        after_answer = [m for m in stored if m.data["seq"] > answer.data["seq"]]
        assert [m.event for m in again] == ["event"] * len(after_answer) + ["end"]
        assert [m.data for m in again[:-1]] == [m.data for m in after_answer]
        assert final in after_answer

        # A run may ask not to stream.
        plain = client.post(
            "/v1/users/u/sessions/s1/runs", json={"message": "more?", "streaming": False}
        )
        assert plain.status_code == 202, plain.text
        quiet = follow(client, plain.json()["events_url"])
        assert quiet[-1].event == "end"
        assert not [m for m in quiet if m.event == "partial"]
        assert [text(m) for m in quiet if m.event == "event" and text(m)] == ["more?", ANSWER.text]
