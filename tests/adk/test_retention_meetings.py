"""Retention and encryption meeting a deploy and a ParallelAgent (issue 43), both backends.

The app fans out to two branches: ``north`` invoices at the fake billing
service (a real process counting every request), ``south`` sleeps durably,
so the run stays PAUSED with one branch finished and one open. Purges run
under a policy that lets everything finished go at once, at the same time as
the continuation the open run is waiting for; the stores hold keys, so the
events of both branches are sealed.

* A deploy: the run is pinned to 1.0.0; the keys rotate to a new key and the
  old key is dropped; a 2.0.0 worker that continues 1.0.0 wakes the run
  while a purge runs, reads its sealed events under the new key only, and
  finishes it without invoicing again; the version's records stay.
* A ParallelAgent: a run whose branch is still open is never purged; once
  it ended, a purge takes both branches' rows.
  The same with a branch paused on a confirmation: the purge races the
  answer, the payment acts once.
* Forgetting the user of such a run (``durable-adk users forget``) is
  refused while it is open; with ``--cancel-live`` it is cancelled and every
  row of the user goes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent, ParallelAgent
from google.adk.models.llm_request import LlmRequest
from google.genai import types
from typer.testing import CliRunner

from durable_adk import journaled
from durable_adk.adk.loops.resume import Resumer
from durable_adk.adk.loops.sleep import Waker, sleep_tool
from durable_adk.adk.runner import DurableRunner
from durable_adk.cli import app as cli_app
from durable_adk.effect_tables.jobs import JobTable
from durable_adk.lifecycle import RetentionPolicy, purge
from durable_adk.store import Keyring, Store, open_store
from durable_adk.store.queries import parse_queries
from durable_adk.store.rotation import key_status, rotate
from durable_adk.store.sealing.codec import KEY_FILE_ENV, envelope_key
from durable_adk.tables.ledger import RunStatus
from durable_adk.tables.versions import VersionTable
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.scripted_model import Turn
from durable_adk.testing.services import BillingClient, FakeService

APP = "fan"
SECRET = "INV-7731"
WOKE = "awake and done"
KEYS = {i: os.urandom(32) for i in ("k1", "k2")}
ALL_AT_ONCE = RetentionPolicy(
    done=0, failed=0, cancelled=0, parked=0, abandoned=0, idle_sessions=0, batch=3, duty=1.0
)

TEST_SQL = """
-- name: t_rows
SELECT (SELECT COUNT(*) FROM sessions) AS sessions, (SELECT COUNT(*) FROM events) AS events,
       (SELECT COUNT(*) FROM runs) AS runs, (SELECT COUNT(*) FROM journal) AS journal,
       (SELECT COUNT(*) FROM jobs) AS jobs, (SELECT COUNT(*) FROM user_state) AS user_state;

-- name: t_rows_of
SELECT (SELECT COUNT(*) FROM sessions WHERE user_id = :user_id) AS sessions,
       (SELECT COUNT(*) FROM events e JOIN sessions s ON s.pk = e.session_pk
         WHERE s.user_id = :user_id) AS events,
       (SELECT COUNT(*) FROM runs WHERE user_id = :user_id) AS runs,
       (SELECT COUNT(*) FROM jobs WHERE user_id = :user_id) AS jobs,
       (SELECT COUNT(*) FROM user_state WHERE user_id = :user_id) AS user_state;

-- name: t_raw_events
SELECT e.data AS data, e.delta AS delta FROM events e
  JOIN sessions s ON s.pk = e.session_pk WHERE s.session_id = :session_id;
