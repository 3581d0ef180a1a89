"""The HTTP server of a fake service and its command line (``main``)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socketserver
import sys
import threading
import traceback
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any, Final

from durable_adk.testing.fakes.app import HttpError, Request, Response, ServiceApp, bad_request
from durable_adk.testing.fakes.protocol import HOST, MAX_BODY_BYTES, READY_PREFIX
from durable_adk.testing.fakes.request_log import RequestLog
from durable_adk.testing.fakes.specs import SERVICES
from durable_adk.testing.fakes.storage import Store, StoreError

__all__ = ["main"]

_DRAIN_LIMIT: Final = 1024 * 1024  # unread request bodies up to this size are drained
_SOCKET_TIMEOUT: Final = 10.0  # seconds a connection may stall before the server drops it


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, port: int, app: ServiceApp, *, quiet: bool) -> None:
        self.app = app
        self.quiet = quiet
        super().__init__((HOST, port), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind would look the host name up (getfqdn), which can
        # stall for seconds where there is no DNS.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = _SOCKET_TIMEOUT
    server_version = "durable-adk-fake/1"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        self._body_consumed = False

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        self._body_consumed = False
        request = Request(method, self.path, self.headers, self._read_body)
        try:
            response = self.server.app.handle(request)
        except Exception:
            self.log_message("internal error:\n%s", traceback.format_exc())
            response = Response(500, {"error": "internal error", "reason": "internal"})
        if not self._body_consumed:
            self._drain()
        self._send(response)

    def _content_length(self) -> int | None:
        values = self.headers.get_all("Content-Length") or []
        if not values:
            return None
        text = str(values[0]).strip()
        if len(values) > 1 or not (text.isascii() and text.isdigit()):
            self.close_connection = True
            raise bad_request("the Content-Length header is not a single number")
        return int(text)

    def _read_body(self) -> bytes:
        self._body_consumed = True
        if self.headers.get("Transfer-Encoding") is not None:
            self.close_connection = True
            raise HttpError(411, "send the body with a Content-Length", "length_required")
        length = self._content_length()
        if length is None:
            raise HttpError(411, "the Content-Length header is required", "length_required")
        if length > MAX_BODY_BYTES:
            self._body_consumed = False  # drained before the answer
            raise HttpError(
                413, f"the body has {length} bytes; the limit is {MAX_BODY_BYTES}", "too_large"
            )
        try:
            body = self.rfile.read(length)
        except OSError as err:  # a timeout or a reset while reading
            self.close_connection = True
            raise HttpError(408, "the body did not arrive", "timeout") from err
        if len(body) < length:
            self.close_connection = True
            raise bad_request("the body is shorter than its Content-Length")
        return body

    def _drain(self) -> None:
        """Reads an unread body, so that closing the socket does not reset the answer."""
        self._body_consumed = True
        try:
            length = self._content_length()
        except HttpError:
            return
        if not length:
            return
        if length > _DRAIN_LIMIT:
            self.close_connection = True
            return
        try:
            while length > 0:
                chunk = self.rfile.read(min(length, 65536))
                if not chunk:
                    break
                length -= len(chunk)
        except OSError:
            self.close_connection = True

    def _send(self, response: Response) -> None:
        data = json.dumps(response.body).encode("utf-8")
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client went away; the write, if any, stands
            self.close_connection = True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Answers the base class's own errors (bad request line, unknown method) in JSON."""
        self.close_connection = True
        text = message or HTTPStatus(code).phrase
        body = json.dumps({"error": text, "reason": "bad_request"}).encode("utf-8")
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD" and code >= 200 and code not in (204, 304):
                self.wfile.write(body)
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:
        if not self.server.quiet:
            super().log_message(format, *args)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m durable_adk.testing.services",
        description="Run a fake outside service on 127.0.0.1 (prints 'READY <port>').",
    )
    parser.add_argument("service", choices=sorted(SERVICES), help="which service to run")
    parser.add_argument("--db", required=True, help="the SQLite file (created if missing)")
    parser.add_argument("--port", type=int, default=0, help="TCP port; 0 picks a free one")
    parser.add_argument(
        "--no-lookup", action="store_true", help="answer 501 to lookups by idempotency key"
    )
    parser.add_argument(
        "--fail-times", type=int, default=0, metavar="N", help="fail the first N create requests"
    )
    parser.add_argument(
        "--fail-mode",
        choices=["before", "after"],
        default="before",
        help="fail before the write (nothing created) or after the commit (created)",
    )
    parser.add_argument(
        "--fail-actions", type=int, default=0, metavar="N", help="fail the first N action requests"
    )
    parser.add_argument(
        "--parent-pid", type=int, default=None, help="stop when this parent process goes away"
    )
    parser.add_argument("--quiet", action="store_true", help="do not log requests to stderr")
    args = parser.parse_args(argv)
    if args.fail_times < 0 or args.fail_actions < 0:
        parser.error("--fail-times and --fail-actions must not be negative")
    if not 0 <= args.port <= 65535:
        parser.error("--port must be between 0 and 65535")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs a service until SIGTERM or SIGINT (or until ``--parent-pid`` exits).

    Returns:
        The exit code: 0 after a clean stop, 1 if the service could not start.
    """
    args = _parse_args(argv)
    spec = SERVICES[args.service]
    try:
        store = Store(args.db, spec.name)
    except StoreError as err:
        print(f"{spec.name}: {err}", file=sys.stderr, flush=True)
        return 1
    try:
        log = RequestLog(args.db)
    except StoreError as err:
        store.close()
        print(f"{spec.name}: {err}", file=sys.stderr, flush=True)
        return 1
    app = ServiceApp(
        spec,
        store,
        lookup=not args.no_lookup,
        fail_times=args.fail_times,
        fail_mode=args.fail_mode,
        fail_actions=args.fail_actions,
        db_path=os.path.abspath(args.db),
        log=log,
    )
    try:
        server = _Server(args.port, app, quiet=args.quiet)
    except OSError as err:
        store.close()
        log.close()
        print(f"{spec.name}: cannot listen on {HOST}:{args.port}: {err}", file=sys.stderr)
        return 1

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    serving = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="serve", daemon=True
    )
    # The serving thread and the request threads it starts inherit a mask that
    # blocks these signals, so they reach the main thread and wake it at once.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    try:
        serving.start()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)
    print(f"{READY_PREFIX}{server.server_port}", flush=True)
    while not stop.wait(0.5):
        if args.parent_pid is not None and os.getppid() != args.parent_pid:
            print(f"{spec.name}: parent {args.parent_pid} is gone, stopping", file=sys.stderr)
            break
    server.shutdown()
    server.server_close()
    store.close()  # waits for a write in progress
    log.close()
    print(f"{spec.name}: stopped", file=sys.stderr, flush=True)
    return 0
