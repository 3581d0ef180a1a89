"""Units per run counted from decisions, on both backends.

docs/runs.md, "When events are committed".

A run with one tool call writes four units: its start; the user's message with
the model's call (before the tool runs); the tool's answer (before the next
model call); the final answer, the end marker and the run's finish. These
tests check what each merge promises:

* the last events and the finish are one unit: a failure of either writes
  neither (a trigger makes the finish fail inside the unit), and a real kill
  of the process during that unit (PostgreSQL: the statement held in a
  trigger) leaves both or neither;
* the caller is handed the final answer only once the run is finished;
* the user's message is written with the first decision, and a crash before
  it leaves the run NOT_STARTED, driven again from its request (the crash
  matrices in tests/crash cover that window with real kills).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from typing import Any

import asyncpg
import pytest
from google.adk.agents import LlmAgent
from google.adk.events.event import Event

from children import spawn
from durable_adk import DurableRunner, RunStatus, errors
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.demo import recovery_demo as demo
from durable_adk.store import Store, open_store
from durable_adk.tables.ledger import RunLedger
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.harness import sweep_as_fresh_worker
from refusals import refuse

APP = "floor"


def lookup(order: str) -> dict[str, str]:
    """Looks an order up."""
    return {"order": order, "status": "shipped"}


def clerk() -> LlmAgent:
    return LlmAgent(
        name="clerk",
        model=ScriptedModel([Call("lookup", {"order": "A1"}), Say("It has shipped.")]),
        tools=[lookup],
    )


async def stored(store: Store, session_id: str, app: str = APP, user: str = "u") -> list[Event]:
    session = await DurableSessionService(store).get_session(
        app_name=app, user_id=user, session_id=session_id
    )
    return list(session.events) if session else []


def texts(events: list[Event]) -> list[str]:
    return [
        p.text
        for e in events
        if e.author != "user" and e.content
        for p in e.content.parts or ()
        if p.text
    ]


async def refuse_done(store: Store, backend: str) -> None:
    """Makes every finish as DONE fail inside its unit (a trigger on the runs table)."""
    await refuse(store, backend, "refuse_done", "UPDATE OF status ON runs", "NEW.status = 'DONE'")


async def allow_done(store: Store, backend: str) -> None:
    if backend == "sqlite":
        await store.run_script("DROP TRIGGER refuse_done;")
    else:
        await store.run_script("DROP TRIGGER refuse_done ON runs; DROP FUNCTION refuse_done();")


async def test_the_last_events_and_the_finish_are_written_together_or_not_at_all(
    store: Store, backend: str
) -> None:
    runner = DurableRunner(app=clerk(), app_name=APP, store=store, backoff=0.01)
    await refuse_done(store, backend)
    handed: list[Event] = []
    with pytest.raises(errors.RunInterrupted):
        async for event in runner.run(user_id="u", session_id="s1", message="Where is A1?"):
            handed.append(event)
    # The finish failed inside the unit: the final answer was not written
    # either, and the caller was never handed it.
    events = await stored(store, "s1")
    assert texts(events) == [] and texts(handed) == []
    assert [c.name for e in events for c in e.get_function_responses()] == ["lookup"]
    (run,) = await runner.ledger.list_runs()
    assert run.status is RunStatus.RUNNING  # handed back: recovery finishes it
    await allow_done(store, backend)
    await runner.ledger.backdate(run.run_id, 3600)
    async with runner:
        for _ in range(200):
            now = await runner.ledger.get(run.run_id)
            if now is not None and now.status is RunStatus.DONE:
                break
            await asyncio.sleep(0.05)
    assert texts(await stored(store, "s1")) == ["It has shipped."]  # once
    done = await runner.ledger.get(run.run_id)
    assert done is not None and done.status is RunStatus.DONE


async def test_the_caller_is_handed_the_final_answer_once_the_run_is_finished(
    store: Store,
) -> None:
    runner = DurableRunner(app=clerk(), app_name=APP, store=store)
    ledger = RunLedger(store)
    finished_when_handed: list[bool] = []
    async for event in runner.run(user_id="u", session_id="s1", message="Where is A1?"):
        if texts([event]):
            (run,) = await ledger.list_runs()
            finished_when_handed.append(run.status is RunStatus.DONE)
            assert event.id in [e.id for e in await stored(store, "s1")]
    assert finished_when_handed == [True]


async def test_the_users_message_is_written_with_the_models_call_before_the_tool_runs(
    store: Store,
) -> None:
    seen_by_tool: list[list[str]] = []

    async def look(order: str) -> dict[str, str]:
        """Looks an order up (reads the store as another process would)."""
        seen_by_tool.append([e.author for e in await stored(store, "s1")])
        return {"order": order}

    agent = LlmAgent(
        name="clerk",
        model=ScriptedModel([Call("look", {"order": "A1"}), Say("Found.")]),
        tools=[look],
    )
    runner = DurableRunner(app=agent, app_name=APP, store=store)
    async for _ in runner.run(user_id="u", session_id="s1", message="A1?"):
        pass
    assert seen_by_tool == [["user", "clerk"]]  # the message and the call, both durable


async def test_a_message_with_a_state_change_is_written_before_the_model_is_called(
    store: Store,
) -> None:
    """A request keeps the message, not a state change: such a message is not deferred."""
    stored_at_model: list[list[str]] = []

    class Watching(ScriptedModel):
        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            stored_at_model.append([e.author for e in await stored(store, "s1")])
            async for response in super().generate_content_async(llm_request, stream):
                yield response

    agent = LlmAgent(name="clerk", model=Watching([Say("Noted.")]))
    runner = DurableRunner(app=agent, app_name=APP, store=store)
    async for _ in runner.run(
        user_id="u", session_id="s1", message="note this", state_delta={"seen": 1}
    ):
        pass
    assert stored_at_model == [["user"]]
    session = await DurableSessionService(store).get_session(
        app_name=APP, user_id="u", session_id="s1"
    )
    assert session is not None and session.state["seen"] == 1


@pytest.mark.skipif(sys.platform != "linux", reason="kills a child process")
async def test_a_kill_during_the_finishing_unit_leaves_both_or_neither(
    store_url: str, backend: str
) -> None:
    """PostgreSQL: the finishing statement is held in a trigger; the client is killed meanwhile.

    The server runs the statement to its end on its own: the answer and the
    finish are then both stored, and recovery has nothing left to do. (On
    SQLite the unit is one transaction on the killed process's own
    connection: the trigger test above shows a failure between the two
    writes leaves neither.)
    """
    if backend != "postgresql":
        pytest.skip("the statement is held by a PostgreSQL trigger")
    async with open_store(store_url) as store:
        await store.run_script(
            "CREATE FUNCTION hold_done() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN PERFORM pg_sleep(2); RETURN NEW; END $$; "
            "CREATE TRIGGER hold_done BEFORE UPDATE OF status ON runs FOR EACH ROW "
            "WHEN (NEW.status = 'DONE') EXECUTE FUNCTION hold_done();"
        )
    child = spawn(
        [sys.executable, "-m", demo.__name__, "run", "--db", store_url, "--session", "s1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=dict(os.environ),
    )
    conn = await asyncpg.connect(store_url)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            holding = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
            )
            if holding:
                break
            assert child.poll() is None, child.stderr.read() if child.stderr else ""
            await asyncio.sleep(0.02)
        else:
            pytest.fail("the finishing statement never reached the trigger")
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        while await conn.fetchval(  # noqa: ASYNC110 (polls another server's state)
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
        ):
            await asyncio.sleep(0.05)
        await conn.execute("DROP TRIGGER hold_done ON runs; DROP FUNCTION hold_done();")
    finally:
        await conn.close()
        if child.stderr:
            child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    async with open_store(store_url) as store:
        events = await stored(store, "s1", demo.APP_NAME, demo.USER_ID)
        (run,) = await RunLedger(store).list_runs()
        answered = texts(events) == ["We have 7 in stock."]
        assert answered == (run.status is RunStatus.DONE)  # both, or neither
        report = await sweep_as_fresh_worker(demo.make_runner(store, "worker-B"))
        if answered:
            assert report == []  # nothing left to recover
        (run,) = await RunLedger(store).list_runs()
        assert run.status is RunStatus.DONE
        assert texts(await stored(store, "s1", demo.APP_NAME, demo.USER_ID)) == [
            "We have 7 in stock."
        ]
