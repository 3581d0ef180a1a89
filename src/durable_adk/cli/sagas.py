"""``durable-adk sagas``: sagas: list."""

from __future__ import annotations

from typing import Annotated

import typer

from durable_adk.cli.options import (
    DbOpt,
    JsonOpt,
    LimitOpt,
    TokenOpt,
    UrlOpt,
    _call,
    _listing,
    choice,
)

_STATUSES = ["RUNNING", "COMPENSATING", "COMMITTED", "COMPENSATED", "COMPENSATION_FAILED"]

sagas_app = typer.Typer(no_args_is_help=True, help="Sagas: list.")


@sagas_app.command("list")
def sagas_list(
    status: Annotated[
        str | None, typer.Option(help="RUNNING, COMPENSATING, COMMITTED, ...")
    ] = None,
    limit: LimitOpt = 50,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Sagas, newest first."""
    chosen = choice(status, "--status", _STATUSES)
    listing = _call(db, url, token, lambda source: source.sagas(chosen, limit))
    columns = ["saga_id", "name", "status", "session_id", "reason", "updated_at"]
    _listing("saga(s)", listing, columns, as_json)


def register(app: typer.Typer) -> None:
    """Adds ``sagas``."""
    app.add_typer(sagas_app, name="sagas")
