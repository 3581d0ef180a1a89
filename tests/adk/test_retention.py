"""Retention and forgetting a user over real runs, both backends (issue 43).

Every race here runs the purge under a policy that lets everything finished
go at once (every duration 0) at the same time as the continuation that a
still-needed session is waiting for: a paused run's answer, a job's
completion, a sleeping run's wake-up and a saga's compensation. The
continuation must find everything it needs and finish; the outside acts are
counted; the finished session beside it goes.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from examples.reminders.app import APP_NAME as SLEEP_APP
from examples.reminders.app import ASK as SLEEP_ASK
from examples.reminders.app import REMINDER
from examples.reminders.app import build_agent as reminder_agent
from examples.sales_report.app import APP_NAME as SALES_APP
from examples.sales_report.app import ASK as SALES_ASK
from examples.sales_report.app import JOB_ID
from examples.sales_report.app import build_agent as sales_agent
from google.adk.agents import LlmAgent
from google.adk.tools.function_tool import FunctionTool

from durable_adk import errors, journaled
from durable_adk.adk.loops.recovery import Sweeper
from durable_adk.adk.loops.resume import Resumer
from durable_adk.adk.loops.sleep import Waker
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.runs.inbox import answer_interrupt
from durable_adk.effect_tables.jobs import JobState, JobTable
from durable_adk.effect_tables.sagas import Compensation, SagaLedger, SagaStatus, Undo
from durable_adk.lifecycle import RetentionPolicy, forget_user, purge
from durable_adk.store import Keyring, Store, open_store
from durable_adk.store.queries import parse_queries
from durable_adk.tables.interrupts import InterruptTable
from durable_adk.tables.ledger import RunStatus
from durable_adk.testing import Call, Say, ScriptedModel

ALL_AT_ONCE = RetentionPolicy(
    done=0, failed=0, cancelled=0, parked=0, abandoned=0, idle_sessions=0, batch=3, duty=1.0
)
"""Everything finished goes now, flat out (the pacing has tests of its own:
test_purge_pacing, test_retention_pacing); batches of 3 rows, so every table
takes several."""

# What the tests read that the library never asks: rows per table, payloads left.
TEST_SQL = """
-- name: test_rows
SELECT (SELECT COUNT(*) FROM sessions) AS sessions, (SELECT COUNT(*) FROM events) AS events,
       (SELECT COUNT(*) FROM runs) AS runs, (SELECT COUNT(*) FROM journal) AS journal,
       (SELECT COUNT(*) FROM jobs) AS jobs, (SELECT COUNT(*) FROM interrupts) AS interrupts,
       (SELECT COUNT(*) FROM sagas) AS sagas, (SELECT COUNT(*) FROM saga_steps) AS saga_steps,
       (SELECT COUNT(*) FROM answer_claims) AS answer_claims,
       (SELECT COUNT(*) FROM user_state) AS user_state,
       (SELECT COUNT(*) FROM artifacts) AS artifacts,
       (SELECT COUNT(*) FROM operator_actions) AS operator_actions,
       (SELECT COUNT(*) FROM forget_requests) AS forget_requests;

-- name: test_payloads_left
SELECT (SELECT COUNT(*) FROM runs WHERE request <> '') AS requests,
       (SELECT COUNT(*) FROM journal WHERE result IS NOT NULL) AS results,
       (SELECT COUNT(*) FROM journal) AS journal_rows;
