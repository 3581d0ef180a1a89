"""The fake outside services: real processes, real HTTP, their own SQLite files.

Every assertion about what a service holds goes over HTTP, as a crash test's
would. Most tests share one billing and one notifications process per module
and use fresh idempotency keys, so they measure changes in the counts; the
tests that need a service started differently (no lookup, injected failures,
restarts) start their own.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from durable_adk.testing.fakes.process import SERVICE_MODULE
from durable_adk.testing.report_builder import ReportBuilder, ReportBuilderClient
from durable_adk.testing.services import (
    MAX_BODY_BYTES,
    MAX_KEY_LENGTH,
    Action,
    BillingClient,
    FakeService,
    LookupUnavailable,
    NotificationClient,
    Resource,
    ServiceError,
    ServiceSpec,
    ServiceStartError,
    ServiceUnreachable,
    register,
    request_json,
)

INVOICE = {"invoice_id": "INV-1", "customer": "acme", "amount": 120.5, "summary": "Q3 work"}


def new_key() -> str:
    return f"test-{uuid.uuid4()}"


def raw(
    service: FakeService,
    method: str,
    path: str,
    *,
    body: bytes | None = None,
    headers: list[tuple[str, str]] | None = None,
    content_length: bool = True,
) -> tuple[int, Any, http.client.HTTPResponse]:
    """One request with exactly the headers given (plus Content-Length unless told not to)."""
    conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in headers or []:
            conn.putheader(name, value)
        if body is not None and content_length:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        answer = conn.getresponse()
        data = answer.read()
        return answer.status, json.loads(data) if data else None, answer
    finally:
        conn.close()


def post_invoice(
    service: FakeService, key: str | None, payload: Any = None
) -> tuple[int, Any, http.client.HTTPResponse]:
    headers = [("Content-Type", "application/json")]
    if key is not None:
        headers.append(("Idempotency-Key", key))
    body = json.dumps(INVOICE if payload is None else payload).encode()
    return raw(service, "POST", "/invoices", body=body, headers=headers)


@pytest.fixture(scope="module")
def billing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeService]:
    with FakeService("billing", tmp_path_factory.mktemp("billing") / "billing.db") as service:
        yield service


@pytest.fixture(scope="module")
def notifications(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeService]:
    db = tmp_path_factory.mktemp("notifications") / "notifications.db"
    with FakeService("notifications", db) as service:
        yield service


def test_the_child_is_started_by_the_class_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``FakeService.launch`` starts every child (this suite forks it from its fork
    server, tests/conftest.py): called as ``subprocess.Popen`` is, with the command."""
    started: list[list[str]] = []
    before = FakeService.launch

    def launch(command: list[str], **options: Any) -> subprocess.Popen[Any]:
        started.append(command)
        return before(command, **options)

    monkeypatch.setattr(FakeService, "launch", launch)
    with FakeService("billing", tmp_path / "billing.db") as billing:
        status, _, _ = post_invoice(billing, new_key())
        assert status == 201
        assert billing.acts("invoices", "create") == 1
        billing.restart()  # each start goes through it
    for command in started:  # the first start and the restart
        assert command[:4] == [sys.executable, "-m", SERVICE_MODULE, "billing"], command
    assert len(started) == 2
    assert not billing.running


# --------------------------------------------------------------------------- billing


def test_create_is_idempotent(billing: FakeService) -> None:
    before = billing.count("invoices")
    key = new_key()

    status, first, answer = post_invoice(billing, key)
    assert status == 201
    assert answer.getheader("Idempotent-Replayed") == "false"
    assert first["id"].startswith("inv_")
    assert {k: first[k] for k in INVOICE} == INVOICE
    assert first["idempotency_key"] == key
    assert first["status"] == "open"
    assert first["created_at"]

    changed = {**INVOICE, "amount": 999}  # the repeat's body is not looked at
    status, second, answer = post_invoice(billing, key, changed)
    assert status == 200
    assert answer.getheader("Idempotent-Replayed") == "true"
    assert second == first

    assert billing.count("invoices") == before + 1
    assert billing.by_key("invoices", key) == first
    assert billing.get("invoices", first["id"]) == first
    assert [i for i in billing.items("invoices") if i["idempotency_key"] == key] == [first]


