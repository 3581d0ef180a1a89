"""One machine-readable shape (issue 42, item 2): every list a command prints
with ``--json`` is the one envelope ``{"available", "note", "items"}``, each
item shaped as the HTTP API's model of that record; a single record or an
action's outcome is one object. A snapshot of keys and types per command, not
of values, on both backends."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from test_cli import prepare
from typer.testing import CliRunner

from durable_adk.cli import app
from durable_adk.effect_tables.jobs import Job
from durable_adk.schedules import Schedule
from durable_adk.service.schedule_routes import ScheduleOut, TickOut
from durable_adk.service.schemas import (
    ActionOut,
    DeadLetterOut,
    OutcomeOut,
    RunDetailOut,
    RunOut,
)
from durable_adk.service.version_routes import VersionOut
from durable_adk.store import open_store
from durable_adk.tables.schedules import ScheduleTable

runner = CliRunner()

ENVELOPE = {"available": bool, "note": type(None), "items": list}


def cli(*args: str) -> Any:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == 0, (args, result.output)
    return json.loads(result.output)


def shape(value: dict[str, Any]) -> dict[str, type]:
    return {key: type(item) for key, item in value.items()}


def assert_items_of(model: type[BaseModel] | set[str], listing: Any) -> None:
    assert shape(listing) == ENVELOPE, listing
    assert listing["items"], "each listing is checked with at least one item"
    for item in listing["items"]:
        if isinstance(model, set):
            assert set(item) == model
        else:
            assert set(item) == set(model.model_fields), (model, set(item))
            model.model_validate(item)  # the types, as the HTTP API declares them


async def _schedule(url: str) -> None:
    async with open_store(url) as store:
        await ScheduleTable(store, "stock_assistant").sync(
            [Schedule(name="nightly", message="report", user_id="ops", cron="0 2 * * *")],
            by="w1",
        )


def test_every_json_output_has_its_one_shape(store_url: str, tmp_path: Path) -> None:
    run_id = asyncio.run(prepare(store_url))
    asyncio.run(_schedule(store_url))
    db = ("--db", store_url)

    # Lists: the envelope, items as the API's models.
    assert_items_of(RunOut, cli("runs", "list", "--json", *db))
    assert_items_of(DeadLetterOut, cli("dead-letters", "list", "--json", *db))
    job_fields = {f.name for f in dataclasses.fields(Job)}
    assert_items_of(job_fields, cli("jobs", "list", "--json", *db))
    assert shape(cli("sagas", "list", "--json", *db)) == ENVELOPE
    assert shape(cli("interrupts", "list", "--json", *db)) == ENVELOPE
    assert_items_of(ScheduleOut, cli("schedules", "list", "--json", *db))
    assert_items_of(VersionOut, cli("versions", "list", "--json", *db))

    # Single records and outcomes: one object.
    detail = cli("runs", "show", run_id, "--json", *db)
    assert set(detail) == set(RunDetailOut.model_fields)
    RunDetailOut.model_validate(detail)
    trigger = cli("schedules", "trigger", "nightly", "--id", "t1", "--json", *db)
    assert set(trigger) == set(TickOut.model_fields)
    assert_items_of(TickOut, cli("schedules", "ticks", "nightly", "--json", *db))
    paused = cli("schedules", "pause", "nightly", "--json", *db)
    assert set(paused) == {*ScheduleOut.model_fields, "changed"}
    assert shape(cli("versions", "drain", "1.0", "--json", *db)) == {
        "version": str,
        "drained": bool,
        "changed": bool,
    }
    retried = cli("runs", "retry", run_id, "--json", *db)
    assert set(retried) == set(RunOut.model_fields)
    cancelled = cli("runs", "cancel", run_id, "--json", *db)
    assert set(cancelled) == set(OutcomeOut.model_fields)
    assert_items_of(ActionOut, cli("runs", "actions", "--json", *db))
    done = cli("jobs", "complete", "report:Q3", "--json", *db)
    assert isinstance(done, dict) and done["job_id"] == "report:Q3"


@pytest.mark.parametrize("command", [("runs", "list"), ("schedules", "list")])
def test_an_empty_list_is_the_same_envelope(tmp_path: Path, command: tuple[str, ...]) -> None:
    url = f"sqlite:///{tmp_path}/empty.db"
    asyncio.run(_schedule(url))  # the app is known, with a schedule and no run
    listing = cli(*command, "--json", "--db", url)
    assert shape(listing) == ENVELOPE
    assert listing["items"] == ([] if command[0] == "runs" else listing["items"])
