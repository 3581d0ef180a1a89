"""Operations: what a person asks of the fleet, answered from the store alone.

Every answer is read from the durable store, never from a worker's memory, so
any worker (or the CLI with ``--db``) gives the same answer about any run,
including one in progress on another worker. Reads return frozen records;
the writes are the operator's actions (cancel, resolve, abandon, retry, see
:mod:`durable_adk.adk.runs.operators`; answering an interrupt, see
:mod:`durable_adk.adk.runs.inbox`), each one conditional unit of work that also
writes its line in the audit trail.

Several apps may share one database: listings take an ``app_name`` filter,
and a run is classified only by a worker that serves its app (another app's
run is shown with its events and a note saying why it is not classified).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic_core
from google.adk.events.event import Event

from durable_adk import errors
from durable_adk.a2a_tables.tasks import A2aTable
from durable_adk.adk.eventlog.classify import NodeKind, classify
from durable_adk.adk.eventlog.stored import load_event
from durable_adk.adk.eventlog.unreadable import (
    READ_ERRORS,
    placeholder,
    reason_of,
)
from durable_adk.adk.runs import operators
from durable_adk.adk.runs.inbox import InboxAnswer, answer_interrupt
from durable_adk.adk.services.sessions import RUN_METADATA_KEY
from durable_adk.effect_tables.jobs import JobTable
from durable_adk.store.base import Store
from durable_adk.store.sealing.codec import PLACEHOLDER_KEY, placeholder_note
from durable_adk.tables.interrupts import Interrupt, InterruptKind, InterruptStatus, InterruptTable
from durable_adk.tables.ledger import (
    TERMINAL,
    DeadLetter,
    OperatorAction,
    Run,
    RunLedger,
    RunStatus,
)

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


_SEALED = PLACEHOLDER_KEY  # a cheap test before parsing a row read without its key


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
        """The event as a JSON object; an unreadable row as its stand-in.

        Parsed by the parser the session reader uses: a row it cannot parse
        (nested too deep, damaged) is shown as the session shows it, the
        stand-in naming it and the reason
        (:mod:`durable_adk.adk.eventlog.unreadable`), never as a value the
        response could not be written with.
        """
        try:
            parsed: Any = pydantic_core.from_json(self.data)
            reason = placeholder_note(parsed)  # a sealed row read without its key
        except ValueError as exc:
            reason = f"Invalid JSON: {exc}"
        if reason is not None:
            stand_in = placeholder(seq=self.seq, data=self.data, reason=reason)
            shown: dict[str, Any] = stand_in.model_dump(mode="json", exclude_none=True)
            return shown
        return dict(parsed)

    def as_event(self) -> Event:
        """The ADK event; an unreadable row as its stand-in (``eventlog.unreadable``)."""
        note = (
            placeholder_note(pydantic_core.from_json(self.data)) if _SEALED in self.data else None
        )
        if note is not None:
            return placeholder(seq=self.seq, data=self.data, reason=note)
        try:
            return load_event(self.data)
        except READ_ERRORS as exc:
            return placeholder(seq=self.seq, data=self.data, reason=reason_of(exc))


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
class Attempt:
    """One holder of a run, as its events show it (a takeover marker).

    Attributes:
        epoch: The fencing epoch the events were written at.
        first_seq: The first event written at that epoch.
        last_seq: The last one.
        events: How many.
        by_operator: Who, when the events were an operator's answer (else None).
    """

    epoch: int
    first_seq: int
    last_seq: int
    events: int
    by_operator: str | None


@dataclass(frozen=True, slots=True)
class RunDetail:
    """One run, as an operator sees it.

    Attributes:
        run: The ledger row (``classification`` is what recovery last recorded).
        finding: What the classifier reads in its events now (None when the
            root agent is unknown, as in the CLI on a bare database, or the
            run belongs to another app than this worker's).
        events: The run's invocation's events, in log order.
        dead_letters: Its dead letters, newest first.
        actions: What operators did to it, oldest first.
        attempts: Its holders by epoch, from the events' stamps, oldest first.
        note: Why there is no finding, when there is none.
        wakes_at: When its durable sleep is due (its invocation's earliest
            open timer, database clock), None when it sleeps on none.
        a2a_tasks: The A2A tasks whose run this is (served with ``--a2a``).
    """

    run: Run
    finding: Finding | None
    events: tuple[SeqEvent, ...]
    dead_letters: tuple[DeadLetter, ...]
    actions: tuple[OperatorAction, ...] = ()
    attempts: tuple[Attempt, ...] = ()
    note: str | None = None
    wakes_at: float | None = None
    a2a_tasks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Totals over the whole store.

    Attributes:
        sessions: Sessions.
        events: Events in every session's log.
        runs: Runs on the ledger.
        runs_changed_at: When a run row last changed (database clock).
        dead_letters: Dead letters.
        operator_actions: Lines in the operators' audit trail.
    """

    sessions: int
    events: int
    runs: int
    runs_changed_at: float
    dead_letters: int
    operator_actions: int


def _page(limit: int) -> int:
    if not 1 <= limit <= MAX_PAGE:
        raise errors.InvalidArgument(f"limit must be 1..{MAX_PAGE}, got {limit}")
    return limit


def attempts_of(events: Sequence[SeqEvent]) -> tuple[Attempt, ...]:
    """The run's holders by epoch, read from the events' run stamps (takeover markers)."""
    found: list[Attempt] = []
    for event in events:
        data = event.as_dict()
        meta = data.get("custom_metadata") or {}
        stamp = meta.get(RUN_METADATA_KEY)
        if not isinstance(stamp, dict) or "epoch" not in stamp:
            continue
        epoch = int(stamp["epoch"])
        operator = meta.get(operators.OPERATOR_METADATA_KEY)
        by = str(operator.get("by")) if isinstance(operator, dict) else None
        if found and found[-1].epoch == epoch:
            last = found[-1]
            found[-1] = Attempt(epoch, last.first_seq, event.seq, last.events + 1, last.by_operator)
        else:
            found.append(Attempt(epoch, event.seq, event.seq, 1, by))
    return tuple(found)


class Operations:
    """Reads for operators, and the actions they take on runs."""

    def __init__(
        self,
        store: Store,
        *,
        root_agent_name: str | None = None,
        app_name: str | None = None,
        lease_seconds: float = 30.0,
        owner_speaks_first: bool = False,
        nodes: Mapping[str, NodeKind] | None = None,
    ) -> None:
        """Creates the operations over a store.

        Args:
            store: The open store.
            root_agent_name: The app's root agent, which the classifier's done
                test needs; without it run details carry no live finding.
            app_name: The app whose agent ``root_agent_name`` is; another
                app's run is not classified. None with a root agent: every
                run is taken to be of that app (one app per database).
            lease_seconds: How long an operator's claim of a run (while an
                answer is written) holds.
            owner_speaks_first: The root is an LlmAgent: the done test
                follows the agent that owns the turn (see ``classify``).
            nodes: For a Workflow root, its graph nodes' kinds
                (``DurableRunner.node_kinds``): a node in flight is found.
        """
        self.store = store
        self.ledger = RunLedger(store, lease_seconds=lease_seconds)
        self.root_agent_name = root_agent_name
        self.app_name = app_name
        self.owner_speaks_first = owner_speaks_first
        self.nodes = nodes

    async def run_counts(self, *, app_name: str | None = None) -> dict[str, int]:
        """How many runs stand in each status (every status present, zeros included)."""
        counts = {status.value: 0 for status in RunStatus}
        for row in await self.store.fetch("service_run_counts_of_app", {"app_name": app_name}):
            counts[str(row["status"])] = int(row["n"])
        return counts

    async def apps(self) -> dict[str, int]:
        """The apps with runs on this store, and how many runs each has."""
        return {
            str(row["app_name"]): int(row["runs"]) for row in await self.store.fetch("service_apps")
        }

    async def list_runs(
        self, *, status: RunStatus | None = None, limit: int = 100, app_name: str | None = None
    ) -> list[Run]:
        """Runs, newest first, optionally of one status and of one app."""
        return await self.ledger.list_runs_of_app(
            app_name=app_name, status=status, limit=_page(limit)
        )

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
        note = None
        if self.root_agent_name is None:
            note = "no agent is known here: run the command through a worker of its app to classify"
        elif self.app_name is not None and run.app_name != self.app_name:
            note = (
                f"this run is of app {run.app_name!r}; this worker serves {self.app_name!r} and "
                "does not know that app's agents: ask a worker of that app to classify it"
            )
        else:
            found = classify(
                [e.as_event() for e in events],
                run.invocation_id,
                root_agent_name=self.root_agent_name,
                owner_speaks_first=self.owner_speaks_first,
                nodes=self.nodes,
            )
            finding = Finding(
                cls=found.cls.value,
                reason=found.reason,
                unanswered_calls=found.unanswered_calls,
                pending_long_running=found.pending_long_running,
            )
        letters = await self.ledger.dead_letters(run_id=run_id, limit=MAX_PAGE)
        actions = await self.ledger.actions(run_id=run_id, limit=MAX_PAGE)
        return RunDetail(
            run=run,
            finding=finding,
            events=events,
            dead_letters=tuple(letters),
            actions=tuple(reversed(actions)),
            attempts=attempts_of(events),
            note=note,
            wakes_at=await JobTable(self.store).wakes_at(run.invocation_id),
            a2a_tasks=tuple(
                await A2aTable(self.store, run.app_name).tasks_of_invocation(run.invocation_id)
            ),
        )

    async def retry(self, run_id: str, *, by: str = "operator", reason: str | None = None) -> Run:
        """Puts a parked (or failed) run back in its session's queue; the next sweep recovers it.

        Raises:
            NotFound: No such run.
            Conflict: The run is neither parked nor failed, or it was
                abandoned: abandon is final (nothing was changed).
        """
        return (await operators.retry_run(self.ledger, run_id, by=by, reason=reason)).run

    async def cancel(self, run_id: str, *, by: str, reason: str | None = None) -> operators.Outcome:
        """Cancels a run (see :func:`durable_adk.adk.runs.operators.cancel_run`)."""
        return await operators.cancel_run(self.ledger, run_id, by=by, reason=reason)

    async def abandon(self, run_id: str, *, by: str, reason: str) -> operators.Outcome:
        """Abandons a parked run (see :func:`durable_adk.adk.runs.operators.abandon_run`)."""
        return await operators.abandon_run(self.ledger, run_id, by=by, reason=reason)

    async def resolve(
        self,
        run_id: str,
        *,
        by: str,
        reason: str | None = None,
        result: Any = None,
        results: dict[str, Any] | None = None,
    ) -> operators.Outcome:
        """Resolves a parked run (see :func:`durable_adk.adk.runs.operators.resolve_run`)."""
        return await operators.resolve_run(
            self.ledger, run_id, by=by, reason=reason, result=result, results=results
        )

    async def interrupts(
        self,
        *,
        status: str | None = "OPEN",
        app_name: str | None = None,
        session_id: str | None = None,
        kind: str | None = None,
        limit: int = 100,
    ) -> list[Interrupt]:
        """The interrupts inbox across sessions (default: the open ones), oldest first.

        Raises:
            InvalidArgument: An unknown status or kind.
        """
        try:
            wanted = InterruptStatus(status) if status else None
        except ValueError:
            choices = ", ".join(s.value for s in InterruptStatus)
            raise errors.InvalidArgument(f"unknown status {status!r}: use {choices}") from None
        try:
            of_kind = InterruptKind(kind) if kind else None
        except ValueError:
            choices = ", ".join(k.value for k in InterruptKind)
            raise errors.InvalidArgument(f"unknown kind {kind!r}: use {choices}") from None
        return await InterruptTable(self.store).list_interrupts(
            status=wanted,
            app_name=app_name,
            session_id=session_id,
            kind=of_kind,
            limit=_page(limit),
        )

    async def answer(
        self,
        call_id: str,
        *,
        by: str,
        decision: str | None = None,
        payload: Any = None,
        reason: str | None = None,
        session_id: str | None = None,
        owner: str | None = None,
        lease: float = 0.0,
    ) -> InboxAnswer:
        """Answers an interrupt once (see :func:`durable_adk.adk.runs.inbox.answer_interrupt`).

        ``owner`` (this worker) holds the continuation of its own app's
        interrupts; another app's waits for a worker of that app.
        """
        return await answer_interrupt(
            self.store,
            call_id,
            by=by,
            decision=decision,
            payload=payload,
            reason=reason,
            session_id=session_id,
            owner=owner,
            lease=lease,
            owner_app=self.app_name,
        )

    async def actions(
        self, *, run_id: str | None = None, app_name: str | None = None, limit: int = 100
    ) -> list[OperatorAction]:
        """The audit trail, newest first, of one run or one app or all."""
        return await self.ledger.actions(run_id=run_id, app_name=app_name, limit=_page(limit))

    async def dead_letters(
        self, *, run_id: str | None = None, limit: int = 100, app_name: str | None = None
    ) -> list[DeadLetter]:
        """Dead letters, newest first, optionally of one run and of one app's runs."""
        return await self.ledger.dead_letters_of_app(
            app_name=app_name, run_id=run_id, limit=_page(limit)
        )

    async def last_seq(self, key: SessionKey) -> int:
        """The sequence number of a session's newest event.

        Raises:
            NotFound: No such session.
        """
        row = await self.store.fetchrow("service_session_seq", key.params())
        if row is None:
            raise errors.NotFound(f"no session {key.session_id!r} of user {key.user_id!r}")
        return int(row["last_seq"])

    async def invocation_after(self, key: SessionKey, invocation_id: str) -> int:
        """The sequence number before an invocation's first event (the session's
        newest while it has none): where a follower of its run starts.

        Raises:
            NotFound: No such session.
        """
        row = await self.store.fetchrow(
            "service_invocation_after", {**key.params(), "invocation_id": invocation_id}
        )
        if row is None:
            raise errors.NotFound(f"no session {key.session_id!r} of user {key.user_id!r}")
        return int(row["after_seq"])

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
            operator_actions=int(row["operator_actions"]),
        )


def is_settled(runs: Sequence[Run]) -> bool:
    """Whether none of these runs is queued or running."""
    return all(run.status in TERMINAL for run in runs)