def test_client_creates_and_finds(billing: FakeService) -> None:
    client = BillingClient(billing.url)
    key = new_key()
    assert client.find_invoice(key) is None

    invoice = client.create_invoice("INV-2", "globex", 10, key, summary="lunch")
    again = client.create_invoice("INV-2", "globex", 10, key, summary="lunch")

    assert again == invoice
    assert invoice["amount"] == 10 and invoice["summary"] == "lunch"
    assert client.find_invoice(key) == invoice
    assert client.get_invoice(invoice["id"]) == invoice
    assert client.get_invoice("inv_missing") is None
    without_summary = client.create_invoice("INV-3", "globex", 0, new_key())
    assert without_summary["summary"] is None


def test_two_keys_make_two_invoices(billing: FakeService) -> None:
    """Only the key deduplicates: the double effect a crash test looks for stays visible."""
    client = BillingClient(billing.url)
    before = billing.count("invoices")
    a = client.create_invoice("INV-SAME", "acme", 5, new_key())
    b = client.create_invoice("INV-SAME", "acme", 5, new_key())
    assert a["id"] != b["id"]
    assert billing.count("invoices") == before + 2


@pytest.mark.parametrize(
    "key",
    ["a/b", "x y", "100%", "q?x=1&y=2#frag", "~!@$^*()[]{}|;:'\",<>", "k" * MAX_KEY_LENGTH],
)
def test_lookup_handles_awkward_keys(billing: FakeService, key: str) -> None:
    client = BillingClient(billing.url)
    invoice = client.create_invoice("INV-K", "acme", 1, key)
    assert client.find_invoice(key) == invoice
    assert billing.by_key("invoices", key) == invoice