"""


@pytest.fixture(autouse=True)
def _test_queries(request: pytest.FixtureRequest) -> None:
    if "store" in request.fixturenames:
        store: Store = request.getfixturevalue("store")
        store.add_queries(parse_queries(TEST_SQL, store.dialect))


async def rows(store: Store) -> dict[str, int]:
    """Rows per table."""
    if "test_rows" not in store._queries:
        store.add_queries(parse_queries(TEST_SQL, store.dialect))
    row = await store.fetchrow("test_rows")
    assert row is not None
    return {k: int(v) for k, v in row.items()}


def runner_for(store: Store, agent: Any, app: str) -> DurableRunner:
    return DurableRunner(app=agent, app_name=app, store=store, worker_id="w1", queue_poll=0.02)


async def turn(runner: DurableRunner, session: str, text: str, user: str = "u") -> list[Any]:
    return [e async for e in runner.run(user_id=user, session_id=session, message=text)]


def chatter(store: Store, app: str = "chat") -> DurableRunner:
    model = ScriptedModel({"chat": [Say("hello"), Say("again"), Say("more"), Say("last")]})
    return runner_for(store, LlmAgent(name="chat", model=model), app)


async def session_ids(store: Store, runner: DurableRunner, user: str = "u") -> list[str]:
    listed = await runner.sessions.list_sessions(app_name=runner.app_name, user_id=user)
    return sorted(s.id for s in listed.sessions)


# ------------------------------------------------------------------ races


async def test_purge_racing_a_sleeping_runs_wake_keeps_what_the_wake_needs(
    store: Store,
) -> None:
    runner = runner_for(store, reminder_agent(3600), SLEEP_APP)
    await turn(runner, "done-one", SLEEP_ASK)
    await turn(runner, "asleep", SLEEP_ASK)
    jobs = JobTable(store)
    timers = {j.session_id: j for j in await jobs.list_jobs()}
    waker = Waker(jobs, resumer=Resumer(runner, jobs, gather=0.0))
    await jobs.backdate(timers["done-one"].job_id, 3601)
    await waker.wake_once(wait=True)
    await jobs.backdate(timers["asleep"].job_id, 3601)
    report, woken = await asyncio.gather(
        purge(store, SLEEP_APP, ALL_AT_ONCE), waker.wake_once(wait=True)
    )
    assert [j.job_id for j in woken] == [timers["asleep"].job_id]
    left = await runner.sessions.get_session(app_name=SLEEP_APP, user_id="u", session_id="asleep")
    assert left is not None
    said = [p.text for e in left.events if e.content for p in e.content.parts or () if p.text]
    assert said.count(REMINDER) == 1
    assert await session_ids(store, runner) == ["asleep"]
    assert report.tables["sessions"].rows == 1 and report.tables["events"].rows >= 4
    assert {r.status for r in await runner.ledger.list_runs()} == {RunStatus.DONE}
    again = await purge(store, SLEEP_APP, ALL_AT_ONCE)
    assert again.tables["sessions"].rows == 1 and await runner.ledger.list_runs() == []
    assert await jobs.list_jobs() == []


async def test_purge_racing_a_job_completion_keeps_the_job_until_its_call_is_answered(
    store: Store,
) -> None:
    class Builder:
        def __init__(self) -> None:
            self.submitted: list[str] = []

        def submit(self, job_id: str, quarter: str, region: str) -> None:
            self.submitted.append(job_id)

        def cancel(self, job_id: str) -> None:
            pass

    builder = Builder()
    runner = runner_for(store, sales_agent(builder, minute=1.0), SALES_APP)
    other = chatter(store, SALES_APP)
    await turn(other, "finished", "hi", user="dana")
    await turn(runner, "waiting", SALES_ASK, user="dana")
    jobs = JobTable(store)
    resumer = Resumer(runner, jobs, gather=0.0)

    async def complete_and_resume() -> Any:
        done = {"status": "done", "url": "https://r/q3.xlsx", "row_count": 7}
        await jobs.complete(JOB_ID, JobState.SUCCEEDED, done)
        return await resumer.resume_once(wait=True)

    report, resumed = await asyncio.gather(
        purge(store, SALES_APP, ALL_AT_ONCE), complete_and_resume()
    )
    assert len(resumed) == 1
    events = (
        await runner.sessions.get_session(app_name=SALES_APP, user_id="dana", session_id="waiting")
    ).events
    said = [p.text for e in events if e.content for p in e.content.parts or () if p.text]
    assert any("Your report is ready" in t for t in said)
    assert builder.submitted == [JOB_ID]
    assert (await jobs.get(JOB_ID)).resumed_at is not None
    assert await session_ids(store, runner, "dana") == ["waiting"]
    assert report.tables["sessions"].rows == 1


async def test_purge_racing_a_paused_runs_answer_keeps_the_pause_and_its_interrupt(
    store: Store,
) -> None:
    acts: list[str] = []

    @journaled(key="pay:{invoice}")
    def pay(invoice: str, idempotency_key: str) -> dict[str, str]:
        """Pays an invoice."""
        acts.append(idempotency_key)
        return {"paid": invoice}

    model = ScriptedModel({"cashier": [Call("pay", {"invoice": "I-1"}), Say("Paid I-1.")]})
    agent = LlmAgent(
        name="cashier", model=model, tools=[FunctionTool(pay.func, require_confirmation=True)]
    )
    runner = runner_for(store, agent, "cashier")
    await turn(chatter(store, "cashier"), "finished", "hi")
    await turn(runner, "paused", "pay I-1")
    (paused,) = [r for r in await runner.ledger.list_runs() if r.session_id == "paused"]
    assert paused.status is RunStatus.PAUSED
    (open_one,) = await InterruptTable(store).list_interrupts(app_name="cashier")

    async def answer_and_drive() -> None:
        await answer_interrupt(
            store, open_one.call_id, by="ops", decision="approve", app_name="cashier"
        )
        await Sweeper(runner).recover_once()

    report, _ = await asyncio.gather(purge(store, "cashier", ALL_AT_ONCE), answer_and_drive())
    assert acts == ["pay:I-1"]
    statuses = sorted(r.status.value for r in await runner.ledger.list_runs())
    assert statuses == ["DONE", "DONE"]
    assert await session_ids(store, runner) == ["paused"]
    assert report.tables["sessions"].rows == 1 and report.tables["interrupts"].rows == 0
    # Once it is finished too, the next pass takes it, the answered interrupt with it.
    again = await purge(store, "cashier", ALL_AT_ONCE)
    assert again.tables["interrupts"].rows == 1 and again.tables["journal"].rows == 1
    assert await runner.ledger.list_runs() == []


async def test_purge_racing_a_sagas_compensation_leaves_the_saga_to_finish(store: Store) -> None:
    runner = chatter(store)
    await turn(runner, "trip", "book")
    await turn(runner, "finished", "hi")
    (run,) = [r for r in await runner.ledger.list_runs() if r.session_id == "trip"]
    sagas = SagaLedger(store)
    saga_id = f"{run.invocation_id}/trip"
    await sagas.begin(
        saga_id=saga_id,
        name="trip",
        app_name="chat",
        user_id="u",
        session_id="trip",
        invocation_id=run.invocation_id,
    )
    await sagas.step_pending(saga_id, "hotel")
    await sagas.step_done(saga_id, "hotel", {"booking": "H-1"})
    saga = await sagas.compensating(saga_id, "the flight failed")
    assert saga is not None
    undone: list[str] = []
    # The purge marks its sessions while the compensation is under way: the undo
    # waits for the mark (on a busy machine the compensation could otherwise end
    # first, and the purge then rightly take the finished saga's session at once).
    marked = asyncio.Event()
    inner = store.fetch

    async def watched(query: str, params: Any = None) -> Any:
        rows = await inner(query, params)
        if query == "purge_mark":
            marked.set()
        return rows

    async def cancel_hotel(record: Any, key: str) -> None:
        await asyncio.wait_for(marked.wait(), 60)
        undone.append(record["booking"])

    compensation = Compensation(sagas, {"hotel": Undo(cancel_hotel)}, backoff=0)
    store.fetch = watched  # type: ignore[method-assign]
    try:
        report, result = await asyncio.gather(
            purge(store, "chat", ALL_AT_ONCE), compensation.run(saga, "the flight failed")
        )
    finally:
        del store.fetch
    assert result.status is SagaStatus.COMPENSATED and undone == ["H-1"]
    assert await session_ids(store, runner) == ["trip"]
    assert report.tables["sessions"].rows == 1 and report.tables["sagas"].rows == 0
    again = await purge(store, "chat", ALL_AT_ONCE)
    assert again.tables["sagas"].rows == 1 and again.tables["saga_steps"].rows == 1
    assert await sagas.get(saga_id) is None


# ------------------------------------------------------------- the policy


async def test_a_policy_keeps_each_ending_as_long_as_it_says(store: Store) -> None:
    runner = chatter(store)
    await turn(runner, "fresh", "hi")
    idle = await runner.sessions.create_session(app_name="chat", user_id="u", session_id="idle")
    assert idle is not None
    keep_done = RetentionPolicy(done=3600, idle_sessions=3600)
    report = await purge(store, "chat", keep_done)
    assert report.rows == 0 and await session_ids(store, runner) == ["fresh", "idle"]
    only_idle = RetentionPolicy(done=None, idle_sessions=0)
    assert (await purge(store, "chat", only_idle)).tables["sessions"].rows == 1
    assert await session_ids(store, runner) == ["fresh"]
    preview = await purge(store, "chat", ALL_AT_ONCE, dry_run=True)
    assert await session_ids(store, runner) == ["fresh"]
    done = await purge(store, "chat", ALL_AT_ONCE)
    assert {t: c.rows for t, c in preview.tables.items()} == {
        t: c.rows for t, c in done.tables.items()
    }
    assert preview.bytes == done.bytes and done.rows > 0
    assert await session_ids(store, runner) == []


async def test_a_drain_sends_no_statement_to_a_table_that_holds_nothing_of_its_sessions(
    store: Store,
) -> None:
    """Plain chat runs leave events and runs only: the drain asks which tables hold
    rows (one read), deletes from those, and sends nothing to the other tables (on
    SQLite each would be a write: the lock, a hop, for no row). Every row still goes."""
    runner = chatter(store)
    for session in ("a", "b"):
        await turn(runner, session, "hi")
    sent: list[str] = []
    inner = store.fetch

    async def counted(query: str, params: Any = None) -> Any:
        sent.append(query)
        return await inner(query, params)

    store.fetch = counted  # type: ignore[method-assign]
    try:
        report = await purge(store, "chat", ALL_AT_ONCE)
    finally:
        del store.fetch
    deletes = {q for q in sent if q.startswith("purge_")} - {
        "purge_mark", "purge_holding", "purge_sessions", "purge_oldest", "purge_checkpoint"
    }  # fmt: skip
    assert deletes == {"purge_events", "purge_runs"}, sorted(deletes)
    assert "purge_holding" in sent
    assert {t for t, c in report.tables.items() if c.rows} == {"events", "runs", "sessions"}
    left = await rows(store)
    assert left["sessions"] == left["events"] == left["runs"] == 0


async def test_payload_only_keeps_the_ledgers_skeleton_without_payloads(store: Store) -> None:
    acts: list[str] = []

    @journaled(key="pay:{invoice}")
    def pay(invoice: str, idempotency_key: str) -> dict[str, str]:
        """Pays an invoice."""
        acts.append(idempotency_key)
        return {"paid": invoice, "card": "4242"}

    model = ScriptedModel({"cashier": [Call("pay", {"invoice": "I-9"}), Say("Paid.")]})
    agent = LlmAgent(name="cashier", model=model, tools=[pay])
    runner = runner_for(store, agent, "cashier")
    await turn(runner, "s", "pay I-9 with my card 4242")
    (before,) = await runner.ledger.list_runs()
    policy = RetentionPolicy(done=0, payload_only=True)
    report = await purge(store, "cashier", policy)
    assert report.payload_only and report.tables["runs"].rows == 1
    assert report.tables["journal"].rows == 1 and report.tables["events"].rows >= 3
    (after,) = await runner.ledger.list_runs()
    assert (after.run_id, after.status, after.finished_at) == (
        before.run_id,
        RunStatus.DONE,
        before.finished_at,
    )
    stored = await store.fetch("test_payloads_left")
    assert [dict(r) for r in stored] == [{"requests": 0, "results": 0, "journal_rows": 1}]
    assert await session_ids(store, runner) == []
    assert (await purge(store, "cashier", policy)).rows == 0  # nothing left to drop


async def test_bad_input_is_refused_and_changes_nothing(store: Store) -> None:
    runner = chatter(store)
    await turn(runner, "s", "hi")
    before = await rows(store)
    with pytest.raises(errors.InvalidArgument, match="unknown retention name 'dne'"):
        RetentionPolicy.parse("dne=3d")
    with pytest.raises(errors.InvalidArgument, match="must not be negative"):
        RetentionPolicy.parse("done=-3d")
    with pytest.raises(errors.InvalidArgument, match="duration >= 0"):
        RetentionPolicy(done=-1)
    with pytest.raises(errors.InvalidArgument, match=r"unknown app 'nope'.*'chat'"):
        await purge(store, "nope", ALL_AT_ONCE)
    with pytest.raises(errors.InvalidArgument, match="unknown app 'nope'"):
        await forget_user(store, "u", app_name="nope", by="ops")
    with pytest.raises(errors.InvalidArgument, match="user_id must be a non-empty"):
        await forget_user(store, "", by="ops")
    assert await rows(store) == before


# ------------------------------------------------------------- two purges


async def test_two_purges_at_once_on_two_connections_delete_each_row_once(
    store_url: str,
) -> None:
    async with open_store(store_url) as store:
        runner = chatter(store)
        for n in range(12):
            await turn(runner, f"s{n}", "hi")
        # The cut-offs are "now" on the database's clock (milliseconds on
        # SQLite): a run that ended in the dry run's own millisecond is not yet
        # before it, and would be counted by the purges but not by the dry run.
        await asyncio.sleep(0.01)
        expected = await purge(store, "chat", ALL_AT_ONCE, dry_run=True)
        assert expected.tables["sessions"].rows == 12
    async with open_store(store_url) as one, open_store(store_url) as two:
        first, second = await asyncio.gather(
            purge(one, "chat", ALL_AT_ONCE), purge(two, "chat", ALL_AT_ONCE)
        )
        for table, count in expected.tables.items():
            assert first.tables[table].rows + second.tables[table].rows == count.rows, table
        assert first.bytes + second.bytes == expected.bytes
        assert (await rows(one))["events"] == 0 and (await rows(one))["sessions"] == 0


# ------------------------------------------------------------- forgetting


async def test_forget_refuses_while_a_run_is_live_then_cancels_it_when_asked(
    store: Store,
) -> None:
    runner = runner_for(store, reminder_agent(3600), SLEEP_APP)
    await turn(runner, "asleep", SLEEP_ASK, user="ada")  # PAUSED on a timer
    other = chatter(store, SLEEP_APP)
    await turn(other, "theirs", "hi", user="bob")
    await runner.sessions.create_session(
        app_name=SLEEP_APP, user_id="ada", session_id="prefs", state={"user:lang": "fr"}
    )
    before = await rows(store)
    with pytest.raises(errors.Conflict, match=r"user 'ada' has 1 run.*PAUSED.*--cancel-live"):
        await forget_user(store, "ada", by="ops")
    assert await rows(store) == before  # no audit line either: nothing changed
    report = await forget_user(store, "ada", by="ops", reason="GDPR request", cancel_live=True)
    assert len(report.cancelled) == 1
    assert report.deleted["runs"].rows == 1 and report.deleted["jobs"].rows == 1
    assert report.deleted["user_state"].rows == 1
    assert report.deleted["operator_actions"].rows == 1  # the cancel's own line
    after = await rows(store)
    assert after["forget_requests"] == 1
    assert await session_ids(store, runner, "ada") == []
    assert await session_ids(store, runner, "bob") == ["theirs"]  # another user's untouched
    assert [r.user_id for r in await runner.ledger.list_runs()] == ["bob"]
    audit = await store.fetch("forget_requests_list", {"user_id": "ada", "limit": 5})
    assert [(a["status"], a["actor"], a["reason"]) for a in audit] == [
        ("DONE", "ops", "GDPR request")
    ]
    again = await forget_user(store, "ada", by="ops")
    assert again.rows == 0


async def test_forget_with_per_user_keys_destroys_the_key_and_purge_reads_no_payload(
    store_url: str,
) -> None:
    keys = Keyring([("k1", os.urandom(32))])
    async with open_store(store_url, keyring=keys, per_user_keys=True) as store:
        runner = chatter(store)
        await turn(runner, "a1", "hi", user="ada")
        await turn(runner, "b1", "hi", user="bob")
        report = await forget_user(store, "ada", by="ops")
        assert report.deleted["user_keys"].rows == 1 and report.deleted["events"].rows >= 2
        assert await session_ids(store, runner, "ada") == []
        bob = await runner.sessions.get_session(app_name="chat", user_id="bob", session_id="b1")
        assert bob is not None and len(bob.events) >= 2  # still readable under bob's key
        done = await purge(store, "chat", ALL_AT_ONCE)
        assert done.tables["sessions"].rows == 1 and done.tables["events"].bytes > 0
