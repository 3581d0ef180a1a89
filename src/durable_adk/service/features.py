"""The operations and routes of long-running jobs, sagas, event repairs and the data
lifecycle (purge, forget a user: :mod:`durable_adk.lifecycle`), and the job webhook.

Jobs (:mod:`durable_adk.effect_tables.jobs`) and sagas
(:mod:`durable_adk.effect_tables.sagas`) keep their own ledgers; this module
only reads them for operators and passes a job's completion to
:meth:`~durable_adk.effect_tables.jobs.JobTable.complete`, whose conditional
update makes the first terminal result win (a duplicate or late completion
changes nothing and is still answered 200).

A session's unreadable events (stored rows the reader cannot parse, see
:mod:`durable_adk.adk.eventlog.unreadable`) are listed with their past
repairs, and an operator repairs one (:mod:`durable_adk.adk.services.repairs`).

The webhook (``POST /webhooks/jobs``) is authenticated by its HMAC signature
(:mod:`durable_adk.webhooks`), not by the bearer token, and exists only when
the worker has a webhook secret. Every refusal (bad signature, stale
timestamp, malformed body, unknown job) happens before anything is written.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from enum import StrEnum
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, FastAPI, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from durable_adk import errors, webhooks
from durable_adk.a2a_tables.outbox import PushOutbox
from durable_adk.adk.services.repairs import (
    EventRepair,
    repair_event,
    repairs_of,
    unreadable_events,
)
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.effect_tables.jobs import Job, JobNotFound, JobState, JobTable
from durable_adk.effect_tables.sagas import SagaLedger, SagaStatus
from durable_adk.lifecycle import RetentionPolicy, forget_user, purge
from durable_adk.metrics import Metrics
from durable_adk.service.guards import error_response
from durable_adk.service.ops import MAX_PAGE
from durable_adk.service.schemas import ID_PATTERN, ErrorOut, ListOut, Reason, Who
from durable_adk.store.base import Store
from durable_adk.store.rotation import key_status, rotate

JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@=+-]{0,255}$"
"""Job ids the API accepts (business identities such as ``report:2026-Q3:EMEA``)."""

Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="Most records returned.")]
JobId = Annotated[str, Path(pattern=JOB_ID_PATTERN, description="The job.")]
UserPath = Annotated[str, Path(pattern=ID_PATTERN, description="The session's user.")]
SessionPath = Annotated[str, Path(pattern=ID_PATTERN, description="The session.")]
EventPath = Annotated[str, Path(min_length=1, max_length=256, description="The event's id.")]

E = TypeVar("E", bound=StrEnum)

_WEBHOOK_CODES: tuple[tuple[type[webhooks.WebhookError], str], ...] = (
    (webhooks.BadSignature, "bad_signature"),
    (webhooks.StaleTimestamp, "stale_timestamp"),
    (webhooks.UnknownJob, "not_found"),
    (webhooks.MalformedBody, "malformed_body"),
    (webhooks.TooDeep, "payload_too_deep"),
    (webhooks.TooLarge, "payload_too_large"),
)


class CompleteJobIn(BaseModel):
    """A job's result, reported by an operator."""

    model_config = ConfigDict(extra="forbid")

    state: JobState
    result: Any = None


class CompletionOut(BaseModel):
    """What a completion did: ``changed`` is false for a duplicate or late result.

    ``state`` and ``result`` are what the job kept: the first terminal
    result's, whichever completion that was, so the loser of a race learns
    what won.
    """

    job_id: str
    state: str
    changed: bool
    result: Any = None


def _plain(record: Any) -> dict[str, Any]:
    """A record as JSON-ready values (enums as their names)."""
    return {k: (str(v) if isinstance(v, StrEnum) else v) for k, v in asdict(record).items()}


def _member(kind: type[E], value: str, name: str) -> E:
    """``value`` as a member of ``kind``; an unknown one is bad input naming ``name``."""
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(m.value for m in kind)
        raise errors.InvalidArgument(f"unknown {name} {value!r}: use {choices}") from None


def completion_outcome(changed: bool, state: JobState) -> str:
    """The job-completions metric's label: applied, late (after expiry) or duplicate."""
    if changed:
        return "applied"
    return "late" if state is JobState.EXPIRED else "duplicate"