def test_concurrent_repeats_create_one_invoice(billing: FakeService) -> None:
    before = billing.count("invoices")
    key = new_key()
    results: list[tuple[int, Any]] = []
    lock = threading.Lock()

    def create() -> None:
        status, body, _ = request_json(
            "POST", f"{billing.url}/invoices", payload=INVOICE, idempotency_key=key
        )
        with lock:
            results.append((status, body))

    threads = [threading.Thread(target=create) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sorted(status for status, _ in results) == [200] * 15 + [201]
    assert len({body["id"] for _, body in results}) == 1
    assert billing.count("invoices") == before + 1


def test_void_is_idempotent(billing: FakeService) -> None:
    client = BillingClient(billing.url)
    invoice = client.create_invoice("INV-V", "acme", 3, new_key())
    void_key = new_key()

    voided = client.void_invoice(invoice["id"], void_key, reason="duplicate")
    assert voided["status"] == "void"
    assert voided["void_reason"] == "duplicate"
    assert {k: voided[k] for k in ("id", "idempotency_key", "created_at")} == {
        k: invoice[k] for k in ("id", "idempotency_key", "created_at")
    }
    assert client.void_invoice(invoice["id"], void_key) == voided  # a repeat: the same answer
    assert client.get_invoice(invoice["id"]) == voided

    with pytest.raises(ServiceError) as conflict:
        client.void_invoice(invoice["id"], new_key())
    assert conflict.value.status == 409
    with pytest.raises(ServiceError) as missing:
        client.void_invoice("inv_missing", new_key())
    assert missing.value.status == 404


GOOD = json.dumps(INVOICE).encode()
JSON = ("Content-Type", "application/json")


def _invoice(**changes: Any) -> bytes:
    payload = {**INVOICE, **changes}
    return json.dumps({k: v for k, v in payload.items() if v is not ...}).encode()


KEY = ("Idempotency-Key", "{key}")  # replaced by a fresh key

BAD_REQUESTS: list[tuple[str, str, str, bytes | None, list[tuple[str, str]], int]] = [
    # (case, method, path, body, headers besides Content-Type/Length, status)
    ("no key", "POST", "/invoices", GOOD, [], 400),
    ("empty key", "POST", "/invoices", GOOD, [("Idempotency-Key", "")], 400),
    ("two keys", "POST", "/invoices", GOOD, [KEY, ("Idempotency-Key", "other")], 400),
    ("key too long", "POST", "/invoices", GOOD, [("Idempotency-Key", "k" * 257)], 400),
    ("key not ASCII", "POST", "/invoices", GOOD, [("Idempotency-Key", "clé")], 400),
    ("malformed JSON", "POST", "/invoices", b'{"invoice_id": ', [KEY], 400),
    ("not UTF-8", "POST", "/invoices", b'{"invoice_id": "\xff"}', [KEY], 400),
    ("empty body", "POST", "/invoices", b"", [KEY], 400),
    ("array", "POST", "/invoices", b"[1, 2]", [KEY], 400),
    ("duplicate member", "POST", "/invoices", GOOD[:-1] + b', "amount": 1}', [KEY], 400),
    ("missing field", "POST", "/invoices", _invoice(customer=...), [KEY], 400),
    ("null field", "POST", "/invoices", _invoice(customer=None), [KEY], 400),
    ("unknown field", "POST", "/invoices", _invoice(discount=5), [KEY], 400),
    ("amount as string", "POST", "/invoices", _invoice(amount="12"), [KEY], 400),
    ("amount as boolean", "POST", "/invoices", _invoice(amount=True), [KEY], 400),
    ("amount NaN", "POST", "/invoices", GOOD.replace(b"120.5", b"NaN"), [KEY], 400),
    ("amount infinite", "POST", "/invoices", GOOD.replace(b"120.5", b"1e999"), [KEY], 400),
    ("amount negative", "POST", "/invoices", _invoice(amount=-1), [KEY], 400),
    ("blank invoice_id", "POST", "/invoices", _invoice(invoice_id="  "), [KEY], 400),
    ("invoice_id number", "POST", "/invoices", _invoice(invoice_id=7), [KEY], 400),
    ("summary object", "POST", "/invoices", _invoice(summary={"a": 1}), [KEY], 400),
    ("body too large", "POST", "/invoices", _invoice(summary="x" * MAX_BODY_BYTES), [KEY], 413),
    ("unknown collection", "POST", "/refunds", GOOD, [KEY], 404),
    ("unknown path", "GET", "/invoices/a/b/c", None, [], 404),
    ("unknown action", "POST", "/invoices/inv_x/refund", GOOD, [KEY], 404),
    ("unknown id", "GET", "/invoices/inv_missing", None, [], 404),
    ("void unknown id", "POST", "/invoices/inv_missing/void", b"{}", [KEY], 404),
    ("void without key", "POST", "/invoices/inv_missing/void", b"{}", [], 400),
    ("wrong method", "PUT", "/invoices", GOOD, [KEY], 405),
    ("delete", "DELETE", "/invoices/count", None, [], 405),
    ("post to count", "POST", "/invoices/count", GOOD, [KEY], 405),
    ("lookup key too long", "GET", "/invoices/by-key/" + "k" * 257, None, [], 400),
    ("lookup bad encoding", "GET", "/invoices/by-key/%ff", None, [], 400),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD_REQUESTS],
)
def test_bad_input_is_refused_and_writes_nothing(
    billing: FakeService,
    method: str,
    path: str,
    body: bytes | None,
    headers: list[tuple[str, str]],
    status: int,
) -> None:
    before = billing.items("invoices")
    key = new_key()
    sent = [JSON, *((name, value.replace("{key}", key)) for name, value in headers)]

    got, answer, _ = raw(billing, method, path, body=body, headers=sent)

    assert got == status, answer
    assert isinstance(answer, dict) and answer["error"] and answer["reason"]
    assert billing.items("invoices") == before


