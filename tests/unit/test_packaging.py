"""Packaging: the built wheel installs in a fresh virtualenv; the ADK facts we rely on still hold.

The first wheel test installs with ``--no-deps`` so it needs nothing from a
package index: it proves the wheel carries the package data (SQL files,
migrations, dashboard) and that the core runs on the standard library alone, as
``import durable_adk`` promises. The README's install test runs the commands
the README gives (until durable-adk is published: from a clone, or a wheel
built from one) in a new virtualenv, dependencies and the ``postgresql`` extra
included; it needs the package index (pip's cache makes it faster). The facts
script re-checks, against the ADK installed here, every private ADK behaviour
docs/adk-notes.md says we rely on: an ADK upgrade that breaks one fails this
suite.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(args: list[str], *, timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` with captured text output that cannot outlive its timeout.

    The command runs in a session of its own, and on timeout the whole
    session is killed: pip and the other processes a command starts hold its
    output pipes, and ``subprocess.run`` kills only the command itself, then
    waits for those pipes to close, for ever if a grandchild hangs (a stalled
    download, say).

    Raises:
        subprocess.TimeoutExpired: The command ran out of time (with its output).
    """
    with subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kwargs,
    ) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            raise subprocess.TimeoutExpired(args, timeout, out, err) from None
        except BaseException:  # pytest-timeout's alarm, a KeyboardInterrupt
            os.killpg(process.pid, signal.SIGKILL)
            raise
    return subprocess.CompletedProcess(args, process.returncode, out, err)


@pytest.mark.slow
def test_the_wheel_installs_and_runs_the_core_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    built = run(
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
    # The wheel holds the source tree's package, no more and no less: no
    # module whose only caller is the project's own test suite (those live
    # under tests/), and the chaos soak's SQL beside the soak, not among the
    # library's queries and migrations.
    package = ROOT / "src" / "durable_adk"
    source = {
        str(p.relative_to(package.parent))
        for p in package.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }
    assert {n for n in names if n.startswith("durable_adk/")} == source
    assert [n for n in names if n.startswith("durable_adk/sql/") and "chaos" in n] == []
    for soak_sql in ("chaos_observer.sql", "queries_chaos.sql"):
        for dialect in ("sqlite", "postgresql"):
            assert f"durable_adk/chaos/sql/{dialect}/{soak_sql}" in names
    for internal in ("children.py", "preload.py"):
        assert not any(n.endswith("/" + internal) for n in names), internal
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "License-Expression: Apache-2.0" in text
    for extra in ("postgresql", "service", "otel"):
        assert f"Provides-Extra: {extra}" in text

    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", str(venv)], timeout=300).returncode == 0
    python = venv / "bin" / "python"
    installed = run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)],
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
                assert "durable-adk[postgresql]" in str(exc) and "extra" in str(exc), exc
                print("postgres-extra-named")
        asyncio.run(main())
        print("core-ok", durable_adk.__version__)
        """
    )
    ran = run(
        [str(python), "-c", script],
        timeout=120,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert ran.returncode == 0, ran.stderr
    assert "postgres-extra-named" in ran.stdout
    assert "core-ok 0.1.0" in ran.stdout


def readme_install_blocks() -> list[list[str]]:
    """The shell blocks of the README's install section, one command a line, comments cut."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Adding it to an existing project", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    return [
        [line.split(" #", 1)[0].strip() for line in block.splitlines() if line.strip()]
        for block in blocks
    ]


def copy_checkout(target: Path) -> None:
    """What a clone holds: the checkout without its virtualenv, builds and caches."""
    shutil.copytree(
        ROOT,
        target,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            "build",
            "dist",
            "*.egg-info",
            "__pycache__",
            "*.pyc",
            ".*_cache",
            ".hypothesis",
            "*.db",
            "*.db-*",
        ),
    )


@pytest.mark.slow
@pytest.mark.timeout(960)  # its own bound (900 s) first: it reports pip's output
def test_the_readme_install_commands_work_in_a_new_virtualenv(tmp_path: Path) -> None:
    """The README's commands, verbatim: the wheel into a new virtualenv, then the clone."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    wheel = f"dist/durable_adk-{version}-py3-none-any.whl"
    from_clone, from_wheel = readme_install_blocks()
    assert from_clone == [
        "python3 -m venv venv",
        ". venv/bin/activate",
        "python -m pip install './durable-adk[postgresql]'",
        "durable-adk --help",
    ]
    assert from_wheel == [
        "python -m pip wheel --no-deps -w dist ./durable-adk",
        f"python -m pip install '{wheel}[postgresql]'",
    ]
    project = tmp_path / "project"
    copy_checkout(project / "durable-adk")
    check = (
        "import asyncpg, durable_adk, durable_adk.store, durable_adk.adk;"
        " print('imported', durable_adk.__version__, durable_adk.__file__)"
    )
    script = "\n".join(
        [
            "set -euo pipefail",
            # The interpreter running this suite, not whatever `python3` is on
            # PATH: the README asks for Python 3.11 or newer, as this one is.
            from_clone[0].replace("python3", shlex.quote(sys.executable), 1),
            from_clone[1],
            # The wheel first, so that it is what goes into the new virtualenv
            # with its dependencies; then the clone's install, over it.
            *from_wheel,
            f"python -c {shlex.quote(check)}",
            "durable-adk --help",
            "echo WHEEL-OK",
            *from_clone[2:],
            f"python -c {shlex.quote(check)}",
        ]
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PIP_REQUIRE_VIRTUALENV")
    }
    # pip's cache (under HOME) is used as usual. PIP_NO_COMPILE skips compiling
    # every dependency's .pyc files at install (Python compiles what it imports
    # when it imports it): the longest part of the install on a busy machine.
    # A stalled download fails within a minute instead of holding the suite.
    env.update(
        PIP_PROGRESS_BAR="off", PIP_NO_COMPILE="1", PIP_DEFAULT_TIMEOUT="60", PIP_RETRIES="2"
    )
    ran = run(
        ["bash", "-c", script],
        cwd=project,
        env=env,
        timeout=900,
    )
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-4000:]
    assert (project / wheel).is_file()
    venv_lib = str(project / "venv" / "lib")
    wheel_part, clone_part = ran.stdout.split("WHEEL-OK", 1)
    for part in (wheel_part, clone_part):
        (line,) = [x for x in part.splitlines() if x.startswith("imported ")]
        assert line.startswith(f"imported {version} {venv_lib}"), line
    assert wheel_part.count("Usage: durable-adk") == 1
    assert clone_part.count("Usage: durable-adk") == 1
    for command in ("serve", "recover", "db"):  # its commands are listed
        assert re.search(rf"\b{command}\b", wheel_part), command


def test_the_adk_facts_we_rely_on_still_hold() -> None:
    checked = run(
        [sys.executable, str(ROOT / "docs" / "adk-notes" / "verify_adk_facts.py")],
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("OK ") >= 5
