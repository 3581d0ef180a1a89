"""A fake report builder: a real HTTP server in its own process that calls a webhook twice.

It stands in for the batch system of seed 003's worked example. A build is
submitted with ``POST /builds`` (``{"job_id", "quarter", "region"}``); after
``--delay`` seconds the builder posts the signed completion to ``--webhook``,
then posts it again ``--repeat-after`` seconds later, as a retrying sender
does (the duplicate must be harmless). ``POST /builds/<job_id>/cancel`` stops a
build whose webhook has not gone out. Every submission is counted, repeats
included, so a test can assert that a job was never submitted twice; and every
request is logged when it arrives, before it is handled, like the fake
services' (``GET /_requests``, :meth:`ReportBuilderClient.requests` and
:meth:`ReportBuilderClient.acts`): a submit that was refused or repeated
still counts as an act.

Run it with::

    python -m durable_adk.testing.report_builder --webhook URL --secret S
        [--delay 1.9] [--repeat-after 0.2] [--port 0] [--parent-pid PID]

It prints ``READY <port>`` once it accepts connections, binds 127.0.0.1 only,
and exits on SIGTERM or when the ``--parent-pid`` process is gone.
:class:`ReportBuilder` does all this for a test or an example.

HTTP interface: ``POST /builds`` (202 and the build; 200 and the build for a
repeat), ``POST /builds/<job_id>/cancel`` (200), ``GET /builds/<job_id>``
(the build: its submissions, webhooks sent and their answers, cancelled),
``GET /stats`` (``submissions``, ``builds``, ``webhooks``), ``GET
/_requests?since=SEQ`` (the request log, in memory: it starts empty with each
process). In the log a build is collection ``builds``; ``submit`` and
``cancel`` are the acts, ``get`` and ``stats`` the reads; the key is the job id
(``job_id`` of a submit's body, the path's for a cancel).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from durable_adk.testing.fakes.clients import read_requests
from durable_adk.testing.fakes.protocol import (
    REQUESTS_PATH,
    Caller,
    Outcome,
    RequestRecord,
    caller_headers,
    caller_of,
)
from durable_adk.testing.fakes.request_log import IN_MEMORY, RequestLog
from durable_adk.webhooks import sign


class Builder:
    """The builds and their webhook timers (thread-safe)."""

    def __init__(self, webhook: str, secret: str, delay: float, repeat_after: float) -> None:
        self.webhook = webhook
        self.secret = secret
        self.delay = delay
        self.repeat_after = repeat_after
        self.lock = threading.Lock()
        self.builds: dict[str, dict[str, Any]] = {}
        self.submissions = 0
        self.webhooks = 0

    def submit(self, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        job_id = payload.get("job_id")
        if not isinstance(job_id, str) or not job_id:
            return 400, {"error": "job_id must be a non-empty string"}
        with self.lock:
            self.submissions += 1
            build = self.builds.get(job_id)
            if build is not None:
                build["submissions"] += 1
                return 200, dict(build)
            build = {
                "job_id": job_id,
                "quarter": payload.get("quarter"),
                "region": payload.get("region"),
                "submissions": 1,
                "webhooks": [],
                "cancelled": False,
            }
            self.builds[job_id] = build
        threading.Thread(target=self._finish, args=(job_id,), daemon=True).start()
        return 202, dict(build)

    def cancel(self, job_id: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            build = self.builds.get(job_id)
            if build is None:
                return 404, {"error": f"no build {job_id}"}
            build["cancelled"] = True
            return 200, dict(build)

    def _finish(self, job_id: str) -> None:
        time.sleep(self.delay)
        for attempt in range(2):
            if attempt:
                time.sleep(self.repeat_after)
            with self.lock:
                build = self.builds[job_id]
                if build["cancelled"]:
                    return
            region, quarter = build["region"], build["quarter"]
            body = json.dumps(
                {
                    "job_id": job_id,
                    "state": "SUCCEEDED",
                    "result": {
                        "status": "done",
                        "url": f"https://reports.example/{quarter}-{region}.xlsx",
                        "row_count": 1284,
                    },
                }
            ).encode()
            answer = self._post(body)
            with self.lock:
                self.webhooks += 1
                build["webhooks"].append(answer)

    def _post(self, body: bytes) -> int:
        headers = {"Content-Type": "application/json", **sign(self.secret, body, time.time())}
        request = urllib.request.Request(self.webhook, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0

    def stats(self) -> dict[str, int]:
        with self.lock:
            return {
                "submissions": self.submissions,
                "builds": len(self.builds),
                "webhooks": self.webhooks,
            }


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._handle("POST", self.rfile.read(length) if length else b"")

    def do_GET(self) -> None:
        self._handle("GET", b"")

    def _handle(self, method: str, raw: bytes) -> None:
        """Logs the request, then answers it, then logs its outcome."""
        target = urllib.parse.urlsplit(self.path)
        log = self.server.log
        if target.path == REQUESTS_PATH:  # reading the log is not logged
            try:
                self._answer(200, log.answer(target.query))
            except ValueError as err:
                self._answer(400, {"error": str(err)})
            return
        parts = [urllib.parse.unquote(p) for p in target.path.strip("/").split("/")]
        payload: Any = None
        if method == "POST" and parts == ["builds"]:
            try:
                payload = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                payload = None
        action, key = _addressed(method, parts, payload)
        seq = log.received(
            method=method,
            path=self.path,
            collection="builds" if action not in (None, "stats") else None,
            action=action,
            item_id=parts[1] if action in ("cancel", "get") else None,
            key=key,
            mutating=action in ("submit", "cancel"),
            caller=caller_of(self.headers),
        )
        status, body = 500, {"error": "internal error"}
        outcome: Outcome = "error"
        try:
            status, body, outcome = self._route(method, parts, payload)
        finally:
            log.answered(seq, outcome, status, None)
        self._answer(status, body)

    def _route(
        self, method: str, parts: list[str], payload: Any
    ) -> tuple[int, dict[str, Any], Outcome]:
        builder = self.server.builder
        if method == "POST" and parts == ["builds"]:
            if not isinstance(payload, dict):
                return 400, {"error": "the body must be a JSON object"}, "error"
            status, body = builder.submit(payload)
            if status in (200, 202):
                return status, body, "created" if status == 202 else "replayed"
            return status, body, "error"
        if method == "POST" and len(parts) == 3 and parts[0] == "builds" and parts[2] == "cancel":
            status, body = builder.cancel(parts[1])
            return status, body, "applied" if status == 200 else "not_found"
        if method == "GET" and parts == ["stats"]:
            return 200, builder.stats(), "found"
        if method == "GET" and len(parts) == 2 and parts[0] == "builds":
            with builder.lock:
                build = builder.builds.get(parts[1])
                found = None if build is None else json.loads(json.dumps(build))
            if found is None:
                return 404, {"error": "no such build"}, "not_found"
            return 200, found, "found"
        return 404, {"error": "unknown path"}, "error"


def _addressed(method: str, parts: list[str], payload: Any) -> tuple[str | None, str | None]:
    """The action a request asks for and the job id it names (see the module docstring)."""
    if method == "POST" and parts == ["builds"]:
        job_id = payload.get("job_id") if isinstance(payload, dict) else None
        return "submit", job_id if isinstance(job_id, str) else None
    if method == "POST" and len(parts) == 3 and parts[0] == "builds" and parts[2] == "cancel":
        return "cancel", parts[1]
    if method == "GET" and parts == ["stats"]:
        return "stats", None
    if method == "GET" and len(parts) == 2 and parts[0] == "builds":
        return "get", parts[1]
    return None, None


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, builder: Builder) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.builder = builder
        self.log = RequestLog(IN_MEMORY)


def _watch_parent(pid: int, server: _Server) -> None:
    while True:
        time.sleep(0.5)
        try:
            os.kill(pid, 0)
        except OSError:
            server.shutdown()
            return


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the builder until SIGTERM, SIGINT or the parent's exit."""
    parser = argparse.ArgumentParser(prog="python -m durable_adk.testing.report_builder")
    parser.add_argument("--webhook", required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--delay", type=float, default=1.9)
    parser.add_argument("--repeat-after", type=float, default=0.2)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--parent-pid", type=int, default=0)
    args = parser.parse_args(argv)
    server = _Server(args.port, Builder(args.webhook, args.secret, args.delay, args.repeat_after))

    def stop(signum: int, frame: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if args.parent_pid:
        threading.Thread(target=_watch_parent, args=(args.parent_pid, server), daemon=True).start()
    print(f"READY {server.server_address[1]}", flush=True)
    server.serve_forever(poll_interval=0.1)
    server.server_close()
    server.log.close()
    return 0


class ReportBuilder:
    """Starts the builder process for a test or an example; stops it on exit.

    Example::

        with ReportBuilder(webhook_url, secret, delay=0.5) as builder:
            client = ReportBuilderClient(builder.url)
    """

    def __init__(
        self, webhook: str, secret: str, *, delay: float = 1.9, repeat_after: float = 0.2
    ) -> None:
        self.args = [
            "--webhook",
            webhook,
            "--secret",
            secret,
            "--delay",
            str(delay),
            "--repeat-after",
            str(repeat_after),
            "--parent-pid",
            str(os.getpid()),
        ]
        self.process: subprocess.Popen[str] | None = None
        self.url = ""

    def __enter__(self) -> ReportBuilder:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "durable_adk.testing.report_builder", *self.args],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().split()
        if len(line) != 2 or line[0] != "READY":
            self.process.kill()
            raise RuntimeError(f"the report builder did not start: {line}")
        self.url = f"http://127.0.0.1:{line[1]}"
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class ReportBuilderClient:
    """HTTP client of the builder: the ``submit`` and ``cancel`` hooks, and test readers.

    Args:
        url: The builder's URL.
        caller: Tags every request with ``X-Caller-<name>`` headers, which the
            request log records (see :data:`~durable_adk.testing.services.Caller`).
    """

    def __init__(self, url: str, *, caller: Caller | None = None) -> None:
        self.url = url.rstrip("/")
        self.caller = caller
        if isinstance(caller, Mapping):
            caller_headers(caller)  # a bad name fails here, not at the first call

    def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"}
        if self.caller is not None:
            headers.update(caller_headers(self.caller() if callable(self.caller) else self.caller))
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers=headers,
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def submit(self, job_id: str, quarter: str, region: str) -> dict[str, Any]:
        """Submits a build for a job (the job id is its identity)."""
        return dict(
            self._call("POST", "/builds", {"job_id": job_id, "quarter": quarter, "region": region})
        )

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Cancels a build."""
        return dict(self._call("POST", f"/builds/{urllib.parse.quote(job_id, safe='')}/cancel"))

    def build(self, job_id: str) -> dict[str, Any] | None:
        """One build, or None."""
        try:
            return dict(self._call("GET", f"/builds/{urllib.parse.quote(job_id, safe='')}"))
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def stats(self) -> dict[str, int]:
        """Submissions (repeats included), builds and webhooks sent."""
        return dict(self._call("GET", "/stats"))

    def requests(
        self,
        action: str | None = None,
        key: str | None = None,
        *,
        caller: Mapping[str, str] | None = None,
        mutating: bool | None = None,
        since: int = 0,
    ) -> list[RequestRecord]:
        """The requests the builder received, oldest first (see the module docstring).

        Args:
            action: ``submit``, ``cancel``, ``get`` or ``stats``.
            key: Only requests naming this job id.
            caller: Only requests whose ``X-Caller-*`` headers have these values.
            mutating: Only acts (``submit``, ``cancel``) or only reads.
            since: Only records with a greater ``seq``.
        """
        return read_requests(
            self.url, since=since, action=action, key=key, caller=caller, mutating=mutating
        )

    def acts(
        self,
        action: str | None = None,
        key: str | None = None,
        *,
        caller: Mapping[str, str] | None = None,
        since: int = 0,
    ) -> int:
        """How many submit and cancel requests arrived, refused or repeated ones included."""
        return len(self.requests(action, key, caller=caller, mutating=True, since=since))


if __name__ == "__main__":
    sys.exit(main())
