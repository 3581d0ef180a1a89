"""A long-running call answered through the worker: the run pauses, the signed
webhook completes the job, the worker's resumer answers the call, and a
follower of the session sees the agent continue. Both backends."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
from google.adk.agents import LlmAgent
from google.adk.models.llm_request import LlmRequest
from svc_support import AUTH, parse_sse, settings_for

from durable_adk import webhooks
from durable_adk.adk.tools.long_running import long_running_tool
from durable_adk.service import Worker, create_app
from durable_adk.store import open_store
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.scripted_model import Turn


def start_report(quarter: str) -> dict[str, Any]:
    """Starts building the quarter's report; the result arrives later."""
    return {"message": f"building the {quarter} report"}


def _reply(request: LlmRequest) -> Turn:
    for content in reversed(request.contents):
        for part in content.parts or ():
            if part.function_response:
                answer = part.function_response.response or {}
                if answer.get("status") == "pending":
                    return Say("The report is being built.")
                return Say(f"Your report is ready: {answer.get('url')}")
    return Say("?")


def reporter() -> LlmAgent:
    tool = long_running_tool(start_report, job_key="report:{quarter}", deadline=600)
    model = ScriptedModel({"reporter": [Call("start_report", {"quarter": "Q3"}), _reply, _reply]})
    return LlmAgent(name="reporter", model=model, tools=[tool])


def texts(messages: list[Any]) -> list[str]:
    return [
        part["text"]
        for m in messages
        if m.event == "event"
        for part in (m.data["event"].get("content") or {}).get("parts", [])
        if part.get("text")
    ]


async def test_a_webhook_completion_resumes_the_paused_run(store_url: str) -> None:
    settings = settings_for(store_url)
    async with open_store(store_url) as store:
        worker = Worker(app=reporter(), store=store, settings=settings)
        http = create_app(worker)
        transport = httpx.ASGITransport(app=http)
        async with (
            worker.running(),
            httpx.AsyncClient(transport=transport, base_url="http://w", headers=AUTH) as client,
        ):
            started = await client.post(
                "/v1/users/ann/sessions/q3/runs", json={"message": "Build the Q3 report"}
            )
            first = list(
                parse_sse(iter((await client.get(started.json()["events_url"])).text.splitlines()))
            )
            assert first[-1].data["runs"] == {started.json()["run"]["run_id"]: "PAUSED"}
            assert texts(first)[-1] == "The report is being built."
            jobs = (await client.get("/v1/jobs")).json()["items"]
            assert [(j["job_id"], j["state"]) for j in jobs] == [("report:Q3", "STARTED")]

            body = json.dumps(
                {"job_id": "report:Q3", "state": "SUCCEEDED", "result": {"url": "q3.pdf"}}
            ).encode()
            signed = webhooks.sign("webhook-secret", body, time.time())
            done = await client.post("/webhooks/jobs", content=body, headers=signed)
            assert done.status_code == 200 and done.json()["changed"] is True

            # The resumer (a loop of this worker) answers the call as a new run of
            # the same invocation; a follower from the last event sees it.
            last = first[-1].data["last_seq"]
            deadline = time.monotonic() + 30
            while True:
                runs = (await client.get("/v1/users/ann/sessions/q3/runs")).json()["runs"]
                if len(runs) == 2 and runs[0]["status"] == "DONE":
                    break
                assert time.monotonic() < deadline, runs
                await asyncio.sleep(0.05)
            later = list(
                parse_sse(
                    iter(
                        (
                            await client.get(f"/v1/users/ann/sessions/q3/stream?after={last}")
                        ).text.splitlines()
                    )
                )
            )
            assert texts(later) == ["Your report is ready: q3.pdf"]
            assert runs[0]["invocation_id"] == runs[1]["invocation_id"]


async def test_the_worker_retries_a_refused_submission_until_accepted(store_url: str) -> None:
    attempts: list[str] = []

    def submit(job: Any) -> None:
        attempts.append(job.job_id)
        if len(attempts) == 1:
            raise ConnectionError("503 from the builder")

    tool = long_running_tool(
        start_report, job_key="report:{quarter}", deadline=600, submit=submit, submit_backoff=0.0
    )
    model = ScriptedModel({"reporter": [Call("start_report", {"quarter": "Q3"}), _reply, _reply]})
    agent = LlmAgent(name="reporter", model=model, tools=[tool])
    async with open_store(store_url) as store:
        worker = Worker(app=agent, store=store, settings=settings_for(store_url))
        transport = httpx.ASGITransport(app=create_app(worker))
        async with (
            worker.running(),
            httpx.AsyncClient(transport=transport, base_url="http://w", headers=AUTH) as client,
        ):
            started = await client.post(
                "/v1/users/ann/sessions/q3/runs", json={"message": "Build the Q3 report"}
            )
            await client.get(started.json()["events_url"])  # the turn ends PAUSED
            deadline = time.monotonic() + 30
            while (job := await worker.jobs.get("report:Q3")) is None or job.submitted_at is None:
                assert time.monotonic() < deadline, job  # the worker's submitter loop retries
                await asyncio.sleep(0.05)
            assert job.submit_attempts == 2 and attempts == ["report:Q3", "report:Q3"]
            await asyncio.sleep(3 * settings_for(store_url).resume_interval)
            assert len(attempts) == 2  # accepted: never submitted again
