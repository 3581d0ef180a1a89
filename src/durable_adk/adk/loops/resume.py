"""Answering long-running calls: the submitter, the resumer, progress, the expiry sweep.

The job table (:mod:`durable_adk.effect_tables.jobs`) knows when a call's job has its result;
this module turns that into the call's answer, through :class:`DurableRunner`,
so the invocation that made the call continues. Guarantees:

* **Submitted.** :class:`Submitter` retries the submission of every open job
  whose work the outside system has not accepted yet (a failed first attempt,
  a process that died between creating the job and submitting it), with
  back-off, until it is accepted or the deadline passes; one attempt at a
  time per job.
* **Once.** :class:`Resumer` claims ready calls atomically (no two resumers
  hold one call; every call attached to a job is one, including a second call
  with the same business identity), puts the answer on the run ledger as a run of the calling
  invocation, then records that run on the job. From then on the ledger and
  the recovery sweeper own delivery: a resume whose worker dies is re-driven
  with its answer. The runner drops an answer the session already holds, so a
  resume repeated after a crash between the two writes still answers once.
* **In turn.** The answer waits ``QUEUED`` behind the session's current run
  (the per-session queue): it never interleaves with a user's turn.
* **A pass never blocks behind one run.** A pass submits each answer and
  returns; each answer's run is driven in a task of its own, which waits for
  its turn in the session's queue (behind a run a dead worker left RUNNING,
  until recovery ends that one). The jobs behind it, in this pass or the
  next, are answered meanwhile. ``resume_once(wait=True)`` (a one-off pass,
  ``durable-adk recover``) drives them to their end before returning.
* **Exactly the call.** The answer is a ``FunctionResponse`` with the call's
  id and the tool's name, sent as a user message of the invocation that made
  the call. Jobs of one invocation that are ready together (the claim waits
  ``gather`` seconds for a still-open sibling) are answered in one message.
* **Progress, throttled.** :class:`ProgressSender` delivers a job's progress
  as an intermediate response with the same id, marked ``"interim": true``
  (it does not close the call), at most once per ``interval`` and only when
  it changed since the last delivery. A lost progress message is not retried.
* **Deadlines.** :class:`ExpirySweeper` turns open jobs past their deadline
  into ``EXPIRED`` with an explicit result, asks the tool's ``cancel`` hook to
  stop the work (best effort: a failing hook is logged) and resumes the calls.
  A real result arriving later is a no-op.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.adk.events.event import Event
from google.genai import types

from durable_adk import errors
from durable_adk.adk.eventlog.classify import INTERIM_KEY
from durable_adk.adk.loops.every import periodically
from durable_adk.adk.runs.ending import CANCELLED_JOB_RESULT
from durable_adk.adk.runs.path import HasRunPath
from durable_adk.adk.tools.long_running import DurableLongRunningTool, long_running_tools
from durable_adk.effect_tables.jobs import DEFAULT_EXPIRED_RESULT, Job, JobTable
from durable_adk.faults import crash_point
from durable_adk.tables.ledger import Run, RunStatus

logger = logging.getLogger("durable_adk.resume")

EventSink = Callable[[Job, Event], Awaitable[None] | None]
"""Receives each event of a resume or progress run (push it to the user)."""


def answer_of(job: Job) -> dict[str, Any]:
    """The function response body for a finished job: its result, with status and job id.

    A result that is a JSON object is sent as it is (``status`` and ``job_id``
    are added only when missing); any other value is sent as ``{"result": value}``.
    """
    body = dict(job.result) if isinstance(job.result, Mapping) else {"result": job.result}
    body.setdefault("status", job.state.value.lower())
    body.setdefault("job_id", job.job_id)
    return body


def response_part(job: Job, response: dict[str, Any]) -> types.Part:
    """A part answering the job's call: its id and the tool's name, repeated exactly."""
    return types.Part(
        function_response=types.FunctionResponse(
            id=job.function_call_id, name=job.tool_name, response=response
        )
    )


@dataclass(frozen=True, slots=True)
class Resumption:
    """One resume run.

    Attributes:
        run_id: The run that carries the answers.
        session_id: The session.
        invocation_id: The invocation that made the calls.
        job_ids: The jobs answered, in the message's order.
        status: The run's status when the resumer finished with it (None if
            driving it failed; the ledger says how).
    """

    run_id: str
    session_id: str
    invocation_id: str
    job_ids: tuple[str, ...]
    status: RunStatus | None


async def _emit(sink: EventSink | None, job: Job, event: Event) -> None:
    if sink is None:
        return
    result = sink(job, event)
    if asyncio.iscoroutine(result):
        await result


class Resumer:
    """Answers the calls of finished jobs through a DurableRunner."""

    def __init__(
        self,
        runner: HasRunPath,
        jobs: JobTable | None = None,
        *,
        lease: float = 30.0,
        gather: float = 1.0,
        batch: int = 100,
        interval: float = 1.0,
        on_event: EventSink | None = None,
    ) -> None:
        """Creates a resumer for the runner's app.

        Args:
            runner: Drives the resume runs; its worker id owns the claims.
            jobs: The job table (default: one over the runner's store).
            lease: Seconds a claim holds before another resumer may take it.
            gather: Seconds a finished job waits for an open sibling call of
                the same invocation, so both are answered in one message.
            batch: Most jobs claimed per pass.
            interval: Seconds between passes in :meth:`serve`.
            on_event: Receives every event of the resume runs.
        """
        self.runner = runner.path
        self.jobs = jobs or JobTable(runner.path.store)
        self.lease = lease
        self.gather = gather
        self.batch = batch
        self.interval = interval
        self.on_event = on_event
        self._drives: set[asyncio.Task[Resumption]] = set()

    @property
    def owner(self) -> str:
        """The name this resumer claims jobs under."""
        return self.runner.worker_id

    async def resume_once(self, *, wait: bool = False) -> list[Resumption]:
        """Claims ready jobs and submits their answers; returns one entry per run.

        Args:
            wait: Drive the answers' runs to their end before returning (a
                one-off pass; each entry's ``status`` is then the run's end).
                Else each run is driven in a task of its own, which waits for
                its turn in its session's queue, and the pass returns at once
                (``status``: the run's status when it was submitted): a run
                that cannot have its turn yet never holds up the pass.
        """
        claimed = await self.jobs.claim_for_resume(
            self.owner,
            app_name=self.runner.app_name,
            lease=self.lease,
            gather=self.gather,
            limit=self.batch,
        )
        if not claimed:
            return []
        crash_point("resume.after_claim")
        groups: dict[tuple[str, str, str], list[Job]] = {}
        for job in claimed:
            key = (job.user_id or "", job.session_id or "", job.invocation_id or "")
            groups.setdefault(key, []).append(job)
        done = await asyncio.gather(*(self._resume(group, wait) for group in groups.values()))
        return [r for r in done if r is not None]

    async def wait(self) -> list[Resumption]:
        """Waits for the answers' runs this resumer is driving to end; returns how each
        ended (only the drives still under way when called: one that already ended is
        on the ledger)."""
        ended: list[Resumption] = []
        while self._drives:
            results = await asyncio.gather(*list(self._drives), return_exceptions=True)
            ended.extend(r for r in results if isinstance(r, Resumption))
        return ended

    async def stop(self) -> None:
        """Stops driving the answers' runs (each is on the ledger: its lease runs out and
        recovery delivers it)."""
        drives, self._drives = self._drives, set()
        for task in drives:
            task.cancel()
        await asyncio.gather(*drives, return_exceptions=True)

    async def _resume(self, jobs: Sequence[Job], wait: bool) -> Resumption | None:
        first = jobs[0]
        assert first.user_id and first.session_id and first.invocation_id
        content = types.Content(role="user", parts=[response_part(j, answer_of(j)) for j in jobs])
        ids = tuple(j.job_id for j in jobs)
        path = self.runner
        try:
            run, content = await path.submit(
                user_id=first.user_id,
                session_id=first.session_id,
                message=content,
                invocation_id=first.invocation_id,
                checked=True,  # each job's result was checked by JobTable.complete
            )
        except errors.InvocationCancelled as exc:
            # A cancelled invocation takes no answer: the jobs are acknowledged
            # (a late completion changes nothing) and their work cancelled.
            await self._acknowledge(jobs, f"cancelled:{first.invocation_id}"[:200], str(exc))
            return Resumption("", first.session_id, first.invocation_id, ids, RunStatus.CANCELLED)
        except (errors.Conflict, errors.NotFound, errors.InvalidArgument) as exc:
            # The calls are answered already (another path got there first) or
            # no longer exist: nothing to resume, and nothing to resume again.
            await self._acknowledge(jobs, f"answered:{first.invocation_id}"[:200], str(exc))
            return Resumption("", first.session_id, first.invocation_id, ids, None)
        except errors.StoreError:
            await self.jobs.release(self.owner, jobs)
            raise
        crash_point("resume.after_submit")
        # The answer is on the ledger: recovery delivers it even if we die now.
        await self.jobs.mark_resumed(self.owner, jobs, run.run_id)
        crash_point("resume.after_mark")
        task = asyncio.create_task(
            self._drive(run, content, jobs), name=f"durable-adk-resume-{run.run_id}"
        )
        self._drives.add(task)
        task.add_done_callback(self._drives.discard)
        if wait:
            return await task
        return Resumption(run.run_id, first.session_id, first.invocation_id, ids, run.status)

    async def _drive(self, run: Run, content: types.Content, jobs: Sequence[Job]) -> Resumption:
        """Drives one answer's run when its turn comes; how it ended, as a Resumption."""
        first = jobs[0]
        assert first.session_id and first.invocation_id
        ids = tuple(j.job_id for j in jobs)

        async def emit(event: Event) -> None:
            await _emit(self.on_event, first, event)

        try:
            outcome = await self.runner.drive_submitted(run, content, resume=True, on_event=emit)
        except errors.VersionElsewhere as exc:  # a worker of the invocation's version goes on
            logger.info("resume run %s: %s", run.run_id, exc)
            return Resumption(run.run_id, first.session_id, first.invocation_id, ids, None)
        except Exception:
            logger.exception("resume run %s of jobs %s failed", run.run_id, ", ".join(ids))
            return Resumption(run.run_id, first.session_id, first.invocation_id, ids, None)
        return Resumption(run.run_id, first.session_id, first.invocation_id, ids, outcome.status)

    async def _acknowledge(self, jobs: Sequence[Job], marker: str, why: str) -> None:
        """Marks finished jobs handled without a run; cancels the work of cancelled ones."""
        await self.jobs.mark_resumed(self.owner, jobs, marker)
        logger.info("jobs %s: not resumed: %s", ", ".join(j.job_id for j in jobs), why)
        tools = long_running_tools(self.runner.app.root_agent)
        for job in jobs:
            tool = tools.get(job.tool_name)
            cancelled = isinstance(job.result, Mapping) and all(
                job.result.get(k) == v for k, v in CANCELLED_JOB_RESULT.items()
            )
            if tool is None or not cancelled:
                continue
            try:
                await tool.cancel_job(job)
            except Exception:
                logger.exception("cancel hook of %s failed for job %s", job.tool_name, job.job_id)

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[Resumer]:
        """Runs a pass every ``interval`` seconds until the block exits."""
        try:
            async with periodically(self.interval, self.resume_once, "resume"):
                yield self
        finally:
            await self.stop()