async def list_jobs(store: Store, *, state: str | None, limit: int) -> ListOut:
    """Jobs, newest first, optionally of one state.

    Raises:
        InvalidArgument: An unknown state (the message lists the states).
    """
    chosen = _member(JobState, state, "state") if state else None
    jobs = await JobTable(store).list_jobs(state=chosen, limit=limit)
    return ListOut(available=True, items=[_plain(j) for j in jobs])


async def complete_job(
    store: Store, job_id: str, *, state: str, result: Any, metrics: Metrics | None = None
) -> dict[str, Any]:
    """Ends a job with its result (the first terminal result wins).

    Raises:
        NotFound: No such job (nothing was written).
        InvalidArgument: A state other than SUCCEEDED, FAILED or CANCELLED.
    """
    try:
        done = await JobTable(store).complete(job_id, state, result)
    except JobNotFound as exc:
        raise errors.NotFound(str(exc)) from exc
    if metrics is not None:
        metrics.job_completion(completion_outcome(done.changed, done.job.state))
    return {
        "job_id": job_id,
        "state": done.job.state.value,
        "changed": done.changed,
        "result": done.job.result,
    }


class UnreadableOut(BaseModel):
    """A stored event the reader cannot parse (kept in the log as it was stored)."""

    seq: int
    event_id: str
    invocation_id: str
    author: str
    reason: str


class RepairOut(BaseModel):
    """A repair of a stored event, as audited (``original`` is kept in the store)."""

    seq: int
    event_id: str
    action: str
    actor: str
    reason: str | None
    replacement: dict[str, Any]
    original_chars: int
    created_at: float


class SessionRepairsOut(BaseModel):
    """A session's unreadable events and the repairs of its events, newest first."""

    app_name: str
    user_id: str
    session_id: str
    unreadable: list[UnreadableOut]
    repairs: list[RepairOut]


class RepairIn(BaseModel):
    """Repair an unreadable event: drop its content (the default) or replace it."""

    model_config = ConfigDict(extra="forbid")

    by: Who
    reason: Reason
    replacement: dict[str, Any] | None = None


class RepairDoneOut(BaseModel):
    """What a repair did."""

    repair: RepairOut
    message: str


def _repair_out(done: EventRepair) -> RepairOut:
    return RepairOut(
        seq=done.seq,
        event_id=done.event_id,
        action=done.action,
        actor=done.actor,
        reason=done.reason,
        replacement=json.loads(done.replacement),
        original_chars=len(done.original),
        created_at=done.created_at,
    )


async def session_repairs(
    sessions: DurableSessionService, *, app_name: str, user_id: str, session_id: str
) -> dict[str, Any]:
    """A session's unreadable events and its repairs (``SessionRepairsOut`` as JSON).

    Raises:
        NotFound: No such session.
    """
    key = {"app_name": app_name, "user_id": user_id, "session_id": session_id}
    found = await unreadable_events(sessions, **key)
    done = await repairs_of(sessions, **key, limit=MAX_PAGE)
    return SessionRepairsOut(
        **key,
        unreadable=[UnreadableOut.model_validate(u, from_attributes=True) for u in found],
        repairs=[_repair_out(r) for r in done],
    ).model_dump()


