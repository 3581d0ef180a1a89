"""Operations: what a person asks of the fleet, answered from the store alone.

Every answer is read from the durable store, never from a worker's memory, so
any worker (or the CLI with ``--db``) gives the same answer about any run,
including one in progress on another worker. Reads return frozen records;
the only write is :meth:`Operations.retry`, which goes through the ledger's
own conditional statement (retrying a run that is neither parked nor failed changes
nothing).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.adk.events.event import Event

from durable_adk import errors
from durable_adk.adk.classify import classify
from durable_adk.ledger import TERMINAL, DeadLetter, Run, RunLedger, RunStatus
from durable_adk.store.base import Store

MAX_PAGE = 1000
"""Most records one listing returns."""


@dataclass(frozen=True, slots=True)
class SessionKey:
    """Names one session.

    Attributes:
        app_name: The ADK app.
        user_id: The session's user.
        session_id: The session.
    """

    app_name: str
    user_id: str
    session_id: str

    def params(self) -> dict[str, str]:
        """The named-query parameters naming this session."""
        return {"app_name": self.app_name, "user_id": self.user_id, "session_id": self.session_id}


@dataclass(frozen=True, slots=True)
class SeqEvent:
    """One stored event with its place in the session's log.

    Attributes:
        seq: The per-session sequence number (1, 2, 3...).
        data: The ADK event as stored (JSON text).
    """

    seq: int
    data: str

    def as_dict(self) -> dict[str, Any]:
        """The event as a JSON object."""
        parsed: dict[str, Any] = json.loads(self.data)
        return parsed


@dataclass(frozen=True, slots=True)
class Finding:
    """What the classifier reads in a run's events now.

    Attributes:
        cls: The class (NOT_STARTED, MODEL_INFLIGHT, TOOL_UNANSWERED, PAUSED, ACTUALLY_DONE).
        reason: Why, in words.
        unanswered_calls: ``(call id, tool name)`` of calls without a response.
        pending_long_running: Ids of long-running calls awaiting their answer.
    """

    cls: str
    reason: str
    unanswered_calls: tuple[tuple[str, str], ...]
    pending_long_running: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RunDetail:
    """One run, as an operator sees it.

    Attributes:
        run: The ledger row (``classification`` is what recovery last recorded).
        finding: What the classifier reads in its events now (None when the
            root agent is unknown, as in the CLI on a bare database).
        events: The run's invocation's events, in log order.
        dead_letters: Its dead letters, newest first.
    """

    run: Run
    finding: Finding | None
    events: tuple[SeqEvent, ...]
    dead_letters: tuple[DeadLetter, ...]


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Totals over the whole store.

    Attributes:
        sessions: Sessions.
        events: Events in every session's log.
        runs: Runs on the ledger.
        runs_changed_at: When a run row last changed (database clock).
        dead_letters: Dead letters.
    """

    sessions: int
    events: int
    runs: int
    runs_changed_at: float
    dead_letters: int


def _page(limit: int) -> int:
    if not 1 <= limit <= MAX_PAGE:
        raise errors.InvalidArgument(f"limit must be 1..{MAX_PAGE}, got {limit}")
    return limit


