"""``durable-adk versions``: an app's versions with their runs by status and who serves
them, and draining a version.

The commands work on the database (``--db``, through
:class:`~durable_adk.tables.versions.VersionTable`) or through a running
worker of the app (``--url``/``--token``, its ``/v1/versions`` routes), with
the same answers. ``--app`` may be left out when the database holds one app
(a worker: the app it serves). ``drain`` and ``undrain`` write their line in
the operators' audit trail in the same unit of work as the change; a bad
version or operator name, or a move to an older version, exits 2 with the
reason, changing nothing; an unknown `--app` exits 1 (not found).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from durable_adk.cli.options import (
    ByOpt,
    DbOpt,
    JsonOpt,
    ReasonOpt,
    TokenOpt,
    UrlOpt,
    _call_for_app,
    _print_items,
    _table,
    _who,
    console,
)

versions_app = typer.Typer(
    no_args_is_help=True,
    help="An app's versions: runs by status and who serves them; drain, undrain.",
)

AppArg = Annotated[
    str | None,
    typer.Option(
        "--app", help="The app whose versions these are (default: the only one there is)."
    ),
]
VersionArg = Annotated[str, typer.Argument(help="The version (PEP 440, e.g. 1.4.0).")]


def register(app: typer.Typer) -> None:
    """Adds ``versions`` to the CLI."""
    app.add_typer(versions_app, name="versions")


def _runs(counts: dict[str, int]) -> str:
    return ", ".join(f"{status} {n}" for status, n in sorted(counts.items())) or "-"


@versions_app.command("list")
def versions_list(
    app_name: AppArg = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The app's versions, newest first: runs by status, live workers, waiting runs, drains."""
    app_name, listed = _call_for_app(db, url, token, app_name, lambda src, app: src.versions(app))
    if as_json:
        _print_items(listed)
        return
    rows = [
        [
            d["version"],
            _runs(d["runs"]),
            ", ".join(d["own_workers"]) or "-",
            ", ".join(d["continued_by"]) or "-",
            str(d["waiting"]),
            f"drained by {d['drained_by']}" if d["drained_at"] else "taking runs",
        ]
        for d in listed
    ]
    headers = ["version", "runs", "its workers", "continued by", "waiting", "state"]
    console.print(_table(f"versions of app {app_name!r}", headers, rows))


def _change(
    version: str, app_name: str | None, where: tuple[str | None, str | None, str | None],
    as_json: bool, *, drain: bool, who: str, reason: str | None,
) -> None:  # fmt: skip
    app_name, done = _call_for_app(
        *where, app_name, lambda src, app: src.version_change(app, version, drain, who, reason)
    )
    if as_json:
        print(json.dumps(done, indent=2))
        return
    if drain:
        what = (
            "drained: it starts no new run; its runs finish"
            if done["changed"]
            else ("already drained: nothing changed")
        )
    else:
        what = "takes new runs again" if done["changed"] else "not drained: nothing changed"
    console.print(f"version {version} of app {app_name!r} {what}", highlight=False)


@versions_app.command("drain")
def versions_drain(
    version: VersionArg,
    app_name: AppArg = None,
    by: ByOpt = None,
    reason: ReasonOpt = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Drains a version: its workers start no new run; its runs finish (audited)."""
    _change(version, app_name, (db, url, token), as_json, drain=True, who=_who(by), reason=reason)


@versions_app.command("undrain")
def versions_undrain(
    version: VersionArg,
    app_name: AppArg = None,
    by: ByOpt = None,
    reason: ReasonOpt = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Lets a drained version take new runs again (audited)."""
    _change(version, app_name, (db, url, token), as_json, drain=False, who=_who(by), reason=reason)


@versions_app.command("move")
def versions_move(
    version: VersionArg,
    to: Annotated[str, typer.Option("--to", help="The newer version that continues them.")],
    app_name: AppArg = None,
    by: ByOpt = None,
    reason: ReasonOpt = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Moves a retired version's open runs to a newer version (audited)."""
    who = _who(by)
    _, done = _call_for_app(
        db, url, token, app_name, lambda src, app: src.version_move(app, version, to, who, reason)
    )
    moved = done["moved"]
    if as_json:
        print(json.dumps(done, indent=2))
        return
    console.print(
        f"{moved} open run(s) of version {version} moved to {to}"
        + ("" if moved else ": nothing changed"),
        highlight=False,
    )


@versions_app.command("abandon")
def versions_abandon(
    version: VersionArg,
    reason: Annotated[str, typer.Option("--reason", help="Why (required, for the audit trail).")],
    app_name: AppArg = None,
    by: ByOpt = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancels every open run of a retired version (each audited as an operator's cancel)."""
    who = _who(by)
    _, done = _call_for_app(
        db, url, token, app_name, lambda src, app: src.version_abandon(app, version, who, reason)
    )
    cancelled = done["cancelled"]
    if as_json:
        print(json.dumps(done, indent=2))
        return
    console.print(
        f"{len(cancelled)} open run(s) of version {version} cancelled"
        + ("" if cancelled else ": nothing changed"),
        highlight=False,
    )
