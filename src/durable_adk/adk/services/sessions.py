"""DurableSessionService: ADK sessions as fenced, append-only event logs.

What it guarantees:

* Every stored event has a per-session sequence number (1, 2, 3...) and comes
  back in append order, whatever its timestamp.
* An append is one unit of work (one statement on PostgreSQL, one transaction
  in one hop on SQLite) and is fenced: the session object names the last
  sequence number it saw, and if anyone appended since, the append raises
  :class:`google.adk.errors.StaleSessionError` and writes nothing.
* An event stamped with a run (``custom_metadata["durable_adk"]``, written by
  DurableRunner) is also fenced by that run's epoch: once the run was taken
  over or finished, the append raises :class:`durable_adk.errors.Fenced`.
* Re-appending an event the session already holds (same id, equal content)
  is a no-op, and a different event under a stored id raises
  ``AlreadyExistsError``; partial (streaming) events are never stored;
  ``temp:`` keys stay in memory.
* Each stored event is published, with its sequence number, to the
  followers of its session in this process (``live``, for token streaming:
  :mod:`durable_adk.adk.eventlog.live`).
* Session state is the fold of the log (:mod:`durable_adk.adk.services.fold`), cached as a
  snapshot every ``snapshot_every`` events; ``app:`` and ``user:`` state is
  shared by sessions as in ADK's own services.
* A per-process cache keeps recently read sessions; a read fetches only the
  events appended after the cached sequence number, in the same round trip
  that checks the session row, so it never serves stale data.
* ``GetSessionConfig`` is honoured, except that the events of the newest
  invocation, while it may still be running, always come back whole (ADK's
  resume logic reads them), and ``num_recent_events=0`` returns no events.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pydantic_core
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from typing_extensions import override

from durable_adk import errors
from durable_adk.adk.commits.barrier import EventBatch, Pending, current_batch
from durable_adk.adk.eventlog.events import LogIndex, open_invocation_id
from durable_adk.adk.eventlog.live import LiveEvents, Stored
from durable_adk.adk.eventlog.stored import load_event, load_events
from durable_adk.adk.eventlog.unreadable import READ_ERRORS, placeholder, reason_of
from durable_adk.adk.services.fold import (
    fold,
    is_snapshot_seq,
    merged_view,
    snapshots_of,
    split_delta,
)
from durable_adk.ids import check_id
from durable_adk.store.base import Row, Store
from durable_adk.store.sealing.codec import (
    envelope_key,
    open_state,
    open_value,
    seal_state,
    seal_value,
)
from durable_adk.store.wakeups import session_key

_Key = tuple[str, str, str]


@dataclass(slots=True)
class _Cached:
    """A session's full log as of ``seq``, and its folded session-scoped state.

    ``app_state``, ``user_state`` and ``update_time`` are as last read or
    written; ``trusted`` lets the next read serve this entry without a round
    trip (see :meth:`DurableSessionService.trust_next_read`); ``repairs`` is
    the session row's count of repaired events when read (a repair rewrites an
    event in place, so an entry read before it is dropped). ``index`` says what
    ``events`` holds (ids, where each invocation starts), built when first
    needed and caught up with ``events`` at each use (:func:`_index_of`).
    """

    pk: int
    seq: int
    events: list[Event]
    state: dict[str, Any]
    app_state: str | None = None
    user_state: str | None = None
    update_time: float = 0.0
    trusted: bool = False
    repairs: int = 0
    index: LogIndex | None = None


def _index_of(cached: _Cached) -> LogIndex:
    """The index of a cached log, brought up to its last event (O(events since its last use))."""
    if cached.index is None:
        cached.index = LogIndex()
    return cached.index.catch_up(cached.events)


def _mirrors(events: list[Event], cached: _Cached, pending: Sequence[Pending], seq: int) -> bool:
    """Whether a session object at ``seq`` holds the cached log followed by the batch's events.

    What ADK does with a session it read from this service: it appends each
    event to the object's own list as the service buffers it. The first
    and last events and the count are checked; a list edited some other way
    (a partial read, events appended through another service) does not pass.
    """
    logged, held = len(cached.events), len(pending)
    if len(events) != logged + held or seq != (pending[-1].seq if held else cached.seq):
        return False
    if not events:
        return True
    first = cached.events[0] if logged else pending[0].event
    last = pending[-1].event if held else cached.events[-1]
    return events[0] is first and events[-1] is last


_EVENT_COLUMNS = ("seq", "event_id", "invocation_id", "author", "timestamp", "delta", "data")
"""The columns of one buffered event, as ``append_events`` reads them."""


def _dumps(value: Any) -> str:
    # pydantic's encoder, so a delta is written exactly as inside the event JSON.
    try:
        return pydantic_core.to_json(value).decode()
    except pydantic_core.PydanticSerializationError as exc:
        raise errors.InvalidArgument(f"state values must be JSON-serializable: {exc}") from exc


def _shared_json(delta: Mapping[str, Any] | None, scope: str) -> str | None:
    """An ``app:`` or ``user:`` delta as JSON for the shared-state tables, or None if empty.

    Those tables are ``jsonb`` on PostgreSQL, which cannot hold a NUL
    character; the delta is refused on every backend alike.
    """
    if not delta:
        return None
    text = _dumps(delta)
    if "\\u0000" in text and _holds_nul(json.loads(text)):
        raise errors.InvalidArgument(
            f"{scope}: state cannot hold a NUL character (\\x00) in a key or value"
        )
    return text


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_nul(v) for v in value)
    return False


def _loads_state(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


RUN_METADATA_KEY = "durable_adk"
"""The key of ``Event.custom_metadata`` under which DurableRunner stamps its run."""


def run_fence_of(event: Event) -> dict[str, Any]:
    """The run id and epoch an event was written for (both None outside a durable run)."""
    stamp = (event.custom_metadata or {}).get(RUN_METADATA_KEY)
    if isinstance(stamp, Mapping) and "run_id" in stamp and "epoch" in stamp:
        return {"run_id": str(stamp["run_id"]), "run_epoch": int(stamp["epoch"])}
    return {"run_id": None, "run_epoch": None}


class _Reread(Exception):
    """The cached copy of a session is of an earlier life of it (dropped): read it whole."""


class _Sealed(Exception):
    """A stored event sealed under a key this process does not hold (its reason)."""


_UNREADABLE: tuple[type[BaseException], ...] = (*READ_ERRORS, _Sealed)
"""What makes a stored event come back as its stand-in."""

_APPEND_REFUSALS = frozenset({"missing", "duplicate", "fenced", "stale"})
"""The statuses with which an append (alone or joined with an intent) wrote nothing."""


def _marker(pk: int, seq: int) -> str:
    return f"{pk}:{seq}"


def _parse_marker(marker: str | None) -> tuple[int, int] | None:
    # Only our own "pk:seq" markers; another service's marker (ADK's
    # DatabaseSessionService stores a timestamp) falls back to the events.
    # (Decimal digits on both sides of one colon: what r"\d+:\d+" matches,
    # without a regular expression on every append.)
    pk, colon, seq = (marker or "").partition(":")
    return (int(pk), int(seq)) if colon and pk.isdecimal() and seq.isdecimal() else None


_STALE = "The session has been modified in storage since it was loaded"
"""The first words of every StaleSessionError, as ADK's DatabaseSessionService words it."""


