"""Durable sleep: a tool with which a run waits for a duration or until a time.

``sleep_tool()`` makes ``durable_sleep``, a long-running ADK tool the model
calls with ``seconds`` (a duration) or ``until`` (ISO-8601 with a zone). A
sleep is a timer on the job table (:meth:`~durable_adk.effect_tables.jobs.JobTable.create_timer`):
a job whose result is known in advance and which becomes ready at its due
time. Guarantees:

* **No worker holds it.** The call stays open and the run ends ``PAUSED``,
  as for any long-running call; the wake-up is a row in the store, its due
  time computed on the database clock (``until`` is absolute; ``seconds``
  counts from the database's now).
* **Once, in turn.** At the due time the :class:`Waker` pass of any worker
  (one indexed statement per pass, whatever the number of sleeping runs)
  completes the timer in one conditional update (``SKIP LOCKED`` / the write
  lock), and the job :class:`~durable_adk.adk.loops.resume.Resumer` answers the
  call through ``RunPath.submit`` (the per-session queue; one answer per
  pause) with ``{"status": "woke", "due": ..., "woke_at": ...}``.
* **Nothing early.** Every due comparison is SQL against the database clock:
  a worker whose own clock runs ahead wakes nothing.
* **Recovered, cancelled.** The waker is one of the background loops
  (:class:`~durable_adk.adk.loops.background.Background`), so a timer that came due
  while every worker was down wakes at the first pass of any process,
  ``durable-adk recover`` included. Cancelling the run ends the timer
  ``CANCELLED`` (the job table's cancel of the invocation): it never wakes.
* **In a Workflow.** :func:`sleep_node` is the node form: a FunctionNode
  that stores its timer and pauses the graph on an input request
  (``adk_request_input``); the wake-up is the answer, and the node's output.
* **Bad input changes nothing.** Negative seconds, an unparseable or zoneless
  ``until``, both or neither: the model gets ``{"status": "error",
  "message": ..., "final": true}`` and no timer is stored; the refused call
  is closed (nothing will wake it), so the run ends with its agent.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from google.adk.agents.context import Context
from google.adk.events.request_input import RequestInput
from google.adk.tools.tool_context import ToolContext
from google.adk.workflow import FunctionNode

from durable_adk import errors
from durable_adk.adk.loops.every import periodically
from durable_adk.adk.loops.resume import Resumer
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.adk.shapes.marks import idempotent
from durable_adk.adk.tools.long_running import DurableLongRunningTool, jobs_of, refusal
from durable_adk.effect_tables.jobs import Job, JobTable
from durable_adk.faults import crash_point

logger = logging.getLogger("durable_adk.sleep")

REQUEST_INPUT_CALL = "adk_request_input"
"""The name of ADK's input-request call, with which a Workflow node pauses."""

SLEEP_TOOL_NAME = "durable_sleep"
"""The default name of the sleep tool (and of its function responses)."""

MAX_SLEEP_SECONDS = 366 * 24 * 3600.0
"""The longest sleep a call may ask for (a year and a day)."""


def durable_sleep(seconds: float | None = None, until: str | None = None) -> dict[str, Any]:
    """Pauses this conversation and resumes it later, without holding any worker.

    Give exactly one of the two arguments. The answer arrives when the time
    comes, as {"status": "woke", "due": ..., "woke_at": ...}.

    Args:
        seconds: How long to wait, in seconds (0 or more).
        until: When to wake, ISO-8601 with a time zone, e.g. 2026-12-07T09:00:00+01:00.
    """
    seconds_, until_ = parse_sleep(seconds, until)
    if until_ is not None:
        return {"message": f"Sleeping until {iso(until_)}."}
    return {"message": f"Sleeping for {seconds_:g} seconds."}


