"""A run's inbox is written in the unit that finishes it, on both backends.

docs/service.md, "The interrupts inbox". A run that ends PAUSED has its open
calls indexed, and a run that ends its invocation DONE closes the pause it
answered, in the same unit of work as the run's row: no crash leaves a PAUSED
run whose call an operator cannot see, or a DONE invocation with its pause
still open. These tests check:

* units: a pausing turn writes no unit of its own for the inbox, and the
  answer's finish ends the paused run and settles its interrupt;
* atomicity: an index row that fails inside the unit (a trigger on the
  interrupts table) leaves the run unfinished and its final events unwritten,
  and a later recovery pauses it with its call in the inbox;
* the fence: a finish refused for a stale lease writes nothing to the inbox;
* a run whose invocation asked no person sends no inbox at all.

The crash test in tests/crash/test_shapes.py kills a real process right after
the unit.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.genai import types
from test_barrier_commits import CountingStore

from durable_adk import DurableRunner, errors
from durable_adk.adk.eventlog.classify import classify
from durable_adk.adk.runs.inbox import inbox_at_finish
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.demo.approvals_app import APP_NAME
from durable_adk.demo.approvals_app import app as approvals_app
from durable_adk.store import Store
from durable_adk.tables.interrupts import InterruptKind, InterruptStatus, InterruptTable
from durable_adk.tables.ledger import Lease, RunLedger, RunStatus
from durable_adk.testing import Say, ScriptedModel
from durable_adk.testing.harness import sweep_as_fresh_worker
from refusals import refuse

USER = "u1"


def runner(store: Store, **options: Any) -> DurableRunner:
    return DurableRunner(app=approvals_app(), app_name=APP_NAME, store=store, **options)


async def drive(runner: DurableRunner, session_id: str, message: Any, **options: Any) -> None:
    async for _ in runner.run(user_id=USER, session_id=session_id, message=message, **options):
        pass


async def approval_of(store: Store, session_id: str) -> tuple[str, types.Content]:
    """The invocation paused in ``session_id`` and the message approving its call."""
    session = await DurableSessionService(store).get_session(
        app_name=APP_NAME, user_id=USER, session_id=session_id
    )
    assert session is not None
    (call, invocation_id) = next(
        (c, e.invocation_id)
        for e in session.events
        for c in e.get_function_calls()
        if c.name == "adk_request_confirmation"
    )
    answer = types.FunctionResponse(id=call.id, name=call.name, response={"confirmed": True})
    return invocation_id, types.Content(role="user", parts=[types.Part(function_response=answer)])


async def test_a_pause_and_its_answer_keep_the_inbox_in_their_finish(store: Store) -> None:
    counting = CountingStore(store)
    await drive(runner(store), "s1", "O-1")
    (paused,) = await RunLedger(store).list_runs()
    assert paused.status is RunStatus.PAUSED
    # The confirmation request goes with the PAUSED finish; the inbox with it.
    assert counting.calls["append_events_finish"] == 1
    assert not {"interrupt_open", "interrupt_of_invocation", "interrupt_settle"} & set(
        counting.calls
    )
    table = InterruptTable(store)
    (interrupt,) = await table.list_interrupts()
    assert interrupt.kind is InterruptKind.CONFIRMATION and interrupt.run_id == paused.run_id
    assert interrupt.args["originalFunctionCall"]["args"] == {"order_id": "O-1"}

    # The answer, given as a client gives it (the invocation's continuation).
    counting.calls.clear()
    invocation_id, approval = await approval_of(store, "s1")
    await drive(runner(store), "s1", approval, invocation_id=invocation_id)
    statuses = {r.run_id: r.status for r in await RunLedger(store).list_runs()}
    assert set(statuses.values()) == {RunStatus.DONE} and len(statuses) == 2
    (settled,) = await table.list_interrupts(status=None)
    assert settled.status is InterruptStatus.ANSWERED and settled.answered_by == "session"
    assert not {"run_close_paused", "interrupt_settle"} & set(counting.calls)


async def test_an_index_row_refused_inside_the_unit_leaves_the_run_unfinished(
    store: Store, backend: str
) -> None:
    await refuse(store, backend, "refuse_interrupt", "INSERT ON interrupts")
    with pytest.raises(errors.RunInterrupted):
        await drive(runner(store, worker_id="worker-A"), "s1", "O-1")
    (run,) = await RunLedger(store).list_runs()
    assert run.status is RunStatus.RUNNING  # its lease expires; recovery takes it
    session = await DurableSessionService(store).get_session(
        app_name=APP_NAME, user_id=USER, session_id="s1"
    )
    assert session is not None
    # The model's call and the request for confirmation went with the finish:
    # neither was written.
    assert [c.name for e in session.events for c in e.get_function_calls()] == []
    assert await InterruptTable(store).list_interrupts(status=None) == []

    await store.run_script(
        "DROP TRIGGER refuse_interrupt"
        if backend == "sqlite"
        else "DROP TRIGGER refuse_interrupt ON interrupts; DROP FUNCTION refuse_interrupt();"
    )
    # Nothing of the turn but the user's message is stored (the call that only
    # asks for confirmation goes with the pause): the re-drive asks again.
    report = await sweep_as_fresh_worker(runner(store, worker_id="worker-B"))
    assert [(r["found"], r["status"]) for r in report] == [("NOT_STARTED", "PAUSED")]
    (run,) = await RunLedger(store).list_runs()
    assert run.status is RunStatus.PAUSED
    (interrupt,) = await InterruptTable(store).list_interrupts()
    assert interrupt.run_id == run.run_id and interrupt.name == "adk_request_confirmation"


async def test_a_finish_refused_by_its_fence_writes_nothing_to_the_inbox(store: Store) -> None:
    ledger = RunLedger(store)
    sessions = DurableSessionService(store)
    await drive(runner(store), "s1", "O-1")
    (paused,) = await ledger.list_runs()
    await InterruptTable(store).close_of_run(paused.run_id)  # as if it had been answered
    session = await sessions.get_session(app_name=APP_NAME, user_id=USER, session_id="s1")
    assert session is not None
    found = classify(session.events, paused.invocation_id, root_agent_name=APP_NAME)
    assert found.pending_long_running
    inbox = inbox_at_finish(paused, session.events, found, done=False)
    # The run is no longer RUNNING at this epoch: the finish and its inbox are refused.
    for lease in (paused.lease, Lease(paused.run_id, paused.owner, paused.epoch + 1)):
        assert not await ledger.finish(lease, RunStatus.PAUSED, inbox=inbox)
    assert [i.status for i in await InterruptTable(store).list_interrupts(status=None)] == [
        InterruptStatus.CLOSED
    ]


async def test_only_a_run_that_asked_a_person_sends_an_inbox(store: Store) -> None:
    sent: list[str | None] = []
    inner = store.fetch

    async def fetch(query: str, params: Any = None) -> Any:
        if query in ("run_finish", "append_events_finish"):
            sent.append(params["inbox"])
        return await inner(query, params)

    store.fetch = fetch  # type: ignore[method-assign]
    await drive(runner(store), "s1", "O-1")
    plain = LlmAgent(name="plain", model=ScriptedModel([Say("Hello.")]))
    await drive(DurableRunner(app=plain, app_name=APP_NAME, store=store), "s2", "hi")
    assert len(sent) == 2 and sent[0] is not None and sent[1] is None
