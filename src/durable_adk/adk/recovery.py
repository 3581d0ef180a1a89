"""The recovery sweeper: every orphaned run is found, classified and ended.

``Sweeper.recover_once()`` claims expired runs through the ledger's single
atomic statement (so a duplicate sweep by another worker is harmless), at most
``batch`` per pass, reads the invocation's events and acts on the class:

=================  ==========================================================
NOT_STARTED        drive it from the stored request, same invocation id
MODEL_INFLIGHT     re-drive the invocation (ADK resumability continues it)
TOOL_UNANSWERED    re-drive when every unanswered tool is declared idempotent
                   (or journaled); otherwise park: "outcome unknown"
PAUSED             mark PAUSED: only the job resumer may answer the call; but a
                   run that carries that answer (a resume whose worker died
                   before ADK stored it) is re-driven with it
ACTUALLY_DONE      mark DONE; never re-drive (that would ask the model again)
=================  ==========================================================

A claim past ``max_attempts`` parks the run with a dead letter holding the
request, the classification, the last events and the error. ``serve()`` runs a
pass at start-up and then periodically.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from google.adk.events.event import Event
from google.genai import types

from durable_adk import errors
from durable_adk.adk.classify import Classification, OrphanClass, classify, recover_invocation_id
from durable_adk.adk.runner import LAST_EVENTS_KEPT, DurableRunner
from durable_adk.journal import OutcomeUnknown
from durable_adk.ledger import Run, RunStatus
from durable_adk.loops import periodically
from durable_adk.metrics import Metrics

logger = logging.getLogger("durable_adk.recovery")


def _request_text(request: str) -> str | None:
    """The text of a stored request (a Content as JSON), if it has any."""
    try:
        parts = json.loads(request).get("parts") or []
    except (ValueError, AttributeError):
        return None
    texts = [str(p["text"]) for p in parts if isinstance(p, dict) and p.get("text")]
    return "".join(texts) or None


@dataclass(frozen=True, slots=True)
class Recovery:
    """What one recovery did.

    Attributes:
        run_id: The run.
        found: The class found in the event log.
        action: What the sweeper did: ``redrive``, ``mark_done``, ``mark_paused``, ``park``.
        status: The run's status afterwards.
        reason: Why (the classifier's reason, or the parking reason).
    """

    run_id: str
    found: OrphanClass
    action: str
    status: RunStatus
    reason: str


class Sweeper:
    """Recovers the runs whose workers died."""

    def __init__(
        self,
        runner: DurableRunner,
        *,
        batch: int = 10,
        interval: float = 5.0,
        metrics: Metrics | None = None,
        concurrency: int = 4,
    ) -> None:
        """Creates a sweeper that recovers through ``runner``.

        Args:
            runner: The DurableRunner that re-drives runs (its worker id owns the claims).
            batch: Most runs claimed per pass by this worker.
            interval: Seconds between passes in :meth:`serve`.
            metrics: Where recoveries, parkings and recovery spans go
                (default: the runner's).
            concurrency: How many of a pass's runs are recovered at a time.
        """
        if batch < 1 or concurrency < 1 or interval <= 0:
            raise errors.InvalidArgument("batch and concurrency must be >= 1, interval > 0")
        self.concurrency = concurrency
        self.runner = runner
        self.metrics = metrics if metrics is not None else runner.metrics
        self.ledger = runner.ledger
        self.batch = batch
        self.interval = interval

    async def recover_once(self) -> list[Recovery]:
        """Claims and recovers up to ``batch`` expired runs; returns what was done."""
        claimed = await self.ledger.claim_expired(
            self.runner.worker_id, limit=self.batch, app_name=self.runner.app_name
        )
        if not claimed:
            return []
        # The claimed runs belong to different sessions (one RUNNING run per
        # session): they are recovered side by side, so one run's round trips
        # overlap another's work.
        slots = asyncio.Semaphore(self.concurrency)

        async def one(run: Run) -> Recovery | None:
            async with slots:
                return await self._recover_in_span(run)

        # Every claimed run's recovery ends before the pass does; a failure
        # (the store going away, say) is raised once they all have.
        results = await asyncio.gather(*(one(run) for run in claimed), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return [r for r in results if isinstance(r, Recovery)]

    async def _recover_in_span(self, run: Run) -> Recovery | None:
        try:
            with self.metrics.span(
                "durable_adk.recovery",
                {
                    "durable_adk.run_id": run.run_id,
                    "durable_adk.session_id": run.session_id,
                    "durable_adk.attempt": run.attempts,
                },
            ) as span:
                recovery = await self._recover(run)
                span.set_attribute("durable_adk.found", recovery.found.value)
                span.set_attribute("durable_adk.action", recovery.action)
        except errors.Fenced:
            logger.warning("run %s was taken over during its recovery", run.run_id)
            return None
        self.metrics.recovered(recovery.found.value, recovery.action)
        return recovery

    async def _recover(self, run: Run) -> Recovery:
        session = await self.runner.sessions.get_session(
            app_name=run.app_name, user_id=run.user_id, session_id=run.session_id
        )
        events: list[Event] = list(session.events) if session else []
        invocation_id: str | None = run.invocation_id
        if not invocation_id:
            # Only a row written without an id needs the user event to find it:
            # DurableRunner always chooses the id first, and searching by time
            # could pick the previous turn's invocation and end this run unseen.
            invocation_id = recover_invocation_id(
                events, started_at=run.created_at, request_text=_request_text(run.request)
            )
        found = classify(events, invocation_id, root_agent_name=self.runner.root_agent_name)
        mine = [e for e in events if e.invocation_id == invocation_id][-LAST_EVENTS_KEPT:]
        if run.attempts > self.ledger.max_attempts:
            return await self._park(
                run,
                found,
                mine,
                f"gave up after {run.attempts - 1} attempts: {run.last_error or found.reason}",
            )
        if found.cls is OrphanClass.ACTUALLY_DONE:
            await self._finish(run, RunStatus.DONE, found)
            return Recovery(run.run_id, found.cls, "mark_done", RunStatus.DONE, found.reason)
        message = types.Content.model_validate(json.loads(run.request))
        answers = {p.function_response.id for p in message.parts or () if p.function_response}
        if found.cls is OrphanClass.PAUSED and not answers & set(found.pending_long_running):
            await self._finish(run, RunStatus.PAUSED, found)
            return Recovery(run.run_id, found.cls, "mark_paused", RunStatus.PAUSED, found.reason)
        if found.cls is OrphanClass.TOOL_UNANSWERED:
            unsafe = [
                name
                for _, name in found.unanswered_calls
                if name not in self.runner.idempotent_tools
            ]
            if unsafe:
                return await self._park(
                    run,
                    found,
                    mine,
                    f"outcome unknown: {', '.join(sorted(set(unsafe)))} may have acted",
                )
        resume = found.cls is not OrphanClass.NOT_STARTED
        # This worker holds the run and has just read its session: ADK's read,
        # next, is served from that.
        self.runner.sessions.trust_next_read((run.app_name, run.user_id, run.session_id))
        ended: list[RunStatus] = []
        try:
            driven = self.runner.drive(
                run, message, resume=resume, classification=found.cls.value, outcome=ended
            )
            async for _event in driven:
                pass
        except errors.Fenced:
            raise
        except OutcomeUnknown as exc:  # drive() parked it with a dead letter
            return Recovery(run.run_id, found.cls, "park", RunStatus.PARKED, str(exc))
        except Exception as exc:  # the run is FAILED on the ledger by drive()
            logger.warning("run %s failed on re-drive: %s", run.run_id, exc)
            return Recovery(run.run_id, found.cls, "redrive", RunStatus.FAILED, str(exc))
        status = ended[0] if ended else RunStatus.DONE
        return Recovery(run.run_id, found.cls, "redrive", status, found.reason)

    async def _finish(self, run: Run, status: RunStatus, found: Classification) -> None:
        if not await self.ledger.finish(run.lease, status, classification=found.cls.value):
            raise errors.Fenced(f"run {run.run_id} was taken over during recovery")

    async def _park(
        self, run: Run, found: Classification, mine: list[Event], reason: str
    ) -> Recovery:
        last = [json.loads(e.model_dump_json(exclude_none=True)) for e in mine]
        if not await self.ledger.park(
            run.lease, error=reason, classification=found.cls.value, last_events=last
        ):
            raise errors.Fenced(f"run {run.run_id} was taken over during recovery")
        self.metrics.run_parked()
        return Recovery(run.run_id, found.cls, "park", RunStatus.PARKED, reason)

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[Sweeper]:
        """Runs a pass now, then one every ``interval`` seconds, until the block exits."""
        await self.recover_once()
        async with periodically(
            self.interval, self.recover_once, "recovery", first_after=self.interval
        ):
            yield self
