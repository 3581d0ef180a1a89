"""Packaging: the built wheel installs in a fresh virtualenv; the ADK facts we rely on still hold.

The wheel test installs with ``--no-deps`` so it needs nothing from a package
index: it proves the wheel carries the package data (SQL files, migrations,
dashboard) and that the core runs on the standard library alone, as
``import durable_adk`` promises. The facts script re-checks, against the ADK
installed here, every private ADK behaviour docs/adk-notes.md says we rely on:
an ADK upgrade that breaks one fails this suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_wheel_installs_and_runs_the_core_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("durable_adk-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for needed in (
        "durable_adk/sql/sqlite/schema.sql",
        "durable_adk/sql/postgresql/schema.sql",
        "durable_adk/sql/sqlite/migrations/0001_sessions.sql",
        "durable_adk/py.typed",
    ):
        assert needed in names, needed
    assert any(n.startswith("durable_adk/service/static/") for n in names)
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "License-Expression: Apache-2.0" in text
    for extra in ("postgresql", "service", "otel"):
        assert f"Provides-Extra: {extra}" in text

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    script = textwrap.dedent(
        """
        import asyncio
        import durable_adk
        from durable_adk import RunLedger, RunStatus, open_store, errors

        async def main():
            async with open_store("sqlite:///core.db") as store:
                run = await RunLedger(store).submit(
                    app_name="a", user_id="u", session_id="s", request={"parts": []}, owner="w")
                assert run.status is RunStatus.QUEUED
            try:
                async with open_store("postgresql://nobody@127.0.0.1:1/x"):
                    pass
            except errors.UnsupportedUrl as exc:
                assert "durable-adk[postgresql]" in str(exc), exc
                print("postgres-extra-named")
        asyncio.run(main())
        print("core-ok", durable_adk.__version__)
        """
    )
    ran = subprocess.run(
        [str(python), "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert ran.returncode == 0, ran.stderr
    assert "postgres-extra-named" in ran.stdout
    assert "core-ok 0.1.0" in ran.stdout


def test_the_adk_facts_we_rely_on_still_hold() -> None:
    checked = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "adk-notes" / "verify_adk_facts.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("OK ") >= 5
