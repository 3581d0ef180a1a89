"""A recovery reads its run's session in its claim, on both backends (issue 45, item 4).

The sweeper's claim (``run_claim_expired_read``) brings back, in the same
statement, each claimed run's whole log: the classification and ADK's re-drive
are served from it, so the store is asked for the session once, in the claim,
where it was asked twice before (the claim, then ``load_session_tail``).

The read must not open a window: an append the dead owner committed while the
claim ran must be seen (or the session read again). Here the old owner's
append of its tool's answer is held open in a transaction of its own while
the claim runs, then committed: the recovery must see the answer, so the tool
(an idempotent one, its acts counted by a fake billing service over HTTP) is
not run a second time, and the run ends DONE with one act.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.genai import types

from durable_adk import errors
from durable_adk.adk.eventlog.classify import OrphanClass
from durable_adk.adk.loops.recovery import Sweeper
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.services.sessions import RUN_METADATA_KEY, DurableSessionService
from durable_adk.store import Keyring, Store, open_store
from durable_adk.store.sealing.codec import envelope_key
from durable_adk.store.sqlite import arguments, run_unit
from durable_adk.tables.ledger import Run, RunStatus
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.services import FakeService, ResourceClient

APP = "shop"
WAIT = 60.0  # generous: the machine may be loaded; nothing here waits on a clock

SESSION_READS = frozenset(
    {"load_session_tail", "load_session_head", "load_events_partial", "find_event_seq"}
)
"""The statements that read a session's row or log."""


class Died(BaseException):
    """The worker's death in its tool, after the act: a BaseException nothing handles."""


@pytest.fixture
def billing(tmp_path: Path) -> Iterator[FakeService]:
    with FakeService("billing", tmp_path / "billing.db") as service:
        yield service


def make_runner(
    store: Store, worker_id: str, invoices: ResourceClient, *, dies: bool
) -> DurableRunner:
    async def send_invoice(invoice_id: str) -> dict[str, Any]:
        """Sends an invoice (declared idempotent: a re-run sends it again)."""
        sent = await asyncio.to_thread(
            invoices.create,
            {"invoice_id": invoice_id, "customer": "c", "amount": 1.0},
            uuid.uuid4().hex,
        )
        if dies:
            raise Died
        return {"sent": sent["id"]}

    model = ScriptedModel({"clerk": [Call("send_invoice", {"invoice_id": "I-1"}), Say("sent")]})
    agent = LlmAgent(name="clerk", model=model, tools=[send_invoice])
    return DurableRunner(
        app=agent,
        app_name=APP,
        store=store,
        worker_id=worker_id,
        idempotent_tools=["send_invoice"],
    )


async def orphan(store: Store, invoices: ResourceClient) -> Run:
    """A run whose worker died in its tool, after the invoice went out; its lease run out."""
    dead = make_runner(store, "dead", invoices, dies=True)
    with pytest.raises(Died):
        async for _ in dead.run(user_id="u", session_id="s", message="bill I-1"):
            pass
    (run,) = await dead.ledger.list_runs(status=RunStatus.RUNNING)
    await dead.ledger.backdate(run.run_id, 3600)
    return run


