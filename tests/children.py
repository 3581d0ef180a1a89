"""Child processes for crash tests, started in milliseconds instead of seconds.

A crash test runs the agent in a child process that dies at a crash point
(``os._exit(137)``) and a fresh child that recovers. Started with ``python -m``,
every child pays about two seconds importing ADK before it does anything:
most of a crash suite's time. :func:`run_module` instead asks a *zygote* (a
process started once per test process that has already imported ADK and
durable-adk, and opened nothing else) to fork a child.

Each child is still a real, separate OS process: its own pid and memory, no
database connection, event loop or thread shared with the test or with other
children, killed without cleanup by ``os._exit``. It runs the module as
``__main__`` with the given argv, environment and working directory; its
stdout and stderr are captured like ``subprocess.run(capture_output=True)``.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

PRELOAD = "preload"  # tests/preload.py, beside this file


class _Zygote:
    """The parent side: starts the zygote process and talks to it."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="durable-adk-zygote-")
        self.path = os.path.join(self.dir, "zygote.sock")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, self.path, str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self.proc.stdout.readline() if self.proc.stdout else ""
        if ready.strip() != "READY":
            raise RuntimeError(f"the crash-test zygote did not start (exit {self.proc.poll()})")
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def run(self, request: dict[str, object], timeout: float) -> int:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(self.path)
            conn.sendall(json.dumps(request).encode() + b"\n")
            try:
                answer = conn.makefile().readline()
            except TimeoutError:
                pid = request.get("pid_file")
                if isinstance(pid, str) and os.path.exists(pid):
                    os.kill(int(Path(pid).read_text()), 9)
                raise subprocess.TimeoutExpired(str(request["module"]), timeout) from None
        return int(json.loads(answer)["code"])


_zygote: _Zygote | None = None
_lock = threading.Lock()


def run_module(
    module: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = 180.0,
) -> subprocess.CompletedProcess[str]:
    """Runs ``python -m module args...`` in a fresh child process and waits for it.

    Args:
        module: The module to run as ``__main__``.
        args: Its command-line arguments.
        env: Its whole environment (default: this process's).
        cwd: Its working directory (default: this process's); also put first
            on ``sys.path``, as ``python -m`` does.
        timeout: Seconds before the child is killed and ``TimeoutExpired`` raised.

    Returns:
        The exit code (137 after a crash point) and the captured output.
    """
    global _zygote
    with _lock:
        if _zygote is None or _zygote.proc.poll() is not None:
            _zygote = _Zygote()
        zygote = _zygote
    with tempfile.TemporaryDirectory(prefix="durable-adk-child-") as scratch:
        out, err, pid = (os.path.join(scratch, n) for n in ("out", "err", "pid"))
        code = zygote.run(
            {
                "module": module,
                "argv": list(args),
                "env": dict(env if env is not None else os.environ),
                "cwd": str(Path(cwd) if cwd is not None else Path.cwd()),
                "out": out,
                "err": err,
                "pid_file": pid,
            },
            timeout,
        )
        stdout = Path(out).read_text() if os.path.exists(out) else ""
        stderr = Path(err).read_text() if os.path.exists(err) else ""
    return subprocess.CompletedProcess([module, *args], code, stdout, stderr)


# ------------------------------------------------------------------ the zygote


def _child(request: dict[str, object]) -> None:
    """In the forked child: become ``python -m module argv`` and exit with its code."""
    cwd = str(request["cwd"])
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in dict(request["env"]).items()})  # type: ignore[call-overload]
    sys.path.insert(0, cwd)
    Path(str(request["pid_file"])).write_text(str(os.getpid()))
    for fd, target in ((1, request["out"]), (2, request["err"])):
        handle = os.open(str(target), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(handle, fd)
        os.close(handle)
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - lives as long as the child
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    module = str(request["module"])
    sys.argv = [module, *[str(a) for a in request["argv"]]]  # type: ignore[attr-defined]
    code = 0
    try:
        import runpy

        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # the program itself crashed: report it as Python would
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _serve(path: str, parent: int) -> None:
    """The zygote's loop: one fork per request, one thread per child to report its exit."""
    import importlib

    importlib.import_module(PRELOAD)
    # Started as a script, this process has tests/ first on sys.path (where
    # PRELOAD is); its children get the path ``python -m`` would give them.
    sys.path[0] = os.getcwd()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    print("READY", flush=True)

    def watch_parent() -> None:
        while True:
            threading.Event().wait(1.0)
            try:
                os.kill(parent, 0)
            except OSError:
                os._exit(0)

    threading.Thread(target=watch_parent, daemon=True).start()
    while True:
        conn, _ = server.accept()
        request = json.loads(conn.makefile().readline())
        pid = os.fork()
        if pid == 0:
            server.close()
            conn.close()
            _child(request)

        def report(conn: socket.socket = conn, pid: int = pid) -> None:
            _, status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code  # killed by a signal: shell style
            try:
                conn.sendall(json.dumps({"code": code}).encode() + b"\n")
            finally:
                conn.close()

        threading.Thread(target=report, daemon=True).start()


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
