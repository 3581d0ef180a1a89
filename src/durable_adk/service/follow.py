"""Following a session's events from a sequence number: reconnect on any worker.

:func:`follow` polls the store, not a worker's memory, so a client that lost
its connection can come back to any worker with the last sequence number it
saw and miss nothing, whichever worker is driving the run (or recovering it
after a crash). Events come in log order, each exactly once per stream.

The stream ends when the run being followed (or, without one, every run of
the session) has reached an end status and its last events were delivered:
the status is read before the events, and a run's events are all appended
before its row is finished, so the final read misses nothing. A draining
worker ends its streams early with ``reason="draining"`` and the sequence
number to reconnect from.

:func:`sse` renders the items as Server-Sent Events: ``id`` is the sequence
number, so a browser's ``Last-Event-ID`` resumes the stream.

Token streaming: with a live subscription (:mod:`durable_adk.adk.eventlog.live`) the
stream also carries the partial events of the session's drives in this
worker, marked ``partial`` and without a sequence number; they are never
stored, so a reconnect (or a follower on another worker) gets the stored
events only, the final text among them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from durable_adk.adk.eventlog.live import LiveItem, Stored, Subscription
from durable_adk.service.ops import Operations, SeqEvent, SessionKey, is_settled

BATCH = 500
"""Most events read per poll."""


@dataclass(frozen=True, slots=True)
class KeepAlive:
    """Nothing new for a while (an SSE comment keeps proxies from closing the stream)."""


@dataclass(frozen=True, slots=True)
class End:
    """The stream is over.

    Attributes:
        reason: ``"settled"`` (the runs reached an end status), or
            ``"draining"`` (this worker is shutting down: reconnect elsewhere).
        last_seq: The last sequence number delivered: reconnect from it.
        statuses: The followed runs' statuses, by run id.
    """

    reason: str
    last_seq: int
    statuses: dict[str, str]


@dataclass(frozen=True, slots=True)
class Partial:
    """A partial (streamed, never stored) event of a drive in this worker.

    Attributes:
        data: The ADK event as JSON text (``partial`` true); it has no sequence number.
    """

    data: str


FollowItem = SeqEvent | Partial | KeepAlive | End


async def follow(
    ops: Operations,
    key: SessionKey,
    *,
    after: int,
    run_id: str | None = None,
    poll: float = 0.2,
    keepalive: float = 15.0,
    stop: asyncio.Event | None = None,
    live: Subscription | None = None,
) -> AsyncIterator[FollowItem]:
    """Yields a session's events after ``after``, live, until its runs settle.

    Args:
        ops: Operations over the store.
        key: The session.
        after: Deliver events with a greater sequence number.
        run_id: Follow this run; None follows every run of the session.
        poll: Seconds between reads when nothing is new.
        keepalive: Seconds of silence before a :class:`KeepAlive`.
        stop: Set when the worker drains: the stream ends with ``draining``.
        live: The session's live events in this worker (token streaming):
            partial events come as :class:`Partial`, in the drive's order
            among the stored events, and a stored event of this worker wakes
            the stream at once instead of at the next poll.
    """
    cursor = _Cursor(ops, key, after, track_ids=live is not None)
    quiet_since = time.monotonic()
    while True:
        runs = [await ops.get_run(run_id)] if run_id else await ops.session_runs(key)
        settled = is_settled(runs)
        sent = 0
        if live is not None:
            async for item in cursor.live_items(live.take()):
                sent += 1
                yield item
        batch = await cursor.read()
        for item in batch:
            yield item
        if sent or batch:
            quiet_since = time.monotonic()
        if len(batch) == BATCH:
            continue  # more to read before deciding anything
        statuses = {run.run_id: run.status.value for run in runs}
        if settled:
            yield End("settled", cursor.last, statuses)
            return
        if stop is not None and stop.is_set():
            yield End("draining", cursor.last, statuses)
            return
        if time.monotonic() - quiet_since >= keepalive:
            quiet_since = time.monotonic()
            yield KeepAlive()
        if live is not None:
            await live.wait(poll)  # a published event ends the wait early
        else:
            await _pause(poll, stop)


class _Cursor:
    """Where a stream stands in a session's log, and what it has sent."""

    def __init__(self, ops: Operations, key: SessionKey, after: int, *, track_ids: bool) -> None:
        self.ops = ops
        self.key = key
        self.track_ids = track_ids  # only a live stream needs them (partials share the id)
        self.last = after
        self.sent_ids: set[str] = set()  # stored events sent: a late partial of one is dropped

    async def read(self, until: int | None = None) -> list[SeqEvent]:
        """The next stored events after the last one sent (up to ``until``), now counted sent."""
        wanted = BATCH if until is None else min(BATCH, until - self.last)
        if wanted <= 0:
            return []
        batch = await self.ops.events_after(self.key, self.last, limit=wanted)
        for item in batch:
            self._sent(item.seq, item.as_dict().get("id") if self.track_ids else None)
        return list(batch)

    async def live_items(self, items: list[LiveItem]) -> AsyncIterator[SeqEvent | Partial]:
        """This worker's stored and partial events, in the drive's order.

        A stored event already sent is skipped; one past a gap (events this
        worker did not store, or dropped for a slow follower) first has the
        gap read from the log.
        """
        for item in items:
            if isinstance(item, Stored):
                if item.seq <= self.last:
                    continue
                while self.last < item.seq - 1:
                    gap = await self.read(until=item.seq - 1)
                    for missed in gap:
                        yield missed
                    if not gap:
                        break  # not in the log (cannot be: appended before published)
                self._sent(item.seq, item.event_id)
                yield SeqEvent(item.seq, item.data)
            elif item.id not in self.sent_ids:
                yield Partial(item.model_dump_json(exclude_none=True))

    def _sent(self, seq: int, event_id: object) -> None:
        self.last = seq
        if event_id is not None:
            self.sent_ids.add(str(event_id))


async def _pause(seconds: float, stop: asyncio.Event | None) -> None:
    if stop is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


def sse(item: FollowItem) -> str:
    """One item as a Server-Sent Events message.

    Events are ``event: event`` with ``id`` = sequence number and
    ``data`` = ``{"seq": n, "event": {...}}``; partial (streamed) events are
    ``event: partial`` with no ``id`` and ``data`` = ``{"partial": true,
    "event": {...}}``; the end is ``event: end``.
    """
    if isinstance(item, SeqEvent):
        # The stored JSON is compact (no raw newlines), so it is one data line as it is.
        return f'id: {item.seq}\nevent: event\ndata: {{"seq":{item.seq},"event":{item.data}}}\n\n'
    if isinstance(item, Partial):
        # No id: a reconnect resumes from the last stored event, never from a partial.
        return f'event: partial\ndata: {{"partial":true,"event":{item.data}}}\n\n'
    if isinstance(item, KeepAlive):
        return ": keep-alive\n\n"
    body = json.dumps(
        {"reason": item.reason, "last_seq": item.last_seq, "runs": item.statuses},
        separators=(",", ":"),
    )
    return f"id: {item.last_seq}\nevent: end\ndata: {body}\n\n"
