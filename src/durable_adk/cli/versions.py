"""``durable-adk versions``: an app's versions with their runs by status and who serves
them, and draining a version.

The commands work on the database (``--db``) through
:class:`~durable_adk.tables.versions.VersionTable`. ``drain`` and ``undrain``
write their line in the operators' audit trail in the same unit of work as the
change; a bad version or operator name exits 1 with the reason, changing
nothing. Bad arguments exit 2.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer

from durable_adk.adk.runs.operators import abandon_version
from durable_adk.cli.options import (
    ByOpt,
    DbOpt,
    JsonOpt,
    ReasonOpt,
    _table,
    _who,
    console,
    on_database,
)
from durable_adk.tables.versions import VersionTable

T = TypeVar("T")

versions_app = typer.Typer(
    no_args_is_help=True,
    help="An app's versions: runs by status and who serves them; drain, undrain.",
)

AppArg = Annotated[str, typer.Option("--app", help="The app whose versions these are.")]
VersionArg = Annotated[str, typer.Argument(help="The version (PEP 440, e.g. 1.4.0).")]


def register(app: typer.Typer) -> None:
    """Adds ``versions`` to the CLI."""
    app.add_typer(versions_app, name="versions")


def _run(db: str | None, app_name: str, work: Callable[[VersionTable], Awaitable[T]]) -> T:
    return on_database(db, lambda store: work(VersionTable(store, app_name)))


def _runs(counts: dict[str, int]) -> str:
    return ", ".join(f"{status} {n}" for status, n in sorted(counts.items())) or "-"


@versions_app.command("list")
def versions_list(app_name: AppArg, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """The app's versions, newest first: runs by status, live workers, waiting runs, drains."""
    listed = [v.describe() for v in _run(db, app_name, lambda table: table.report())]
    if as_json:
        print(json.dumps(listed, indent=2, default=str))
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
    version: str, app_name: str, db: str | None, as_json: bool, *, drain: bool, who: str,
    reason: str | None,
) -> None:  # fmt: skip
    async def work(table: VersionTable) -> dict[str, Any]:
        act = table.drain if drain else table.undrain
        changed = await act(version, by=who, reason=reason)
        return {"version": version, "drained": drain, "changed": changed}

    done = _run(db, app_name, work)
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
    app_name: AppArg,
    by: ByOpt = None,
    reason: ReasonOpt = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Drains a version: its workers start no new run; its runs finish (audited)."""
    _change(version, app_name, db, as_json, drain=True, who=_who(by), reason=reason)


@versions_app.command("undrain")
def versions_undrain(
    version: VersionArg,
    app_name: AppArg,
    by: ByOpt = None,
    reason: ReasonOpt = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Lets a drained version take new runs again (audited)."""
    _change(version, app_name, db, as_json, drain=False, who=_who(by), reason=reason)


@versions_app.command("move")
def versions_move(
    version: VersionArg,
    app_name: AppArg,
    to: Annotated[str, typer.Option("--to", help="The newer version that continues them.")],
    by: ByOpt = None,
    reason: ReasonOpt = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Moves a retired version's open runs to a newer version (audited)."""
    who = _who(by)
    moved = _run(db, app_name, lambda table: table.move(version, to, by=who, reason=reason))
    if as_json:
        print(json.dumps({"version": version, "to": to, "moved": moved}, indent=2))
        return
    console.print(
        f"{moved} open run(s) of version {version} moved to {to}"
        + ("" if moved else ": nothing changed"),
        highlight=False,
    )


@versions_app.command("abandon")
def versions_abandon(
    version: VersionArg,
    app_name: AppArg,
    reason: Annotated[str, typer.Option("--reason", help="Why (required, for the audit trail).")],
    by: ByOpt = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancels every open run of a retired version (each audited as an operator's cancel)."""
    who = _who(by)
    cancelled = _run(
        db, app_name, lambda table: abandon_version(table, version, by=who, reason=reason)
    )
    if as_json:
        print(json.dumps({"version": version, "cancelled": cancelled}, indent=2))
        return
    console.print(
        f"{len(cancelled)} open run(s) of version {version} cancelled"
        + ("" if cancelled else ": nothing changed"),
        highlight=False,
    )
