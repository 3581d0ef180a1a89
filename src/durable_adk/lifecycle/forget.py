"""Forgetting a user: every row of theirs, in every table of one app or of all.

:func:`forget_user` refuses while the user has runs under way (queued,
running, paused or asleep), or, asked to, cancels them first and waits for
them to stop. It then writes its audit line (``forget_requests``: who, when,
why, which user and scope) before it deletes anything, marks every session of
the user (and a marked stand-in for each session id the user's rows name
without a session: a deleted session's runs, the user's own artifacts), and
drains them with the purge's batches (:func:`durable_adk.lifecycle.purge.drain`),
the operators' audit lines about the user's runs and the user's A2A tasks
(with their events, push configs and outbox, message ids) included; then the user's
own state (``user:`` keys) and, with per-user keys, the user's data key
(:func:`durable_adk.store.rotation.shred_user`: what backups hold of the
user is unreadable from then on). The audit line counts what went, per table, after
each batch, and is closed when nothing is left.

A process killed half-way leaves the audit line open and sessions marked; the
same call again finds the line, carries it on and reports the counts of both
calls. Nothing of the user is readable from the moment their sessions are
marked. Memory: the store holds no memory service's entries (a memory service
an app brings keeps its own; forget the user there too).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from durable_adk import errors
from durable_adk.lifecycle.purge import TABLES, TableCount, drain, known_apps
from durable_adk.metrics import Metrics
from durable_adk.store.base import Store
from durable_adk.store.rotation import shred_user
from durable_adk.tables.ledger import RunLedger

EVERY_APP = "*"
"""The scope of a forget request across every app."""

FORGET_BATCH = 500
"""Rows one statement of a forget deletes at most."""


@dataclass(slots=True)
class ForgetReport:
    """What forgetting a user deleted.

    Attributes:
        user_id: The user forgotten.
        scope: The app, or ``*`` for every app.
        request: The audit line's id (``forget_requests``).
        apps: The apps whose data was looked through.
        cancelled: Runs this call cancelled first (``cancel_live``).
        deleted: Per table, the rows and bytes this call deleted.
        total: Per table, the rows deleted by this request in all (a retry
            after a crash adds to what the first call deleted).
    """

    user_id: str
    scope: str
    request: int
    apps: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    deleted: dict[str, TableCount] = field(default_factory=dict)
    total: dict[str, int] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        """Rows this call deleted, in every table."""
        return sum(c.rows for c in self.deleted.values())

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (what ``--json`` and the HTTP route show)."""
        return {
            "user_id": self.user_id,
            "scope": self.scope,
            "request": self.request,
            "apps": list(self.apps),
            "cancelled": list(self.cancelled),
            "rows": self.rows,
            "deleted": {
                name: {"rows": c.rows, "bytes": c.bytes}
                for name, c in self.deleted.items()
                if c.rows
            },
            "total": {name: n for name, n in self.total.items() if n},
        }


async def live_runs(store: Store, apps: list[str], user_id: str) -> list[dict[str, str]]:
    """The user's runs under way in ``apps``: run id, app, status and session."""
    found: list[dict[str, str]] = []
    for app in apps:
        for row in await store.fetch("forget_live_runs", {"app_name": app, "user_id": user_id}):
            found.append(
                {
                    "run_id": str(row["run_id"]),
                    "app_name": app,
                    "status": str(row["status"]),
                    "session_id": str(row["session_id"]),
                }
            )
    return found