def test_missing_content_length_is_refused(billing: FakeService) -> None:
    before = billing.count("invoices")
    headers = [JSON, ("Idempotency-Key", new_key())]
    status, answer, _ = raw(
        billing, "POST", "/invoices", body=GOOD, headers=headers, content_length=False
    )
    assert status == 411, answer
    chunked = [*headers, ("Transfer-Encoding", "chunked")]
    body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(GOOD), GOOD)
    status, answer, _ = raw(
        billing, "POST", "/invoices", body=body, headers=chunked, content_length=False
    )
    assert status == 411, answer
    assert billing.count("invoices") == before


def _exchange(service: FakeService, data: bytes) -> tuple[int | None, Any]:
    with socket.create_connection(("127.0.0.1", service.port), timeout=5) as sock:
        sock.sendall(data)
        reply = sock.makefile("rb").read()
    if not reply.startswith(b"HTTP/"):  # no request version understood: an HTTP/0.9 answer
        return None, json.loads(reply)
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_unparsable_requests_get_json_errors(billing: FakeService) -> None:
    before = billing.count("invoices")
    status, answer = _exchange(billing, b"NOT A REQUEST LINE AT ALL\r\n\r\n")
    assert status is None and "Bad request" in answer["error"]
    long_header = b"GET /invoices HTTP/1.1\r\nX-Big: " + b"x" * 70_000 + b"\r\n\r\n"
    status, answer = _exchange(billing, long_header)
    assert status == 431 and answer["error"]
    assert billing.count("invoices") == before


def test_client_raises_clear_errors(billing: FakeService) -> None:
    client = BillingClient(billing.url)
    with pytest.raises(ServiceError) as bad:
        client.create_invoice("INV-E", "acme", "12", new_key())  # type: ignore[arg-type]
    assert bad.value.status == 400
    assert bad.value.reason == "bad_request"
    assert "amount" in str(bad.value)
    with pytest.raises(ValueError, match="empty"):
        client.create_invoice("INV-E", "acme", 1, "")
    with pytest.raises(ServiceUnreachable) as gone:
        BillingClient("http://127.0.0.1:1", timeout=2).create_invoice("INV-E", "a", 1, "k")
    assert gone.value.status is None
    with pytest.raises(ServiceError) as wrong:  # a 404 of a missing route is no "not found"
        BillingClient(f"{billing.url}/nowhere").find_invoice("k")
    assert wrong.value.status == 404


def test_survives_client_disconnects(billing: FakeService) -> None:
    before = billing.count("invoices")
    abandoned = new_key()
    request = (
        f"POST /invoices HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Idempotency-Key: {abandoned}\r\nContent-Length: {len(GOOD)}\r\n\r\n"
    ).encode()

    for partial in (b"", b"POST /invoi", request[:-10], request + GOOD[:10]):
        with socket.create_connection(("127.0.0.1", billing.port), timeout=5) as sock:
            sock.sendall(partial)
    with socket.create_connection(("127.0.0.1", billing.port), timeout=5) as sock:
        sock.sendall(request + GOOD)  # complete, but gone before the answer
        sock.shutdown(socket.SHUT_RDWR)

    # The abandoned complete request still took effect, exactly once.
    deadline = time.monotonic() + 5
    while billing.by_key("invoices", abandoned) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert billing.by_key("invoices", abandoned) is not None
    assert billing.count("invoices") == before + 1
    status, _, _ = post_invoice(billing, abandoned)
    assert status == 200
    assert billing.info()["pid"] == billing.pid


def test_bound_to_loopback_only(billing: FakeService) -> None:
    port_hex = f"{billing.port:04X}"
    try:
        tcp4 = Path("/proc/net/tcp").read_text().splitlines()[1:]
        tcp6 = Path("/proc/net/tcp6").read_text().splitlines()[1:]
    except OSError:
        pytest.skip("no /proc/net/tcp here")
    listening = [
        line.split()[1]
        for line in tcp4 + tcp6
        if line.split()[1].endswith(f":{port_hex}") and line.split()[3] == "0A"
    ]
    assert listening == [f"0100007F:{port_hex}"]  # 127.0.0.1, and nothing else
    assert billing.info()["service"] == "billing"


# --------------------------------------------------------------------------- notifications


