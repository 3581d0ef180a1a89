"""``durable-adk interrupts list`` and ``answer`` straight on the database, both backends.

A real run pauses on a tool confirmation; the command lists it, answers it
once (who answered recorded), and a worker's next recovery sweep carries the
invocation on to DONE, the paused run with it. Bad arguments and double
answers change nothing.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from typer.testing import CliRunner

from durable_adk.adk.loops.recovery import Sweeper
from durable_adk.adk.runner import DurableRunner
from durable_adk.cli import app
from durable_adk.demo.approvals_app import APP_NAME
from durable_adk.demo.approvals_app import app as approvals_app
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunStatus

runner = CliRunner()


def cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(
        app, list(args), env={"COLUMNS": "200", "DURABLE_ADK_OPERATOR": "ops-ana"}
    )
    return result.exit_code, result.output


async def pause(url: str, session: str, order: str) -> str:
    async with open_store(url) as store:
        durable = DurableRunner(app=approvals_app(), app_name=APP_NAME, store=store)
        async for _ in durable.run(user_id="u1", session_id=session, message=order):
            pass
        (run,) = await durable.ledger.list_runs_of_app(app_name=APP_NAME, status=RunStatus.PAUSED)
        return run.run_id


async def sweep(url: str) -> list[str]:
    async with open_store(url) as store:
        durable = DurableRunner(app=approvals_app(), app_name=APP_NAME, store=store)
        return [r.status.value for r in await Sweeper(durable).recover_once()]


async def state(url: str) -> Any:
    async with open_store(url) as store:
        stats = dict(await store.fetchrow("service_store_stats") or {})
        rows = await store.fetch(
            "interrupt_list",
            {"status": None, "app_name": None, "session_id": None, "kind": None, "limit": 100},
        )
        return stats, [dict(r) for r in rows]


def test_interrupts_list_and_answer_on_the_database(store_url: str) -> None:
    db = ["--db", store_url]
    paused = asyncio.run(pause(store_url, "cli-a", "O-7"))
    code, out = cli("interrupts", "list", "--json", *db)
    assert code == 0, out
    (interrupt,) = json.loads(out)["items"]
    assert interrupt["run_id"] == paused and interrupt["kind"] == "confirmation"
    call_id = interrupt["call_id"]
    code, out = cli("interrupts", "list", *db)
    assert code == 0 and "ship_order" in out and "confirmation" in out
    code, out = cli("interrupts", "list", "--kind", "input", "--json", *db)
    assert code == 0 and json.loads(out)["items"] == []

    before = asyncio.run(state(store_url))
    for args, code_wanted, words in (
        (("interrupts", "answer", call_id), 2, "give --approve, --deny or --payload"),
        (("interrupts", "answer", call_id, "--approve", "--deny"), 2, "not both"),
        (("interrupts", "answer", call_id, "--payload", "{nope"), 2, "not JSON"),
        (("interrupts", "answer", call_id, "--payload", '{"a": 1}'), 2, "approve or deny"),
        (("interrupts", "answer", "no-such-call", "--approve"), 1, "no interrupt"),
        (("interrupts", "list", "--status", "LOST"), 2, "unknown --status 'LOST'"),
    ):
        code, out = cli(*args, *db)
        assert code == code_wanted and words in out, (args, out)
    assert asyncio.run(state(store_url)) == before

    code, out = cli("interrupts", "answer", call_id, "--approve", "--reason", "ok'd", "--json", *db)
    assert code == 0, out
    answered = json.loads(out)
    assert answered["interrupt"]["answered_by"] == "ops-ana"
    assert answered["run"]["status"] == "QUEUED"
    before = asyncio.run(state(store_url))
    code, out = cli("interrupts", "answer", call_id, "--deny", *db)
    assert code == 1 and "already answered by ops-ana" in out
    assert asyncio.run(state(store_url)) == before

    # A worker of the app carries the answer on at its next sweep.
    assert asyncio.run(sweep(store_url)) == ["DONE"]
    code, out = cli("runs", "list", "--json", *db)
    assert code == 0
    assert {r["run_id"]: r["status"] for r in json.loads(out)["items"]} == {
        paused: "DONE",
        answered["run"]["run_id"]: "DONE",
    }
    code, out = cli("runs", "actions", "--json", *db)
    assert [(a["action"], a["run_id"], a["actor"]) for a in json.loads(out)["items"]] == [
        ("answer", paused, "ops-ana")
    ]
