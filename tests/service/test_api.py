"""The worker's HTTP API on both backends: runs, event stream, reconnect, operations,
the token, the body limit, the webhook, metrics and spans."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from svc_support import Service, parse_sse

from durable_adk import webhooks
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.effect_tables.jobs import JobTable
from durable_adk.effect_tables.sagas import SagaLedger
from durable_adk.service.follow import End, follow
from durable_adk.service.ops import SessionKey
from durable_adk.tables.ledger import RunLedger, RunStatus


async def start(service: Service, session: str, message: str = "lamps") -> dict[str, Any]:
    response = await service.client.post(
        f"/v1/users/u1/sessions/{session}/runs", json={"message": message}
    )
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    return body


async def stream(service: Service, url: str, **headers: str) -> list[Any]:
    response = await service.client.get(url, headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return list(parse_sse(iter(response.text.splitlines())))


async def wait_status(service: Service, run_id: str, *statuses: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        run = (await service.client.get(f"/v1/runs/{run_id}")).json()["run"]
        if run["status"] in statuses:
            return run
        assert time.monotonic() < deadline, f"run {run_id} stayed {run['status']}"
        await asyncio.sleep(0.05)


async def test_a_run_streams_its_events_until_it_is_done(service: Service) -> None:
    started = await start(service, "s1")
    # A new session is free: the run is claimed in the unit that records it.
    assert started["run"]["status"] == "RUNNING" and started["after_seq"] == 0
    messages = await stream(service, started["events_url"])
    events = [m for m in messages if m.event == "event"]
    assert [m.data["seq"] for m in events] == list(range(1, len(events) + 1))
    assert [m.id for m in events] == [str(m.data["seq"]) for m in events]
    texts = [
        p.get("text")
        for m in events
        for p in (m.data["event"].get("content") or {}).get("parts", [])
    ]
    assert "lamps" in texts and "7 in stock for 'lamps'." in texts
    end = messages[-1]
    assert end.event == "end"
    assert end.data == {
        "reason": "settled",
        "last_seq": len(events),
        "runs": {started["run"]["run_id"]: "DONE"},
    }
    detail = (await service.client.get(f"/v1/runs/{started['run']['run_id']}")).json()
    assert detail["run"]["status"] == "DONE"
    assert detail["finding"]["cls"] == "ACTUALLY_DONE"
    assert detail["request"] == {"parts": [{"text": "lamps"}], "role": "user"}
    assert [e["seq"] for e in detail["events"]] == [m.data["seq"] for m in events]


async def test_reconnect_follows_from_a_sequence_number(service: Service) -> None:
    first = await start(service, "s2", "chairs")
    whole = [m for m in await stream(service, first["events_url"]) if m.event == "event"]
    base = "/v1/users/u1/sessions/s2"
    # A client that saw event 2 comes back: by query, or by the SSE header.
    by_query = await stream(service, f"{base}/stream?after=2")
    by_header = await stream(service, f"{base}/stream", **{"Last-Event-ID": "2"})
    for messages in (by_query, by_header):
        assert [m.data["seq"] for m in messages if m.event == "event"] == [
            m.data["seq"] for m in whole[2:]
        ]
        assert messages[-1].event == "end"
    sliced = (await service.client.get(f"{base}/events", params={"after": 2, "limit": 2})).json()
    assert [e["seq"] for e in sliced["events"]] == [3, 4] and sliced["last_seq"] == 4
    # A second turn: its stream starts after the first turn's events.
    second = await start(service, "s2", "tables")
    assert second["after_seq"] == len(whole)
    later = [m for m in await stream(service, second["events_url"]) if m.event == "event"]
    assert later[0].data["seq"] == len(whole) + 1
    assert later[0].data["event"]["content"]["parts"][0]["text"] == "tables"
    runs = (await service.client.get(f"{base}/runs")).json()["runs"]
    assert [r["status"] for r in runs] == ["DONE", "DONE"]


async def test_follow_reads_the_store_not_the_worker(service: Service) -> None:
    # Events appended by anyone are seen by a follower: here the run is driven
    # by a second worker's runner object over the same store.
    from durable_adk.adk.runner import DurableRunner
    from durable_adk.demo.service_app import app as stock_app

    other = DurableRunner(app=stock_app(), store=service.store, worker_id="other")
    key = SessionKey("stock_assistant", "u9", "s9")
    await other.sessions.create_session(app_name=key.app_name, user_id="u9", session_id="s9")

    async def drive() -> None:
        async for _ in other.run(user_id="u9", session_id="s9", message="desks"):
            pass

    driving = asyncio.create_task(drive())
    seen = []
    async for item in follow(service.worker.ops, key, after=0, poll=0.02):
        seen.append(item)
    await driving
    assert isinstance(seen[-1], End) and seen[-1].reason == "settled"
    assert [getattr(i, "seq", None) for i in seen[:-1]] == list(range(1, len(seen)))


GUARDED = [
    ("GET", "/metrics"),
    ("GET", "/v1/runs"),
    ("GET", "/v1/runs-by-status"),
    ("GET", "/v1/runs/run-x"),
    ("POST", "/v1/runs/run-x/retry"),
    ("POST", "/v1/runs/run-x/cancel"),
    ("POST", "/v1/runs/run-x/resolve"),
    ("POST", "/v1/runs/run-x/abandon"),
    ("GET", "/v1/actions"),
    ("GET", "/v1/apps"),
    ("GET", "/v1/dead-letters"),
    ("GET", "/v1/stats"),
    ("GET", "/v1/jobs"),
    ("POST", "/v1/jobs/job-x/complete"),
    ("GET", "/v1/sagas"),
    ("GET", "/v1/a2a/pushes"),
    ("GET", "/v1/keys"),
    ("POST", "/v1/keys/rotate"),
    ("GET", "/v1/interrupts"),
    ("POST", "/v1/interrupts/call-x"),
    ("POST", "/v1/users/u1/sessions/s1/runs"),
    ("GET", "/v1/users/u1/sessions/s1/events"),
    ("GET", "/v1/users/u1/sessions/s1/stream"),
    ("GET", "/v1/users/u1/sessions/s1/runs"),
    ("GET", "/v1/users/u1/sessions/s1/unreadable"),
    ("POST", "/v1/users/u1/sessions/s1/events/event-x/repair"),
    ("GET", "/v1/schedules"),
    ("GET", "/v1/schedules/sched-x/ticks"),
    ("POST", "/v1/schedules/sched-x/pause"),
    ("POST", "/v1/schedules/sched-x/resume"),
    ("POST", "/v1/schedules/sched-x/trigger"),
    ("GET", "/v1/versions"),
    ("POST", "/v1/versions/1.0/drain"),
    ("POST", "/v1/versions/1.0/undrain"),
    ("POST", "/v1/versions/1.0/move"),
    ("POST", "/v1/versions/1.0/abandon"),
    ("POST", "/v1/purge"),
    ("POST", "/v1/users/u1/forget"),
]


async def test_every_operation_needs_the_token(service: Service) -> None:
    started = await start(service, "secret-session", "secret message")
    await stream(service, started["events_url"])
    spec = (await service.anon.get("/openapi.json")).json()
    routes = {
        (method.upper(), path)
        for path, operations in spec["paths"].items()
        for method, operation in operations.items()
        if operation.get("security")
    }
    assert len(routes) == len(GUARDED)
    before = await service.stats()
    for method, path in GUARDED:
        for headers in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": "Basic x"}):
            response = await service.anon.request(
                method, path, headers=headers, json={"message": "hi"}
            )
            assert response.status_code == 401, (method, path, response.text)
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.json() == {
                "error": {"code": "unauthorized", "message": "A valid bearer token is required."}
            }
            assert "secret" not in response.text
    assert await service.stats() == before
    health = (await service.anon.get("/healthz")).json()
    assert health["app_name"] == "stock_assistant" and not health["draining"]


async def test_oversized_and_hostile_requests_change_nothing(service: Service) -> None:
    before = await service.stats()
    url = "/v1/users/u1/sessions/s1/runs"
    huge = json.dumps({"message": "x" * 2_000_000}).encode()
    declared = await service.client.post(url, content=huge)
    assert declared.status_code == 413 and declared.json()["error"]["code"] == "body_too_large"

    async def chunks() -> Any:
        for _ in range(40):
            yield b"x" * 65536

    chunked = await service.client.post(url, content=chunks())
    assert chunked.status_code == 413
    for bad_path in (
        "/v1/users/u1/sessions/..%2F..%2Fetc/runs",
        "/v1/users/u1/sessions/" + "s" * 513 + "/runs",
        "/v1/users/u1/sessions/s%0A1/runs",
        "/v1/users/%00/sessions/s1/runs",
    ):
        response = await service.client.post(bad_path, json={"message": "hi"})
        assert response.status_code in (404, 422), (bad_path, response.text)
    for body in (
        {"message": ""},
        {"message": "a\x00b"},
        {},
        {"message": "hi", "content": {"parts": [{"text": "hi"}]}},
        {"content": {"role": "model", "parts": [{"text": "hi"}]}},
        {"content": {"parts": [{"function_response": {"name": "check_stock", "response": {}}}]}},
        {"message": "hi", "extra": 1},
        [1, 2],
    ):
        response = await service.client.post(url, json=body)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["error"]["code"] in ("invalid_request", "invalid_argument")
    not_json = await service.client.post(
        url, content=b"{nope", headers={"content-type": "application/json"}
    )
    assert not_json.status_code == 400, not_json.text
    assert not_json.json()["error"]["code"] == "bad_request"
    assert await service.stats() == before


async def park_a_run(service: Service, session: str) -> str:
    """A run parked for a person, as recovery leaves one ("outcome unknown")."""
    await service.worker.sessions.create_session(
        app_name="stock_assistant", user_id="u1", session_id=session
    )
    ledger = RunLedger(service.store)
    run = await ledger.submit(
        app_name="stock_assistant",
        user_id="u1",
        session_id=session,
        request={"role": "user", "parts": [{"text": "stools"}]},
        owner="dead-worker",
    )
    claimed = await ledger.claim_queued(run.run_id, "dead-worker")
    assert claimed is not None
    assert await ledger.park(
        claimed.lease,
        error="outcome unknown: send_invoice may have acted",
        classification="TOOL_UNANSWERED",
    )
    return run.run_id


async def test_retry_puts_a_parked_run_back_and_a_sweep_finishes_it(service: Service) -> None:
    run_id = await park_a_run(service, "parked-1")
    parked = (await service.client.get("/v1/runs", params={"status": "PARKED"})).json()["runs"]
    assert [r["run_id"] for r in parked] == [run_id]
    assert parked[0]["last_error"] == "outcome unknown: send_invoice may have acted"
    letters = (await service.client.get("/v1/dead-letters", params={"run_id": run_id})).json()
    assert [d["classification"] for d in letters["dead_letters"]] == ["TOOL_UNANSWERED"]
    counts = (await service.client.get("/v1/runs-by-status")).json()["counts"]
    assert counts["PARKED"] == 1 and set(counts) == {s.value for s in RunStatus}

    retried = await service.client.post(f"/v1/runs/{run_id}/retry")
    assert retried.status_code == 200 and retried.json()["status"] == "QUEUED"
    again = await service.client.post(f"/v1/runs/{run_id}/retry")
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
    done = await wait_status(service, run_id, "DONE")
    assert done["owner"] == service.worker.worker_id
    missing = await service.client.post("/v1/runs/run-nope/retry")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert (await service.client.get("/v1/runs/run-nope")).status_code == 404


@pytest.mark.parametrize("service", [{"drain_seconds": 0.2}], indirect=True)
async def test_drain_refuses_work_and_hands_back_leases(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DURABLE_ADK_DEMO_TOOL_SECONDS", "30")
    started = await start(service, "long")
    run_id = started["run"]["run_id"]
    await wait_status(service, run_id, "RUNNING")
    follower = asyncio.create_task(
        service.client.get(f"/v1/users/u1/sessions/long/stream?run_id={run_id}")
    )
    await asyncio.sleep(0.2)
    handed = await service.worker.drain()
    assert handed == [run_id]
    ended = list(parse_sse(iter((await follower).text.splitlines())))
    assert ended[-1].event == "end" and ended[-1].data["reason"] == "draining"
    refused = await service.client.post("/v1/users/u1/sessions/other/runs", json={"message": "hi"})
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "draining"
    # The lease is already expired, without back-off: another worker claims it now.
    ledger = RunLedger(service.store)
    (taken,) = await ledger.claim_expired("next-worker")
    assert taken.run_id == run_id and taken.attempts == 1 and taken.epoch == 2


async def test_metrics_count_runs_recoveries_and_lost_leases(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = await start(service, "m1")
    await stream(service, started["events_url"])
    # A run whose worker died before it started: the sweeper re-drives it.
    ledger = RunLedger(service.store)
    await service.worker.sessions.create_session(
        app_name="stock_assistant", user_id="u1", session_id="m2"
    )
    orphan = await ledger.submit(
        app_name="stock_assistant",
        user_id="u1",
        session_id="m2",
        request={"role": "user", "parts": [{"text": "beds"}]},
        owner="dead-worker",
    )
    await ledger.backdate(orphan.run_id, 3600)
    await wait_status(service, orphan.run_id, "DONE")
    # A run taken over while its tool works: the heartbeat finds the lease lost.
    monkeypatch.setenv("DURABLE_ADK_DEMO_TOOL_SECONDS", "3")
    slow = await start(service, "m3")
    await wait_status(service, slow["run"]["run_id"], "RUNNING")
    # RUNNING from the moment it is recorded: wait until its tool is at work.
    reader = DurableSessionService(service.store)
    deadline = time.monotonic() + 10
    while True:
        session = await reader.get_session(
            app_name="stock_assistant", user_id="u1", session_id="m3"
        )
        if session is not None and any(e.get_function_calls() for e in session.events):
            break
        assert time.monotonic() < deadline, "the slow run never called its tool"
        await asyncio.sleep(0.05)
    # The owner renews every second (the tests' 3 s lease): a renewal may land
    # between the backdate and the claim, so try again (the tool works for 3 s).
    # A lease of 0.3 s made the counts below flaky on a loaded machine: the whole
    # process stalled past it, the orphan's re-drive lost its lease, and the
    # sweeper's second re-drive was counted too (seen with three xdist workers).
    thief = RunLedger(service.store, lease_seconds=60)
    for _ in range(20):
        await ledger.backdate(slow["run"]["run_id"], 3600)
        stolen = await thief.claim_expired("thief")
        if stolen:
            break
    assert [r.run_id for r in stolen] == [slow["run"]["run_id"]]

    def sample(text: str, name: str) -> float:
        for line in text.splitlines():
            if line.split(" ")[0] == name:
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    deadline = time.monotonic() + 10
    while True:
        text = (await service.client.get("/metrics")).text
        if sample(text, "durable_adk_lease_renewal_failures_total") >= 1:
            break
        assert time.monotonic() < deadline, text
        await asyncio.sleep(0.1)
    assert sample(text, 'durable_adk_runs_finished_total{status="DONE"}') == 2
    assert sample(text, 'durable_adk_recoveries_total{action="redrive",cls="NOT_STARTED"}') == 1
    assert sample(text, 'durable_adk_runs{status="DONE"}') == 2
    assert sample(text, 'durable_adk_runs{status="RUNNING"}') == 1
    assert sample(text, "durable_adk_append_seconds_count") >= 10

    spans = service.spans.get_finished_spans()
    runs = [s for s in spans if s.name == "durable_adk.run"]
    recovered = [s for s in spans if s.name == "durable_adk.recovery"]
    assert {s.attributes["durable_adk.run_id"] for s in runs} >= {
        started["run"]["run_id"],
        orphan.run_id,
    }
    # Each run's last drive ended it DONE (with a 0.3 s lease a loaded machine may
    # cost a drive its lease first: that drive's span then ends without a status).
    for run_id in (started["run"]["run_id"], orphan.run_id):
        last = [s for s in runs if s.attributes["durable_adk.run_id"] == run_id][-1]
        assert last.attributes.get("durable_adk.status") == "DONE", (run_id, last.attributes)
    assert [s.attributes["durable_adk.found"] for s in recovered] == ["NOT_STARTED"]
    (redriven,) = [s for s in runs if s.attributes["durable_adk.run_id"] == orphan.run_id]
    assert redriven.parent is not None and redriven.parent.span_id == recovered[0].context.span_id


async def test_signed_webhook_completes_a_job_once(service: Service) -> None:
    jobs = JobTable(service.store)
    await jobs.create("report:2026-Q3", tool_name="build_report", deadline=600)
    body = json.dumps(
        {"job_id": "report:2026-Q3", "state": "SUCCEEDED", "result": {"url": "r.pdf"}}
    ).encode()
    headers = webhooks.sign("webhook-secret", body, time.time())
    forged = webhooks.sign("wrong-secret", body, time.time())
    refused = await service.anon.post("/webhooks/jobs", content=body, headers=forged)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "bad_signature"
    stale = webhooks.sign("webhook-secret", body, time.time() - 3600)
    assert (
        await service.anon.post("/webhooks/jobs", content=body, headers=stale)
    ).status_code == 401
    job = await jobs.get("report:2026-Q3")
    assert job is not None and job.state.value == "STARTED"

    first = await service.anon.post("/webhooks/jobs", content=body, headers=headers)
    assert first.status_code == 200 and first.json()["changed"] is True
    second = await service.anon.post("/webhooks/jobs", content=body, headers=headers)
    assert second.status_code == 200 and second.json()["changed"] is False
    unknown = json.dumps({"job_id": "nope", "state": "FAILED", "result": {}}).encode()
    missing = await service.anon.post(
        "/webhooks/jobs",
        content=unknown,
        headers=webhooks.sign("webhook-secret", unknown, time.time()),
    )
    assert missing.status_code == 404

    listed = (await service.client.get("/v1/jobs", params={"state": "SUCCEEDED"})).json()
    assert listed["available"] and [j["job_id"] for j in listed["items"]] == ["report:2026-Q3"]
    assert listed["items"][0]["result"] == {"url": "r.pdf"}
    late = await service.client.post(
        "/v1/jobs/report:2026-Q3/complete", json={"state": "FAILED", "result": {"err": 1}}
    )
    assert late.status_code == 200 and late.json() == {
        "job_id": "report:2026-Q3",
        "state": "SUCCEEDED",
        "changed": False,
        "result": {"url": "r.pdf"},  # the late sender learns what the job kept
    }
    metrics = (await service.client.get("/metrics")).text
    assert 'durable_adk_job_completions_total{outcome="applied"} 1.0' in metrics
    assert 'durable_adk_job_completions_total{outcome="duplicate"} 2.0' in metrics


async def test_sagas_are_listed(service: Service) -> None:
    await SagaLedger(service.store).begin(
        saga_id="e-1/trip",
        name="trip",
        app_name="stock_assistant",
        user_id="u1",
        session_id="s1",
        invocation_id="e-1",
    )
    listed = (await service.client.get("/v1/sagas")).json()
    assert listed["available"] and [s["saga_id"] for s in listed["items"]] == ["e-1/trip"]
    assert listed["items"][0]["status"] == "RUNNING"
    bad = await service.client.get("/v1/sagas", params={"status": "NOPE"})
    assert bad.status_code == 422


async def test_openapi_names_the_security_scheme(service: Service) -> None:
    spec = (await service.anon.get("/openapi.json")).json()
    assert "/v1/users/{user_id}/sessions/{session_id}/runs" in spec["paths"]
    assert "/webhooks/jobs" in spec["paths"]
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    start_op = spec["paths"]["/v1/users/{user_id}/sessions/{session_id}/runs"]["post"]
    assert start_op["security"] == [{"HTTPBearer": []}]
    page = await service.anon.get("/dashboard/")
    assert (
        page.status_code == 200 and "default-src 'self'" in page.headers["content-security-policy"]
    )


@pytest.mark.parametrize("service", [{"sync_tools": "loop"}], indirect=True)
async def test_a_worker_told_sync_tools_loop_runs_them_on_its_loop(service: Service) -> None:
    """``serve --sync-tools loop`` reaches the runner: no tool thread pool, the run as usual."""
    assert service.worker.runner.path.sync_tools == "loop"
    assert service.worker.runner.run_config.tool_thread_pool_config is None
    started = await start(service, "loop1")
    run = await wait_status(service, started["run"]["run_id"], "DONE", "FAILED")
    assert run["status"] == "DONE"
