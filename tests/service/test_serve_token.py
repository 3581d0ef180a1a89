"""``durable-adk serve --token``: the minimum length docs/service.md states is the one enforced."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from durable_adk.cli import app

DOCS = Path(__file__).parents[2] / "docs" / "service.md"


def test_a_token_shorter_than_the_documented_minimum_is_refused(tmp_path: Path) -> None:
    row = next(line for line in DOCS.read_text().splitlines() if line.startswith("| `--token`"))
    found = re.search(r"at least (\d+) characters", row)
    assert found, row
    minimum = int(found.group(1))
    db = tmp_path / "never.db"
    command = [
        "serve", "durable_adk.demo.service_app:app", "--db", f"sqlite:///{db}", "--port", "0",
    ]  # fmt: skip
    # In this process (the refusal comes before the app is even loaded).
    short = CliRunner().invoke(app, [*command, "--token", "x" * (minimum - 1)])
    assert short.exit_code == 2, short.output
    assert f"at least {minimum} characters" in short.output
    assert not db.exists()  # refused before anything was opened