"""


def keyring(*ids: str) -> Keyring:
    return Keyring([(i, KEYS[i]) for i in ids])


def with_test_sql(store: Store) -> Store:
    if "t_rows" not in store._queries:
        store.add_queries(parse_queries(TEST_SQL, store.dialect))
    return store


async def rows(store: Store, user: str | None = None) -> dict[str, int]:
    with_test_sql(store)
    if user is None:
        row = await store.fetchrow("t_rows")
    else:
        row = await store.fetchrow("t_rows_of", {"user_id": user})
    assert row is not None
    return {k: int(v) for k, v in row.items()}


def reply_to_sleep(request: LlmRequest) -> Turn:
    last = request.contents[-1].parts or [] if request.contents else []
    answers = [p.function_response.response or {} for p in last if p.function_response]
    return Say(WOKE if any(a.get("status") == "woke" for a in answers) else "sleeping")


def fan_out(billing: BillingClient) -> ParallelAgent:
    """``north`` invoices (an act at billing) and ends; ``south`` sleeps a minute."""

    @journaled(key="invoice:{invoice_id}", name="invoice")
    def _invoice(invoice_id: str, idempotency_key: str) -> dict[str, Any]:
        """Creates the invoice in billing."""
        return billing.create_invoice(invoice_id, "ACME", 10.0, idempotency_key)

    model = ScriptedModel(
        {
            "north": [Call("invoice", {"invoice_id": SECRET}), Say(f"north invoiced {SECRET}")],
            "south": [Call("durable_sleep", {"seconds": 60}), reply_to_sleep],
        }
    )
    north = LlmAgent(name="north", model=model, tools=[_invoice])
    south = LlmAgent(name="south", model=model, tools=[sleep_tool()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return ParallelAgent(name="fan_out", sub_agents=[north, south])


def chatter(store: Store) -> DurableRunner:
    model = ScriptedModel({"chat": [Say("hello")]})
    return DurableRunner(
        app=LlmAgent(name="chat", model=model), app_name=APP, store=store, queue_poll=0.02
    )


async def turn(runner: DurableRunner, user: str, session: str, text: str) -> None:
    async for _ in runner.run(user_id=user, session_id=session, message=text):
        pass


async def wake(runner: DurableRunner, store: Store) -> list[Any]:
    """Moves the open timer's deadline into the past and wakes its run."""
    jobs = JobTable(store)
    (timer,) = [j for j in await jobs.list_jobs() if j.timer and j.state.value == "STARTED"]
    await jobs.backdate(timer.job_id, 61)
    return await Waker(jobs, resumer=Resumer(runner, jobs, gather=0.0)).wake_once(wait=True)


def said(events: list[Any]) -> list[tuple[str | None, str]]:
    return [
        (e.branch, p.text) for e in events if e.content for p in e.content.parts or () if p.text
    ]


@pytest.fixture
def billing(tmp_path: Path) -> Iterator[FakeService]:
    with FakeService("billing", tmp_path / "billing.db") as service:
        yield service


@pytest.fixture
async def sealed(store_url: str) -> AsyncIterator[Store]:
    async with open_store(store_url, keyring=keyring("k1")) as store:
        yield with_test_sql(store)


def invoices(billing: FakeService) -> list[str | None]:
    """The idempotency keys of every act billing received (repeats included)."""
    return [r.key for r in billing.requests("invoices") if r.mutating]


async def paused_fan_out(store: Store, billing: FakeService, **versioned: Any) -> DurableRunner:
    """Ann's fan-out run, PAUSED with north done and south asleep; Bob's chat, DONE."""
    runner = DurableRunner(
        app=fan_out(BillingClient(billing.url)),
        app_name=APP,
        store=store,
        queue_poll=0.02,
        **versioned,
    )
    await turn(runner, "ann", "fan", "go")
    (run,) = await runner.ledger.list_runs()
    assert run.status is RunStatus.PAUSED
    await turn(chatter(store), "bob", "chat", "hi")
    assert invoices(billing) == [f"invoice:{SECRET}"]
    return runner


async def assert_branches_sealed(store: Store, session: str) -> None:
    stored = await store._fetch("t_raw_events", {"session_id": session})
    assert stored, "no events"
    for row in stored:
        assert envelope_key(row["data"]) is not None and SECRET not in str(row["data"])
        assert row["delta"] is None or envelope_key(row["delta"]) is not None


# ------------------------------------------------------------------ a deploy


