"""A run killed mid-tool is recovered with no hand wiring, on both backends.

A child process drives the recovery demo's turn and dies with os._exit(137)
inside ``check_stock``, after its read of the fake inventory service. The test
moves the dead worker's lease back in the database (the database clock still
decides) and then starts one fresh process that either

* only enters ``async with DurableRunner(...)`` and waits for the ledger to
  have no open run (its own background loops recover), or
* runs ``durable-adk recover durable_adk.demo.recovery_demo:app``.

The outside world says who ran the tool: one read by the dead worker, one by
the fresh process; the answer is given once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from children import run_module
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.demo import recovery_demo as demo
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.testing import arm
from durable_adk.testing.services import FakeService

DEMO = "durable_adk.demo.recovery_demo"


@pytest.fixture
def inventory(tmp_path: Path) -> Iterator[FakeService]:
    with FakeService("inventory", tmp_path / "inventory.db") as service:
        yield service


@pytest.fixture
async def url(store_url: str) -> str:
    async with open_store(store_url):
        pass  # schema first, so child processes never race to create it
    return store_url


def readers(inventory: FakeService) -> list[str | None]:
    return [r.caller.get("worker") for r in inventory.requests("reservations", "lookup")]


async def crash_mid_tool(
    url: str,
    inventory: FakeService,
    *,
    session: str = "s1",
    point: str = "demo.in_check_stock",
    extra: tuple[str, ...] = (),
) -> str:
    """Kills worker-A at ``point`` (inside check_stock); expires its lease; returns the run id."""
    crashed = run_module(
        DEMO,
        ["run", "--db", url, "--session", session, "--inventory", inventory.url, *extra],
        env=arm(dict(os.environ), point),
    )
    assert crashed.returncode == 137, crashed.stderr
    async with open_store(url) as store:
        ledger = RunLedger(store)
        (run,) = [r for r in await ledger.list_runs() if r.session_id == session]
        assert run.status is RunStatus.RUNNING and run.owner == "worker-A"
        await ledger.backdate(run.run_id, 3600)
    return run.run_id


async def answers(url: str, session: str = "s1") -> list[str]:
    async with open_store(url) as store:
        found = await DurableSessionService(store).get_session(
            app_name=demo.APP_NAME, user_id=demo.USER_ID, session_id=session
        )
    assert found is not None
    return [
        e.content.parts[0].text
        for e in found.events
        if e.author == "assistant" and e.content and e.content.parts and e.content.parts[0].text
    ]


async def test_async_with_runner_recovers_a_run_killed_mid_tool(
    url: str, inventory: FakeService
) -> None:
    run_id = await crash_mid_tool(url, inventory)
    fresh = run_module(
        DEMO, ["serve", "--db", url, "--worker", "worker-B", "--inventory", inventory.url]
    )
    assert fresh.returncode == 0, fresh.stderr
    assert json.loads(fresh.stdout.strip().splitlines()[-1]) == {run_id: "DONE"}
    assert readers(inventory) == ["worker-A", "worker-B"]  # idempotent: run again, once
    assert await answers(url) == ["We have 7 in stock."]
    # It warned about nothing: its own sweeper ran.
    assert "no recovery sweeper runs" not in fresh.stderr


def recover_cli(url: str, inventory: FakeService, *extra: str) -> tuple[int, dict[str, object]]:
    env = {
        **os.environ,
        demo.INVENTORY_ENV: inventory.url,
        "DURABLE_ADK_DEMO_WORKER": "recover-cli",
    }
    done = run_module(
        "durable_adk.cli",
        ["recover", f"{DEMO}:app", "--db", url, "--json", "--log-level", "info", *extra],
        env=env,
    )
    assert done.returncode in (0, 1, 3), done.stderr + done.stdout
    return done.returncode, json.loads(done.stdout)


async def test_recover_command_finishes_a_run_killed_mid_tool(
    url: str, inventory: FakeService
) -> None:
    run_id = await crash_mid_tool(url, inventory)
    code, summary = recover_cli(url, inventory, "--idempotent-tool", "check_stock")
    assert code == 0
    assert summary["runs"] == [
        {
            "run": run_id,
            "session": "s1",
            "found": "TOOL_UNANSWERED",
            "action": "redrive",
            "status": "DONE",
            "reason": summary["runs"][0]["reason"],  # type: ignore[index]
            "reattached": [],  # no long-running call left open
        }
    ]
    assert summary["need_a_person"] == [] and summary["exit_code"] == 0
    assert readers(inventory) == ["worker-A", "recover-cli"]
    assert await answers(url) == ["We have 7 in stock."]
    # A second pass finds nothing to do.
    code, again = recover_cli(url, inventory, "--idempotent-tool", "check_stock")
    assert (code, again["runs"]) == (0, [])


async def test_recover_command_exits_1_when_it_parks_a_run(
    url: str, inventory: FakeService
) -> None:
    run_id = await crash_mid_tool(url, inventory)
    code, summary = recover_cli(url, inventory)  # check_stock not declared idempotent
    assert code == 1
    assert summary["need_a_person"] == [run_id]
    assert [(r["action"], r["status"]) for r in summary["runs"]] == [("park", "PARKED")]  # type: ignore[attr-defined, index]
    assert readers(inventory) == ["worker-A"]  # not run again
    async with open_store(url) as store:
        run = await RunLedger(store).get(run_id)
    assert run is not None and run.status is RunStatus.PARKED


async def test_a_run_killed_mid_stream_stored_no_chunk_and_is_asked_again(
    url: str, inventory: FakeService
) -> None:
    # Killed after the first streamed chunk of the final answer (the tool had answered).
    run_id = await crash_mid_tool(
        url, inventory, point="scripted_model.after_partial", extra=("--streaming",)
    )
    assert await answers(url) == []  # no chunk was stored
    code, summary = recover_cli(url, inventory, "--idempotent-tool", "check_stock")
    assert code == 0
    assert [(r["run"], r["found"], r["status"]) for r in summary["runs"]] == [  # type: ignore[index]
        (run_id, "MODEL_INFLIGHT", "DONE")
    ]
    assert await answers(url) == ["We have 7 in stock."]  # asked again, answered once
    assert readers(inventory) == ["worker-A"]  # the tool's answer was stored: not run again
