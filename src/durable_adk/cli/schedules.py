"""``durable-adk schedules``: list an app's schedules with their next ticks, pause,
resume, trigger now, and show a schedule's latest ticks.

The commands work on the database (``--db``, through
:class:`~durable_adk.schedules.ScheduleTable`) or through a running worker of
the app (``--url``/``--token``, its ``/v1/schedules`` routes), with the same
answers. ``--app`` may be left out when the database holds one app (a worker:
the app it serves). Each action writes its line in the operators' audit trail
in the same unit of work as the change, and a refused one (unknown schedule,
paused or orphaned) exits 1 with the reason, changing nothing. A trigger is
fired by the next poll of any worker serving the app. Bad arguments exit 2.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from durable_adk.cli.options import (
    ByOpt,
    DbOpt,
    JsonOpt,
    LimitOpt,
    ReasonOpt,
    TokenOpt,
    UrlOpt,
    _call_for_app,
    _print_items,
    _short,
    _table,
    _who,
    console,
)

schedules_app = typer.Typer(
    no_args_is_help=True,
    help="An app's schedules: list with next ticks, pause, resume, trigger now, ticks.",
)

AppArg = Annotated[
    str | None,
    typer.Option(
        "--app", help="The app whose schedules these are (default: the only one there is)."
    ),
]
NameArg = Annotated[str, typer.Argument(help="The schedule.")]


def register(app: typer.Typer) -> None:
    """Adds ``schedules`` to the CLI."""
    app.add_typer(schedules_app, name="schedules")


def _print(data: Any, as_json: bool, line: str) -> None:
    if as_json:
        print(json.dumps(data, indent=2, default=str))
    else:
        console.print(line, highlight=False)


@schedules_app.command("list")
def schedules_list(
    app_name: AppArg = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The app's schedules with their next ticks (orphaned ones too)."""
    app_name, listed = _call_for_app(db, url, token, app_name, lambda src, app: src.schedules(app))
    if as_json:
        _print_items(listed)
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
    app_name: AppArg = None,
    by: ByOpt = None,
    reason: ReasonOpt = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Pauses a schedule: no tick fires until it is resumed (audited)."""
    who = _who(by)
    _, done = _call_for_app(
        db,
        url,
        token,
        app_name,
        lambda src, app: src.schedule_change(app, name, "pause", who, reason),
    )
    what = "paused" if done["changed"] else "already paused: nothing changed"
    _print(done, as_json, f"schedule {name!r} {what}")


@schedules_app.command("resume")
def schedules_resume(
    name: NameArg,
    app_name: AppArg = None,
    by: ByOpt = None,
    reason: ReasonOpt = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Resumes a paused schedule from its next tick after now (audited)."""
    who = _who(by)
    _, done = _call_for_app(
        db,
        url,
        token,
        app_name,
        lambda src, app: src.schedule_change(app, name, "resume", who, reason),
    )
    what = (
        f"resumed; next tick {done['next_tick']}"
        if done["changed"]
        else ("not paused: nothing changed")
    )
    _print(done, as_json, f"schedule {name!r} {what}")


@schedules_app.command("trigger")
def schedules_trigger(
    name: NameArg,
    app_name: AppArg = None,
    by: ByOpt = None,
    reason: ReasonOpt = None,
    trigger_id: Annotated[
        str | None,
        typer.Option(
            "--id", help="Makes the trigger idempotent: a second one of this id does nothing."
        ),
    ] = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Triggers a tick now (its own key, audited); the next poll of a worker fires it."""
    who = _who(by)
    _, tick = _call_for_app(
        db,
        url,
        token,
        app_name,
        lambda src, app: src.schedule_trigger(app, name, who, reason, trigger_id),
    )
    _print(
        tick,
        as_json,
        f"schedule {name!r}: tick {tick['tick_key']} recorded ({tick['state']}); its run will "
        f"be {tick['run_id']}",
    )


@schedules_app.command("ticks")
def schedules_ticks(
    name: NameArg,
    app_name: AppArg = None,
    limit: LimitOpt = 20,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A schedule's latest ticks, newest first."""
    _, listed = _call_for_app(
        db, url, token, app_name, lambda src, app: src.schedule_ticks(app, name, limit)
    )
    if as_json:
        _print_items(listed)
        return
    rows = [
        [t["tick_key"], t["kind"], t["state"], t["run_id"], t["actor"] or "", _short(t["detail"])]
        for t in listed
    ]
    console.print(
        _table(f"ticks of {name!r}", ["tick", "kind", "state", "run", "by", "detail"], rows)
    )