def parse_sleep(seconds: Any, until: Any) -> tuple[float | None, float | None]:
    """Checks a sleep's arguments; returns ``(seconds, until as epoch seconds)``, one None.

    Raises:
        durable_adk.errors.InvalidArgument: Both or neither given, seconds
            not a number >= 0 (or longer than :data:`MAX_SLEEP_SECONDS`),
            until not ISO-8601 or without a time zone.
    """
    if (seconds is None) == (until is None):
        raise errors.InvalidArgument("give exactly one of seconds and until")
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise errors.InvalidArgument(f"seconds must be a number, not {seconds!r}")
        value = float(seconds)
        if not math.isfinite(value) or value < 0:
            raise errors.InvalidArgument(f"seconds must be 0 or more, not {seconds!r}")
        if value > MAX_SLEEP_SECONDS:
            raise errors.InvalidArgument(f"seconds must be at most {MAX_SLEEP_SECONDS:g}")
        return value, None
    if not isinstance(until, str):
        raise errors.InvalidArgument(f"until must be an ISO-8601 string, not {until!r}")
    try:
        moment = datetime.fromisoformat(until.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise errors.InvalidArgument(f"until is not an ISO-8601 time: {until!r}") from exc
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise errors.InvalidArgument(f"until needs a time zone (such as +01:00 or Z): {until!r}")
    return None, moment.timestamp()


def iso(epoch: float) -> str:
    """An epoch time as ISO-8601 in UTC, to the second."""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


class DurableSleepTool(DurableLongRunningTool):
    """The durable sleep tool: each call is a timer on the job table.

    Made by :func:`sleep_tool`. The timer's id is ``sleep:<invocation>:<call
    id>``: a repeated or re-driven call finds the same timer.
    """

    def __init__(self, *, name: str, jobs: JobTable | None) -> None:
        super().__init__(
            durable_sleep,
            job_key="sleep",
            deadline=MAX_SLEEP_SECONDS,
            submit=None,
            cancel=None,
            name=name,
            jobs=jobs,
        )

    async def _call(self, tool_context: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        try:
            await self.check(args)
        except ValueError as exc:
            return refusal(str(exc))
        jobs = self.jobs or jobs_of(tool_context)
        if jobs is None:
            return refusal(f"{self.tool_name} needs a durable session")
        invocation = tool_context.get_invocation_context()
        job = await self.start(
            jobs,
            "sleep",
            args,
            app_name=invocation.session.app_name,
            user_id=invocation.session.user_id,
            session_id=invocation.session.id,
            invocation_id=invocation.invocation_id,
            function_call_id=tool_context.function_call_id or "",
        )
        return {
            "status": "sleeping",
            "job_id": job.job_id,
            "due": iso(job.deadline_at),
            "message": f"Sleeping until {iso(job.deadline_at)}; the conversation resumes then.",
        }

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
        """Creates (idempotently) and attaches the call's timer; ``job_id`` is ignored.

        Raises:
            durable_adk.errors.InvalidArgument: The call has no id, or its
                arguments are refused (nothing is stored).
        """
        if not function_call_id:
            raise errors.InvalidArgument(f"{self.tool_name}: the call has no id to answer")
        seconds, until = parse_sleep(args.get("seconds"), args.get("until"))
        timer_id = f"sleep:{invocation_id}:{function_call_id}"
        crash_point("sleep.before_timer")
        await jobs.create_timer(
            timer_id, tool_name=self.tool_name, seconds=seconds, until=until, request=dict(args)
        )
        return await jobs.attach(
            timer_id,
            app_name=app_name,
            user_id=user_id,
            session_id=session_id,
            invocation_id=invocation_id,
            function_call_id=function_call_id,
        )


def sleep_tool(*, name: str = SLEEP_TOOL_NAME, jobs: JobTable | None = None) -> DurableSleepTool:
    """Makes the durable sleep tool for an ADK agent.

    Args:
        name: The tool's name for the model (default ``durable_sleep``).
        jobs: The job table (default: the durable run's store).
    """
    if not name:
        raise errors.InvalidArgument("the sleep tool needs a name")
    return DurableSleepTool(name=name, jobs=jobs)


def sleep_node(
    *, seconds: float | None = None, until: str | None = None, name: str = "sleep"
) -> FunctionNode:
    """Makes a Workflow node that sleeps, durably, then outputs its wake-up.

    Give ``seconds`` or ``until`` (ISO-8601 with a zone), or neither: then
    the node's input gives them (a mapping with ``seconds`` or ``until``).
    The node stores its timer (id ``sleep:<invocation>:<node path>``,
    idempotent, so a re-driven node finds the same timer) and pauses the
    graph with an input request whose id is the timer's call; the run ends
    ``PAUSED``. At the due time the waker answers that request with
    ``{"status": "woke", "due": ..., "woke_at": ...}``, which is the node's
    output (``rerun_on_resume=False``: the node does not run again).

    Raises:
        durable_adk.errors.InvalidArgument: Both ``seconds`` and ``until``,
            or a bad one (when the workflow is built).
    """
    if seconds is not None or until is not None:
        parse_sleep(seconds, until)

    @idempotent  # creating the timer twice finds the same row
    async def sleep(ctx: Context, node_input: Any) -> AsyncGenerator[Any, None]:
        given = node_input if isinstance(node_input, Mapping) else {}
        args = (
            {"seconds": seconds, "until": until}
            if seconds is not None or until is not None
            else {"seconds": given.get("seconds"), "until": given.get("until")}
        )
        seconds_, until_ = parse_sleep(args["seconds"], args["until"])
        invocation = ctx.get_invocation_context()
        service = invocation.session_service
        if not isinstance(service, DurableSessionService):
            raise errors.InvalidArgument(f"sleep node {name!r} needs a durable session")
        jobs = JobTable(service.store)
        call_id = f"sleep-{_path_id(ctx.node_path)}"
        timer_id = f"sleep:{invocation.invocation_id}:{call_id}"
        await jobs.create_timer(
            timer_id,
            tool_name=REQUEST_INPUT_CALL,
            seconds=seconds_,
            until=until_,
            request={k: v for k, v in args.items() if v is not None},
        )
        timer = await jobs.attach(
            timer_id,
            app_name=invocation.session.app_name,
            user_id=invocation.session.user_id,
            session_id=invocation.session.id,
            invocation_id=invocation.invocation_id,
            function_call_id=call_id,
        )
        yield RequestInput(
            interrupt_id=call_id,
            message=f"Sleeping until {iso(timer.deadline_at)}.",
            payload={"timer": timer_id, "due": iso(timer.deadline_at)},
            response_schema=None,
        )

    return FunctionNode(func=sleep, name=name, rerun_on_resume=False)


def _path_id(path: str) -> str:
    """A short, stable id for a node path (call ids stay small in the session).

    The call id ``sleep-<these 16 hex digits>`` is how the inbox knows a
    timer's request (``SLEEP_NODE_CALL``): it never waits on a person.
    """
    return hashlib.sha256(path.encode()).hexdigest()[:16]


class Waker:
    """Wakes due timers (one indexed statement per pass) and has their calls answered."""

    def __init__(
        self,
        jobs: JobTable,
        *,
        resumer: Resumer | None = None,
        batch: int = 100,
        interval: float = 1.0,
    ) -> None:
        """Creates the waker.

        Args:
            jobs: The job table.
            resumer: Answers the woken calls after a pass that woke any (optional).
            batch: Most timers woken per pass.
            interval: Seconds between passes in :meth:`serve` (a wake-up is
                at most this late, plus the resume).
        """
        self.jobs = jobs
        self.resumer = resumer
        self.batch = batch
        self.interval = interval

    async def wake_due(self) -> list[Job]:
        """Wakes the timers due now (database clock), without resuming; returns them."""
        woken = await self.jobs.wake(limit=self.batch)
        if woken:
            logger.info("woke %d timer(s): %s", len(woken), ", ".join(j.job_id for j in woken))
        return woken

    async def wake_once(self, *, wait: bool = False) -> list[Job]:
        """Wakes the timers due now (database clock) and resumes their calls; returns them.

        Args:
            wait: Drive the wake-ups' runs to their end (``Resumer.resume_once``);
                else the pass returns once they are submitted.
        """
        woken = await self.wake_due()
        if woken and self.resumer is not None:
            await self.resumer.resume_once(wait=wait)
        return woken

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[Waker]:
        """Runs a pass every ``interval`` seconds until the block exits."""
        async with periodically(self.interval, self.wake_once, "wake"):
            yield self