class Sent:
    """Counts the named statements a store runs (``store.fetch`` wrapped)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.calls: collections.Counter[str] = collections.Counter()
        self._inner = store.fetch

    async def _fetch(self, query: str, params: Any = None) -> Any:
        self.calls[query] += 1
        return await self._inner(query, params)

    def __enter__(self) -> Sent:
        self.store.fetch = self._fetch  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        del self.store.fetch


async def test_a_recovery_reads_the_session_in_its_claim_and_not_again(
    store: Store, billing: FakeService
) -> None:
    invoices = billing.client("invoices")
    run = await orphan(store, invoices)
    recovering = make_runner(store, "w2", invoices, dies=False)
    with Sent(store) as sent:
        (recovery,) = await Sweeper(recovering).recover_once()

    assert recovery.run_id == run.run_id
    assert (recovery.found, recovery.action, recovery.status) == (
        OrphanClass.TOOL_UNANSWERED,
        "redrive",
        RunStatus.DONE,
    )
    # One round trip brought the run and its log; nothing read the session again
    # (the classification, ADK's read, the drive's appends were served from it).
    assert sent.calls["run_claim_expired_read"] == 1, sent.calls
    assert not SESSION_READS & set(sent.calls), sent.calls
    session = await recovering.sessions.get_session(app_name=APP, user_id="u", session_id="s")
    assert session is not None
    texts = [p.text for e in session.events if e.content for p in e.content.parts or () if p.text]
    assert texts == ["bill I-1", "sent"]
    assert billing.acts("invoices", "create") == 2  # the dead worker's, and the re-drive's


async def test_a_sealed_log_is_opened_from_the_claims_read(
    store_url: str, billing: FakeService
) -> None:
    # Encryption at rest: the claim brings the values back sealed (the store opens
    # none of them), and the session service opens them as a read of its own does.
    ring = Keyring([("k1", os.urandom(32))])
    async with open_store(store_url, keyring=ring) as store:
        invoices = billing.client("invoices")
        sessions = DurableSessionService(store)
        await sessions.create_session(
            app_name=APP, user_id="u", session_id="s", state={"tier": "gold"}
        )
        await orphan(store, invoices)
        sealed = await store.fetch(
            "load_session_tail",
            {"app_name": APP, "user_id": "u", "session_id": "s", "since_seq": 0},
        )
        assert sealed and all(envelope_key(r["data"]) == "k1" for r in sealed)
        recovering = make_runner(store, "w2", invoices, dies=False)
        with Sent(store) as sent:
            (recovery,) = await Sweeper(recovering).recover_once()
        assert (recovery.found, recovery.status) == (
            OrphanClass.TOOL_UNANSWERED,
            RunStatus.DONE,
        )
        assert not SESSION_READS & set(sent.calls), sent.calls
        after = await recovering.sessions.get_session(app_name=APP, user_id="u", session_id="s")
        assert after is not None and after.state["tier"] == "gold"
        texts = [p.text for e in after.events if e.content for p in e.content.parts or () if p.text]
        assert texts == ["bill I-1", "sent"]


def answer_of(run: Run, call: Event) -> Event:
    """The tool's answer as the dead worker's drive would have stored it (its run's stamp)."""
    (fc,) = call.get_function_calls()
    return Event(
        invocation_id=run.invocation_id,
        author=call.author,
        content=types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(
                        id=fc.id, name=fc.name, response={"sent": "inv-1"}
                    )
                )
            ],
        ),
        custom_metadata={RUN_METADATA_KEY: {"run_id": run.run_id, "epoch": run.epoch}},
    )


def append_params(run: Run, pk: int, seq: int, event: Event) -> dict[str, Any]:
    """``append_event``'s parameters for ``event`` after event ``seq``, fenced by ``run``."""
    return {
        "session_pk": pk,
        "expected_seq": seq,
        "event_id": event.id,
        "invocation_id": event.invocation_id,
        "author": event.author,
        "timestamp": time.time(),
        "delta": None,
        "data": event.model_dump_json(exclude_none=True),
        "app_name": APP,
        "user_id": "u",
        "app_delta": None,
        "user_delta": None,
        "snapshot": None,
        "run_id": run.run_id,
        "run_epoch": run.epoch,
    }


async def test_an_answer_the_old_owner_commits_while_the_claim_runs_is_seen(
    store: Store, billing: FakeService
) -> None:
    invoices = billing.client("invoices")
    run = await orphan(store, invoices)
    assert billing.acts("invoices", "create") == 1
    dead = make_runner(store, "reader", invoices, dies=False)
    before = await dead.sessions.get_session(app_name=APP, user_id="u", session_id="s")
    assert before is not None
    call = before.events[-1]
    assert call.get_function_calls()
    pk, seq = int(before._storage_update_marker.split(":")[0]), len(before.events)
    params = append_params(run, pk, seq, answer_of(run, call))
    query = store._queries["append_event"]
    recovering = make_runner(store, "w2", invoices, dies=False)
    sent = Sent(store)

    if store.dialect == "postgresql":
        conn = await asyncpg.connect(store.url)
        try:
            # The old owner's append: its fence passes (the run's epoch is still
            # its own) and it holds the session row, uncommitted.
            tx = conn.transaction()
            await tx.start()
            (row,) = await conn.fetch(query.statements[0], *[params[n] for n in query.params])
            assert row["status"] == "ok"
            sweep = asyncio.create_task(sweeping(recovering, sent))
            await claim_waits_for_the_session(conn, sweep)
            await tx.commit()
        finally:
            await conn.close()
    else:
        path = store.url.removeprefix("sqlite:///")
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            (row,) = run_unit(conn, query, arguments(query, params))
            assert row["status"] == "ok"
            sweep = asyncio.create_task(sweeping(recovering, sent))
            await asyncio.sleep(0.2)  # the claim waits for the write lock meanwhile
            conn.execute("COMMIT")
        finally:
            conn.close()

    (recovery,) = await asyncio.wait_for(sweep, WAIT)
    # The answer was seen: the model was asked for its next step; the tool was not
    # run again (a missed answer would re-run it, then fail on the stale log).
    assert recovery.found is OrphanClass.MODEL_INFLIGHT, recovery
    assert recovery.status is RunStatus.DONE, recovery
    assert billing.acts("invoices", "create") == 1
    # SQLite: the claim waited for the append's commit, then read in the same
    # transaction. PostgreSQL: the claim read its snapshot, saw the session row
    # move on under its lock (not settled), and the session was read again.
    redone = 1 if store.dialect == "postgresql" else 0
    assert sent.calls["load_session_tail"] == redone, sent.calls
    after = await DurableSessionService(store).get_session(
        app_name=APP, user_id="u", session_id="s"
    )
    assert after is not None
    assert len([r for e in after.events for r in e.get_function_responses()]) == 1
    texts = [p.text for e in after.events if e.content for p in e.content.parts or () if p.text]
    assert texts == ["bill I-1", "sent"]


