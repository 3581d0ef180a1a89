"""The schedules' routes: list them with their next ticks, pause, resume, trigger now.

Each action goes through :class:`~durable_adk.schedules.ScheduleTable`, whose
one unit of work writes the change and its line in the operators' audit
trail (``operator_actions``, subject ``schedule:<name>``); a refused action
(unknown schedule: 404; paused, orphaned: 409) changes nothing. The routes
serve the worker's own app.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from durable_adk.ids import ID_PATTERN
from durable_adk.schedules import Tick
from durable_adk.service.schemas import ErrorOut, Reason, Who
from durable_adk.store.base import Store
from durable_adk.tables.schedules import ScheduleTable

ScheduleName = Annotated[str, Path(pattern=ID_PATTERN, description="The schedule.")]

TriggerId = Annotated[
    str,
    StringConstraints(pattern=ID_PATTERN),
    Field(description="Makes the trigger idempotent: a second trigger of one id does nothing."),
]


class ScheduleActionIn(BaseModel):
    """Who pauses, resumes or triggers a schedule, and why."""

    model_config = ConfigDict(extra="forbid")

    by: Who
    reason: Reason | None = None


class TriggerIn(ScheduleActionIn):
    """Trigger a schedule now (a tick of its own key, fired by the next poll)."""

    trigger_id: TriggerId | None = None


class ScheduleOut(BaseModel):
    """A schedule as stored: its definition, state and next tick."""

    model_config = ConfigDict(frozen=True)

    name: str
    app_name: str
    state: str = Field(description="active, paused or orphaned (gone from the app's code).")
    cron: str | None
    timezone: str
    every_seconds: float | None
    next_tick_at: float = Field(description="UTC seconds since the epoch.")
    next_tick: str = Field(description="The next tick, ISO 8601 UTC.")
    last_tick_at: float | None
    last_run_id: str | None
    missed: int
    overlap: str
    catch_up: str
    user_id: str
    session_id: str | None
    orphaned_at: float | None
    app_version: str | None = Field(
        default=None,
        description="The app version whose code declared it (or orphaned it); null: unversioned.",
    )


class ScheduleListOut(BaseModel):
    """The app's schedules, by name."""

    schedules: list[ScheduleOut]


class ScheduleChangeOut(BaseModel):
    """What pause or resume did: ``changed`` is false when it was already so."""

    schedule: ScheduleOut
    changed: bool


class TickOut(BaseModel):
    """A recorded tick."""

    model_config = ConfigDict(from_attributes=True, frozen=True)

    schedule_name: str
    tick_key: str
    tick_at: float
    kind: str
    run_id: str
    user_id: str
    session_id: str
    state: str
    actor: str | None
    detail: str | None


class TickListOut(BaseModel):
    """A schedule's latest ticks, newest first."""

    ticks: list[TickOut]


def tick_out(tick: Tick) -> TickOut:
    """A tick as the API shows it."""
    return TickOut.model_validate(tick, from_attributes=True)


_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "No such schedule."},
    409: {"model": ErrorOut, "description": "The schedule is paused or orphaned."},
}


def add_routes(router: APIRouter, store: Store, app_name: str) -> None:
    """Adds the schedules routes to the guarded router."""
    table = ScheduleTable(store, app_name)

    @router.get("/schedules", response_model=ScheduleListOut, tags=["schedules"])
    async def list_schedules() -> ScheduleListOut:
        """The app's schedules with their next ticks (orphaned ones too)."""
        rows = await table.list_schedules()
        return ScheduleListOut(schedules=[ScheduleOut(**r.describe()) for r in rows])

    @router.get(
        "/schedules/{name}/ticks",
        response_model=TickListOut,
        tags=["schedules"],
        responses={404: _ERRORS[404]},
    )
    async def schedule_ticks(
        name: ScheduleName, limit: Annotated[int, Query(ge=1, le=1000)] = 20
    ) -> TickListOut:
        """A schedule's latest ticks, newest first."""
        await table.get(name)
        return TickListOut(ticks=[tick_out(t) for t in await table.recent_ticks(name, limit=limit)])

    @router.post(
        "/schedules/{name}/pause",
        response_model=ScheduleChangeOut,
        tags=["schedules"],
        responses=_ERRORS,
    )
    async def pause(name: ScheduleName, body: ScheduleActionIn) -> ScheduleChangeOut:
        """Pauses a schedule: no tick fires until it is resumed. Audited; safe to call twice."""
        done = await table.pause(name, by=body.by, reason=body.reason)
        return ScheduleChangeOut(schedule=ScheduleOut(**done.row.describe()), changed=done.changed)

    @router.post(
        "/schedules/{name}/resume",
        response_model=ScheduleChangeOut,
        tags=["schedules"],
        responses=_ERRORS,
    )
    async def resume(name: ScheduleName, body: ScheduleActionIn) -> ScheduleChangeOut:
        """Resumes a paused schedule from its next tick after now. Audited; safe to call twice."""
        done = await table.resume(name, by=body.by, reason=body.reason)
        return ScheduleChangeOut(schedule=ScheduleOut(**done.row.describe()), changed=done.changed)

    @router.post(
        "/schedules/{name}/trigger",
        response_model=TickOut,
        tags=["schedules"],
        responses=_ERRORS,
    )
    async def trigger(name: ScheduleName, body: TriggerIn) -> TickOut:
        """Triggers a tick now (its own key; the next poll fires it, by the overlap policy).

        Audited. With ``trigger_id``, a second call of the same id records nothing more.
        """
        tick = await table.trigger(name, by=body.by, reason=body.reason, trigger_id=body.trigger_id)
        return tick_out(tick)
