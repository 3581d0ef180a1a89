"""Facts about stored ADK events that the session service and recovery share."""

from __future__ import annotations

from collections.abc import Sequence

from google.adk.events.event import Event

from durable_adk.adk.eventlog.unreadable import is_unreadable


def is_checkpoint_only(event: Event) -> bool:
    """True for an event that only records agent progress (no content, no calls).

    Resumable ADK apps write such events (``agent_state`` / ``end_of_agent``)
    to mark where each agent stands; they say nothing the model said.
    """
    has_content = bool(event.content and event.content.parts)
    return not has_content and (
        event.actions.agent_state is not None or bool(event.actions.end_of_agent)
    )


def open_invocation_id(events: Sequence[Event]) -> str | None:
    """The invocation id of the newest invocation if it may still be running.

    An invocation counts as finished only when its last event is a final text
    answer from an agent (not the user), with no function call or long-running
    call pending. Anything else (a user message awaiting the model, a call
    awaiting its response, a pause on a long-running call, a checkpoint) keeps
    it open, so its events are returned whole by partial reads.
    """
    if not events:
        return None
    last = events[-1]
    if not last.invocation_id:
        return None
    finished = (
        last.author != "user"
        and not last.partial
        and not last.long_running_tool_ids
        and not last.get_function_calls()
        and not last.get_function_responses()
        and not is_checkpoint_only(last)
        and bool(last.content and last.content.parts)
    )
    return None if finished else last.invocation_id


class LogIndex:
    """What a session's log holds, kept up to date as events are appended (O(1) each).

    Built over a list of events that only grows at its end (a session
    service's cached log): :meth:`catch_up` indexes the events appended since
    the last call. It answers whether the log holds an event id, and where
    the part of the log that decides an invocation begins
    (:meth:`tail_start`), without walking the log.

    Attributes:
        ids: Every event id of the indexed events.
        first: Each invocation id's first event, by its place in the log.
        rewinds: ``(place, invocation id)`` of each rewind event, in log order.
        unreadable: The places of the stand-ins of unreadable rows
            (:func:`durable_adk.adk.eventlog.unreadable.is_unreadable`), in log order.
        size: How many events are indexed (the first ``size`` of the log).
    """

    __slots__ = ("first", "ids", "rewinds", "size", "unreadable")

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.first: dict[str, int] = {}
        self.rewinds: list[tuple[int, str]] = []
        self.unreadable: list[int] = []
        self.size = 0

    def catch_up(self, events: Sequence[Event]) -> LogIndex:
        """Indexes ``events[size:]`` (the log's events appended since); returns self."""
        if len(events) > self.size:
            for event in events[self.size :]:
                self.add(event)
        return self

    def add(self, event: Event) -> None:
        """Indexes ``event`` as the log's next one."""
        place = self.size
        self.ids.add(event.id)
        invocation = event.invocation_id
        if invocation and invocation not in self.first:
            self.first[invocation] = place
        target = event.actions.rewind_before_invocation_id
        if target:
            self.rewinds.append((place, target))
        if is_unreadable(event):
            self.unreadable.append(place)
        self.size = place + 1

    def tail_start(self, invocation_id: str, later: Sequence[Event] = ()) -> int:
        """Where the part of the log that decides ``invocation_id`` begins.

        The log is the indexed events followed by ``later`` (events not
        indexed: a batch not written yet). Which events of the invocation
        survive the rewinds (:func:`durable_adk.adk.eventlog.classify.live_events`)
        depends only on the log from its first event on, and on where each
        invocation that a rewind from there on names starts: the part
        returned starts at the earliest of those, so every rewind in it finds
        the same first event it finds in the whole log. Classifying the
        invocation on that part gives what classifying it on the whole log
        gives. The whole log's length when the invocation has no event.
        """
        end = self.size + len(later)
        firsts: dict[str, int] = {}  # of invocations that start in ``later``
        later_rewinds: list[tuple[int, str]] = []
        for offset, event in enumerate(later):
            invocation = event.invocation_id
            if invocation and invocation not in self.first and invocation not in firsts:
                firsts[invocation] = self.size + offset
            target = event.actions.rewind_before_invocation_id
            if target:
                later_rewinds.append((self.size + offset, target))
        start = self.first.get(invocation_id, firsts.get(invocation_id))
        if start is None:
            return end
        tail = start
        for place, target in later_rewinds:
            if place >= start:
                tail = min(tail, self.first.get(target, firsts.get(target, tail)))
        for place, target in reversed(self.rewinds):
            if place < start:
                break
            tail = min(tail, self.first.get(target, firsts.get(target, tail)))
        return tail
