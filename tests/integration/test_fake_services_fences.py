"""The fake services' fence check: a stale fenced request is refused before it acts.

Each request goes over real HTTP to a service in its own process; what the
service did is read back from its items and its request log. The fence headers
are built by :class:`durable_adk.fencing.fence.FenceToken` (as a tool's
``fence_headers()`` would), so a stale one can be made without waiting: a
valid-until in the past is exactly what a request the network held past the
sender's lease looks like on arrival.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_adk import errors
from durable_adk.fencing.fence import (
    FENCE_EPOCH_HEADER,
    FENCE_RUN_HEADER,
    FENCE_VALID_UNTIL_HEADER,
    FenceToken,
    RunFence,
    using_fence,
)
from durable_adk.testing.services import (
    BillingClient,
    FakeService,
    ServiceError,
    ServiceFenced,
    request_json,
)

INVOICE = {"invoice_id": "INV-F", "customer": "acme", "amount": 12.0}


@pytest.fixture(scope="module")
def billing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeService]:
    with FakeService("billing", tmp_path_factory.mktemp("billing") / "billing.db") as service:
        yield service


def fresh(run: str | None = None) -> tuple[str, str]:
    """A new idempotency key and a new run id."""
    return f"fence-{uuid.uuid4()}", run or f"run-{uuid.uuid4().hex[:12]}"


def token(run_id: str, epoch: int, *, valid_for: float) -> dict[str, str]:
    return FenceToken(run_id, epoch, time.time() + valid_for).headers()


def post(service: FakeService, key: str, headers: dict[str, str] | None) -> tuple[int, object]:
    status, body, _ = request_json(
        "POST", f"{service.url}/invoices", payload=INVOICE, idempotency_key=key, headers=headers
    )
    return status, body


def test_a_request_past_its_valid_until_is_refused_and_changes_nothing(
    billing: FakeService,
) -> None:
    key, run = fresh()
    before = billing.count("invoices")
    status, body = post(billing, key, token(run, 1, valid_for=-0.5))
    assert status == 412
    assert isinstance(body, dict) and body["reason"] == "fence_expired"
    assert billing.count("invoices") == before
    assert billing.by_key("invoices", key) is None
    (record,) = billing.requests("invoices", "create", key)
    assert (record.outcome, record.status, record.reason) == ("fenced", 412, "fence_expired")
    assert record.fence["run"] == run and record.fence["epoch"] == "1"
    assert billing.acts("invoices", "create", key) == 0  # refused as fenced: not an act
    # The same request with a valid fence then acts: the refusal left no trace.
    status, body = post(billing, key, token(run, 1, valid_for=60))
    assert status == 201 and billing.count("invoices") == before + 1


def test_a_lower_epoch_is_refused_once_a_higher_one_was_seen(billing: FakeService) -> None:
    key, run = fresh()
    other_key, _ = fresh()
    status, _ = post(billing, key, token(run, 3, valid_for=60))  # epoch 3 acts
    assert status == 201
    status, body = post(billing, other_key, token(run, 2, valid_for=60))  # a zombie of epoch 2
    assert status == 412 and isinstance(body, dict)
    assert (body["reason"], body["highest_epoch"]) == ("fence_superseded", 3)
    assert billing.by_key("invoices", other_key) is None
    # Also a replay of the key epoch 3 used: refused, not answered from the key.
    status, body = post(billing, key, token(run, 2, valid_for=60))
    assert status == 412
    # The same epoch, a higher one, another run: all served.
    assert post(billing, other_key, token(run, 3, valid_for=60))[0] == 201
    assert post(billing, fresh()[0], token(run, 4, valid_for=60))[0] == 201
    assert post(billing, fresh()[0], token(fresh()[1], 1, valid_for=60))[0] == 201
    assert post(billing, fresh()[0], token(run, 3, valid_for=60))[0] == 412  # 4 was seen
    fenced = billing.requests("invoices", outcome="fenced")
    mine = [r for r in fenced if r.fence.get("run") == run]
    assert [(r.key, r.reason) for r in mine][:2] == [
        (other_key, "fence_superseded"),
        (key, "fence_superseded"),
    ]
    assert len(mine) == 3


def test_actions_and_lookups_are_checked_too(billing: FakeService) -> None:
    key, run = fresh()
    assert post(billing, key, token(run, 2, valid_for=60))[0] == 201
    invoice = billing.by_key("invoices", key)
    assert invoice is not None
    status, body, _ = request_json(
        "POST",
        f"{billing.url}/invoices/{invoice['id']}/void",
        payload={},
        idempotency_key=f"void-{key}",
        headers=token(run, 1, valid_for=60),
    )
    assert status == 412 and isinstance(body, dict) and body["reason"] == "fence_superseded"
    assert billing.get("invoices", invoice["id"])["status"] == "open"  # type: ignore[index]
    status, body, _ = request_json(
        "GET", f"{billing.url}/invoices/by-key/{key}", headers=token(run, 2, valid_for=-1)
    )
    assert status == 412 and isinstance(body, dict) and body["reason"] == "fence_expired"
    (lookup,) = billing.requests("invoices", "lookup", key, outcome="fenced")
    assert lookup.status == 412


def test_requests_without_fence_headers_are_served_as_before(billing: FakeService) -> None:
    key, run = fresh()
    assert post(billing, key, token(run, 5, valid_for=60))[0] == 201
    assert post(billing, fresh()[0], None)[0] == 201  # no headers: no check, whatever was seen
    status, _ = post(billing, key, None)
    assert status == 200  # a replay, as before


@pytest.mark.parametrize(
    "headers",
    [
        {FENCE_RUN_HEADER: "r1", FENCE_EPOCH_HEADER: "1"},  # no valid-until
        {FENCE_VALID_UNTIL_HEADER: "9999999999"},  # no run, no epoch
        {FENCE_RUN_HEADER: "r1", FENCE_EPOCH_HEADER: "-1", FENCE_VALID_UNTIL_HEADER: "9e9"},
        {FENCE_RUN_HEADER: "r1", FENCE_EPOCH_HEADER: "one", FENCE_VALID_UNTIL_HEADER: "9e9"},
        {FENCE_RUN_HEADER: "r1", FENCE_EPOCH_HEADER: "1", FENCE_VALID_UNTIL_HEADER: "soon"},
        {FENCE_RUN_HEADER: "r1", FENCE_EPOCH_HEADER: "1", FENCE_VALID_UNTIL_HEADER: "nan"},
    ],
    ids=["no-deadline", "no-run", "negative-epoch", "word-epoch", "word-deadline", "nan"],
)
def test_malformed_fence_headers_are_bad_input_and_write_nothing(
    billing: FakeService, headers: dict[str, str]
) -> None:
    key, _ = fresh()
    status, body = post(billing, key, headers)
    assert status == 400 and isinstance(body, dict) and body["reason"] == "bad_request"
    assert "Durable-Fence" in body["error"]
    assert billing.by_key("invoices", key) is None


def test_the_highest_epoch_survives_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "billing.db"
    key, run = fresh()
    with FakeService("billing", db) as billing:
        assert post(billing, key, token(run, 7, valid_for=60))[0] == 201
        port = billing.port
    with FakeService("billing", db, port=port) as billing:
        assert post(billing, fresh()[0], token(run, 6, valid_for=60))[0] == 412


def test_the_client_sends_the_current_fence_and_raises_service_fenced(
    billing: FakeService,
) -> None:
    key, run = fresh()
    client = BillingClient(billing.url)
    with using_fence(RunFence(run, 2, trusted_until=time.monotonic() + 60)):
        invoice = client.create_invoice("INV-C", "acme", 1.0, key)
    (sent,) = billing.requests("invoices", "create", key)
    assert sent.fence["run"] == run and sent.fence["epoch"] == "2"
    assert float(sent.fence["valid-until"]) > time.time()
    with using_fence(RunFence(run, 1, trusted_until=time.monotonic() + 60)):
        with pytest.raises(ServiceFenced) as refused:
            client.create_invoice("INV-C2", "acme", 1.0, fresh()[0])
        with pytest.raises(ServiceFenced):
            client.find_invoice(key)
    assert isinstance(refused.value, errors.FenceRefused)
    assert isinstance(refused.value, ServiceError)
    assert (refused.value.status, refused.value.reason) == (412, "fence_superseded")
    # A lost fence sends nothing at all.
    lost = RunFence(run, 2, trusted_until=time.monotonic() + 60)
    lost.lose("taken over")
    seen = len(billing.requests())
    with using_fence(lost), pytest.raises(errors.Fenced):
        client.create_invoice("INV-C3", "acme", 1.0, fresh()[0])
    assert len(billing.requests()) == seen
    # Outside a run, and with fenced=False, no fence headers go.
    other = fresh()[0]
    BillingClient(billing.url).create_invoice("INV-C4", "acme", 1.0, other)
    with using_fence(RunFence(run, 1, trusted_until=time.monotonic() + 60)):
        BillingClient(billing.url, fenced=False).create_invoice("INV-C5", "acme", 1.0, key + "x")
    assert [
        r.fence for r in billing.requests("invoices", "create") if r.key in (other, key + "x")
    ] == [
        {},
        {},
    ]
    assert invoice["idempotency_key"] == key
