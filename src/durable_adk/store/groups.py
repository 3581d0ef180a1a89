"""Group commit: write units of different runs that arrive together in one transaction.

At hundreds of runs in flight, each run's small writes (an append, a finish)
each pay a commit of their own although they fall within the same
millisecond. With group commit on (the store option ``group_commit``), the
units that arrive while another is waiting to be written are taken together
and committed in one transaction: one fsync of SQLite's WAL, one commit on a
PostgreSQL connection.

What it guarantees:

* **Each unit is still its own.** Its fence is in its own SQL (the run's
  epoch, the session's sequence number), so a refused unit returns its
  status row and writes nothing, as alone. A unit that raises (a unique
  violation, say) writes nothing and the error goes to its caller only; the
  others commit. SQLite runs each unit behind a savepoint and rolls back to
  it; PostgreSQL, where a savepoint costs two more round trips per unit,
  rolls the group back and writes the others again in a new transaction
  (their fences read again there). If the group's transaction itself fails
  (its commit, the connection), every unit of it fails and none is written:
  all or nothing per unit, never part of one.
* **No unit waits for a timer.** A unit is grouped only with units already
  waiting beside it: on SQLite, those submitted in the same turn of the
  event loop (a unit alone in its turn, with nothing else ready to run, is
  written at once, as without grouping); on PostgreSQL, those queued for a
  pool connection (a unit that finds a connection free is sent at once).
  The wait is the one the unit would have had anyway.
* **Bounded.** A group holds at most ``group_max`` units (default
  :data:`DEFAULT_GROUP_MAX`); more waiting units make more groups.
* **A cancelled waiter takes only itself out.** A caller cancelled before
  its group is written drops its unit (not written); once the group is on
  its way the unit is written or not with the group, and the other units'
  outcome does not depend on it.

Which units: :data:`GROUPED` (below), the one place that decides. Only
writes of a run in progress whose outcome is all in their own rows and
status: reads are never grouped (nothing to commit), nor lease units (a
claim or a renewal has its own pool and must not wait behind appends), nor
intake (``run_start``, ``run_submit``: served after the runs in progress on
purpose), nor a unit reading ``changes()`` of a statement another unit's
savepoint could reset.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from durable_adk.store.queries import Query

DEFAULT_GROUP_MAX = 32
"""Most units in one group transaction. PostgreSQL keeps 64 subtransaction ids
per backend in shared memory; more savepoints that write in one transaction
overflow it and slow every other backend's snapshots."""

GROUPED = frozenset(
    {
        # A run's events: fenced by the session's sequence number and the run's epoch.
        "append_event",
        "append_events",
        "append_events_finish",
        # How a run ended: fenced by owner, epoch and status.
        "run_finish",
        "run_release",
        "run_finish_cancelled",
        "run_park",
        # The side-effect journal of a run's tools: fenced by the run's epoch.
        "journal_begin",
        "journal_done",
        "journal_found",
        "journal_release",
        "journal_forget",
        "journal_hold",
        # The job rows of long-running tools: made, attached, submitted,
        # completed, resumed (not the job sweepers' claims, which take work).
        "job_create",
        "job_attach",
        "job_start",
        "job_complete",
        "job_progress",
        "job_mark_submitted",
        "job_submit_failed",
        "job_mark_resumed",
        "job_mark_resumed_calls",
        "job_release_resume",
        "job_release_resume_calls",
    }
)
"""The named queries that may share a transaction with other runs' units."""


def groupable(query: Query) -> bool:
    """Whether a unit may be written in a group (named in :data:`GROUPED`, and a write)."""
    return query.name in GROUPED and query.writes and not query.lease


@dataclass(eq=False, slots=True)
class Pending:
    """A unit waiting for its group: the query, its arguments, its caller's future and,
    on PostgreSQL, the statement it sends (:meth:`Query.bind`)."""

    query: Query
    args: Any
    future: asyncio.Future[Any] = field(repr=False)
    statement: str = ""

    def settle(self, outcome: Any) -> None:
        """Hands the caller its rows or its exception (unless it stopped waiting)."""
        if self.future.done():
            return
        if isinstance(outcome, BaseException):
            self.future.set_exception(outcome)
        else:
            self.future.set_result(outcome)


class Queue:
    """The units waiting to be taken into a group, in arrival order."""

    def __init__(self, group_max: int) -> None:
        if group_max < 1:
            raise ValueError("group_max must be >= 1")
        self.group_max = group_max
        self.waiting: deque[Pending] = deque()
        self.groups = 0  # groups written (tests and benches)
        self.grouped_units = 0  # units written in a group of two or more

    def __len__(self) -> int:
        return len(self.waiting)

    def add(self, query: Query, args: Any, statement: str = "") -> Pending:
        """Queues a unit; its caller awaits ``pending.future``."""
        pending = Pending(query, args, asyncio.get_running_loop().create_future(), statement)
        self.waiting.append(pending)
        return pending

    def take(self) -> list[Pending]:
        """The next group: up to ``group_max`` units whose callers still wait."""
        group: list[Pending] = []
        while self.waiting and len(group) < self.group_max:
            pending = self.waiting.popleft()
            if not pending.future.done():  # a cancelled caller took itself out
                group.append(pending)
        if group:
            self.groups += 1
            if len(group) > 1:
                self.grouped_units += len(group)
        return group


def nothing_else_ready(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether no other callback waits to run in this turn of the loop.

    Then no other unit can join a group before the next poll, and a unit is
    written at once instead of one turn later. Read from asyncio's own loop
    (its ready queue); a loop that has none (uvloop) is taken as busy, so its
    units are grouped by turn.
    """
    ready = getattr(loop, "_ready", None)
    return isinstance(ready, deque) and not ready
