"""Schedules through the worker: declared in the app's module, listed, paused, resumed and
triggered over the HTTP API and the CLI, audited; bad input changes nothing. Both backends."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import types as pytypes
from pathlib import Path
from typing import Any

import pytest
from schedules_app import durable_adk_schedules, root_agent
from svc_support import Service
from typer.testing import CliRunner

from durable_adk import errors
from durable_adk.adk.services.app_services import AppServices, load_services
from durable_adk.cli import app as cli_app
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.tables.schedules import ScheduleTable
from durable_adk.testing.harness import clear_of_a_tick

APP = "root"
SERVED = {"app": root_agent, "services": AppServices(schedules=tuple(durable_adk_schedules))}


def test_the_app_module_declares_its_schedules() -> None:
    services = load_services(modules=["schedules_app"], search=Path(__file__).parent)
    assert [s.name for s in services.schedules] == ["weekly-report", "heartbeat"]
    assert services.runner_kwargs()["schedules"] == services.schedules


@pytest.mark.parametrize(
    "value, words",
    [
        ("not a list", "expected a list of Schedule"),
        (["nope"], "expected Schedule values"),
        (lambda: 1 / 0, "raised ZeroDivisionError"),
    ],
)
def test_a_bad_declaration_is_refused(value: Any, words: str) -> None:
    module = pytypes.ModuleType("bad_schedules_app")
    module.durable_adk_schedules = value  # type: ignore[attr-defined]
    sys.modules["bad_schedules_app"] = module
    try:
        with pytest.raises(errors.InvalidArgument, match=words):
            load_services(modules=[module])
    finally:
        del sys.modules["bad_schedules_app"]


async def listed(service: Service) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:  # the worker's poller syncs the declared schedules at its first poll
        response = await service.client.get("/v1/schedules")
        assert response.status_code == 200
        found = {s["name"]: s for s in response.json()["schedules"]}
        if found or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("service", [SERVED], indirect=True)
async def test_pause_resume_trigger_over_http(service: Service) -> None:
    schedules = await listed(service)
    assert set(schedules) == {"weekly-report", "heartbeat"}
    weekly = schedules["weekly-report"]
    assert weekly["state"] == "active" and weekly["timezone"] == "Europe/Berlin"
    assert weekly["app_version"] is None  # an unversioned app's worker synced it
    assert weekly["next_tick"].endswith(":00:00Z") and weekly["next_tick_at"] > time.time() - 5

    before = await service.stats()
    for path, body, status in (
        ("/v1/schedules/nope/pause", {"by": "ana"}, 404),
        ("/v1/schedules/weekly-report/pause", {}, 422),
        ("/v1/schedules/weekly-report/pause", {"by": "ana", "extra": 1}, 422),
        ("/v1/schedules/weekly-report/trigger", {"by": "a/b"}, 422),
    ):
        response = await service.client.post(path, json=body)
        assert response.status_code == status, response.text
    assert (await service.client.post("/v1/schedules/weekly-report/pause", json={})).json()[
        "error"
    ]["code"] == "invalid_request"
    assert await service.stats() == before

    paused = await service.client.post(
        "/v1/schedules/weekly-report/pause", json={"by": "ana", "reason": "holiday"}
    )
    assert paused.status_code == 200 and paused.json()["changed"] is True
    assert paused.json()["schedule"]["state"] == "paused"
    again = await service.client.post("/v1/schedules/weekly-report/pause", json={"by": "ana"})
    assert again.json()["changed"] is False
    refused = await service.client.post("/v1/schedules/weekly-report/trigger", json={"by": "ana"})
    assert refused.status_code == 409 and "paused" in refused.json()["error"]["message"]
    resumed = await service.client.post("/v1/schedules/weekly-report/resume", json={"by": "ben"})
    assert resumed.json()["changed"] is True and resumed.json()["schedule"]["state"] == "active"

    trig = await service.client.post(
        "/v1/schedules/weekly-report/trigger", json={"by": "cleo", "trigger_id": "now-1"}
    )
    assert trig.status_code == 200, trig.text
    tick = trig.json()
    assert tick["tick_key"] == "trigger:now-1" and tick["state"] == "PENDING"
    same = await service.client.post(
        "/v1/schedules/weekly-report/trigger", json={"by": "cleo", "trigger_id": "now-1"}
    )
    assert same.json()["run_id"] == tick["run_id"]

    ledger = RunLedger(service.store)
    deadline = time.monotonic() + 15
    while True:  # the worker's next poll fires it, and the run is driven to its end
        run = await ledger.get(tick["run_id"])
        if run is not None and run.status is RunStatus.DONE:
            break
        assert time.monotonic() < deadline, run
        await asyncio.sleep(0.05)
    ticks = await service.client.get("/v1/schedules/weekly-report/ticks")
    assert [(t["tick_key"], t["state"]) for t in ticks.json()["ticks"]] == [
        ("trigger:now-1", "SUBMITTED")
    ]
    actions = await ledger.actions(app_name=APP)
    assert [(a.action, a.actor) for a in reversed(actions)] == [
        ("schedule_pause", "ana"),
        ("schedule_resume", "ben"),
        ("schedule_trigger", "cleo"),
    ]


cli_runner = CliRunner()


def cli(*args: str) -> tuple[int, str]:
    result = cli_runner.invoke(
        cli_app, list(args), env={"COLUMNS": "200", "DURABLE_ADK_OPERATOR": "ops-ana"}
    )
    return result.exit_code, result.output


async def synced(url: str) -> None:
    async with open_store(url) as store:
        await ScheduleTable(store, APP).sync(durable_adk_schedules)


async def audit(url: str) -> list[tuple[str, str]]:
    async with open_store(url) as store:
        return [(a.action, a.actor) for a in reversed(await RunLedger(store).actions(app_name=APP))]


def test_schedule_commands_on_the_database(store_url: str) -> None:
    asyncio.run(synced(store_url))
    db = ["--db", store_url, "--app", APP]
    code, out = cli("schedules", "list", "--json", *db)
    assert code == 0, out
    assert [s["name"] for s in json.loads(out)["items"]] == ["heartbeat", "weekly-report"]
    code, out = cli("schedules", "list", *db)
    assert code == 0 and "weekly-report" in out and "0 9 * * FRI" in out
    assert "version" in out  # a column of its own

    code, out = cli("schedules", "pause", "nope", *db)
    assert code == 1 and "no schedule 'nope'" in out
    code, out = cli("schedules", "pause", "heartbeat", "--reason", "maintenance", *db)
    assert code == 0 and "paused" in out
    code, out = cli("schedules", "pause", "heartbeat", *db)
    assert code == 0 and "already paused" in out
    code, out = cli("schedules", "trigger", "heartbeat", *db)
    assert code == 1 and "paused" in out
    code, out = cli("schedules", "resume", "heartbeat", "--by", "ben", *db)
    assert code == 0 and "resumed; next tick" in out
    code, out = cli("schedules", "trigger", "heartbeat", "--id", "t-1", "--json", *db)
    assert code == 0, out
    assert json.loads(out)["tick_key"] == "trigger:t-1"
    code, out = cli("schedules", "ticks", "heartbeat", "--json", *db)
    assert code == 0 and [t["tick_key"] for t in json.loads(out)["items"]] == ["trigger:t-1"]
    assert asyncio.run(audit(store_url)) == [
        ("schedule_pause", "ops-ana"),
        ("schedule_resume", "ben"),
        ("schedule_trigger", "ops-ana"),
    ]


async def heartbeat_due(url: str) -> None:
    async with open_store(url) as store:
        table = ScheduleTable(store, APP)
        await table.sync(durable_adk_schedules)
        heartbeat = (await table.get("heartbeat")).schedule
        due = heartbeat.next_tick(await clear_of_a_tick(store, heartbeat) - 3600)
        await table.rewind("heartbeat", next_tick_at=due, next_fire_at=due)


async def run_statuses(url: str) -> list[RunStatus]:
    async with open_store(url) as store:
        return [r.status for r in await RunLedger(store).list_runs()]


def test_recover_fires_the_due_ticks_of_the_apps_module(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(__file__).parent)
    asyncio.run(heartbeat_due(store_url))
    code, out = cli("recover", "schedules_app:root_agent", "--db", store_url, "--json")
    assert code == 0, out
    ticks = json.loads(out)["ticks"]
    assert [(t["schedule"], t["state"]) for t in ticks] == [("heartbeat", "SUBMITTED")]
    assert asyncio.run(run_statuses(store_url)) == [RunStatus.DONE]
    code, out = cli("recover", "schedules_app:root_agent", "--db", store_url, "--json")
    assert code == 0 and json.loads(out)["ticks"] == []  # fired once
