"""The ``durable-adk`` command: demo, database upgrades and the database's encryption
keys (``keys new``, ``keys status``, ``keys rotate``; docs/data.md) here, and every
other command group from a module of its own in :mod:`durable_adk.cli` (serve,
runs, jobs, sagas, dead letters, interrupts, recover, schedules, versions).

Every command is a thin wrapper: it parses arguments, calls the public async
API under ``asyncio.run`` and prints with Rich. Bad arguments exit with code 2
and a one-line reason; nothing is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import Annotated, Any

import typer
from rich.console import Console

from durable_adk import errors
from durable_adk.cli import dead_letters, interrupts, jobs, runs, sagas, serve, sessions
from durable_adk.cli.options import (
    DbOpt,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    _call,
    _print_json,
    _table,
    exit_code,
)
from durable_adk.cli.recover import register as register_recover
from durable_adk.cli.schedules import register as register_schedules
from durable_adk.cli.versions import register as register_versions
from durable_adk.store import DEFAULT_URL, connect, latest_version, upgrade
from durable_adk.store.migrate import redact
from durable_adk.store.sealing.codec import KEY_FILE_ENV, Keyring

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Crash-proof runs for Google ADK agents.",
    rich_markup_mode=None,
)
db_app = typer.Typer(no_args_is_help=True, help="Database schema commands.")
app.add_typer(db_app, name="db")
keys_app = typer.Typer(no_args_is_help=True, help="Encryption keys: new, status, rotate.")
app.add_typer(keys_app, name="keys")
# Wide enough for the demo's tables when output is not a terminal (make, CI logs).
console = Console(width=shutil.get_terminal_size((150, 40)).columns)

DbOption = Annotated[
    str, typer.Option("--db", envvar="DURABLE_ADK_DB", help="sqlite:///path or postgresql://...")
]


def _fail(message: str, code: int = 2) -> None:
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)


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
        _fail(str(exc), exit_code(exc))
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
        _fail(str(exc), exit_code(exc))
        return
    state = (
        "current"
        if have == need
        else ("behind: run `durable-adk db upgrade`" if have < need else "ahead")
    )
    console.print(f"{redact(db)}: schema version {have}, package needs {need} ({state})")


KeyFileOpt = Annotated[
    str | None,
    typer.Option(
        "--key-file",
        envvar=KEY_FILE_ENV,
        help="The key file (newest key first); with --db only: a worker uses its own.",
    ),
]


@contextlib.contextmanager
def _key_file(key_file: str | None, url: str | None) -> Iterator[None]:
    """Within it, the store is opened with ``key_file``'s keys (checked first)."""
    if key_file is None or url:
        yield
        return
    try:
        Keyring.from_file(key_file)
    except errors.DurableError as exc:
        _fail(str(exc), exit_code(exc))
    before = os.environ.get(KEY_FILE_ENV)
    os.environ[KEY_FILE_ENV] = key_file
    try:
        yield
    finally:
        if before is None:
            del os.environ[KEY_FILE_ENV]
        else:
            os.environ[KEY_FILE_ENV] = before


@keys_app.command("new")
def keys_new(
    key_id: Annotated[str, typer.Argument(help="The new key's id, e.g. 2026-12.")],
) -> None:
    """Prints a new key file line (32 random bytes): put it at the top of the key file."""
    try:
        print(Keyring.new_line(key_id))
    except errors.DurableError as exc:
        _fail(str(exc), exit_code(exc))


def _print_status(status: dict[str, Any]) -> None:
    rows = [
        [
            str(k["key_id"]) + (" (encrypts)" if k["key_id"] == status.get("primary") else ""),
            str(k["values"]),
            str(k.get("user_keys") or ""),
            ", ".join(f"{c}={n}" for c, n in k["columns"].items()),
        ]
        for k in status["keys"]
    ]
    console.print(_table("values by key", ["key", "values", "user keys wrapped", "columns"], rows))


@keys_app.command("status")
def keys_status(
    key_file: KeyFileOpt = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Stored values on each key ('clear': not encrypted): what rotation has left to do."""
    with _key_file(key_file, url):
        status = _call(db, url, token, lambda source: source.keys_status())
    if as_json:
        _print_json(status)
        return
    if status.get("primary") is None:
        console.print("no keys held here: values are written in clear")
    _print_status(status)


@keys_app.command("rotate")
def keys_rotate(
    key_file: KeyFileOpt = None,
    batch: Annotated[int, typer.Option(min=1, max=10000, help="Rows read per batch.")] = 200,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-encrypts every value in clear or on an older key under the first key.

    Runs go on meanwhile; a value a run rewrites during the rotation keeps the
    run's. Safe to stop and run again: what is done is skipped.
    """
    if not url and not (key_file or os.environ.get(KEY_FILE_ENV)):
        _fail("keys rotate needs the keys: --key-file FILE (or DURABLE_ADK_KEY_FILE)")
    with _key_file(key_file, url):
        done = _call(db, url, token, lambda source: source.keys_rotate(batch))
    if as_json:
        _print_json(done)
        return
    console.print(
        f"moved {done['moved']} value(s) to key {done['primary']}; "
        f"{sum(done['raced'].values())} rewritten by runs meanwhile; "
        f"{sum(done['unreadable'].values())} unreadable (key not held); "
        f"{done['rewrapped_user_keys']} user key(s) re-wrapped",
        highlight=False,
    )
    for line in done["errors"]:
        console.print(f"[yellow]unreadable:[/yellow] {line}", highlight=False)
    _print_status(done["status"])
    if sum(done["unreadable"].values()):
        raise typer.Exit(1)


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
