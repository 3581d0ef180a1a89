"""Long-running tools on the job table: start, record, return pending.

``long_running_tool(start_report, job_key="report:{quarter}:{region}",
deadline=45 * 60, submit=builder.submit, cancel=builder.cancel)`` makes an ADK
:class:`~google.adk.tools.LongRunningFunctionTool` that never blocks on the
work. Each call:

* runs ``func`` with the call's arguments to validate them: a ``ValueError``
  (``durable_adk.errors.InvalidArgument`` is one) becomes an error answer to
  the model, ``{"status": "error", "message": ...}``, and no job is created;
* creates the job idempotently, its id formatted from the arguments (the
  work's business identity, the same for a repeated or re-driven call);
* attaches the call (app, user, session, invocation, function call id), which
  fills only empty columns, so a replay never re-points a job; a second call
  with the same business identity attaches beside the first and is answered
  too when the job ends;
* submits the work through ``submit(job)`` until the outside system accepts
  it: the call makes the first attempt if no other attempt holds the job; an
  attempt that fails (or a process that died before or during it) is retried
  with back-off by :class:`~durable_adk.adk.loops.resume.Submitter` passes until
  the deadline. The job id is the idempotency key downstream, so a repeated
  attempt is harmless;
* returns a small pending answer, ``{"status": "pending", "job_id": ...,
  "message": ...}``; the message is ``func``'s ``"message"`` if it returned
  one, so the model has something true to tell the user.

The job table comes from the session service of the durable run (as for
journaled tools) unless one is given; outside a durable run the tool answers
with an error rather than start work nobody could resume. In a durable run
with barrier commits the model's call and its job are written in one unit,
so no crash leaves one without the other. A call stored before its job
could be (per-event commits, or app code that needed a barrier before the
tool) leaves an open call in the session when the worker dies:
:meth:`DurableLongRunningTool.reattach` finds such calls and does the same
start from the stored arguments (nothing is submitted twice).
"""

from __future__ import annotations

import inspect
import logging
import re
import typing
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from datetime import timedelta
from typing import Any

from google.adk.events.event import Event
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.adk.tools.tool_context import ToolContext

from durable_adk import errors
from durable_adk.adk.commits.drive import start_job_with_events_of
from durable_adk.adk.eventlog.classify import FINAL_KEY
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.adk.shapes import agent_tree
from durable_adk.adk.shapes.marks import WITH_CALL_MARK
from durable_adk.adk.tools.journaling import as_async, template_fields
from durable_adk.effect_tables.jobs import Job, JobTable
from durable_adk.faults import crash_point

logger = logging.getLogger("durable_adk.long_running")


def refusal(message: str) -> dict[str, Any]:
    """The answer of a refused call: an error the model reads, marked final.

    Nothing was stored (no job, no timer), so nothing will answer the call
    later: the mark (:data:`~durable_adk.adk.eventlog.classify.FINAL_KEY`)
    closes it, and a run whose agent went on after it ends DONE, not PAUSED.
    """
    return {"status": "error", "message": message, FINAL_KEY: True}


SLEEP_NODE_CALL = re.compile(r"sleep-[0-9a-f]{16}")
"""The interrupt id a ``sleep_node`` pauses on (its ``adk_request_input``): a timer's call."""


def answered_by_a_job(name: str, call_id: str, job_tools: Collection[str]) -> bool:
    """Whether a long-running call is answered by a job or a timer, never by a person.

    A call of a job-backed tool (``job_tools``: :func:`long_running_tools`'
    names, ``durable_sleep`` among them) or a ``sleep_node``'s request: the
    job table answers it (the resumer, at the job's result or the timer's
    due time), so the interrupts inbox does not list it and no approvals
    deadline answers it.
    """
    if name in job_tools:
        return True
    return name == "adk_request_input" and SLEEP_NODE_CALL.fullmatch(call_id) is not None


JobHook = Callable[[Job], Any]
"""``submit`` and ``cancel`` hooks: sync or async functions of the job."""


def jobs_of(tool_context: ToolContext) -> JobTable | None:
    """The job table of the durable run a call belongs to (None outside one)."""
    service = tool_context.get_invocation_context().session_service
    return JobTable(service.store) if isinstance(service, DurableSessionService) else None


