"""The worker's HTTP API: runs, the event stream, reconnect and operations.

Every route under ``/v1`` and ``/metrics`` needs the bearer token; without it
the answer is 401 and carries no data. ``/healthz``, the dashboard's static
page (which asks for the token itself) and the OpenAPI spec are open. Request
bodies are capped (413). Errors are ``{"error": {"code", "message"}}``.

Sessions named in paths belong to the app this worker serves. Reads come from
the store, so every worker answers for every run, including one in progress on
another worker (see :mod:`durable_adk.service.follow`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Depends, FastAPI, Header, Path, Query, Response
from fastapi.responses import StreamingResponse
from google.genai import types
from pydantic import ValidationError

import durable_adk
from durable_adk import errors
from durable_adk.adk.eventlog.classify import check_answers
from durable_adk.effect_tables.jobs import Job
from durable_adk.faults import crash_point
from durable_adk.ids import IDEMPOTENCY_KEY_PATTERN, run_id_for_key
from durable_adk.service import dashboard, features, schedule_routes, version_routes
from durable_adk.service.follow import follow, sse
from durable_adk.service.guards import (
    BodyLimit,
    ViewReads,
    bearer_guard,
    install_error_handlers,
)
from durable_adk.service.ops import MAX_PAGE, SessionKey
from durable_adk.service.paths import segment
from durable_adk.service.schemas import (
    CALL_ID_PATTERN,
    ID_PATTERN,
    AbandonIn,
    ActionIn,
    ActionListOut,
    AnswerIn,
    AnswerOut,
    AppsOut,
    DeadLetterListOut,
    ErrorOut,
    EventsOut,
    HealthOut,
    InterruptListOut,
    OutcomeOut,
    ReadyOut,
    ResolveIn,
    RunCountsOut,
    RunDetailOut,
    RunListOut,
    RunOut,
    StartRunIn,
    StartRunOut,
    StatsOut,
    action_out,
    detail_out,
    events_out,
    interrupt_out,
    letter_out,
    outcome_out,
    run_out,
)
from durable_adk.service.worker import Worker
from durable_adk.tables.ledger import RunStatus

UserId = Annotated[str, Path(pattern=ID_PATTERN, description="The session's user.")]
SessionId = Annotated[str, Path(pattern=ID_PATTERN, description="The session.")]
RunId = Annotated[str, Path(pattern=ID_PATTERN, description="The run.")]
CallId = Annotated[
    str,
    Path(
        pattern=CALL_ID_PATTERN,
        description="The interrupt's call id, percent-encoded as one segment (a '/' in it may "
        "also be sent plain).",
    ),
]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="Most records returned.")]
AppName = Annotated[str | None, Query(pattern=ID_PATTERN, description="Only this app's records.")]
After = Annotated[
    int, Query(ge=0, le=2**62, description="Only events with a greater sequence number.")
]

_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut, "description": text}
    for code, text in (
        (400, "Malformed request (a body that cannot be parsed)."),
        (401, "Missing or wrong bearer token."),
        (413, "Request body too large."),
        (422, "Invalid request."),
    )
}
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorOut, "description": "Unknown."}}


def message_of(body: StartRunIn, max_chars: int) -> types.Content:
    """The user's message as genai Content, or InvalidArgument.

    Only text and media parts are accepted, except that a run continuing an
    invocation (``invocation_id``) is made only of function responses (checked
    against the session by :func:`check_answers`). Function calls are never
    a client's.
    """
    if (body.message is None) == (body.content is None):
        raise errors.InvalidArgument("give exactly one of 'message' and 'content'")
    if body.invocation_id is not None:
        return _answers_of(body)
    if body.message is not None:
        if len(body.message) > max_chars or "\x00" in body.message:
            raise errors.InvalidArgument(f"message must be 1..{max_chars} characters, no NUL")
        return types.Content(role="user", parts=[types.Part(text=body.message)])
    try:
        content = types.Content.model_validate(body.content)
    except ValidationError as exc:
        raise errors.InvalidArgument(f"content is not a genai Content: {exc}") from None
    if content.role not in (None, "user") or not content.parts:
        raise errors.InvalidArgument("content must have role 'user' and at least one part")
    answers = [p.function_response for p in content.parts if p.function_response]
    if answers:
        raise errors.InvalidArgument(answers_refusal(answers))
    for part in content.parts:
        if not (part.text or part.inline_data or part.file_data) or part.function_call:
            raise errors.InvalidArgument("each part must be text or media, without function calls")
    content.role = "user"
    return content


def answers_refusal(
    answers: list[types.FunctionResponse], invocations: dict[str, str] | None = None
) -> str:
    """Why a new run's message made of function responses is refused, and where answers go.

    A function response answers a paused call; it does not start a run. The
    answer goes to the same route with the paused invocation's id
    (``invocation_id``), or to the interrupts inbox.

    Args:
        answers: The message's function responses.
        invocations: The invocation of each answered call, where the session
            shows it (call id to invocation id).
    """
    ids = [a.id or "?" for a in answers]
    known = sorted({invocations[i] for i in ids if invocations and i in invocations})
    where = (
        f"'invocation_id': {known[0]!r} (the paused invocation of {', '.join(map(repr, ids))})"
        if len(known) == 1
        else "'invocation_id': the id of the paused invocation whose call it answers"
    )
    return (
        "a message of function responses answers a paused call; it does not start a run: "
        "send the same body to POST /v1/users/{user_id}/sessions/{session_id}/runs with "
        f"{where}, or answer it at POST /v1/interrupts/{{call_id}} (nothing was changed)"
    )


def _answers_of(body: StartRunIn) -> types.Content:
    """The function responses of a run that continues an invocation."""
    if body.content is None:
        raise errors.InvalidArgument(
            "a run continuing an invocation takes 'content' with function_response parts"
        )
    try:
        content = types.Content.model_validate(body.content)
    except ValidationError as exc:
        raise errors.InvalidArgument(f"content is not a genai Content: {exc}") from None
    if content.role not in (None, "user") or not content.parts:
        raise errors.InvalidArgument("content must have role 'user' and at least one part")
    seen: set[str] = set()
    for part in content.parts:
        answer = part.function_response
        if answer is None or part.function_call or part.text or part.inline_data:
            raise errors.InvalidArgument(
                "a run continuing an invocation is made only of function_response parts"
            )
        if not answer.id or not answer.name:
            raise errors.InvalidArgument("each function_response needs the call's id and name")
        if answer.id in seen:
            raise errors.InvalidArgument(f"call {answer.id!r} is answered twice")
        seen.add(answer.id)
    content.role = "user"
    return content


def create_app(worker: Worker) -> FastAPI:
    """The HTTP app of one worker (the caller runs ``worker.running()``).

    The bearer token and the body limit come from ``worker.settings``.

    Args:
        worker: The worker it fronts.
    """
    token = worker.settings.token
    app = FastAPI(
        title="durable-adk worker",
        version=durable_adk.__version__,
        description=__doc__,
        docs_url=None,
        redoc_url=None,
    )
    install_error_handlers(app)
    guarded = APIRouter(
        prefix="/v1", dependencies=[Depends(bearer_guard(token))], responses=_ERRORS
    )
    ops = worker.ops
    settings = worker.settings

    def key(user_id: str, session_id: str) -> SessionKey:
        return SessionKey(worker.app_name, user_id, session_id)

    async def _name_the_invocation(user_id: str, session_id: str, body: StartRunIn) -> None:
        """Refuses answers sent without ``invocation_id`` naming the invocation they answer.

        Only reads the session; a message of anything else passes through.
        """
        if body.invocation_id is not None or body.content is None:
            return
        try:
            content = types.Content.model_validate(body.content)
        except ValidationError:
            return
        answers = [p.function_response for p in content.parts or () if p.function_response]
        if not answers:
            return
        stored = await worker.sessions.get_session(
            app_name=worker.app_name, user_id=user_id, session_id=session_id
        )
        wanted = {a.id for a in answers if a.id}
        invocations = {
            call.id: event.invocation_id
            for event in (stored.events if stored else ())
            for call in event.get_function_calls()
            if call.id in wanted
        }
        raise errors.InvalidArgument(answers_refusal(answers, invocations))

    @app.get("/healthz", response_model=HealthOut, tags=["worker"])
    async def healthz() -> HealthOut:
        """This worker: its id, its app, whether it drains."""
        return HealthOut.model_validate(worker.describe())

    @app.get(
        "/readyz",
        response_model=ReadyOut,
        tags=["worker"],
        responses={503: {"model": ReadyOut, "description": "not ready: see reason"}},
    )
    async def readyz(response: Response) -> ReadyOut:
        """Whether this worker can take work: 503 while it drains or its store is
        unreachable or read-only, 200 once a write works (a readiness probe;
        ``/healthz`` is the liveness probe)."""
        ready, reason = await worker.readiness()
        response.status_code = 200 if ready else 503
        return ReadyOut(worker_id=worker.worker_id, ready=ready, reason=reason)

    @app.get(
        "/metrics",
        tags=["worker"],
        dependencies=[Depends(bearer_guard(token))],
        responses={**_ERRORS, 200: {"content": {"text/plain": {}}}},
    )
    async def metrics() -> Response:
        """Prometheus metrics of this worker (runs by status sampled from the ledger)."""
        await worker.refresh_gauges()
        return Response(
            worker.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    @guarded.post(
        "/users/{user_id}/sessions/{session_id}/runs",
        status_code=202,
        response_model=StartRunOut,
        tags=["runs"],
        responses={
            200: {
                "model": StartRunOut,
                "description": "Sent before under this Idempotency-Key: the run it recorded "
                "(nothing recorded now).",
            },
            503: {"model": ErrorOut, "description": "Draining: use another worker."},
        },
    )
    async def start_run(
        user_id: UserId,
        session_id: SessionId,
        body: StartRunIn,
        response: Response,
        idempotency_key: Annotated[
            str | None,
            Header(
                pattern=IDEMPOTENCY_KEY_PATTERN,
                description="Names this request: sent again with the same key (its answer "
                "was lost), it records nothing and answers 200 with the run the first one "
                "recorded (header Idempotent-Replayed: true); the same key with another "
                "session or message is refused (422).",
            ),
        ] = None,
    ) -> StartRunOut:
        """Starts a run on a session (created if missing); follow it at ``events_url``.

        With ``invocation_id``, continues that paused invocation with the
        function responses in ``content`` (404 for an unknown invocation, 422
        for an unknown call id or a wrong name, 409 for a call already
        answered; nothing is written then). Function responses without
        ``invocation_id`` are refused (422): the error names the invocation
        they answer (when the session shows it) and the routes that take
        answers (this one with ``invocation_id``, ``POST /v1/interrupts/{call_id}``).

        With an ``Idempotency-Key``, a client that lost the answer sends the
        same request again: the run the first send recorded comes back (200),
        nothing more is recorded or driven.
        """
        try:
            message = message_of(body, settings.max_message_chars)
        except errors.InvalidArgument:
            await _name_the_invocation(user_id, session_id, body)
            raise
        session = key(user_id, session_id)
        run_id = (
            None
            if idempotency_key is None
            else run_id_for_key(worker.app_name, user_id, idempotency_key)
        )
        try:
            after = await ops.last_seq(session)
        except errors.NotFound:
            if body.invocation_id is not None:
                raise
            after = 0
        # A continuation sent again finds its call answered (by itself): the
        # check is for a first send only. A new run's replay is found by the submit.
        if body.invocation_id is not None and (
            run_id is None or await ops.ledger.get(run_id) is None
        ):
            stored = await worker.sessions.get_session(
                app_name=worker.app_name, user_id=user_id, session_id=session_id
            )
            check_answers(list(stored.events) if stored else [], body.invocation_id, message)
        run = await worker.start_run(
            user_id=user_id,
            session_id=session_id,
            message=message,
            invocation_id=body.invocation_id,
            streaming=body.streaming,
            run_id=run_id,
        )
        crash_point("api.after_submit")  # recorded, not answered: the client's retry's case
        if run.replayed:
            response.status_code = 200
            response.headers["Idempotent-Replayed"] = "true"
            after = await ops.invocation_after(session, run.invocation_id)
        if body.invocation_id is not None and not run.replayed:
            await ops.ledger.record_action(
                run.run_id,
                action="answer",
                by=body.by or "api",
                detail={
                    "invocation_id": body.invocation_id,
                    "calls": [
                        p.function_response.id for p in message.parts or () if p.function_response
                    ],
                },
            )
        if body.invocation_id is not None and not worker.serves(run):
            raise worker.elsewhere(run.app_version, f"the answer (run {run.run_id})")
        return StartRunOut(
            run=run_out(run),
            after_seq=after,
            events_url=(
                f"/v1/users/{segment(user_id)}/sessions/{segment(session_id)}/stream"
                f"?after={after}&run_id={quote(run.run_id, safe='')}"
            ),
        )

    @guarded.get(
        "/users/{user_id}/sessions/{session_id}/events",
        response_model=EventsOut,
        tags=["sessions"],
        responses=_NOT_FOUND,
    )
    async def session_events(
        user_id: UserId, session_id: SessionId, after: After = 0, limit: Limit = 500
    ) -> EventsOut:
        """A slice of the session's log after a sequence number (JSON)."""
        session = key(user_id, session_id)
        await ops.last_seq(session)
        events = await ops.events_after(session, after, limit=limit)
        return EventsOut(events=events_out(events), last_seq=events[-1].seq if events else after)

    @guarded.get(
        "/users/{user_id}/sessions/{session_id}/stream",
        tags=["sessions"],
        responses={**_NOT_FOUND, 200: {"content": {"text/event-stream": {}}}},
    )
    async def session_stream(
        user_id: UserId,
        session_id: SessionId,
        after: After = 0,
        run_id: Annotated[str | None, Query(pattern=ID_PATTERN)] = None,
        last_event_id: Annotated[str | None, Header(max_length=32)] = None,
    ) -> StreamingResponse:
        """Server-Sent Events of the session from a sequence number, live, until its runs end.

        Reconnect with ``Last-Event-ID`` (or ``after``) on any worker: the log
        is read from the store. The stream ends with an ``end`` event. A run
        driven with streaming (``streaming`` in its body, or the worker's
        ``--streaming``) also sends ``partial`` events, live from this
        worker's drives: no ``id``, never stored, ``{"partial": true,
        "event": {...}}``.
        """
        session = key(user_id, session_id)
        await ops.last_seq(session)
        if run_id is not None:
            run = await ops.get_run(run_id)
            if (run.app_name, run.user_id, run.session_id) != (
                session.app_name,
                user_id,
                session_id,
            ):
                raise errors.NotFound(f"run {run_id!r} is not a run of session {session_id!r}")
        if last_event_id is not None and last_event_id.isdigit():
            after = max(after, int(last_event_id))

        async def body() -> AsyncIterator[str]:
            # The partial events of this worker's drives of the session come live
            # from the runner; the stored ones from the log (any worker's).
            with worker.runner.live.subscribe((worker.app_name, user_id, session_id)) as live:
                async for item in follow(
                    ops,
                    session,
                    after=after,
                    run_id=run_id,
                    poll=settings.poll_interval,
                    keepalive=settings.keepalive,
                    stop=worker.draining,
                    live=live,
                ):
                    yield sse(item)

        return StreamingResponse(
            body(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @guarded.get(
        "/users/{user_id}/sessions/{session_id}/runs",
        response_model=RunListOut,
        tags=["sessions"],
    )
    async def session_runs(
        user_id: UserId, session_id: SessionId, limit: Limit = 100
    ) -> RunListOut:
        """The session's runs, newest first."""
        runs = await ops.session_runs(key(user_id, session_id), limit=limit)
        return RunListOut(runs=[run_out(r) for r in runs])

    @guarded.get("/runs", response_model=RunListOut, tags=["operations"])
    async def list_runs(
        status: RunStatus | None = None, app_name: AppName = None, limit: Limit = 100
    ) -> RunListOut:
        """Runs of every app on the store (or of one), newest first, optionally of one status."""
        runs = await ops.list_runs(status=status, limit=limit, app_name=app_name)
        return RunListOut(runs=[run_out(r) for r in runs])

    @guarded.get("/runs-by-status", response_model=RunCountsOut, tags=["operations"])
    async def run_counts(app_name: AppName = None) -> RunCountsOut:
        """How many runs stand in each status (of every app, or of one)."""
        return RunCountsOut(counts=await ops.run_counts(app_name=app_name))

    @guarded.get("/apps", response_model=AppsOut, tags=["operations"])
    async def apps() -> AppsOut:
        """The apps with runs on this store, and the one this worker serves."""
        return AppsOut(serving=worker.app_name, apps=await ops.apps())

    @guarded.get("/actions", response_model=ActionListOut, tags=["operations"])
    async def actions(
        run_id: Annotated[str | None, Query(pattern=ID_PATTERN)] = None,
        app_name: AppName = None,
        limit: Limit = 100,
    ) -> ActionListOut:
        """The operators' audit trail, newest first, of one run, one app, or all."""
        found = await ops.actions(run_id=run_id, app_name=app_name, limit=limit)
        return ActionListOut(actions=[action_out(a) for a in found])

    @guarded.get(
        "/runs/{run_id}", response_model=RunDetailOut, tags=["operations"], responses=_NOT_FOUND
    )
    async def get_run(run_id: RunId) -> RunDetailOut:
        """One run with its classification, its events and its dead letters."""
        return detail_out(await ops.run_detail(run_id))

    @guarded.post(
        "/runs/{run_id}/retry",
        response_model=RunOut,
        tags=["operations"],
        responses={
            **_NOT_FOUND,
            409: {
                "model": ErrorOut,
                "description": "The run is not parked or failed, or it was abandoned "
                "(abandon is final); nothing changed.",
            },
        },
    )
    async def retry_run(run_id: RunId, body: ActionIn | None = None) -> RunOut:
        """Puts a parked (or failed) run back in its session's queue; a sweeper recovers it.

        An abandoned run is not retried (409: abandon is final). The optional
        body names who retries it and why (the audit trail says ``api``
        otherwise).
        """
        by = body.by if body else "api"
        return run_out(await ops.retry(run_id, by=by, reason=body.reason if body else None))

    _ACTION_ERRORS: dict[int | str, dict[str, Any]] = {
        **_NOT_FOUND,
        409: {"model": ErrorOut, "description": "The action does not apply to the run now."},
    }

    @guarded.post(
        "/runs/{run_id}/cancel",
        response_model=OutcomeOut,
        tags=["operations"],
        responses=_ACTION_ERRORS,
    )
    async def cancel_run(run_id: RunId, body: ActionIn) -> OutcomeOut:
        """Cancels a run: at once if it is queued, paused or parked (or its owner is dead);
        a running one is stopped by its owner at its next heartbeat.

        Safe to call twice: ``changed`` is false and ``message`` says where the run stands.
        """
        return outcome_out(await ops.cancel(run_id, by=body.by, reason=body.reason))

    @guarded.post(
        "/runs/{run_id}/resolve",
        response_model=OutcomeOut,
        tags=["operations"],
        responses=_ACTION_ERRORS,
    )
    async def resolve_run(run_id: RunId, body: ResolveIn) -> OutcomeOut:
        """Resolves a parked (or failed) run with the result of its unanswered call(s).

        The result is written as the calls' function responses and the run goes
        back in its session's queue: a worker of its app drives it on from there.
        Safe to call twice.
        """
        return outcome_out(
            await ops.resolve(
                run_id,
                by=body.by,
                reason=body.reason,
                result=body.result,
                results=body.results,
            )
        )

    @guarded.post(
        "/runs/{run_id}/abandon",
        response_model=OutcomeOut,
        tags=["operations"],
        responses=_ACTION_ERRORS,
    )
    async def abandon_run(run_id: RunId, body: AbandonIn) -> OutcomeOut:
        """Closes a parked (or failed) run as FAILED with the operator's reason; safe twice."""
        return outcome_out(await ops.abandon(run_id, by=body.by, reason=body.reason))

    @guarded.get("/interrupts", response_model=InterruptListOut, tags=["interrupts"])
    async def interrupts(
        app_name: AppName = None,
        session_id: Annotated[
            str | None, Query(pattern=ID_PATTERN, description="Only this session's.")
        ] = None,
        kind: Annotated[
            Literal["confirmation", "input", "long_running"] | None,
            Query(description="Only this kind."),
        ] = None,
        status: Annotated[
            Literal["OPEN", "ANSWERED", "EXPIRED", "CLOSED"] | None,
            Query(description="Only this status (default OPEN)."),
        ] = "OPEN",
        limit: Limit = 100,
    ) -> InterruptListOut:
        """The interrupts inbox: what paused runs wait on, across sessions, oldest first.

        Tool confirmations, requests for input and long-running calls; by
        default the open ones.
        """
        found = await ops.interrupts(
            status=status, app_name=app_name, session_id=session_id, kind=kind, limit=limit
        )
        return InterruptListOut(interrupts=[interrupt_out(i) for i in found])

    @guarded.post(
        "/interrupts/{call_id:path}",
        response_model=AnswerOut,
        tags=["interrupts"],
        responses=_ACTION_ERRORS,
    )
    async def answer_interrupt(call_id: CallId, body: AnswerIn) -> AnswerOut:
        """Answers an interrupt exactly once and continues its paused invocation.

        A confirmation takes ``decision`` approve or deny; an input or a
        long-running call a ``payload`` (or ``decision`` deny). 404 for an
        unknown call id, 409 when it was already answered, expired (its
        default outcome applied) or its run was cancelled, 422 for the wrong
        kind of answer: nothing is changed then. The answer is recorded with
        who gave it, and a run carrying it goes in the session's queue (this
        worker drives it at once when it serves the app); the paused run ends
        DONE with its invocation.
        """
        answered = await ops.answer(
            call_id,
            by=body.by,
            decision=body.decision,
            payload=body.payload,
            reason=body.reason,
            session_id=body.session_id,
            owner=worker.worker_id,
            lease=settings.lease,
        )
        if answered.run.owner == worker.worker_id:
            if not worker.serves(answered.run):
                await worker.hand_over(answered.run)
                raise worker.elsewhere(
                    answered.run.app_version, f"the answer (run {answered.run.run_id})"
                )
            if not worker.draining.is_set():
                worker.drive_queued(answered.run, answered.content, resume=True)
        return AnswerOut(
            interrupt=interrupt_out(answered.interrupt),
            run=run_out(answered.run),
            message=answered.message,
        )

    @guarded.get("/dead-letters", response_model=DeadLetterListOut, tags=["operations"])
    async def dead_letters(
        run_id: Annotated[str | None, Query(pattern=ID_PATTERN)] = None,
        app_name: AppName = None,
        limit: Limit = 100,
    ) -> DeadLetterListOut:
        """Dead letters, newest first, optionally of one run or of one app's runs."""
        letters = await ops.dead_letters(run_id=run_id, limit=limit, app_name=app_name)
        return DeadLetterListOut(dead_letters=[letter_out(d) for d in letters])

    @guarded.get("/stats", response_model=StatsOut, tags=["operations"])
    async def stats() -> StatsOut:
        """Totals over the whole store."""
        return StatsOut.model_validate(await ops.stats(), from_attributes=True)

    async def job_elsewhere(job: Job) -> errors.VersionElsewhere | None:
        """The refusal of a job result whose call a worker of another version continues."""
        if job.app_name != worker.app_name or not job.invocation_id:
            return None  # another app's job, or a call not attached yet
        found, version = await ops.ledger.version_of_invocation(
            app_name=job.app_name, invocation_id=job.invocation_id
        )
        if not found or worker.runner.path.serving.takes(version):
            return None
        return worker.elsewhere(version, f"the result of job {job.job_id}")

    features.add_routes(guarded, worker.store, worker.metrics, elsewhere=job_elsewhere)
    features.add_repair_routes(guarded, worker.sessions, worker.app_name)
    features.add_data_routes(
        guarded, worker.store, worker.app_name, worker.metrics, settings.retention
    )
    schedule_routes.add_routes(guarded, worker.store, worker.app_name)
    version_routes.add_routes(guarded, worker.store, worker.app_name)
    app.include_router(guarded)
    features.mount_webhooks(app, worker.store, worker.metrics, settings.webhook_secret)
    dashboard.add_routes(app)

    @app.get("/", include_in_schema=False)
    async def root() -> Response:
        return Response(status_code=307, headers={"Location": "/dashboard/"})

    app.add_middleware(ViewReads)
    app.add_middleware(BodyLimit, limit=worker.settings.max_body_bytes)
    return app


__all__ = ["answers_refusal", "create_app", "message_of"]