class Operations:
    """Reads for operators, and the one action they take on a run: retry."""

    def __init__(self, store: Store, *, root_agent_name: str | None = None) -> None:
        """Creates the operations over a store.

        Args:
            store: The open store.
            root_agent_name: The app's root agent, which the classifier's done
                test needs; without it run details carry no live finding.
        """
        self.store = store
        self.ledger = RunLedger(store)
        self.root_agent_name = root_agent_name

    async def run_counts(self) -> dict[str, int]:
        """How many runs stand in each status (every status present, zeros included)."""
        counts = {status.value: 0 for status in RunStatus}
        for row in await self.store.fetch("service_run_counts"):
            counts[str(row["status"])] = int(row["n"])
        return counts

    async def list_runs(self, *, status: RunStatus | None = None, limit: int = 100) -> list[Run]:
        """Runs, newest first, optionally of one status."""
        return await self.ledger.list_runs(status=status, limit=_page(limit))

    async def get_run(self, run_id: str) -> Run:
        """One run.

        Raises:
            NotFound: No such run.
        """
        run = await self.ledger.get(run_id)
        if run is None:
            raise errors.NotFound(f"no run {run_id!r}")
        return run

    async def run_detail(self, run_id: str) -> RunDetail:
        """One run with its events, the classifier's reading and its dead letters.

        Raises:
            NotFound: No such run.
        """
        run = await self.get_run(run_id)
        key = SessionKey(run.app_name, run.user_id, run.session_id)
        rows = await self.store.fetch(
            "service_invocation_events", {**key.params(), "invocation_id": run.invocation_id}
        )
        events = tuple(SeqEvent(int(r["seq"]), str(r["data"])) for r in rows)
        finding = None
        if self.root_agent_name is not None:
            found = classify(
                [Event.model_validate_json(e.data) for e in events],
                run.invocation_id,
                root_agent_name=self.root_agent_name,
            )
            finding = Finding(
                cls=found.cls.value,
                reason=found.reason,
                unanswered_calls=found.unanswered_calls,
                pending_long_running=found.pending_long_running,
            )
        letters = await self.ledger.dead_letters(run_id=run_id, limit=MAX_PAGE)
        return RunDetail(run=run, finding=finding, events=events, dead_letters=tuple(letters))

    async def retry(self, run_id: str) -> Run:
        """Puts a parked or failed run back in its session's queue; the next sweep recovers it.

        Raises:
            NotFound: No such run.
            Conflict: The run is neither parked nor failed (nothing was changed).
        """
        retryable = (RunStatus.PARKED, RunStatus.FAILED)
        before = await self.get_run(run_id)
        after = await self.ledger.retry(run_id)
        if after is None:
            raise errors.NotFound(f"no run {run_id!r}")
        if before.status not in retryable or after.status in retryable:
            raise errors.Conflict(
                f"run {run_id!r} is {after.status.value}, not PARKED or FAILED: "
                "only a parked or failed run is retried"
            )
        return after

    async def dead_letters(
        self, *, run_id: str | None = None, limit: int = 100
    ) -> list[DeadLetter]:
        """Dead letters, newest first, optionally of one run."""
        return await self.ledger.dead_letters(run_id=run_id, limit=_page(limit))

    async def last_seq(self, key: SessionKey) -> int:
        """The sequence number of a session's newest event.

        Raises:
            NotFound: No such session.
        """
        row = await self.store.fetchrow("service_session_seq", key.params())
        if row is None:
            raise errors.NotFound(f"no session {key.session_id!r} of user {key.user_id!r}")
        return int(row["last_seq"])

    async def events_after(
        self, key: SessionKey, after: int, *, limit: int = 500
    ) -> list[SeqEvent]:
        """A session's events after sequence number ``after``, in log order."""
        if after < 0:
            raise errors.InvalidArgument(f"after must be >= 0, got {after}")
        rows = await self.store.fetch(
            "service_events_after", {**key.params(), "after_seq": after, "limit": _page(limit)}
        )
        return [SeqEvent(int(r["seq"]), str(r["data"])) for r in rows]

    async def session_runs(self, key: SessionKey, *, limit: int = 100) -> list[Run]:
        """The runs of a session, newest first."""
        rows = await self.store.fetch(
            "service_session_runs", {**key.params(), "limit": _page(limit)}
        )
        return [Run.from_row(r) for r in rows]

    async def stats(self) -> StoreStats:
        """Totals over the whole store."""
        row = await self.store.fetchrow("service_store_stats")
        assert row is not None
        return StoreStats(
            sessions=int(row["sessions"]),
            events=int(row["events"]),
            runs=int(row["runs"]),
            runs_changed_at=float(row["runs_changed_at"]),
            dead_letters=int(row["dead_letters"]),
        )


def is_settled(runs: Sequence[Run]) -> bool:
    """Whether none of these runs is queued or running."""
    return all(run.status in TERMINAL for run in runs)
