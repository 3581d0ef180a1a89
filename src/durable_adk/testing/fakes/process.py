"""Runs a fake service in a child process, for a test or a demo."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any, ClassVar, Final, Self

from durable_adk.testing.fakes.clients import (
    ResourceClient,
    ServiceError,
    as_object,
    read_requests,
    request_json,
)
from durable_adk.testing.fakes.protocol import (
    HOST,
    READY_PREFIX,
    Caller,
    FailMode,
    JsonObject,
    RequestRecord,
)

__all__ = ["SERVICE_MODULE", "FakeService", "ServiceStartError"]

SERVICE_MODULE: Final = "durable_adk.testing.services"
"""What the child runs with ``python -m``: the public facade, whose ``main`` serves."""


class ServiceStartError(RuntimeError):
    """The service process died or did not report READY in time."""


class FakeService:
    """Runs one fake service in a child process, for a test or a demo.

    ``python -m durable_adk.testing.services`` is started with
    ``sys.executable``; its stderr is appended to ``log_path`` (by default the
    database path plus ``.log``). The child stops by itself if this process
    goes away. The readers (:meth:`count`, :meth:`items`, :meth:`by_key`,
    :meth:`get`) go over HTTP, like any other client; so do :meth:`requests`
    and :meth:`acts`, which read the service's request log (every request it
    received, deduplicated or not), and are themselves not logged.

    Args:
        service: A name in :data:`SERVICES`, e.g. ``billing``.
        db_path: The service's SQLite file; reuse it to keep the data.
        port: The port; 0 picks a free one (kept by :meth:`restart`).
        lookup: False starts it with ``--no-lookup``.
        fail_times: How many create requests fail with 503.
        fail_mode: ``before`` or ``after`` the write.
        fail_actions: How many action requests fail with 503 (nothing applied).
        ready_timeout: Seconds to wait for ``READY``.
        log_path: Where the child's stderr goes.
        quiet: Whether to leave requests out of the log.

    Example:
        >>> with FakeService("billing", tmp_path / "billing.db") as billing:  # doctest: +SKIP
        ...     BillingClient(billing.url).create_invoice("A-1", "acme", 10, "key-1")
        ...     assert billing.count("invoices") == 1
        ...     assert billing.acts("invoices", "create") == 1
    """

    launch: ClassVar[Callable[..., subprocess.Popen[Any]]] = subprocess.Popen
    """Starts the child process: called as ``subprocess.Popen`` is, with
    :meth:`command` and the pipes. A test suite may start it another way (the
    project's own forks it from its fork server, ``tests/children.py``)."""

    def __init__(
        self,
        service: str,
        db_path: str | os.PathLike[str],
        *,
        port: int = 0,
        lookup: bool = True,
        fail_times: int = 0,
        fail_mode: FailMode = "before",
        fail_actions: int = 0,
        ready_timeout: float = 30.0,
        log_path: str | os.PathLike[str] | None = None,
        quiet: bool = False,
    ) -> None:
        self.service = service
        self.db_path = Path(db_path)
        self.log_path = Path(log_path) if log_path is not None else Path(f"{self.db_path}.log")
        self.lookup = lookup
        self.fail_times = fail_times
        self.fail_mode: FailMode = fail_mode
        self.fail_actions = fail_actions
        self.ready_timeout = ready_timeout
        self.quiet = quiet
        self._requested_port = port
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # -- lifecycle

    def command(self, port: int | None = None) -> list[str]:
        """The command line that starts the service."""
        cmd = [sys.executable, "-m", SERVICE_MODULE, self.service]
        cmd += [
            "--db",
            str(self.db_path),
            "--port",
            str(self._requested_port if port is None else port),
        ]
        cmd += ["--parent-pid", str(os.getpid())]
        if not self.lookup:
            cmd.append("--no-lookup")
        if self.fail_times:
            cmd += ["--fail-times", str(self.fail_times), "--fail-mode", self.fail_mode]
        if self.fail_actions:
            cmd += ["--fail-actions", str(self.fail_actions)]
        if self.quiet:
            cmd.append("--quiet")
        return cmd

    def start(self, *, port: int | None = None) -> Self:
        """Starts the process and waits until it accepts connections.

        Args:
            port: Overrides the port given to the constructor for this start.

        Raises:
            RuntimeError: It is already running.
            ServiceStartError: It died or did not report READY in time; the
                message carries its stderr.
        """
        if self.running:
            raise RuntimeError(f"{self.service} is already running (pid {self.pid})")
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            proc = type(self).launch(
                self.command(port),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        self._proc = proc
        self._port = self._wait_ready(proc)
        return self

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> int:
        assert proc.stdout is not None
        lines: queue.Queue[bytes] = queue.Queue()

        def pump(stream: IO[bytes]) -> None:  # also keeps the pipe drained afterwards
            with stream:
                for line in stream:
                    lines.put(line)
            lines.put(b"")

        threading.Thread(target=pump, args=(proc.stdout,), daemon=True).start()
        deadline = time.monotonic() + self.ready_timeout
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                proc.kill()
                proc.wait()
                self._proc = None
                raise ServiceStartError(
                    f"{self.service} did not report READY within {self.ready_timeout} s;"
                    f" stderr:\n{self.stderr_tail()}"
                ) from None
            text = line.decode("utf-8", errors="replace").strip()
            if not line:
                code = proc.wait()
                self._proc = None
                raise ServiceStartError(
                    f"{self.service} exited with code {code} before it was ready;"
                    f" stderr:\n{self.stderr_tail()}"
                )
            if text.startswith(READY_PREFIX):
                return int(text.removeprefix(READY_PREFIX))

    def stop(self, timeout: float = 10.0) -> int | None:
        """Stops the process with SIGTERM, or SIGKILL after ``timeout`` seconds.

        Returns:
            Its exit code (0 after a clean stop), or None if it was not started.
        """
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._proc = None
        return proc.returncode

    def kill(self) -> int | None:
        """Kills the process with SIGKILL (a crash of the service); returns its exit code."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        self._proc = None
        return proc.returncode

    def restart(self, *, hard: bool = False) -> Self:
        """Stops (or with ``hard`` kills) the process and starts it again on the same port."""
        port = self._port
        if hard:
            self.kill()
        else:
            self.stop()
        return self.start(port=port)

    def __enter__(self) -> Self:
        if not self.running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- state

    @property
    def running(self) -> bool:
        """Whether the process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The process id while it runs."""
        return None if self._proc is None else self._proc.pid

    @property
    def port(self) -> int:
        """The port it listens on (kept after a stop)."""
        if self._port is None:
            raise RuntimeError(f"{self.service} has not been started")
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{HOST}:{self.port}"

    def stderr_tail(self, limit: int = 8000) -> str:
        """The end of the service's stderr log."""
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return "(no log)"
        return data[-limit:].decode("utf-8", errors="replace")

    # -- readers, over HTTP

    def client(
        self,
        collection: str,
        *,
        timeout: float = 5.0,
        caller: Caller | None = None,
        fenced: bool = True,
    ) -> ResourceClient:
        """A client for one collection of this service (``caller``, ``fenced``: see
        :class:`ResourceClient`)."""
        return ResourceClient(self.url, collection, timeout=timeout, caller=caller, fenced=fenced)

    def _reader(self, collection: str) -> ResourceClient:
        return self.client(collection, fenced=False)  # a test's reads are nobody's run

    def requests(
        self,
        collection: str | None = None,
        action: str | None = None,
        key: str | None = None,
        *,
        caller: Mapping[str, str] | None = None,
        mutating: bool | None = None,
        outcome: str | None = None,
        since: int = 0,
    ) -> list[RequestRecord]:
        """The requests the service received, oldest first, reads included.

        Every request is logged when it arrives, before it is handled, so the
        list holds refused, failed, replayed and unanswered requests too
        (see :class:`RequestRecord`). The log survives restarts.

        Args:
            collection: Only requests to this collection.
            action: Only this action: ``create``, an action name (``void``),
                or a read (``lookup``, ``get``, ``list``, ``count``, ``info``).
            key: Only requests with this idempotency key.
            caller: Only requests whose ``X-Caller-*`` headers have these values.
            mutating: Only acts (True) or only reads (False).
            outcome: Only requests that came to this (``fenced``, ``created``, ...).
            since: Only records with a greater ``seq``.
        """
        return read_requests(
            self.url,
            since=since,
            collection=collection,
            action=action,
            key=key,
            caller=caller,
            mutating=mutating,
            outcome=outcome,
        )

    def acts(
        self,
        collection: str | None = None,
        action: str | None = None,
        key: str | None = None,
        *,
        caller: Mapping[str, str] | None = None,
        since: int = 0,
    ) -> int:
        """How many mutating requests (creates and actions) the service received.

        Deduplicated or not, refused as bad input, failed or unanswered: each
        request to cause an effect counts once. ``billing.count("invoices") ==
        1`` with ``billing.acts("invoices", "create") == 2`` means one invoice
        and a second attempt that only its idempotency key kept from doubling.
        Not counted: a request the service refused because of its fence (outcome
        ``fenced``, checked before anything else was done; count those with
        ``requests(outcome="fenced")``). The filters are those of :meth:`requests`.
        """
        found = self.requests(collection, action, key, caller=caller, mutating=True, since=since)
        return sum(1 for r in found if r.outcome != "fenced")

    def count(self, collection: str) -> int:
        """How many items the collection holds."""
        return self._reader(collection).count()

    def items(self, collection: str) -> list[JsonObject]:
        """Every item of the collection, oldest first."""
        return self._reader(collection).items()

    def by_key(self, collection: str, key: str) -> JsonObject | None:
        """The item created under ``key``, or None.

        Raises:
            LookupUnavailable: The service runs with ``--no-lookup``.
        """
        return self._reader(collection).find(key)

    def get(self, collection: str, item_id: str) -> JsonObject | None:
        """The item with this generated id, or None."""
        return self._reader(collection).get(item_id)

    def info(self) -> JsonObject:
        """``GET /``: the service's name, collections, pid and lookup flag."""
        status, body, _ = request_json("GET", f"{self.url}/")
        if status != 200:
            raise ServiceError(status, body, request=f"GET {self.url}/")
        return as_object(body, f"GET {self.url}/")
