"""A worker's purge loop keeps its pacer from pass to pass, both backends (issue 43).

A pass of a purge that keeps up with a steady load is short; started afresh
each time, it marked sessions and deleted rows its dialect's least batch at a
time all through, however much the passes before had learned. The store's
calls are watched (the batch each mark asks for), nothing is timed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from google.adk.agents import LlmAgent

from durable_adk.adk.loops.background import Background, BackgroundSettings
from durable_adk.adk.runner import DurableRunner
from durable_adk.lifecycle import RetentionPolicy
from durable_adk.lifecycle.pacing import pace_for
from durable_adk.store import Store
from durable_adk.testing import Say, ScriptedModel

EVERYTHING = dict(done=0, failed=0, cancelled=0, parked=0, abandoned=0, idle_sessions=0)


def chatter(store: Store) -> DurableRunner:
    model = ScriptedModel({"chat": [Say("hello"), Say("again")]})
    return DurableRunner(
        app=LlmAgent(name="chat", model=model),
        app_name="chat",
        store=store,
        worker_id="w1",
        queue_poll=0.02,
    )


async def turn(runner: DurableRunner, session: str) -> None:
    async for _ in runner.run(user_id="u", session_id=session, message="hi"):
        pass
    # The cut-offs are "now" on the database's clock, milliseconds on SQLite,
    # and a session's last change is its event's timestamp: a session that
    # changed in the purge's own millisecond is not yet before it.
    await asyncio.sleep(0.01)


async def test_the_purge_loop_keeps_its_pacer_and_its_batch_from_pass_to_pass(
    store: Store,
) -> None:
    policy = RetentionPolicy(**EVERYTHING, batch=1000, duty=0.5)
    runner = chatter(store)
    background = Background(runner, BackgroundSettings(retention=policy), one_off=True)
    marks: list[int] = []
    real = store.fetch

    async def watched(query: str, params: Any = None) -> Any:
        if query == "purge_mark":
            marks.append(int(params["batch"]))
        return await real(query, params)

    store.fetch = watched  # type: ignore[method-assign]
    least = pace_for(store.dialect)[1]

    await turn(runner, "first")
    first = await background.purge_once()
    assert first is not None and first.tables["sessions"].rows == 1
    pacer = background.purge_pacer(policy)
    assert pacer.busy > 0  # it paced that pass
    pacer.batch = 7  # what the passes so far might have learned

    await turn(runner, "second")
    second = await background.purge_once()
    assert second is not None and second.tables["sessions"].rows == 1
    assert background.purge_pacer(policy) is pacer
    # The first pass began at the least batch; the second where the first left off.
    assert marks == [least, 7]

    # Another duty or batch: a pacer of its own, at the dialect's least batch.
    other = RetentionPolicy(**EVERYTHING, batch=1000, duty=0.25)
    fresh = background.purge_pacer(other)
    assert fresh is not pacer and fresh.batch == least and fresh.duty == 0.25
    assert background.purge_pacer(other) is fresh
