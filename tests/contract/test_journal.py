"""The journal protocol on both backends (DESIGN.md 3.3).

The outside system here is a recorder of calls; the crash tests use real
services in other processes.
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_adk import errors
from durable_adk.effect_tables.journal import Attempt, Journal, JournalStatus, OutcomeUnknown
from durable_adk.store import Store
from durable_adk.tables.ledger import RunLedger


class Outside:
    """Records effects by idempotency key, as a well-behaved outside system."""

    def __init__(self) -> None:
        self.effects: dict[str, dict[str, Any]] = {}
        self.acts = 0

    async def act(self, key: str) -> dict[str, Any]:
        self.acts += 1
        return self.effects.setdefault(key, {"id": f"inv-{len(self.effects) + 1}", "key": key})

    async def lookup(self, key: str) -> dict[str, Any] | None:
        return self.effects.get(key)


ATTEMPT = Attempt(tool_name="send_invoice", invocation_id="e-1", function_call_id="c-1")


async def leave_dead_intent(store: Store, key: str, tool_name: str = "send_invoice") -> None:
    """An intent outside any run whose holder died: its hold has already run out."""
    row = await store.fetchrow(
        "journal_begin",
        {
            "key": key,
            "tool_name": tool_name,
            "run_id": None,
            "run_epoch": None,
            "invocation_id": "e",
            "function_call_id": "c",
            "holder": "a-holder-that-died",
            "hold": -1.0,
            "key_template": None,
        },
    )
    assert row is not None and row["status"] == "acquired"


async def test_first_attempt_writes_intent_acts_and_records_done(store: Store) -> None:
    journal, outside = Journal(store), Outside()
    result = await journal.execute("send-invoice:INV-1", ATTEMPT, outside.act, outside.lookup)
    assert result == {"id": "inv-1", "key": "send-invoice:INV-1"}
    entry = await journal.get("send-invoice:INV-1")
    assert entry is not None and entry.status is JournalStatus.DONE and entry.result == result
    assert entry.invocation_id == "e-1" and entry.function_call_id == "c-1"


async def test_done_entry_returns_the_stored_result_without_acting(store: Store) -> None:
    journal, outside = Journal(store), Outside()
    first = await journal.execute("k", ATTEMPT, outside.act, outside.lookup)
    again = await journal.execute(
        "k", Attempt(tool_name="send_invoice", function_call_id="a-new-call-id"), outside.act, None
    )
    assert again == first and outside.acts == 1


async def test_intent_found_by_lookup_is_recorded_not_repeated(store: Store) -> None:
    journal, outside = Journal(store), Outside()
    await leave_dead_intent(store, "k")
    await outside.act("k")  # the effect happened, then the process died
    result = await journal.execute("k", ATTEMPT, outside.act, outside.lookup)
    assert outside.acts == 1 and result == outside.effects["k"]
    entry = await journal.get("k")
    assert entry is not None and entry.status is JournalStatus.DONE


async def test_intent_not_found_by_lookup_acts(store: Store) -> None:
    journal, outside = Journal(store), Outside()
    await leave_dead_intent(store, "k")
    await journal.execute("k", ATTEMPT, outside.act, outside.lookup)
    assert outside.acts == 1


async def test_intent_without_lookup_is_outcome_unknown(store: Store) -> None:
    journal, outside = Journal(store), Outside()
    await leave_dead_intent(store, "k")

    async def no_lookup(key: str) -> None:
        raise errors.LookupUnavailable()

    for lookup in (None, no_lookup):
        with pytest.raises(OutcomeUnknown, match="outcome unknown"):
            await journal.execute("k", ATTEMPT, outside.act, lookup)
    assert outside.acts == 0
    entry = await journal.get("k")
    assert entry is not None and entry.status is JournalStatus.INTENT


async def test_writes_of_a_taken_over_run_are_fenced(store: Store) -> None:
    ledger, journal, outside = RunLedger(store), Journal(store), Outside()
    run = await ledger.submit(app_name="a", user_id="u", session_id="s", request={}, owner="old")
    old = await ledger.claim_queued(run.run_id, "old")
    assert old is not None
    await ledger.backdate(run.run_id, 3600)
    (new,) = await ledger.claim_expired("new")
    stale = Attempt(tool_name="t", run_id=run.run_id, run_epoch=old.epoch)
    with pytest.raises(errors.Fenced):
        await journal.execute("k", stale, outside.act, outside.lookup)
    assert outside.acts == 0 and await journal.get("k") is None
    fresh = Attempt(tool_name="t", run_id=run.run_id, run_epoch=new.epoch)
    await journal.execute("k", fresh, outside.act, outside.lookup)
    assert outside.acts == 1


async def test_bad_keys_and_results_are_refused(store: Store) -> None:
    journal, outside = Journal(store), Outside()
    for key in ("", "x" * 600):
        with pytest.raises(errors.InvalidArgument):
            await journal.execute(key, ATTEMPT, outside.act, outside.lookup)

    async def weird(key: str) -> object:
        outside.acts += 1
        return {"when": object()}

    # The effect happened: the entry is DONE (with a JSON-safe form), not left an intent.
    await journal.execute("k2", ATTEMPT, weird, None)
    entry = await journal.get("k2")
    assert entry is not None and entry.status is JournalStatus.DONE
    assert entry.result["when"].startswith("<object object")
    assert outside.acts == 1
