"""The run ledger: every accepted run is on record, leased, fenced and queued.

What it guarantees (framework-agnostic: no ADK import here):

* A run is written (``QUEUED``) before anything drives it, with the request
  that started it, so a run that never started can still be replayed.
* At most one run per session is ``RUNNING``, across every worker (a partial
  unique index); later runs of the session wait ``QUEUED`` in submission order.
* A ``RUNNING`` run is owned through a lease on the database clock. Renewing,
  finishing and parking are conditional on ``(owner, epoch)``; every claim
  bumps the epoch, so a worker presumed dead can write nothing once its run
  was taken over (the session store checks the same epoch on appends).
* Recovery claims are single statements (``FOR UPDATE SKIP LOCKED`` on
  PostgreSQL): two sweepers never claim one run. Attempts are counted in the
  claim; the next recovery waits an exponential back-off; past
  ``max_attempts`` the run is ``PARKED`` with a dead letter.
* A drive that met a transient fault hands its run back (:meth:`RunLedger.release`):
  still RUNNING, lease expired, next recovery after the back-off, so the sweeper
  takes it like any orphan. ``retry`` puts a PARKED or FAILED run back in its queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from durable_adk import errors
from durable_adk.ids import check_id
from durable_adk.store.base import Params, Row, Store
from durable_adk.store.sealing.codec import open_state
from durable_adk.store.wakeups import session_key
from durable_adk.versions import UNVERSIONED, Serving


class RunStatus(StrEnum):
    """Where a run stands."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    DONE = "DONE"
    FAILED = "FAILED"
    PARKED = "PARKED"
    CANCELLED = "CANCELLED"


TERMINAL = frozenset(
    {RunStatus.PAUSED, RunStatus.DONE, RunStatus.FAILED, RunStatus.PARKED, RunStatus.CANCELLED}
)


def _pause(app_name: str, user_id: str, session_id: str, invocation_id: str) -> dict[str, str]:
    """The invocation part of a pause's answer claim (``answer_claims``' key but the call)."""
    return {
        "app_name": app_name,
        "user_id": user_id,
        "session_id": session_id,
        "invocation_id": invocation_id,
    }


LOCAL_MAX_POLL = 30.0
"""Seconds between claims of a queued run whose session a drive of this process
holds: that drive's end wakes it, so this is only a safety net."""


@dataclass(frozen=True, slots=True)
class Run:
    """One ledger row.

    Attributes:
        run_id: The run's id.
        app_name: The ADK app.
        user_id: The session's user.
        session_id: The session.
        invocation_id: The ADK invocation this run drives (chosen before ADK runs).
        request: The message that started the run (JSON text).
        status: Where the run stands.
        owner: The worker holding (or last holding) the lease.
        lease_until: Lease expiry, database clock, seconds since the epoch.
        epoch: The fencing token; bumped by every claim.
        attempts: How many times the run has been claimed to be driven.
        next_attempt_at: The earliest time recovery may claim it again.
        last_error: The last error recorded.
        classification: What recovery last found in the event log.
        created_at: When the run was submitted.
        updated_at: When the row last changed.
        finished_at: When the run reached a terminal status.
        claim_sent: When (``time.monotonic()`` of this process) the statement
            that gave ``owner`` this lease was sent; None for a row only
            read. The lease's local deadline counts from it, not from its
            answer: the database's lease started somewhere in between.
        app_version: The app version the run was started under (a
            continuation keeps its invocation's), or None (unversioned).
        app_fingerprint: The fingerprint of the app's definition it was
            started under, or None.
        session_read: The claim's row with its ``session_*`` columns (``claim_expired(read=True)``).
        replayed: A submit under a run id already on the ledger returned this
            run: that submit recorded nothing (see
            :meth:`~durable_adk.adk.runs.path.RunPath.submit`).
    """

    run_id: str
    app_name: str
    user_id: str
    session_id: str
    invocation_id: str
    request: str
    status: RunStatus
    owner: str | None
    lease_until: float
    epoch: int
    attempts: int
    next_attempt_at: float
    last_error: str | None
    classification: str | None
    created_at: float
    updated_at: float
    finished_at: float | None
    claim_sent: float | None = field(default=None, compare=False)
    app_version: str | None = None
    app_fingerprint: str | None = None
    session_read: Row | None = field(default=None, compare=False, repr=False)
    replayed: bool = field(default=False, compare=False)

    @classmethod
    def from_row(cls, row: Row, *, sent: float | None = None) -> Run:
        """Maps a ``runs`` row (``sent``: when the claim that returned it was sent)."""
        return cls(
            run_id=row["run_id"],
            app_name=row["app_name"],
            user_id=row["user_id"],
            session_id=row["session_id"],
            invocation_id=row["invocation_id"],
            request=row["request"],
            status=RunStatus(row["status"]),
            owner=row["owner"],
            lease_until=float(row["lease_until"]),
            epoch=int(row["epoch"]),
            attempts=int(row["attempts"]),
            next_attempt_at=float(row["next_attempt_at"]),
            last_error=row["last_error"],
            classification=row["classification"],
            created_at=float(row["created_at"]),
            updated_at=float(row["updated_at"]),
            finished_at=None if row["finished_at"] is None else float(row["finished_at"]),
            claim_sent=sent,
            app_version=row.get("app_version"),
            app_fingerprint=row.get("app_fingerprint"),
            session_read=row if "session_log" in row else None,
        )

    @property
    def lease(self) -> Lease:
        """The fencing token of the current holder."""
        return Lease(run_id=self.run_id, owner=self.owner or "", epoch=self.epoch)