def test_notifications(notifications: FakeService) -> None:
    client = NotificationClient(notifications.url)
    before = notifications.count("notifications")
    key = new_key()
    assert client.find(key) is None

    status, sent, _ = request_json(
        "POST",
        f"{notifications.url}/notifications",
        payload={"to": "ops@example.com", "message": "invoice INV-1 sent"},
        idempotency_key=key,
    )
    assert status == 201
    assert sent["id"].startswith("ntf_")
    assert sent["to"] == "ops@example.com" and sent["message"] == "invoice INV-1 sent"
    assert client.send("ops@example.com", "a different text", key) == sent
    assert client.find(key) == sent
    assert notifications.count("notifications") == before + 1
    assert notifications.items("notifications")[-1] == sent

    for payload in ({"to": "x@example.com"}, {"to": "x", "message": "m", "cc": "y"}, {"to": 1}):
        with pytest.raises(ServiceError) as bad:
            notifications.client("notifications").create(payload, new_key())
        assert bad.value.status == 400
    status, _, _ = raw(notifications, "GET", "/invoices/count")
    assert status == 404
    assert notifications.count("notifications") == before + 1


# --------------------------------------------------------------------------- own processes


def test_no_lookup_answers_501(tmp_path: Path) -> None:
    with FakeService("billing", tmp_path / "b.db", lookup=False) as service:
        client = BillingClient(service.url)
        key = new_key()
        invoice = client.create_invoice("INV-N", "acme", 1, key)
        with pytest.raises(LookupUnavailable) as unavailable:
            client.find_invoice(key)
        assert unavailable.value.status == 501
        with pytest.raises(LookupUnavailable):
            service.by_key("invoices", "unknown")
        assert client.create_invoice("INV-N", "acme", 1, key) == invoice  # still idempotent
        assert service.count("invoices") == 1
        assert service.items("invoices") == [invoice]
        assert service.info()["lookup"] is False


def test_injected_failure_before_the_write(tmp_path: Path) -> None:
    with FakeService("billing", tmp_path / "b.db", fail_times=2, fail_mode="before") as service:
        client = BillingClient(service.url)
        key = new_key()
        for _ in range(2):
            with pytest.raises(ServiceError) as failed:
                client.create_invoice("INV-F", "acme", 1, key)
            assert failed.value.status == 503
            assert service.count("invoices") == 0
            assert client.find_invoice(key) is None
        status, invoice, _ = post_invoice(service, key)
        assert status == 201
        assert service.count("invoices") == 1
        assert client.find_invoice(key) == invoice


def test_injected_failure_after_the_write(tmp_path: Path) -> None:
    with FakeService("billing", tmp_path / "b.db", fail_times=1, fail_mode="after") as service:
        client = BillingClient(service.url)
        key = new_key()
        with pytest.raises(ServiceError) as failed:
            client.create_invoice("INV-F", "acme", 1, key)
        assert failed.value.status == 503

        # The client saw an error, yet the invoice exists.
        assert service.count("invoices") == 1
        created = client.find_invoice(key)
        assert created is not None

        # A retry with the same key gets the original; nothing new is made.
        status, again, _ = post_invoice(service, key)
        assert status == 200
        assert again == created
        assert client.create_invoice("INV-F", "acme", 1, key) == created
        assert service.count("invoices") == 1


def test_data_survives_restarts(tmp_path: Path) -> None:
    service = FakeService("billing", tmp_path / "b.db", quiet=True)
    with service:
        client = BillingClient(service.url)
        first_key, void_key = new_key(), new_key()
        first = client.create_invoice("INV-R1", "acme", 1, first_key)
        pid, port = service.pid, service.port

        assert service.stop() == 0  # SIGTERM: a clean stop
        service.start(port=port)
        assert service.pid != pid and service.port == port
        assert client.find_invoice(first_key) == first
        assert client.create_invoice("INV-R1", "acme", 1, first_key) == first
        voided = client.void_invoice(first["id"], void_key)

        second = client.create_invoice("INV-R2", "acme", 2, new_key())
        service.restart(hard=True)  # SIGKILL right after the acknowledged writes
        assert service.items("invoices") == [voided, second]
        assert client.void_invoice(first["id"], void_key) == voided  # the answer is kept too
        assert service.count("invoices") == 2
    assert not service.running


