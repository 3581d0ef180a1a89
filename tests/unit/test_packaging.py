"""Packaging: the built wheel installs in a fresh virtualenv; the ADK facts we rely on still hold.

The first wheel test installs with ``--no-deps`` so it needs nothing from a
package index: it proves the wheel carries the package data (SQL files,
migrations, dashboard) and that the core runs on the standard library alone, as
``import durable_adk`` promises. The documented blocks' test runs every shell
and Python block of README.md and docs/quickstart.md as written (a short list
names the few it does not run, each with its reason) in one new virtualenv:
the README's install commands (from a clone, and a wheel built from one), its
example, the quickstart's script on SQLite and on the test's PostgreSQL, its
schema commands; the new virtualenv reuses the suite's installed
dependencies, and its build step needs the package index (setuptools). The facts
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
import sysconfig
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
        env=_clean_env(),
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

    # A virtualenv of the standard library alone (not even pip: this pip
    # installs into it), so the core is shown to need nothing else.
    venv = tmp_path / "venv"
    made = run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=300)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    installed = run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
         str(wheel)],
        timeout=300,
        env=_clean_env(),
    )  # fmt: skip
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


# ------------------------------------------------ the documented code blocks

DOCUMENTED = ("README.md", "docs/quickstart.md")
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.M | re.S)
PG_PLACEHOLDER = "postgresql://user:password@db-host:5432/agents"

# The shell and Python blocks of DOCUMENTED this test does not run, each with
# its reason (keyed by the block's file and first line). Every other such
# block is run, as written, by test_the_documented_blocks_run_as_written; a
# block in neither is a failure, and so is a reason whose block is gone.
NOT_RUN: dict[tuple[str, str], str] = {
    ("README.md", "make demo"): (
        "`make demo` and `make test` first install the clone's .venv with the dev extras "
        "(pytest, playwright, ...) from the package index, and `make test` is this suite: "
        "CI runs `make test` on a fresh clone (.ci/run), which runs that install; the demo's "
        "parts are tested one by one (tests/adk/test_end_to_end.py, "
        "tests/crash/test_lifecycle.py, tests/crash/test_invoicing.py)"
    ),
    ("docs/quickstart.md", "make install"): (
        "installs the dev extras from the package index into the clone's .venv, as CI's "
        "`make test` does first (.ci/run); here the virtualenv the README's install made "
        "stands in for .venv (a link), so the blocks after it run as written"
    ),
}


def fenced_blocks(name: str) -> list[tuple[str, str]]:
    """Every fenced block of a documentation file, in order: (language, text)."""
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer((ROOT / name).read_text())]


def _output_after(blocks: list[tuple[str, str]], index: int) -> list[str]:
    """The ``text`` block right after block ``index``: the output the docs show for it."""
    language, text = blocks[index + 1]
    assert language == "text", f"block {index} has no output block after it"
    return text.splitlines()


def _matches(shown: list[str], printed: str) -> bool:
    """Whether ``printed`` is the output ``shown``, line for line; ``adk-…`` in the docs
    stands for a generated call id."""
    lines = printed.splitlines()
    patterns = [re.escape(line).replace(re.escape("adk-…"), "adk-[0-9a-f-]+") for line in shown]
    return len(lines) == len(patterns) and all(
        re.fullmatch(p, line) for p, line in zip(patterns, lines, strict=True)
    )


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


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what points into the suite's own virtualenv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PIP_REQUIRE_VIRTUALENV")
    }
    env.update(extra)
    return env


def _bash(script: str, *, cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    """Runs a documented block with bash (stopping at its first failing command)."""
    ran = run(["bash", "-c", "set -euo pipefail\n" + script], cwd=cwd, env=env, timeout=timeout)
    assert ran.returncode == 0, f"{script}\n---\n{ran.stdout[-4000:]}{ran.stderr[-4000:]}"
    return ran.stdout


@pytest.mark.slow
@pytest.mark.timeout(960)  # its own bounds (600 s a block) first: they report the output
def test_the_documented_blocks_run_as_written(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Every shell and Python block of the README and the quickstart, as written, in one
    new virtualenv: the README's install (the wheel, then the clone, over it), its
    example, the quickstart's script on SQLite and on PostgreSQL, its schema commands.

    The new virtualenv sees the suite's installed dependencies (a ``.pth`` file
    naming this interpreter's site-packages) instead of downloading them
    again: pip still resolves the README's requirements, extras included,
    against them, and installs durable-adk itself (from the wheel, then from
    the clone) into the new virtualenv, where its script and imports are
    checked to come from. That the dependencies install from the package
    index is what `make install` proves on every CI run (.ci/run).
    """
    readme, quickstart = (fenced_blocks(name) for name in DOCUMENTED)
    runnable = {
        (name, text.splitlines()[0].split(" #", 1)[0].strip()): text
        for name, blocks in zip(DOCUMENTED, (readme, quickstart), strict=True)
        for language, text in blocks
        if language in ("sh", "python")
    }
    assert set(NOT_RUN) <= set(runnable), "a reason in NOT_RUN names a block that is gone"
    done: set[tuple[str, str]] = set()

    # The README's install section: the clone's commands, then the wheel's.
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    wheel = f"dist/durable_adk-{version}-py3-none-any.whl"
    from_clone_key = ("README.md", "python3 -m venv venv")
    from_wheel_key = ("README.md", "python -m pip wheel --no-deps -w dist ./durable-adk")
    from_clone, from_wheel = runnable[from_clone_key].splitlines(), runnable[from_wheel_key]
    assert f"python -m pip install '{wheel}[postgresql]'" in from_wheel  # this version's
    done |= {from_clone_key, from_wheel_key}
    project = tmp_path / "project"
    clone = project / "durable-adk"
    copy_checkout(clone)
    # The suite's site-packages, seen by the new virtualenv after its own.
    seen = f"venv/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages/suite.pth"
    check = (
        "import asyncpg, durable_adk, durable_adk.store, durable_adk.adk;"
        " print('imported', durable_adk.__version__, durable_adk.__file__)"
    )
    script = "\n".join(
        [
            # The interpreter running this suite, not whatever `python3` is on
            # PATH: the README asks for Python 3.11 or newer, as this one is.
            from_clone[0].replace("python3", shlex.quote(sys.executable), 1),
            f"echo {shlex.quote(sysconfig.get_paths()['purelib'])} > {seen}",
            from_clone[1],
            # The wheel first, so that it is what goes into the new virtualenv;
            # then the clone's install, over it.
            from_wheel,
            f"python -c {shlex.quote(check)}",
            "echo WHEEL-OK",
            *from_clone[2:],
            f"python -c {shlex.quote(check)}",
        ]
    )
    # PIP_NO_COMPILE skips compiling .pyc files at install (Python compiles
    # what it imports when it imports it). A stalled download (the build's
    # setuptools) fails within a minute instead of holding the suite.
    env = _clean_env(
        PIP_PROGRESS_BAR="off", PIP_NO_COMPILE="1", PIP_DEFAULT_TIMEOUT="60", PIP_RETRIES="2"
    )
    out = _bash(script, cwd=project, env=env)
    assert (project / wheel).is_file()
    venv = project / "venv"
    venv_lib = str(venv / "lib")
    wheel_part, clone_part = out.split("WHEEL-OK", 1)
    for part in (wheel_part, clone_part):
        (line,) = [x for x in part.splitlines() if x.startswith("imported ")]
        assert line.startswith(f"imported {version} {venv_lib}"), line
    assert clone_part.count("Usage: durable-adk") == 1  # `durable-adk --help`, the new script
    for command in ("serve", "recover", "db", "runs", "schedules"):  # its commands are listed
        assert re.search(rf"\b{command}\b", clone_part), command

    # The README's example, with the Python of the environment it was installed in.
    (index,) = [i for i, (lang, _) in enumerate(readme) if lang == "python"]
    (project / "example.py").write_text(readme[index][1])
    printed = _bash("venv/bin/python example.py", cwd=project, env=_clean_env())
    assert _matches(_output_after(readme, index), printed), printed
    done.add(("README.md", readme[index][1].splitlines()[0].split(" #", 1)[0].strip()))

    # The quickstart, from the repository root, where `make install` makes .venv.
    (clone / ".venv").symlink_to(venv)
    (index,) = [i for i, (lang, _) in enumerate(quickstart) if lang == "python"]
    (clone / "quickstart.py").write_text(quickstart[index][1])
    shown = _output_after(quickstart, index)
    told = "Save this as `quickstart.py` and run it with `.venv/bin/python quickstart.py`."
    assert told in (ROOT / "docs" / "quickstart.md").read_text()
    printed = _bash(".venv/bin/python quickstart.py", cwd=clone, env=_clean_env())
    assert _matches(shown, printed), printed
    done.add(("docs/quickstart.md", quickstart[index][1].splitlines()[0].split(" #", 1)[0].strip()))

    # Its PostgreSQL blocks, on a database of the test's own server.
    cluster = request.getfixturevalue("pg_cluster")
    url = cluster.create_database(f"quickstart_{os.getpid()}")
    for key, text in runnable.items():
        if key[0] != "docs/quickstart.md" or PG_PLACEHOLDER not in text:
            continue
        printed = _bash(text.replace(PG_PLACEHOLDER, url), cwd=clone, env=_clean_env())
        if "quickstart.py" in text:
            assert _matches(shown, printed), printed
        else:
            said = " ".join(printed.split())  # wrapped at the terminal's width
            assert "already at schema version" in said and "(current)" in said, printed
        done.add(key)

    left = set(runnable) - done - set(NOT_RUN)
    assert left == set(), f"documented blocks neither run nor given a reason: {sorted(left)}"


def test_the_adk_facts_we_rely_on_still_hold() -> None:
    checked = run(
        [sys.executable, str(ROOT / "docs" / "adk-notes" / "verify_adk_facts.py")],
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("OK ") >= 5
