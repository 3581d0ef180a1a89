"""A tiny webhook receiver: ``POST /webhooks/jobs`` fed to :func:`handle_job_webhook`.

A stand-in for the HTTP service's mount of the handler, for tests and
examples: a stdlib HTTP server on ``127.0.0.1`` in a thread of the calling
process, which runs each request's handler on the caller's event loop (and so
on the caller's store). Answers: 200 with the result's body, or the
:class:`~durable_adk.webhooks.WebhookError`'s status with ``{"error": message}``.

Example::

    async with WebhookReceiver(JobTable(store), secret) as receiver:
        ...  # the outside system posts to receiver.url
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from durable_adk.effect_tables.jobs import JobTable
from durable_adk.webhooks import MAX_BODY, WebhookError, handle_job_webhook

PATH = "/webhooks/jobs"


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
        if self.path != PATH:
            self._answer(404, {"error": "unknown path"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._answer(413, {"error": "body too large"})
            return
        body = self.rfile.read(length)
        receiver = self.server.receiver
        call = handle_job_webhook(
            receiver.jobs, receiver.secret, dict(self.headers.items()), body, time.time()
        )
        try:
            result = asyncio.run_coroutine_threadsafe(call, receiver.loop).result(timeout=30)
        except WebhookError as exc:
            self._answer(exc.status, {"error": str(exc)})
            return
        except Exception as exc:  # the store failed: the sender should retry
            self._answer(503, {"error": f"{type(exc).__name__}: {exc}"})
            return
        receiver.received.append(result.body())
        self._answer(result.status, result.body())


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, receiver: WebhookReceiver) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.receiver = receiver


class WebhookReceiver:
    """Serves the job webhook from a thread, handling requests on the caller's loop."""

    def __init__(self, jobs: JobTable, secret: str) -> None:
        """Prepares the receiver; enter it (``async with``) to start it.

        Args:
            jobs: The job table completions go to.
            secret: The secret shared with the senders.
        """
        self.jobs = jobs
        self.secret = secret
        self.received: list[dict[str, Any]] = []
        self.url = ""
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop the handler runs on."""
        return self._loop

    async def __aenter__(self) -> WebhookReceiver:
        self._loop = asyncio.get_running_loop()
        self._server = _Server(self)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{PATH}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._server is not None:
            await asyncio.to_thread(self._server.shutdown)
            self._server.server_close()
