"""The side-effect journal: no outside effect twice, and no guessing.

An outside effect (an invoice, an email, a charge) is journaled under its
business identity (``send-invoice:INV-77``), never under the function call id:
a re-driven model makes a new call id for the same intent. The protocol of
:meth:`Journal.execute`:

* a DONE entry: return the stored result, do nothing;
* an INTENT entry (a previous attempt died between acting and recording):
  ask the outside system by idempotency key (``lookup``); found: record DONE
  and return it; not found: act;
* no entry: write INTENT, act with the key passed downstream, write DONE;
* an INTENT entry and no way to look up: raise :class:`OutcomeUnknown`, which
  parks the run for a person. Never a guess.

Writes made for a run carry the run's fencing epoch: once the run was taken
over, the journal refuses them (:class:`~durable_adk.errors.Fenced`). This
module has no ADK import.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from durable_adk import errors
from durable_adk.store.base import Row, Store
from durable_adk.testing.crash import crash_point

Act = Callable[[str], Awaitable[Any]]
Lookup = Callable[[str], Awaitable[Any]]


class OutcomeUnknown(errors.DurableError):
    """An outside effect may have happened and nothing can tell: the run needs a person."""


class JournalStatus(StrEnum):
    """Where an effect stands."""

    INTENT = "INTENT"
    DONE = "DONE"


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One journaled effect.

    Attributes:
        key: The effect's business identity, also its idempotency key downstream.
        tool_name: The tool that performs it.
        status: INTENT (about to act, or died acting) or DONE.
        result: The outside system's answer (DONE only).
        run_id: The run that last wrote the entry.
        run_epoch: That run's fencing epoch at the time.
        invocation_id: The ADK invocation that first intended the effect.
        function_call_id: The call that last wrote the entry.
        created_at: When the intent was written (database clock).
        updated_at: When the entry last changed.
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
    """

    tool_name: str
    run_id: str | None = None
    run_epoch: int | None = None
    invocation_id: str | None = None
    function_call_id: str | None = None


class Journal:
    """Side effects keyed by business identity, over a store."""

    def __init__(self, store: Store) -> None:
        """Creates the journal over an open store."""
        self.store = store

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

    async def execute(self, key: str, attempt: Attempt, act: Act, lookup: Lookup | None) -> Any:
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

        Raises:
            OutcomeUnknown: An intent is recorded and the outcome cannot be learned.
            durable_adk.errors.Fenced: The run was taken over.
            durable_adk.errors.InvalidArgument: The key is empty or too long, or
                the result is not JSON.
        """
        if not isinstance(key, str) or not key or len(key) > 512:
            raise errors.InvalidArgument(f"journal key must be 1..512 characters, got {key!r:.80}")
        entry = await self.get(key)
        if entry is not None and entry.status is JournalStatus.DONE:
            return entry.result
        if entry is None:
            crash_point("journal.before_intent")
            status = await self._write("journal_intent", key, attempt, result=None)
            if status == "exists":  # a concurrent attempt wrote it first: treat as an intent
                return await self.execute(key, attempt, act, lookup)
        else:
            found = await self._look_up(key, attempt, lookup)
            if found is not None:
                await self._write("journal_done", key, attempt, result=found)
                return found
        result = await act(key)
        crash_point("journal.after_act")
        await self._write("journal_done", key, attempt, result=result)
        return result

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

    async def _write(self, query: str, key: str, attempt: Attempt, *, result: Any) -> str:
        # The effect has happened by now: a result that is not JSON is stored in a
        # JSON-safe form (values that are not JSON become their repr) rather than
        # leaving an intent behind that would make the next attempt act again.
        encoded = None if result is None else json.dumps(result, default=repr)
        params: dict[str, Any] = {
            "key": key,
            "tool_name": attempt.tool_name,
            "run_id": attempt.run_id,
            "run_epoch": attempt.run_epoch,
            "invocation_id": attempt.invocation_id,
            "function_call_id": attempt.function_call_id,
        }
        if query == "journal_done":
            params = {k: v for k, v in params.items() if k not in ("tool_name", "invocation_id")}
            params["result"] = encoded
        row = await self.store.fetchrow(query, params)
        status = str(row["status"]) if row else "missing"
        if status == "fenced":
            raise errors.Fenced(
                f"journal write for {key!r} refused: run {attempt.run_id} was taken over"
            )
        if status == "missing":
            raise errors.StoreError(f"journal entry {key!r} vanished between intent and done")
        return status
