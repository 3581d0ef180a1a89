"""The store contract every backend honours.

A store runs named queries (see :mod:`durable_adk.store.queries`) against one
durable database and returns plain rows. Every unit of work is atomic: a
multi-statement query runs in one transaction, on SQLite in a single hop to the
database thread and on PostgreSQL as a single statement. The database's clock,
not the caller's, is exposed as :meth:`Store.now` for every decision about
ownership (leases, deadlines, back-off).
"""

from __future__ import annotations

import abc
import operator
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from durable_adk import errors
from durable_adk.limits import DEFAULT_LIMITS, PayloadLimits
from durable_adk.store.outage import StoreHealth, current_patience, may_send_again
from durable_adk.store.queries import Query
from durable_adk.store.sealing.codec import (
    MARK,
    SEALED_PARAMS,
    SEALED_TOO,
    Codec,
    open_rows,
    seal_params,
)
from durable_adk.store.wakeups import Wakeups

_is_text = str.__instancecheck__
_sealed_text = operator.methodcaller("startswith", MARK)
"""Whether a value of a row is text, and whether a text is a sealed value (codec.MARK)."""

_sent: ContextVar[list[float] | None] = ContextVar("durable_adk_sent", default=None)
_attempt: ContextVar[list[bool] | None] = ContextVar("durable_adk_attempt", default=None)
_held: ContextVar[list[float] | None] = ContextVar("durable_adk_held", default=None)
_unsynced: ContextVar[bool] = ContextVar("durable_adk_unsynced", default=False)


def note_sent() -> None:
    """Notes that a statement leaves now, for :meth:`Store.fetch_sent` (if it asked)
    and for the outage wait (a statement that left may have acted)."""
    receipt = _sent.get()
    if receipt is not None:
        receipt.append(time.monotonic())
    attempt = _attempt.get()
    if attempt is not None:
        attempt.append(True)


def sent_wanted() -> bool:
    """Whether the caller asked when its statement leaves (:meth:`Store.fetch_sent`): a
    backend that needs round trips of its own first (a prepare) makes them before
    :func:`note_sent`, so the note is no earlier than the statement's own send."""
    return _sent.get() is not None


def note_maybe_sent() -> None:
    """Notes that a statement may leave without the caller seeing it (a group's unit):
    an outage then counts it as sent (it may have acted)."""
    attempt = _attempt.get()
    if attempt is not None:
        attempt.append(True)


def held_receipt() -> list[float] | None:
    """Where a backend notes how long a unit held the database (:func:`fetch_held`), or
    None when no caller asked. Read it in the caller's coroutine: a thread the unit
    runs on does not see the caller's context variables."""
    return _held.get()


def unsynced_commit() -> bool:
    """Whether the caller let this unit commit without waiting for the disk
    (:func:`fetch_held` with ``sync=False``). Read it in the caller's coroutine."""
    return _unsynced.get()


async def fetch_held(
    store: Store, query: str, params: Params | None = None, *, sync: bool = True
) -> tuple[Sequence[Row], float | None]:
    """Runs a named query; also says how long it held the database's writer.

    ``sync=False`` lets a unit that writes commit without waiting for the disk,
    where the backend can (SQLite: ``synchronous = NORMAL`` for that transaction,
    :mod:`durable_adk.store.sqlite`; PostgreSQL ignores it): its rows reach the
    log and every reader at once, and the disk at the next commit that syncs
    (any other unit's) or the next checkpoint. A power cut before that undoes
    the unit, nothing else (a process killed does not). Only for writes that
    may be lost and done again: a purge's batch, whose rows a later pass finds
    and deletes again.

    Returns:
        The rows, and the seconds the unit held what it needed once it had
        it, as the backend measured it: SQLite, from ``BEGIN IMMEDIATE``
        granted (the write lock held) to ``COMMIT`` done, or the whole run of
        a unit that writes nothing (it takes no lock); PostgreSQL, the
        statement's own time on its connection. Never its wait for the lock
        or for a connection. None when the backend said nothing (a unit
        written in a group of others). A unit tried again after an outage
        counts every try. A purge paces itself on this figure
        (:mod:`durable_adk.lifecycle.pacing`). The note travels in a context
        variable, so wrappers of :meth:`Store.fetch` stay in the path.
    """
    receipt: list[float] = []
    token = _held.set(receipt)
    lazy = _unsynced.set(not sync)
    try:
        rows = await store.fetch(query, params)
    finally:
        _unsynced.reset(lazy)
        _held.reset(token)
    return rows, sum(receipt) if receipt else None


