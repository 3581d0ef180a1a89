"""DurableRunner: ADK's Runner with a ledger row, a lease, fencing and a queue.

What it guarantees:

* A run is on the ledger (with its request and the invocation id we chose)
  before ADK is called, so a crash at any instant leaves a row the sweeper
  finds.
* One run per session drives at a time across every worker; a second run for
  a busy session waits ``QUEUED``, in order, and its caller then gets its
  events.
* The lease is renewed by a timer task, independent of how fast the caller
  reads events. A worker whose renewal fails stops driving the run, and the
  store refuses its further writes (every event carries the run id and epoch
  in ``custom_metadata["durable_adk"]``).
* The row ends ``DONE``, ``PAUSED`` (the invocation stopped on an unanswered
  long-running call) or ``FAILED``.
* A run that answers long-running calls (``run(..., invocation_id=...)`` with a
  message of function responses) continues the invocation that made the calls
  and answers each call at most once: an answer the session already holds from
  another run is dropped, and a re-drive of a run whose answer was stored
  continues the invocation without storing it again.

Apps run with ADK resumability on: a re-driven invocation then skips finished
steps and replays an unanswered call with its original id instead of asking
the model again (see docs/adk-notes.md, section 6). A bare agent gets an App
with resumability enabled; an App without it is refused. An in-memory session
service is refused: nothing would survive the crash we are here for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import uuid
import warnings
from collections.abc import AsyncGenerator, Iterable
from typing import Any, TypeVar

from google.adk.agents import BaseAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.agents.run_config import RunConfig
from google.adk.apps import App, ResumabilityConfig
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events.event import Event
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.sessions.session import Session
from google.genai import types

from durable_adk import errors
from durable_adk.adk import optional_imports
from durable_adk.adk.classify import OrphanClass, classify
from durable_adk.adk.session_service import RUN_METADATA_KEY, DurableSessionService
from durable_adk.adk.tools import is_journaled
from durable_adk.journal import OutcomeUnknown
from durable_adk.ledger import Run, RunLedger, RunStatus
from durable_adk.metrics import NO_METRICS, Metrics
from durable_adk.testing.crash import crash_point

logger = logging.getLogger("durable_adk.runner")

optional_imports.remember_missing()

LAST_EVENTS_KEPT = 20
"""How many of an invocation's last events a dead letter keeps."""


class _InvocationIdRunner(Runner):
    """Runner that starts new invocations under the id we already put on the ledger.

    ``_new_invocation_context`` is ADK's documented extension point; a resumable
    non-LLM root treats any explicit ``invocation_id`` as a resume, so the id is
    handed over per session instead. One run per session drives at a time (the
    ledger's guarantee), so the session names the run.
    """

    chosen: dict[tuple[str, str], str]

    def _new_invocation_context(
        self, session: Session, *, invocation_id: str | None = None, **kwargs: Any
    ) -> InvocationContext:
        chosen = self.__dict__.setdefault("chosen", {}).get((session.user_id, session.id))
        return super()._new_invocation_context(
            session, invocation_id=invocation_id or chosen, **kwargs
        )


E = TypeVar("E", bound=BaseException)

_ALREADY_ANSWERED = types.Content(role="user", parts=[])
"""Sentinel of :func:`_unanswered`: every call the message answers is already answered."""


async def _no_events() -> AsyncGenerator[Event, None]:
    return
    yield  # pragma: no cover - makes this an (empty) async generator


INTERIM_KEY = "interim"
"""A function response whose ``response[INTERIM_KEY]`` is true (progress) leaves its call open."""


def _unanswered(
    events: Iterable[Event], message: types.Content, run_id: str
) -> types.Content | None:
    """What to send for a message of function responses, given the stored events.

    Each call is answered once. Parts answering a call the session already
    holds a final answer for (from another run) are dropped: two resumes of one
    call, the second changes nothing. Parts this run already stored (a crash
    after ADK stored them) are not sent again: with nothing left to send, the
    invocation is re-driven without a message.

    Returns:
        The message (possibly with fewer parts), ``None`` to re-drive without a
        message, or ``_ALREADY_ANSWERED``.
    """
    final: set[str] = set()
    own: set[str] = set()
    for event in events:
        if event.author != "user":
            continue
        stamp = (event.custom_metadata or {}).get(RUN_METADATA_KEY)
        by_this_run = isinstance(stamp, dict) and stamp.get("run_id") == run_id
        for response in event.get_function_responses():
            if not response.id:
                continue
            if by_this_run:
                own.add(response.id)
            elif not (response.response or {}).get(INTERIM_KEY):
                final.add(response.id)
    parts = message.parts or []
    kept = [
        p
        for p in parts
        if not (p.function_response and (p.function_response.id or "") in own | final)
    ]
    if len(kept) == len(parts):
        return message
    if kept:
        return message.model_copy(update={"parts": kept})
    stored_by_me = any(p.function_response and p.function_response.id in own for p in parts)
    return None if stored_by_me else _ALREADY_ANSWERED


