"""The side-effect journal: no outside effect twice, and no guessing.

An outside effect (an invoice, an email, a charge) is journaled under its
business identity (``send-invoice:INV-77``), never under the function call id:
a re-driven model makes a new call id for the same intent. The protocol of
:meth:`Journal.execute`, each step decided by one statement that first checks
the caller's own fence (its run RUNNING at its epoch, its lease unexpired by
the database clock; a caller outside any run is never fenced):

* the caller is fenced: raise :class:`~durable_adk.errors.Fenced` before
  anything else: no lookup, no act, no result;
* a DONE entry: return the stored result, do nothing;
* no entry: write INTENT (owned by this attempt), act with the key passed
  downstream, write DONE;
* an INTENT whose owner is live (its run still RUNNING at its epoch, though it
  may have died with its lease still running; outside a run, its hold still
  running): ask the outside system by idempotency key first (``lookup``); found:
  record DONE (fenced by the caller's own epoch; an entry already DONE is left
  as it is) and return it at once. Not found, or no lookup: wait for the
  owner's result, bounded; never act. The wait ends when the entry is DONE, or
  when the owner stops being live; a wait that runs out raises
  :class:`JournalBusy`, naming the run and epoch that hold the key;
* an abandoned INTENT (its run was taken over or ended, or its holder released
  it because its act raised): take it over with one conditional update, then
  ask the outside system by idempotency key (``lookup``); found: record DONE
  and return it; not found: act;
* an abandoned INTENT and no way to look up: raise :class:`OutcomeUnknown`,
  which parks the run for a person. Never a guess;
* no entry, less than :data:`LOOK_FIRST_AFTER_FAILOVER` after a failover: as
  for a taken-over intent, a tool with a lookup asks first (found: DONE, said
  at WARNING); without one it acts;
* an entry written by another tool: :class:`~durable_adk.errors.InvalidArgument`;
* the act raises :class:`~durable_adk.errors.FenceRefused` (the outside
  service refused the request's fence before acting, see
  :func:`durable_adk.fencing.fence.fence_headers`): nothing happened. An intent this
  attempt wrote is removed; one it took over is released (its first owner may
  have acted). The error propagates: the drive stops as fenced.

Two calls of one key at once (two parallel calls in one model turn, two
sessions) make one outside call. This module has no ADK import.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from durable_adk import errors
from durable_adk.faults import crash_point
from durable_adk.store.base import Row, Store
from durable_adk.store.sealing.codec import open_value

Act = Callable[[str], Awaitable[Any]]
Lookup = Callable[[str], Awaitable[Any]]

logger = logging.getLogger("durable_adk.journal")

WAIT_SECONDS = 30.0
"""How long a second caller waits, by default, for a live owner's result."""

HOLD_SECONDS = 15.0
"""Outside a run, how long an intent's hold lasts without renewal (renewed every third of it)."""

LOOK_FIRST_AFTER_FAILOVER = 24 * 3600.0
"""Seconds after a failover (:attr:`~durable_adk.store.base.Store.failed_over_at`) during
which a new intent asks the outside system first: an asynchronous standby may have
lost an intent whose act happened, or an answer whose run acted (docs/postgres.md)."""

_FIRST_POLL = 0.02
_MAX_POLL = 0.5


class Fence(Protocol):
    """A local view of the caller's lease (such as the runner's ``RunFence``)."""

    async def confirm(self) -> None:
        """Returns while the lease is trusted; raises :class:`~durable_adk.errors.Fenced` if not."""
        ...


@contextlib.asynccontextmanager
async def _busy(fence: Fence | None) -> AsyncIterator[None]:
    """The fence's busy section when it has one (a RunFence): a cancel lets the act finish."""
    busy = getattr(fence, "busy", None)
    if busy is None:
        yield
        return
    async with busy():
        yield


class OutcomeUnknown(errors.DurableError):
    """An outside effect may have happened and nothing can tell: the run needs a person."""


