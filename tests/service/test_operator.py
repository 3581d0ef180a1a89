"""Operator control through the real HTTP API, on both backends (issue 14).

Resolve, abandon, cancel and retry; the audit trail and takeover markers in
the run's view; many apps on one database. Every refused action is checked to
change nothing (the store's totals, the audit trail included, stay equal).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from op_support import APP, park_in_store
from svc_support import Service, settings_for

from durable_adk.demo.service_app import app as stock_app
from durable_adk.service import Worker
from durable_adk.service.ops import Operations
from durable_adk.store import open_store
from durable_adk.tables.ledger import Run, RunLedger


async def wait_status(service: Service, run_id: str, *statuses: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        run = (await service.client.get(f"/v1/runs/{run_id}")).json()["run"]
        if run["status"] in statuses:
            return run
        assert time.monotonic() < deadline, f"run {run_id} stayed {run['status']}"
        await asyncio.sleep(0.05)


async def park_with_unanswered_call(
    service: Service, session: str, *, app_name: str = APP, item: str = "stools"
) -> tuple[Run, str]:
    return await park_in_store(service.store, session, app_name=app_name, item=item)


def texts(detail: dict[str, Any]) -> list[str]:
    said = []
    for item in detail["events"]:
        for part in (item["event"].get("content") or {}).get("parts") or []:
            if part.get("text"):
                said.append(part["text"])
    return said


def responses(detail: dict[str, Any], call_id: str) -> list[dict[str, Any]]:
    found = []
    for item in detail["events"]:
        for part in (item["event"].get("content") or {}).get("parts") or []:
            answer = part.get("function_response")
            if answer and answer.get("id") == call_id:
                found.append(item["event"])
    return found


async def test_resolve_answers_the_unknown_call_and_the_run_goes_on(service: Service) -> None:
    run, call_id = await park_with_unanswered_call(service, "resolve-1")
    url = f"/v1/runs/{run.run_id}/resolve"
    body = {
        "by": "ana",
        "reason": "checked the warehouse by hand",
        "result": {"item": "stools", "in_stock": 42},
    }
    first = await service.client.post(url, json=body)
    assert first.status_code == 200, first.text
    answer = first.json()
    assert answer["changed"] is True and answer["run"]["status"] == "QUEUED"
    assert "check_stock" in answer["message"] and "QUEUED" in answer["message"]

    again = await service.client.post(url, json=body)
    assert again.status_code == 200, again.text
    assert again.json()["changed"] is False
    assert "already resolved by ana" in again.json()["message"]

    await wait_status(service, run.run_id, "DONE")
    detail = (await service.client.get(f"/v1/runs/{run.run_id}")).json()
    # The model answered from the operator's result; the tool was not run again:
    # the only response to the call is the operator's.
    assert texts(detail)[-1] == "42 in stock for 'stools'."
    (written,) = responses(detail, call_id)
    assert written["custom_metadata"]["durable_adk_operator"]["by"] == "ana"
    assert detail["finding"]["cls"] == "ACTUALLY_DONE"
    (action,) = detail["actions"]
    assert action["action"] == "resolve" and action["actor"] == "ana"
    assert action["reason"] == "checked the warehouse by hand"
    assert (action["status_before"], action["status_after"]) == ("PARKED", "QUEUED")
    assert action["detail"]["results"] == {call_id: {"item": "stools", "in_stock": 42}}
    # Takeover markers: the dead worker (epoch 1), the operator (epoch 2), the sweeper (3).
    epochs = [(a["epoch"], a["by_operator"]) for a in detail["attempts"]]
    assert epochs == [(1, None), (2, "ana"), (3, None)]
    assert detail["run"]["epoch"] == 3 and detail["run"]["owner"] == service.worker.worker_id


async def test_bad_resolutions_are_refused_and_change_nothing(service: Service) -> None:
    run, call_id = await park_with_unanswered_call(service, "resolve-bad")
    url = f"/v1/runs/{run.run_id}/resolve"
    before = await service.stats()
    refused = [
        ({"by": "ana", "results": {"call-nope": {"x": 1}}}, 422, "not an unanswered call"),
        ({"by": "ana"}, 422, "exactly one of 'result' and 'results'"),
        ({"by": "ana", "result": 1, "results": {call_id: 1}}, 422, "exactly one"),
        ({"by": "", "result": 1}, 422, "by"),
        ({"by": "ana", "result": 1, "extra": True}, 422, "extra"),
        ({"by": "ana", "result": "a\u0000b"}, 422, "NUL"),
    ]
    for body, status, words in refused:
        response = await service.client.post(url, json=body)
        assert response.status_code == status, (body, response.text)
        assert words in response.json()["error"]["message"], (body, response.text)
    missing = await service.client.post("/v1/runs/run-nope/resolve", json={"by": "a", "result": 1})
    assert missing.status_code == 404
    anon = await service.anon.post(url, json={"by": "a", "result": 1})
    assert anon.status_code == 401
    assert await service.stats() == before
    assert (await RunLedger(service.store).get(run.run_id)).status.value == "PARKED"  # type: ignore[union-attr]

    # A run that is not parked, and a parked run with no unanswered call.
    done = await service.client.post("/v1/users/u1/sessions/plain/runs", json={"message": "x"})
    done_id = done.json()["run"]["run_id"]
    await wait_status(service, done_id, "DONE")
    not_parked = await service.client.post(
        f"/v1/runs/{done_id}/resolve", json={"by": "ana", "result": 1}
    )
    assert not_parked.status_code == 409, not_parked.text
    assert "only a PARKED or FAILED run is resolved" in not_parked.json()["error"]["message"]


async def test_abandon_closes_a_parked_run_once(service: Service) -> None:
    run, _ = await park_with_unanswered_call(service, "abandon-1")
    url = f"/v1/runs/{run.run_id}/abandon"
    before = await service.stats()
    no_reason = await service.client.post(url, json={"by": "ana"})
    assert no_reason.status_code == 422
    assert await service.stats() == before
    first = await service.client.post(url, json={"by": "ana", "reason": "customer refunded"})
    assert first.status_code == 200, first.text
    assert first.json()["changed"] is True
    assert first.json()["run"]["status"] == "FAILED"
    assert first.json()["run"]["last_error"] == "abandoned by ana: customer refunded"
    again = await service.client.post(url, json={"by": "bo", "reason": "again"})
    assert again.status_code == 200 and again.json()["changed"] is False
    assert "already abandoned" in again.json()["message"]
    assert again.json()["run"]["last_error"] == "abandoned by ana: customer refunded"
    actions = (await service.client.get("/v1/actions", params={"run_id": run.run_id})).json()
    assert [(a["action"], a["actor"]) for a in actions["actions"]] == [("abandon", "ana")]
    assert actions["actions"][0]["detail"] == {
        "previous_error": "outcome unknown: check_stock may have acted"
    }
    closed = await service.client.post(
        f"/v1/runs/{run.run_id}/resolve", json={"by": "bo", "result": {"in_stock": 1}}
    )
    assert closed.status_code == 409 and "was abandoned by ana" in closed.text
    # The sweeper never takes an abandoned run back.
    await service.worker._sweep_once()
    assert (await RunLedger(service.store).get(run.run_id)).status.value == "FAILED"  # type: ignore[union-attr]


async def test_cancel_a_queued_run_at_once_and_a_running_one_through_its_owner(
    service: Service,
) -> None:
    ledger = RunLedger(service.store, lease_seconds=30)
    await service.worker.sessions.create_session(app_name=APP, user_id="u1", session_id="c1")
    # A run held by a live worker elsewhere, and one queued behind it.
    holder = await ledger.submit(
        app_name=APP, user_id="u1", session_id="c1", request={"parts": []}, owner="other-worker"
    )
    held = await ledger.claim_queued(holder.run_id, "other-worker")
    assert held is not None
    queued = await ledger.submit(
        app_name=APP, user_id="u1", session_id="c1", request={"parts": []}, owner="other-worker"
    )
    answer = await service.client.post(
        f"/v1/runs/{queued.run_id}/cancel", json={"by": "ana", "reason": "duplicate order"}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["run"]["status"] == "CANCELLED" and answer.json()["changed"]
    assert answer.json()["run"]["last_error"] == "cancelled by ana: duplicate order"
    assert "CANCELLED" in answer.json()["message"]

    running = await service.client.post(f"/v1/runs/{holder.run_id}/cancel", json={"by": "ana"})
    assert running.status_code == 200
    assert running.json()["run"]["status"] == "RUNNING" and running.json()["changed"]
    assert "next heartbeat" in running.json()["message"]
    assert await ledger.cancel_requested(held.lease) == "ana"
    # The owner learns it from its own renewal (one statement, the shape a batch returns).
    renewed = await ledger.renew(held.lease)
    assert renewed.ok and renewed.cancel_requested and renewed.cancel_requested_by == "ana"
    assert not (await ledger.renew(queued.lease)).ok  # the queued one is CANCELLED
    twice = await service.client.post(f"/v1/runs/{holder.run_id}/cancel", json={"by": "bo"})
    assert twice.json()["changed"] is False and "already requested" in twice.json()["message"]
    # The owner stops it at its heartbeat.
    assert await ledger.finish_cancelled(held.lease)
    ended = await service.client.post(f"/v1/runs/{holder.run_id}/cancel", json={"by": "bo"})
    assert ended.json()["changed"] is False
    assert ended.json()["run"]["status"] == "CANCELLED"
    counts = (await service.client.get("/v1/runs-by-status")).json()["counts"]
    assert counts["CANCELLED"] == 2
    actions = (await service.client.get("/v1/actions")).json()["actions"]
    assert [(a["run_id"], a["status_after"], a["detail"]["outcome"]) for a in actions] == [
        (holder.run_id, "RUNNING", "requested"),
        (queued.run_id, "CANCELLED", "cancelled"),
    ]


async def test_a_run_asked_to_stop_whose_owner_died_is_cancelled_not_redriven(
    store_url: str,
) -> None:
    # A worker whose loops are not running: the test's own sweep is the only one.
    async with open_store(store_url) as store:
        worker = Worker(app=stock_app(), store=store, settings=settings_for(store_url))
        ledger = RunLedger(store, lease_seconds=30)
        await worker.sessions.create_session(app_name=APP, user_id="u1", session_id="c2")
        run = await ledger.submit(
            app_name=APP, user_id="u1", session_id="c2", request={"parts": [{"text": "x"}]},
            owner="dying-worker",
        )  # fmt: skip
        assert await ledger.claim_queued(run.run_id, "dying-worker") is not None
        asked = await worker.ops.cancel(run.run_id, by="ana")
        assert asked.run.status.value == "RUNNING" and asked.changed
        await worker._sweep_once()
        assert (await ledger.get(run.run_id)).status.value == "RUNNING"  # type: ignore[union-attr]
        await ledger.backdate(run.run_id, 3600)  # the owner died: its lease ran out
        await worker._sweep_once()
        after = await ledger.get(run.run_id)
        assert after is not None and after.status.value == "CANCELLED"
        assert after.owner == "dying-worker" and after.epoch == 1  # never claimed again
        session = await worker.sessions.get_session(app_name=APP, user_id="u1", session_id="c2")
        assert session is not None and session.events == []  # nothing was driven


async def test_the_worker_stops_its_own_running_run_when_cancelled(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DURABLE_ADK_DEMO_TOOL_SECONDS", "120")
    started = await service.client.post(
        "/v1/users/u1/sessions/slow/runs", json={"message": "lamps"}
    )
    run_id = started.json()["run"]["run_id"]
    await wait_status(service, run_id, "RUNNING")
    answer = await service.client.post(f"/v1/runs/{run_id}/cancel", json={"by": "ana"})
    assert answer.json()["run"]["status"] == "RUNNING"
    ended = await wait_status(service, run_id, "CANCELLED", "DONE", "FAILED")
    assert ended["status"] == "CANCELLED" and ended["last_error"] == "cancelled by ana"
    deadline = time.monotonic() + 60
    while run_id in service.worker.active_runs:  # its task ends just after the row does
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    detail = (await service.client.get(f"/v1/runs/{run_id}")).json()
    assert not any("in stock" in t for t in texts(detail))  # the tool's answer never came


async def test_retry_is_recorded(service: Service) -> None:
    run, _ = await park_with_unanswered_call(service, "retry-1")
    retried = await service.client.post(
        f"/v1/runs/{run.run_id}/retry", json={"by": "ana", "reason": "tool is idempotent now"}
    )
    assert retried.status_code == 200 and retried.json()["status"] == "QUEUED"
    refused = await service.client.post(f"/v1/runs/{run.run_id}/retry")
    assert refused.status_code in (409, 200)
    (action,) = (await service.client.get("/v1/actions", params={"run_id": run.run_id})).json()[
        "actions"
    ]
    assert (action["action"], action["actor"], action["reason"]) == (
        "retry",
        "ana",
        "tool is idempotent now",
    )


async def test_many_apps_on_one_database(service: Service) -> None:
    other, _ = await park_with_unanswered_call(service, "apps-1", app_name="billing_app")
    mine, _ = await park_with_unanswered_call(service, "apps-2")
    listed = (await service.client.get("/v1/runs", params={"app_name": "billing_app"})).json()
    assert [r["run_id"] for r in listed["runs"]] == [other.run_id]
    assert listed["runs"][0]["app_name"] == "billing_app"
    everyone = (await service.client.get("/v1/runs")).json()["runs"]
    assert {r["run_id"] for r in everyone} == {other.run_id, mine.run_id}
    counts = (await service.client.get("/v1/runs-by-status", params={"app_name": APP})).json()
    assert counts["counts"]["PARKED"] == 1
    letters = (await service.client.get("/v1/dead-letters", params={"app_name": APP})).json()
    assert [d["run_id"] for d in letters["dead_letters"]] == [mine.run_id]
    apps = (await service.client.get("/v1/apps")).json()
    assert apps == {"serving": APP, "apps": {APP: 1, "billing_app": 1}}

    # Another app's run: shown with its own events, not classified with this app's agent.
    detail = (await service.client.get(f"/v1/runs/{other.run_id}")).json()
    assert detail["finding"] is None
    assert "of app 'billing_app'" in detail["note"] and APP in detail["note"]
    assert detail["run"]["app_name"] == "billing_app" and len(detail["events"]) == 2
    own = (await service.client.get(f"/v1/runs/{mine.run_id}")).json()
    assert own["finding"]["cls"] == "TOOL_UNANSWERED" and own["note"] is None

    # A bad app filter is refused.
    bad = await service.client.get("/v1/runs", params={"app_name": "a/b"})
    assert bad.status_code == 422


async def test_library_operations_need_no_worker(store_url: str) -> None:
    async with open_store(store_url) as store:
        ops = Operations(store)
        ledger = RunLedger(store)
        run = await ledger.submit(
            app_name=APP, user_id="u1", session_id="lib", request={"parts": []}, owner="w"
        )
        first = await ops.cancel(run.run_id, by="cli-user", reason="test")
        assert first.changed and first.run.status.value == "CANCELLED"
        second = await ops.cancel(run.run_id, by="cli-user")
        assert not second.changed and "already CANCELLED" in second.message
        assert [a.action for a in await ops.actions(run_id=run.run_id)] == ["cancel"]
        # A cancelled run is never claimed by recovery.
        await ledger.backdate(run.run_id, 3600)
        assert await ledger.claim_expired("sweeper") == []