def cause_of(exc: BaseException, kind: type[E]) -> E | None:
    """The ``kind`` error behind ``exc``, if any (ADK's node runner wraps agent errors)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def journaled_tool_names(root: object) -> frozenset[str]:
    """Names of the journaled tools anywhere in an agent tree (safe to re-drive)."""
    names: set[str] = set()
    pending = [root]
    while pending:
        agent = pending.pop()
        for tool in getattr(agent, "tools", None) or ():
            if is_journaled(tool):
                names.add(str(getattr(tool, "name", getattr(tool, "__name__", ""))))
        pending.extend(getattr(agent, "sub_agents", None) or ())
    return frozenset(names)


class DurableRunner:
    """Drives ADK runs that survive crashes.

    Example::

        async with open_store("sqlite:///durable_adk.db") as store:
            runner = DurableRunner(app=root_agent, store=store, app_name="shop")
            async for event in runner.run(user_id="u1", session_id="s1", message="hi"):
                print(event.author, event.content)
    """

    def __init__(
        self,
        *,
        app: App | BaseAgent,
        store: Any,
        worker_id: str | None = None,
        lease: float = 30.0,
        app_name: str | None = None,
        session_service: BaseSessionService | None = None,
        max_attempts: int = 3,
        backoff: float = 1.0,
        idempotent_tools: Iterable[str] = (),
        queue_poll: float = 0.1,
        metrics: Metrics = NO_METRICS,
    ) -> None:
        """Creates the runner.

        Args:
            app: An ADK App with resumability on, or a bare root agent (an App
                with resumability is made for it).
            store: The open durable store.
            worker_id: This worker's name on the ledger (default: host:pid:random).
            lease: Lease length in seconds; renewed every third of it.
            app_name: The app name for a bare agent (default: the agent's name).
            session_service: A DurableSessionService over ``store`` (default: one is made).
            max_attempts: Recovery claims before a run is parked.
            backoff: First back-off between recovery attempts, doubled each time.
            idempotent_tools: Tools safe to run again after a crash (re-driven
                rather than parked when their call is unanswered).
            queue_poll: How often a queued run checks whether its turn came.
            metrics: Where run outcomes, lost leases and run spans go.
        """
        if isinstance(app, BaseAgent):
            with warnings.catch_warnings():
                # ADK flags resumability as experimental; durable runs depend on it by design.
                warnings.simplefilter("ignore", UserWarning)
                resumable = ResumabilityConfig(is_resumable=True)
            app = App(name=app_name or app.name, root_agent=app, resumability_config=resumable)
        if not (app.resumability_config and app.resumability_config.is_resumable):
            raise errors.InvalidArgument(
                "durable runs need ADK resumability: build the App with "
                "resumability_config=ResumabilityConfig(is_resumable=True), or pass the bare agent"
            )
        if session_service is None:
            session_service = DurableSessionService(store)
        if not isinstance(session_service, DurableSessionService):
            raise errors.InvalidArgument(
                f"{type(session_service).__name__} cannot back durable runs: use "
                "DurableSessionService (an in-memory service loses everything in a crash)"
            )
        self.app = app
        self.store = store
        self.sessions = session_service
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.lease_seconds = lease
        self.ledger = RunLedger(
            store, lease_seconds=lease, backoff_seconds=backoff, max_attempts=max_attempts
        )
        self.idempotent_tools = frozenset(idempotent_tools) | journaled_tool_names(app.root_agent)
        self.queue_poll = queue_poll
        self.metrics = metrics
        self.adk = _InvocationIdRunner(app=app, session_service=session_service)

    @property
    def root_agent_name(self) -> str:
        """The name of the app's root agent (the classifier's done test needs it)."""
        root = self.app.root_agent
        if root is None:
            raise errors.InvalidArgument("the App has no root agent")
        return root.name

    @property
    def app_name(self) -> str:
        """The ADK app's name."""
        return self.app.name

    async def run(
        self,
        *,
        user_id: str,
        session_id: str,
        message: types.Content | str,
        invocation_id: str | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Runs one turn durably and yields its events.

        The ledger row is written first; the run then waits its turn in the
        session's queue, drives ADK under a renewed lease, and finishes the row.

        Args:
            user_id: The session's user.
            session_id: The session (created if missing).
            message: The user's message; or, with ``invocation_id``, a message
                made only of function responses answering that invocation's
                long-running calls (same id and name as each call).
            invocation_id: Continue this existing invocation instead of
                starting a new one: the ledger row carries its id, so recovery
                re-drives the invocation that made the calls.

        Raises:
            durable_adk.errors.Fenced: This worker lost the run to another.
            durable_adk.errors.InvalidArgument: ``invocation_id`` with a
                message that is not made of function responses.
        """
        run, content = await self.submit(
            user_id=user_id, session_id=session_id, message=message, invocation_id=invocation_id
        )
        claimed = await self.wait_for_turn(run)
        crash_point("runner.before_first_event")
        # Closed here, not by whoever drops this generator: an early exit of the
        # caller ends the drive (and its heartbeat) at once.
        driven = self.drive(claimed, content, resume=invocation_id is not None)
        async with contextlib.aclosing(driven) as events:
            async for event in events:
                yield event

    async def submit(
        self,
        *,
        user_id: str,
        session_id: str,
        message: types.Content | str,
        invocation_id: str | None = None,
    ) -> tuple[Run, types.Content]:
        """Puts a run on the ledger, creating the session if missing.

        The first step of :meth:`run`, for callers that must know the run id
        before its turn comes (the HTTP service). A new run whose session is
        free is claimed at once (RUNNING, held by this worker); otherwise it
        waits QUEUED. Either way :meth:`wait_for_turn` comes next. Arguments
        as for :meth:`run`.

        Returns:
            The run as recorded and the message as a Content.
        """
        content = (
            types.Content(role="user", parts=[types.Part(text=message)])
            if isinstance(message, str)
            else message
        )
        if not content.parts:
            raise errors.InvalidArgument("message has no parts")
        if invocation_id is not None and not all(p.function_response for p in content.parts):
            raise errors.InvalidArgument(
                "a message continuing an invocation must be made only of function responses"
            )
        request = content.model_dump(mode="json", exclude_none=True)
        if invocation_id is None:
            # The common case in one unit of work: session made if missing, run
            # recorded and, if the session is free, claimed.
            now = time.time()
            started = await self.ledger.start(
                app_name=self.app_name,
                user_id=user_id,
                session_id=session_id,
                request=request,
                owner=self.worker_id,
                now=now,
            )
            if started is not None:
                # Trusted only while this run holds the new session: a run that
                # waits QUEUED reads it when its turn comes.
                if (
                    started.created_session_pk is not None
                    and started.run.status is RunStatus.RUNNING
                ):
                    self.sessions.adopt_created(
                        (self.app_name, user_id, session_id),
                        pk=started.created_session_pk,
                        app_state=started.app_state,
                        user_state=started.user_state,
                        created_at=now,
                    )
                return started.run, content
        existing = await self.sessions.get_session(
            app_name=self.app_name, user_id=user_id, session_id=session_id
        )
        if existing is None:
            # Another caller may create it at the same moment; either way it exists.
            with contextlib.suppress(AlreadyExistsError):
                await self.sessions.create_session(
                    app_name=self.app_name, user_id=user_id, session_id=session_id
                )
        run = await self.ledger.submit(
            app_name=self.app_name,
            user_id=user_id,
            session_id=session_id,
            request=request,
            owner=self.worker_id,
            invocation_id=invocation_id,
        )
        return run, content

    async def wait_for_turn(self, run: Run) -> Run:
        """Waits until our QUEUED run heads its session's queue, then claims it.

        Raises:
            durable_adk.errors.Fenced: The queued run was taken by another worker.
        """
        if run.status is RunStatus.RUNNING and run.owner == self.worker_id:
            return run  # claimed when it was submitted
        renew_every = self.lease_seconds / 3
        waited = 0.0
        while True:
            claimed = await self.ledger.claim_queued(run.run_id, self.worker_id)
            if claimed is not None:
                return claimed
            await asyncio.sleep(self.queue_poll)
            waited += self.queue_poll
            if waited >= renew_every:
                waited = 0.0
                if not await self.ledger.renew(run.lease):
                    raise errors.Fenced(f"queued run {run.run_id} was taken by another worker")

    async def drive(
        self,
        run: Run,
        message: types.Content,
        *,
        resume: bool,
        classification: str | None = None,
        outcome: list[RunStatus] | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Drives a claimed run to its end under a renewed lease, in a ``durable_adk.run`` span.

        See :meth:`_drive` for the arguments.
        """
        with self.metrics.span(
            "durable_adk.run",
            {
                "durable_adk.run_id": run.run_id,
                "durable_adk.app_name": run.app_name,
                "durable_adk.session_id": run.session_id,
                "durable_adk.invocation_id": run.invocation_id,
                "durable_adk.epoch": run.epoch,
                "durable_adk.attempt": run.attempts,
                "durable_adk.resume": resume,
            },
        ):
            driven = self._drive(
                run, message, resume=resume, classification=classification, outcome=outcome
            )
            async with contextlib.aclosing(driven) as events:
                async for event in events:
                    yield event

    async def _drive(
        self,
        run: Run,
        message: types.Content,
        *,
        resume: bool,
        classification: str | None = None,
        outcome: list[RunStatus] | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Drives a claimed run to its end under a renewed lease.

        Args:
            run: A run this worker holds (RUNNING, our owner and epoch).
            message: The original request.
            resume: Re-drive the invocation id on the ledger (recovery, or an
                answer to its long-running calls) rather than start it.
            classification: What recovery found, recorded on the row when it ends.
            outcome: Receives the status the run ended with (DONE or PAUSED)
                once it is on the ledger.
        """
        lease = run.lease
        key = (run.app_name, run.user_id, run.session_id)
        new_message: types.Content | None = message
        if resume and any(p.function_response for p in message.parts or ()):
            before = await self.sessions.get_session(
                app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
            )
            new_message = _unanswered(before.events if before else [], message, run.run_id)
            # We hold the session's run and have just read it: ADK's read, next, need not.
            self.sessions.trust_next_read(key)
        lost = asyncio.Event()
        heartbeat = asyncio.create_task(self._heartbeat(run, lost))
        run_config = RunConfig(
            custom_metadata={RUN_METADATA_KEY: {"run_id": run.run_id, "epoch": run.epoch}}
        )
        seen: list[Event] = []
        chosen = self.adk.__dict__.setdefault("chosen", {})
        chosen[(run.user_id, run.session_id)] = run.invocation_id
        try:
            if new_message is _ALREADY_ANSWERED:
                events_of: Any = _no_events()  # another run answered every call: nothing to do
            else:
                events_of = self.adk.run_async(
                    user_id=run.user_id,
                    session_id=run.session_id,
                    invocation_id=run.invocation_id if resume else None,
                    new_message=new_message,
                    run_config=run_config,
                )
            async with contextlib.aclosing(events_of) as events:
                async for event in events:
                    if lost.is_set():
                        raise errors.Fenced(f"lost the lease of run {run.run_id}")
                    seen.append(event)
                    yield event
        except Exception as exc:
            fenced = cause_of(exc, errors.Fenced)
            if fenced is not None:
                logger.warning("run %s: lease lost, stopped driving", run.run_id)
                raise fenced from exc
            unknown = cause_of(exc, OutcomeUnknown)
            if unknown is not None:
                await self._park_unknown(run, unknown)
                raise unknown from exc
            failed = f"{type(exc).__name__}: {exc}"
            if not await self.ledger.finish(lease, RunStatus.FAILED, error=failed):
                raise errors.Fenced(f"run {run.run_id} was taken over before it failed") from exc
            self.metrics.run_finished(RunStatus.FAILED.value)
            raise
        finally:
            self.sessions.distrust(key)
            chosen.pop((run.user_id, run.session_id), None)
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
        crash_point("runner.before_finish")
        # The cache holds every event this run appended (we hold the session);
        # read only when it was dropped.
        events = self.sessions.cached_events(key)
        if events is None:
            session = await self.sessions.get_session(
                app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
            )
            events = session.events if session else seen
        verdict = classify(events, run.invocation_id, root_agent_name=self.root_agent_name)
        status = RunStatus.PAUSED if verdict.cls is OrphanClass.PAUSED else RunStatus.DONE
        if not await self.ledger.finish(lease, status, classification=classification):
            raise errors.Fenced(f"run {run.run_id} was taken over before it could finish")
        self.metrics.run_finished(status.value)
        if outcome is not None:
            outcome.append(status)

    async def _park_unknown(self, run: Run, unknown: OutcomeUnknown) -> None:
        """Parks a run whose outside effect cannot be confirmed either way."""
        session = await self.sessions.get_session(
            app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
        )
        mine = [
            e for e in (session.events if session else []) if e.invocation_id == run.invocation_id
        ]
        last = [json.loads(e.model_dump_json(exclude_none=True)) for e in mine[-LAST_EVENTS_KEPT:]]
        if not await self.ledger.park(
            run.lease, error=str(unknown), classification="TOOL_UNANSWERED", last_events=last
        ):
            raise errors.Fenced(f"run {run.run_id} was taken over before it could be parked")
        self.metrics.run_parked()
        self.metrics.run_finished(RunStatus.PARKED.value)

    async def _heartbeat(self, run: Run, lost: asyncio.Event) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                renewed = await self.ledger.renew(run.lease)
            except errors.StoreError:
                logger.exception("run %s: lease renewal failed", run.run_id)
                renewed = False
            if not renewed:
                self.metrics.lease_lost()
                lost.set()
                return
