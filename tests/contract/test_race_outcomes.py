"""Every loser of a race learns what won (issue 47), both backends.

Two workers are two stores on one database (two connection pools, as two
``durable-adk serve`` processes have); each round sends the same kind of
action through both at the same instant, and each answer is checked against
the row as stored once the race is over: a loser is told the state and
result the row kept, never a state the row has left.

On PostgreSQL the job completion's fallback read used to see the row as its
statement began: the loser of a completion race was told STARTED while the
winner had committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from google.adk.agents import LlmAgent
from google.adk.tools.function_tool import FunctionTool
from tests.service.op_support import park_in_store

from durable_adk import DurableRunner, RunStatus, errors
from durable_adk.adk.runs.inbox import answer_interrupt
from durable_adk.adk.runs.operators import (
    Outcome,
    abandon_run,
    cancel_run,
    resolve_run,
    retry_run,
)
from durable_adk.effect_tables.jobs import JobState, JobTable
from durable_adk.service.features import complete_job
from durable_adk.store import Store, open_store
from durable_adk.tables.interrupts import InterruptTable
from durable_adk.tables.ledger import RunLedger
from durable_adk.testing import Call, Say, ScriptedModel

ROUNDS = 20


@pytest.fixture
async def two(store_url: str) -> AsyncIterator[tuple[Store, Store, Store]]:
    """Three stores on one database: two racing workers and a third to read what was kept."""
    async with (
        open_store(store_url) as a,
        open_store(store_url) as b,
        open_store(store_url) as judge,
    ):
        yield a, b, judge


async def test_a_completion_race_tells_each_loser_the_kept_state_and_result(
    two: tuple[Store, Store, Store],
) -> None:
    a, b, judge = two
    losers = 0
    for n in range(ROUNDS):
        job_id = f"report:{n}"
        await JobTable(judge).create(job_id, tool_name="start_report", deadline=60)
        sends = [
            (a, "SUCCEEDED", {"rows": n}),
            (b, "FAILED", {"error": f"lost {n}"}),
            (a, "FAILED", {"error": f"late {n}"}),
            (b, "SUCCEEDED", {"rows": -n}),
        ]
        answers = await asyncio.gather(
            *(complete_job(s, job_id, state=st, result=r) for s, st, r in sends)
        )
        kept = await JobTable(judge).get(job_id)
        assert kept is not None and kept.state is not JobState.STARTED
        assert [x["changed"] for x in answers].count(True) == 1, answers
        for answer in answers:
            assert (answer["state"], answer["result"]) == (kept.state.value, kept.result), (
                f"round {n}: an answer {answer} differs from the kept row "
                f"{kept.state.value} {kept.result}"
            )
        losers += 3
    assert losers == 3 * ROUNDS


def _says(outcome: Outcome | BaseException, status: RunStatus) -> bool:
    """Whether an operator's answer names the run's status as stored."""
    if isinstance(outcome, Outcome):
        return outcome.run.status is status and status.value in outcome.message
    return isinstance(outcome, errors.Conflict) and status.value in str(outcome)


@pytest.mark.parametrize("action", ["cancel", "abandon", "retry", "abandon-retry"])
async def test_an_operator_race_tells_each_loser_where_the_run_stands(
    two: tuple[Store, Store, Store], action: str
) -> None:
    a, b, judge = two

    async def act(store: Store, kind: str, run_id: str, who: str) -> Outcome:
        ledger = RunLedger(store)
        if kind == "cancel":
            return await cancel_run(ledger, run_id, by=who, reason="race")
        if kind == "abandon":
            return await abandon_run(ledger, run_id, by=who, reason="race")
        return await retry_run(ledger, run_id, by=who, reason="race")

    kinds = action.split("-") if "-" in action else [action, action]
    for n in range(ROUNDS):
        run, _ = await park_in_store(judge, f"s{n}")
        answers = await asyncio.gather(
            act(a, kinds[0], run.run_id, "ops-a"),
            act(b, kinds[1], run.run_id, "ops-b"),
            return_exceptions=True,
        )
        kept = await RunLedger(judge).get(run.run_id)
        assert kept is not None
        changed = [x for x in answers if isinstance(x, Outcome) and x.changed]
        assert len(changed) == 1, answers
        actions = await RunLedger(judge).actions(run_id=run.run_id)
        assert [x.actor for x in actions] == [("ops-a", "ops-b")[answers.index(changed[0])]]
        for answer in answers:
            assert _says(answer, kept.status), (
                f"round {n}: {answer!r} does not say the run is {kept.status.value}"
            )


def _cashier(store: Store) -> DurableRunner:
    def pay(invoice: str) -> dict[str, str]:
        """Pays an invoice."""
        return {"paid": invoice}

    model = ScriptedModel({"cashier": [Call("pay", {"invoice": "I-1"}), Say("Paid.")]})
    agent = LlmAgent(
        name="cashier", model=model, tools=[FunctionTool(pay, require_confirmation=True)]
    )
    return DurableRunner(app=agent, store=store, app_name="cashier")


async def test_an_answer_race_tells_the_loser_who_answered(
    two: tuple[Store, Store, Store],
) -> None:
    a, b, judge = two
    runner = _cashier(judge)
    for n in range(ROUNDS):
        async for _ in runner.run(user_id="u", session_id=f"s{n}", message="pay I-1"):
            pass
        (interrupt,) = await InterruptTable(judge).list_interrupts(
            app_name="cashier", session_id=f"s{n}"
        )
        answers = await asyncio.gather(
            answer_interrupt(a, interrupt.call_id, by="alice", decision="approve"),
            answer_interrupt(b, interrupt.call_id, by="bob", decision="deny"),
            return_exceptions=True,
        )
        taken = [x for x in answers if not isinstance(x, BaseException)]
        refused = [x for x in answers if isinstance(x, BaseException)]
        assert len(taken) == 1 and len(refused) == 1, answers
        (kept,) = await InterruptTable(judge).list_interrupts(
            status=None, app_name="cashier", session_id=f"s{n}"
        )
        assert kept.status.value == "ANSWERED" and kept.answer_run_id == taken[0].run.run_id
        assert isinstance(refused[0], errors.Conflict)
        assert f"already answered by {kept.answered_by}" in str(refused[0]), refused[0]
        assert taken[0].interrupt.answered_by == kept.answered_by


async def test_a_resolve_race_tells_the_loser_who_resolved(
    two: tuple[Store, Store, Store],
) -> None:
    a, b, judge = two
    for n in range(ROUNDS):
        run, call_id = await park_in_store(judge, f"s{n}")
        answers = await asyncio.gather(
            resolve_run(RunLedger(a), run.run_id, by="ops-a", result={"in_stock": 1}),
            resolve_run(RunLedger(b), run.run_id, by="ops-b", result={"in_stock": 2}),
            return_exceptions=True,
        )
        changed = [x for x in answers if isinstance(x, Outcome) and x.changed]
        assert len(changed) == 1, answers
        (action,) = [x for x in await RunLedger(judge).actions(run_id=run.run_id)]
        assert action.action == "resolve"
        loser = answers[1 - answers.index(changed[0])]
        assert action.actor in str(loser if isinstance(loser, BaseException) else loser.message), (
            f"round {n}: {loser!r} does not name {action.actor}"
        )
        assert action.detail is not None and call_id in str(action.detail)


async def test_a_resolve_read_between_the_winners_claim_and_its_record_names_the_winner(
    two: tuple[Store, Store, Store],
) -> None:
    """The window the race above hits only sometimes, held open: the winner has
    claimed the run (RUNNING, owner ``operator:ops-a``) and not yet recorded its
    action; the loser is told who is resolving it, and nothing changes."""
    a, b, judge = two
    run, _ = await park_in_store(judge, "held")
    claimed = await RunLedger(a).operator_claim(run, "operator:ops-a")
    assert claimed is not None
    with pytest.raises(errors.Conflict, match="being resolved by ops-a"):
        await resolve_run(RunLedger(b), run.run_id, by="ops-b", result={"in_stock": 2})
    assert await RunLedger(judge).actions(run_id=run.run_id) == []
    after = await RunLedger(judge).get(run.run_id)
    assert after is not None and after.status is RunStatus.RUNNING
    assert after.owner == "operator:ops-a"
