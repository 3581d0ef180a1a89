"""``durable-adk sessions``: a session's unreadable events: list them, repair one.

An event the reader cannot parse (written before the library bounded what it
stores, say) is kept in the log as stored and shown as unreadable; a run that
meets it is parked with the reason. ``unreadable`` lists such events with
their past repairs; ``repair`` writes a readable stand-in over one, audited,
the original kept (:mod:`durable_adk.adk.services.repairs`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from durable_adk.cli.options import (
    ByOpt,
    DbOpt,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    _call,
    _fail,
    _print_json,
    _who,
    console,
)

sessions_app = typer.Typer(
    no_args_is_help=True, help="A session's unreadable events: list them, repair one."
)

AppArg = Annotated[str, typer.Argument(help="The session's app.")]
UserArg = Annotated[str, typer.Argument(help="The session's user.")]
SessionArg = Annotated[str, typer.Argument(help="The session.")]


@sessions_app.command("unreadable")
def sessions_unreadable(
    app_name: AppArg,
    user_id: UserArg,
    session_id: SessionArg,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The session's events the reader cannot parse, and the repairs of its events."""
    found = _call(
        db, url, token, lambda source: source.session_repairs(app_name, user_id, session_id)
    )
    if as_json:
        _print_json(found)
        return
    unreadable: list[dict[str, Any]] = found["unreadable"]
    if not unreadable:
        console.print(f"session {session_id}: every event is readable")
    for item in unreadable:
        console.print(
            f"unreadable event #{item['seq']} {item['event_id']} (invocation "
            f"{item['invocation_id']}, by {item['author']}): {item['reason']}",
            highlight=False,
        )
    for done in found["repairs"]:
        console.print(
            f"repaired #{done['seq']} {done['event_id']}: {done['action']} by {done['actor']} "
            f"({done['reason']})",
            highlight=False,
        )


@sessions_app.command("repair")
def sessions_repair(
    app_name: AppArg,
    user_id: UserArg,
    session_id: SessionArg,
    event_id: Annotated[str, typer.Argument(help="The unreadable event's id.")],
    reason: Annotated[str, typer.Option("--reason", help="Why, for the audit trail.")],
    drop: Annotated[
        bool,
        typer.Option(
            "--drop",
            help="Drop the unreadable content: its calls and answers are kept by id, "
            "each answer an error.",
        ),
    ] = False,
    replacement: Annotated[
        Path | None,
        typer.Option(
            "--with",
            help="A file holding the event to write instead (JSON; its id, invocation, author "
            "and timestamp are the stored ones).",
        ),
    ] = None,
    by: ByOpt = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Writes a readable stand-in over an unreadable event (the original stays in the audit)."""
    if drop == (replacement is not None):
        _fail("give exactly one of --drop and --with FILE")
    value: dict[str, Any] | None = None
    if replacement is not None:
        try:
            value = json.loads(replacement.read_text())
        except (OSError, ValueError) as exc:
            _fail(f"--with {replacement}: not a readable JSON file: {exc}")
        if not isinstance(value, dict):
            _fail(f"--with {replacement}: the event must be a JSON object")
    who = _who(by)
    done = _call(
        db,
        url,
        token,
        lambda source: source.repair_event(
            app_name, user_id, session_id, event_id, who, reason, value
        ),
    )
    if as_json:
        _print_json(done)
        return
    console.print(done["message"], highlight=False)


def register(app: typer.Typer) -> None:
    """Adds ``sessions``."""
    app.add_typer(sessions_app, name="sessions")
