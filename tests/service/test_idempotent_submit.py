"""A run submitted again under its ``Idempotency-Key`` is the run the first send recorded.

A client whose answer to ``POST .../runs`` was lost (the worker died after
the commit, the connection broke) sends the same request again: nothing more
is recorded or driven, the answer is 200 with the first run. The same key with
another message or session, and a malformed key, are refused and change
nothing. Both backends; the crash case kills a real ``durable-adk serve``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from svc_support import AUTH, Service, launch_serve, wait_ready
from test_answer_api import answer, pause_on_a_long_running_call

from durable_adk.faults import arm
from durable_adk.ids import run_id_for_key
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger, RunStatus

URL = "/v1/users/u1/sessions/{}/runs"


async def post(
    service: Service, session: str, body: dict[str, Any], key: str | None
) -> httpx.Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    return await service.client.post(URL.format(session), json=body, headers=headers)


async def settled(service: Service, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        detail: dict[str, Any] = (await service.client.get(f"/v1/runs/{run_id}")).json()
        if detail["run"]["status"] in ("DONE", "FAILED", "PARKED", "PAUSED"):
            return detail
        assert time.monotonic() < deadline, detail["run"]
        await asyncio.sleep(0.05)


def user_texts(detail: dict[str, Any]) -> list[str]:
    return [
        p["text"]
        for e in detail["events"]
        if e["event"]["author"] == "user"
        for p in (e["event"].get("content") or {}).get("parts") or []
        if p.get("text")
    ]


async def test_a_submit_sent_again_under_its_key_records_and_drives_nothing(
    service: Service,
) -> None:
    first = await post(service, "k1", {"message": "lamps"}, "order-7")
    assert first.status_code == 202, first.text
    assert "Idempotent-Replayed" not in first.headers
    run = first.json()["run"]
    assert run["run_id"] == run_id_for_key(service.worker.app_name, "u1", "order-7")
    done = await settled(service, run["run_id"])
    assert done["run"]["status"] == "DONE"
    before = await service.stats()

    again = await post(service, "k1", {"message": "lamps"}, "order-7")
    assert again.status_code == 200, again.text
    assert again.headers["Idempotent-Replayed"] == "true"
    body = again.json()
    assert body["run"]["run_id"] == run["run_id"] and body["run"]["status"] == "DONE"
    # Followed from where the run's invocation starts, not from the session's end.
    assert body["after_seq"] == 0 and body["events_url"].endswith(
        f"?after=0&run_id={run['run_id']}"
    )
    assert await service.stats() == before
    runs = await RunLedger(service.store).list_runs()
    assert [r.run_id for r in runs] == [run["run_id"]]
    assert user_texts(await settled(service, run["run_id"])) == ["lamps"]


async def test_the_key_of_another_request_or_a_malformed_key_is_refused_and_changes_nothing(
    service: Service,
) -> None:
    first = await post(service, "k2", {"message": "lamps"}, "order-8")
    assert first.status_code == 202, first.text
    await settled(service, first.json()["run"]["run_id"])
    before = await service.stats()
    for session, body, key, words in (
        ("k2", {"message": "chairs"}, "order-8", "submitted before with another"),
        ("k3", {"message": "lamps"}, "order-8", "submitted before with another"),
        ("k2", {"message": "lamps"}, "x" * 256, "idempotency-key"),
        ("k2", {"message": "lamps"}, "bad\tkey", "idempotency-key"),
        ("k2", {"message": "lamps"}, " padded", "idempotency-key"),
    ):
        refused = await post(service, session, body, key)
        assert refused.status_code == 422, (key, refused.text)
        assert words in refused.text.lower(), (key, refused.text)
    assert await service.stats() == before
    # Another user's identical key names another run.
    other = await service.client.post(
        "/v1/users/u2/sessions/k2/runs",
        json={"message": "lamps"},
        headers={"Idempotency-Key": "order-8"},
    )
    assert (
        other.status_code == 202 and other.json()["run"]["run_id"] != first.json()["run"]["run_id"]
    )


async def test_sends_at_the_same_moment_under_one_key_record_one_run(service: Service) -> None:
    answers = await asyncio.gather(
        *(post(service, "k4", {"message": "lamps"}, "order-9") for _ in range(6))
    )
    assert sorted(a.status_code for a in answers).count(202) == 1, [a.text for a in answers]
    assert {a.status_code for a in answers} == {200, 202}
    (run_id,) = {a.json()["run"]["run_id"] for a in answers}
    detail = await settled(service, run_id)
    assert detail["run"]["status"] == "DONE"
    assert user_texts(detail) == ["lamps"]
    assert len(await RunLedger(service.store).list_runs()) == 1


async def test_an_answer_sent_again_under_its_key_is_the_run_that_carried_it(
    service: Service,
) -> None:
    invocation, call_id = await pause_on_a_long_running_call(service, "k5")
    body = {"invocation_id": invocation, "content": answer(call_id, item="desks", in_stock=3)}
    first = await post(service, "k5", body, "answer-1")
    assert first.status_code == 202, first.text
    run_id = first.json()["run"]["run_id"]
    assert (await settled(service, run_id))["run"]["status"] == "DONE"
    before = await service.stats()
    again = await post(service, "k5", body, "answer-1")
    assert again.status_code == 200 and again.json()["run"]["run_id"] == run_id, again.text
    # Without the key, the same answer is a second answer: refused as before.
    unkeyed = await post(service, "k5", body, None)
    assert unkeyed.status_code == 409 and "already answered" in unkeyed.text
    # The key of this answer with another answer is refused too.
    other = {"invocation_id": invocation, "content": answer(call_id, in_stock=4)}
    assert (await post(service, "k5", other, "answer-1")).status_code == 422
    assert await service.stats() == before


@pytest.mark.slow
def test_a_worker_killed_before_it_answers_leaves_one_run_for_the_retry(store_url: str) -> None:
    """The submit commits, the worker dies before its answer leaves; the client's
    retry under the same key, to a fresh worker, gets that run, driven once."""
    crashed = wait_ready(
        launch_serve(store_url, worker_id="w-dies", env=arm({}, "api.after_submit"))
    )
    with (
        httpx.Client(base_url=crashed.base_url, headers=AUTH, timeout=30) as client,
        pytest.raises(httpx.TransportError),
    ):
        client.post(
            URL.format("k6"), json={"message": "lamps"}, headers={"Idempotency-Key": "k6-1"}
        )
    assert crashed.process.wait(30) == 137, "".join(crashed.lines)
    fresh = wait_ready(launch_serve(store_url, worker_id="w-fresh"))
    try:
        with httpx.Client(base_url=fresh.base_url, headers=AUTH, timeout=30) as client:
            again = client.post(
                URL.format("k6"), json={"message": "lamps"}, headers={"Idempotency-Key": "k6-1"}
            )
            assert again.status_code == 200, again.text
            run_id = again.json()["run"]["run_id"]
            deadline = time.monotonic() + 60
            while (status := client.get(f"/v1/runs/{run_id}").json()["run"]["status"]) != "DONE":
                assert time.monotonic() < deadline, status
                time.sleep(0.1)
            detail = client.get(f"/v1/runs/{run_id}").json()
            assert user_texts(detail) == ["lamps"]  # one message, one invocation
            assert {e["event"]["invocation_id"] for e in detail["events"]} == {
                detail["run"]["invocation_id"]
            }
    finally:
        fresh.process.terminate()
        fresh.process.wait(30)

    async def ledger() -> list[Any]:
        async with open_store(store_url) as store:
            return await RunLedger(store).list_runs()

    (run,) = asyncio.run(ledger())
    assert run.run_id == run_id and run.status is RunStatus.DONE
    assert run.owner == "w-fresh" and run.epoch >= 2  # taken over by the fresh worker's recovery
