"""Facts about stored ADK events that the session service and recovery share."""

from __future__ import annotations

from collections.abc import Sequence

from google.adk.events.event import Event


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