def test_start_failure_is_reported(tmp_path: Path, notifications: FakeService) -> None:
    with pytest.raises(ServiceStartError, match="belongs to service 'notifications'"):
        FakeService("billing", notifications.db_path, log_path=tmp_path / "b.log").start()


# --------------------------------------------------------------------------- the request log
#
# A service dedupes by key, so its records cannot show a second attempt; the
# log can. These tests use keys of their own and filter by them, so the shared
# services' other traffic does not matter.


def test_a_repeated_key_is_one_record_and_two_acts(billing: FakeService) -> None:
    key = new_key()
    since = _last_seq(billing)
    assert post_invoice(billing, key)[0] == 201
    assert post_invoice(billing, key)[0] == 200  # deduplicated by the key

    assert billing.by_key("invoices", key) is not None
    assert sum(i["idempotency_key"] == key for i in billing.items("invoices")) == 1
    assert billing.acts("invoices", "create", key) == 2
    assert billing.acts(key=key) == 2  # the lookup above is a read, not an act
    creates = billing.requests("invoices", "create", key)
    assert [(r.outcome, r.status, r.mutating) for r in creates] == [
        ("created", 201, True),
        ("replayed", 200, True),
    ]
    assert creates[0].seq < creates[1].seq and creates[0].seq > since
    assert all(r.method == "POST" and r.path == "/invoices" for r in creates)
    assert creates[0].received_at <= (creates[0].answered_at or 0) <= creates[1].received_at
    (lookup,) = billing.requests("invoices", "lookup", key)
    assert (lookup.mutating, lookup.outcome, lookup.status) == (False, "found", 200)


def test_the_log_holds_reads_and_what_each_request_addressed(billing: FakeService) -> None:
    client = BillingClient(billing.url)
    key, void_key = new_key(), new_key()
    since = _last_seq(billing)
    invoice = client.create_invoice("INV-L", "acme", 1, key)
    client.void_invoice(invoice["id"], void_key)
    client.get_invoice(invoice["id"])
    client.find_invoice(new_key())
    raw(billing, "GET", "/nowhere")
    seen = [
        (r.method, r.collection, r.action, r.item_id, r.mutating, r.outcome)
        for r in billing.requests(since=since)
    ]
    assert seen == [
        ("POST", "invoices", "create", None, True, "created"),
        ("POST", "invoices", "void", invoice["id"], True, "applied"),
        ("GET", "invoices", "get", invoice["id"], False, "found"),
        ("GET", "invoices", "lookup", None, False, "not_found"),
        ("GET", None, None, None, False, "error"),
    ]
    assert billing.acts("invoices", "void", void_key) == 1
    assert billing.acts(since=since) == 2


def test_refused_requests_are_acts_too(billing: FakeService) -> None:
    key = new_key()
    since = _last_seq(billing)
    assert post_invoice(billing, key, {**INVOICE, "amount": "ten"})[0] == 400
    assert post_invoice(billing, None)[0] == 400  # no key at all
    assert raw(billing, "PUT", "/invoices", body=GOOD, headers=[JSON])[0] == 405
    assert billing.by_key("invoices", key) is None
    refused = billing.requests(since=since)[:3]
    assert [(r.action, r.key, r.mutating, r.outcome, r.status, r.reason) for r in refused] == [
        ("create", key, True, "error", 400, "bad_request"),
        ("create", None, True, "error", 400, "bad_request"),
        ("list", None, False, "error", 405, "method_not_allowed"),  # PUT is no create
    ]
    assert billing.acts("invoices", "create", key) == 1


