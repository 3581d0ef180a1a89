"""The completion webhook, both backends: verified, parsed, applied once; doubt changes nothing."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry

from durable_adk.effect_tables.jobs import JobState, JobTable
from durable_adk.metrics import Metrics
from durable_adk.store import Store
from durable_adk.webhooks import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    BadSignature,
    MalformedBody,
    StaleTimestamp,
    UnknownJob,
    WebhookError,
    handle_job_webhook,
    sign,
)

SECRET = "s3cret"
NOW = 1_800_000_000.0
JOB = "report:2026-Q3:EMEA"


def body_of(**fields: object) -> bytes:
    payload = {"job_id": JOB, "state": "SUCCEEDED", "result": {"url": "https://r/1"}}
    payload.update(fields)
    return json.dumps(payload).encode()


@pytest.fixture
async def jobs(store: Store) -> JobTable:
    table = JobTable(store)
    await table.create(JOB, tool_name="start_report", deadline=60)
    return table


async def unchanged(jobs: JobTable) -> None:
    job = await jobs.get(JOB)
    assert job is not None and job.state is JobState.STARTED and job.result is None


async def test_a_signed_completion_completes_and_its_duplicate_changes_nothing(
    jobs: JobTable,
) -> None:
    body = body_of()
    first = await handle_job_webhook(jobs, SECRET, sign(SECRET, body, NOW), body, NOW)
    again = await handle_job_webhook(jobs, SECRET, sign(SECRET, body, NOW + 5), body, NOW + 5)
    late = body_of(state="FAILED", result={"error": "late"})
    last = await handle_job_webhook(jobs, SECRET, sign(SECRET, late, NOW), late, NOW)
    assert (first.status, first.changed, first.state) == (200, True, JobState.SUCCEEDED)
    assert (again.status, again.changed) == (200, False)
    assert (last.status, last.changed, last.state) == (200, False, JobState.SUCCEEDED)
    kept = {"url": "https://r/1"}
    assert first.body() == {"job_id": JOB, "state": "SUCCEEDED", "changed": True, "result": kept}
    # The late sender is told what the job kept, not its own result.
    assert last.body() == {"job_id": JOB, "state": "SUCCEEDED", "changed": False, "result": kept}
    job = await jobs.get(JOB)
    assert job is not None and job.result == {"url": "https://r/1"}


async def test_header_names_are_case_insensitive(jobs: JobTable) -> None:
    body = body_of()
    headers = {k.lower(): v for k, v in sign(SECRET, body, NOW).items()}
    assert (await handle_job_webhook(jobs, SECRET, headers, body, NOW)).changed


@pytest.mark.parametrize(
    "tamper",
    ["wrong_secret", "other_body", "missing", "garbage", "other_timestamp"],
)
async def test_a_bad_signature_is_401_and_changes_nothing(jobs: JobTable, tamper: str) -> None:
    body = body_of()
    headers = sign(SECRET, body, NOW)
    if tamper == "wrong_secret":
        headers = sign("not-the-secret", body, NOW)
    elif tamper == "other_body":
        headers = sign(SECRET, body_of(result={"url": "evil"}), NOW)
    elif tamper == "missing":
        del headers[SIGNATURE_HEADER]
    elif tamper == "garbage":
        headers[SIGNATURE_HEADER] = "sha256=00"
    else:
        headers[TIMESTAMP_HEADER] = str(int(NOW) - 1)
    with pytest.raises(BadSignature) as caught:
        await handle_job_webhook(jobs, SECRET, headers, body, NOW)
    assert caught.value.status == 401
    await unchanged(jobs)


@pytest.mark.parametrize("skew", [-301, 301, 100_000])
async def test_a_stale_timestamp_is_401_and_changes_nothing(jobs: JobTable, skew: int) -> None:
    body = body_of()
    with pytest.raises(StaleTimestamp) as caught:
        await handle_job_webhook(jobs, SECRET, sign(SECRET, body, NOW + skew), body, NOW)
    assert caught.value.status == 401 and "from now" in str(caught.value)
    await unchanged(jobs)


async def test_a_missing_timestamp_is_refused(jobs: JobTable) -> None:
    body = body_of()
    headers = sign(SECRET, body, NOW)
    headers[TIMESTAMP_HEADER] = "yesterday"
    with pytest.raises(StaleTimestamp):
        await handle_job_webhook(jobs, SECRET, headers, body, NOW)
    await unchanged(jobs)


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"\xff\xfe",
        b"[1, 2]",
        json.dumps({"state": "SUCCEEDED", "result": {}}).encode(),
        json.dumps({"job_id": "", "state": "SUCCEEDED", "result": {}}).encode(),
        json.dumps({"job_id": JOB, "state": "EXPIRED", "result": {}}).encode(),
        json.dumps({"job_id": JOB, "state": "done", "result": {}}).encode(),
        json.dumps({"job_id": JOB, "state": "SUCCEEDED"}).encode(),
        json.dumps({"job_id": JOB, "state": "SUCCEEDED", "result": {}, "x": 1}).encode(),
        b"{" + b" " * (1 << 20) + b"}",
    ],
)
async def test_a_malformed_body_is_400_and_changes_nothing(jobs: JobTable, body: bytes) -> None:
    with pytest.raises(MalformedBody) as caught:
        await handle_job_webhook(jobs, SECRET, sign(SECRET, body, NOW), body, NOW)
    assert caught.value.status == 400 and str(caught.value)
    await unchanged(jobs)


async def test_an_unknown_job_is_404_and_creates_nothing(jobs: JobTable) -> None:
    body = body_of(job_id="report:1999-Q1:MARS")
    with pytest.raises(UnknownJob) as caught:
        await handle_job_webhook(jobs, SECRET, sign(SECRET, body, NOW), body, NOW)
    assert caught.value.status == 404 and "1999-Q1" in str(caught.value)
    assert isinstance(caught.value, WebhookError)
    assert await jobs.get("report:1999-Q1:MARS") is None
    await unchanged(jobs)


async def test_outcomes_are_counted(jobs: JobTable) -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    body = body_of()
    late = body_of(state="FAILED", result={"error": "late"})
    for payload in (body, body, late):
        await handle_job_webhook(
            jobs, SECRET, sign(SECRET, payload, NOW), payload, NOW, metrics=metrics
        )
    with pytest.raises(BadSignature):
        await handle_job_webhook(jobs, "wrong", sign(SECRET, body, NOW), body, NOW, metrics=metrics)
    counted = {
        outcome: registry.get_sample_value(
            "durable_adk_job_completions_total", {"outcome": outcome}
        )
        for outcome in ("applied", "duplicate", "late", "rejected")
    }
    assert counted == {"applied": 1, "duplicate": 1, "late": 1, "rejected": 1}