Row = Mapping[str, Any]
Params = Mapping[str, Any]


class Store(abc.ABC):
    """One open durable database."""

    dialect: str
    url: str
    commits: int = 0
    """Write transactions committed so far: a unit alone counts one, a group
    of units (:mod:`durable_adk.store.groups`) one in all. For tests and
    benches; a unit whose commit failed is not counted."""

    limits: PayloadLimits = DEFAULT_LIMITS
    """How deep and how large a value from outside may be before it is stored here:
    every table, service and route on this store checks with it
    (:mod:`durable_adk.limits`; set by ``open_store(..., limits=...)``)."""

    codec: Codec | None = None
    """Seals and opens the payload columns (:mod:`durable_adk.store.sealing.codec`);
    None: values are written in clear (sealed ones still fail clearly)."""

    _queries: dict[str, Query]
    """The named queries this store runs: the packaged ones, loaded at open."""

    failed_over_at: float | None = None
    """When the database last changed history (a PostgreSQL failover to a promoted
    standby, as a worker recorded it: :meth:`note_history`), seconds since the
    epoch; None if it never did. The journal asks by key before it acts for a
    while after it (:data:`durable_adk.effect_tables.journal.LOOK_FIRST_AFTER_FAILOVER`)."""

    async def note_history(self, identity: str | None) -> None:
        """Records the database's history as this worker found it (``identity``: a
        :meth:`probe`'s) and reads when it last changed into :attr:`failed_over_at`.

        Called at open and when a probe finds a new history. A store without
        histories (SQLite) keeps None.
        """
        if identity is None:
            return
        await self.execute("timeline_seen", {"timeline": identity})
        self.failed_over_at = await self.fetchval("timeline_failover")

    def add_queries(self, queries: Mapping[str, Query]) -> None:
        """Adds named queries of a package's own SQL (the chaos soak's) to this store's.

        The library's own queries are packaged under ``sql/<dialect>/`` and
        loaded at open; a package that ships SQL of its own (its queries
        loaded with :func:`~durable_adk.store.queries.load_queries`) adds
        them here, so none of it rides along in the production files.

        Raises:
            ValueError: A name is already taken (nothing added).
        """
        taken = sorted(set(queries) & set(self._queries))
        if taken:
            raise ValueError(f"queries already defined: {', '.join(taken)}")
        self._queries.update(queries)

    @property
    def wakeups(self) -> Wakeups:
        """This store's in-process wake-ups (made on first use)."""
        found = self.__dict__.get("_wakeups")
        if found is None:
            found = self.__dict__["_wakeups"] = Wakeups()
        return found

    async def wake(self, key: str, *, others_waiting: bool = True) -> None:
        """Wakes the runs waiting for the turn of session ``key`` (see ``session_key``).

        The base store wakes the waiters of this process; a store that can
        reach other processes (PostgreSQL's NOTIFY) does so when
        ``others_waiting`` says a run of the session is QUEUED.
        """
        self.wakeups.notify(key)

    @property
    def health(self) -> StoreHealth:
        """Whether this store takes writes now, and the outage in progress (made on first use)."""
        found = self.__dict__.get("_health")
        if found is None:
            found = self.__dict__["_health"] = StoreHealth(
                lambda: self.probe(pooled=False),
                self.diagnose,
                self.describe(),
                remember=self.note_history,
            )
        return found

    def describe(self) -> str:
        """The store as the log names it (no password)."""
        return self.dialect

    async def probe(self, *, pooled: bool = True) -> str | None:
        """Raises :class:`~durable_adk.errors.StoreUnavailable` unless the store answers now;
        returns what identifies the database's history (PostgreSQL: its WAL timeline), if any."""
        await self.fetch("db_now")
        return None

    async def diagnose(self) -> list[str]:
        """One line per host this store connects to, with why it refuses (an outage began)."""
        return []

    async def fetch(self, query: str, params: Params | None = None) -> Sequence[Row]:
        """Runs a named query and returns all its rows.

        Sealed values (:mod:`durable_adk.store.sealing.codec`) come back opened when
        their row names them.

        Inside a drive that holds its lease (:func:`~durable_adk.store.outage.using_patience`)
        a statement that meets an outage waits for the store and goes again, when
        it surely did nothing (:func:`patiently`, :mod:`durable_adk.store.outage`).

        Args:
            query: The query's name in ``queries.sql``.
            params: Values for its ``:name`` parameters.

        Raises:
            durable_adk.errors.StoreError: Translated from the driver's error.
            durable_adk.errors.KeyUnavailable: A sealed value of the rows
                cannot be opened (its key is not held, or it does not open).
        """
        if params and self.codec is not None and query in SEALED_PARAMS:
            table, names = SEALED_PARAMS[query]
            params = await seal_params(self, table, dict(params), names=names)
            if query in SEALED_TOO:
                table, names = SEALED_TOO[query]
                params = await seal_params(self, table, params, names=names)
        sealed = params
        rows = await patiently(self, query, lambda: self._fetch(query, sealed))
        for row in rows:
            # Any text of the row that is sealed (the scan in C: no frame a value).
            if any(map(_sealed_text, filter(_is_text, row.values()))):
                return await open_rows(self, rows)  # type: ignore[arg-type]
        return rows

    async def _fetch(self, query: str, params: Params | None = None) -> Sequence[Row]:
        """Runs a named query and returns its rows as stored (each backend's own)."""
        raise NotImplementedError

    async def fetch_sent(
        self, query: str, params: Params | None = None
    ) -> tuple[Sequence[Row], float]:
        """Runs a named query; also says when it was sent, for a lease it takes.

        Returns:
            The rows, and a ``time.monotonic()`` no later than the moment the
            database ran the statement: a lease the statement granted for
            *L* seconds is surely held until that time plus *L*. This store
            says when the call began, unless the store calls
            :func:`note_sent` as the statement leaves (PostgreSQL does, once
            it holds a connection, so a long wait in the pool does not eat
            into the lease). The note travels in a context variable, so
            wrappers of :meth:`fetch` (counters in tests and benches) stay
            in the path.
        """
        receipt: list[float] = []
        token = _sent.set(receipt)
        try:
            started = time.monotonic()
            rows = await self.fetch(query, params)
        finally:
            _sent.reset(token)
        return rows, receipt[-1] if receipt else started

    async def fetchrow(self, query: str, params: Params | None = None) -> Row | None:
        """Runs a named query and returns its first row, or None."""
        rows = await self.fetch(query, params)
        return rows[0] if rows else None

    async def fetchval(self, query: str, params: Params | None = None) -> Any:
        """Runs a named query and returns the first column of its first row, or None."""
        row = await self.fetchrow(query, params)
        return None if row is None else next(iter(row.values()))

    async def execute(self, query: str, params: Params | None = None) -> None:
        """Runs a named query for its effect."""
        await self.fetch(query, params)

    def take_pressure(self) -> float:
        """The longest a statement waited for a connection since the last call (seconds).

        Admission (:mod:`durable_adk.adk.runs.admission`) reads it as a second sign of
        overload beside the event loop's lag: a pool whose connections are
        all busy makes statements wait without the loop lagging. A store
        with no pool to wait for says 0.
        """
        return 0.0

    @abc.abstractmethod
    async def now(self) -> float:
        """Returns the database clock as seconds since the Unix epoch."""

    @abc.abstractmethod
    async def schema_version(self) -> int:
        """Returns the applied schema version (0 for an empty database)."""

    @abc.abstractmethod
    async def run_script(self, sql: str) -> None:
        """Runs trusted, packaged DDL (a schema or migration file) in one transaction."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Closes every connection; the store is unusable afterwards."""

    def writes(self, query: str) -> bool:
        """Whether the named query writes (an unknown name counts as writing)."""
        found = self._queries.get(query)
        return True if found is None else found.writes

    async def _close_health(self) -> None:
        health = self.__dict__.get("_health")
        if health is not None:
            await health.aclose()


async def patiently(
    store: Store, query: str, once: Callable[[], Awaitable[Sequence[Row]]]
) -> Sequence[Row]:
    """Runs ``once`` (a backend's one try of ``query``); inside a drive's patience, waits
    out an outage and tries again when the failed try surely did nothing.

    Any StoreUnavailable is told to the store's health (it starts the outage and its
    log line); the health's probe ends it.
    """
    while True:
        attempt: list[bool] = []
        token = _attempt.set(attempt)
        try:
            rows = await once()
        except errors.StoreUnavailable as exc:
            health = store.health
            health.failed(exc)
            patience = current_patience()
            if patience is None or patience.left() <= 0:
                raise
            if not may_send_again(exc, sent=bool(attempt), writes=store.writes(query)):
                raise
            if not await health.wait_back(patience):
                raise
            continue
        finally:
            _attempt.reset(token)
        return rows
