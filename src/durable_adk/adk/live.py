"""Live events of the drives in this process, for followers of a session (token streaming).

Partial events (``event.partial``: the chunks a model streams with
``StreamingMode.SSE``) are never stored: ADK does not append them and
:class:`~durable_adk.adk.session_service.DurableSessionService` refuses to.
The caller of ``run_async`` gets them from the drive itself; a follower of the
session's event stream (the worker's HTTP API) gets them from here.

What it guarantees:

* :meth:`LiveEvents.publish` hands every event a drive of this process hands
  its caller to each :class:`Subscription` of that session, in drive order,
  without waiting: a follower never slows a drive down. A subscription holds
  at most ``limit`` events; past that its oldest partials are dropped (they
  are previews: the stored final event carries the whole text) and
  :attr:`Subscription.dropped` counts them.
* A subscription learns of a stored (non-partial) event only as a signal
  (:attr:`Subscription.stored_since_read`): the follower then reads the store,
  where that event already is (ADK appends before it yields), so stored events
  keep coming from the log with their sequence numbers, and a partial that
  follows a stored event in the drive is delivered after it.
* Only drives in this process are seen: a follower connected to another
  worker, or reconnecting later, gets the stored events only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterator

from google.adk.events.event import Event

SessionKey = tuple[str, str, str]
"""(app name, user id, session id)."""

DEFAULT_LIMIT = 1000
"""Most partial events a subscription holds for a slow follower."""


class Subscription:
    """One follower's view of a session's live events (see :meth:`LiveEvents.subscribe`)."""

    def __init__(self, key: SessionKey, limit: int) -> None:
        self.key = key
        self.limit = limit
        self.dropped = 0
        self.stored_since_read = False
        self._items: deque[Event | None] = deque()
        self._ready = asyncio.Event()

    def _put(self, event: Event) -> None:
        if not event.partial:
            # A marker, in order: partials after it wait until the store was read.
            self._items.append(None)
            self.stored_since_read = True
        else:
            partials = sum(1 for item in self._items if item is not None)
            if partials >= self.limit:
                self._drop_oldest_partial()
            self._items.append(event)
        self._ready.set()

    def _drop_oldest_partial(self) -> None:
        for index, item in enumerate(self._items):
            if item is not None:
                del self._items[index]
                self.dropped += 1
                return

    def take_partials(self) -> list[Event]:
        """The partials to deliver now: up to the first stored-event marker, if any.

        After a marker the follower must read the store before it takes more
        (the marker is consumed here, and :attr:`stored_since_read` is set).
        """
        taken: list[Event] = []
        while self._items:
            item = self._items.popleft()
            if item is None:
                self.stored_since_read = True
                break
            taken.append(item)
        if not self._items:
            self._ready.clear()
        return taken

    def mark_read(self) -> None:
        """The follower has just read the store: stored events so far are delivered."""
        self.stored_since_read = False

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
    """Subscriptions to the live events of sessions driven in this process."""

    def __init__(self, *, limit: int = DEFAULT_LIMIT) -> None:
        """Creates the hub.

        Args:
            limit: Most partial events one subscription holds.
        """
        self.limit = limit
        self._subscribers: dict[SessionKey, set[Subscription]] = {}

    def publish(self, key: SessionKey, event: Event) -> None:
        """Hands ``event`` of a drive of session ``key`` to its subscribers (never waits)."""
        for subscription in self._subscribers.get(key, ()):
            subscription._put(event)

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
