"""Token streaming through DurableRunner: partial events reach the caller, never the log.

Both backends. The scripted model streams its answer in chunks when ADK asks
for a stream (``StreamingMode.SSE``), as a real streaming model does.
"""

from __future__ import annotations

import time
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode  # type: ignore[attr-defined]
from google.adk.events.event import Event
from google.genai import types

from durable_adk import DurableRunner, RunLedger, RunStatus, Sweeper, idempotent
from durable_adk.adk.eventlog.live import Stored
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.store import Store
from durable_adk.testing import Call, Say, ScriptedModel

APP = "streamer"
ANSWER = Say("We have 7 lamps in stock.", chunks=("We have ", "7 lamps", " in stock."))
SSE = RunConfig(streaming_mode=StreamingMode.SSE)


@idempotent
def look_up(item: str) -> dict[str, Any]:
    """Reads the stock of an item."""
    return {"item": item, "in_stock": 7}


def runner(store: Store, **options: Any) -> DurableRunner:
    agent = LlmAgent(
        name="root",
        model=ScriptedModel({"root": [Call("look_up", {"item": "lamp"}), ANSWER] * 3}),
        tools=[look_up],
    )
    return DurableRunner(app=agent, app_name=APP, store=store, background=False, **options)


def text_of(event: Event) -> str:
    return "".join(p.text or "" for p in (event.content.parts or [])) if event.content else ""


async def stored(store: Store, session: str) -> list[Event]:
    found = await DurableSessionService(store).get_session(
        app_name=APP, user_id="u", session_id=session
    )
    assert found is not None
    return list(found.events)


async def test_partial_events_reach_the_caller_and_are_never_stored(store: Store) -> None:
    durable = runner(store)
    seen = [
        event
        async for event in durable.run_async(
            user_id="u",
            session_id="s1",
            new_message=types.Content(role="user", parts=[types.Part(text="lamps?")]),
            run_config=SSE,
        )
    ]
    partials = [e for e in seen if e.partial]
    assert [text_of(e) for e in partials] == list(ANSWER.chunks)
    final = [e for e in seen if not e.partial and text_of(e)]
    assert [text_of(e) for e in final] == [ANSWER.text]
    # The chunks come before the final text, which has their id (ADK's rule).
    assert seen.index(partials[-1]) < seen.index(final[0])
    assert {e.id for e in partials} == {final[0].id}
    log = await stored(store, "s1")
    assert not [e for e in log if e.partial]
    # Every other event the caller got is stored (ADK stores the user's message, unyielded).
    assert [e.id for e in log if e.author != "user"] == [e.id for e in seen if not e.partial]
    assert [text_of(e) for e in log if e.author == "root" and text_of(e)] == [ANSWER.text]
    (run,) = await RunLedger(store).list_runs()
    assert run.status is RunStatus.DONE


async def test_without_streaming_there_are_no_partial_events(store: Store) -> None:
    seen = [e async for e in runner(store).run(user_id="u", session_id="s1", message="lamps?")]
    assert not [e for e in seen if e.partial]
    assert [text_of(e) for e in seen if text_of(e) and e.author == "root"] == [ANSWER.text]


async def test_a_recovery_streams_to_the_sessions_live_followers(store: Store) -> None:
    ledger = RunLedger(store)
    started = await ledger.start(
        app_name=APP,
        user_id="u",
        session_id="s2",
        request={"role": "user", "parts": [{"text": "lamps?"}]},
        owner="dead-worker",
        now=time.time(),
    )
    assert started is not None
    await ledger.backdate(started.run.run_id, 3600)
    durable = runner(store, run_config=SSE)  # a recovered drive uses the runner's RunConfig
    with durable.live.subscribe((APP, "u", "s2")) as follower:
        (done,) = await Sweeper(durable).recover_once()
        assert done.status is RunStatus.DONE
        items = follower.take()
    partials = [i for i in items if isinstance(i, Event)]
    assert [text_of(e) for e in partials] == list(ANSWER.chunks)
    log = await stored(store, "s2")
    assert not [e for e in log if e.partial]
    # Stored events come with their numbers, in the drive's order with the partials:
    # the user's message, the call, its answer, the chunks, then the whole text.
    stored_items = [i for i in items if isinstance(i, Stored)]
    assert [i.seq for i in stored_items] == list(range(1, len(log) + 1))
    assert [i.event_id for i in stored_items] == [e.id for e in log]
    final = next(i for i in stored_items if i.event_id == partials[0].id)
    assert items.index(partials[-1]) + 1 == items.index(final)
    with durable.live.subscribe((APP, "u", "other")) as elsewhere:
        async for _event in durable.run(
            user_id="u", session_id="s3", message="lamps?", run_config=SSE
        ):
            pass
        assert not elsewhere.pending  # only its own session's events