class DurableSessionService(BaseSessionService):
    """An ADK session service over a durable-adk :class:`~durable_adk.store.Store`.

    Example::

        async with open_store("sqlite:///durable_adk.db") as store:
            sessions = DurableSessionService(store)
            runner = Runner(app=app, session_service=sessions)
    """

    def __init__(
        self, store: Store, *, snapshot_every: int = 100, cache_sessions: int = 256
    ) -> None:
        """Creates the service.

        Args:
            store: An open store; the caller owns it and closes it.
            snapshot_every: Cache the state fold every this many events (0: never).
            cache_sessions: How many sessions the per-process cache keeps
                besides those live runs hold (:meth:`pin`); the least recently
                used are dropped; 0 disables the cache.
        """
        if snapshot_every < 0:
            raise errors.InvalidArgument("snapshot_every must be >= 0")
        if cache_sessions < 0:
            raise errors.InvalidArgument("cache_sessions must be >= 0")
        self.store = store
        self.snapshot_every = snapshot_every
        self._cache_size = cache_sessions
        self._cache: dict[_Key, _Cached] = {}
        # The cached sessions no live run holds, least recently used first.
        self._unheld: OrderedDict[_Key, None] = OrderedDict()
        # Appends in flight per session object (by id): the lock they queue on
        # and how many hold or wait for it (the entry goes with the last).
        self._appending: dict[int, tuple[asyncio.Lock, list[int]]] = {}
        self._pins: dict[_Key, int] = {}  # sessions a live run holds: never dropped
        self.live = LiveEvents()
        """Followers of a session's events in this process: each stored event is
        published with its sequence number (:mod:`durable_adk.adk.eventlog.live`)."""

    # ------------------------------------------------------------------ cache

    def _remember(self, key: _Key, entry: _Cached) -> None:
        if self._cache_size == 0:
            return
        self._cache[key] = entry
        self._used(key)

    def _used(self, key: _Key) -> None:
        """Marks a cached session used now; drops the least recently used over the size.

        Only sessions no live run holds are in the order (``_unheld``): a
        held one is never dropped and does not count, so an eviction never
        walks past them (with a thousand runs in flight it did, on every
        session cached).
        """
        if key in self._pins:
            return
        self._unheld[key] = None
        self._unheld.move_to_end(key)
        while len(self._unheld) > self._cache_size:
            victim, _ = self._unheld.popitem(last=False)
            del self._cache[victim]

    def _forget(self, key: _Key) -> None:
        self._cache.pop(key, None)
        self._unheld.pop(key, None)

    def forget(self, key: _Key) -> None:
        """Drops this process's cached copy of a session (the next read reads it whole)."""
        self._forget(key)

    def pin(self, key: _Key) -> None:
        """Keeps ``key`` cached while a run of this process holds it (calls nest).

        With more runs in flight than ``cache_sessions``, the least recently
        used sessions would be dropped while their runs wait for admission
        or a model, and each would cost a read of its log on its next
        append; pinned, a run's session costs none, whatever the number of
        runs in flight.
        """
        self._pins[key] = self._pins.get(key, 0) + 1
        self._unheld.pop(key, None)

    def pinned(self, key: _Key) -> bool:
        """Whether a live run of this process holds ``key`` (see :meth:`pin`)."""
        return key in self._pins

    def unpin(self, key: _Key) -> None:
        """Ends one :meth:`pin` of ``key``; the last one wakes the runs queued behind it here.

        Runs of this process queued behind a pinned session wait long between
        claims (:meth:`~durable_adk.tables.ledger.RunLedger.wait_turn`, ``ahead_here``):
        when no live run of this process holds the session any more, however
        its drive ended (a finish has woken them already; a lost or handed-back
        drive has not), they try their claim at once.
        """
        left = self._pins.get(key, 0) - 1
        if left > 0:
            self._pins[key] = left
        elif self._pins.pop(key, None) is not None:
            if key in self._cache:
                self._used(key)  # a run has just ended on it
            self.store.wakeups.notify(session_key(*key))

    def adopt_created(
        self,
        key: _Key,
        *,
        pk: int,
        app_state: str | None,
        user_state: str | None,
        created_at: float,
    ) -> None:
        """Caches a session that was just created (empty) outside this service.

        DurableRunner creates a new conversation's session in the same unit of
        work as its run (:meth:`durable_adk.tables.ledger.RunLedger.start`) and holds
        it; the next read is served from here (see :meth:`trust_next_read`).
        """
        self._remember(
            key,
            _Cached(
                pk=pk,
                seq=0,
                events=[],
                state={},
                app_state=app_state,
                user_state=user_state,
                update_time=created_at,
                trusted=True,
            ),
        )

    def trust_next_read(self, key: _Key) -> bool:
        """Lets the next :meth:`get_session` of ``key`` answer from the cache, without reading.

        For a caller that holds the session's run (so no other run writes to
        it) and has just read or written it through this service: DurableRunner
        before it hands the session to ADK, which reads it again at once. The
        permission is used up by that read and withdrawn by
        :meth:`distrust`. Returns False when the session is not cached.
        """
        cached = self._cache.get(key)
        if cached is None:
            return False
        cached.trusted = True
        return True

    def is_trusted(self, key: _Key) -> bool:
        """Whether the next read of ``key`` may be served from the cache
        (:meth:`trust_next_read`); asking does not use the permission up."""
        cached = self._cache.get(key)
        return cached is not None and cached.trusted

    def distrust(self, key: _Key) -> None:
        """Withdraws an unused :meth:`trust_next_read`."""
        cached = self._cache.get(key)
        if cached is not None:
            cached.trusted = False

    def invocation_log(
        self, key: _Key, invocation_id: str, later: Sequence[Event] = ()
    ) -> list[Event] | None:
        """The part of ``key``'s cached log, then ``later``, that decides ``invocation_id``.

        The log from the invocation's first event on (from further back when
        a rewind there names an invocation that started earlier:
        :meth:`~durable_adk.adk.eventlog.events.LogIndex.tail_start`):
        classifying the invocation on it gives what the whole log gives, at
        the cost of the invocation's own events, however long the session.
        ``later`` are events after the cached ones (a batch not yet written).
        None when the session is not cached.
        """
        cached = self._cache.get(key)
        if cached is None:
            return None
        start = _index_of(cached).tail_start(invocation_id, later)
        return [*cached.events[start:], *later[max(0, start - len(cached.events)) :]]

    def cached_events(self, key: _Key) -> list[Event] | None:
        """The cached log of ``key`` (every event up to the last read or write), if cached.

        While a run holds the session, the cache has every event the run
        appended (an append that finds the log moved on fails as stale, and
        the run with it); DurableRunner classifies a run's end from the part
        of it :meth:`invocation_log` returns.
        """
        cached = self._cache.get(key)
        return None if cached is None else list(cached.events)

    # ------------------------------------------------------------- sessions

    @override
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        check_id("app_name", app_name)
        check_id("user_id", user_id)
        if session_id is None or (isinstance(session_id, str) and not session_id.strip()):
            session_id = uuid.uuid4().hex
        check_id("session_id", session_id)
        if state is not None and not isinstance(state, Mapping):
            raise errors.InvalidArgument(f"state must be a dict, got {type(state).__name__}")
        if state:
            self.store.limits.check(dict(state), f"the initial state of session {session_id!r}")
        session_part, app_part, user_part = split_delta(state)
        initial = _loads_state(_dumps(session_part))
        now = time.time()
        row = await self.store.fetchrow(
            "create_session",
            {
                "app_name": app_name,
                "user_id": user_id,
                "session_id": session_id,
                "initial_state": await seal_value(
                    self.store,
                    "sessions",
                    "initial_state",
                    (app_name, user_id, session_id),
                    _dumps(initial),
                    user=(app_name, user_id),
                ),
                "now": now,
                **await self._shared_deltas(app_name, user_id, app_part, user_part),
            },
        )
        if row is None or row["status"] != "ok":
            raise AlreadyExistsError(f"Session with id {session_id} already exists.")
        pk = int(row["pk"])
        key = (app_name, user_id, session_id)
        self._remember(key, _Cached(pk=pk, seq=0, events=[], state=initial))
        return self._build(
            key,
            pk=pk,
            seq=0,
            events=[],
            state=initial,
            **await self._shared_states(app_name, user_id, row),
            update_time=now,
        )

    def _build(
        self,
        key: _Key,
        *,
        pk: int,
        seq: int,
        events: list[Event],
        state: Mapping[str, Any],
        app_state: Mapping[str, Any],
        user_state: Mapping[str, Any],
        update_time: float,
    ) -> Session:
        session = Session(
            app_name=key[0],
            user_id=key[1],
            id=key[2],
            state=merged_view(state, app_state, user_state),
            last_update_time=update_time,
        )
        # Assigned after construction: pydantic would otherwise re-validate
        # every (already valid) event.
        session.events = events
        session._storage_update_marker = _marker(pk, seq)
        return session

    @override
    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        key = (app_name, user_id, session_id)
        await self._ready_to_read(key)
        cached = self._cache.get(key)
        if cached is not None and cached.trusted:
            cached.trusted = False
            return self._session_of(key, cached, config)
        partial = config is not None and (
            config.num_recent_events is not None or bool(config.after_timestamp)
        )
        if partial and cached is None:
            assert config is not None
            return await self._get_partial(key, config)
        try:
            entry = await self._read_entry(key, cached)
        except _Reread:
            return await self.get_session(
                app_name=app_name, user_id=user_id, session_id=session_id, config=config
            )
        return None if entry is None else self._session_of(key, entry, config)

    async def _ready_to_read(self, key: _Key) -> None:
        """Checks ``key``'s ids, then writes the drive's buffered events of it: a
        read is a barrier, it sees the drive's own events."""
        check_id("app_name", key[0])
        check_id("user_id", key[1])
        check_id("session_id", key[2])
        batch = current_batch()
        if batch is not None and batch.key == key and batch.service is self:
            await self.flush_batch(batch)

    def _session_of(self, key: _Key, entry: _Cached, config: GetSessionConfig | None) -> Session:
        """A Session of a cache entry's log and state (its events as ``config`` selects)."""
        return self._build(
            key,
            pk=entry.pk,
            seq=entry.seq,
            events=_select(entry.events, config) if config is not None else list(entry.events),
            state=entry.state,
            app_state=_loads_state(entry.app_state),
            user_state=_loads_state(entry.user_state),
            update_time=entry.update_time,
        )

    async def _read_entry(self, key: _Key, cached: _Cached | None) -> _Cached | None:
        """The session as the store has it now, cached (None: no such session).

        With ``cached``, only the events after it are read, in the round trip
        that checks the session row; :class:`_Reread` when ``cached`` turns out
        to be of an earlier life of the session (dropped: read it again).
        """
        # What the cache held when the read was sent: an append of this process
        # landing while the read is in flight extends the cached entry in
        # place, and its event is in the rows too; the read builds on the
        # log's first ``held`` events and this state, never on the entry as it
        # is when the rows come back (a log only grows at its end).
        since = cached.seq if cached else 0
        base = (len(cached.events), dict(cached.state)) if cached else None
        rows = await self.store.fetch(
            "load_session_tail",
            {"app_name": key[0], "user_id": key[1], "session_id": key[2], "since_seq": since},
        )
        if not rows:
            self._forget(key)
            return None
        head = rows[0]
        pk, last_seq = int(head["pk"]), int(head["last_seq"])
        repairs = int(head["repairs"] or 0)
        if cached is not None and (
            cached.pk != pk or last_seq < since or cached.repairs != repairs
        ):
            # The session was deleted and created again since we cached it, or
            # an operator repaired one of its events (rewritten in place).
            self._forget(key)
            raise _Reread
        entry = await self._entry_of(
            key, head, [r for r in rows if r["seq"] is not None], cached, since, base
        )
        if entry.seq != last_seq:
            raise errors.StoreError(
                f"session {key[2]!r} log has a gap: read up to {entry.seq}, row says {last_seq}"
            )
        current = self._cache.get(key)
        if current is None or current is cached or current.seq <= entry.seq:
            self._remember(key, entry)  # never over an entry an append moved past the read
        return entry

    async def unreadable_events(self, key: _Key) -> list[Event] | None:
        """The stand-ins of ``key``'s unreadable rows (:mod:`durable_adk.adk.eventlog.unreadable`).

        From the cached log when the next read may be served from it
        (:meth:`trust_next_read`), else read as :meth:`get_session` reads it
        (only what is new since the cached copy), and cached; the cached
        log's index names them (no walk of the log, no Session built).
        None when there is no such session.
        """
        await self._ready_to_read(key)
        cached = self._cache.get(key)
        entry = cached if cached is not None and cached.trusted else None
        if entry is None:
            try:
                entry = await self._read_entry(key, cached)
            except _Reread:
                entry = await self._read_entry(key, None)
        if entry is None:
            return None
        return [entry.events[place] for place in _index_of(entry).unreadable]

    async def _entry_of(
        self,
        key: _Key,
        head: Row,
        rows: Sequence[Row],
        cached: _Cached | None = None,
        since: int = 0,
        base: tuple[int, dict[str, Any]] | None = None,
    ) -> _Cached:
        """The cache entry of a session read: its row ``head`` and its events after ``since``.

        ``head`` has the columns of ``load_session_tail``'s session row (``pk``,
        ``initial_state``, ``update_time``, ``repairs``, ``app_state``,
        ``user_state``), ``rows`` the events read (``seq``, ``data``, in order;
        sealed values are opened here). ``base`` is how many events of
        ``cached``'s log and which state the tail extends (None: the rows are
        the whole log); with no new event the entry ``cached`` itself comes
        back, its shared state brought up to date.
        The caller checks the entry's ``seq`` against the row's ``last_seq``.
        """
        pk = int(head["pk"])
        tail = await self._events_of(pk, rows)
        if base is not None and not tail and cached is not None and cached.seq == since:
            entry = cached
        else:
            if base is not None and cached is not None:
                events, state = cached.events[: base[0]], base[1]
            else:
                events, state = [], _loads_state(await self._initial(key, head))
            entry = _Cached(
                pk=pk,
                seq=int(rows[-1]["seq"]) if tail else since,
                events=events + tail,
                state=fold(state, (split_delta(e.actions.state_delta)[0] for e in tail)),
                repairs=int(head["repairs"] or 0),
            )
        entry.app_state, entry.user_state = await self._shared_texts(key[0], key[1], head)
        entry.update_time = float(head["update_time"])
        return entry

    async def adopt_read(self, key: _Key, claimed: Row) -> bool:
        """Caches a session as a recovery's claim read it; the next read is served from it.

        :meth:`~durable_adk.tables.ledger.RunLedger.claim_expired` with
        ``read=True`` (``run_claim_expired_read``) reads each claimed run's
        session in the claim's own statement: ``claimed`` is that row, whose
        ``session_*`` columns hold the session row and the whole log
        (``session_log``: JSON text, ``{"initial_state", "app_state",
        "user_state", "events": [[seq, data], ...]}``, values as stored). The
        entry is built from them as :meth:`get_session` builds one from
        ``load_session_tail``'s rows (the same checks: the log's last sequence
        number, sealed values opened), and trusted for the next read
        (:meth:`trust_next_read`): the recovery's classification.

        Returns:
            False, caching nothing, when the claim found no session, when its
            read may be incomplete (``session_settled`` false: on PostgreSQL
            an append committed while the claim ran), when an append of this
            process already moved the cached session past it, when a sealed
            value does not open, or when the cache is off: the next
            :meth:`get_session` then reads the session as it would have.
        """
        log_text = claimed.get("session_log")
        if log_text is None or not claimed["session_settled"] or self._cache_size == 0:
            return False
        log = json.loads(log_text)
        head = {
            "pk": claimed["session_pk"],
            "initial_state": log["initial_state"],
            "update_time": claimed["session_update_time"],
            "repairs": claimed["session_repairs"],
            "app_state": log["app_state"],
            "user_state": log["user_state"],
        }
        rows = [{"seq": seq, "data": data} for seq, data in sorted(log["events"] or ())]
        try:
            entry = await self._entry_of(key, head, rows)
        except errors.KeyUnavailable:
            return False  # the read that follows meets it as it would have
        current = self._cache.get(key)
        if entry.seq != int(claimed["session_last_seq"]) or (
            current is not None and current.seq > entry.seq
        ):
            return False
        entry.trusted = True
        self._remember(key, entry)
        return True

    async def _events_of(self, pk: int, rows: Sequence[Row]) -> list[Event]:
        """The events of stored rows (``seq``, ``data``); an unreadable row as its stand-in.

        A row ``Event`` cannot be parsed from (nested deeper than the JSON
        parser goes, say: written before the library bounded what it stores)
        is left in the store as it is and comes back as a placeholder without
        content that names it and the reason
        (:mod:`durable_adk.adk.eventlog.unreadable`): the session loads, and
        a run that meets it parks instead of failing.
        """
        sealed: dict[int, str] = {}  # seq -> why a sealed row does not open
        if any(envelope_key(r["data"]) for r in rows):
            opened: list[Row] = []
            for r in rows:
                try:
                    data = await open_value(
                        self.store, "events", "data", (pk, r["seq"]), r["data"], strict=True
                    )
                except errors.KeyUnavailable as exc:
                    sealed[int(r["seq"])] = str(exc)
                    data = r["data"]
                opened.append({"seq": r["seq"], "data": data})
            rows = opened
        if not sealed:
            try:
                return load_events((r["data"] for r in rows), count=len(rows))
            except READ_ERRORS:
                pass  # one at a time, to find the unreadable ones
        events: list[Event] = []
        for row in rows:
            try:
                if int(row["seq"]) in sealed:
                    raise _Sealed(sealed[int(row["seq"])])
                events.append(load_event(row["data"]))
            except _UNREADABLE as exc:
                seq = int(row["seq"])
                columns = await self.store.fetchrow(
                    "load_event_row", {"session_pk": pk, "seq": seq}
                )
                if columns is not None and envelope_key(columns["delta"]):
                    columns = dict(columns)
                    try:
                        columns["delta"] = await open_value(
                            self.store, "events", "delta", (pk, seq), columns["delta"]
                        )
                    except errors.KeyUnavailable:
                        columns["delta"] = None
                reason = str(exc) if isinstance(exc, _Sealed) else reason_of(exc)
                events.append(
                    placeholder(seq=seq, data=row["data"], reason=reason, columns=columns)
                )
        return events

    async def _shared_deltas(
        self,
        app_name: str,
        user_id: str,
        app_delta: Mapping[str, Any] | None,
        user_delta: Mapping[str, Any] | None,
    ) -> dict[str, str | None]:
        """The ``app:``/``user:`` deltas as the shared-state tables take them (sealed with keys)."""
        return {
            "app_delta": await seal_state(
                self.store, "app_state", (app_name,), _shared_json(app_delta, "app")
            ),
            "user_delta": await seal_state(
                self.store, "user_state", (app_name, user_id), _shared_json(user_delta, "user")
            ),
        }

    async def _shared_texts(
        self, app_name: str, user_id: str, head: Row
    ) -> tuple[str | None, str | None]:
        """A row's ``app_state`` and ``user_state`` (JSON text), their values opened."""
        return (
            await open_state(self.store, "app_state", (app_name,), head["app_state"]),
            await open_state(self.store, "user_state", (app_name, user_id), head["user_state"]),
        )

    async def _shared_states(self, app_name: str, user_id: str, head: Row) -> dict[str, Any]:
        """A row's shared state as :meth:`_build` takes it, opened."""
        app_text, user_text = await self._shared_texts(app_name, user_id, head)
        return {"app_state": _loads_state(app_text), "user_state": _loads_state(user_text)}

    async def _initial(self, key: _Key, head: Row) -> str | None:
        """The session's stored initial state, opened."""
        return cast(
            "str | None",
            await open_value(self.store, "sessions", "initial_state", key, head["initial_state"]),
        )

    async def _base(self, key: _Key, pk: int, head: Row) -> dict[str, Any]:
        """The state a fold of ``head``'s tail starts from: its snapshot, else the initial state."""
        if head["snap_seq"] is not None and int(head["snap_seq"]):
            text = await open_value(
                self.store, "state_snapshots", "state", (pk, head["snap_seq"]), head["snap_state"]
            )
            return _loads_state(text)
        return _loads_state(await self._initial(key, head))

    async def _deltas(self, pk: int, rows: Sequence[Row]) -> list[tuple[int, Any]]:
        """(seq, delta) of delta rows (``seq``, ``delta``), opened.

        A delta a view cannot open (``lenient_reads``: its placeholder) folds as none.
        """
        return [
            (
                int(r["seq"]),
                _loads_state(
                    await open_value(self.store, "events", "delta", (pk, r["seq"]), r["delta"])
                ),
            )
            for r in rows
        ]

    async def _get_partial(self, key: _Key, config: GetSessionConfig) -> Session | None:
        """A cold read of part of the log: the newest snapshot, the tail after it, the window."""
        app_name, user_id, session_id = key
        head = await self.store.fetchrow(
            "load_session_head",
            {"app_name": app_name, "user_id": user_id, "session_id": session_id},
        )
        if head is None:
            return None
        pk, last_seq = int(head["pk"]), int(head["last_seq"])
        snap_seq = int(head["snap_seq"]) if head["snap_seq"] is not None else 0
        window_start = last_seq
        if config.num_recent_events is not None:
            window_start = max(0, last_seq - config.num_recent_events)
        rows = await self.store.fetch(
            "load_events_partial",
            {
                "session_pk": pk,
                "from_seq": min(snap_seq, window_start),
                "after_ts": config.after_timestamp or None,
            },
        )
        loaded = await self._events_of(pk, rows)
        fetched = [(int(r["seq"]), event) for r, event in zip(rows, loaded, strict=True)]
        base = await self._base(key, pk, head)
        state = fold(
            base, (split_delta(e.actions.state_delta)[0] for s, e in fetched if s > snap_seq)
        )
        return self._build(
            key,
            pk=pk,
            seq=last_seq,
            events=_select([e for _, e in fetched], config),
            state=state,
            **await self._shared_states(app_name, user_id, head),
            update_time=float(head["update_time"]),
        )

    @override
    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        check_id("app_name", app_name)
        if user_id is not None:
            check_id("user_id", user_id)
        rows = await self.store.fetch("list_sessions", {"app_name": app_name, "user_id": user_id})
        app_state = _loads_state(
            await open_state(
                self.store,
                "app_state",
                (app_name,),
                await self.store.fetchval("get_app_state", {"app_name": app_name}),
            )
        )
        user_states = {
            r["user_id"]: _loads_state(
                await open_state(self.store, "user_state", (app_name, r["user_id"]), r["state"])
            )
            for r in await self.store.fetch(
                "list_user_states", {"app_name": app_name, "user_id": user_id}
            )
        }
        grouped: OrderedDict[tuple[str, str], list[Row]] = OrderedDict()
        for row in rows:
            grouped.setdefault((row["user_id"], row["session_id"]), []).append(row)
        sessions = []
        for (uid, sid), group in grouped.items():
            first = group[0]
            pk = int(first["pk"])
            base = await self._base((app_name, uid, sid), pk, first)
            deltas = await self._deltas(pk, [r for r in group if r["seq"] is not None])
            state = fold(base, (d for _, d in deltas))
            sessions.append(
                Session(
                    app_name=app_name,
                    user_id=uid,
                    id=sid,
                    state=merged_view(state, app_state, user_states.get(uid, {})),
                    last_update_time=float(first["update_time"]),
                )
            )
        return ListSessionsResponse(sessions=sessions)

    @override
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        for name, value in (
            ("app_name", app_name),
            ("user_id", user_id),
            ("session_id", session_id),
        ):
            check_id(name, value)
        await self.store.execute(
            "delete_session", {"app_name": app_name, "user_id": user_id, "session_id": session_id}
        )
        self._forget((app_name, user_id, session_id))

    @override
    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        text = await self.store.fetchval(
            "get_user_state", {"app_name": app_name, "user_id": user_id}
        )
        return _loads_state(await open_state(self.store, "user_state", (app_name, user_id), text))

    # ---------------------------------------------------------------- append

    @override
    async def append_event(self, session: Session, event: Event) -> Event:
        """Stores ``event`` at the end of ``session``'s log and on the object.

        Two appends sent at once through one session object are written one
        after the other, in the order they were sent, as ADK's own services
        do (each reads the object's place in the log once the one before has
        moved it); copies of a session in other objects or processes are
        fenced by the store instead, and refused as stale.
        """
        if event.partial:
            return event
        ident = id(session)  # alive while this append is: its id names it
        entry = self._appending.get(ident)
        if entry is None:
            entry = self._appending[ident] = (asyncio.Lock(), [0])
        lock, holders = entry
        holders[0] += 1
        try:
            async with lock:
                return await self._append_in_turn(session, event)
        finally:
            holders[0] -= 1
            if not holders[0]:
                del self._appending[ident]

    async def _append_in_turn(self, session: Session, event: Event) -> Event:
        """:meth:`append_event`, once no other append through the same object is out."""
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        key = (session.app_name, session.user_id, session.id)
        batch = current_batch()
        if batch is not None and (batch.key != key or batch.service is not self):
            batch = None  # another session (an AgentTool child's, say): committed at once
        # The marker of a session this service loaded says where it stands (no
        # await: every append of a drive takes this path); else its log does.
        parsed = _parse_marker(session._storage_update_marker)
        pk, expected = parsed if parsed is not None else await self._fence_from_log(session)
        fence = run_fence_of(event)
        if batch is not None and batch.pending:
            tip = batch.pending[-1]
            if (pk, expected) != (tip.row["pk"], tip.seq) or fence != tip.row["fence"]:
                # Not the continuation of the batch: write it, then this event on its own.
                await self.flush_batch(batch)
        try:
            data = event.model_dump_json(exclude_none=True)
        except pydantic_core.PydanticSerializationError as exc:
            if "depth" in str(exc):
                raise errors.PayloadTooDeep(
                    f"event {event.id} is nested too deep to be stored as JSON; it was not stored"
                ) from None
            raise errors.InvalidArgument(
                f"event {event.id} cannot be stored as JSON: {exc}"
            ) from exc
        # The last guard: the log stays readable on every worker, whatever the
        # way a deep value reached the event (docs/service.md, "Payload limits").
        self.store.limits.check_event(data, f"event {event.id} ({event.author})")
        # The delta as the JSON just written holds it (ADK's serializer turns a
        # non-JSON value into its string), so the fold equals a cold read's.
        # Most events carry none: then nothing is serialized a second time.
        written = (
            event.actions.model_dump(mode="json", include={"state_delta"})
            if event.actions.state_delta
            else {}
        )
        session_delta, app_delta, user_delta = split_delta(written.get("state_delta"))
        new_seq = expected + 1
        if batch is not None:
            return await self._buffer(
                batch,
                session,
                event,
                pk,
                new_seq,
                data,
                fence,
                session_delta,
                app_delta,
                user_delta,
            )
        snapshot = None
        if is_snapshot_seq(new_seq, self.snapshot_every):
            before = await self._state_at(key, pk, expected)
            snapshot = _dumps(fold(before, [session_delta]))
        row = await self.store.fetchrow(
            "append_event",
            {
                "session_pk": pk,
                "expected_seq": expected,
                "event_id": event.id,
                "invocation_id": event.invocation_id,
                "author": event.author,
                "timestamp": event.timestamp,
                **await self._sealed(
                    key,
                    pk,
                    new_seq,
                    {"delta": _dumps(session_delta) if session_delta else None, "data": data},
                ),
                "app_name": session.app_name,
                "user_id": session.user_id,
                **await self._shared_deltas(
                    session.app_name, session.user_id, app_delta, user_delta
                ),
                "snapshot": await self._sealed_snapshot(key, pk, new_seq, snapshot),
                **fence,
            },
        )
        status = row["status"] if row else "missing"
        if status == "duplicate":
            await self._check_retry(session.id, pk, event.id, data)
            return event
        self._refused(key, session.id, status, row, event=event.id, fence=fence, expected=expected)
        session._storage_update_marker = _marker(pk, new_seq)
        session.last_update_time = event.timestamp
        self._appended(key, pk, expected, event, data, session_delta, app_delta, user_delta)
        return self._commit_event_to_session(session, event)

    async def _check_retry(self, session_id: str, pk: int, event_id: str, data: str) -> None:
        """Returns if the stored event of this id equals ``data`` (a retry: a no-op); else raises.

        An event id names one event: a different event under a stored id is
        refused, never dropped in silence.
        """
        found = await self.store.fetchrow(
            "load_event_data", {"session_pk": pk, "event_id": event_id}
        )
        stored = None
        if found is not None:
            stored = await open_value(
                self.store, "events", "data", (pk, found["seq"]), found["data"]
            )
        if stored is not None and json.loads(stored) != json.loads(data):
            raise AlreadyExistsError(
                f"session {session_id!r} already holds an event with id {event_id!r} "
                "and different content; nothing was written"
            )

    def _refused(
        self,
        key: _Key,
        session_id: str,
        status: str,
        row: Row | None,
        *,
        event: str,
        fence: Mapping[str, Any],
        expected: int,
    ) -> None:
        """Raises for an append (or a batch) the store refused; returns when it was written."""
        if status == "ok":
            return
        if status == "fenced":
            raise errors.Fenced(
                f"event {event} for run {fence['run_id']} refused: the run was "
                "taken over or has finished, this worker must stop driving it"
            )
        if status == "missing":
            self._forget(key)
            raise SessionNotFoundError(f"Session {session_id} not found.")
        # The first sentence is ADK's (DatabaseSessionService): callers match on it.
        raise StaleSessionError(
            f"{_STALE} (session {session_id!r}: this object saw event #{expected}, "
            f"the log is at #{row['last_seq'] if row else '?'}"
            f"{'; an event id of the batch is already stored' if status == 'duplicate' else ''}); "
            "reload it with get_session"
        )

    def _appended(
        self,
        key: _Key,
        pk: int,
        expected: int,
        event: Event,
        data: str,
        session_delta: Mapping[str, Any],
        app_delta: Mapping[str, Any],
        user_delta: Mapping[str, Any],
    ) -> None:
        """Brings the cache up to an event the store has just written at ``expected + 1``.

        Followers of the session in this process get the stored event too.
        """
        if self.live.watched(key):
            self.live.publish(key, Stored(expected + 1, data, event.id))
        cached = self._cache.get(key)
        if cached is not None and cached.pk == pk and cached.seq == expected:
            # The caller's own object, as ADK's InMemorySessionService keeps it.
            cached.events.append(event)
            if session_delta:
                cached.state.update(session_delta)
            cached.seq = expected + 1
            cached.update_time = event.timestamp
            if app_delta:
                cached.app_state = _dumps({**_loads_state(cached.app_state), **app_delta})
            if user_delta:
                cached.user_state = _dumps({**_loads_state(cached.user_state), **user_delta})
            self._used(key)
        elif cached is not None:
            self._forget(key)

    def _holds(self, batch: EventBatch, session: Session, pk: int, seq: int, event_id: str) -> bool:
        """Whether ``session`` (at ``seq``) holds an event of this id.

        A session object that holds the cached log and the batch's events
        (the one ADK drives) is answered from the cache's index; any other is
        searched.
        """
        cached = self._cache.get(batch.key)
        if (
            cached is not None
            and cached.pk == pk
            and _mirrors(session.events, cached, batch.pending, seq)
        ):
            return event_id in _index_of(cached).ids
        return any(e.id == event_id for e in reversed(session.events))

    async def _buffer(
        self,
        batch: EventBatch,
        session: Session,
        event: Event,
        pk: int,
        new_seq: int,
        data: str,
        fence: dict[str, Any],
        session_delta: dict[str, Any],
        app_delta: dict[str, Any],
        user_delta: dict[str, Any],
    ) -> Event:
        """Holds an append in the drive's batch; the session object moves on at once.

        ``fence`` is the event's :func:`run_fence_of`."""
        if batch.holds(event.id) or self._holds(batch, session, pk, new_seq - 1, event.id):
            return event  # re-appending an event the session holds: a no-op, as in the store
        # Refused now, as the store would refuse it at once: nothing is buffered.
        _shared_json(app_delta, "app")
        _shared_json(user_delta, "user")
        snapshot = None
        if is_snapshot_seq(new_seq, self.snapshot_every):
            key = batch.key
            first = batch.pending[0].seq - 1 if batch.pending else new_seq - 1
            before = fold(
                dict(await self._state_at(key, pk, first)),
                (p.session_delta for p in batch.pending),
            )
            snapshot = _dumps(fold(before, [session_delta]))
        batch.pending.append(
            Pending(
                seq=new_seq,
                event=event,
                row={
                    "pk": pk,
                    "fence": fence,
                    "seq": new_seq,
                    "event_id": event.id,
                    "invocation_id": event.invocation_id,
                    "author": event.author,
                    "timestamp": event.timestamp,
                    "delta": _dumps(session_delta) if session_delta else None,
                    "data": data,
                },
                session=session,
                session_delta=session_delta,
                app_delta=app_delta,
                user_delta=user_delta,
                snapshot=snapshot,
            )
        )
        session._storage_update_marker = _marker(pk, new_seq)
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)

    async def flush_batch(
        self,
        batch: EventBatch,
        *,
        finish: Mapping[str, Any] | None = None,
        journal: Mapping[str, Any] | None = None,
        job: Mapping[str, Any] | None = None,
    ) -> Row | None:
        """Writes a drive's buffered appends in one fenced unit of work (a barrier).

        Nothing of the batch is written when the store refuses it; the batch
        is emptied either way.

        Args:
            batch: The drive's batch.
            finish: The run's end to write in the same unit (``owner``,
                ``status``, ``error``, ``classification`` of
                :meth:`~durable_adk.tables.ledger.RunLedger.finish_params`): the
                last events are then durable exactly when the run is
                finished. The fence then also names the run's owner.
            journal: A journaled tool's intent to write in the same unit
                (the parameters of the ``journal_begin`` unit): the batch's
                function call is then durable exactly when its intent is.
            job: A long-running call's job to start in the same unit (the
                parameters of the ``job_start`` unit): the batch's function
                call is then durable exactly when its job is.

        Returns:
            With ``finish``, the store's row (``app_name``, ``user_id``,
            ``session_id``, ``queued_behind``); with ``journal``, the
            journal's verdict (``journal_begin``'s row; the events were
            written whatever it says); with ``job``, the job's row; else None.

        Raises:
            durable_adk.errors.Fenced: The run was taken over or has finished.
            google.adk.errors.StaleSessionError: Someone else appended to the
                session since the batch began (or stored one of its event ids).
            SessionNotFoundError: The session was deleted.
        """
        if batch.failed is not None:
            raise batch.failed
        # The unit a batch is written with, by what joins it.
        joins = {
            "append_events_finish": finish,
            "append_events_journal_begin": journal,
            "append_events_job_start": job,
        }
        joined = [(unit, params) for unit, params in joins.items() if params is not None]
        if not batch.pending:
            if joined:
                raise errors.InvalidArgument(
                    "a finish, an intent or a job joins a batch only when it holds events"
                )
            return None
        if len(joined) > 1:
            raise errors.InvalidArgument(
                "a batch is written with one of a finish, an intent or a job, not several"
            )
        unit, params = joined[0] if joined else ("append_events", {})
        pending, batch.pending = batch.pending, []
        try:
            return await self._write_batch(batch, pending, unit, params)
        except BaseException as exc:
            batch.failed = exc
            raise

    async def _write_batch(
        self,
        batch: EventBatch,
        pending: list[Pending],
        unit: str,
        joined: Mapping[str, Any],
    ) -> Row | None:
        first, last = pending[0], pending[-1]
        app_delta: dict[str, Any] = {}
        user_delta: dict[str, Any] = {}
        for p in pending:
            app_delta.update(p.app_delta)
            user_delta.update(p.user_delta)
        key = batch.key
        pk, expected = first.row["pk"], first.seq - 1
        shared = {
            "session_pk": pk,
            "expected_seq": expected,
            "app_name": key[0],
            "user_id": key[1],
            **await self._shared_deltas(key[0], key[1], app_delta, user_delta),
            **first.row["fence"],
        }
        if len(pending) == 1 and unit == "append_events":
            # One event: the single append's unit (no JSON array to take apart).
            one = first.row
            row = await self.store.fetchrow(
                "append_event",
                {
                    **shared,
                    **{k: one[k] for k in _EVENT_COLUMNS if k != "seq"},
                    **await self._sealed(key, pk, first.seq, one),
                    "snapshot": await self._sealed_snapshot(key, pk, first.seq, first.snapshot),
                },
            )
        else:
            # Several events, or the last ones with the run's finish, a
            # journaled tool's intent or a long-running call's job (one unit).
            row = await self.store.fetchrow(
                unit,
                {
                    **shared,
                    **joined,
                    "last_seq": last.seq,
                    "timestamp": last.event.timestamp,
                    "events": _dumps(
                        [
                            {
                                **{k: p.row[k] for k in _EVENT_COLUMNS},
                                **await self._sealed(key, pk, p.seq, p.row),
                            }
                            for p in pending
                        ]
                    ),
                    "snapshots": await self._snapshots_json(key, pk, pending),
                },
            )
        status = row["status"] if row else "missing"
        if unit == "append_events_journal_begin":
            if status == "fenced":
                # Refused by the append's fence or the journal's (then the
                # events were written): the cached session may be behind.
                self._forget(key)
            elif status not in _APPEND_REFUSALS:
                status = "ok"  # the events were written; the verdict is the journal's
        self._refused(
            key,
            key[2],
            status,
            row,
            event=first.event.id,
            fence=first.row["fence"],
            expected=expected,
        )
        batch.flushes += 1
        for p in pending:
            self._appended(
                key,
                pk,
                p.seq - 1,
                p.event,
                p.row["data"],
                p.session_delta,
                p.app_delta,
                p.user_delta,
            )
        return row if unit != "append_events" else None

    async def _fence_from_log(self, session: Session) -> tuple[int, int]:
        """The (session pk, last sequence number) of a Session built elsewhere (no
        marker of ours): its newest event tells where it stands."""
        last_id = session.events[-1].id if session.events else ""
        row = await self.store.fetchrow(
            "find_event_seq",
            {
                "app_name": session.app_name,
                "user_id": session.user_id,
                "session_id": session.id,
                "event_id": last_id,
            },
        )
        if row is None:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        if session.events and row["seq"] is None:
            raise StaleSessionError(
                f"{_STALE} (session {session.id!r}: this object's newest event is not in "
                "the store); reload it with get_session"
            )
        return int(row["pk"]), int(row["seq"] or 0)

    async def _state_at(self, key: _Key, pk: int, seq: int) -> dict[str, Any]:
        """The session-scoped fold at ``seq``, from the cache or the newest snapshot."""
        cached = self._cache.get(key)
        if cached is not None and cached.pk == pk and cached.seq == seq:
            return cached.state
        head = await self.store.fetchrow(
            "load_session_head", {"app_name": key[0], "user_id": key[1], "session_id": key[2]}
        )
        if head is None:
            return {}
        snap_seq = int(head["snap_seq"]) if head["snap_seq"] is not None else 0
        base = await self._base(key, pk, head)
        rows = await self.store.fetch(
            "load_deltas_after", {"session_pk": pk, "after_seq": snap_seq, "upto_seq": seq}
        )
        return fold(base, (d for _, d in await self._deltas(pk, rows)))

    async def _sealed(self, key: _Key, pk: int, seq: int, row: Mapping[str, Any]) -> dict[str, Any]:
        """An event's ``delta`` and ``data`` as stored (sealed when the store has keys)."""
        if self.store.codec is None:
            return {"delta": row["delta"], "data": row["data"]}
        user = (key[0], key[1])
        return {
            name: await seal_value(self.store, "events", name, (pk, seq), row[name], user=user)
            for name in ("delta", "data")
        }

    async def _sealed_snapshot(self, key: _Key, pk: int, seq: int, text: str | None) -> str | None:
        return await seal_value(
            self.store, "state_snapshots", "state", (pk, seq), text, user=(key[0], key[1])
        )

    async def _snapshots_json(self, key: _Key, pk: int, pending: Sequence[Pending]) -> str | None:
        """The snapshot points a batch crosses, ``[[seq, state], ...]`` (None: there is none)."""
        points = [
            [p.seq, await self._sealed_snapshot(key, pk, p.seq, p.snapshot)]
            for p in pending
            if p.snapshot
        ]
        return _dumps(points) if points else None

    # ------------------------------------------------------------- lifetime

    async def close(self) -> None:
        """Does nothing: the store belongs to the caller, who closes it.

        ADK's ``DatabaseSessionService.close`` likewise leaves an engine it
        was given open; here the store is always given.
        """

    async def __aenter__(self) -> DurableSessionService:
        """``async with service:`` as with ADK's ``DatabaseSessionService``; returns the service."""
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Calls :meth:`close` (the store stays open)."""
        await self.close()

    # --------------------------------------------------------------- rebuild

    async def rebuild_state(
        self, *, app_name: str, user_id: str, session_id: str, rewrite: bool = False
    ) -> RebuildReport:
        """Recomputes a session's state and snapshots from its event log alone.

        Args:
            app_name: The session's app.
            user_id: The session's user.
            session_id: The session.
            rewrite: Replace the stored snapshots with the recomputed ones.

        Returns:
            The folded state and whether every stored snapshot agreed with the log.

        Raises:
            SessionNotFoundError: No such session.
        """
        key = (app_name, user_id, session_id)
        head = await self.store.fetchrow(
            "load_session_head",
            {"app_name": app_name, "user_id": user_id, "session_id": session_id},
        )
        if head is None:
            raise SessionNotFoundError(f"Session {session_id} not found.")
        pk, last_seq = int(head["pk"]), int(head["last_seq"])
        rows = await self.store.fetch(
            "load_deltas_after", {"session_pk": pk, "after_seq": 0, "upto_seq": last_seq}
        )
        deltas = dict(await self._deltas(pk, rows))
        initial = _loads_state(await self._initial(key, head))
        expected = snapshots_of(
            initial, ((s, deltas.get(s)) for s in range(1, last_seq + 1)), self.snapshot_every
        )
        stored = [
            (
                int(r["seq"]),
                _loads_state(
                    await open_value(
                        self.store, "state_snapshots", "state", (pk, r["seq"]), r["state"]
                    )
                ),
            )
            for r in await self.store.fetch("load_snapshots", {"session_pk": pk})
        ]
        by_seq = dict(expected)
        consistent = all(s in by_seq and by_seq[s] == st for s, st in stored)
        if rewrite:
            await self.store.execute(
                "replace_snapshots",
                {
                    "session_pk": pk,
                    "snapshots": _dumps(
                        [
                            [s, await self._sealed_snapshot(key, pk, s, _dumps(st))]
                            for s, st in expected
                        ]
                    ),
                },
            )
            self._forget(key)
        state = fold(initial, (deltas[s] for s in sorted(deltas)))
        return RebuildReport(
            seq=last_seq, state=state, snapshots_consistent=consistent, snapshots=len(expected)
        )


@dataclass(frozen=True, slots=True)
class RebuildReport:
    """What :meth:`DurableSessionService.rebuild_state` found.

    Attributes:
        seq: The last sequence number of the log.
        state: The session-scoped state folded from the whole log.
        snapshots_consistent: Every stored snapshot equals the fold at its sequence number.
        snapshots: How many snapshots the log should have.
    """

    seq: int
    state: dict[str, Any]
    snapshots_consistent: bool
    snapshots: int


def _select(events: Sequence[Event], config: GetSessionConfig) -> list[Event]:
    """Applies a GetSessionConfig, keeping the newest invocation whole while open."""
    if config.num_recent_events == 0:
        return []
    chosen = list(events)
    if config.after_timestamp:
        chosen = [e for e in chosen if e.timestamp >= config.after_timestamp]
    if config.num_recent_events is not None:
        chosen = chosen[-config.num_recent_events :]
    open_id = open_invocation_id(events)
    if open_id is None:
        return chosen
    keep = {id(e) for e in chosen}
    return [e for e in events if id(e) in keep or e.invocation_id == open_id]