async def test_a_deploy_after_a_key_rotation_wakes_a_pinned_run_while_a_purge_runs(
    store_url: str, billing: FakeService
) -> None:
    async with open_store(store_url, keyring=keyring("k1")) as old:
        await paused_fan_out(old, billing, version="1.0.0")
        await assert_branches_sealed(with_test_sql(old), "fan")
    # The deploy: the new key first, every value moved to it, the old key dropped.
    async with open_store(store_url, keyring=keyring("k2", "k1")) as rotating:
        report = await rotate(rotating, batch=2)
        assert not report.unreadable and report.moved["events.data"] >= 4
        assert set(await key_status(rotating)) == {"k2"}
    async with open_store(store_url, keyring=keyring("k2")) as new:
        with_test_sql(new)
        runner = DurableRunner(
            app=fan_out(BillingClient(billing.url)),
            app_name=APP,
            store=new,
            queue_poll=0.02,
            version="2.0.0",
            compatible_versions=("1.0.0",),
        )
        before = await rows(new, "ann")
        # A purge while the pinned run is asleep leaves its session whole.
        idle = await purge(new, APP, ALL_AT_ONCE)
        assert idle.tables["sessions"].rows == 1  # bob's finished chat
        assert await rows(new, "ann") == before and await rows(new, "bob") == {
            "sessions": 0,
            "events": 0,
            "runs": 0,
            "jobs": 0,
            "user_state": 0,
        }
        # The wake, by a worker of the new version, races a second purge.
        report, woken = await asyncio.gather(purge(new, APP, ALL_AT_ONCE), wake(runner, new))
        assert len(woken) == 1
        assert report.tables["sessions"].rows == 0  # ann's was still needed when it looked
        session = await runner.sessions.get_session(app_name=APP, user_id="ann", session_id="fan")
        assert session is not None
        texts = said(session.events)
        assert ("fan_out.north", f"north invoiced {SECRET}") in texts
        assert ("fan_out.south", WOKE) in texts
        assert invoices(billing) == [f"invoice:{SECRET}"]  # north did not act again
        runs = await runner.ledger.list_runs()
        assert {r.status for r in runs} == {RunStatus.DONE}
        assert {r.app_version for r in runs} == {"1.0.0"}
        # The version's records a pinned run needed are still there.
        assert (await VersionTable(new, APP).get("1.0.0")).runs.get("DONE", 0) >= 1
        await assert_branches_sealed(new, "fan")
        assert all(
            envelope_key(r["data"]) == "k2"
            for r in await new._fetch("t_raw_events", {"session_id": "fan"})
        )


# ------------------------------------------------------------ a ParallelAgent


async def test_a_run_with_an_open_branch_is_never_purged_and_its_end_lets_both_branches_go(
    sealed: Store, billing: FakeService
) -> None:
    runner = await paused_fan_out(sealed, billing)
    await assert_branches_sealed(sealed, "fan")
    open_rows = await rows(sealed, "ann")
    assert open_rows["events"] >= 5  # the start, north's call, act and reply, south's call
    report, woken = await asyncio.gather(purge(sealed, APP, ALL_AT_ONCE), wake(runner, sealed))
    assert len(woken) == 1
    assert report.tables["sessions"].rows == 1  # bob's only
    assert (await rows(sealed, "ann"))["sessions"] == 1
    # A fresh process with the key reads both branches' sealed events back.
    async with open_store(sealed.url, keyring=keyring("k1")) as fresh:
        session = await DurableRunner(
            app=fan_out(BillingClient(billing.url)), app_name=APP, store=fresh
        ).sessions.get_session(app_name=APP, user_id="ann", session_id="fan")
        assert session is not None
        branches = {e.branch for e in session.events if e.content and e.content.role == "model"}
        assert branches == {"fan_out.north", "fan_out.south"}
        assert ("fan_out.south", WOKE) in said(session.events)
    assert invoices(billing) == [f"invoice:{SECRET}"]
    done = await purge(sealed, APP, ALL_AT_ONCE)
    assert done.tables["sessions"].rows == 1 and done.tables["events"].rows > open_rows["events"]
    assert await rows(sealed) == {
        "sessions": 0,
        "events": 0,
        "runs": 0,
        "journal": 0,
        "jobs": 0,
        "user_state": 0,
    }


