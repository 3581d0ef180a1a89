"""After a failover the journal asks the outside system before a new act (issue 46).

An asynchronous standby loses the commits it had not received when it is
promoted: an intent whose act had happened, an answer whose run had acted. The
new primary then has no entry for an effect that was done, and the next caller
(a re-driven run, a person answering again) would act a second time. Once the
store has recorded a second history of the database (``db_timelines``: a
PostgreSQL timeline, recorded at open and when a probe finds a new one), a new
intent of a tool with a lookup asks first, for a day.

Histories are recorded here by hand (both backends; ``bench/failover_async.py``
and ``tests/chaos/test_failover.py`` promote a real standby).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from durable_adk.effect_tables import journal as journal_module
from durable_adk.effect_tables.journal import Attempt, Journal, JournalStatus
from durable_adk.store import Store, open_store

ATTEMPT = Attempt(tool_name="send_invoice", invocation_id="e-1", function_call_id="c-1")


class Outside:
    """An outside system that dedupes nothing: it counts every act and every lookup."""

    def __init__(self, done: dict[str, dict[str, Any]] | None = None) -> None:
        self.effects = dict(done or {})
        self.acts = 0
        self.lookups = 0

    async def act(self, key: str) -> dict[str, Any]:
        self.acts += 1
        self.effects[key] = {"id": f"inv-{self.acts}", "key": key}
        return self.effects[key]

    async def lookup(self, key: str) -> dict[str, Any] | None:
        self.lookups += 1
        return self.effects.get(key)


def history_of(store: Store) -> str:
    """The database's history as the store found it at open (PostgreSQL: its timeline;
    SQLite has none, so a made-up one)."""
    return store.health.identity or "timeline 0000000A"


async def fail_over(store: Store) -> None:
    """The database as two histories: the one before the promotion, and a new one."""
    await store.note_history(history_of(store))
    await store.note_history("timeline 0000000B")
    assert store.failed_over_at is not None


async def test_no_failover_recorded_a_new_intent_acts_without_asking(store: Store) -> None:
    await store.note_history(history_of(store))  # one history: no failover
    assert store.failed_over_at is None
    outside = Outside()
    await Journal(store).execute("send-invoice:INV-1", ATTEMPT, outside.act, outside.lookup)
    assert (outside.acts, outside.lookups) == (1, 0)


async def test_after_a_failover_an_effect_whose_intent_was_lost_is_not_done_again(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    await fail_over(store)
    done = {"send-invoice:INV-2": {"id": "inv-before", "key": "send-invoice:INV-2"}}
    outside = Outside(done)
    journal = Journal(store)
    with caplog.at_level(logging.WARNING, logger="durable_adk.journal"):
        result = await journal.execute("send-invoice:INV-2", ATTEMPT, outside.act, outside.lookup)
    assert result == done["send-invoice:INV-2"]
    assert (outside.acts, outside.lookups) == (0, 1)
    entry = await journal.get("send-invoice:INV-2")
    assert entry is not None and entry.status is JournalStatus.DONE
    assert any("lost at the failover" in r.getMessage() for r in caplog.records)
    # The entry is DONE now: the next caller takes its stored result, asking nothing.
    again = await journal.execute("send-invoice:INV-2", ATTEMPT, outside.act, outside.lookup)
    assert again == result and (outside.acts, outside.lookups) == (0, 1)


async def test_after_a_failover_an_effect_never_done_is_done_once(store: Store) -> None:
    await fail_over(store)
    outside = Outside()
    result = await Journal(store).execute(
        "send-invoice:INV-3", ATTEMPT, outside.act, outside.lookup
    )
    assert result == {"id": "inv-1", "key": "send-invoice:INV-3"}
    assert (outside.acts, outside.lookups) == (1, 1)


async def test_after_a_failover_a_tool_without_lookup_acts_as_before(store: Store) -> None:
    await fail_over(store)
    outside = Outside()
    await Journal(store).execute("send-invoice:INV-4", ATTEMPT, outside.act, None)
    assert outside.acts == 1


async def test_a_failover_older_than_the_window_is_no_reason_to_ask(store: Store) -> None:
    await fail_over(store)
    store.failed_over_at = time.time() - journal_module.LOOK_FIRST_AFTER_FAILOVER - 1
    outside = Outside()
    await Journal(store).execute("send-invoice:INV-5", ATTEMPT, outside.act, outside.lookup)
    assert (outside.acts, outside.lookups) == (1, 0)


async def test_a_new_history_found_by_a_probe_is_recorded(store: Store) -> None:
    store.health.identity = history_of(store)
    await store.note_history(history_of(store))
    store.health.seen("timeline 0000000B")  # a reconnect reached a promoted standby
    for _ in range(200):
        if store.failed_over_at is not None:
            break
        await asyncio.sleep(0.01)
    assert store.failed_over_at is not None
    assert store.health.failovers == 1


async def test_a_history_seen_twice_is_one_row(store: Store) -> None:
    for _ in range(3):
        await store.note_history(history_of(store))
    assert store.failed_over_at is None


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
async def test_a_worker_started_after_the_failover_knows_of_it(
    store: Store, store_url: str
) -> None:
    # The fixture's store recorded the server's own timeline at open; an
    # older history beside it is a failover that happened before this worker.
    await store.note_history("timeline 00000000")
    async with open_store(store_url) as fresh:
        assert fresh.failed_over_at is not None
        outside = Outside({"charge:ORD-9": {"id": "ch-1"}})
        await Journal(fresh).execute("charge:ORD-9", ATTEMPT, outside.act, outside.lookup)
        assert (outside.acts, outside.lookups) == (0, 1)
