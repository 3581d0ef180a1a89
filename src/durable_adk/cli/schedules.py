"""``durable-adk schedules``: list an app's schedules with their next ticks, pause,
resume, trigger now, and show a schedule's latest ticks.

The commands work on the database (``--db``) through
:class:`~durable_adk.schedules.ScheduleTable`: each action writes its line in
the operators' audit trail in the same unit of work as the change, and a
refused one (unknown schedule, paused or orphaned) exits 1 with the reason,
changing nothing. A trigger is fired by the next poll of any worker serving
the app. Bad arguments exit 2.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer

from durable_adk.cli.options import (
    ByOpt,
    DbOpt,
    JsonOpt,
    LimitOpt,
    ReasonOpt,
    _short,
    _table,
    _who,
    console,
    on_database,
)
from durable_adk.cron import utc_iso
from durable_adk.tables.schedules import ScheduleTable

T = TypeVar("T")

schedules_app = typer.Typer(
    no_args_is_help=True,
    help="An app's schedules: list with next ticks, pause, resume, trigger now, ticks.",
)

AppArg = Annotated[str, typer.Option("--app", help="The app whose schedules these are.")]
NameArg = Annotated[str, typer.Argument(help="The schedule.")]


def register(app: typer.Typer) -> None:
    """Adds ``schedules`` to the CLI."""
    app.add_typer(schedules_app, name="schedules")


def _run(db: str | None, app_name: str, work: Callable[[ScheduleTable], Awaitable[T]]) -> T:
    return on_database(db, lambda store: work(ScheduleTable(store, app_name)))


def _print(data: Any, as_json: bool, line: str) -> None:
    if as_json:
        print(json.dumps(data, indent=2, default=str))
    else:
        console.print(line, highlight=False)


@schedules_app.command("list")
def schedules_list(app_name: AppArg, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """The app's schedules with their next ticks (orphaned ones too)."""
    rows = _run(db, app_name, lambda table: table.list_schedules())
    listed = [r.describe() for r in rows]
    if as_json:
        print(json.dumps(listed, indent=2, default=str))
        return
    header = ["name", "state", "version", "when", "next tick (UTC)", "last run", "missed"]
    table = _table(
        f"schedules of app {app_name!r}",
        [*header, "overlap", "catch-up"],
        [
            [
                d["name"],
                d["state"],
                d["app_version"] or "-",
                d["cron"] or f"every {d['every_seconds']:g} s",
                d["next_tick"],
                _short(d["last_run_id"], 40),
                str(d["missed"]),
                d["overlap"],
                d["catch_up"],
            ]
            for d in listed
        ],
    )
    console.print(table)


@schedules_app.command("pause")
def schedules_pause(
    name: NameArg,
    app_name: AppArg,
    by: ByOpt = None,
    reason: ReasonOpt = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Pauses a schedule: no tick fires until it is resumed (audited)."""
    who = _who(by)
    done = _run(db, app_name, lambda table: table.pause(name, by=who, reason=reason))
    what = "paused" if done.changed else "already paused: nothing changed"
    _print({**done.row.describe(), "changed": done.changed}, as_json, f"schedule {name!r} {what}")


@schedules_app.command("resume")
def schedules_resume(
    name: NameArg,
    app_name: AppArg,
    by: ByOpt = None,
    reason: ReasonOpt = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Resumes a paused schedule from its next tick after now (audited)."""
    who = _who(by)
    done = _run(db, app_name, lambda table: table.resume(name, by=who, reason=reason))
    what = (
        f"resumed; next tick {utc_iso(done.row.next_tick_at)}"
        if done.changed
        else "not paused: nothing changed"
    )
    _print({**done.row.describe(), "changed": done.changed}, as_json, f"schedule {name!r} {what}")


@schedules_app.command("trigger")
def schedules_trigger(
    name: NameArg,
    app_name: AppArg,
    by: ByOpt = None,
    reason: ReasonOpt = None,
    trigger_id: Annotated[
        str | None,
        typer.Option(
            "--id", help="Makes the trigger idempotent: a second one of this id does nothing."
        ),
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Triggers a tick now (its own key, audited); the next poll of a worker fires it."""
    who = _who(by)
    tick = _run(
        db,
        app_name,
        lambda table: table.trigger(name, by=who, reason=reason, trigger_id=trigger_id),
    )
    _print(
        {"tick_key": tick.tick_key, "run_id": tick.run_id, "state": str(tick.state)},
        as_json,
        f"schedule {name!r}: tick {tick.tick_key} recorded ({tick.state}); its run will be "
        f"{tick.run_id}",
    )


@schedules_app.command("ticks")
def schedules_ticks(
    name: NameArg,
    app_name: AppArg,
    limit: LimitOpt = 20,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A schedule's latest ticks, newest first."""

    async def work(table: ScheduleTable) -> list[dict[str, Any]]:
        await table.get(name)
        ticks = await table.recent_ticks(name, limit=limit)
        return [
            {
                "tick_key": t.tick_key,
                "kind": t.kind,
                "state": str(t.state),
                "run_id": t.run_id,
                "session_id": t.session_id,
                "actor": t.actor,
                "detail": t.detail,
            }
            for t in ticks
        ]

    listed = _run(db, app_name, work)
    if as_json:
        print(json.dumps(listed, indent=2))
        return
    rows = [
        [t["tick_key"], t["kind"], t["state"], t["run_id"], t["actor"] or "", _short(t["detail"])]
        for t in listed
    ]
    console.print(
        _table(f"ticks of {name!r}", ["tick", "kind", "state", "run", "by", "detail"], rows)
    )