@dataclass(frozen=True, slots=True)
class Started:
    """What :meth:`RunLedger.start` recorded.

    Attributes:
        run: The run, RUNNING (claimed) or QUEUED.
        created_session_pk: The session row's key when the start made it (its
            state is empty and it has no events), else None.
        app_state: The app's shared state (JSON), read in the same unit.
        user_state: The user's shared state (JSON), read in the same unit.
            Both are opened (clear JSON) when the store has keys.
    """

    run: Run
    created_session_pk: int | None
    app_state: str | None
    user_state: str | None


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to write for a run: valid while ``(owner, epoch)`` match the row.

    Attributes:
        run_id: The run.
        owner: The worker holding it.
        epoch: The fencing epoch it was granted at.
    """

    run_id: str
    owner: str
    epoch: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A run (or later, a compensation) that needs a person.

    Attributes:
        kind: ``"run"``.
        run_id: The run.
        request: The request that started it.
        classification: What recovery found.
        last_events: The last events of the invocation (JSON text).
        error: Why it was parked.
        created_at: When.
    """

    kind: str
    run_id: str | None
    request: str | None
    classification: str | None
    last_events: str | None
    error: str
    created_at: float

    @classmethod
    def from_row(cls, row: Row) -> DeadLetter:
        """Maps a ``dead_letters`` row."""
        return cls(
            kind=row["kind"],
            run_id=row["run_id"],
            request=row["request"],
            classification=row["classification"],
            last_events=row["last_events"],
            error=row["error"],
            created_at=float(row["created_at"]),
        )


