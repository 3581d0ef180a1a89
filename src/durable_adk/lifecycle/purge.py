"""The purge: what a retention policy lets go, deleted in short batches on indexes.

One pass over an app (:func:`purge`) repeats two moves until nothing is left
to do:

1. **Mark** a batch of sessions the policy lets go (``purge_mark``, oldest
   first, on ``sessions_by_update``). One statement checks that nothing still
   needs the session: every run of it ended before the cut-off of its ending
   (so none is queued, running, paused or asleep), no job is open or has a
   call still to answer, no saga is unfinished or owes its outcome event, no
   interrupt is open, no schedule firing is pending, no A2A task of it is
   still under way (not completed, failed, canceled or rejected) or owes a
   push not yet delivered. From then on an append
   to the session finds it missing and a read finds no session: a run
   submitted to it in that instant fails with "session not found" instead
   of writing into rows being deleted.
2. **Drain** the marked sessions table by table (:data:`DELETE_STEPS`): each
   statement deletes at most ``batch`` rows found through the marked
   sessions (``sessions_purging``) and an index of the table, and returns one
   row per row deleted with its size. The rows found through a session's runs
   (journal entries, dead letters, schedule firings, job calls) go before the
   runs, and a run goes only once none of them is left, so no row is ever
   orphaned. The A2A rows are found through the links of the sessions'
   invocations to their tasks (``a2a_task_runs``): a task's events, pushes,
   push configs and message ids go first, then the task, then its links. The
   session row goes last.

What it guarantees:

* **No long lock, no scan.** Every statement touches at most ``batch`` rows
  and finds them on an index (tests/contract/test_retention_plans.py reads the
  plans on both backends).
* **Each row once.** Two processes purging one app at a time delete each row
  once: PostgreSQL's batches skip rows another purge holds (``SKIP LOCKED``),
  SQLite has one writer at a time, and the counts come from the rows each
  statement deleted.
* **A crash costs nothing.** A pass killed half-way leaves sessions marked;
  the next pass (any process's) drains them from where it stopped.
* **Paced.** A pass keeps to the policy's ``duty`` (:mod:`.pacing`): after
  each statement it rests in proportion to the time the statement held the
  writer (the store's figure, :func:`~durable_adk.store.base.fetch_held`:
  not its wait for the appends' lock), and sizes the batches to hold it a
  few milliseconds, so the appends of live runs wait little for it
  (BENCHMARKS.md, retention). ``duty=1`` purges flat out.
* **Payload-only.** With ``payload_only`` the sessions, events, snapshots and
  artifacts go; the ledger's rows stay with their payload columns emptied
  (``scrub_*``: picked with their size, then emptied if they still hold one,
  so two purges count a row once).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from durable_adk import errors
from durable_adk.faults import crash_point
from durable_adk.lifecycle.pacing import Pacer
from durable_adk.lifecycle.policy import RetentionPolicy
from durable_adk.metrics import Metrics
from durable_adk.store.base import Store, fetch_held

logger = logging.getLogger("durable_adk.lifecycle")

A2A_STEPS = (
    "a2a_task_events",
    "a2a_push_outbox",
    "a2a_push_configs",
    "a2a_messages",
    "a2a_tasks",
    "a2a_task_runs",
)
"""The A2A rows of a session, in the order they go: a task is the session's through
``a2a_task_runs`` (the invocations it drove), so its events, pushes, push configs,
message ids and the task itself go before those links."""

DELETE_STEPS = (
    "events",
    "state_snapshots",
    "event_repairs",
    "artifacts",
    "journal",
    "dead_letters",
    "schedule_ticks",
    "operator_actions",
    "job_calls",
    "jobs",
    "saga_steps",
    "sagas",
    "interrupts",
    "answer_claims",
    "runs",
    *A2A_STEPS,
)
"""The tables a purge drains, in order (each ``purge_<table>``); the sessions go last."""

KEPT_BY_RETENTION = frozenset({"operator_actions"})
"""Tables retention keeps (the operators' audit trail); forgetting a user deletes them too."""

PAYLOAD_STEPS = ("events", "state_snapshots", "event_repairs", "artifacts", *A2A_STEPS)
"""What payload-only retention deletes (they are payload through and through; the
A2A rows are the protocol's view of the runs, whose skeleton stays)."""

SCRUB_STEPS = ("journal", "dead_letters", "jobs", "saga_steps", "interrupts", "runs")
"""The ledger's tables whose payload columns payload-only retention empties."""

TABLES = (*DELETE_STEPS, "sessions")
"""Every table a purge or a forget reports on."""

PASS_LIMIT = 10_000
"""The most statements one pass runs before it yields to the next (a safety bound)."""


@dataclass(slots=True)
class TableCount:
    """What a purge did (or would do) to one table.

    Attributes:
        rows: Rows deleted (or, under payload-only, emptied of their payload).
        bytes: The size of what went: the payload columns' bytes, as stored.
    """

    rows: int = 0
    bytes: int = 0

    def add(self, rows: int, size: int) -> None:
        self.rows += rows
        self.bytes += size


@dataclass(slots=True)
class PurgeReport:
    """What one purge of an app did, or, with ``dry_run``, would do.

    Attributes:
        app_name: The app purged.
        dry_run: Nothing was deleted: the counts are what a purge would delete now.
        payload_only: The ledger's rows were emptied of their payloads, not deleted.
        policy: The policy, as :meth:`RetentionPolicy.parse` reads it.
        tables: Per table, what went (:class:`TableCount`); tables with nothing are listed too.
        sessions_marked: Sessions this pass marked for purging.
        oldest_kept: Per table (``sessions``: last change; ``runs``: end), the
            age in seconds of the oldest row kept after the pass (None: none left).
    """

    app_name: str
    dry_run: bool
    payload_only: bool
    policy: str
    tables: dict[str, TableCount] = field(default_factory=dict)
    sessions_marked: int = 0
    oldest_kept: dict[str, float | None] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        """Rows that went, in every table."""
        return sum(t.rows for t in self.tables.values())

    @property
    def bytes(self) -> int:
        """Bytes that went, in every table."""
        return sum(t.bytes for t in self.tables.values())

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (what ``--json`` and the HTTP route show)."""
        return {
            "app_name": self.app_name,
            "dry_run": self.dry_run,
            "payload_only": self.payload_only,
            "policy": self.policy,
            "sessions_marked": self.sessions_marked,
            "rows": self.rows,
            "bytes": self.bytes,
            "tables": {
                name: {"rows": count.rows, "bytes": count.bytes}
                for name, count in self.tables.items()
            },
            "oldest_kept": dict(self.oldest_kept),
        }


def _counts() -> dict[str, TableCount]:
    return {name: TableCount() for name in TABLES}


async def known_apps(store: Store) -> list[str]:
    """Every app with sessions or runs on the database (one index probe per app)."""
    return [str(row["app_name"]) for row in await store.fetch("lifecycle_apps")]


async def require_app(store: Store, app_name: str) -> None:
    """Raises InvalidArgument naming the apps there are when ``app_name`` has no data."""
    if not isinstance(app_name, str) or not app_name:
        raise errors.InvalidArgument("app_name must be a non-empty string")
    apps = await known_apps(store)
    if app_name not in apps:
        there = ", ".join(repr(a) for a in apps) or "none"
        raise errors.InvalidArgument(
            f"unknown app {app_name!r}: the database holds no session or run of it (apps: {there})"
        )


async def purge(
    store: Store,
    app_name: str,
    policy: RetentionPolicy,
    *,
    dry_run: bool = False,
    metrics: Metrics | None = None,
    must_exist: bool = True,
    pacer: Pacer | None = None,
) -> PurgeReport:
    """Purges what ``policy`` lets go of ``app_name`` now (or says what would go).

    Args:
        store: The open store.
        app_name: The app whose data is purged.
        policy: How long it keeps what.
        dry_run: Delete nothing; count what a purge would delete now, per table.
        metrics: Where rows and bytes purged and the oldest row kept go.
        must_exist: Refuse an app the database holds nothing of (a typo); the
            purge loop of a worker passes False (its app may have no data yet).
        pacer: Times the statements and rests between them (default: one at
            the policy's ``duty`` and ``batch``).

    Raises:
        InvalidArgument: ``policy`` is not a RetentionPolicy, or the app is unknown.
    """
    if not isinstance(policy, RetentionPolicy):
        raise errors.InvalidArgument(
            f"policy must be a RetentionPolicy, not {type(policy).__name__}"
        )
    if must_exist:
        await require_app(store, app_name)
    report = PurgeReport(
        app_name, dry_run, policy.payload_only, policy.describe(), tables=_counts()
    )
    now = float(await store.now())
    params: dict[str, Any] = {"app_name": app_name, **policy.cutoffs(now)}
    if dry_run:
        for row in await store.fetch("purge_preview", params):
            report.tables[str(row["table_name"])].add(int(row["row_count"]), int(row["bytes"]))
        if policy.payload_only:  # these keep their rows, payloads and all
            for name in set(DELETE_STEPS) - set(PAYLOAD_STEPS) - set(SCRUB_STEPS):
                report.tables[name] = TableCount()
        return report
    pacer = pacer or Pacer.for_dialect(store.dialect, policy.duty, policy.batch)
    statements = 0
    while statements < PASS_LIMIT:
        size = pacer.batch
        began = pacer.clock()
        marked, held = await fetch_held(
            store, "purge_mark", {**params, "batch": size}, sync=pacer.sync
        )
        statements += 1
        report.sessions_marked += len(marked)
        await pacer.rest(began, len(marked) == size, held)
        statements += await drain(
            store,
            app_name,
            report.tables,
            batch=policy.batch,
            keep_skeleton=policy.payload_only,
            pacer=pacer,
        )
        if len(marked) < size:
            break
    await _record(store, app_name, report, metrics)
    return report


async def drain(
    store: Store,
    app_name: str,
    tables: dict[str, TableCount],
    *,
    batch: int,
    keep_skeleton: bool,
    user_id: str | None = None,
    forget: bool = False,
    on_batch: Any = None,
    pacer: Pacer | None = None,
) -> int:
    """Deletes (or empties) the rows of the app's marked sessions, batch by batch,
    table by table, then the sessions left with nothing; adds to ``tables``.

    Args:
        user_id: Only the marked sessions of this user (forgetting a user).
        forget: Delete the operators' audit lines too (retention keeps them).
        on_batch: Awaited after each batch that changed rows (forget saves its progress).
        pacer: Sizes each batch and rests after it (None: ``batch`` rows, no rest).

    Returns:
        How many statements it ran.
    """
    pacer = pacer or Pacer(1.0, batch)
    base = {"app_name": app_name, "user_id": user_id, "batch": batch}
    statements = 0
    if keep_skeleton:
        steps: tuple[str, ...] = PAYLOAD_STEPS
    else:
        steps = tuple(s for s in DELETE_STEPS if forget or s not in KEPT_BY_RETENTION)
    # The tables that hold nothing of these sessions are not visited: on SQLite
    # each statement would be a write, the lock and a hop, for no row.
    holding = await store.fetchrow("purge_holding", {"app_name": app_name, "user_id": user_id})
    statements += 1
    for table in steps:
        if holding is not None and not holding[table]:
            continue
        while True:
            size = base["batch"] = pacer.batch
            began = pacer.clock()
            rows, held = await fetch_held(store, f"purge_{table}", base, sync=pacer.sync)
            statements += 1
            tables[table].add(len(rows), sum(int(r["bytes"] or 0) for r in rows))
            upkeep = 0.0
            if rows:
                if pacer.deleted(len(rows)):
                    upkeep = await _checkpoint(store, pacer)
                if on_batch is not None:
                    await on_batch()
            await pacer.rest(began, len(rows) == size, held, upkeep)
            crash_point("lifecycle.after_batch")  # a batch deleted (and recorded), more to go
            if len(rows) < size:
                break
    if keep_skeleton:
        for table in SCRUB_STEPS:
            while True:
                size = base["batch"] = pacer.batch
                began = pacer.clock()
                picked, held = await fetch_held(store, f"scrub_pick_{table}", base)
                statements += 1
                if not picked:
                    break
                sizes = {r["key"]: int(r["bytes"] or 0) for r in picked}
                done, more = await fetch_held(
                    store, f"scrub_{table}", {"keys": json.dumps(list(sizes))}, sync=pacer.sync
                )
                statements += 1
                tables[table].add(len(done), sum(sizes.get(r["key"], 0) for r in done))
                upkeep = await _checkpoint(store, pacer) if pacer.deleted(len(done)) else 0.0
                await pacer.rest(began, len(picked) == size, _plus(held, more), upkeep)
                crash_point("lifecycle.after_batch")
                if len(picked) < size:
                    break
    while True:
        size = base["batch"] = pacer.batch
        began = pacer.clock()
        rows, held = await fetch_held(
            store, "purge_sessions", {**base, "keep_skeleton": keep_skeleton}, sync=pacer.sync
        )
        statements += 1
        tables["sessions"].add(len(rows), sum(int(r["bytes"] or 0) for r in rows))
        if rows and on_batch is not None:
            await on_batch()
        upkeep = 0.0
        last = len(rows) < size
        # The drain's last pages are checkpointed too, not left to a live run's commit.
        if (rows and pacer.deleted(len(rows))) or (last and pacer.checkpoint_left()):
            upkeep = await _checkpoint(store, pacer)
        await pacer.rest(began, len(rows) == size, held, upkeep)
        if len(rows) < size:
            break
    return statements


async def _checkpoint(store: Store, pacer: Pacer) -> float:
    """SQLite: copies the log's pages into the database file (the purge pays for its
    pages, so a live run's commit never runs the automatic checkpoint for them).

    Returns:
        The seconds to bill as upkeep: as the store measured them (else as timed
        around it); 0 for a pacer that bills the clock's time around each
        statement, which covers this too.
    """
    if pacer.by_clock:
        await store.fetch("purge_checkpoint")
        return 0.0
    began = pacer.clock()
    _, copied = await fetch_held(store, "purge_checkpoint")
    return max(0.0, pacer.clock() - began) if copied is None else copied


def _plus(a: float | None, b: float | None) -> float | None:
    """Two statements' held seconds together (None: one of them gave no figure)."""
    return None if a is None or b is None else a + b


async def _record(
    store: Store, app_name: str, report: PurgeReport, metrics: Metrics | None
) -> None:
    row = await store.fetchrow("purge_oldest", {"app_name": app_name})
    if row is not None:
        now = float(row["now"])
        for table in ("sessions", "runs"):
            value = row[table]
            report.oldest_kept[table] = None if value is None else max(0.0, now - float(value))
    if metrics is not None:
        for table, count in report.tables.items():
            metrics.purged(table, count.rows, count.bytes)
        for table, age in report.oldest_kept.items():
            metrics.oldest_kept(table, age)
    if report.rows:
        logger.info(
            "purged %d row(s), %d byte(s) of app %r (%s)",
            report.rows,
            report.bytes,
            app_name,
            ", ".join(f"{t} {c.rows}" for t, c in report.tables.items() if c.rows),
        )


def merge_counts(into: dict[str, TableCount], more: Mapping[str, TableCount]) -> None:
    """Adds ``more``'s counts to ``into``'s, table by table."""
    for name, count in more.items():
        into.setdefault(name, TableCount()).add(count.rows, count.bytes)
