"""``durable-adk sessions``: a session's unreadable events: list them, repair one;
``durable-adk users forget``: a user's data in every table, gone.

An event the reader cannot parse (written before the library bounded what it
stores, say) is kept in the log as stored and shown as unreadable; a run that
meets it is parked with the reason. ``unreadable`` lists such events with
their past repairs; ``repair`` writes a readable stand-in over one, audited,
the original kept (:mod:`durable_adk.adk.services.repairs`).

As in every other command group, the app is ``--app`` (optional when the
database holds one app; through a worker, the app it serves). The older form
with the app as first argument (``sessions unreadable APP USER SESSION``)
still works in this release, with a note on stderr; it goes in the next.
``users forget`` deletes a user's sessions and every row of theirs
(:mod:`durable_adk.lifecycle.forget`).
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
    ReasonOpt,
    TokenOpt,
    UrlOpt,
    _call,
    _call_for_app,
    _fail,
    _print_json,
    _who,
    console,
)

sessions_app = typer.Typer(
    no_args_is_help=True, help="A session's unreadable events: list them, repair one."
)

AppOpt = Annotated[
    str | None,
    typer.Option("--app", help="The session's app (default: the only one there is)."),
]
UserArg = Annotated[str, typer.Argument(metavar="USER", help="The session's user.")]
SessionArg = Annotated[str, typer.Argument(metavar="SESSION", help="The session.")]
# The older form's last argument: its arguments then start with the app.
Legacy = Annotated[str | None, typer.Argument(hidden=True, show_default=False)]


def _app_first(
    app_name: str | None, given: list[str], legacy: str | None
) -> tuple[str | None, list[str]]:
    """The app and the command's arguments, from ``--app`` or the older form's first argument.

    ``given`` are the arguments the command takes; when one more (``legacy``)
    was given, the first is the app (the older form, deprecated: a note on stderr).
    """
    if legacy is None:
        return app_name, given
    if app_name is not None:
        _fail("give the app once: --app APP (the app as first argument is the older form)")
    first = given[0]
    typer.echo(
        "note: `durable-adk sessions ... APP USER SESSION` is deprecated and goes in the "
        f"next release: use `--app {first} USER SESSION` (or leave --app out when the "
        "database holds one app)",
        err=True,
    )
    return first, [*given[1:], legacy]


@sessions_app.command("unreadable")
def sessions_unreadable(
    user_id: UserArg,
    session_id: SessionArg,
    legacy: Legacy = None,
    app_name: AppOpt = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The session's events the reader cannot parse, and the repairs of its events."""
    app_name, (user_id, session_id) = _app_first(app_name, [user_id, session_id], legacy)
    _, found = _call_for_app(
        db,
        url,
        token,
        app_name,
        lambda source, app: source.session_repairs(app, user_id, session_id),
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
    user_id: UserArg,
    session_id: SessionArg,
    event_id: Annotated[str, typer.Argument(metavar="EVENT_ID", help="The unreadable event's id.")],
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
    legacy: Legacy = None,
    app_name: AppOpt = None,
    by: ByOpt = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Writes a readable stand-in over an unreadable event (the original stays in the audit)."""
    app_name, (user_id, session_id, event_id) = _app_first(
        app_name, [user_id, session_id, event_id], legacy
    )
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
    _, done = _call_for_app(
        db,
        url,
        token,
        app_name,
        lambda source, app: source.repair_event(
            app, user_id, session_id, event_id, who, reason, value
        ),
    )
    if as_json:
        _print_json(done)
        return
    console.print(done["message"], highlight=False)


users_app = typer.Typer(no_args_is_help=True, help="A user's data: forget it.")


@users_app.command("forget")
def users_forget(
    user_id: Annotated[str, typer.Argument(help="The user to forget.")],
    app: Annotated[
        str | None,
        typer.Option("--app", help="Only this app (default: every app; through --url: its app)."),
    ] = None,
    cancel_live: Annotated[
        bool,
        typer.Option(
            "--cancel-live", help="Cancel the user's runs under way first instead of refusing."
        ),
    ] = False,
    by: ByOpt = None,
    reason: ReasonOpt = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Deletes every row of USER (sessions, user: state, events, runs, journal, jobs, sagas,
    interrupts, artifacts...), audited first; refused (exit 1) while the user has runs under
    way unless --cancel-live. Safe to run again after a crash: it carries on."""
    if not user_id.strip():
        _fail("USER must not be empty")
    who = _who(by)
    done = _call(
        db,
        url,
        token,
        lambda source: source.forget_user(user_id, app, who, reason, cancel_live),
    )
    if as_json:
        _print_json(done)
        return
    where = "every app" if done["scope"] == "*" else f"app {done['scope']!r}"
    lines = [f"forgot user {done['user_id']!r} in {where}: {done['rows']} row(s) deleted"]
    if done["cancelled"]:
        lines.append(f"cancelled first: {', '.join(done['cancelled'])}")
    for name, count in done["deleted"].items():
        lines.append(f"  {name}: {count['rows']} row(s), {count['bytes']} bytes")
    lines.append(f"audit: forget request {done['request']}")
    console.print("\n".join(lines), highlight=False)


def register(app: typer.Typer) -> None:
    """Adds ``sessions`` and ``users``."""
    app.add_typer(sessions_app, name="sessions")
    app.add_typer(users_app, name="users")
