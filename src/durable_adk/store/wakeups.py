"""In-process wake-ups for runs waiting for their session's turn.

What it guarantees:

* A waiter takes a ticket (:meth:`Wakeups.ticket`) *before* it looks at the
  database, and :meth:`Wakeups.notify` sets every ticket of the session taken
  so far: a run that ends between the waiter's look and its wait is not
  missed, the wait returns at once.
* Nothing here is durable or shared between processes. Across processes the
  waiter's own back-off polling is what must suffice (PostgreSQL adds
  LISTEN/NOTIFY on top, see :mod:`durable_adk.store.postgres`); a wake-up only
  shortens the wait, and a spurious one costs one claim attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator


def session_key(app_name: str, user_id: str, session_id: str) -> str:
    """The key (and PostgreSQL NOTIFY payload) naming one session's queue."""
    return json.dumps([app_name, user_id, session_id], separators=(",", ":"))


class Wakeups:
    """Tickets by session key; one object per store, shared by its runners."""

    def __init__(self) -> None:
        self._waiting: dict[str, set[asyncio.Event]] = {}

    @contextlib.contextmanager
    def ticket(self, key: str) -> Iterator[asyncio.Event]:
        """A fresh event set by the next :meth:`notify` of ``key`` (or by the holder)."""
        event = asyncio.Event()
        waiting = self._waiting.setdefault(key, set())
        waiting.add(event)
        try:
            yield event
        finally:
            waiting.discard(event)
            if not waiting and self._waiting.get(key) is waiting:
                del self._waiting[key]

    def notify(self, key: str) -> None:
        """Wakes every ticket of ``key`` taken so far."""
        for event in self._waiting.get(key, ()):
            event.set()

    def waiting(self) -> int:
        """How many tickets are out (for tests and gauges)."""
        return sum(len(events) for events in self._waiting.values())