async def repair_session_event(
    sessions: DurableSessionService,
    *,
    app_name: str,
    user_id: str,
    session_id: str,
    event_id: str,
    by: str,
    reason: str,
    replacement: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Repairs an unreadable event (``RepairDoneOut`` as JSON); see :func:`repair_event`."""
    done = await repair_event(
        sessions,
        app_name=app_name,
        user_id=user_id,
        session_id=session_id,
        event_id=event_id,
        by=by,
        reason=reason,
        replacement=replacement,
    )
    what = "dropped its unreadable content" if done.action == "drop" else "replaced it"
    return RepairDoneOut(
        repair=_repair_out(done),
        message=(
            f"event {event_id} (#{done.seq}) of session {session_id}: {what}; the original is "
            "kept in the audit trail. Retry the runs parked on it (durable-adk runs retry)"
        ),
    ).model_dump()


def add_repair_routes(router: APIRouter, sessions: DurableSessionService, app_name: str) -> None:
    """Adds the routes that list and repair a session's unreadable events."""

    @router.get(
        "/users/{user_id}/sessions/{session_id}/unreadable",
        response_model=SessionRepairsOut,
        tags=["sessions"],
        responses={404: {"model": ErrorOut, "description": "Unknown session."}},
    )
    async def unreadable_route(user_id: UserPath, session_id: SessionPath) -> SessionRepairsOut:
        """The session's events the reader cannot parse, and the repairs of its events."""
        found = await session_repairs(
            sessions, app_name=app_name, user_id=user_id, session_id=session_id
        )
        return SessionRepairsOut.model_validate(found)

    @router.post(
        "/users/{user_id}/sessions/{session_id}/events/{event_id}/repair",
        response_model=RepairDoneOut,
        tags=["sessions"],
        responses={
            404: {"model": ErrorOut, "description": "Unknown session or event."},
            409: {
                "model": ErrorOut,
                "description": "The event is readable, or was repaired meanwhile; nothing changed.",
            },
        },
    )
    async def repair_route(
        user_id: UserPath, session_id: SessionPath, event_id: EventPath, body: RepairIn
    ) -> RepairDoneOut:
        """Writes a readable stand-in over an unreadable event, audited (the original is kept).

        Without ``replacement`` the content is dropped: the calls and answers
        it held are kept by id and name, each answer an error. With it, the
        given event (its id, invocation, author and timestamp are the stored
        ones; its session state delta must be the stored one) is written.
        """
        done = await repair_session_event(
            sessions,
            app_name=app_name,
            user_id=user_id,
            session_id=session_id,
            event_id=event_id,
            by=body.by,
            reason=body.reason,
            replacement=body.replacement,
        )
        return RepairDoneOut.model_validate(done)


async def list_sagas(store: Store, *, status: str | None, limit: int) -> ListOut:
    """Sagas, newest first, optionally of one status.

    Raises:
        InvalidArgument: An unknown status (the message lists the statuses).
    """
    chosen = _member(SagaStatus, status, "status") if status else None
    sagas = await SagaLedger(store).list_sagas(status=chosen, limit=limit)
    return ListOut(available=True, items=[_plain(s) for s in sagas])


PUSH_STATUSES = ("PENDING", "SENT", "DEAD")
"""The states of an A2A push notification in the outbox."""


async def list_pushes(store: Store, app_name: str, *, status: str | None, limit: int) -> ListOut:
    """The A2A push notifications of ``app_name``, oldest first (``status``: one state only).

    Raises:
        InvalidArgument: An unknown status (the message lists the states).
    """
    if status is not None and status.upper() not in PUSH_STATUSES:
        raise errors.InvalidArgument(
            f"status takes {', '.join(PUSH_STATUSES)} (or none for every one), not {status!r}"
        )
    pushes = await PushOutbox(store, app_name).list_pushes(
        status=None if status is None else status.upper(), limit=limit
    )
    return ListOut(available=True, items=[asdict(p) for p in pushes])


async def keys_status(store: Store, metrics: Metrics | None = None) -> dict[str, Any]:
    """Stored values on each key (``primary``, ``keys``: id, values, per column).

    Also sets the ``durable_adk_encrypted_values`` gauge of ``metrics``.
    """
    found = await key_status(store)
    keys: list[dict[str, Any]] = [
        {
            "key_id": key_id,
            "values": sum(n for col, n in by_col.items() if col != "user_keys"),
            "user_keys": by_col.get("user_keys", 0),
            "columns": {col: n for col, n in sorted(by_col.items()) if col != "user_keys"},
        }
        for key_id, by_col in sorted(found.items())
    ]
    if metrics is not None:
        metrics.set_values_by_key({str(k["key_id"]): int(k["values"]) for k in keys})
    primary = store.codec.keyring.primary if store.codec is not None else None
    return {"primary": primary, "keys": keys}


async def keys_rotate(
    store: Store, *, batch: int = 200, metrics: Metrics | None = None
) -> dict[str, Any]:
    """Re-seals every clear or older-key value under the first key; what it did, then the status."""
    report = await rotate(store, batch=batch)
    return {
        "primary": report.primary,
        "moved": report.total,
        "moved_by_column": report.moved,
        "raced": report.raced,
        "unreadable": report.unreadable,
        "rewrapped_user_keys": report.rewrapped,
        "errors": report.errors,
        "status": await keys_status(store, metrics),
    }


class RotateIn(BaseModel):
    """``POST /v1/keys/rotate``: how many rows each batch reads."""

    model_config = ConfigDict(extra="forbid")
    batch: Annotated[int, Field(ge=1, le=10000)] = 200


Elsewhere = Callable[[Job], Awaitable[errors.VersionElsewhere | None]]
"""Whether a job's answer waits for a worker of another version (the error to give), or None."""


def add_routes(
    router: APIRouter, store: Store, metrics: Metrics, *, elsewhere: Elsewhere | None = None
) -> None:
    """Adds the jobs and sagas routes to the guarded router.

    ``elsewhere`` (the worker's) turns a completion recorded for a call of an
    invocation this worker's version does not continue into 409
    ``version_elsewhere``: the result is kept, the caller is told who goes on.
    """

    @router.get("/jobs", response_model=ListOut, tags=["jobs"])
    async def jobs_route(state: JobState | None = None, limit: Limit = 100) -> ListOut:
        """Long-running jobs, newest first, optionally of one state."""
        return await list_jobs(store, state=state.value if state else None, limit=limit)

    @router.post(
        "/jobs/{job_id}/complete",
        response_model=CompletionOut,
        tags=["jobs"],
        responses={
            404: {"model": ErrorOut, "description": "Unknown job."},
            409: {
                "model": ErrorOut,
                "description": "version_elsewhere: the result is recorded; its call is "
                "continued by a worker of another app version.",
            },
            413: {"model": ErrorOut, "description": "A result over max_payload_bytes."},
            422: {
                "model": ErrorOut,
                "description": "A result nested deeper than max_payload_depth.",
            },
        },
    )
    async def complete_route(job_id: JobId, body: CompleteJobIn) -> CompletionOut:
        """Ends a job with its result, as a webhook would; the first result wins.

        409 ``version_elsewhere`` when the result was recorded for a call of an
        invocation of an app version this worker does not serve: a worker of
        that version resumes it.
        """
        done = await complete_job(
            store, job_id, state=body.state.value, result=body.result, metrics=metrics
        )
        if elsewhere is not None and done["changed"]:
            job = await JobTable(store).get(job_id)
            refusal = None if job is None else await elsewhere(job)
            if refusal is not None:
                raise refusal
        return CompletionOut.model_validate(done)

    @router.get("/keys", tags=["keys"])
    async def keys_route() -> dict[str, Any]:
        """Stored values on each encryption key (``clear``: not encrypted)."""
        return await keys_status(store, metrics)

    @router.post("/keys/rotate", tags=["keys"])
    async def rotate_route(body: RotateIn | None = None) -> dict[str, Any]:
        """Re-encrypts every value not on this worker's first key, in batches; runs go on."""
        return await keys_rotate(store, batch=(body or RotateIn()).batch, metrics=metrics)

    @router.get("/a2a/pushes", response_model=ListOut, tags=["a2a"])
    async def pushes_route(
        app_name: Annotated[str, Query(min_length=1, max_length=256)],
        status: Annotated[str | None, Query(max_length=16)] = None,
        limit: Limit = 100,
    ) -> ListOut:
        """The A2A push notifications of an app (PENDING, SENT, DEAD; none: every one)."""
        return await list_pushes(store, app_name, status=status, limit=limit)

    @router.get("/sagas", response_model=ListOut, tags=["sagas"])
    async def sagas_route(status: SagaStatus | None = None, limit: Limit = 100) -> ListOut:
        """Sagas, newest first, optionally of one status."""
        return await list_sagas(store, status=status.value if status else None, limit=limit)


def mount_webhooks(app: FastAPI, store: Store, metrics: Metrics, secret: str | None) -> None:
    """Adds ``POST /webhooks/jobs`` when the worker has a webhook secret."""
    if not secret:
        return
    jobs = JobTable(store)

    @app.post(
        "/webhooks/jobs",
        response_model=CompletionOut,
        tags=["jobs"],
        responses={
            code: {"model": ErrorOut, "description": text}
            for code, text in (
                (400, "Malformed completion."),
                (401, "Bad signature or stale timestamp."),
                (404, "Unknown job."),
                (413, "Body too large, or a result over max_payload_bytes."),
                (422, "A result nested deeper than max_payload_depth."),
            )
        },
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "required": ["job_id", "state", "result"],
                            "properties": {
                                "job_id": {"type": "string"},
                                "state": {"enum": ["SUCCEEDED", "FAILED", "CANCELLED"]},
                                "result": {},
                            },
                        }
                    }
                },
            }
        },
    )
    async def job_webhook(request: Request) -> JSONResponse:
        """A signed job completion (``X-Durable-Timestamp``, ``X-Durable-Signature``).

        The signature is HMAC-SHA256 over ``"<timestamp>.<raw body>"`` with the
        shared secret; see :mod:`durable_adk.webhooks`.
        """
        body = await request.body()
        try:
            done = await webhooks.handle_job_webhook(
                jobs, secret, dict(request.headers), body, time.time()
            )
        except webhooks.WebhookError as exc:
            code = next((c for kind, c in _WEBHOOK_CODES if isinstance(exc, kind)), "bad_request")
            return error_response(exc.status, code, str(exc))
        metrics.job_completion(completion_outcome(done.changed, done.state))
        return JSONResponse(done.body(), status_code=done.status)