class Submitter:
    """Retries submissions the outside system has not accepted yet."""

    def __init__(
        self,
        jobs: JobTable,
        *,
        tools: Mapping[str, DurableLongRunningTool] | None = None,
        runner: HasRunPath | None = None,
        batch: int = 100,
        interval: float = 1.0,
    ) -> None:
        """Creates the submitter.

        Args:
            jobs: The job table.
            tools: The tools whose ``submit`` hooks to call, by name (default:
                the long-running tools of ``runner``'s app). Jobs of other
                tools are left to the workers that have them.
            runner: Where to find the tools when ``tools`` is not given.
            batch: Most attempts per pass.
            interval: Seconds between passes in :meth:`serve`.
        """
        if tools is None and runner is not None:
            tools = long_running_tools(runner.path.app.root_agent)
        self.jobs = jobs
        self.tools = {n: t for n, t in (tools or {}).items() if t.submit is not None}
        self.batch = batch
        self.interval = interval

    async def submit_once(self) -> list[Job]:
        """Makes every submission attempt due now; returns the jobs accepted."""
        accepted: list[Job] = []
        for name, tool in self.tools.items():  # each tool's attempts under its own lease
            claimed = await self.jobs.claim_submit(
                tools=[name], lease=tool.submit_lease, limit=self.batch
            )
            results = await asyncio.gather(*(tool.attempt_submit(self.jobs, j) for j in claimed))
            accepted.extend(j for j, ok in zip(claimed, results, strict=True) if ok)
        return accepted

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[Submitter]:
        """Runs a pass every ``interval`` seconds until the block exits."""
        async with periodically(self.interval, self.submit_once, "submit"):
            yield self