class RunLedger:
    """Runs, leases, fencing epochs and the per-session queue over a store."""

    def __init__(
        self,
        store: Store,
        *,
        lease_seconds: float = 30.0,
        backoff_seconds: float = 1.0,
        max_attempts: int = 3,
        serving: Serving = UNVERSIONED,
    ) -> None:
        """Creates the ledger.

        Args:
            store: An open store.
            lease_seconds: How long a claim or renewal holds a run.
            backoff_seconds: The first back-off between recovery attempts;
                doubled at each attempt.
            max_attempts: Claims allowed before a run is parked.
            serving: The app version this worker runs and the versions whose
                runs it may claim (:mod:`durable_adk.versions`): a new run
                records it, and every claim here takes only runs it serves.
        """
        if lease_seconds <= 0 or backoff_seconds < 0 or max_attempts < 1:
            raise errors.InvalidArgument(
                "lease_seconds must be > 0, backoff_seconds >= 0, max_attempts >= 1"
            )
        self.store = store
        self.lease_seconds = lease_seconds
        self.backoff_seconds = backoff_seconds
        self.max_attempts = max_attempts
        self.serving = serving
        self.claimed_at: dict[str, float] = {}
        """Per owner, when (``time.monotonic()``) its last claim was sent: until a lease
        after it, the owner may hold a lease no keeper knows of yet (the lease watchdog's)."""
        self.claim_listeners: list[Callable[[str], None]] = []
        """Called with the owner as each claim is sent, on the event loop (the lease keeper's)."""

    async def _claim(self, owner: str, query: str, params: Params) -> tuple[Sequence[Row], float]:
        """Sends a statement that leases runs to ``owner``; says when it was sent.

        Noted first (:attr:`claimed_at`, :attr:`claim_listeners`): from the
        moment the statement commits until the caller holds the lease through
        its keeper, the lease is renewed by nobody but the lease watchdog's
        :meth:`renew_owned`, should the event loop block meanwhile.
        """
        self.claimed_at[owner] = time.monotonic()
        for listener in self.claim_listeners:
            listener(owner)
        return await self.store.fetch_sent(query, params)

    async def submit(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        request: Mapping[str, Any],
        owner: str,
        invocation_id: str | None = None,
        run_id: str | None = None,
        claims: Sequence[tuple[str, int]] = (),
    ) -> Run:
        """Records a run (QUEUED, leased by ``owner``) before anything drives it.

        Args:
            claims: The pauses the run answers, ``(call_id, ask)`` each (see
                :func:`durable_adk.adk.eventlog.classify.check_answers`), claimed in
                the same unit of work as the run; needs ``invocation_id``.

        Raises:
            durable_adk.errors.UniqueViolation: Another run holds one of the
                ``claims`` (nothing was written); :meth:`claim_holders` says which.
        """
        params = self._new_run(app_name, user_id, session_id, request, owner, invocation_id, run_id)
        if claims:
            if invocation_id is None:
                raise errors.InvalidArgument("answer claims need the invocation the run continues")
            params["claims"] = json.dumps([[call_id, int(ask)] for call_id, ask in claims])
            rows, sent = await self._claim(owner, "run_submit_answer", params)
        else:
            rows, sent = await self._claim(owner, "run_submit", params)
        return Run.from_row(rows[0], sent=sent)

    async def claim_holders(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        invocation_id: str,
        claims: Sequence[tuple[str, int]],
    ) -> list[tuple[str, str, RunStatus | None]]:
        """Which run holds each of ``claims``: ``(call_id, run_id, its status)``."""
        where = _pause(app_name, user_id, session_id, invocation_id)
        held: list[tuple[str, str, RunStatus | None]] = []
        for call_id, ask in claims:
            row = await self.store.fetchrow(
                "answer_claim_of", {**where, "call_id": call_id, "ask": int(ask)}
            )
            if row is not None:
                status = None if row["status"] is None else RunStatus(row["status"])
                held.append((call_id, str(row["run_id"]), status))
        return held

    async def release_claims_of_ended(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        invocation_id: str,
        claims: Sequence[tuple[str, int]],
    ) -> list[tuple[str, str, RunStatus | None]]:
        """Frees the claims held by runs that ended CANCELLED or FAILED.

        Such a run may not have delivered its answer; the caller must read the
        session again (the run, ended, writes nothing more) before answering.

        Returns:
            The claims still held by a run that is live or DONE: ``(call_id,
            run_id, status)``; empty when every claim is free.
        """
        where = _pause(app_name, user_id, session_id, invocation_id)
        kept: list[tuple[str, str, RunStatus | None]] = []
        asks = dict(claims)
        for call_id, run_id, status in await self.claim_holders(**where, claims=claims):
            if status in (RunStatus.CANCELLED, RunStatus.FAILED, None):
                await self.store.execute(
                    "answer_claim_release",
                    {**where, "call_id": call_id, "ask": asks[call_id], "run_id": run_id},
                )
            else:
                kept.append((call_id, run_id, status))
        return kept

    def _new_run(
        self,
        app_name: str,
        user_id: str,
        session_id: str,
        request: Mapping[str, Any],
        owner: str,
        invocation_id: str | None,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """The checked columns of a new run (ids chosen here when not given)."""
        for name, value in (
            ("app_name", app_name),
            ("user_id", user_id),
            ("session_id", session_id),
            ("owner", owner),
        ):
            check_id(name, value)
        return {
            "run_id": run_id or f"run-{uuid.uuid4().hex}",
            "app_name": app_name,
            "user_id": user_id,
            "session_id": session_id,
            "invocation_id": invocation_id or f"e-{uuid.uuid4()}",
            "request": json.dumps(request),
            "owner": owner,
            "lease": self.lease_seconds,
            **self.serving.params(),
        }

    async def start(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        request: Mapping[str, Any],
        owner: str,
        invocation_id: str | None = None,
        now: float,
        run_id: str | None = None,
    ) -> Started | None:
        """Records a run and claims it at once when its session is free, in one unit of work.

        Also makes the session's row (empty state) if it is missing, so a new
        conversation costs one commit before ADK is called instead of four
        round trips (read the session, create it, submit, claim).

        Args:
            now: The session's creation time if it is made here (the caller's
                clock, as for any session).
            run_id: The run's id if chosen in advance (else a new one).

        Returns:
            The run, RUNNING and held by ``owner`` when the session was free,
            else QUEUED behind the session's other runs; or None when another
            worker started a run of the same session at the same instant (the
            caller then submits and waits its turn).
        """
        params = self._new_run(app_name, user_id, session_id, request, owner, invocation_id, run_id)
        try:
            rows, sent = await self._claim(
                owner,
                "run_start",
                {**params, "backoff": self.backoff_seconds, "now": now, "initial_state": "{}"},
            )
        except errors.UniqueViolation:
            return None
        row = rows[0]
        created = row["created_session_pk"]
        return Started(
            run=Run.from_row(row, sent=sent),
            created_session_pk=None if created is None else int(created),
            app_state=await open_state(self.store, "app_state", (app_name,), row["app_state"]),
            user_state=await open_state(
                self.store, "user_state", (app_name, user_id), row["user_state"]
            ),
        )

    async def claim_queued(self, run_id: str, owner: str) -> Run | None:
        """Starts our own queued run if it heads its session's queue and the session is free."""
        try:
            rows, sent = await self._claim(
                owner,
                "run_claim_queued",
                {
                    "run_id": run_id,
                    "owner": owner,
                    "lease": self.lease_seconds,
                    "backoff": self.backoff_seconds,
                    "serves": self.serving.params()["serves"],
                },
            )
        except errors.UniqueViolation:
            return None  # another worker started a run of this session at the same moment
        return Run.from_row(rows[0], sent=sent) if rows else None

    async def hand_over(self, lease: Lease) -> Run | None:
        """Ends our lease on a QUEUED run of a version we do not serve, for its own workers.

        Returns:
            The run, its lease expired (recovery of a worker of its version
            takes it when its turn comes); None when it was no longer ours.
        """
        row = await self.store.fetchrow(
            "run_hand_over", {"run_id": lease.run_id, "owner": lease.owner, "epoch": lease.epoch}
        )
        return None if row is None else Run.from_row(row)

    async def renew(self, lease: Lease) -> RenewResult:
        """Extends the lease and says whether an operator asked the holder to stop.

        Returns:
            ``ok`` False means the lease was lost (taken over or finished);
            ``cancel_requested_by`` names who asked the run to stop, if
            anyone did (the holder then ends it, see :meth:`finish_cancelled`).
        """
        row = await self.store.fetchrow(
            "run_renew",
            {
                "run_id": lease.run_id,
                "owner": lease.owner,
                "epoch": lease.epoch,
                "lease": self.lease_seconds,
            },
        )
        return RenewResult.from_row(row)

    async def renew_many(self, owner: str, leases: Sequence[Lease]) -> dict[str, RenewResult]:
        """Extends every lease ``owner`` holds in one statement, whatever their number.

        The heartbeat of a whole worker (:class:`~durable_adk.fencing.leases.LeaseKeeper`).

        Returns:
            One :class:`RenewResult` per run id given, as :meth:`renew` returns
            for one: ``ok`` False for a run no longer ours at its epoch (taken
            over or ended), ``cancel_requested_by`` when an operator asked it
            to stop. Nothing is sent for an empty ``leases``.
        """
        if not leases:
            return {}
        if any(lease.owner != owner for lease in leases):
            raise errors.InvalidArgument("renew_many renews the leases of one owner")
        rows = await self.store.fetch(
            "run_renew_many",
            {
                "owner": owner,
                "leases": json.dumps({lease.run_id: lease.epoch for lease in leases}),
                "lease": self.lease_seconds,
            },
        )
        renewed = {(str(r["run_id"]), int(r["epoch"])): r for r in rows}
        return {
            lease.run_id: RenewResult.from_row(renewed.get((lease.run_id, lease.epoch)))
            for lease in leases
        }

    async def renew_owned(self, owner: str) -> dict[str, tuple[int, RenewResult]]:
        """Extends every live lease ``owner`` holds, known to its keeper or not (one statement).

        The lease watchdog's, while the event loop is blocked: a claim that
        committed but whose answer the loop has not read yet leases a run the
        keeper does not know of. Only leases not yet expired are renewed: a
        run handed back (its lease ended at once) or left to lapse stays so.
        A lease whose drive gave it up moments before (its fence lost) but
        which has not expired yet is kept one lease longer: its recovery
        waits that much more, a cost paid only while the loop is blocked.

        Returns:
            Per run id renewed: its epoch and the :class:`RenewResult`.
        """
        check_id("owner", owner)
        rows = await self.store.fetch(
            "run_renew_owned", {"owner": owner, "lease": self.lease_seconds}
        )
        return {str(r["run_id"]): (int(r["epoch"]), RenewResult.from_row(r)) for r in rows}

    async def wait_turn(
        self,
        run: Run,
        owner: str,
        *,
        first_poll: float = 0.1,
        max_poll: float = 2.0,
        lost: asyncio.Event | None = None,
        ahead_here: Callable[[], bool] | None = None,
    ) -> Run | None:
        """Waits until our QUEUED ``run`` heads its session's queue, then claims it.

        Woken, not polled at a fixed pace: a run of the session that ends in
        this process (or, with PostgreSQL's NOTIFY, in any worker) wakes the
        wait at once; otherwise the claim is tried again after a back-off from
        ``first_poll`` doubling to ``max_poll`` seconds (the fallback that
        must suffice alone, across processes and on databases without
        NOTIFY). A wake-up starts the back-off again.

        Args:
            lost: Set by whoever renews the queued run's lease when it is
                lost; the wait then returns None.
            ahead_here: True while a drive of this process holds the session:
                its end wakes the wait in-process (the run's finish, or the
                drive's end however it ended), so the next claim waits
                :data:`LOCAL_MAX_POLL` seconds, a safety net only. A worker
                holding thousands of runs then does not poll for the queued
                ones it will wake itself.

        Returns:
            The claimed run (RUNNING, a new epoch), or None once ``lost`` is set.
        """
        key = session_key(run.app_name, run.user_id, run.session_id)
        delay = first_poll
        while lost is None or not lost.is_set():
            with self.store.wakeups.ticket(key) as woken:
                claimed = await self.claim_queued(run.run_id, owner)
                if claimed is not None:
                    return claimed
                waits = [woken.wait()] + ([lost.wait()] if lost is not None else [])
                tasks = [asyncio.ensure_future(w) for w in waits]
                try:
                    await asyncio.wait(tasks, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for task in tasks:
                        task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.gather(*tasks, return_exceptions=True)
                if woken.is_set():
                    delay = first_poll
                elif ahead_here is not None and ahead_here():
                    delay = max(max_poll, LOCAL_MAX_POLL)  # its end wakes us: a safety net only
                else:
                    delay = min(delay * 2, max_poll)
        return None

    async def finish(
        self,
        lease: Lease,
        status: RunStatus,
        *,
        error: str | None = None,
        classification: str | None = None,
        inbox: str | None = None,
    ) -> bool:
        """Ends a RUNNING run as DONE, PAUSED or FAILED; False if the lease was lost.

        ``inbox`` (:func:`~durable_adk.adk.runs.inbox.inbox_at_finish`) brings the
        interrupts inbox of the run's invocation in line in the same unit.
        """
        params = self.finish_params(
            lease, status, error=error, classification=classification, inbox=inbox
        )
        row = await self.store.fetchrow("run_finish", params)
        if row is None:
            return False
        await self.finished(row)
        return True

    @staticmethod
    def finish_params(
        lease: Lease,
        status: RunStatus,
        *,
        error: str | None = None,
        classification: str | None = None,
        inbox: str | None = None,
    ) -> dict[str, Any]:
        """The parameters of a run's finish, for :meth:`finish` or a unit it joins.

        The session service writes a drive's last events and these in one
        unit (``append_events_finish``); :meth:`finished` then does what
        follows a finish. ``inbox`` is the invocation's interrupts as the
        finish writes them (:func:`~durable_adk.adk.runs.inbox.inbox_at_finish`;
        None when it made no call that waits on a person).

        Raises:
            durable_adk.errors.InvalidArgument: ``status`` is not DONE, PAUSED or FAILED.
        """
        if status not in (RunStatus.DONE, RunStatus.PAUSED, RunStatus.FAILED):
            raise errors.InvalidArgument(f"finish takes DONE, PAUSED or FAILED, not {status}")
        return {
            "run_id": lease.run_id,
            "owner": lease.owner,
            "run_epoch": lease.epoch,
            "status": status.value,
            "error": error,
            "classification": classification,
            "inbox": inbox,
        }

    async def finished(self, row: Row) -> None:
        """After a finish was written (``row``: the session's keys and ``queued_behind``).

        The session's next run may start now: wake it (other workers too only
        when one waits, so a run without a queue sends nothing more).
        """
        key = session_key(row["app_name"], row["user_id"], row["session_id"])
        with contextlib.suppress(errors.StoreError):  # a wake-up lost costs latency only
            await self.store.wake(key, others_waiting=bool(row["queued_behind"]))

    async def release(self, lease: Lease, *, error: str, backoff: float | None = None) -> bool:
        """Hands a RUNNING run back for recovery after a transient fault; False if it was lost.

        One conditional statement on ``(owner, epoch)``: the run stays
        RUNNING, its lease expires now and its next recovery waits
        ``backoff_seconds * 2 ** (attempts - 1)``; ``error`` becomes its
        ``last_error``. The sweeper's :meth:`claim_expired` then takes it,
        counting an attempt (past ``max_attempts`` it parks the run). With a
        stale lease nothing changes. ``backoff`` replaces ``backoff_seconds``
        (0: recovered at the next sweep, as after a store outage).
        """
        row = await self.store.fetchrow(
            "run_release",
            {
                "run_id": lease.run_id,
                "owner": lease.owner,
                "epoch": lease.epoch,
                "error": error,
                "backoff": self.backoff_seconds if backoff is None else backoff,
            },
        )
        return row is not None

    async def claim_expired(
        self, owner: str, *, limit: int = 10, app_name: str | None = None, read: bool = False
    ) -> list[Run]:
        """Claims up to ``limit`` runs whose holder stopped renewing (recovery).

        Args:
            owner: The claiming worker.
            limit: Most runs claimed.
            app_name: Claim only this app's runs (a worker can drive no other
                app's agent); None claims any app's (tests, tools).
            read: Also read each run's session, in the same statement (:attr:`Run.session_read`).
        """
        try:
            rows, sent = await self._claim(
                owner,
                "run_claim_expired_read" if read else "run_claim_expired",
                {
                    "owner": owner,
                    "lease": self.lease_seconds,
                    "backoff": self.backoff_seconds,
                    "limit": limit,
                    "app_name": app_name,
                    "serves": self.serving.params()["serves"],
                },
            )
        except errors.UniqueViolation:
            return []  # a queued run raced a start in its session; the next pass takes it
        return [Run.from_row(r, sent=sent) for r in rows]

    async def park(
        self,
        lease: Lease,
        *,
        error: str,
        classification: str | None = None,
        last_events: Sequence[Mapping[str, Any]] = (),
    ) -> bool:
        """Parks a run for a person and writes its dead letter; False if the lease was lost."""
        row = await self.store.fetchrow(
            "run_park",
            {
                "run_id": lease.run_id,
                "owner": lease.owner,
                "epoch": lease.epoch,
                "error": error,
                "classification": classification,
                "last_events": json.dumps(list(last_events), default=str),
            },
        )
        return row is not None and row["status"] == "ok"

    async def retry(self, run_id: str) -> Run | None:
        """Puts a parked or failed run back in its session's queue; safe to call twice.

        A run in any other status is left as it is (the result then shows it).

        Returns:
            The run as it now stands, or None if there is no such run.
        """
        row = await self.store.fetchrow("run_retry", {"run_id": run_id})
        return Run.from_row(row) if row is not None else await self.get(run_id)

    async def get(self, run_id: str) -> Run | None:
        """One run, or None."""
        row = await self.store.fetchrow("run_get", {"run_id": run_id})
        return None if row is None else Run.from_row(row)

    async def list_runs(self, *, status: RunStatus | None = None, limit: int = 100) -> list[Run]:
        """Runs, newest first, optionally of one status."""
        rows = await self.store.fetch(
            "run_list", {"status": status.value if status else None, "limit": limit}
        )
        return [Run.from_row(r) for r in rows]

    async def dead_letters(
        self, *, run_id: str | None = None, limit: int = 100
    ) -> list[DeadLetter]:
        """Dead letters, newest first."""
        rows = await self.store.fetch("dead_letter_list", {"run_id": run_id, "limit": limit})
        return [DeadLetter.from_row(r) for r in rows]

    async def backdate(self, run_id: str, seconds: float) -> None:
        """Moves a run's lease and back-off ``seconds`` into the past (tests, operators)."""
        await self.store.execute("run_backdate", {"run_id": run_id, "seconds": seconds})

    # ------------------------------------------------------ operator control
    # Issue 14: what people do to runs. Each action writes its line in
    # ``operator_actions`` in the same unit of work as the change it makes.

    async def _operator_action(
        self, query: str, run_id: str, *, by: str, reason: str | None
    ) -> ActionResult:
        """Runs one recorded operator statement; reads the run back when it changed nothing.

        Raises:
            NotFound: No such run.
        """
        check_id("by", by)
        row = await self.store.fetchrow(query, {"run_id": run_id, "actor": by, "reason": reason})
        if row is not None and "run_id" in row:
            changed = Run.from_row(row)
            with contextlib.suppress(errors.StoreError):  # the next run may start: wake it
                await self.store.wake(
                    session_key(changed.app_name, changed.user_id, changed.session_id)
                )
            return ActionResult(changed, changed=True)
        run = await self.get(run_id)
        if run is None:
            raise errors.NotFound(f"no run {run_id!r}")
        return ActionResult(run, changed=False)

    async def cancel(self, run_id: str, *, by: str, reason: str | None = None) -> ActionResult:
        """Cancels a run; safe to call twice.

        A QUEUED, PAUSED or PARKED run, or a RUNNING one whose owner stopped
        renewing, becomes CANCELLED at once (so recovery never claims it). A
        RUNNING run with a live lease gets ``cancel_requested_at``: its owner
        checks :meth:`cancel_requested` at each heartbeat and ends it with
        :meth:`finish_cancelled`; if the owner dies first,
        :meth:`cancel_expired` ends it.

        Returns:
            The run as it now stands and whether this call changed it.

        Raises:
            NotFound: No such run.
        """
        return await self._operator_action("run_cancel", run_id, by=by, reason=reason)

    async def cancel_requested(self, lease: Lease) -> str | None:
        """Who asked the holder of ``lease`` to stop, or None (also when the lease was lost)."""
        row = await self.store.fetchrow(
            "run_cancel_requested",
            {"run_id": lease.run_id, "owner": lease.owner, "epoch": lease.epoch},
        )
        if row is None or row["cancel_requested_at"] is None:
            return None
        return str(row["cancel_requested_by"] or "an operator")

    async def finish_cancelled(self, lease: Lease) -> bool:
        """The owner ends its RUNNING run as CANCELLED; False if the lease was lost."""
        row = await self.store.fetchrow(
            "run_finish_cancelled",
            {"run_id": lease.run_id, "owner": lease.owner, "epoch": lease.epoch},
        )
        return row is not None

    async def cancel_expired(self, *, app_name: str | None = None) -> list[str]:
        """Ends as CANCELLED the RUNNING runs asked to stop whose owner stopped renewing.

        Recovery calls it before :meth:`claim_expired`, so a run cancelled
        while its owner was dying is not re-driven.

        Returns:
            The ids of the runs cancelled.
        """
        rows = await self.store.fetch("run_cancel_expired", {"app_name": app_name})
        return sorted(str(r["run_id"]) for r in rows)

    async def operator_claim(self, run: Run, owner: str) -> Run | None:
        """Takes a PARKED or FAILED run (as read) for an operator: RUNNING, a new epoch.

        Returns:
            The run held by ``owner``, or None when it changed since it was read.

        Raises:
            Conflict: Another run of the session is RUNNING.
        """
        check_id("owner", owner)
        try:
            rows, sent = await self._claim(
                owner,
                "run_operator_claim",
                {
                    "run_id": run.run_id,
                    "owner": owner,
                    "epoch": run.epoch,
                    "lease": self.lease_seconds,
                },
            )
        except errors.UniqueViolation:
            raise errors.Conflict(
                f"run {run.run_id!r}: another run of session {run.session_id!r} is RUNNING; "
                "try again when it has ended"
            ) from None
        return Run.from_row(rows[0], sent=sent) if rows else None

    async def operator_release(self, lease: Lease, status: RunStatus) -> bool:
        """Gives an operator's claim back, the run back in ``status`` (nothing written)."""
        row = await self.store.fetchrow(
            "run_operator_release",
            {
                "run_id": lease.run_id,
                "owner": lease.owner,
                "epoch": lease.epoch,
                "status": status.value,
            },
        )
        return row is not None

    async def operator_requeue(
        self,
        lease: Lease,
        *,
        action: str,
        by: str,
        reason: str | None,
        status_before: RunStatus,
        detail: Mapping[str, Any] | None = None,
    ) -> Run | None:
        """Puts an operator-held run back in its session's queue and records the action.

        Returns:
            The run (QUEUED), or None if the operator's lease was lost.
        """
        row = await self.store.fetchrow(
            "run_operator_requeue",
            {
                "run_id": lease.run_id,
                "owner": lease.owner,
                "epoch": lease.epoch,
                "action": action,
                "actor": by,
                "reason": reason,
                "status_before": status_before.value,
                "detail": None if detail is None else json.dumps(dict(detail), default=str),
            },
        )
        return Run.from_row(row) if row is not None and "run_id" in row else None

    async def abandon(self, run_id: str, *, by: str, reason: str) -> ActionResult:
        """Closes a PARKED run (or a FAILED one not yet abandoned) as FAILED; safe twice.

        Returns:
            The run as it now stands and whether this call changed it.

        Raises:
            NotFound: No such run.
        """
        return await self._operator_action("run_abandon", run_id, by=by, reason=reason)

    async def retry_recorded(
        self, run_id: str, *, by: str, reason: str | None = None
    ) -> ActionResult:
        """:meth:`retry` with its line in the audit trail.

        Returns:
            The run as it now stands and whether this call changed it.

        Raises:
            NotFound: No such run.
        """
        return await self._operator_action("run_retry_recorded", run_id, by=by, reason=reason)

    async def record_action(
        self,
        run_id: str,
        *,
        action: str,
        by: str,
        reason: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> OperatorAction | None:
        """Records an action that changed no run row itself (None: no such run)."""
        check_id("by", by)
        row = await self.store.fetchrow(
            "operator_action_record",
            {
                "run_id": run_id,
                "action": action,
                "actor": by,
                "reason": reason,
                "detail": None if detail is None else json.dumps(dict(detail), default=str),
            },
        )
        return None if row is None else OperatorAction.from_row(row)

    async def actions(
        self, *, run_id: str | None = None, app_name: str | None = None, limit: int = 100
    ) -> list[OperatorAction]:
        """Operator actions, newest first, of one run or one app or all."""
        rows = await self.store.fetch(
            "operator_action_list", {"run_id": run_id, "app_name": app_name, "limit": limit}
        )
        return [OperatorAction.from_row(r) for r in rows]

    async def _others_of_invocation(self, query: str, run: Run, **params: str) -> list[str]:
        """Runs ``query`` on the runs of ``run``'s invocation but ``run``; the ids it returned."""
        rows = await self.store.fetch(
            query,
            {
                **_pause(run.app_name, run.user_id, run.session_id, run.invocation_id),
                "run_id": run.run_id,
                **params,
            },
        )
        return sorted(str(r["run_id"]) for r in rows)

    async def invocation_cancelled(
        self, *, app_name: str, user_id: str, session_id: str, invocation_id: str
    ) -> tuple[str, str] | None:
        """Whether the invocation was cancelled: ``(run_id, cancelled_by)`` of the run, or None.

        An invocation is cancelled when a run that drove it, or paused or
        parked on it, was cancelled; a QUEUED answer run cancelled before it
        drove leaves it open (its pause can be answered again).
        """
        row = await self.store.fetchrow(
            "run_invocation_cancelled", _pause(app_name, user_id, session_id, invocation_id)
        )
        return None if row is None else (str(row["run_id"]), str(row["cancelled_by"]))

    async def cancel_paused_of_invocation(self, run: Run, *, reason: str) -> list[str]:
        """Ends CANCELLED the PAUSED and QUEUED runs of ``run``'s invocation but ``run``.

        Returns:
            The ids of the runs cancelled.
        """
        return await self._others_of_invocation(
            "run_cancel_paused_of_invocation", run, reason=reason
        )

    async def version_of_invocation(
        self, *, app_name: str, invocation_id: str
    ) -> tuple[bool, str | None]:
        """The version the invocation's continuations are recorded under (its newest run's).

        Returns:
            (found, version): found False when no run of the invocation exists.
        """
        row = await self.store.fetchrow(
            "run_version_of_invocation", {"app_name": app_name, "invocation_id": invocation_id}
        )
        return (False, None) if row is None else (True, row["app_version"])

    async def park_paused_of_invocation(self, run: Run, *, reason: str) -> list[str]:
        """Ends PARKED the PAUSED runs of ``run``'s invocation but ``run`` (its continuation
        was parked before it acted, so none of them is left PAUSED with its answer taken).

        Returns:
            The ids of the runs parked.
        """
        return await self._others_of_invocation("run_park_paused_of_invocation", run, reason=reason)

    async def request_cancel_of_invocation(self, run: Run, *, by: str) -> list[str]:
        """Asks the RUNNING continuations of ``run``'s invocation to stop (not ``run``).

        Returns:
            The ids of the runs asked.
        """
        return await self._others_of_invocation("run_request_cancel_of_invocation", run, by=by)

    async def release_claims_of_run(self, run_id: str) -> None:
        """Gives back every answer claim of a run that ended without storing its answer."""
        await self.store.execute("answer_claims_release_of_run", {"run_id": run_id})

    async def wake_session(self, run: Run) -> None:
        """Wakes the runs queued behind ``run``'s session (a lost wake-up costs latency only)."""
        key = session_key(run.app_name, run.user_id, run.session_id)
        with contextlib.suppress(errors.StoreError):
            await self.store.wake(key, others_waiting=True)

    async def list_runs_of_app(
        self, *, app_name: str | None, status: RunStatus | None = None, limit: int = 100
    ) -> list[Run]:
        """Runs, newest first, of one app (None: every app), optionally of one status."""
        rows = await self.store.fetch(
            "run_list_of_app",
            {"status": status.value if status else None, "app_name": app_name, "limit": limit},
        )
        return [Run.from_row(r) for r in rows]

    async def dead_letters_of_app(
        self, *, app_name: str | None, run_id: str | None = None, limit: int = 100
    ) -> list[DeadLetter]:
        """Dead letters, newest first, of one app's runs (None: every app)."""
        rows = await self.store.fetch(
            "dead_letter_list_of_app", {"run_id": run_id, "app_name": app_name, "limit": limit}
        )
        return [DeadLetter.from_row(r) for r in rows]


@dataclass(frozen=True, slots=True)
class RenewResult:
    """What a lease renewal found: still ours, and whether to stop.

    The shape one renewal statement returns per run, so a batched renewal of
    many leases returns one of these for each.

    Attributes:
        ok: The lease was extended (False: lost, the run was taken over or ended).
        cancel_requested_by: Who asked the run to stop (``"an operator"`` when
            unnamed), or None when nobody did. Only meaningful when ``ok``.
    """

    ok: bool
    cancel_requested_by: str | None = None

    @property
    def cancel_requested(self) -> bool:
        """Whether an operator asked the holder to stop the run."""
        return self.ok and self.cancel_requested_by is not None

    @classmethod
    def from_row(cls, row: Row | None) -> RenewResult:
        """Maps what ``run_renew`` returned (None: no row, the lease was lost)."""
        if row is None:
            return cls(ok=False)
        if row.get("cancel_requested_at") is None:
            return cls(ok=True)
        return cls(
            ok=True, cancel_requested_by=str(row.get("cancel_requested_by") or "an operator")
        )


@dataclass(frozen=True, slots=True)
class ActionResult:
    """What an operator action on the ledger did.

    Attributes:
        run: The run as it now stands.
        changed: Whether this call changed it (False: it was already there,
            or the action does not apply to its status; nothing was written).
    """

    run: Run
    changed: bool


@dataclass(frozen=True, slots=True)
class OperatorAction:
    """One line of the audit trail: who did what to a run, when and why.

    Attributes:
        run_id: The run.
        app_name: The run's app.
        action: ``cancel``, ``resolve``, ``abandon``, ``retry`` or ``answer``.
        actor: Who.
        reason: Why (None if not given).
        status_before: The run's status before.
        status_after: The run's status after.
        epoch: The run's fencing epoch after the action.
        detail: JSON text: the operator's result, the cancel's outcome...
        created_at: When (database clock).
    """

    run_id: str
    app_name: str
    action: str
    actor: str
    reason: str | None
    status_before: str
    status_after: str
    epoch: int
    detail: str | None
    created_at: float

    @classmethod
    def from_row(cls, row: Row) -> OperatorAction:
        """Maps an ``operator_actions`` row."""
        return cls(
            run_id=row["run_id"],
            app_name=row["app_name"],
            action=row["action"],
            actor=row["actor"],
            reason=row["reason"],
            status_before=row["status_before"],
            status_after=row["status_after"],
            epoch=int(row["epoch"]),
            detail=row["detail"],
            created_at=float(row["created_at"]),
        )
