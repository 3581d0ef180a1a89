"""Live events of a session in this process, for its followers (token streaming).

Partial events (``event.partial``: the chunks a model streams with
``StreamingMode.SSE``) are never stored: ADK does not append them and
:class:`~durable_adk.adk.services.sessions.DurableSessionService` refuses to.
The caller of ``run_async`` gets them from the drive itself; a follower of the
session's event stream (the worker's HTTP API) gets them from here.

What it guarantees:

* One :class:`LiveEvents` per session service. The service publishes each
  event it stored, with its sequence number, right after the append;
  :class:`~durable_adk.adk.runner.DurableRunner` publishes each partial event
  a drive hands its caller. Both happen in the drive's own order, so a
  :class:`Subscription` holds a session's stored and partial events exactly
  as the drive made them; publishing never waits for a follower.
* A subscription holds at most ``limit`` items; past that its oldest item is
  dropped: a dropped stored event is read back from the log (the follower
  sees the gap in the sequence numbers), a dropped partial is gone
  (:attr:`Subscription.dropped` counts them; the stored final event carries
  the whole text).
* Only this process's appends and drives are seen: a follower on another
  worker, or reconnecting later, gets the stored events only (from the log).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from google.adk.events.event import Event

SessionKey = tuple[str, str, str]
"""(app name, user id, session id)."""

DEFAULT_LIMIT = 10_000
"""Most items a subscription holds for a slow follower."""


@dataclass(frozen=True, slots=True)
class Stored:
    """An event the session service has just stored.

    Attributes:
        seq: Its sequence number in the session's log.
        data: The event as stored (JSON text).
        event_id: The event's id.
    """

    seq: int
    data: str
    event_id: str


LiveItem = Stored | Event
"""A stored event, or a partial ADK event."""


class Subscription:
    """One follower's queue of a session's live events (see :meth:`LiveEvents.subscribe`)."""

    def __init__(self, key: SessionKey, limit: int) -> None:
        self.key = key
        self.limit = limit
        self.dropped = 0
        self._items: deque[LiveItem] = deque()
        self._ready = asyncio.Event()

    def _put(self, item: LiveItem) -> None:
        if len(self._items) >= self.limit:
            oldest = self._items.popleft()
            if isinstance(oldest, Event):
                self.dropped += 1
        self._items.append(item)
        self._ready.set()

    def take(self) -> list[LiveItem]:
        """Everything published since the last take, in order."""
        taken = list(self._items)
        self._items.clear()
        self._ready.clear()
        return taken

    @property
    def pending(self) -> bool:
        """Whether anything waits to be taken."""
        return bool(self._items)

    async def wait(self, seconds: float) -> None:
        """Returns when something was published, or after ``seconds``."""
        if self._items:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), seconds)


class LiveEvents:
    """Subscriptions to the live events of sessions in this process."""

    def __init__(self, *, limit: int = DEFAULT_LIMIT) -> None:
        """Creates the hub.

        Args:
            limit: Most items one subscription holds.
        """
        self.limit = limit
        self._subscribers: dict[SessionKey, set[Subscription]] = {}

    def publish(self, key: SessionKey, item: LiveItem) -> None:
        """Hands ``item`` of session ``key`` to its subscribers (never waits)."""
        for subscription in self._subscribers.get(key, ()):
            subscription._put(item)

    def watched(self, key: SessionKey) -> bool:
        """Whether session ``key`` has a follower (publishing is free otherwise)."""
        return key in self._subscribers

    @contextlib.contextmanager
    def subscribe(self, key: SessionKey) -> Iterator[Subscription]:
        """Follows session ``key``'s live events for the duration of the block."""
        subscription = Subscription(key, self.limit)
        self._subscribers.setdefault(key, set()).add(subscription)
        try:
            yield subscription
        finally:
            subscribers = self._subscribers.get(key)
            if subscribers is not None:
                subscribers.discard(subscription)
                if not subscribers:
                    del self._subscribers[key]