async def test_a_branch_paused_on_a_confirmation_keeps_its_run_until_the_answer_ends_it(
    sealed: Store, billing: FakeService
) -> None:
    client = BillingClient(billing.url)

    @journaled(key="pay:{invoice_id}", name="pay", require_confirmation=True)
    def _pay(invoice_id: str, idempotency_key: str) -> dict[str, Any]:
        """Pays an invoice, once a person confirmed it."""
        return client.create_invoice(invoice_id, "ACME", 10.0, idempotency_key)

    model = ScriptedModel(
        {"payer": [Call("pay", {"invoice_id": SECRET}), Say("paid")], "clerk": [Say("filed")]}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        root = ParallelAgent(
            name="both",
            sub_agents=[
                LlmAgent(name="payer", model=model, tools=[_pay]),
                LlmAgent(name="clerk", model=model),
            ],
        )
    runner = DurableRunner(app=root, app_name=APP, store=sealed, queue_poll=0.02)
    await turn(runner, "ann", "pay", "go")
    (paused,) = await runner.ledger.list_runs()
    assert paused.status is RunStatus.PAUSED and invoices(billing) == []
    await turn(chatter(sealed), "bob", "chat", "hi")
    await assert_branches_sealed(sealed, "pay")
    kept = await purge(sealed, APP, ALL_AT_ONCE)
    assert kept.tables["sessions"].rows == 1 and (await rows(sealed, "ann"))["sessions"] == 1
    session = await runner.sessions.get_session(app_name=APP, user_id="ann", session_id="pay")
    assert session is not None
    (ask,) = [
        c
        for e in session.events
        for c in e.get_function_calls()
        if c.name == "adk_request_confirmation"
    ]
    yes = types.FunctionResponse(id=ask.id, name=ask.name, response={"confirmed": True})
    answer = types.Content(role="user", parts=[types.Part(function_response=yes)])

    async def answer_it() -> None:
        async for _ in runner.run(
            user_id="ann", session_id="pay", message=answer, invocation_id=paused.invocation_id
        ):
            pass

    raced, _ = await asyncio.gather(purge(sealed, APP, ALL_AT_ONCE), answer_it())
    assert raced.tables["sessions"].rows == 0
    assert invoices(billing) == [f"pay:{SECRET}"]
    done = await runner.sessions.get_session(app_name=APP, user_id="ann", session_id="pay")
    assert done is not None
    assert {("both.payer", "paid"), ("both.clerk", "filed")} <= set(said(done.events))
    assert {r.status for r in await runner.ledger.list_runs()} == {RunStatus.DONE}
    gone = await purge(sealed, APP, ALL_AT_ONCE)
    assert gone.tables["sessions"].rows == 1 and gone.tables["journal"].rows == 1
    assert await rows(sealed) == {
        "sessions": 0,
        "events": 0,
        "runs": 0,
        "journal": 0,
        "jobs": 0,
        "user_state": 0,
    }
    assert invoices(billing) == [f"pay:{SECRET}"]


def test_forgetting_a_user_with_a_paused_branch_needs_cancel_live_then_takes_everything(
    store_url: str, billing: FakeService, tmp_path: Path
) -> None:
    asyncio.run(_paused_with_state(store_url, billing))
    before = asyncio.run(_rows_at(store_url))
    keys = tmp_path / "keys"
    keys.write_text(f"k1 {base64.b64encode(KEYS['k1']).decode()}\n")
    env = {"COLUMNS": "300", KEY_FILE_ENV: str(keys)}
    forget = ["users", "forget", "ann", "--db", store_url, "--app", APP, "--json"]
    refused = CliRunner().invoke(cli_app, forget, env=env)
    assert refused.exit_code == 1, refused.output
    assert "user 'ann' has 1 run" in refused.output and "--cancel-live" in refused.output
    assert asyncio.run(_rows_at(store_url)) == before  # nothing changed, no audit line
    done = CliRunner().invoke(cli_app, [*forget, "--cancel-live"], env=env)
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert len(report["cancelled"]) == 1
    deleted = {t: c["rows"] for t, c in report["deleted"].items()}
    assert deleted["runs"] == 1 and deleted["jobs"] >= 1
    assert deleted["journal"] == 1 and deleted["user_state"] == 1
    after = asyncio.run(_rows_at(store_url))
    assert after["ann"] == {"sessions": 0, "events": 0, "runs": 0, "jobs": 0, "user_state": 0}
    assert after["bob"]["sessions"] == 1  # another user's untouched
    assert after["timers"] == 0  # nothing left to wake
    assert after["audit"] == [("DONE", None)]
    assert invoices(billing) == [f"invoice:{SECRET}"]  # cancelling acted nowhere


async def _paused_with_state(store_url: str, billing: FakeService) -> None:
    async with open_store(store_url, keyring=keyring("k1")) as store:
        runner = await paused_fan_out(with_test_sql(store), billing)
        await runner.sessions.create_session(
            app_name=APP, user_id="ann", session_id="prefs", state={"user:email": SECRET}
        )


async def _rows_at(store_url: str) -> dict[str, Any]:
    async with open_store(store_url, keyring=keyring("k1")) as store:
        jobs = await JobTable(store).list_jobs()
        audit = await store.fetch("forget_requests_list", {"user_id": "ann", "limit": 5})
        return {
            "all": await rows(store),
            "ann": await rows(store, "ann"),
            "bob": await rows(store, "bob"),
            "timers": len([j for j in jobs if j.timer]),
            "audit": [(a["status"], a["reason"]) for a in audit],
        }
