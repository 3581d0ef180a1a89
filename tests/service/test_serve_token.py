"""``durable-adk serve --token``: the minimum length docs/service.md states is the one enforced."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).parents[2] / "docs" / "service.md"


def test_a_token_shorter_than_the_documented_minimum_is_refused(tmp_path: Path) -> None:
    row = next(line for line in DOCS.read_text().splitlines() if line.startswith("| `--token`"))
    found = re.search(r"at least (\d+) characters", row)
    assert found, row
    minimum = int(found.group(1))
    db = tmp_path / "never.db"
    command = [
        sys.executable, "-m", "durable_adk.cli", "serve", "durable_adk.demo.service_app:app",
        "--db", f"sqlite:///{db}", "--port", "0",
    ]  # fmt: skip
    short = subprocess.run(
        [*command, "--token", "x" * (minimum - 1)], capture_output=True, text=True, timeout=120
    )
    assert short.returncode == 2, short.stdout + short.stderr
    assert f"at least {minimum} characters" in short.stdout + short.stderr
    assert not db.exists()  # refused before anything was opened