class DurableLongRunningTool(LongRunningFunctionTool):
    """A LongRunningFunctionTool whose calls are jobs on the job table.

    Made by :func:`long_running_tool`; the attributes are its arguments.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        job_key: str,
        deadline: float,
        submit: JobHook | None,
        cancel: JobHook | None,
        name: str,
        jobs: JobTable | None,
        submit_lease: float = 30.0,
        submit_backoff: float = 1.0,
        submit_backoff_max: float = 60.0,
    ) -> None:
        self.job_key = job_key
        self.submit_lease = submit_lease
        self.submit_backoff = submit_backoff
        self.submit_backoff_max = submit_backoff_max
        self.deadline = deadline
        self.submit = submit
        self.cancel = cancel
        self.jobs = jobs
        self.tool_name = name
        self._validate = as_async(func)
        self._submit = as_async(submit) if submit is not None else None
        self._cancel = as_async(cancel) if cancel is not None else None
        super().__init__(func=self._entry_point(func))
        # Its job is written with the run's buffered events (the call among
        # them): the barrier before the tool is left to that unit.
        setattr(self, WITH_CALL_MARK, True)

    def _entry_point(self, func: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
        async def tool(tool_context: ToolContext, **kwargs: Any) -> dict[str, Any]:
            return await self._call(tool_context, kwargs)

        signature = inspect.signature(func)
        visible = [p for n, p in signature.parameters.items() if n != "tool_context"]
        context = inspect.Parameter(
            "tool_context", inspect.Parameter.KEYWORD_ONLY, annotation=ToolContext
        )
        tool.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in visible]
            + [context],
            return_annotation=dict[str, Any],
        )
        try:  # resolved in the function's own module, where its names live
            hints = typing.get_type_hints(func)
        except (NameError, TypeError):
            hints = dict(getattr(func, "__annotations__", {}))
        annotations = {n: a for n, a in hints.items() if n not in ("tool_context", "return")}
        annotations["tool_context"] = ToolContext
        tool.__annotations__ = annotations
        tool.__name__ = self.tool_name
        tool.__qualname__ = self.tool_name
        tool.__doc__ = func.__doc__
        tool.__module__ = func.__module__
        return tool

    async def check(self, args: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """Validates a call's arguments; returns the job id and ``func``'s extra answer.

        Raises:
            ValueError: The arguments are refused (the model gets the message).
        """
        extra = await self._validate(**args)
        try:
            job_id = self.job_key.format(**args)
        except (KeyError, IndexError) as exc:
            raise errors.InvalidArgument(f"missing argument {exc} for the job id") from exc
        return job_id, dict(extra) if isinstance(extra, Mapping) else {}

    async def _call(self, tool_context: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        try:
            job_id, extra = await self.check(args)
        except ValueError as exc:
            return refusal(str(exc))
        jobs = self.jobs or jobs_of(tool_context)
        if jobs is None:
            return refusal(f"{self.tool_name} needs a durable session to track its job")
        invocation = tool_context.get_invocation_context()
        job = await self.start(
            jobs,
            job_id,
            args,
            app_name=invocation.session.app_name,
            user_id=invocation.session.user_id,
            session_id=invocation.session.id,
            invocation_id=invocation.invocation_id,
            function_call_id=tool_context.function_call_id or "",
        )
        message = extra.get("message") or f"Started job {job.job_id}; the result will follow."
        return {"status": "pending", "job_id": job.job_id, "message": str(message)}

    async def start(
        self,
        jobs: JobTable,
        job_id: str,
        args: Mapping[str, Any],
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        invocation_id: str,
        function_call_id: str,
    ) -> Job:
        """Starts one job (created if absent, the call attached) and submits it, if due.

        Inside a durable drive with barrier commits, the job is written in
        one unit with the run's buffered events, the model's call among
        them (the barrier before this tool is left to it): the call is
        durable exactly when its job is. Elsewhere (recovery reattaching a
        call, another runner) the job is started in a unit of its own.
        """
        if not function_call_id:
            raise errors.InvalidArgument(f"{self.tool_name}: the call has no id to answer")
        crash_point("long_running.before_start")
        job = await jobs.start(
            job_id,
            tool_name=self.tool_name,
            deadline=self.deadline,
            request=dict(args),
            app_name=app_name,
            user_id=user_id,
            session_id=session_id,
            invocation_id=invocation_id,
            function_call_id=function_call_id,
            with_events=start_job_with_events_of(invocation_id, session_id),
        )
        crash_point("long_running.after_start")
        if job.function_call_id != function_call_id:
            logger.info(
                "job %s already answers call %s; call %s is answered from it too",
                job_id,
                job.function_call_id,
                function_call_id,
            )
        await self.submit_due(jobs, job_id)
        return job

    async def submit_due(self, jobs: JobTable, job_id: str) -> bool:
        """Makes the job's next submission attempt if one is due; True if it was accepted.

        Nothing happens when the work was accepted already, another attempt
        holds the job, a failed attempt is backing off, or the deadline passed.
        """
        if self._submit is None:  # nothing to hand over
            await jobs.mark_submitted(job_id)
            return False
        claimed = await jobs.claim_submit(job_id, lease=self.submit_lease, limit=1)
        return bool(claimed) and await self.attempt_submit(jobs, claimed[0])

    async def attempt_submit(self, jobs: JobTable, job: Job) -> bool:
        """Runs one claimed submission attempt; True if the outside system accepted it.

        A failing ``submit`` is logged and backed off (``submit_backoff``
        doubled per attempt, at most ``submit_backoff_max``); the next
        attempt is a :class:`~durable_adk.adk.loops.resume.Submitter` pass's.
        """
        assert self._submit is not None
        crash_point("long_running.before_submit")
        try:
            await self._submit(job)
        except Exception as exc:
            retry_in = min(
                self.submit_backoff_max,
                self.submit_backoff * 2 ** max(0, job.submit_attempts - 1),
            )
            logger.warning(
                "submitting job %s failed (attempt %d), retrying in %.1f s: %r",
                job.job_id,
                job.submit_attempts,
                retry_in,
                exc,
            )
            await jobs.submit_failed(
                job.job_id, job.submit_attempts, f"{type(exc).__name__}: {exc}", retry_in=retry_in
            )
            return False
        crash_point("long_running.before_confirm")
        await jobs.mark_submitted(job.job_id)
        crash_point("long_running.after_submit")
        return True

    async def cancel_job(self, job: Job) -> None:
        """Asks the outside system to stop the work (the ``cancel`` hook), if there is one."""
        if self._cancel is not None:
            await self._cancel(job)

    async def reattach(
        self,
        jobs: JobTable,
        events: Iterable[Event],
        *,
        app_name: str,
        user_id: str,
        session_id: str,
    ) -> list[Job]:
        """Starts the job of every open call of this tool in a session's events.

        An open call is a function call of this tool listed in
        ``long_running_tool_ids`` with no function response from the user. Its
        job is created (if missing), attached (empty columns only) and
        submitted (if never submitted), exactly as the tool would have done.
        Calls whose arguments the tool refuses are skipped.

        Returns:
            The jobs of the open calls.
        """
        history = list(events)
        answered = {
            r.id for e in history if e.author == "user" for r in e.get_function_responses() if r.id
        }
        found = []
        for event in history:
            for call in event.get_function_calls():
                if (
                    call.name != self.tool_name
                    or not call.id
                    or call.id not in (event.long_running_tool_ids or ())
                    or call.id in answered
                ):
                    continue
                args = dict(call.args or {})
                try:
                    job_id, _ = await self.check(args)
                except ValueError:
                    continue
                found.append(
                    await self.start(
                        jobs,
                        job_id,
                        args,
                        app_name=app_name,
                        user_id=user_id,
                        session_id=session_id,
                        invocation_id=event.invocation_id,
                        function_call_id=call.id,
                    )
                )
        return found


def long_running_tool(
    func: Callable[..., Any],
    *,
    job_key: str,
    deadline: float | timedelta,
    submit: JobHook | None = None,
    cancel: JobHook | None = None,
    name: str | None = None,
    jobs: JobTable | None = None,
    submit_lease: float = 30.0,
    submit_backoff: float = 1.0,
    submit_backoff_max: float = 60.0,
) -> DurableLongRunningTool:
    """Makes a function a long-running ADK tool backed by the job table.

    Args:
        func: Validates the arguments (raise ``ValueError`` to refuse them) and
            may return a mapping whose ``"message"`` the pending answer
            carries. Its signature and docstring are the tool's schema.
        job_key: A ``str.format`` template over ``func``'s parameters, such as
            ``"report:{quarter}:{region}"``: the job's id.
        deadline: How long the job may take before the expiry sweep ends it
            (seconds or a timedelta).
        submit: Hands the work to the outside system; called with the job
            until one call returns (an exception is a failed attempt, retried
            with back-off until the deadline). It may run more than once for
            one job (a retry, a crash before the acceptance was recorded):
            pass the job id downstream as its idempotency key.
        cancel: Asks the outside system to stop; called by the expiry sweep.
        name: The tool's name for the model (default: ``func``'s).
        jobs: The job table (default: the durable run's store).
        submit_lease: Seconds one submission attempt holds the job; a process
            that dies mid-attempt is retried after it. Make it longer than
            ``submit`` takes.
        submit_backoff: Seconds before retrying a failed attempt, doubled per
            attempt.
        submit_backoff_max: The longest back-off.

    Raises:
        durable_adk.errors.InvalidArgument: The template names a parameter
            ``func`` lacks, or the deadline is not positive.
    """
    seconds = deadline.total_seconds() if isinstance(deadline, timedelta) else float(deadline)
    if seconds <= 0:
        raise errors.InvalidArgument("deadline must be positive")
    if submit_lease <= 0 or submit_backoff < 0 or submit_backoff_max < submit_backoff:
        raise errors.InvalidArgument(
            "submit_lease must be > 0 and 0 <= submit_backoff <= submit_backoff_max"
        )
    params = set(inspect.signature(func).parameters)
    unknown = template_fields(job_key, what="job_key") - params
    if unknown:
        raise errors.InvalidArgument(f"job_key names unknown parameters {sorted(unknown)}")
    return DurableLongRunningTool(
        func,
        job_key=job_key,
        deadline=seconds,
        submit=submit,
        cancel=cancel,
        name=name or func.__name__,
        jobs=jobs,
        submit_lease=submit_lease,
        submit_backoff=submit_backoff,
        submit_backoff_max=submit_backoff_max,
    )


def long_running_tools(root: object) -> dict[str, DurableLongRunningTool]:
    """The job-backed long-running tools anywhere in an app's tree, by name (the one tree walk)."""
    return {
        found.item.tool_name: found.item
        for found in agent_tree.tools(root)
        if isinstance(found.item, DurableLongRunningTool)
    }