async def sweeping(runner: DurableRunner, sent: Sent) -> list[Any]:
    """One pass of a sweeper, every statement it sends counted in ``sent``."""
    with sent:
        return await Sweeper(runner).recover_once()


async def claim_waits_for_the_session(conn: asyncpg.Connection, sweep: asyncio.Task[Any]) -> None:
    """Returns once another statement waits on a row lock (the claim, for the held
    session row; a claim that does not wait leaves it to the re-drive's first append),
    or the sweep ended."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline and not sweep.done():
        waiting = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
        if waiting:
            return
        await asyncio.sleep(0.01)


async def test_a_zombies_finish_crossing_the_claims_locks_loses_nothing(
    store: Store, billing: FakeService
) -> None:
    """The claim locks the run, then its session (``FOR KEY SHARE``); the old owner's
    finish (``append_events_finish``) locks the session, then the run. When the two
    cross, PostgreSQL aborts one of them (a deadlock): whichever it is, the run ends
    once, with one answer in its log, and the tool's acts are the ones that side
    explains (1: the old owner's finish stood; 2: the recovery re-ran the idempotent
    tool after the finish was aborted)."""
    if store.dialect != "postgresql":
        pytest.skip("SQLite has one writer: its statements take no row locks to cross")
    invoices = billing.client("invoices")
    run = await orphan(store, invoices)
    reader = make_runner(store, "reader", invoices, dies=False)
    before = await reader.sessions.get_session(app_name=APP, user_id="u", session_id="s")
    assert before is not None
    pk, seq = int(before._storage_update_marker.split(":")[0]), len(before.events)
    answer = answer_of(run, before.events[-1])
    one = append_params(run, pk, seq, answer)
    events = [
        {k: one[k] for k in ("event_id", "invocation_id", "author", "timestamp", "delta", "data")}
        | {"seq": seq + 1}
    ]
    query = store._queries["append_events_finish"]
    params = dict.fromkeys(query.params) | {
        "owner": run.owner,
        "session_pk": pk,
        "events": json.dumps(events),
        "run_id": run.run_id,
        "run_epoch": run.epoch,
        "expected_seq": seq,
        "last_seq": seq + 1,
        "timestamp": one["timestamp"],
        "app_name": APP,
        "user_id": "u",
        "status": "DONE",
    }
    recovering = make_runner(store, "w2", invoices, dies=False)
    conn = await asyncpg.connect(store.url)
    finish_lost = False
    try:
        tx = conn.transaction()
        await tx.start()
        # The old owner's finish has locked the session row (its first lock)...
        await conn.execute("SELECT 1 FROM sessions WHERE pk = $1 FOR UPDATE", pk)
        sweep = asyncio.create_task(sweeping(recovering, Sent(store)))
        # ... the claim has locked the run and waits for the session ...
        await claim_waits_for_the_session(conn, sweep)
        assert not sweep.done()
        # ... and the finish now asks for the run.
        try:
            (row,) = await conn.fetch(query.statements[0], *[params[n] for n in query.params])
            assert row["status"] == "ok", row
            await tx.commit()
        except asyncpg.DeadlockDetectedError:
            finish_lost = True
            await tx.rollback()
    finally:
        await conn.close()

    try:
        swept: list[Any] = await asyncio.wait_for(sweep, WAIT)
        claim_lost = False
    except errors.DatabaseBusy:
        claim_lost, swept = True, []
    assert finish_lost != claim_lost, (finish_lost, claim_lost)  # exactly one was aborted
    if claim_lost:
        # The finish stood: the run is DONE with the old owner's answer, and a later
        # sweep finds nothing to recover.
        assert await Sweeper(recovering).recover_once() == []
        assert billing.acts("invoices", "create") == 1
    else:
        (recovery,) = swept
        assert (recovery.found, recovery.status) == (OrphanClass.TOOL_UNANSWERED, RunStatus.DONE)
        assert billing.acts("invoices", "create") == 2  # the idempotent tool re-ran
    (ended,) = await reader.ledger.list_runs()
    assert ended.status is RunStatus.DONE
    after = await DurableSessionService(store).get_session(
        app_name=APP, user_id="u", session_id="s"
    )
    assert after is not None
    assert len([r for e in after.events for r in e.get_function_responses()]) == 1