async def forget_user(
    store: Store,
    user_id: str,
    *,
    app_name: str | None = None,
    by: str,
    reason: str | None = None,
    cancel_live: bool = False,
    cancel_wait: float = 10.0,
    batch: int = FORGET_BATCH,
    metrics: Metrics | None = None,
) -> ForgetReport:
    """Deletes every row of ``user_id`` in every table of ``app_name`` (None: every app).

    Args:
        store: The open store.
        user_id: The user to forget.
        app_name: One app, or None for every app on the database.
        by: Who asks, for the audit line.
        reason: Why, for the audit line.
        cancel_live: Cancel the user's runs under way first (and wait up to
            ``cancel_wait`` seconds for running ones to stop) instead of refusing.
        batch: Rows one statement deletes at most.
        metrics: Where the rows and bytes deleted go (as the purge's).

    Raises:
        InvalidArgument: An empty user id or actor, or an app the database
            holds nothing of (nothing is written).
        Conflict: The user has runs under way (and ``cancel_live`` is False,
            or they did not stop in time); nothing was deleted.
    """
    for name, value in (("user_id", user_id), ("by", by)):
        if not isinstance(value, str) or not value.strip():
            raise errors.InvalidArgument(f"{name} must be a non-empty string")
    if len(user_id) > 1024:
        raise errors.InvalidArgument("user_id is longer than 1024 characters")
    if not isinstance(batch, int) or isinstance(batch, bool) or not 1 <= batch <= 100_000:
        raise errors.InvalidArgument(f"batch must be 1..100000 rows, got {batch!r}")
    apps = await known_apps(store)
    if app_name is not None:
        if app_name not in apps:
            there = ", ".join(repr(a) for a in apps) or "none"
            raise errors.InvalidArgument(
                f"unknown app {app_name!r}: the database holds no session or run of it "
                f"(apps: {there})"
            )
        apps = [app_name]
    cancelled: list[str] = []
    live = await live_runs(store, apps, user_id)
    if live and cancel_live:
        ledger = RunLedger(store)
        for run in live:
            result = await ledger.cancel(
                run["run_id"], by=by, reason=reason or f"forgetting user {user_id}"
            )
            if result.changed:
                cancelled.append(run["run_id"])
        live = await _wait_stopped(store, apps, user_id, cancel_wait)
    if live:
        shown = ", ".join(f"{r['run_id']} ({r['status']})" for r in live[:5])
        more = f" and {len(live) - 5} more" if len(live) > 5 else ""
        hint = (
            "they were asked to stop and have not yet: retry in a moment"
            if cancel_live
            else "cancel them first, or ask to (--cancel-live)"
        )
        raise errors.Conflict(
            f"user {user_id!r} has {len(live)} run(s) under way: {shown}{more}; {hint}"
        )
    scope = app_name if app_name is not None else EVERY_APP
    row = await store.fetchrow(
        "forget_audit_open",
        {"scope": scope, "user_id": user_id, "actor": by, "reason": reason},
    )
    assert row is not None  # the insert or the open line it met
    request = int(row["pk"])
    total: dict[str, int] = {k: int(v) for k, v in json.loads(row["deleted"] or "{}").items()}
    report = ForgetReport(user_id, scope, request, apps=apps, cancelled=cancelled)
    report.deleted = {}

    async def save(done: bool = False) -> None:
        merged = dict(total)
        for name, count in report.deleted.items():
            merged[name] = merged.get(name, 0) + count.rows
        report.total = merged
        await store.execute(
            "forget_audit_save",
            {"pk": request, "deleted": json.dumps(merged, sort_keys=True), "done": done},
        )

    for app in apps:
        tables: dict[str, TableCount] = report.deleted
        for name in (*TABLES, "user_state", "user_keys"):
            tables.setdefault(name, TableCount())
        await store.execute("forget_mark", {"app_name": app, "user_id": user_id})
        await drain(
            store,
            app,
            tables,
            batch=batch,
            keep_skeleton=False,
            user_id=user_id,
            forget=True,
            on_batch=save,
        )
        rows = await store.fetch("forget_user_state", {"app_name": app, "user_id": user_id})
        tables["user_state"].add(len(rows), sum(int(r["bytes"] or 0) for r in rows))
        if await shred_user(store, app, user_id) is not None:  # backups: unreadable too
            tables["user_keys"].add(1, 0)
        await save()
    await save(done=True)
    if metrics is not None:
        for name, count in report.deleted.items():
            metrics.purged(name, count.rows, count.bytes)
    return report


async def _wait_stopped(
    store: Store, apps: list[str], user_id: str, seconds: float
) -> list[dict[str, str]]:
    """Polls until the user has no run under way, or ``seconds`` pass; what is left."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, seconds)
    while True:
        live = await live_runs(store, apps, user_id)
        if not live or loop.time() >= deadline:
            return live
        await asyncio.sleep(0.1)
