"""The ``durable-adk`` command: demo and database upgrades here, and every other
command group from a module of its own in :mod:`durable_adk.cli` (serve, runs,
jobs, sagas, dead letters, interrupts, recover, schedules, versions).

Every command is a thin wrapper: it parses arguments, calls the public async
API under ``asyncio.run`` and prints with Rich. Bad arguments exit with code 2
and a one-line reason; nothing is written.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Annotated

import typer
from rich.console import Console

from durable_adk import errors
from durable_adk.cli import dead_letters, interrupts, jobs, runs, sagas, serve, sessions
from durable_adk.cli.recover import register as register_recover
from durable_adk.cli.schedules import register as register_schedules
from durable_adk.cli.versions import register as register_versions
from durable_adk.store import DEFAULT_URL, connect, latest_version, upgrade
from durable_adk.store.migrate import redact

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Crash-proof runs for Google ADK agents."
)
db_app = typer.Typer(no_args_is_help=True, help="Database schema commands.")
app.add_typer(db_app, name="db")
# Wide enough for the demo's tables when output is not a terminal (make, CI logs).
console = Console(width=shutil.get_terminal_size((150, 40)).columns)

DbOption = Annotated[
    str, typer.Option("--db", envvar="DURABLE_ADK_DB", help="sqlite:///path or postgresql://...")
]


def _fail(message: str) -> None:
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(2)


@db_app.command("upgrade")
def db_upgrade(db: DbOption = DEFAULT_URL) -> None:
    """Applies the migrations the database lacks."""

    async def go() -> tuple[list[int], int]:
        store = await connect(db)
        try:
            return await upgrade(store), await store.schema_version()
        finally:
            await store.close()

    try:
        applied, version = asyncio.run(go())
    except errors.DurableError as exc:
        _fail(str(exc))
        return
    where = redact(db)
    if applied:
        console.print(f"{where}: applied migrations {applied}; schema version {version}")
    else:
        console.print(f"{where}: already at schema version {version}")


@db_app.command("version")
def db_version(db: DbOption = DEFAULT_URL) -> None:
    """Prints the database's schema version and the one this package needs."""

    sqlite_path = db.removeprefix("sqlite:///") if db.startswith("sqlite:///") else None
    if sqlite_path and sqlite_path != ":memory:" and not os.path.exists(sqlite_path):
        _fail(f"no database at {sqlite_path}")

    async def go() -> tuple[int, int]:
        store = await connect(db)
        try:
            return await store.schema_version(), latest_version(store.dialect)
        finally:
            await store.close()

    try:
        have, need = asyncio.run(go())
    except errors.DurableError as exc:
        _fail(str(exc))
        return
    state = (
        "current"
        if have == need
        else ("behind: run `durable-adk db upgrade`" if have < need else "ahead")
    )
    console.print(f"{redact(db)}: schema version {have}, package needs {need} ({state})")


@app.command()
def demo(db: DbOption = DEFAULT_URL) -> None:
    """Runs the worked examples: an agent killed mid-run, read back by a fresh process."""
    from durable_adk.demo import tour  # the demos use the testing kit: loaded only here

    try:
        tour.run(db, console)
    except tour.DemoFailed as exc:
        _fail(str(exc))


for group in (serve, runs, jobs, sagas, dead_letters, interrupts, sessions):
    group.register(app)
register_recover(app)
register_schedules(app)
register_versions(app)


def main() -> None:
    """Entry point of the ``durable-adk`` script."""
    app()


if __name__ == "__main__":
    main()
