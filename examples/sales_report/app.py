"""The 19-minute sales report of seed 003, scaled to seconds, that survives every kill.

A user asks for the Q3 EMEA sales report. The model calls
``start_sales_report``, a long-running tool on the job table: it creates job
``report:2026-Q3:EMEA`` (a 45-minute deadline), submits it to the report
builder (a real HTTP server in its own process) and answers "pending" at once.
Five minutes later the user asks something else; that turn runs normally. At
minute 19 the builder posts the signed completion to our webhook; the resumer
claims the job and answers the open call, behind the session's current turn,
and the model tells the user the report is ready. At minute 21 the builder
retries the same webhook: it changes nothing. One minute of the seed is
``--minute`` seconds here (default 0.1: the whole story takes about 2.5 s).

The webhook receiver is the small stand-in of :mod:`durable_adk.testing.webhook_receiver`
(the HTTP service mounts the same handler).

Command line::

    python -m examples.sales_report.app demo --db URL [--minute 0.1] [--root llm|sequential]
    python -m examples.sales_report.app run --db URL --session S --builder URL
    python -m examples.sales_report.app resume --db URL --builder URL

``demo`` plays the whole story in one process and prints its timeline and a
JSON summary. ``run`` (the user's first turn) and ``resume`` (one resumer
pass) are what crash tests kill at an armed crash point
(``DURABLE_ADK_CRASH_AT``): ``long_running.before_start``,
``long_running.after_start``, ``long_running.before_submit``,
``long_running.before_confirm``, ``long_running.after_submit``,
``resume.after_claim``, ``resume.after_submit``, ``resume.after_mark`` or
``sales_report.final_model`` (the model's final answer, after the result was
stored). :func:`recover` is the fresh worker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
import warnings
from typing import Any, Protocol

from google.adk.agents import BaseAgent, LlmAgent, SequentialAgent
from google.adk.events.event import Event
from google.adk.models.llm_request import LlmRequest

from durable_adk import (
    DurableLongRunningTool,
    DurableRunner,
    ExpirySweeper,
    Job,
    JobTable,
    Resumer,
    RunStatus,
    Store,
    Submitter,
    long_running_tool,
    open_store,
    reattach_open_calls,
)
from durable_adk.testing import Call, Say, ScriptedModel, crash_point
from durable_adk.testing.harness import sweep_as_fresh_worker
from durable_adk.testing.report_builder import ReportBuilder, ReportBuilderClient
from durable_adk.testing.scripted_model import Turn
from durable_adk.testing.webhook_receiver import WebhookReceiver

APP_NAME = "sales"
USER_ID = "dana"
SESSION_ID = "q3-report"
SECRET = "sales-report-webhook-secret"
JOB_ID = "report:2026-Q3:EMEA"
ASK = "Please build the Q3 EMEA sales report."
OTHER = "Meanwhile: what was our Q2 revenue in EMEA?"
OTHER_ANSWER = "Q2 revenue in EMEA was 4.2M EUR."
REGIONS = ("EMEA", "AMER", "APAC")


def start_sales_report(quarter: str, region: str) -> dict[str, Any]:
    """Starts building the sales report of a quarter and region; the result arrives later."""
    if not re.fullmatch(r"\d{4}-Q[1-4]", quarter):
        raise ValueError("quarter must look like 2026-Q3")
    if region not in REGIONS:
        raise ValueError(f"region must be one of {', '.join(REGIONS)}")
    return {"message": "Report build started; typical time is 15-25 minutes."}


class Builder(Protocol):
    """What the tool needs of the report builder (its HTTP client, or a test's fake)."""

    def submit(self, job_id: str, quarter: str, region: str) -> Any:
        """Starts a build; the job id is its identity."""

    def cancel(self, job_id: str) -> Any:
        """Stops a build."""


def report_tool(builder: Builder, *, minute: float) -> DurableLongRunningTool:
    """``start_sales_report`` on the job table, submitting to the builder."""

    def submit(job: Job) -> None:
        builder.submit(job.job_id, job.request["quarter"], job.request["region"])

    def cancel(job: Job) -> None:
        builder.cancel(job.job_id)

    return long_running_tool(
        start_sales_report,
        job_key="report:{quarter}:{region}",
        deadline=45 * minute,
        submit=submit,
        cancel=cancel,
    )


def _latest_answer(request: LlmRequest) -> dict[str, Any]:
    for content in reversed(request.contents):
        for part in content.parts or ():
            if part.function_response is not None:
                return dict(part.function_response.response or {})
    return {}


def reply_to_report(request: LlmRequest) -> Turn:
    """The model's turn after any answer to the report call (pending, progress, final)."""
    answer = _latest_answer(request)
    status = answer.get("status")
    if status == "pending":
        return Say(f"The build has started ({answer['job_id']}): {answer['message']}")
    if status == "running":
        return Say(f"Still building: {answer.get('progress')}.")
    crash_point("sales_report.final_model")
    if status == "done":
        return Say(f"Your report is ready: {answer['url']} ({answer['row_count']} rows).")
    if status == "expired":
        return Say("Sorry, the report did not finish in time. Shall I try again?")
    return Say(f"I could not build the report: {answer.get('message', status)}")


def build_agent(builder: Builder, *, minute: float, root: str = "llm") -> BaseAgent:
    """The reports agent (an LlmAgent root), or reports -> mailer (a sequential root)."""
    model = ScriptedModel(
        {
            "reports": [
                Call("start_sales_report", {"quarter": "2026-Q3", "region": "EMEA"}),
                reply_to_report,
                Say(OTHER_ANSWER),
            ],
            "mailer": [Say("I emailed the report link to the sales team.")],
        }
    )
    reports = LlmAgent(
        name="reports",
        model=model,
        instruction="Build sales reports with start_sales_report; tell the user what happens.",
        tools=[report_tool(builder, minute=minute)],
    )
    if root == "llm":
        return reports
    mailer = LlmAgent(name="mailer", model=model, instruction="Email the report link.")
    with warnings.catch_warnings():  # deprecated in ADK 2.x, yet the root whose re-drive is exact
        warnings.simplefilter("ignore", DeprecationWarning)
        return SequentialAgent(name="pipeline", sub_agents=[reports, mailer])


def make_runner(
    store: Store, worker: str, builder_url: str, *, minute: float = 0.1, root: str = "llm"
) -> DurableRunner:
    """The DurableRunner every process of this example uses.

    Its requests to the builder carry ``X-Caller-Worker: <worker>``.
    """
    client = ReportBuilderClient(builder_url, caller={"worker": worker})
    agent = build_agent(client, minute=minute, root=root)
    return DurableRunner(app=agent, app_name=APP_NAME, store=store, worker_id=worker, lease=30.0)


def texts(events: list[Event]) -> list[str]:
    """The agents' texts among events."""
    return [
        p.text
        for e in events
        if e.author != "user" and e.content
        for p in e.content.parts or ()
        if p.text
    ]


async def run(db: str, session_id: str, builder_url: str) -> str:
    """The user's first turn; returns the run's status."""
    async with open_store(db) as store:
        runner = make_runner(store, "worker-A", builder_url)
        async for _ in runner.run(user_id=USER_ID, session_id=session_id, message=ASK):
            pass
        runs = [r for r in await runner.ledger.list_runs() if r.session_id == session_id]
        return runs[0].status.value if runs else "NONE"


async def resume(db: str, builder_url: str) -> list[str]:
    """One resumer pass; returns the resume runs' ids."""
    async with open_store(db) as store:
        resumer = Resumer(make_runner(store, "resumer-A", builder_url), gather=0.0)
        return [r.run_id for r in await resumer.resume_once(wait=True)]


async def recover(store: Store, builder_url: str, *, worker: str = "worker-B") -> dict[str, Any]:
    """A fresh worker takes over: recovers runs, re-attaches open calls, submits, resumes.

    Other workers' leases, submission attempts and resume claims are moved
    back on the database clock instead of waited out (they are dead: the test
    killed them).
    """
    runner = make_runner(store, worker, builder_url)
    jobs = JobTable(store)
    report = await sweep_as_fresh_worker(runner)
    reattached: list[str] = []
    for entry in report:
        if entry["status"] == RunStatus.PAUSED.value:
            found = await reattach_open_calls(
                runner, jobs, user_id=USER_ID, session_id=entry["session"]
            )
            reattached.extend(j.job_id for j in found)
    for job in await jobs.list_jobs(limit=1000):
        if job.submitted_at is None and job.submit_after is not None:
            await jobs.backdate_submit(job.job_id, 3600)
    submitted = await Submitter(jobs, runner=runner).submit_once()
    for job in await jobs.list_jobs(limit=1000):
        if job.resume_owner not in (None, worker) and job.resumed_at is None:
            await jobs.backdate(job.job_id, 3600)
    resumed = await Resumer(runner, jobs, gather=0.0).resume_once(wait=True)
    return {
        "recovered": report,
        "reattached": reattached,
        "submitted": [j.job_id for j in submitted],
        "resumed": [list(r.job_ids) for r in resumed],
    }


async def demo(db: str, *, minute: float = 0.1, root: str = "llm") -> dict[str, Any]:
    """Plays the seed's timeline; returns what happened."""
    started = 0.0
    timeline: list[str] = []

    def say(who: str, text: str) -> None:
        line = f"[minute {(time.monotonic() - started) / minute:5.1f}] {who}: {text}"
        timeline.append(line)
        print(line, flush=True)

    async with open_store(db) as store:
        jobs = JobTable(store)
        async with WebhookReceiver(jobs, SECRET) as receiver:
            with ReportBuilder(
                receiver.url, SECRET, delay=19 * minute, repeat_after=2 * minute
            ) as builder:
                runner = make_runner(store, "worker-A", builder.url, minute=minute, root=root)

                async def push(job: Job, event: Event) -> None:
                    for text in texts([event]):
                        say("agent (resumed)", text)

                resumer = Resumer(runner, jobs, interval=minute / 2, gather=0.0, on_event=push)
                expiry = ExpirySweeper(jobs, resumer=resumer, interval=minute * 5)

                async def turn(text: str) -> None:
                    say("user", text)
                    async for event in runner.run(
                        user_id=USER_ID, session_id=SESSION_ID, message=text
                    ):
                        for reply in texts([event]):
                            say("agent", reply)

                async with resumer.serve(), expiry.serve():
                    started = time.monotonic()
                    await turn(ASK)
                    await asyncio.sleep(5 * minute)
                    await turn(OTHER)
                    client = ReportBuilderClient(builder.url)
                    for _ in range(int(60 / minute)):
                        build = client.build(JOB_ID) or {}
                        job = await jobs.get(JOB_ID)
                        if len(build.get("webhooks", [])) >= 2 and job and job.resumed_at:
                            break
                        await asyncio.sleep(minute / 2)
                    for _ in range(int(60 / minute)):  # let the resume run finish
                        live = [
                            r
                            for r in await runner.ledger.list_runs()
                            if r.status in (RunStatus.QUEUED, RunStatus.RUNNING)
                        ]
                        if not live:
                            break
                        await asyncio.sleep(minute / 2)
                stats = client.stats()
                build = client.build(JOB_ID) or {}
        job = await jobs.get(JOB_ID)
        session = await runner.sessions.get_session(
            app_name=APP_NAME, user_id=USER_ID, session_id=SESSION_ID
        )
        events = list(session.events) if session else []
        answers = [
            r.response for e in events if e.author == "user" for r in e.get_function_responses()
        ]
        return {
            "timeline": timeline,
            "job_state": job.state.value if job else None,
            "submissions": stats["submissions"],
            "webhook_answers": build.get("webhooks", []),
            "accepted": receiver.received,
            "answers": answers,
            "texts": texts(events),
            "runs": sorted(r.status.value for r in await runner.ledger.list_runs()),
        }


def main() -> None:
    """Command line of the example's processes."""
    parser = argparse.ArgumentParser(prog="python -m examples.sales_report.app")
    parser.add_argument("action", choices=["demo", "run", "resume"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--session", default=SESSION_ID)
    parser.add_argument("--builder", default="")
    parser.add_argument("--minute", type=float, default=0.1)
    parser.add_argument("--root", choices=["llm", "sequential"], default="llm")
    args = parser.parse_args()
    if args.action == "demo":
        summary = asyncio.run(demo(args.db, minute=args.minute, root=args.root))
        summary.pop("timeline")
        print(json.dumps(summary))
    elif args.action == "run":
        print(json.dumps({"status": asyncio.run(run(args.db, args.session, args.builder))}))
    else:
        print(json.dumps({"resumed": asyncio.run(resume(args.db, args.builder))}))


if __name__ == "__main__":
    main()