class ProgressSender:
    """Delivers jobs' progress as intermediate responses, throttled."""

    def __init__(
        self,
        runner: HasRunPath,
        jobs: JobTable | None = None,
        *,
        interval: float = 60.0,
        batch: int = 100,
        on_event: EventSink | None = None,
    ) -> None:
        """Creates the sender.

        Args:
            runner: Drives the progress runs.
            jobs: The job table (default: one over the runner's store).
            interval: At most one delivery per job per this many seconds.
            batch: Most jobs per pass.
            on_event: Receives every event of the progress runs.
        """
        self.runner = runner.path
        self.jobs = jobs or JobTable(runner.path.store)
        self.interval = interval
        self.batch = batch
        self.on_event = on_event

    async def send_once(self) -> list[Job]:
        """Delivers the progress due now; returns the jobs it was delivered for."""
        due = [
            j
            for j in await self.jobs.claim_progress(interval=self.interval, limit=self.batch)
            if j.app_name == self.runner.app_name
        ]
        await asyncio.gather(*(self._send(job) for job in due))
        return due

    async def _send(self, job: Job) -> None:
        assert job.user_id and job.session_id and job.invocation_id
        response = {
            "status": "running",
            INTERIM_KEY: True,
            "job_id": job.job_id,
            "progress": job.progress_sent,
        }
        message = types.Content(role="user", parts=[response_part(job, response)])

        async def emit(event: Event) -> None:
            await _emit(self.on_event, job, event)

        try:
            run, content = await self.runner.path.submit(
                user_id=job.user_id,
                session_id=job.session_id,
                message=message,
                invocation_id=job.invocation_id,
                checked=True,  # the progress was checked by JobTable.progress
            )
            await self.runner.drive_submitted(run, content, resume=True, on_event=emit)
        except errors.Conflict:
            # The call was answered meanwhile (the job finished), or its
            # invocation was cancelled: progress is moot.
            logger.info("progress of job %s not delivered: its call is answered", job.job_id)
        except Exception:
            logger.exception("progress of job %s was not delivered", job.job_id)

    @contextlib.asynccontextmanager
    async def serve(self, *, every: float = 1.0) -> AsyncIterator[ProgressSender]:
        """Looks for due progress every ``every`` seconds until the block exits."""
        async with periodically(every, self.send_once, "progress"):
            yield self


