"""``durable-adk dead-letters``: dead letters: list; the A2A pushes that gave up: pushes."""

from __future__ import annotations

from typing import Annotated

import typer

from durable_adk.cli.options import (
    AppOpt,
    DbOpt,
    JsonOpt,
    LimitOpt,
    TokenOpt,
    UrlOpt,
    _call,
    _call_for_app,
    _fail,
    _print_items,
    _short,
    _table,
    _when,
    console,
)
from durable_adk.service.features import PUSH_STATUSES

letters_app = typer.Typer(
    no_args_is_help=True, help="Dead letters: list; A2A pushes that gave up: pushes."
)


@letters_app.command("list")
def dead_letters_list(
    run_id: Annotated[str | None, typer.Option(help="Only this run's.")] = None,
    app: AppOpt = None,
    limit: LimitOpt = 50,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Dead letters (what needs a person), newest first."""
    letters = _call(db, url, token, lambda source: source.dead_letters(run_id, limit, app))
    if as_json:
        _print_items(letters)
        return
    rows = [
        [
            _when(d["created_at"]),
            d["kind"],
            d["run_id"] or "",
            d["classification"] or "",
            _short(d["error"], 90),
        ]
        for d in letters
    ]
    console.print(
        _table(f"{len(letters)} dead letter(s)", ["when", "kind", "run", "class", "error"], rows)
    )


@letters_app.command("pushes")
def dead_letters_pushes(
    app: AppOpt = None,
    status: Annotated[
        str | None, typer.Option(help="PENDING, SENT or DEAD (default: DEAD); 'all': every one.")
    ] = "DEAD",
    limit: LimitOpt = 50,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The A2A push notifications of an app that gave up after their last attempt, oldest first."""
    if status is not None and status.lower() == "all":
        status = None
    if status is not None and status.upper() not in PUSH_STATUSES:
        _fail(f"--status takes PENDING, SENT, DEAD or all, not {status!r}")
    chosen = None if status is None else status.upper()
    app_name, listed = _call_for_app(
        db, url, token, app, lambda source, name: source.a2a_pushes(name, chosen, limit)
    )
    pushes = listed["items"]
    if as_json:
        _print_items(pushes)
        return
    rows = [
        [
            p["task_id"],
            str(p["version"]),
            p["config_id"],
            p["status"],
            str(p["attempts"]),
            _short(p["last_error"] or "", 60),
        ]
        for p in pushes
    ]
    console.print(
        _table(
            f"{len(pushes)} push(es) of {app_name}",
            ["task", "version", "config", "status", "attempts", "last error"],
            rows,
        )
    )


def register(app: typer.Typer) -> None:
    """Adds ``dead-letters``."""
    app.add_typer(letters_app, name="dead-letters")