# A subclass of DatabaseBusy on purpose: it is transient (the owner is alive and
# working), so whatever treats a busy store as "hand the run back and retry
# after a back-off" treats this the same way, and nothing is acted twice
# meanwhile. (The docstring is the default message, so it stays one line.)
class JournalBusy(errors.DatabaseBusy):
    """A live attempt holds this effect's intent and gave no result within the wait: retry."""

    def __init__(
        self,
        message: str | None = None,
        *,
        key: str | None = None,
        run_id: str | None = None,
        run_epoch: int | None = None,
        function_call_id: str | None = None,
    ) -> None:
        """The error, with who holds the intent.

        Args:
            message: The message (default: the docstring).
            key: The effect's key.
            run_id: The run that holds its intent (None outside a run).
            run_epoch: That run's fencing epoch.
            function_call_id: The call that holds it.
        """
        super().__init__(message)
        self.key = key
        self.run_id = run_id
        self.run_epoch = run_epoch
        self.function_call_id = function_call_id


class JournalStatus(StrEnum):
    """Where an effect stands."""

    INTENT = "INTENT"
    DONE = "DONE"


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One journaled effect.

    Attributes:
        key: The effect's business identity, also its idempotency key downstream.
        tool_name: The tool that performs it; another tool may not use the key.
        status: INTENT (about to act, acting, or died or failed acting) or DONE.
        result: The outside system's answer (DONE only).
        run_id: The run that owns the entry (the last one to write it).
        run_epoch: That run's fencing epoch at the time.
        invocation_id: The ADK invocation that first intended the effect.
        function_call_id: The call that last wrote the entry.
        created_at: When the intent was written (database clock).
        updated_at: When the entry last changed.
        holder: The token of the attempt acting on an INTENT; None once the
            attempt released it (its act raised) and on a DONE entry.
        held_until: Outside a run, when the holder's hold runs out unless
            renewed (database clock); None inside a run, whose lease and epoch
            say whether the holder is alive.
        resolved_by: The operator who recorded the result by hand
            (:meth:`Journal.resolve`), or None.
        key_template: The key template of the tool that first wrote the
            entry (None: written before schema version 20, or by an act
            without one, such as a saga stage).
    """

    key: str
    tool_name: str
    status: JournalStatus
    result: Any
    run_id: str | None
    run_epoch: int | None
    invocation_id: str | None
    function_call_id: str | None
    created_at: float
    updated_at: float
    holder: str | None = None
    held_until: float | None = None
    resolved_by: str | None = None
    key_template: str | None = None

    @property
    def released(self) -> bool:
        """An INTENT that nobody is acting on (its holder's act raised, or it predates holders)."""
        return self.status is JournalStatus.INTENT and self.holder is None

    @classmethod
    def from_row(cls, row: Row) -> JournalEntry:
        """Maps a ``journal`` row."""
        return cls(
            key=row["key"],
            tool_name=row["tool_name"],
            status=JournalStatus(row["status"]),
            result=None if row["result"] is None else json.loads(row["result"]),
            run_id=row["run_id"],
            run_epoch=None if row["run_epoch"] is None else int(row["run_epoch"]),
            invocation_id=row["invocation_id"],
            function_call_id=row["function_call_id"],
            created_at=float(row["created_at"]),
            updated_at=float(row["updated_at"]),
            holder=row["holder"],
            held_until=None if row["held_until"] is None else float(row["held_until"]),
            resolved_by=row.get("resolved_by"),
            key_template=row.get("key_template"),
        )


@dataclass(frozen=True, slots=True)
class Attempt:
    """Who is performing an effect: the run, its epoch, the call.

    Attributes:
        tool_name: The tool.
        run_id: The durable run (None outside one: nothing is fenced).
        run_epoch: The run's fencing epoch.
        invocation_id: The ADK invocation.
        function_call_id: The ADK function call.
        key_template: The template the key was formatted from (``@journaled``'s
            ``key``), kept with a new entry: drift detection compares it with
            the template of the code that re-drives the call.
    """

    tool_name: str
    run_id: str | None = None
    run_epoch: int | None = None
    invocation_id: str | None = None
    function_call_id: str | None = None
    key_template: str | None = None


class _Lost(Exception):
    """Internal: the entry changed hands under us (our hold was taken over); begin again."""


class Journal:
    """Side effects keyed by business identity, over a store."""

    def __init__(self, store: Store, *, hold_seconds: float = HOLD_SECONDS) -> None:
        """Creates the journal over an open store.

        Args:
            store: An open store.
            hold_seconds: Outside a run, how long an intent stays held without
                renewal; the holder renews it while it acts, so only a holder
                that died lets it run out. Inside a run the run's lease and
                epoch decide instead.
        """
        if hold_seconds <= 0:
            raise errors.InvalidArgument(f"hold_seconds must be > 0, got {hold_seconds!r}")
        self.store = store
        self.hold_seconds = hold_seconds

    async def _result(self, key: str, row: Row) -> Any:
        """The result of entry ``key``'s row, opened (the row may not name its key)."""
        text = await open_value(self.store, "journal", "result", (key,), row["result"])
        return None if text is None else json.loads(text)

    async def get(self, key: str) -> JournalEntry | None:
        """The entry for ``key``, or None."""
        row = await self.store.fetchrow("journal_get", {"key": key})
        return None if row is None else JournalEntry.from_row(row)

    async def list(
        self, *, invocation_id: str | None = None, limit: int = 100
    ) -> list[JournalEntry]:
        """Entries, newest first."""
        rows = await self.store.fetch(
            "journal_list", {"invocation_id": invocation_id, "limit": limit}
        )
        return [JournalEntry.from_row(r) for r in rows]

    async def resolve(self, key: str, result: Any, *, by: str) -> bool:
        """Records an operator's result for an effect whose outcome was unknown; safe twice.

        The operator checked the outside system by hand: the INTENT becomes
        DONE with ``result``, so the next attempt of the effect (a re-drive of
        its run) returns ``result`` and the outside system gets no act. One
        conditional statement: an entry a live attempt still acts on is left
        alone.

        Args:
            key: The effect's key.
            result: What the outside system did (JSON), as the act would have returned it.
            by: Who checked (kept on the entry as ``resolved_by``).

        Returns:
            True when this call recorded it; False when the entry was already
            DONE (nothing changed).

        Raises:
            NotFound: No entry for ``key``.
            Conflict: A live attempt holds the intent (nothing changed).
            InvalidArgument: ``result`` is not JSON.
        """
        try:
            encoded = json.dumps(result)
        except (TypeError, ValueError) as exc:
            raise errors.InvalidArgument(f"the result must be JSON: {exc}") from None
        row = await self.store.fetchrow(
            "journal_resolve", {"key": key, "result": encoded, "actor": by}
        )
        status = str(row["status"]) if row is not None else "missing"
        if status == "missing":
            raise errors.NotFound(f"no journal entry {key!r}")
        if status == "held":
            raise errors.Conflict(
                f"journal entry {key!r} is held by a live attempt: its own result comes first"
            )
        return status == "ok"

    async def execute(
        self,
        key: str,
        attempt: Attempt,
        act: Act,
        lookup: Lookup | None,
        *,
        wait: float = WAIT_SECONDS,
        fence: Fence | None = None,
        begin_with: Callable[[Mapping[str, Any]], Awaitable[Row | None]] | None = None,
    ) -> Any:
        """Performs the effect ``key`` at most once; returns the outside system's answer.

        Args:
            key: The business identity; passed to ``act`` and ``lookup`` as the
                idempotency key.
            attempt: Who performs it (run, epoch, call).
            act: Performs the effect, given the idempotency key.
            lookup: Asks the outside system for the effect by key: its answer,
                or None if it never happened. None when the system offers no
                lookup. Raising :class:`~durable_adk.errors.LookupUnavailable`
                means the same.
            wait: Seconds to wait for the result of another live attempt that
                holds the intent (a parallel call of the same key, another
                session, a run that died with its lease still running) before
                giving up with :class:`JournalBusy`. There is no wait when
                ``lookup`` finds the effect: its answer is returned at once.
            fence: The caller's local lease view, confirmed right before each
                outside call (``lookup``, ``act``), after the database's own
                fenced check; None to rely on the database alone.
            begin_with: Writes the first intent together with other writes of
                the caller in one unit (a run's buffered events, the call
                among them), given ``journal_begin``'s parameters; returns
                its verdict, or None when there was nothing to write with it
                (the intent is then written alone).

        Raises:
            OutcomeUnknown: An abandoned intent is recorded and its outcome
                cannot be learned.
            JournalBusy: A live attempt still holds the intent after ``wait``
                seconds and ``lookup`` did not find the effect (transient:
                retry later). It names the run and epoch that hold the key.
            durable_adk.errors.Fenced: The caller's run was taken over, ended,
                or its lease ran out (database clock); nothing was done.
            durable_adk.errors.FenceRefused: ``act`` raised it: the outside
                service refused the request as fenced off; nothing was done
                (see the module's docstring for the entry).
            durable_adk.errors.RunCancelled: ``fence``'s run was cancelled
                before the act began; nothing was done (an act already under
                way when the cancel came finishes and records its result).
            durable_adk.errors.InvalidArgument: The key is empty or too long,
                ``wait`` is negative, or the key belongs to another tool;
                nothing was written.
        """
        if not isinstance(key, str) or not key or len(key) > 512:
            raise errors.InvalidArgument(f"journal key must be 1..512 characters, got {key!r:.80}")
        if not wait >= 0:
            raise errors.InvalidArgument(f"wait must be >= 0 seconds, got {wait!r}")
        holder = uuid.uuid4().hex
        deadline = time.monotonic() + wait
        if fence is not None:
            await fence.confirm()  # a cancelled or fenced-off run writes no intent
        crash_point("journal.before_intent")
        while True:
            row = await self._begin(key, attempt, holder, begin_with)
            begin_with = None  # only the first intent goes with the caller's writes
            status = row["status"]
            if status == "done":
                return await self._result(key, row)
            if status in ("acquired", "taken"):
                if status == "acquired" and lookup is not None and self._after_failover():
                    status = "suspect"
                try:
                    # A cancel seen from here on lets the act and its DONE finish.
                    async with _busy(fence):
                        return await self._perform(
                            key, attempt, holder, act, lookup, how=status, fence=fence
                        )
                except _Lost:
                    continue  # someone took our hold over before we acted: see who
            if status == "held":
                # The owner may be acting right now, or may have died with its
                # lease still running: the outside system may already hold the
                # effect, and then its answer is ours at once.
                found = await self._ask_while_held(key, lookup, fence)
                if found is not None:
                    try:
                        return await self._record_found(key, attempt, found)
                    except _Lost:
                        continue  # the entry changed under us: see how it stands
                await self._wait(key, attempt, holder, deadline, row, wait, lookup)
            elif status == "retry":  # a concurrent writer changed the row first
                await asyncio.sleep(_FIRST_POLL)
            # Either way: decide again from the row as it now stands.

    def _after_failover(self) -> bool:
        """Whether the store recorded a failover less than a day ago (see the module)."""
        at = self.store.failed_over_at
        return at is not None and time.time() - at < LOOK_FIRST_AFTER_FAILOVER

    async def _begin(
        self,
        key: str,
        attempt: Attempt,
        holder: str,
        begin_with: Callable[[Mapping[str, Any]], Awaitable[Row | None]] | None = None,
    ) -> Row:
        params = {**self._who(key, attempt, holder), "hold": self.hold_seconds}
        row = await begin_with(params) if begin_with is not None else None
        if row is None:
            row = await self.store.fetchrow("journal_begin", params)
        assert row is not None
        status = row["status"]
        if status == "fenced":
            raise self._fenced(key, attempt)
        if status == "wrong_tool":
            raise errors.InvalidArgument(
                f"journal key {key!r} belongs to the tool {row['entry_tool']!r}, not "
                f"{attempt.tool_name!r}: give each tool's effects keys of their own"
            )
        return row

    async def _perform(
        self,
        key: str,
        attempt: Attempt,
        holder: str,
        act: Act,
        lookup: Lookup | None,
        *,
        how: str,
        fence: Fence | None,
    ) -> Any:
        """Acts on an intent we hold (``how``: acquired, taken or suspect, new after a
        failover): look up first unless it was acquired; record DONE."""
        keeper = None
        if attempt.run_id is None:
            keeper = asyncio.create_task(self._keep_holding(key, holder))
        try:
            if how != "acquired":
                if fence is not None and lookup is not None:
                    await fence.confirm()
                found = await self._look_up(key, attempt, lookup)
                if found is not None:
                    if how == "suspect":
                        why = "a commit lost at the failover; answered from its record"
                        logger.warning("%s: %r was done outside: %s", attempt.tool_name, key, why)
                    return await self._done(key, attempt, holder, found)
                # The lookup took time: check, in one statement, that we may
                # still act (our fence, and the intent still ours).
                mine = await self._watch(key, attempt, holder)
                if mine == "fenced":
                    raise self._fenced(key, attempt)
                if mine != "mine":
                    raise _Lost()
            if fence is not None:
                await fence.confirm()
            result = await act(key)
        except _Lost:
            raise
        except errors.FenceRefused:
            # The outside service refused the request as fenced off, before
            # acting: nothing happened. An intent we wrote ourselves goes (the
            # next caller acts, with no lookup and no "outcome unknown"); one
            # we took over stays released, since its first owner may have acted.
            if how == "taken":
                await self._release(key, holder)
            else:
                await self._forget(key, holder)
            raise
        except BaseException:
            # The effect may or may not have happened: keep the intent, but say
            # nobody is acting on it, so the next caller looks up (or parks)
            # instead of waiting for us.
            await self._release(key, holder)
            raise
        finally:
            if keeper is not None:
                keeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await keeper
        crash_point("journal.after_act")
        return await self._done(key, attempt, holder, result)

    async def _ask_while_held(self, key: str, lookup: Lookup | None, fence: Fence | None) -> Any:
        """Asks the outside system for an effect another attempt holds: its record, or None.

        A read only: the intent stays the owner's. A system that cannot be
        asked (no lookup, ``LookupUnavailable``) is no answer, so the caller
        waits for the owner as before; any other error propagates (nothing
        of ours to release).
        """
        if lookup is None:
            return None
        if fence is not None:
            await fence.confirm()
        try:
            return await lookup(key)
        except errors.LookupUnavailable:
            return None

    async def _record_found(self, key: str, attempt: Attempt, found: Any) -> Any:
        """Records DONE an effect the lookup found under another's intent; returns the answer.

        One statement, fenced by the caller's epoch (what it records has
        happened, like the holder's own DONE). An entry already DONE is left
        as it is, and its stored result is the answer: a second recorder
        changes nothing. The owner, if alive, finds the entry DONE when it
        records its own result, and answers with the stored one.
        """
        row = await self.store.fetchrow(
            "journal_found",
            {
                "key": key,
                "tool_name": attempt.tool_name,
                "run_id": attempt.run_id,
                "run_epoch": attempt.run_epoch,
                "function_call_id": attempt.function_call_id,
                "result": json.dumps(found, default=repr),
            },
        )
        status = str(row["status"]) if row else "missing"
        if status == "fenced":
            raise self._fenced(key, attempt)
        if status == "ok":
            return found
        if status == "done":
            assert row is not None
            return await self._result(key, row)
        # 'missing' (the intent was forgotten: its act was refused unacted),
        # 'retry' (another writer changed the row first) or 'wrong_tool'.
        raise _Lost()

    async def _wait(
        self,
        key: str,
        attempt: Attempt,
        holder: str,
        deadline: float,
        row: Row,
        wait: float,
        lookup: Lookup | None,
    ) -> None:
        """Waits while a live owner holds the intent; returns when the entry changed hands."""
        logger.debug(
            "journal: %s waits for %r, held by run %s epoch %s call %s",
            attempt.function_call_id or attempt.tool_name,
            key,
            row["owner_run_id"],
            row["owner_epoch"],
            row["owner_call_id"],
        )
        delay = _FIRST_POLL
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise await self._busy_error(key, row, wait, lookup)
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, _MAX_POLL)
            state = await self._watch(key, attempt, holder)
            if state == "fenced":
                raise self._fenced(key, attempt)
            if state != "held":
                return

    async def _busy_error(
        self, key: str, row: Row, wait: float, lookup: Lookup | None
    ) -> JournalBusy:
        """The error of a wait that ran out, naming who holds the key now."""
        entry = await self.get(key)  # the owner may have changed hands while we waited
        if entry is not None and entry.status is JournalStatus.INTENT and entry.holder:
            run_id, epoch, call = entry.run_id, entry.run_epoch, entry.function_call_id
        else:
            run_id, epoch, call = row["owner_run_id"], row["owner_epoch"], row["owner_call_id"]
        epoch = None if epoch is None else int(epoch)
        who = (
            f"run {run_id} at epoch {epoch} (call {call})"
            if run_id is not None
            else f"an attempt outside any run (call {call})"
        )
        asked = (
            "the outside system's lookup did not find the effect (or could not be asked)"
            if lookup is not None
            else "the tool has no lookup to ask"
        )
        return JournalBusy(
            f"journal entry {key!r} is held by a live attempt, {who}, which gave no result "
            f"within {wait:g}s, and {asked}: retry later",
            key=key,
            run_id=run_id,
            run_epoch=epoch,
            function_call_id=call,
        )

    async def _watch(self, key: str, attempt: Attempt, holder: str) -> str:
        row = await self.store.fetchrow(
            "journal_watch",
            {
                "key": key,
                "run_id": attempt.run_id,
                "run_epoch": attempt.run_epoch,
                "holder": holder,
            },
        )
        assert row is not None
        return str(row["status"])

    async def _look_up(self, key: str, attempt: Attempt, lookup: Lookup | None) -> Any:
        unknown = OutcomeUnknown(
            f"outcome unknown: {attempt.tool_name} recorded the intent {key!r} and may have "
            "acted, but the outside system offers no lookup by idempotency key"
        )
        if lookup is None:
            raise unknown
        try:
            return await lookup(key)
        except errors.LookupUnavailable as exc:
            raise unknown from exc

    async def _done(self, key: str, attempt: Attempt, holder: str, result: Any) -> Any:
        # The effect has happened by now: a result that is not JSON is stored in a
        # JSON-safe form (values that are not JSON become their repr) rather than
        # leaving an intent behind that would make the next attempt act again.
        encoded = json.dumps(result, default=repr)
        params = {**self._who(key, attempt, holder), "result": encoded}
        del params["tool_name"], params["invocation_id"]
        row = await self.store.fetchrow("journal_done", params)
        status = str(row["status"]) if row else "missing"
        if status == "ok":
            return result
        if status == "fenced":
            raise self._fenced(key, attempt)
        if status == "missing":
            raise errors.StoreError(f"journal entry {key!r} vanished between intent and done")
        # 'done': another caller's lookup found the effect (our own act's, or
        # the one it deduplicated) and recorded it first: its record is the
        # answer, as for every caller of the key. 'lost': another attempt took
        # our hold over (only possible outside a run, when our renewals
        # failed) and may have finished.
        entry = await self.get(key)
        if status == "done":
            logger.debug(
                "journal entry %r was recorded by a lookup while %s acted", key, attempt.tool_name
            )
        else:
            logger.warning("journal entry %r was taken over while %s acted", key, attempt.tool_name)
        if entry is not None and entry.status is JournalStatus.DONE:
            return entry.result
        return result

    async def _release(self, key: str, holder: str) -> None:
        try:
            await self.store.execute("journal_release", {"key": key, "holder": holder})
        except Exception:  # the original error matters more; the run's epoch still decides
            logger.warning("could not release the journal intent %r", key, exc_info=True)

    async def _forget(self, key: str, holder: str) -> None:
        try:
            await self.store.execute("journal_forget", {"key": key, "holder": holder})
        except Exception:  # left as a released intent: the next caller looks up
            logger.warning("could not forget the refused journal intent %r", key, exc_info=True)
            await self._release(key, holder)

    async def _keep_holding(self, key: str, holder: str) -> None:
        while True:
            await asyncio.sleep(self.hold_seconds / 3)
            try:
                await self.store.execute(
                    "journal_hold", {"key": key, "holder": holder, "hold": self.hold_seconds}
                )
            except errors.StoreError:
                logger.warning("could not renew the hold on journal intent %r", key, exc_info=True)

    @staticmethod
    def _who(key: str, attempt: Attempt, holder: str) -> dict[str, Any]:
        return {
            "key": key,
            "tool_name": attempt.tool_name,
            "run_id": attempt.run_id,
            "run_epoch": attempt.run_epoch,
            "invocation_id": attempt.invocation_id,
            "function_call_id": attempt.function_call_id,
            "holder": holder,
            "key_template": attempt.key_template,
        }

    @staticmethod
    def _fenced(key: str, attempt: Attempt) -> errors.Fenced:
        return errors.Fenced(
            f"journal refused {attempt.tool_name} for {key!r}: run {attempt.run_id} at epoch "
            f"{attempt.run_epoch} no longer holds a live lease (taken over, ended or expired)"
        )
