"""The schedules' tables: the definitions as last synced from code, next ticks, ticks.

:class:`ScheduleTable` keeps an app's :class:`~durable_adk.schedules.Schedule`
values in the store (framework-agnostic: no ADK import here; the poller that
submits the runs is :mod:`durable_adk.adk.loops.scheduler`).

What it guarantees:

* A schedule's row holds its definition as last synced from code
  (:meth:`ScheduleTable.sync`), the app version whose code synced it, its
  next tick and when a worker should next look at it (``next_fire_at``), so
  the next tick survives the restart of every worker and of the database. A
  schedule removed from the code is orphaned by the next sync: never
  claimed, still listed. A sync is one unit of work over the whole set,
  refused if another sync came since the caller looked (the set's epoch in
  ``schedule_sets``); a claim takes only the schedules its version synced.
* Time is the database's clock: a claim takes only schedules due by it and
  hands its time back; ticks are computed against that time, never a
  worker's, so a worker with a skewed clock fires nothing early.
* A claim is one statement per worker per poll, whatever the number of
  schedules (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, the write lock on
  SQLite), and holds each schedule it returns for a lease (its next look is
  pushed past the lease; every claim bumps its epoch).
* A tick is a row keyed by (app, schedule, tick key), recorded with the id
  of the run it will start chosen in advance, in the same unit of work that
  advances the schedule past it (refused if the schedule's epoch moved). The
  run is then submitted under that id; a submit that finds the id on the
  ledger already did its work. A crash between the two leaves a PENDING tick
  that the next claim submits: the tick is neither lost nor doubled.
* Pause, resume and trigger write their line in ``operator_actions`` (the
  operators' audit trail, subject ``schedule:<name>``) in the same unit of
  work as the change; each is refused with a clear error, changing nothing,
  for an unknown or orphaned schedule.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from durable_adk import errors
from durable_adk.ids import check_id
from durable_adk.schedules import Plan, Schedule, ScheduleRow, Tick, TickState, tick_key
from durable_adk.store.base import Store

logger = logging.getLogger("durable_adk.schedules")


class ScheduleTable:
    """The schedules of one app in a store."""

    def __init__(self, store: Store, app_name: str) -> None:
        """Binds the table to a store and an app."""
        self.store = store
        self.app_name = app_name

    # -------------------------------------------------------------- sync

    async def in_force(self) -> ScheduleSet | None:
        """Which version's set is the app's (one read); None: never synced since schema 19."""
        row = await self.store.fetchrow("schedule_set_get", {"app_name": self.app_name})
        if row is None:
            return None
        return ScheduleSet(row["app_version"], str(row["digest"]), int(row["epoch"]))

    async def sync(
        self,
        schedules: Iterable[Schedule],
        *,
        version: str | None = None,
        by: str | None = None,
        seen: ScheduleSet | Literal["read"] | None = "read",
    ) -> list[ScheduleRow]:
        """Makes the app's schedules the set ``version``'s code declares, in one unit of work.

        A new schedule's next tick is its first after now (database clock):
        nothing fires for the time before it was declared. A schedule whose
        timing changed starts again from its first tick after now; one whose
        other fields changed keeps its next tick. Schedules of the app no
        longer declared are orphaned. Every row is stamped with ``version``.
        Who may sync is the caller's rule (the poller's: the newest serving
        version); this table only makes two syncs never interleave.

        Args:
            schedules: The declared set.
            version: The app version whose code declares it (None: unversioned).
            by: The syncing worker (recorded with the set).
            seen: The set in force the caller decided on (:meth:`in_force`):
                the sync is refused if another came since. ``"read"``: read it now.

        Raises:
            InvalidArgument: Two schedules share a name (nothing written).
            Conflict: Another sync came after ``seen`` (nothing written).
        """
        declared = list(schedules)
        names = [s.name for s in declared]
        if len(set(names)) != len(names):
            dupes = sorted({n for n in names if names.count(n) > 1})
            raise errors.InvalidArgument(f"schedule names must be unique: {', '.join(dupes)}")
        if seen == "read":
            seen = await self.in_force()
        rows = await self.store.fetch("schedule_list_of_app", {"app_name": self.app_name})
        now = float(rows[0]["db_now"]) if rows else await self.store.now()
        stored = {row["name"]: row for row in rows}
        fresh: list[dict[str, Any]] = []
        changed: list[dict[str, Any]] = []
        for schedule in declared:
            spec, row = schedule.to_spec(), stored.pop(schedule.name, None)
            if row is not None and row["spec"] == spec and row["orphaned_at"] is None:
                stored[schedule.name] = row  # unchanged: only stamped
                continue
            first = schedule.next_tick(now)
            item = {"name": schedule.name, "spec": spec, "next_tick_at": first}
            item["next_fire_at"] = schedule.fire_at(first)
            timing_kept = row is not None and (
                Schedule.from_spec(row["spec"]).timing == schedule.timing
            )
            (changed if timing_kept else fresh).append(item)
        orphan = [n for n, row in stored.items() if n not in names and row["orphaned_at"] is None]
        restamp = [n for n, row in stored.items() if n not in orphan]
        result = await self.store.fetchrow(
            "schedule_sync",
            {
                "app_name": self.app_name,
                "app_version": version,
                "seen": 0 if seen is None else seen.epoch,
                "digest": digest_of(declared),
                "synced_by": by,
                "fresh": json.dumps(fresh),
                "changed": json.dumps(changed),
                "orphan": json.dumps(orphan),
                "restamp": json.dumps(restamp),
            },
        )
        if result is None or result["status"] != "ok":
            raise errors.Conflict(
                f"the schedules of app {self.app_name!r} were synced meanwhile: nothing changed"
            )
        return await self.list_schedules()

    # ------------------------------------------------------------ reading

    async def list_schedules(self) -> list[ScheduleRow]:
        """Every schedule of the app (orphaned ones included), by name."""
        rows = await self.store.fetch("schedule_list_of_app", {"app_name": self.app_name})
        return [ScheduleRow.from_row(r) for r in rows]

    async def get(self, name: str) -> ScheduleRow:
        """One schedule.

        Raises:
            NotFound: The app has no schedule of that name.
        """
        row = await self.store.fetchrow(
            "schedule_get", {"app_name": self.app_name, "name": check_id("schedule", name)}
        )
        if row is None:
            raise errors.NotFound(f"app {self.app_name!r} has no schedule {name!r}")
        return ScheduleRow.from_row(row)

    async def recent_ticks(self, name: str, *, limit: int = 20) -> list[Tick]:
        """A schedule's latest ticks, newest first."""
        rows = await self.store.fetch(
            "schedule_ticks_recent", {"app_name": self.app_name, "name": name, "limit": limit}
        )
        return [Tick.from_row(r) for r in rows]

    async def open_ticks(self, name: str) -> list[Tick]:
        """A schedule's PENDING ticks, in tick order."""
        rows = await self.store.fetch(
            "schedule_open_ticks", {"app_name": self.app_name, "name": name}
        )
        return [Tick.from_row(r) for r in rows]

    # ------------------------------------------------------- the poller's

    async def claim(
        self, owner: str, *, lease: float, batch: int, version: str | None = None
    ) -> list[ScheduleRow]:
        """The poller's one statement: due schedules ``version`` synced, held for ``lease`` s.

        A row whose stored definition this code cannot read is logged and
        left out (its claim runs out; the code that wrote it fires it).
        """
        params = {"app_name": self.app_name, "owner": owner, "lease": lease, "batch": batch}
        rows = await self.store.fetch("schedule_claim", {**params, "app_version": version})
        claimed: list[ScheduleRow] = []
        for row in rows:
            try:
                claimed.append(ScheduleRow.from_row(row))
            except (errors.InvalidArgument, TypeError, ValueError) as exc:
                logger.error(
                    "schedule %r of app %r is unreadable here: %s", row["name"], self.app_name, exc
                )
        return claimed

    async def record(self, row: ScheduleRow, chosen: Plan) -> bool:
        """Records a claim's ticks (with their run ids) and advances the schedule, in one unit.

        Returns:
            False when the schedule was claimed or changed since (nothing written).
        """
        s = row.schedule
        ticks = [
            {
                "tick_key": tick_key(t),
                "tick_at": t,
                "kind": "tick",
                "run_id": new_run_id(),
                "user_id": s.user_id,
                "session_id": s.session_for(tick_key(t)),
            }
            for t in chosen.fire
        ]
        result = await self.store.fetchrow(
            "schedule_record",
            {
                "pk": row.pk,
                "epoch": row.epoch,
                "app_name": self.app_name,
                "name": row.name,
                "ticks": json.dumps(ticks),
                "next_tick_at": chosen.next_tick,
                "last_tick_at": chosen.fire[-1] if chosen.fire else None,
                "missed": chosen.missed,
            },
        )
        return result is not None and result["status"] == "ok"

    async def tick_done(self, tick: Tick, state: TickState, detail: str | None = None) -> None:
        """Marks a PENDING tick SUBMITTED (its run is on the ledger) or SKIPPED."""
        await self.store.execute(
            "schedule_tick_done",
            {
                "app_name": self.app_name,
                "name": tick.schedule_name,
                "run_id": tick.run_id,
                "state": state.value,
                "detail": detail,
            },
        )

    async def release(self, pk: int, epoch: int, next_fire_at: float) -> None:
        """Ends a claim: the schedule's next look (unless claimed or changed since)."""
        await self.store.execute(
            "schedule_release", {"pk": pk, "epoch": epoch, "next_fire_at": next_fire_at}
        )

    # ---------------------------------------------------------- operators

    async def pause(self, name: str, *, by: str, reason: str | None = None) -> Changed:
        """Pauses a schedule (no tick fires until resumed); audited; safe to call twice.

        Raises:
            NotFound: No such schedule.
            Conflict: It is orphaned (gone from the code).
        """
        return await self._set_paused(name, True, by=by, reason=reason)

    async def resume(self, name: str, *, by: str, reason: str | None = None) -> Changed:
        """Resumes a paused schedule from its first tick after now (ticks of the pause are not
        caught up; ticks recorded before it still fire); audited; safe to call twice.

        Raises:
            NotFound: No such schedule.
            Conflict: It is orphaned (gone from the code).
        """
        return await self._set_paused(name, False, by=by, reason=reason)

    async def _set_paused(self, name: str, paused: bool, *, by: str, reason: str | None) -> Changed:
        check_id("by", by)
        current = await self.get(name)
        if current.orphaned_at is not None:
            raise errors.Conflict(
                f"schedule {name!r} is orphaned (no longer in the app's code): nothing changed"
            )
        now = current.db_now if current.db_now is not None else await self.store.now()
        row = await self.store.fetchrow(
            "schedule_set_paused",
            {
                "app_name": self.app_name,
                "name": name,
                "paused": int(paused),
                "next_tick_at": None if paused else current.schedule.next_tick(now),
                "action": "schedule_pause" if paused else "schedule_resume",
                "actor": by,
                "reason": reason,
                "detail": None,
            },
        )
        if row is None:
            raise errors.NotFound(f"app {self.app_name!r} has no schedule {name!r}")
        return Changed(ScheduleRow.from_row(row), changed=bool(row["changed"]))

    async def trigger(
        self, name: str, *, by: str, reason: str | None = None, trigger_id: str | None = None
    ) -> Tick:
        """Records a tick of its own key (``trigger:<id>``) that the next poll fires; audited.

        The tick obeys the schedule's overlap policy like any other. Calling
        again with the same ``trigger_id`` records nothing more and returns
        the first call's tick.

        Raises:
            NotFound: No such schedule.
            Conflict: It is paused or orphaned (nothing written).
        """
        check_id("by", by)
        current = await self.get(name)
        if current.state != "active":
            raise errors.Conflict(
                f"schedule {name!r} is {current.state}: resume it before triggering "
                "(nothing changed)"
            )
        key = f"trigger:{check_id('trigger_id', trigger_id or uuid.uuid4().hex)}"
        params = {"app_name": self.app_name, "name": name, "tick_key": key}
        try:
            row = await self.store.fetchrow(
                "schedule_trigger",
                {
                    **params,
                    "run_id": new_run_id(),
                    "user_id": current.schedule.user_id,
                    "session_id": current.schedule.session_for(key),
                    "actor": by,
                    "reason": reason,
                    "detail": json.dumps({"tick_key": key}),
                },
            )
        except errors.UniqueViolation:
            row = await self.store.fetchrow("schedule_tick_get", params)
        if row is None:
            raise errors.Conflict(f"schedule {name!r} changed meanwhile: nothing changed")
        return Tick.from_row(row)

    async def rewind(self, name: str, *, next_tick_at: float, next_fire_at: float) -> None:
        """Tests and benches: puts a schedule's next tick and next look at given times."""
        await self.store.execute(
            "schedule_rewind",
            {
                "app_name": self.app_name,
                "name": name,
                "next_tick_at": next_tick_at,
                "next_fire_at": next_fire_at,
            },
        )


@dataclass(frozen=True, slots=True)
class ScheduleSet:
    """The set of schedules in force for an app (``schedule_sets``).

    Attributes:
        version: The app version whose code declared it (None: unversioned).
        digest: :func:`digest_of` the declared schedules.
        epoch: Bumped by every sync (a sync is refused if it moved since read).
    """

    version: str | None
    digest: str
    epoch: int


def digest_of(schedules: Iterable[Schedule]) -> str:
    """16 hex characters over the definitions (by name): equal sets, equal digests."""
    specs = sorted((s.name, s.to_spec()) for s in schedules)
    return hashlib.sha256(json.dumps(specs).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Changed:
    """What pause or resume did.

    Attributes:
        row: The schedule as it now stands.
        changed: Whether this call changed it.
    """

    row: ScheduleRow
    changed: bool


def new_run_id() -> str:
    """A run id chosen before the run is submitted (a tick carries it)."""
    return f"run-{uuid.uuid4().hex}"
