"""Oversized bodies over a real socket: always a 413 the client can read, never a reset.

A worker (uvicorn on 127.0.0.1) with the default 1 MiB limit gets 2 MB bodies
from clients that send the whole body before they read the answer
(``http.client``, a raw socket). Refused from the Content-Length header, the
body is never read into memory, and the connection stays open while its rest
arrives, so the client always reads the 413 (closing the socket with the body
unread made the client's send fail with a broken pipe in most tries). A
chunked body is cut at the limit the same way; a client that asked
``Expect: 100-continue`` gets the 413 without sending the body. Nothing is
written on either backend.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from svc_support import AUTH, ThreadedWorker, settings_for, threaded_worker

TWO_MB = json.dumps({"message": "x" * 2_000_000}).encode()
RUNS = "/v1/users/u1/sessions/s1/runs"
TRIES = 6


@pytest.fixture
def worker(store_url: str) -> Iterator[ThreadedWorker]:
    with threaded_worker(settings_for(store_url)) as running:
        yield running


def address(worker: ThreadedWorker) -> tuple[str, int]:
    host, _, port = worker.base_url.removeprefix("http://").rpartition(":")
    return host, int(port)


class SmallBufferConnection(http.client.HTTPConnection):
    """``http.client`` with a small send buffer, as over a real network: the body
    is still on its way when the worker answers."""

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        self.sock.settimeout(self.timeout)
        self.sock.connect((self.host, self.port))


def stats(worker: ThreadedWorker) -> dict[str, Any]:
    with worker.client() as client:
        response = client.get("/v1/stats")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


def refused(status: int, payload: bytes) -> None:
    assert status == 413, payload[:300]
    error = json.loads(payload)["error"]
    assert error["code"] == "body_too_large"
    assert "larger than" in error["message"] and "1048576 bytes" in error["message"]


def test_a_declared_oversized_body_always_gets_413_never_a_broken_pipe(
    worker: ThreadedWorker,
) -> None:
    before = stats(worker)
    host, port = address(worker)
    headers = {**AUTH, "Content-Type": "application/json"}
    for _ in range(TRIES):
        connection = SmallBufferConnection(host, port, timeout=30)
        try:
            # http.client sends the whole body, then reads the answer.
            connection.request("POST", RUNS, body=TWO_MB, headers=headers)
            response = connection.getresponse()
            payload = response.read()
            refused(response.status, payload)
            # The connection is still good: the refused body's rest was discarded.
            connection.request("GET", "/v1/stats", headers=AUTH)
            again = connection.getresponse()
            assert again.status == 200 and json.loads(again.read()) == before
        finally:
            connection.close()
    assert f"({len(TWO_MB)} bytes, says its Content-Length)" in payload.decode()
    assert stats(worker) == before


def chunked(size: int, piece: int = 65536) -> bytes:
    out = bytearray()
    left = size
    while left:
        n = min(piece, left)
        out += f"{n:x}\r\n".encode() + b"x" * n + b"\r\n"
        left -= n
    return bytes(out + b"0\r\n\r\n")


def exchange(host: str, port: int, head: bytes, body: bytes) -> bytes:
    """Sends a request whole (head, then body, no reading in between), then reads the answer."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        sock.settimeout(30)
        sock.connect((host, port))
        sock.sendall(head + body)
        sock.shutdown(socket.SHUT_WR)
        answer = bytearray()
        while chunk := sock.recv(65536):
            answer += chunk
        return bytes(answer)


def parse(answer: bytes) -> tuple[int, bytes]:
    head, _, rest = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")[1:]
        if line.lower().startswith(b"content-length:")
    )
    return status, rest[:length]


def test_a_chunked_oversized_body_is_cut_at_the_limit_with_413(worker: ThreadedWorker) -> None:
    before = stats(worker)
    host, port = address(worker)
    auth = AUTH["Authorization"].encode()
    head = (
        f"POST {RUNS} HTTP/1.1\r\nHost: w\r\n".encode()
        + b"Authorization: " + auth + b"\r\n"
        + b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )  # fmt: skip
    for _ in range(TRIES):
        status, payload = parse(exchange(host, port, head, chunked(2_000_000)))
        refused(status, payload)
    assert stats(worker) == before


def test_expect_continue_gets_413_without_sending_the_body(worker: ThreadedWorker) -> None:
    before = stats(worker)
    host, port = address(worker)
    auth = AUTH["Authorization"].encode()
    head = (
        f"POST {RUNS} HTTP/1.1\r\nHost: w\r\n".encode()
        + b"Authorization: " + auth + b"\r\n"
        + f"Content-Type: application/json\r\nContent-Length: {len(TWO_MB)}\r\n".encode()
        + b"Expect: 100-continue\r\n\r\n"
    )  # fmt: skip
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(head)
        answer = bytearray()
        while chunk := sock.recv(65536):  # the worker closes: the body never comes
            answer += chunk
    assert not answer.startswith(b"HTTP/1.1 100")
    status, payload = parse(bytes(answer))
    refused(status, payload)
    assert stats(worker) == before