def test_injected_failures_are_counted(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    with FakeService("billing", db, fail_times=1, fail_mode="before", fail_actions=1) as service:
        client = BillingClient(service.url)
        key, void_key = new_key(), new_key()
        with pytest.raises(ServiceError):
            client.create_invoice("INV-F", "acme", 1, key)
        assert service.count("invoices") == 0
        assert service.acts("invoices", "create", key) == 1  # failed, nothing made: still an act
        invoice = client.create_invoice("INV-F", "acme", 1, key)
        with pytest.raises(ServiceError):
            client.void_invoice(invoice["id"], void_key)
        client.void_invoice(invoice["id"], void_key)
        assert service.count("invoices") == 1
        assert [(r.action, r.outcome, r.status, r.reason) for r in service.requests(key=key)] == [
            ("create", "error", 503, "injected_failure"),
            ("create", "created", 201, None),
        ]
        assert [r.outcome for r in service.requests("invoices", "void")] == ["error", "applied"]
        assert service.acts() == 4

    with FakeService("billing", tmp_path / "a.db", fail_times=1, fail_mode="after") as service:
        key = new_key()
        with pytest.raises(ServiceError):
            BillingClient(service.url).create_invoice("INV-A", "acme", 1, key)
        BillingClient(service.url).create_invoice("INV-A", "acme", 1, key)
        # The first one wrote the invoice, though its answer was an error.
        assert [(r.outcome, r.status) for r in service.requests("invoices", "create")] == [
            ("created", 503),
            ("replayed", 200),
        ]
        assert service.count("invoices") == 1 and service.acts() == 2


def test_concurrent_requests_are_all_counted(billing: FakeService) -> None:
    shared = new_key()
    own = [new_key() for _ in range(12)]
    since = _last_seq(billing)
    statuses: list[int] = []
    lock = threading.Lock()

    def create(key: str) -> None:
        status, _, _ = request_json(
            "POST", f"{billing.url}/invoices", payload=INVOICE, idempotency_key=key
        )
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=create, args=(shared,)) for _ in range(12)]
    threads += [threading.Thread(target=create, args=(key,)) for key in own]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sorted(statuses) == [200] * 11 + [201] * 13
    assert billing.acts("invoices", "create", shared) == 12
    assert [r.outcome for r in billing.requests(key=shared)].count("created") == 1
    assert all(billing.acts(key=key) == 1 for key in own)
    seqs = [r.seq for r in billing.requests("invoices", "create", since=since)]
    assert len(seqs) == len(set(seqs)) == 24 and seqs == sorted(seqs)


def test_caller_headers_are_recorded(billing: FakeService) -> None:
    key = new_key()
    epochs = iter(["1", "2"])
    tagged = BillingClient(billing.url, caller=lambda: {"worker": "w1", "epoch": next(epochs)})
    tagged.create_invoice("INV-C", "acme", 1, key)
    tagged.create_invoice("INV-C", "acme", 1, key)
    headers = [JSON, ("Idempotency-Key", key), ("x-caller-RUN", "r-9"), ("X-Caller-Run", "r-10")]
    headers += [("X-Other", "not logged"), ("X-Caller-", "no name")]
    raw(billing, "POST", "/invoices", body=GOOD, headers=headers)

    assert [r.caller for r in billing.requests(key=key)] == [
        {"worker": "w1", "epoch": "1"},
        {"worker": "w1", "epoch": "2"},
        {"run": "r-9, r-10"},
    ]
    assert billing.acts(key=key, caller={"worker": "w1"}) == 2
    assert billing.acts(key=key, caller={"Worker": "w1", "epoch": "2"}) == 1
    assert billing.acts(key=key, caller={"worker": "w2"}) == 0
    with pytest.raises(ValueError, match="caller name"):
        BillingClient(billing.url, caller={"bad name": "x"})
    with pytest.raises(ValueError, match="printable ASCII"):
        NotificationClient(billing.url, caller={"run": "line\nbreak"})


