"""Every command's ``--help`` at 80 columns (issue 42, item 4): nothing is cut,
no line is wider than the terminal, and every option's default is shown whole
(the README's ``serve --help`` cut ``sqlite:///durable_adk.db`` to
``sqlite:///durabl…`` and option names to ``--max-message-cha…``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from durable_adk.cli import app

runner = CliRunner()


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        yield path, command
        return
    yield path, command
    for name, sub in subcommands.items():
        yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))


def _shown_default(param: Any) -> str | None:
    """How the help states ``param``'s default, or None where it states none."""
    if param.param_type_name != "option" or not param.show_default:
        return None
    if param.default is None or param.default == [] or param.default == ():
        return None
    if param.is_flag and param.secondary_opts:  # --streaming/--no-streaming
        names = param.opts if param.default else param.secondary_opts
        return names[0].lstrip("-")
    if param.is_flag:  # a lone flag off by default says nothing
        return None
    return str(param.default)


def test_the_walk_finds_every_command_group() -> None:
    groups = {path[0] for path, _ in COMMANDS if path}
    assert {
        "serve", "recover", "demo", "db", "runs", "interrupts", "jobs", "dead-letters",
        "sagas", "schedules", "versions", "sessions",
    } <= groups  # fmt: skip


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "top")
def test_help_at_80_columns_cuts_nothing(path: tuple[str, ...]) -> None:
    command = dict(COMMANDS)[path]
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    text = result.output
    assert "…" not in text, text
    wide = [line for line in text.splitlines() if len(line) > 80]
    assert wide == [], text
    flat = " ".join(text.split())  # a value wrapped between words reads the same
    for param in command.params:
        default = _shown_default(param)
        if default is None:
            continue
        assert re.search(rf"\bdefault: {re.escape(default)}[;\]]", flat), (param.name, text)
        for name in (*param.opts, *param.secondary_opts):
            assert re.search(rf"(^|\s){re.escape(name)}(\s|,|$)", flat), (name, text)


def test_serve_states_its_defaults_whole() -> None:
    result = runner.invoke(app, ["serve", "--help"], env={"COLUMNS": "80"})
    flat = " ".join(result.output.split())
    for default in ("sqlite:///durable_adk.db", "127.0.0.1", "8000", "30.0", "no-streaming"):
        assert f"default: {default}" in flat, default
    for option in ("--max-message-chars", "--max-payload-depth", "--interrupt-deadline"):
        assert option in flat, option
