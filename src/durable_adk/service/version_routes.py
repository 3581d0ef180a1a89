"""The versions' routes: the app's versions with their runs and workers; drain, undrain.

Each action goes through :class:`~durable_adk.tables.versions.VersionTable`,
whose one unit of work writes the change and its line in the operators' audit
trail (``operator_actions``, subject ``version:<version>``); a bad version
(422) changes nothing. The routes serve the worker's own app.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field

from durable_adk.adk.runs.operators import abandon_version
from durable_adk.service.schemas import ErrorOut, Reason, Who
from durable_adk.store.base import Store
from durable_adk.tables.versions import VersionTable

VersionName = Annotated[
    str, Path(min_length=1, max_length=128, description="The version (PEP 440).")
]


class VersionOut(BaseModel):
    """One version of the app."""

    version: str
    runs: dict[str, int]
    total: int
    own_workers: list[str]
    continued_by: list[str]
    waiting: int
    drained_at: float | None
    drained_by: str | None
    reason: str | None


class VersionListOut(BaseModel):
    """The app's versions, newest first (runs without a version last)."""

    versions: list[VersionOut]


class VersionActionIn(BaseModel):
    """Who drains or undrains a version, and why."""

    model_config = ConfigDict(extra="forbid")

    by: Who
    reason: Reason | None = None


class MoveIn(BaseModel):
    """Who moves a version's open runs, to which newer version, and why."""

    model_config = ConfigDict(extra="forbid")

    by: Who
    to: str = Field(min_length=1, max_length=128, description="The newer version.")
    reason: Reason | None = None


class AbandonIn(BaseModel):
    """Who abandons a version's open runs, and why (required)."""

    model_config = ConfigDict(extra="forbid")

    by: Who
    reason: Reason


class MoveOut(BaseModel):
    """How many open runs moved."""

    version: str
    to: str
    moved: int


class AbandonOut(BaseModel):
    """The runs cancelled."""

    version: str
    cancelled: list[str]


class VersionChangeOut(BaseModel):
    """What drain or undrain did: ``changed`` is false when it was already so."""

    version: str
    drained: bool
    changed: bool


_ERRORS: dict[int | str, dict[str, Any]] = {
    422: {"model": ErrorOut, "description": "Not a version string, or a bad operator name."},
}


def add_routes(router: APIRouter, store: Store, app_name: str) -> None:
    """Adds the versions routes to the guarded router."""
    table = VersionTable(store, app_name)

    @router.get("/versions", response_model=VersionListOut, tags=["versions"])
    async def list_versions() -> VersionListOut:
        """The app's versions: runs by status, the live workers serving each, waiting runs."""
        return VersionListOut(versions=[VersionOut(**v.describe()) for v in await table.report()])

    @router.post(
        "/versions/{version}/drain",
        response_model=VersionChangeOut,
        tags=["versions"],
        responses=_ERRORS,
    )
    async def drain(version: VersionName, body: VersionActionIn) -> VersionChangeOut:
        """Drains a version: its workers start no new run, its runs finish. Audited; safe twice."""
        changed = await table.drain(version, by=body.by, reason=body.reason)
        return VersionChangeOut(version=version, drained=True, changed=changed)

    @router.post(
        "/versions/{version}/undrain",
        response_model=VersionChangeOut,
        tags=["versions"],
        responses=_ERRORS,
    )
    async def undrain(version: VersionName, body: VersionActionIn) -> VersionChangeOut:
        """Lets a drained version take new runs again. Audited; safe to call twice."""
        changed = await table.undrain(version, by=body.by, reason=body.reason)
        return VersionChangeOut(version=version, drained=False, changed=changed)

    @router.post(
        "/versions/{version}/move",
        response_model=MoveOut,
        tags=["versions"],
        responses=_ERRORS,
    )
    async def move(version: VersionName, body: MoveIn) -> MoveOut:
        """Moves a retired version's open runs to a newer version. Audited (one line)."""
        moved = await table.move(version, body.to, by=body.by, reason=body.reason)
        return MoveOut(version=version, to=body.to, moved=moved)

    @router.post(
        "/versions/{version}/abandon",
        response_model=AbandonOut,
        tags=["versions"],
        responses=_ERRORS,
    )
    async def abandon(version: VersionName, body: AbandonIn) -> AbandonOut:
        """Cancels every open run of a retired version, each as an audited operator cancel."""
        cancelled = await abandon_version(table, version, by=body.by, reason=body.reason)
        return AbandonOut(version=version, cancelled=cancelled)