class PurgeIn(BaseModel):
    """A purge of the worker's app: under a policy given here, or the worker's own."""

    model_config = ConfigDict(extra="forbid")

    retention: str | None = None
    """The policy as ``durable-adk purge --retention`` takes it (None: the worker's)."""
    dry_run: bool = False
    batch: int | None = None
    duty: float | None = None
    """The share of the time the purge spends in its statements (None: the policy's)."""


class ForgetIn(BaseModel):
    """Who forgets a user, why, where, and whether the user's runs under way are cancelled."""

    model_config = ConfigDict(extra="forbid")

    by: Who
    reason: Reason | None = None
    app: str | None = None
    """The app (None: the worker's own; ``*``: every app on the database)."""
    cancel_live: bool = False


def add_data_routes(
    router: APIRouter,
    store: Store,
    app_name: str,
    metrics: Metrics,
    retention: RetentionPolicy | None,
) -> None:
    """Adds the data lifecycle's routes (docs/data.md): purge and forget a user."""

    @router.post("/purge", tags=["data"], responses={422: {"model": ErrorOut}})
    async def purge_app(body: PurgeIn) -> dict[str, Any]:
        """Purges what a retention policy lets go of the app (or, dry, says what would go)."""
        given: dict[str, Any] = {}
        if body.batch is not None:
            given["batch"] = body.batch
        if body.duty is not None:
            given["duty"] = body.duty
        if body.retention is not None:
            policy = RetentionPolicy.parse(body.retention, **given)
        elif retention is not None:
            policy = dataclasses.replace(retention, **given) if given else retention
        else:
            raise errors.InvalidArgument(
                "this worker has no retention policy (durable-adk serve --retention): "
                "give one in 'retention', e.g. done=30d"
            )
        report = await purge(
            store, app_name, policy, dry_run=body.dry_run, metrics=metrics, must_exist=False
        )
        return report.as_dict()

    @router.post(
        "/users/{user_id}/forget",
        tags=["data"],
        responses={409: {"model": ErrorOut}, 422: {"model": ErrorOut}},
    )
    async def forget(
        user_id: Annotated[str, Path(min_length=1, max_length=1024)], body: ForgetIn
    ) -> dict[str, Any]:
        """Deletes the user's data in every table of the app (or every app: ``app: "*"``).

        Refused (409) while the user has runs under way, unless ``cancel_live``.
        """
        scope = app_name if body.app is None else (None if body.app == "*" else body.app)
        report = await forget_user(
            store,
            user_id,
            app_name=scope,
            by=body.by,
            reason=body.reason,
            cancel_live=body.cancel_live,
            metrics=metrics,
        )
        return report.as_dict()
