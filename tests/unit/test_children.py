"""The tests' fork server (``tests/children.py``): a forked child is what an exec'd one is.

Each case runs the same command both ways, forked by :func:`children.spawn` and
exec'd by ``subprocess``, and compares what the child saw and how it ended.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import children
from children import ZygoteChild, run_child, spawn

PROBE = """\
import json, os, sys, threading, time, atexit
mode = sys.argv[1]
print(json.dumps({
    "argv": sys.argv, "orig_argv": sys.orig_argv[1:], "name": __name__,
    "path": [p for p in sys.path if "site-packages" not in p and "python3" not in p],
    "cwd": os.getcwd(), "env": dict(os.environ), "warnoptions": sys.warnoptions,
    "stdio": [(s.encoding, s.errors, s.line_buffering) for s in (sys.stdout, sys.stderr)],
}), flush=True)
atexit.register(lambda: print("atexit", flush=True))
threading.Thread(target=lambda: (time.sleep(0.2), print("thread", flush=True))).start()
if mode == "raise":
    raise ValueError("boom")
if mode == "exit":
    sys.exit(3)
if mode == "crash":
    os._exit(137)
if mode == "interrupt":
    raise KeyboardInterrupt
"""


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "probe_mod.py").write_text(PROBE)
    (tmp_path / "probe_script.py").write_text(PROBE)
    (tmp_path / "bin").mkdir()  # a console script, as a virtualenv's bin/adk
    (tmp_path / "bin" / "probe-cli").write_text(f"#!{sys.executable}\n{PROBE}")
    return tmp_path


def both(args: list[str], **kwargs: object) -> tuple[subprocess.CompletedProcess[str], ...]:
    forked = run_child(args, capture_output=True, text=True, timeout=60, **kwargs)  # type: ignore[arg-type]
    execd = subprocess.run(args, capture_output=True, text=True, timeout=60, **kwargs)  # type: ignore[call-overload]
    return forked, execd


def seen(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return dict(json.loads(line))


@pytest.mark.parametrize("shape", ["module", "script", "console_script", "command"])
@pytest.mark.parametrize("mode", ["ok", "raise", "exit", "crash", "interrupt"])
def test_a_forked_child_sees_and_ends_as_an_execd_one(probe: Path, shape: str, mode: str) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(probe / "lib"), os.environ.get("PYTHONPATH", "")]),
        "PYTHONWARNINGS": "ignore::DeprecationWarning",
        "DADK_PROBE": "yes",
    }
    head = {
        "module": ["-m", "probe_mod"],
        "script": [str(probe / "probe_script.py")],
        "console_script": [str(probe / "bin" / "probe-cli")],
        "command": ["-c", PROBE],
    }[shape]
    with spawn([sys.executable, *head, "ok"], env=env, cwd=probe, stdout=subprocess.DEVNULL) as one:
        assert isinstance(one, ZygoteChild)  # forked, not exec'd
        assert one.wait(60) == 0
    forked, execd = both([sys.executable, *head, mode], env=env, cwd=probe)
    assert forked.returncode == execd.returncode, (forked, execd)
    assert seen(forked) == seen(execd)
    assert forked.stdout.splitlines()[1:] == execd.stdout.splitlines()[1:]  # thread, atexit
    assert forked.stderr.splitlines()[-1:] == execd.stderr.splitlines()[-1:]
    assert {"crash": 137, "interrupt": -signal.SIGINT, "raise": 1, "exit": 3}.get(mode, 0) == (
        forked.returncode
    )


def test_spawn_is_a_popen_killed_for_real(probe: Path) -> None:
    code = "import sys, time; print('up', flush=True); sys.stdin.readline(); time.sleep(60)"
    with spawn(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as child:
        assert isinstance(child, ZygoteChild) and isinstance(child, subprocess.Popen)
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        assert child.pid not in (os.getpid(), children._the_zygote().proc.pid)
        assert Path(f"/proc/{child.pid}").exists() and child.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(0.2)
        child.kill()
        assert child.wait(10) == -signal.SIGKILL
    assert child.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child.pid}").exists():  # reaped by the zygote
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child.send_signal(signal.SIGTERM)  # a no-op once it has ended, as for Popen


def test_what_a_fork_cannot_give_is_execd(probe: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = {**os.environ, "PYTHONHASHSEED": "7"}
    if os.environ.get("PYTHONHASHSEED") == "7":
        other["PYTHONHASHSEED"] = "8"
    code = "import sys; print(sys.flags.hash_randomization)"
    execd = [
        spawn([sys.executable, "-c", code], env=other, stdout=subprocess.DEVNULL),
        spawn([sys.executable, "-c", code], stdout=subprocess.DEVNULL, start_new_session=True),
        spawn(["true"]),
    ]
    monkeypatch.setenv(children.SWITCH, "0")
    execd.append(spawn([sys.executable, "-c", code], stdout=subprocess.DEVNULL))
    for process in execd:
        assert type(process) is subprocess.Popen
        assert process.wait(30) == 0