class ExpirySweeper:
    """Ends jobs past their deadline, cancels their work and resumes their calls."""

    def __init__(
        self,
        jobs: JobTable,
        *,
        tools: Mapping[str, DurableLongRunningTool] | None = None,
        resumer: Resumer | None = None,
        result: Mapping[str, Any] = DEFAULT_EXPIRED_RESULT,
        batch: int = 100,
        interval: float = 60.0,
    ) -> None:
        """Creates the sweeper.

        Args:
            jobs: The job table.
            tools: The tools whose ``cancel`` hooks to call, by name (default:
                the long-running tools of ``resumer``'s app).
            resumer: Resumes the expired calls after each pass (optional).
            result: The explicit result an expired call is answered with.
            batch: Most jobs expired per pass.
            interval: Seconds between passes in :meth:`serve`.
        """
        self.jobs = jobs
        if tools is None and resumer is not None:
            tools = long_running_tools(resumer.runner.app.root_agent)
        self.tools = dict(tools or {})
        self.resumer = resumer
        self.result = dict(result)
        self.batch = batch
        self.interval = interval

    async def expire_once(self, *, wait: bool = False) -> list[Job]:
        """Expires what is past its deadline, cancels it, resumes it; returns the expired jobs.

        Args:
            wait: Drive the answers' runs to their end (``Resumer.resume_once``).
        """
        expired = await self.jobs.expire(result=self.result, limit=self.batch)
        for job in expired:
            tool = self.tools.get(job.tool_name)
            if tool is None:
                continue
            try:
                await tool.cancel_job(job)
            except Exception:
                logger.exception("cancel hook of %s failed for job %s", job.tool_name, job.job_id)
        if expired and self.resumer is not None:
            await self.resumer.resume_once(wait=wait)
        return expired

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[ExpirySweeper]:
        """Runs a pass every ``interval`` seconds until the block exits."""
        async with periodically(self.interval, self.expire_once, "expiry"):
            yield self


async def reattach_open_calls(
    runner: HasRunPath, jobs: JobTable, *, user_id: str, session_id: str
) -> list[Job]:
    """Re-attaches (and if need be starts) the jobs of a session's open long-running calls.

    For a fresh worker after a crash: a worker that died between the model's
    call and the job's attach (or submit) left a call nothing would answer.
    Each job-backed tool of the runner's app finds its open calls and does
    what the tool would have done; idempotent, nothing is submitted twice.

    Returns:
        The jobs of the open calls.
    """
    path = runner.path
    session = await path.sessions.get_session(
        app_name=path.app_name, user_id=user_id, session_id=session_id
    )
    if session is None:
        return []
    found: list[Job] = []
    for tool in long_running_tools(path.app.root_agent).values():
        found.extend(
            await tool.reattach(
                jobs,
                session.events,
                app_name=path.app_name,
                user_id=user_id,
                session_id=session_id,
            )
        )
    return found
