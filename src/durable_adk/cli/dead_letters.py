"""``durable-adk dead-letters``: dead letters: list."""

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
    _print_items,
    _short,
    _table,
    _when,
    console,
)

letters_app = typer.Typer(no_args_is_help=True, help="Dead letters: list.")


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


def register(app: typer.Typer) -> None:
    """Adds ``dead-letters``."""
    app.add_typer(letters_app, name="dead-letters")
