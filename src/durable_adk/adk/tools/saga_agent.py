"""SagaSequence: ordered stages that record their own undo, rolled back newest first.

What it guarantees:

* Stages run in order. An acting stage (:class:`SagaStage`) puts its step on
  the saga ledger before its outside call (PENDING) and again, with what its
  compensator needs, before its event (DONE); the call goes through the journal
  under an idempotency key derived from the invocation, and the compensation
  has a key of its own. The stage's event carries ``comp:<step>``.
* A stage that raises, any event setting the ``saga_abort`` state key, or a
  cancel of the run (seen before each stage and after each event) starts
  the rollback: every step that may have acted is compensated, newest
  first (see :class:`durable_adk.effect_tables.sagas.Compensation`). The final event carries
  ``saga_status`` (committed, compensated, compensation_failed) and
  ``saga_reason``; with ``raise_on_failure`` the error is raised afterwards.
* It checkpoints like ADK's SequentialAgent, so a resumable re-drive after a
  crash skips finished stages and a crash mid-compensation resumes the
  compensation; the ledger, not the process, knows what to undo.
* The pivot rule: a stage that cannot be undone may not come before one that
  can (construction fails unless ``allow_unsafe_order``). An optional apology
  stage runs when the saga ends compensated.

* Its ledger writes carry the run's id and epoch: once the run was taken over
  or finished they are refused (:class:`durable_adk.errors.Fenced`), so a
  zombie's stage stops before its outside call and does not roll back. A stage
  cancelled while its call is out lets the call end first, so a compensation
  that follows finds the effect.

:class:`SagaSweeper` finishes sagas whose process died and that no run will
re-drive: after a quiet period it compensates them under a claim it renews,
and records the outcome in the session through the session's queue (as a run
on the run ledger), never cutting into a live run of the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
import warnings
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

from google.adk.agents import BaseAgent, LlmAgent
from google.adk.agents.base_agent import BaseAgentState
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.session import Session
from google.genai import types
from pydantic import Field, model_validator
from typing_extensions import override

from durable_adk import errors
from durable_adk.adk.commits.drive import hands_back
from durable_adk.adk.services.sessions import RUN_METADATA_KEY, DurableSessionService
from durable_adk.adk.shapes import agent_tree
from durable_adk.adk.tools.journaling import as_async, attempt_in
from durable_adk.effect_tables.sagas import (
    Compensation,
    Fence,
    Saga,
    SagaDrifted,
    SagaLedger,
    SagaStatus,
    Undo,
)
from durable_adk.faults import crash_point
from durable_adk.fencing.fence import current_fence
from durable_adk.metrics import NO_METRICS
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.versions import UNVERSIONED, Serving

logger = logging.getLogger("durable_adk.saga_agent")

T = TypeVar("T")

ABORT_KEY = "saga_abort"
COMP_PREFIX = "comp:"
STATUS_KEY = "saga_status"
REASON_KEY = "saga_reason"


class SagaFailed(errors.DurableError):
    """The saga failed and was rolled back (raised only with ``raise_on_failure``)."""


class SagaStage(BaseAgent):
    """An acting stage: one outside effect, done at most once, with its undo recorded.

    ``action(state, idempotency_key)`` performs the effect (sync or async) and
    returns the outside system's record of it; ``find(idempotency_key)`` looks
    it up (None: it never happened). ``state_of(record)`` is the state the stage
    writes; ``undo_of(record)`` what the compensator will need.
    """

    action: Callable[..., Any]
    find: Callable[..., Any] | None = None
    state_of: Callable[[Any], dict[str, Any]] | None = None
    undo_of: Callable[[Any], dict[str, Any]] | None = None
    uncompensatable: bool = False

    def _saga(self) -> SagaSequence:
        parent = self.parent_agent
        while parent is not None and not isinstance(parent, SagaSequence):
            parent = parent.parent_agent
        if parent is None:
            raise errors.InvalidArgument(f"stage {self.name!r} must sit inside a SagaSequence")
        return parent

    def record_of(self, record: Any) -> dict[str, Any]:
        """What the compensator needs, from the outside system's record."""
        return dict(self.undo_of(record) if self.undo_of else record)

    @override
    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        if ctx.is_resumable and ctx.end_of_agents.get(self.name):
            return  # this stage finished before the crash: its event is in the log
        saga = self._saga()
        ledger = SagaLedger(_store_of(ctx))
        saga_id = saga.saga_id(ctx)
        state = dict(ctx.session.state)
        run_fence = current_fence()
        if run_fence is not None:
            run_fence.check_not_stopping()  # cancelled: no step is begun, nothing to undo
        crash_point(f"saga.{self.name}.before_call")
        journal, attempt = attempt_in(ctx, self.name)
        assert journal is not None  # _store_of() already required a durable session service
        fence = _fence_in(ctx)
        action_key, comp_key = await ledger.step_pending(
            saga_id, self.name, fence=fence, compensatable=self.name in saga.compensators
        )
        act = as_async(self.action)
        find = as_async(self.find) if self.find is not None else None
        call = asyncio.ensure_future(
            journal.execute(
                action_key, attempt, lambda key: act(state, key), find, fence=current_fence()
            )
        )
        try:
            record = await asyncio.shield(call)
        except asyncio.CancelledError:
            # A sibling stage failed (ParallelAgent cancels the others) or the
            # drive was stopped. A call already out (a worker thread, which
            # cancelling cannot stop) ends first, so the compensation that
            # follows finds its effect instead of concluding it never happened.
            with contextlib.suppress(Exception):
                await call
            raise
        crash_point(f"saga.{self.name}.after_call")
        undo = self.record_of(record)
        await ledger.step_done(saga_id, self.name, undo, fence=fence)
        delta = dict(self.state_of(record) if self.state_of else {self.name: record})
        delta[COMP_PREFIX + self.name] = {"step": self.name, "key": comp_key, **undo}
        yield Event(
            invocation_id=ctx.invocation_id,
            author=self.name,
            branch=ctx.branch,
            actions=EventActions(state_delta=delta),
        )
        crash_point(f"saga.{self.name}.after_event")
        if ctx.is_resumable:
            ctx.set_agent_state(self.name, end_of_agent=True)
            yield self._create_agent_state_event(ctx)