def test_the_log_is_paged_and_checks_its_query(billing: FakeService) -> None:
    keys = [new_key() for _ in range(3)]
    since = _last_seq(billing)
    for key in keys:
        post_invoice(billing, key)
    status, page, _ = raw(billing, "GET", f"/_requests?since={since}&limit=2")
    assert status == 200 and page["more"] is True
    assert [r["key"] for r in page["requests"]] == keys[:2]
    after = page["requests"][-1]["seq"]
    status, page, _ = raw(billing, "GET", f"/_requests?since={after}&limit=2")
    assert [r["key"] for r in page["requests"]][:1] == keys[2:]
    last = _last_seq(billing)
    assert billing.requests(since=since)[-1].key == keys[2]
    for query in ("since=-1", "since=x", "limit=0", "limit=1001", "sort=seq", "since"):
        status, body, _ = raw(billing, "GET", f"/_requests?{query}")
        assert status == 400 and body["reason"] == "bad_request", query
    assert raw(billing, "POST", "/_requests", body=b"{}", headers=[JSON])[0] == 405
    assert _last_seq(billing) == last  # reading the log, also badly, does not add to it


def test_the_log_survives_a_kill_and_keeps_an_unanswered_request(tmp_path: Path) -> None:
    service = FakeService("billing", tmp_path / "b.db", quiet=True)
    with service:
        key, hanging_key = new_key(), new_key()
        post_invoice(service, key)
        post_invoice(service, key)
        # A create whose body never finishes arriving: logged on arrival, then
        # the service is killed while it waits for the rest.
        conn = socket.create_connection(("127.0.0.1", service.port), timeout=10)
        head = (
            "POST /invoices HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Idempotency-Key: {hanging_key}\r\nX-Caller-Worker: doomed\r\n"
            "Content-Length: 500\r\n\r\n{"
        )
        conn.sendall(head.encode())
        deadline = time.monotonic() + 30
        while not service.requests(key=hanging_key):
            assert time.monotonic() < deadline, "the hanging request was never logged"
            time.sleep(0.05)
        service.restart(hard=True)
        conn.close()
        assert service.acts("invoices", "create", key) == 2
        (hanging,) = service.requests(key=hanging_key)
        assert (hanging.mutating, hanging.outcome, hanging.status) == (True, None, None)
        assert hanging.caller == {"worker": "doomed"} and hanging.answered_at is None
        assert service.by_key("invoices", hanging_key) is None
        assert service.acts() == 3


def test_reserved_names_are_refused() -> None:
    with pytest.raises(ValueError, match="must not start with '_'"):
        register(ServiceSpec("logclash", (Resource("_requests", "x", ()),)))
    action = Action("create", lambda item, values: item)
    with pytest.raises(ValueError, match="no action may be named 'create'"):
        register(ServiceSpec("actionclash", (Resource("things", "t", (), actions=(action,)),)))


def test_the_report_builder_counts_submit_requests(tmp_path: Path) -> None:
    # The webhook goes nowhere (nothing listens on port 9); the delay keeps it from trying.
    with ReportBuilder("http://127.0.0.1:9/hook", "s", delay=600) as builder:
        client = ReportBuilderClient(builder.url, caller={"worker": "w1"})
        client.submit("job-1", "2026-Q3", "EMEA")
        client.submit("job-1", "2026-Q3", "EMEA")  # the same job: one build
        status, _, _ = request_json("POST", f"{builder.url}/builds", payload={"job_id": ""})
        assert status == 400
        client.cancel("job-1")
        assert client.build("job-1") is not None
        assert client.stats()["builds"] == 1
        assert client.acts("submit", "job-1") == 2
        assert client.acts("submit") == 3  # the refused one too
        assert client.acts() == 4
        seen = [(r.action, r.key, r.outcome, r.status) for r in client.requests(mutating=True)]
        assert seen == [
            ("submit", "job-1", "created", 202),
            ("submit", "job-1", "replayed", 200),
            ("submit", "", "error", 400),  # the key as the builder read it
            ("cancel", "job-1", "applied", 200),
        ]
        assert [r.caller for r in client.requests("submit")] == [{"worker": "w1"}] * 2 + [{}]
        assert [r.action for r in client.requests(mutating=False)] == ["get", "stats"]


def _last_seq(service: FakeService) -> int:
    """The newest seq in the service's log (0 if empty), read without adding to it."""
    records = service.requests()
    return records[-1].seq if records else 0
