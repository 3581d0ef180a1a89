"""SagaSequence: ordered stages that record their own undo, rolled back newest first.

What it guarantees:

* Stages run in order. An acting stage (:class:`SagaStage`) puts its step on
  the saga ledger before its outside call (PENDING) and again, with what its
  compensator needs, before its event (DONE); the call goes through the journal
  under an idempotency key derived from the invocation, and the compensation
  has a key of its own. The stage's event carries ``comp:<step>``.
* A stage that raises, or any event setting the ``saga_abort`` state key,
  starts the rollback: every step that may have acted is compensated, newest
  first (see :class:`durable_adk.sagas.Compensation`). The final event carries
  ``saga_status`` (committed, compensated, compensation_failed) and
  ``saga_reason``; with ``raise_on_failure`` the error is raised afterwards.
* It checkpoints like ADK's SequentialAgent, so a resumable re-drive after a
  crash skips finished stages and a crash mid-compensation resumes the
  compensation; the ledger, not the process, knows what to undo.
* The pivot rule: a stage that cannot be undone may not come before one that
  can (construction fails unless ``allow_unsafe_order``). An optional apology
  stage runs when the saga ends compensated.

:class:`SagaSweeper` finishes sagas whose process died and that no run will
re-drive: after a quiet period it compensates them and records the outcome in
the session.
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

from google.adk.agents import BaseAgent, LlmAgent
from google.adk.agents.base_agent import BaseAgentState
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.genai import types
from pydantic import Field, model_validator
from typing_extensions import override

from durable_adk import errors
from durable_adk.adk.session_service import DurableSessionService
from durable_adk.adk.tools import as_async, attempt_in
from durable_adk.metrics import NO_METRICS
from durable_adk.sagas import Compensation, Saga, SagaLedger, SagaStatus, Undo
from durable_adk.testing.crash import crash_point

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
        crash_point(f"saga.{self.name}.before_call")
        action_key, comp_key = await ledger.step_pending(saga_id, self.name)
        journal, attempt = attempt_in(ctx, self.name)
        assert journal is not None  # _store_of() already required a durable session service
        act = as_async(self.action)
        find = as_async(self.find) if self.find is not None else None
        record = await journal.execute(action_key, attempt, lambda key: act(state, key), find)
        crash_point(f"saga.{self.name}.after_call")
        undo = self.record_of(record)
        await ledger.step_done(saga_id, self.name, undo)
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


def _effects(agent: BaseAgent) -> tuple[bool, bool]:
    """(has a compensatable stage, has an uncompensatable stage) within ``agent``."""
    if isinstance(agent, SagaStage):
        return (not agent.uncompensatable, agent.uncompensatable)
    found = [_effects(sub) for sub in agent.sub_agents]
    return (any(c for c, _ in found), any(u for _, u in found))


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
                saga = await ledger.finish(saga.saga_id, SagaStatus.COMMITTED) or saga
                self.metrics.saga_outcome("committed")
        else:
            reason = (state.reason if state else "") or saga.reason or "compensation resumed"
        if saga.status in (SagaStatus.RUNNING, SagaStatus.COMPENSATING):
            if ctx.is_resumable:
                ctx.set_agent_state(
                    self.name, agent_state=SagaState(compensating=True, reason=reason)
                )
                yield self._create_agent_state_event(ctx)
            await self.compensation(ledger).run(saga, reason)
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
        """Runs the stages; yields their events, then a failure (an exception) if one stops it."""
        names = [s.name for s in self.stages]
        start = names.index(state.current_stage) if state and state.current_stage in names else 0
        resuming = state is not None and bool(state.current_stage)
        for stage in self.stages[start:]:
            if ctx.is_resumable and not resuming:
                ctx.set_agent_state(self.name, agent_state=SagaState(current_stage=stage.name))
                yield self._create_agent_state_event(ctx)
            resuming = False
            try:
                async for event in stage.run_async(ctx):
                    yield event
                    if ctx.should_pause_invocation(event):
                        yield _PAUSED
                        return
                    abort = (event.actions.state_delta or {}).get(ABORT_KEY)
                    if abort:
                        yield SagaAborted(str(abort))
                        return
            except Exception as exc:  # a stage failed: the saga rolls back
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
    """Finishes sagas whose process died and that no live run will re-drive."""

    def __init__(
        self,
        saga: SagaSequence,
        sessions: DurableSessionService,
        *,
        app_name: str,
        owner: str,
        quiet_for: float = 300.0,
        batch: int = 10,
    ) -> None:
        """Creates the sweeper.

        Args:
            saga: The SagaSequence whose sagas it finishes (its compensators).
            sessions: The durable session service (its store holds the ledger).
            app_name: The ADK app whose sagas it finishes.
            owner: This worker's name.
            quiet_for: Quiet seconds before a saga with no final status counts as stuck;
                longer than the slowest stage of a saga that runs outside DurableRunner.
            batch: Most sagas per pass.
        """
        self.saga = saga
        self.sessions = sessions
        self.ledger = SagaLedger(sessions.store)
        self.owner = owner
        self.app_name = app_name
        self.quiet_for = quiet_for
        self.batch = batch

    async def sweep_once(self) -> list[Saga]:
        """Compensates every stuck saga of this kind; returns them as they ended."""
        ended = []
        claimed = await self.ledger.claim_stuck(
            self.owner,
            name=self.saga.name,
            app_name=self.app_name,
            quiet_for=self.quiet_for,
            limit=self.batch,
        )
        for saga in claimed:
            reason = saga.reason or "the saga's process died before it finished"
            await self.saga.compensation(self.ledger).run(saga, reason)
            final = await self.ledger.get(saga.saga_id) or saga
            await self._record(final)
            ended.append(final)
        return ended

    async def _record(self, saga: Saga) -> None:
        """Appends the saga's outcome to its session, like the agent's own final event."""
        session = await self.sessions.get_session(
            app_name=saga.app_name, user_id=saga.user_id, session_id=saga.session_id
        )
        if session is not None:
            await self.sessions.append_event(
                session, _final_event(self.saga.name, saga.invocation_id, None, saga)
            )


def plan_stage(name: str, model: Any, *, output_key: str, instruction: str = "") -> LlmAgent:
    """An LLM stage that decides (no outside effect), writing its answer to ``output_key``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return LlmAgent(name=name, model=model, instruction=instruction, output_key=output_key)