class SagaState(BaseAgentState):
    """Where a SagaSequence stands in its invocation (its checkpoint)."""

    current_stage: str = ""
    compensating: bool = False
    reason: str = ""


def _store_of(ctx: InvocationContext) -> Any:
    service = ctx.session_service
    if not isinstance(service, DurableSessionService):
        raise errors.InvalidArgument(
            "a SagaSequence needs DurableSessionService: its ledger lives in the same store"
        )
    return service.store


def _fence_in(ctx: InvocationContext) -> Fence:
    """The run and epoch this invocation is driven for (unfenced on plain ADK)."""
    _, attempt = attempt_in(ctx, "")
    return Fence(run_id=attempt.run_id, run_epoch=attempt.run_epoch)


def _effects(agent: BaseAgent) -> tuple[bool, bool]:
    """(has a compensatable stage, has an uncompensatable stage) within ``agent`` (the one walk)."""
    stages = [f.item for f in agent_tree.agents(agent) if isinstance(f.item, SagaStage)]
    return (any(not s.uncompensatable for s in stages), any(s.uncompensatable for s in stages))


class SagaSequence(BaseAgent):
    """Runs stages in order; on failure, compensates what they did, newest first."""

    compensators: dict[str, Callable[..., Any]] = Field(default_factory=dict)
    uncompensatable: list[str] = Field(default_factory=list)
    allow_unsafe_order: bool = False
    apology: str | None = None
    raise_on_failure: bool = False
    compensation_retries: int = 3
    compensation_backoff: float = 0.2
    metrics: Any = NO_METRICS

    def __init__(
        self,
        name: str,
        sub_agents: list[BaseAgent],
        compensators: Mapping[str, Callable[..., Any]] | None = None,
        *,
        apology: BaseAgent | None = None,
        **options: Any,
    ) -> None:
        """Creates the saga.

        Args:
            name: The saga's (agent's) name.
            sub_agents: The stages, in order.
            compensators: Undo per step name: ``fn(record, idempotency_key)``,
                sync or async; the record is what the stage recorded (with its
                compensation ``key``).
            apology: A stage run after the saga ends compensated.
            **options: ``uncompensatable`` (stage names), ``allow_unsafe_order``,
                ``raise_on_failure``, ``compensation_retries``,
                ``compensation_backoff``, ``metrics``.
        """
        stages = list(sub_agents) + ([apology] if apology is not None else [])
        fields: dict[str, Any] = {
            "compensators": dict(compensators or {}),
            "apology": apology.name if apology is not None else None,
            **options,
        }
        super().__init__(name=name, sub_agents=stages, **fields)

    @model_validator(mode="after")
    def _pivot_rule(self) -> SagaSequence:
        marked = set(self.uncompensatable)
        seen_uncompensatable: str | None = None
        for stage in self.stages:
            compensatable, uncompensatable = _effects(stage)
            uncompensatable = uncompensatable or stage.name in marked
            if compensatable and seen_uncompensatable and not self.allow_unsafe_order:
                raise ValueError(
                    f"saga {self.name!r}: stage {stage.name!r} can be undone but comes after "
                    f"{seen_uncompensatable!r}, which cannot (the pivot rule); reorder the stages "
                    "or pass allow_unsafe_order=True"
                )
            if uncompensatable and seen_uncompensatable is None:
                seen_uncompensatable = stage.name
        for step in _acting_stages(self):
            if not step.uncompensatable and step.name not in self.compensators:
                raise ValueError(
                    f"saga {self.name!r}: stage {step.name!r} acts but has no compensator; "
                    "give it one or mark it uncompensatable=True (and place it after the pivot)"
                )
        return self

    @property
    def stages(self) -> list[BaseAgent]:
        """The stages, without the apology."""
        return [a for a in self.sub_agents if a.name != self.apology]

    def saga_id(self, ctx: InvocationContext) -> str:
        """The saga's id in this invocation."""
        return f"{ctx.invocation_id}/{self.name}"

    def undo_map(self) -> dict[str, Undo]:
        """How to undo each acting stage (for compensation and the sweeper)."""
        undo: dict[str, Undo] = {}
        for step in _acting_stages(self):
            compensator = self.compensators.get(step.name)
            undo[step.name] = Undo(
                compensate=as_async(compensator) if compensator is not None else None,
                find=as_async(step.find) if step.find is not None else None,
                record_of=step.record_of,
            )
        return undo

    def compensation(self, ledger: SagaLedger) -> Compensation:
        """The compensation engine for this saga's stages."""
        return Compensation(
            ledger,
            self.undo_map(),
            retries=self.compensation_retries,
            backoff=self.compensation_backoff,
            metrics=self.metrics,
        )

    @override
    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        # A cancel of the run lets the saga roll back what it did before the
        # runner aborts the invocation: the whole saga is a busy section.
        run_fence = current_fence()
        busy = run_fence.busy() if run_fence is not None else contextlib.nullcontext()
        async with busy, contextlib.aclosing(self._run_saga(ctx)) as events:
            async for event in events:
                yield event

    async def _run_saga(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        ledger = SagaLedger(_store_of(ctx))
        saga = await ledger.begin(
            saga_id=self.saga_id(ctx),
            name=self.name,
            app_name=ctx.app_name,
            user_id=ctx.user_id,
            session_id=ctx.session.id,
            invocation_id=ctx.invocation_id,
        )
        state = self._load_agent_state(ctx, SagaState)
        fence = _fence_in(ctx)
        failure: BaseException | None = None
        reason = ""
        if saga.status in (SagaStatus.RUNNING,) and not (state and state.compensating):
            async for event in self._forward(ctx, state):
                if isinstance(event, BaseException):
                    failure = event
                    reason = str(event) or type(event).__name__
                elif event is _PAUSED:
                    return
                else:
                    yield event
            if failure is None:
                saga = await ledger.finish(saga.saga_id, SagaStatus.COMMITTED, fence=fence) or saga
                self.metrics.saga_outcome("committed")
        else:
            reason = (state.reason if state else "") or saga.reason or "compensation resumed"
        if saga.status in (SagaStatus.RUNNING, SagaStatus.COMPENSATING):
            if ctx.is_resumable:
                ctx.set_agent_state(
                    self.name, agent_state=SagaState(compensating=True, reason=reason)
                )
                yield self._create_agent_state_event(ctx)
            # A step whose run may still act leaves the saga COMPENSATING: its
            # final event says so, and the saga sweeper finishes it later.
            await self.compensation(ledger).run(saga, reason, fence=fence)
            saga = await ledger.get(saga.saga_id) or saga
        yield _final_event(self.name, ctx.invocation_id, ctx.branch, saga)
        if saga.status is SagaStatus.COMPENSATED and self.apology is not None:
            apology = self.find_sub_agent(self.apology)
            if apology is not None:
                async for event in apology.run_async(ctx):
                    yield event
        if ctx.is_resumable:
            ctx.set_agent_state(self.name, end_of_agent=True)
            yield self._create_agent_state_event(ctx)
        if self.raise_on_failure and saga.status is not SagaStatus.COMMITTED:
            raise SagaFailed(
                f"saga {self.name} {saga.status.value.lower()}: {saga.reason}"
            ) from failure

    async def _forward(
        self, ctx: InvocationContext, state: SagaState | None
    ) -> AsyncGenerator[Any, None]:
        """Runs the stages; yields their events, then a failure (an exception) if one stops it.

        A cancel of the run (its fence asked to stop) is a failure too, seen
        before each stage and after each event: the saga rolls back.

        A stage that pauses (a long-running call: a sleep, a job, a
        confirmation) is drained first, as ADK's SequentialAgent drains its
        sub-agent: the call's tool runs (a sleep stores its timer, a job is
        started) and the stage's events after it are yielded; then the saga
        pauses, still RUNNING, and the answer's run resumes it at that stage.
        """
        run_fence = current_fence()
        names = [s.name for s in self.stages]
        start = names.index(state.current_stage) if state and state.current_stage in names else 0
        resuming = state is not None and bool(state.current_stage)
        for stage in self.stages[start:]:
            if ctx.is_resumable and not resuming:
                ctx.set_agent_state(self.name, agent_state=SagaState(current_stage=stage.name))
                yield self._create_agent_state_event(ctx)
            resuming = False
            try:
                if run_fence is not None:
                    run_fence.check_not_stopping()
                pause = False
                async with contextlib.aclosing(stage.run_async(ctx)) as events:
                    async for event in events:
                        yield event
                        # Not at once: the call's tool has yet to run (ADK's own rule).
                        pause = pause or ctx.should_pause_invocation(event)
                        abort = (event.actions.state_delta or {}).get(ABORT_KEY)
                        if abort:
                            yield SagaAborted(str(abort))
                            return
                        if run_fence is not None:
                            run_fence.check_not_stopping()
                if pause:
                    yield _PAUSED
                    return
            except errors.Fenced:
                raise  # this worker lost the run: it must stop, not roll back
            except Exception as exc:  # a stage failed: the saga rolls back
                if hands_back(exc):
                    # Not the stage's failure but the run's (the store unreachable
                    # or busy, a timeout): the run is handed back and re-driven at
                    # this stage, whose journal finds what its call did.
                    raise
                yield exc
                return


class SagaAborted(errors.DurableError):
    """A stage asked for a rollback through the ``saga_abort`` state key."""


_PAUSED = object()


def _acting_stages(agent: BaseAgent) -> list[SagaStage]:
    found: list[SagaStage] = []
    for sub in agent.sub_agents:
        if isinstance(sub, SagaStage):
            found.append(sub)
        else:
            found.extend(_acting_stages(sub))
    return found


def _final_event(author: str, invocation_id: str, branch: str | None, saga: Saga) -> Event:
    status = saga.status.value.lower()
    text = f"{author}: {status}" + (
        f" ({saga.reason})" if saga.reason and status != "committed" else ""
    )
    return Event(
        invocation_id=invocation_id,
        author=author,
        branch=branch,
        content=types.Content(role="model", parts=[types.Part(text=text)]),
        actions=EventActions(
            state_delta={
                STATUS_KEY: status,
                REASON_KEY: saga.reason if status != "committed" else None,
            }
        ),
    )


class SagaSweeper:
    """Finishes sagas whose process died and that no live run will re-drive.

    For each saga it claims, it compensates under that claim (renewed by a
    heartbeat while it works; every write is fenced by it), then records the
    outcome in the session through the session's queue: it puts a run of the
    saga's invocation on the run ledger, waits until that run's turn comes
    (the session's live run, if any, has ended), appends the saga's final
    event under that run's fence and finishes the run DONE.
    """

    def __init__(
        self,
        saga: SagaSequence,
        sessions: DurableSessionService,
        *,
        app_name: str,
        owner: str,
        quiet_for: float = 300.0,
        batch: int = 10,
        lease: float = 60.0,
        queue_poll: float = 0.1,
        serving: Serving = UNVERSIONED,
    ) -> None:
        """Creates the sweeper.

        Args:
            saga: The SagaSequence whose sagas it finishes (its compensators).
            sessions: The durable session service (its store holds the ledger).
            app_name: The ADK app whose sagas it finishes.
            owner: This worker's name (on the saga claims and on the runs it submits).
            quiet_for: Quiet seconds before a saga with no final status counts as stuck;
                longer than the slowest stage of a saga that runs outside DurableRunner.
            batch: Most sagas per pass.
            lease: How long a claim (of a saga, or of the run that records its
                outcome) holds without renewal; renewed every third of it.
            queue_poll: The first back-off (doubling to 2 s; a run of the
                session that ends wakes it) at which the run that records an
                outcome checks whether its turn in the session's queue came.
        """
        if lease <= 0 or queue_poll <= 0:
            raise errors.InvalidArgument("lease and queue_poll must be > 0")
        self.saga = saga
        self.sessions = sessions
        self.ledger = SagaLedger(sessions.store)
        # Its outcome runs are of the saga's version: claimed as its worker serves them.
        self.runs = RunLedger(sessions.store, lease_seconds=lease, serving=serving)
        self.owner = owner
        self.app_name = app_name
        self.quiet_for = quiet_for
        self.batch = batch
        self.lease = lease
        self.queue_poll = queue_poll
        self.serving = serving

    async def sweep_once(self) -> list[Saga]:
        """Finishes every stuck saga of this kind it can claim; returns them as they ended.

        The claimed sagas are finished side by side (each waits for its own
        session's turn). A saga whose compensation must wait (a step that died
        PENDING may still act) is released for a later pass and not returned;
        one whose claim was lost midway is left to whoever holds it now. A
        failure of one saga is raised once the others have ended.
        """
        claimed = await self.ledger.claim_stuck(
            self.owner,
            name=self.saga.name,
            app_name=self.app_name,
            quiet_for=self.quiet_for,
            lease=self.lease,
            limit=self.batch,
            serving=self.serving,
        )
        results = await asyncio.gather(
            *(self._finish_one(saga) for saga in claimed), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return [r for r in results if isinstance(r, Saga)]

    async def _finish_one(self, saga: Saga) -> Saga | None:
        """Compensates one claimed saga and records its outcome; None if it must wait."""
        try:
            return await self._under_lease(
                self._compensate_and_record(saga),
                lambda: self.ledger.renew(saga.saga_id, self.owner, lease=self.lease),
            )
        except errors.Fenced as exc:
            logger.warning("saga %s: claim lost, left to its new holder (%s)", saga.saga_id, exc)
            return None
        except SagaDrifted as drifted:
            # Nothing undone: the steps this code cannot undo are left, with
            # the rest, for a worker whose code can (an earlier version that
            # serves it, or a fixed deploy); a person is told once.
            logger.warning("saga %s: %s; left for code that has them", saga.saga_id, drifted)
            await self.ledger.left_for_other_code(saga, drifted)
            await self.ledger.release(saga.saga_id, self.owner)
            return None

    async def _compensate_and_record(self, saga: Saga) -> Saga | None:
        if saga.status in (SagaStatus.RUNNING, SagaStatus.COMPENSATING):
            reason = saga.reason or "the saga's process died before it finished"
            result = await self.saga.compensation(self.ledger).run(
                saga, reason, fence=Fence(owner=self.owner)
            )
            if result.waiting:
                await self.ledger.release(saga.saga_id, self.owner)
                return None
        final = await self.ledger.get(saga.saga_id) or saga
        await self._record(final)
        await self.ledger.recorded(saga.saga_id, self.owner)
        return final

    async def _record(self, saga: Saga) -> None:
        """Appends the saga's outcome to its session, as a run in the session's queue."""
        before = await self._session_of(saga)
        if before is None:
            return  # the session was deleted: there is nothing to tell
        run = await self.runs.submit(
            app_name=saga.app_name,
            user_id=saga.user_id,
            session_id=saga.session_id,
            request=_request_of(before.events, saga.invocation_id),
            owner=self.owner,
            invocation_id=saga.invocation_id,
        )
        held = [run]

        async def renew() -> bool:
            return (await self.runs.renew(held[0].lease)).ok

        async def turn_then_append() -> None:
            # Woken like DurableRunner.wait_for_turn; the heartbeat renews meanwhile.
            claimed = await self.runs.wait_turn(run, self.owner, first_poll=self.queue_poll)
            assert claimed is not None  # no lost event given: it waits until it claims
            held[0] = claimed
            session = await self._session_of(saga)  # read now that no other run holds it
            if session is not None:
                event = _final_event(self.saga.name, saga.invocation_id, None, saga)
                event.id = _outcome_event_id(saga.saga_id)  # stored once, however often sent
                event.custom_metadata = {
                    RUN_METADATA_KEY: {"run_id": claimed.run_id, "epoch": claimed.epoch}
                }
                await self.sessions.append_event(session, event)
            if not await self.runs.finish(claimed.lease, RunStatus.DONE):
                raise errors.Fenced(f"run {claimed.run_id} was taken over before it finished")

        await self._under_lease(turn_then_append(), renew)

    async def _session_of(self, saga: Saga) -> Session | None:
        return await self.sessions.get_session(
            app_name=saga.app_name, user_id=saga.user_id, session_id=saga.session_id
        )

    async def _under_lease(self, work: Awaitable[T], renew: Callable[[], Awaitable[bool]]) -> T:
        """Runs ``work`` while renewing a lease every third of it; cancels it if the lease is lost.

        A renewal that fails with a store error is retried until the lease
        would have run out (last good renewal + two thirds of the lease); a
        renewal that finds the claim gone ends the work at once.

        Raises:
            durable_adk.errors.Fenced: The lease was lost; the work was cancelled.
        """
        job = asyncio.ensure_future(work)
        beat = asyncio.create_task(self._heartbeat(renew))
        try:
            await asyncio.wait({job, beat}, return_when=asyncio.FIRST_COMPLETED)
            if job.done():
                return job.result()
            if beat.exception() is not None:
                raise beat.exception()  # type: ignore[misc]
            job.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await job
            raise errors.Fenced("the saga sweeper lost its claim; its work was cancelled")
        finally:
            for task in (beat, job):
                task.cancel()
            for task in (beat, job):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _heartbeat(self, renew: Callable[[], Awaitable[bool]]) -> None:
        """Returns when the lease is lost: refused, or unrenewable until it would run out."""
        loop = asyncio.get_running_loop()
        last_good = loop.time()
        while True:
            await asyncio.sleep(self.lease / 3)
            try:
                if not await renew():
                    return
                last_good = loop.time()
            except errors.StoreError as exc:
                if loop.time() - last_good >= self.lease * 2 / 3:
                    logger.warning("saga sweeper %s: lease lost (%s)", self.owner, exc)
                    return


def _request_of(events: list[Event], invocation_id: str) -> dict[str, Any]:
    """The user message that started an invocation, as a stored run request.

    Should run recovery ever take over the run that records a saga's outcome
    (its sweeper died holding it), it re-drives the saga's invocation with this
    message, as for any run of that invocation.
    """
    for event in events:
        if event.invocation_id == invocation_id and event.author == "user" and event.content:
            return event.content.model_dump(mode="json", exclude_none=True)
    # No user message stored (its events were rewound): a re-drive of this run
    # would start from nothing but this note.
    return {"role": "user", "parts": [{"text": "(record the saga's outcome)"}]}


def _outcome_event_id(saga_id: str) -> str:
    """The id of the outcome event the saga sweeper stores (the same on every attempt)."""
    return f"saga-outcome-{uuid.uuid5(uuid.NAMESPACE_URL, saga_id)}"


def plan_stage(name: str, model: Any, *, output_key: str, instruction: str = "") -> LlmAgent:
    """An LLM stage that decides (no outside effect), writing its answer to ``output_key``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return LlmAgent(name=name, model=model, instruction=instruction, output_key=output_key)
