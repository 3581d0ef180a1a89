"""Child Python processes for the tests, started in milliseconds instead of seconds.

Tests start hundreds of ``python -m durable_adk.cli serve`` workers and crash-test
children. Started by exec, each pays about 2.5 s of CPU importing ADK,
google-genai, FastAPI, uvicorn and the A2A SDK before it does anything: most of
the suite's time. Here a *zygote* (a process started once per test process that
has imported all that, see ``tests/preload.py``, and opened nothing else: no
database, no event loop, no thread) forks each child instead:

- :func:`spawn` is ``subprocess.Popen`` for ``[sys.executable, "-m", module,
  ...]``, ``[sys.executable, "-c", code, ...]`` or ``[sys.executable, script,
  ...]`` (``*.py``, or a console script such as the virtualenv's ``bin/adk``,
  run as ``python bin/adk`` runs it). It returns a ``Popen``: ``pid``,
  ``stdout``/``stderr`` pipes as asked, ``poll``, ``wait`` with
  ``TimeoutExpired``, ``send_signal``, ``kill``, ``terminate``,
  ``communicate``, ``returncode`` negative after a signal, context manager.
  The child's ends of its pipes are handed to the zygote with
  ``SCM_RIGHTS``; the zygote hands back the child's pid and a pidfd
  (signals go through it, so never to a recycled pid) and, when the child
  ends, its wait status.
- :func:`run_child` is ``subprocess.run`` over :func:`spawn`; :func:`run_module`
  runs a module to its end with its output captured (exit code 137 after a
  crash point or a SIGKILL, shell style).

Each child is still a real, separate OS process: its own pid and memory, no
connection, loop or thread shared with the test or with other children,
SIGKILLed or ended by ``os._exit(137)`` for real. It gets exactly the asked
environment (``PYTHONPATH`` entries the zygote lacks go on ``sys.path`` where
Python puts them, ``PYTHONWARNINGS`` and ``PYTHONUNBUFFERED`` are applied),
working directory (first on ``sys.path``, as ``python -m`` puts it), argv and
stdio, and exits as Python does (non-daemon threads joined, ``atexit``
run, exit code 1 after an uncaught exception, killed by SIGINT after an
uncaught ``KeyboardInterrupt``). What a fork cannot give it falls back to a
real exec: a command of another shape, Popen options such as
``start_new_session``, or an environment that differs from the zygote's in a
variable Python or a preloaded library reads only at startup (see
:data:`STARTUP_ONLY`). One difference stays: every child of a zygote has the
zygote's string hash seed.

``DURABLE_ADK_TEST_ZYGOTE=0`` makes every call exec (plain ``subprocess``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from typing import Any

PRELOAD = "preload"  # tests/preload.py, beside this file
SWITCH = "DURABLE_ADK_TEST_ZYGOTE"

STARTUP_ONLY = frozenset(
    {
        "LANG", "LC_ALL", "LC_CTYPE",  # the encodings of stdio and file names
        # read when a preloaded module is imported
        "ADK_TRIGGER_MAX_CONCURRENT", "ADK_TRIGGER_MAX_RETRIES",
        "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED",
    }
)  # fmt: skip
"""Variables read only at startup; besides these, every ``PYTHON*`` one but
:data:`APPLIED` and those Python reads at use time."""

APPLIED = frozenset({"PYTHONPATH", "PYTHONWARNINGS", "PYTHONUNBUFFERED"})
"""Startup variables a forked child gets applied as Python would."""

AT_USE = frozenset({"PYTHONBREAKPOINT", "PYTHONASYNCIODEBUG"})

_POPEN_OPTIONS = frozenset(
    {"stdin", "stdout", "stderr", "env", "cwd", "text", "universal_newlines",
     "encoding", "errors", "bufsize"}
)  # fmt: skip
"""The ``Popen`` options a forked child honours; any other one means exec."""


def enabled() -> bool:
    """Whether children are forked: not switched off, and Linux 5.3's pidfds are there."""
    if not (hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")):
        return False
    return os.environ.get(SWITCH, "1") != "0"


def _startup_variable(name: str) -> bool:
    if name in STARTUP_ONLY:
        return True
    return name.startswith("PYTHON") and name not in APPLIED and name not in AT_USE


def _pythonpath(value: str | None, cwd: str) -> list[str]:
    """The entries of a ``PYTHONPATH``, absolute from ``cwd`` (an empty one is ``cwd``)."""
    if not value:
        return []
    return [os.path.normpath(os.path.join(cwd, p)) for p in value.split(os.pathsep)]


# --------------------------------------------------------------- the test side


_START_ENV = dict(os.environ)
_START_CWD = os.getcwd()


class _Zygote:
    """The parent side: starts the zygote process and talks to it."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="durable-adk-zygote-")
        self.path = os.path.join(self.dir, "zygote.sock")
        # The environment when the tests began, not whatever a test has patched.
        self.env = _START_ENV
        self.cwd = _START_CWD
        # The zygote ends when this process does: its stdin (a pipe whose
        # other end only this process holds) then reads end-of-file.
        self.proc = subprocess.Popen(
            [sys.executable, __file__, self.path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=self.cwd,
        )
        ready = self.proc.stdout.readline() if self.proc.stdout else ""
        if ready.strip() != "READY":
            raise RuntimeError(f"the test zygote did not start (exit {self.proc.poll()})")
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def can_fork(self, env: Mapping[str, str], cwd: str) -> bool:
        """Whether a forked child can have ``env`` as an exec'd one would."""
        for name in set(env) | set(self.env):
            if _startup_variable(name) and env.get(name) != self.env.get(name):
                return False
        # Entries the zygote has and the child must not: modules already loaded.
        ours = _pythonpath(self.env.get("PYTHONPATH"), self.cwd)
        theirs = _pythonpath(env.get("PYTHONPATH"), cwd)
        return all(os.path.normpath(p) in map(os.path.normpath, theirs) for p in ours)


_zygote: _Zygote | None = None
_lock = threading.Lock()


def _the_zygote() -> _Zygote:
    global _zygote
    with _lock:
        if _zygote is None or _zygote.proc.poll() is not None:
            _zygote = _Zygote()
        return _zygote


def _python_script(path: str, cwd: Any) -> bool:
    """Whether ``path`` is a script Python runs as such: ``*.py``, or a console
    script (a file of Python source whose first line is a ``#!`` line, such
    as a virtualenv's ``bin/adk``)."""
    if path.endswith(".py"):
        return True
    try:
        with open(os.path.join(os.fspath(cwd) if cwd is not None else "", path), "rb") as file:
            return file.read(2) == b"#!"
    except OSError:  # not a file: left to an exec to report
        return False


def _forkable(args: Any, kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The zygote's request for ``Popen(args, **kwargs)``, or None if it takes an exec."""
    if not enabled() or isinstance(args, (str, bytes)) or set(kwargs) - _POPEN_OPTIONS:
        return None
    argv = [os.fspath(a) for a in args]
    if len(argv) < 2 or not all(isinstance(a, str) for a in argv):
        return None
    # The same path, not only the same binary: a virtualenv is found from it.
    if os.path.abspath(argv[0]) != os.path.abspath(sys.executable):
        return None
    if argv[1] == "-m" and len(argv) >= 3 and not argv[2].startswith("-"):
        target = {"module": argv[2], "argv": argv[3:]}
    elif argv[1] == "-c" and len(argv) >= 3:
        target = {"command": argv[2], "argv": argv[3:]}
    elif not argv[1].startswith("-") and _python_script(argv[1], kwargs.get("cwd")):
        target = {"script": argv[1], "argv": argv[2:]}
    else:
        return None
    env = kwargs.get("env")
    env = {str(k): str(v) for k, v in (env if env is not None else os.environ).items()}
    cwd = os.fspath(kwargs["cwd"]) if kwargs.get("cwd") is not None else os.getcwd()
    cwd = os.path.abspath(cwd)
    if not _the_zygote().can_fork(env, cwd):
        return None
    return {**target, "env": env, "cwd": cwd, "orig_argv": argv}


def _fd_or_devnull(fd: int, opened: list[int]) -> int:
    try:
        os.fstat(fd)
    except OSError:  # closed in this process: the child gets /dev/null
        fd = os.open(os.devnull, os.O_RDWR)
        opened.append(fd)
    return fd


class ZygoteChild(subprocess.Popen):  # type: ignore[type-arg]
    """A ``Popen`` whose process a zygote forked instead of an exec."""

    def __init__(self, args: Sequence[str], request: dict[str, Any], **kwargs: Any) -> None:
        self._request = request
        self._conn: socket.socket | None = None
        self._unread = b""
        self._pidfd = -1
        super().__init__(args, **kwargs)

    def _execute_child(self, args: Any, executable: Any, preexec_fn: Any, close_fds: Any,
                       pass_fds: Any, cwd: Any, env: Any, startupinfo: Any, creationflags: Any,
                       shell: Any, p2cread: int, p2cwrite: int, c2pread: int, c2pwrite: int,
                       errread: int, errwrite: int, *rest: Any) -> None:  # fmt: skip
        request = self._request
        if not os.path.isdir(request["cwd"]):
            raise FileNotFoundError(2, os.strerror(2), request["cwd"])
        opened: list[int] = []
        try:
            fds = [
                _fd_or_devnull(p2cread if p2cread != -1 else 0, opened),
                _fd_or_devnull(c2pwrite if c2pwrite != -1 else 1, opened),
                _fd_or_devnull(errwrite if errwrite != -1 else 2, opened),
            ]
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.connect(_the_zygote().path)
                socket.send_fds(conn, [b"F"], fds)
                conn.sendall(json.dumps(request).encode() + b"\n")
                answer, got, _, _ = socket.recv_fds(conn, 4096, 1)
                while not answer.endswith(b"\n"):
                    more = conn.recv(4096)
                    if not more:
                        raise RuntimeError("the test zygote did not start the child")
                    answer += more
            except BaseException:
                conn.close()
                raise
            self._conn = conn
            self._pidfd = got[0]
            line, _, self._unread = answer.partition(b"\n")  # the status may follow at once
            self.pid = int(json.loads(line)["pid"])
            self._child_created = True
        finally:
            for fd in opened:
                os.close(fd)
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _read_status(self, timeout: float | None) -> bool:
        """Reads the exit status if the zygote sends it within ``timeout``; whether it did."""
        conn = self._conn
        if conn is None:
            return True
        data = self._unread
        if not data:
            ready, _, _ = select.select([conn], [], [], timeout)
            if not ready:
                return False
        while not data.endswith(b"\n"):
            more = conn.recv(4096)
            if not more:
                raise RuntimeError(f"the test zygote ended before child {self.pid}")
            data += more
        self.returncode = os.waitstatus_to_exitcode(int(json.loads(data)["status"]))
        conn.close()
        self._conn = None
        return True

    def _internal_poll(self, _deadstate: int | None = None, *args: Any, **kwargs: Any) -> Any:
        if self.returncode is None:
            if not self._waitpid_lock.acquire(False):
                return None  # another thread is waiting
            try:
                if self.returncode is None:
                    self._read_status(0)
            except (RuntimeError, OSError):
                if _deadstate is None:
                    raise
                self.returncode = _deadstate
            finally:
                self._waitpid_lock.release()
        return self.returncode

    def _wait(self, timeout: float | None) -> Any:
        with self._waitpid_lock:
            if self.returncode is None and not self._read_status(timeout):
                raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self.poll()
        if self.returncode is not None:
            return
        # The pidfd stays open as long as this object: another thread's wait
        # cannot close it under this call.
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, sig)

    def __del__(self, *args: Any, **kwargs: Any) -> None:
        super().__del__()
        if self.returncode is not None and self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1


def spawn(args: Sequence[str | os.PathLike[str]], **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(args, **kwargs)``, forked from the zygote when it can be.

    ``args`` of the form ``[sys.executable, "-m", module, ...]``,
    ``[sys.executable, "-c", code, ...]`` or ``[sys.executable, "script.py",
    ...]`` (or a console script, ``[sys.executable, "venv/bin/adk", ...]``)
    with only the options stdin, stdout, stderr, env, cwd, text,
    universal_newlines, encoding, errors and bufsize are forked; anything
    else is exec'd.
    """
    request = _forkable(args, kwargs)
    if request is None:
        return subprocess.Popen(args, **kwargs)
    return ZygoteChild(request["orig_argv"], request, **kwargs)


def spawn_parented(
    args: Sequence[str | os.PathLike[str]], *, parent_option: str, **kwargs: Any
) -> subprocess.Popen[Any]:
    """:func:`spawn` for a child that takes its parent's pid as ``parent_option PID``
    and stops once that is no longer its parent (``FakeService``'s ``--parent-pid``).

    Forked, the child's parent is the zygote, which lives exactly as long as
    this process: the option is made to name it. Exec'd, it is left as given.
    """
    argv = [os.fspath(a) for a in args]
    if _forkable(argv, kwargs) is not None:
        at = argv.index(parent_option) + 1
        argv[at] = str(_the_zygote().proc.pid)
    return spawn(argv, **kwargs)


def run_child(
    args: Sequence[str | os.PathLike[str]],
    *,
    input: Any = None,
    capture_output: bool = False,
    timeout: float | None = None,
    check: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` over :func:`spawn`."""
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    with spawn(args, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        except BaseException:
            process.kill()
            raise
        code = process.poll()
        assert code is not None
    if check and code:
        raise subprocess.CalledProcessError(code, process.args, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(process.args, code, stdout, stderr)


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
        The exit code (137 after a crash point or a SIGKILL: shell style) and
        the captured output.
    """
    done = run_child(
        [sys.executable, "-m", module, *args],
        env=dict(env) if env is not None else None,
        cwd=cwd,
        timeout=timeout,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    code = 128 - done.returncode if done.returncode < 0 else done.returncode
    return subprocess.CompletedProcess([module, *args], code, done.stdout, done.stderr)


# ------------------------------------------------------------------ the zygote


class _Loop:
    """The zygote: one thread; forks a child per request and reports its end.

    Everything it holds (its socket, its connections, the children's pidfds)
    is closed in each child before the child runs anything.
    """

    def __init__(self, path: str) -> None:
        self.selector = selectors.DefaultSelector()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(64)
        self.selector.register(self.server, selectors.EVENT_READ, "accept")
        self.selector.register(sys.stdin, selectors.EVENT_READ, "parent")
        self.children: dict[int, tuple[int, socket.socket]] = {}  # pidfd: pid, connection

    def run(self) -> None:
        while True:
            for key, _ in self.selector.select():
                if key.data == "parent":  # the test process is gone (or closed our stdin)
                    if not os.read(sys.stdin.fileno(), 1):
                        os._exit(0)
                elif key.data == "accept":
                    conn, _ = self.server.accept()
                    self.start(conn)
                else:
                    pidfd = key.fd
                    pid, conn = self.children.pop(pidfd)
                    self.selector.unregister(pidfd)
                    _, status = os.waitpid(pid, 0)
                    os.close(pidfd)
                    with contextlib.suppress(OSError):
                        conn.sendall(json.dumps({"status": status}).encode() + b"\n")
                    conn.close()

    def start(self, conn: socket.socket) -> None:
        try:
            _, fds, _, _ = socket.recv_fds(conn, 1, 3)
            reader = conn.makefile("rb")
            request = json.loads(reader.readline())
            reader.close()
        except (OSError, ValueError):
            conn.close()
            return
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                self.close_all(conn)
                _child(request, fds)
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                os._exit(70)
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        socket.send_fds(conn, [json.dumps({"pid": pid}).encode() + b"\n"], [pidfd])
        self.children[pidfd] = (pid, conn)
        self.selector.register(pidfd, selectors.EVENT_READ, "child")

    def close_all(self, conn: socket.socket) -> None:
        """In a new child: closes everything of the zygote's."""
        self.selector.close()
        self.server.close()
        conn.close()
        for pidfd, (_, other) in self.children.items():
            os.close(pidfd)
            other.close()
        self.children.clear()


def _stdio(fd: int, like: Any, *, write: bool, unbuffered: bool, line: bool = False) -> Any:
    """A ``sys.stdin``/``stdout``/``stderr`` on ``fd`` as Python's startup makes it."""
    import io

    raw = io.FileIO(fd, "wb" if write else "rb", closefd=False)
    buffered: Any = raw
    if not (write and unbuffered):
        buffered = io.BufferedWriter(raw) if write else io.BufferedReader(raw)
    stream = io.TextIOWrapper(
        buffered,
        encoding=like.encoding,
        errors=like.errors,
        line_buffering=(line or raw.isatty()) and not (write and unbuffered),
        write_through=write and unbuffered,
    )
    stream.mode = "w" if write else "r"
    return stream


def _child(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become the asked program and exit as Python would."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    cwd = str(request["cwd"])
    os.chdir(cwd)
    env = dict(request["env"])
    os.environ.clear()
    os.environ.update(env)
    raw = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdin = sys.__stdin__ = _stdio(0, sys.stdin, write=False, unbuffered=False)
    sys.stdout = sys.__stdout__ = _stdio(1, sys.stdout, write=True, unbuffered=raw)
    sys.stderr = sys.__stderr__ = _stdio(2, sys.stderr, write=True, unbuffered=raw, line=True)
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    if "script" in request:
        main_dir = os.path.dirname(os.path.realpath(str(request["script"])))
    else:
        main_dir = cwd
    path: list[str] = []
    for entry in [*_pythonpath(env.get("PYTHONPATH"), cwd), *_BASE_PATH]:
        if os.path.normpath(entry) not in map(os.path.normpath, path):  # as site does
            path.append(entry)
    # ``python -c`` puts "" (the working directory, wherever it is later) first
    sys.path[:] = ["" if "command" in request else main_dir, *path]
    sys.orig_argv = list(request["orig_argv"])
    _apply_warnings(env.get("PYTHONWARNINGS"))

    import builtins
    import importlib.machinery
    import runpy
    import types

    main = types.ModuleType("__main__")  # the program's own, as in a new interpreter
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    code = 0
    try:
        if "script" in request:
            sys.argv = [str(request["script"]), *request["argv"]]
            runpy.run_path(str(request["script"]), run_name="__main__")
        elif "command" in request:
            sys.argv = ["-c", *request["argv"]]
            main.__dict__["__loader__"] = importlib.machinery.BuiltinImporter
            exec(compile(str(request["command"]), "<string>", "exec"), main.__dict__)
        else:  # what ``python -m`` runs
            sys.argv = [str(request["module"]), *request["argv"]]
            runpy._run_module_as_main(str(request["module"]))  # type: ignore[attr-defined]
    except SystemExit as exc:
        code = _exit_code(exc)
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())  # type: ignore[arg-type]
        _finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        sys.excepthook(*sys.exc_info())  # type: ignore[arg-type]
        code = 1
    os._exit(_finish(code))


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _finish(code: int = 0) -> int:
    """What Python does at exit: join non-daemon threads, run ``atexit``, flush stdio."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except SystemExit as exc:
        code = _exit_code(exc)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            code = 120 if code == 0 else code
    return code


_BASE_PATH: list[str] = []
"""The zygote's ``sys.path`` without its first entry and its ``PYTHONPATH``."""
_BASE_FILTERS: list[Any] = []
"""The warnings filters Python starts with when ``PYTHONWARNINGS`` is not set."""
_IMPORT_FILTERS: list[Any] = []
"""The filters the preloaded modules added."""


def _apply_warnings(value: str | None) -> None:
    import warnings

    options = [o for o in (value or "").split(",") if o]
    sys.warnoptions[:] = options
    warnings.filters[:] = list(_BASE_FILTERS)
    warnings._processoptions(options)  # type: ignore[attr-defined]
    warnings.filters[:0] = _IMPORT_FILTERS
    warnings._filters_mutated()  # type: ignore[attr-defined]


def _serve(path: str) -> None:
    import gc
    import importlib
    import warnings

    started = list(warnings.filters)
    _BASE_FILTERS[:] = started[len(sys.warnoptions) :]
    importlib.import_module(PRELOAD)
    _IMPORT_FILTERS[:] = warnings.filters[: len(warnings.filters) - len(started)]
    ours = {os.path.normpath(p) for p in _pythonpath(os.environ.get("PYTHONPATH"), os.getcwd())}
    _BASE_PATH[:] = [p for p in sys.path[1:] if os.path.normpath(p) not in ours]
    if threading.active_count() != 1 or len(os.listdir("/proc/self/task")) != 1:
        raise RuntimeError("the zygote must hold no thread but its main one before it forks")
    loop = _Loop(path)
    gc.freeze()  # the children do not copy the preloaded objects to collect them
    print("READY", flush=True)
    loop.run()


if __name__ == "__main__":
    _serve(sys.argv[1])
