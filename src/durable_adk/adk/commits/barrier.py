"""Barrier commits: a run's events committed together where durability matters.

What it guarantees (used by :class:`~durable_adk.adk.runner.DurableRunner` and
:class:`~durable_adk.adk.services.sessions.DurableSessionService`):

* While a drive holds an :class:`EventBatch` (``commits="barrier"``, the
  default; ``"per_event"`` holds none), the session service buffers the drive's appends to its own
  session in memory, in order, each with the sequence number it will have;
  :meth:`DurableSessionService.flush_batch` writes the whole batch in one
  fenced unit of work (``append_events``; ``append_event`` for a batch of
  one): if the session moved on, the run's epoch is no longer current or an
  event id is already stored, nothing of the batch is written, and nothing
  more of the drive is written after a refused or failed batch.
* A batch is flushed at every *barrier*: before an agent starts or ends,
  before a model call, before a tool runs (so a function call is durable
  before any effect: journal entries, jobs and artifacts are written by tools,
  behind this barrier), before a read of the session, before the caller is
  handed any event, and at the end of the drive, before it is classified and
  finished. The caller never sees an event a crash could lose.
* Between barriers ADK may run ahead of the caller only when every agent of
  the app is one of ADK's own LlmAgent, SequentialAgent, ParallelAgent or
  LoopAgent (:func:`may_look_ahead`): the code that runs between two barriers
  is then ADK's own bookkeeping (and the app's instruction providers). Any
  other agent or graph node (a custom agent, a Workflow, a saga) makes the
  drive lock-step, as with per-event commits: each event is flushed before it
  is handed over and ADK goes on only when the caller asks for the next one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

from google.adk.agents import LlmAgent, LoopAgent, ParallelAgent, SequentialAgent
from google.adk.agents.base_agent import BaseAgent

from durable_adk import errors
from durable_adk.adk.shapes import agent_tree

CommitMode = Literal["barrier", "per_event"]
"""How a drive commits its events: together at barriers, or one unit per event."""

COMMIT_MODES: tuple[str, ...] = ("barrier", "per_event")


def check_commit_mode(mode: object) -> CommitMode:
    """``mode`` if it names a commit mode.

    Raises:
        durable_adk.errors.InvalidArgument: It does not.
    """
    if mode == "barrier":
        return "barrier"
    if mode == "per_event":
        return "per_event"
    raise errors.InvalidArgument(f"commits must be one of {COMMIT_MODES}, got {mode!r}")


@dataclass(slots=True)
class Pending:
    """One buffered append: the event's row, its deltas, and the session object it went to."""

    seq: int
    event: Any
    row: dict[str, Any]
    session: Any
    session_delta: dict[str, Any]
    app_delta: dict[str, Any]
    user_delta: dict[str, Any]
    snapshot: str | None


@dataclass(slots=True)
class EventBatch:
    """A drive's appends to its session not yet committed.

    Attributes:
        key: The session (app name, user id, session id) whose appends are buffered.
        service: The session service that buffers them (another instance,
            on the same store or not, commits its appends at once).
        pending: The buffered appends, in order.
        flushes: How many non-empty batches were written (for tests and benches).
        failed: The error of a flush the store refused or failed; nothing more
            of the drive is written once set.
    """

    key: tuple[str, str, str]
    service: object
    pending: list[Pending] = field(default_factory=list)
    flushes: int = 0
    failed: BaseException | None = None

    def holds(self, event_id: str) -> bool:
        return any(p.event.id == event_id for p in self.pending)


_current: ContextVar[EventBatch | None] = ContextVar("durable_adk_event_batch", default=None)


def current_batch() -> EventBatch | None:
    """The batch of the drive this code runs in, or None (appends are committed one by one)."""
    return _current.get()


@contextlib.contextmanager
def using_batch(batch: EventBatch | None) -> Iterator[EventBatch | None]:
    """Makes ``batch`` the current batch inside the block (the drive's task and its children)."""
    token = _current.set(batch)
    try:
        yield batch
    finally:
        _current.reset(token)


_PLAIN_AGENTS: tuple[type[BaseAgent], ...] = (LlmAgent, SequentialAgent, ParallelAgent, LoopAgent)


def _is_plain(agent: object) -> bool:
    """One of ADK's own orchestrating agents, its run methods not overridden."""
    for base in _PLAIN_AGENTS:
        if isinstance(agent, base):
            kind = type(agent)
            return all(
                getattr(kind, name) is getattr(base, name)
                for name in ("run_async", "_run_async_impl", "run_live", "_run_live_impl")
                if hasattr(base, name)
            )
    return False


def may_look_ahead(root: object) -> bool:
    """Whether ADK may run ahead of the caller between barriers for this app's tree.

    True only when every agent and graph node reachable from ``root`` is one
    of ADK's LlmAgent, SequentialAgent, ParallelAgent or LoopAgent: the code
    they run between two barriers (before/after an agent, before a model
    call, before a tool) is ADK's own. Tools may be anything: a tool always
    runs behind a barrier.
    """
    return all(_is_plain(found.item) for found in agent_tree.agents(root))
