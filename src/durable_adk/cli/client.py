"""One operations interface, two ways to reach it: the database, or a running worker.

The CLI's ``--db URL`` uses :class:`StoreOps` (reads the store directly, no
worker needed); ``--url http://...`` uses :class:`HttpOps` (the worker's
guarded API, with its bearer token). Both return the same JSON-shaped dicts
(the HTTP API's response models), so the CLI renders them one way. HTTP errors
come back as the library's errors, chosen by the response's error code.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

import httpx

from durable_adk import errors
from durable_adk.adk.runs.operators import abandon_version
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.lifecycle import RetentionPolicy, forget_user, known_apps, purge
from durable_adk.lifecycle.policy import DEFAULT_DUTY
from durable_adk.service import features
from durable_adk.service.ops import Operations
from durable_adk.service.paths import segment
from durable_adk.service.schedule_routes import ScheduleOut, tick_out
from durable_adk.service.schemas import (
    AnswerOut,
    action_out,
    detail_out,
    interrupt_out,
    letter_out,
    outcome_out,
    run_out,
)
from durable_adk.service.version_routes import VersionOut
from durable_adk.store.base import Store
from durable_adk.tables.ledger import RunStatus
from durable_adk.tables.schedules import ScheduleTable
from durable_adk.tables.versions import VersionTable

JSON = dict[str, Any]


class AppUnclear(errors.InvalidArgument):
    """No ``--app`` and no single app to choose (exit 2: the command must name one)."""


class UnknownApp(errors.NotFound):
    """The ``--app`` named is not on the database, or not the app the worker serves
    (exit 1, as any record not found)."""


_ERROR_BY_CODE: dict[str, type[errors.DurableError]] = {
    "not_found": errors.NotFound,
    "conflict": errors.Conflict,
    "unauthorized": errors.Unauthorized,
    "draining": errors.Draining,
    "invalid_argument": errors.InvalidArgument,
    "invalid_request": errors.InvalidArgument,
    "fenced": errors.Fenced,
    "version_elsewhere": errors.VersionElsewhere,
    "store_unavailable": errors.StoreUnavailable,
    "store_busy": errors.DatabaseBusy,
}


class OpsSource(Protocol):
    """What the CLI's operations commands need."""

    async def list_runs(
        self, status: RunStatus | None, limit: int, app_name: str | None = None
    ) -> list[JSON]:
        """Runs, newest first."""
        ...

    async def run_detail(self, run_id: str) -> JSON:
        """One run with its finding, events, dead letters and operator actions."""
        ...

    async def retry(self, run_id: str, by: str = "cli", reason: str | None = None) -> JSON:
        """Retries a parked run."""
        ...

    async def cancel(self, run_id: str, by: str, reason: str | None) -> JSON:
        """Cancels a run (an outcome: ``run``, ``changed``, ``message``)."""
        ...

    async def abandon(self, run_id: str, by: str, reason: str) -> JSON:
        """Abandons a parked run (an outcome)."""
        ...

    async def resolve(
        self,
        run_id: str,
        by: str,
        reason: str | None,
        result: Any = None,
        results: dict[str, Any] | None = None,
    ) -> JSON:
        """Resolves a parked run with the result of its unanswered call(s) (an outcome)."""
        ...

    async def actions(self, run_id: str | None, app_name: str | None, limit: int) -> list[JSON]:
        """The operators' audit trail, newest first."""
        ...

    async def dead_letters(
        self, run_id: str | None, limit: int, app_name: str | None = None
    ) -> list[JSON]:
        """Dead letters, newest first."""
        ...

    async def jobs(self, state: str | None, limit: int) -> JSON:
        """Jobs (``available``, ``note``, ``items``)."""
        ...

    async def complete_job(self, job_id: str, state: str, result: Any) -> JSON:
        """Records a job's result (the first terminal result wins)."""
        ...

    async def sagas(self, status: str | None, limit: int) -> JSON:
        """Sagas (``available``, ``note``, ``items``)."""
        ...

    async def a2a_pushes(self, app_name: str, status: str | None, limit: int) -> JSON:
        """An app's A2A push notifications (``available``, ``note``, ``items``)."""
        ...

    async def keys_status(self) -> JSON:
        """Stored values on each encryption key (``primary``, ``keys``)."""
        ...

    async def keys_rotate(self, batch: int) -> JSON:
        """Re-encrypts every value not on the first key (what it did, then the status)."""
        ...

    async def forget_user(
        self, user_id: str, app_name: str | None, by: str, reason: str | None, cancel_live: bool
    ) -> JSON:
        """Deletes every row of a user, audited first (what went, per table)."""
        ...

    async def purge(
        self,
        retention: str | None,
        policy: RetentionPolicy | None,
        app_name: str | None,
        dry_run: bool,
        batch: int,
        duty: float,
    ) -> list[JSON]:
        """Purges what the policy lets go (one report per app; ``retention`` is the
        policy as given, ``policy`` as parsed; through a worker, none: its own)."""
        ...

    async def interrupts(
        self,
        status: str | None,
        app_name: str | None,
        session_id: str | None,
        kind: str | None,
        limit: int,
    ) -> list[JSON]:
        """The interrupts inbox, oldest first."""
        ...

    async def answer(
        self,
        call_id: str,
        by: str,
        decision: str | None,
        payload: Any,
        reason: str | None,
        session_id: str | None,
    ) -> JSON:
        """Answers an interrupt once (``interrupt``, ``run``, ``message``)."""
        ...

    async def session_repairs(self, app_name: str, user_id: str, session_id: str) -> JSON:
        """A session's unreadable events and its repairs (``unreadable``, ``repairs``)."""
        ...

    async def repair_event(
        self,
        app_name: str,
        user_id: str,
        session_id: str,
        event_id: str,
        by: str,
        reason: str,
        replacement: dict[str, Any] | None,
    ) -> JSON:
        """Repairs an unreadable event (``repair``, ``message``)."""
        ...

    async def app_of(self, app_name: str | None) -> str:
        """The app a command means: ``app_name``, else the only app there is.

        Raises:
            AppUnclear: No app was given and there is none or several to
                choose from (the message lists them).
            UnknownApp: The app named is not on the database (the message
                lists those that are), or a worker serves another.
        """
        ...

    async def schedules(self, app_name: str) -> list[JSON]:
        """The app's schedules with their next ticks (orphaned ones too)."""
        ...

    async def schedule_change(
        self, app_name: str, name: str, action: str, by: str, reason: str | None
    ) -> JSON:
        """Pauses or resumes (``action``) a schedule: the schedule and ``changed``."""
        ...

    async def schedule_trigger(
        self, app_name: str, name: str, by: str, reason: str | None, trigger_id: str | None
    ) -> JSON:
        """Triggers a tick now (``tick_key``, ``run_id``, ``state``)."""
        ...

    async def schedule_ticks(self, app_name: str, name: str, limit: int) -> list[JSON]:
        """A schedule's latest ticks, newest first."""
        ...

    async def versions(self, app_name: str) -> list[JSON]:
        """The app's versions, newest first."""
        ...

    async def version_change(
        self, app_name: str, version: str, drain: bool, by: str, reason: str | None
    ) -> JSON:
        """Drains or undrains a version (``version``, ``drained``, ``changed``)."""
        ...

    async def version_move(
        self, app_name: str, version: str, to: str, by: str, reason: str | None
    ) -> JSON:
        """Moves a retired version's open runs (``version``, ``to``, ``moved``)."""
        ...

    async def version_abandon(self, app_name: str, version: str, by: str, reason: str) -> JSON:
        """Cancels every open run of a retired version (``version``, ``cancelled``)."""
        ...


class StoreOps:
    """Operations straight on the store (no worker needed)."""

    def __init__(self, store: Store) -> None:
        """Creates the source over an open store."""
        self.store = store
        self.ops = Operations(store)

    async def list_runs(
        self, status: RunStatus | None, limit: int, app_name: str | None = None
    ) -> list[JSON]:
        runs = await self.ops.list_runs(status=status, limit=limit, app_name=app_name)
        return [run_out(r).model_dump() for r in runs]

    async def run_detail(self, run_id: str) -> JSON:
        return detail_out(await self.ops.run_detail(run_id)).model_dump()

    async def retry(self, run_id: str, by: str = "cli", reason: str | None = None) -> JSON:
        return run_out(await self.ops.retry(run_id, by=by, reason=reason)).model_dump()

    async def cancel(self, run_id: str, by: str, reason: str | None) -> JSON:
        return outcome_out(await self.ops.cancel(run_id, by=by, reason=reason)).model_dump()

    async def abandon(self, run_id: str, by: str, reason: str) -> JSON:
        return outcome_out(await self.ops.abandon(run_id, by=by, reason=reason)).model_dump()

    async def resolve(
        self,
        run_id: str,
        by: str,
        reason: str | None,
        result: Any = None,
        results: dict[str, Any] | None = None,
    ) -> JSON:
        outcome = await self.ops.resolve(
            run_id, by=by, reason=reason, result=result, results=results
        )
        return outcome_out(outcome).model_dump()

    async def actions(self, run_id: str | None, app_name: str | None, limit: int) -> list[JSON]:
        found = await self.ops.actions(run_id=run_id, app_name=app_name, limit=limit)
        return [action_out(a).model_dump() for a in found]

    async def dead_letters(
        self, run_id: str | None, limit: int, app_name: str | None = None
    ) -> list[JSON]:
        letters = await self.ops.dead_letters(run_id=run_id, limit=limit, app_name=app_name)
        return [letter_out(d).model_dump() for d in letters]

    async def jobs(self, state: str | None, limit: int) -> JSON:
        return (await features.list_jobs(self.store, state=state, limit=limit)).model_dump()

    async def complete_job(self, job_id: str, state: str, result: Any) -> JSON:
        return await features.complete_job(self.store, job_id, state=state, result=result)

    async def sagas(self, status: str | None, limit: int) -> JSON:
        return (await features.list_sagas(self.store, status=status, limit=limit)).model_dump()

    async def a2a_pushes(self, app_name: str, status: str | None, limit: int) -> JSON:
        listed = await features.list_pushes(self.store, app_name, status=status, limit=limit)
        return listed.model_dump()

    async def keys_status(self) -> JSON:
        return await features.keys_status(self.store)

    async def keys_rotate(self, batch: int) -> JSON:
        return await features.keys_rotate(self.store, batch=batch)

    async def forget_user(
        self, user_id: str, app_name: str | None, by: str, reason: str | None, cancel_live: bool
    ) -> JSON:
        report = await forget_user(
            self.store, user_id, app_name=app_name, by=by, reason=reason, cancel_live=cancel_live
        )
        return report.as_dict()

    async def purge(
        self,
        retention: str | None,
        policy: RetentionPolicy | None,
        app_name: str | None,
        dry_run: bool,
        batch: int,
        duty: float,
    ) -> list[JSON]:
        if policy is None:
            raise errors.InvalidArgument(
                "give the policy with --retention, e.g. --retention done=30d,failed=90d"
            )
        apps = [app_name] if app_name else await known_apps(self.store)
        return [(await purge(self.store, name, policy, dry_run=dry_run)).as_dict() for name in apps]

    async def interrupts(
        self,
        status: str | None,
        app_name: str | None,
        session_id: str | None,
        kind: str | None,
        limit: int,
    ) -> list[JSON]:
        found = await self.ops.interrupts(
            status=status, app_name=app_name, session_id=session_id, kind=kind, limit=limit
        )
        return [interrupt_out(i).model_dump() for i in found]

    async def answer(
        self,
        call_id: str,
        by: str,
        decision: str | None,
        payload: Any,
        reason: str | None,
        session_id: str | None,
    ) -> JSON:
        # No worker here: the continuation waits for the next sweep of one serving the app.
        answered = await self.ops.answer(
            call_id,
            by=by,
            decision=decision,
            payload=payload,
            reason=reason,
            session_id=session_id,
        )
        return AnswerOut(
            interrupt=interrupt_out(answered.interrupt),
            run=run_out(answered.run),
            message=answered.message,
        ).model_dump()

    async def session_repairs(self, app_name: str, user_id: str, session_id: str) -> JSON:
        return await features.session_repairs(
            DurableSessionService(self.store),
            app_name=app_name,
            user_id=user_id,
            session_id=session_id,
        )

    async def repair_event(
        self,
        app_name: str,
        user_id: str,
        session_id: str,
        event_id: str,
        by: str,
        reason: str,
        replacement: dict[str, Any] | None,
    ) -> JSON:
        return await features.repair_session_event(
            DurableSessionService(self.store),
            app_name=app_name,
            user_id=user_id,
            session_id=session_id,
            event_id=event_id,
            by=by,
            reason=reason,
            replacement=replacement,
        )

    async def app_of(self, app_name: str | None) -> str:
        known = [str(r["app_name"]) for r in await self.store.fetch("service_known_apps")]
        if app_name is not None:
            if app_name in known:
                return app_name
            raise UnknownApp(
                f"the database knows no app {app_name!r} (it holds: "
                f"{', '.join(known) or 'none yet'}): check --app"
            )
        if len(known) == 1:
            return known[0]
        if not known:
            raise AppUnclear(
                "the database holds no app yet: give --app APP (or start its worker first)"
            )
        raise AppUnclear(
            f"the database holds {len(known)} apps ({', '.join(known)}): give --app APP"
        )

    async def schedules(self, app_name: str) -> list[JSON]:
        rows = await ScheduleTable(self.store, app_name).list_schedules()
        return [ScheduleOut(**r.describe()).model_dump() for r in rows]

    async def schedule_change(
        self, app_name: str, name: str, action: str, by: str, reason: str | None
    ) -> JSON:
        table = ScheduleTable(self.store, app_name)
        act = table.pause if action == "pause" else table.resume
        done = await act(name, by=by, reason=reason)
        return {**ScheduleOut(**done.row.describe()).model_dump(), "changed": done.changed}

    async def schedule_trigger(
        self, app_name: str, name: str, by: str, reason: str | None, trigger_id: str | None
    ) -> JSON:
        table = ScheduleTable(self.store, app_name)
        tick = await table.trigger(name, by=by, reason=reason, trigger_id=trigger_id)
        return tick_out(tick).model_dump()

    async def schedule_ticks(self, app_name: str, name: str, limit: int) -> list[JSON]:
        table = ScheduleTable(self.store, app_name)
        await table.get(name)
        return [tick_out(t).model_dump() for t in await table.recent_ticks(name, limit=limit)]

    async def versions(self, app_name: str) -> list[JSON]:
        report = await VersionTable(self.store, app_name).report()
        return [VersionOut(**v.describe()).model_dump() for v in report]

    async def version_change(
        self, app_name: str, version: str, drain: bool, by: str, reason: str | None
    ) -> JSON:
        table = VersionTable(self.store, app_name)
        act = table.drain if drain else table.undrain
        changed = await act(version, by=by, reason=reason)
        return {"version": version, "drained": drain, "changed": changed}

    async def version_move(
        self, app_name: str, version: str, to: str, by: str, reason: str | None
    ) -> JSON:
        moved = await VersionTable(self.store, app_name).move(version, to, by=by, reason=reason)
        return {"version": version, "to": to, "moved": moved}

    async def version_abandon(self, app_name: str, version: str, by: str, reason: str) -> JSON:
        table = VersionTable(self.store, app_name)
        cancelled = await abandon_version(table, version, by=by, reason=reason)
        return {"version": version, "cancelled": cancelled}


class HttpOps:
    """Operations through a running worker's HTTP API."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        """Creates the source.

        Args:
            client: An httpx client whose ``base_url`` is the worker and whose
                headers carry ``Authorization: Bearer <token>``.
        """
        self.client = client

    @classmethod
    def connect(cls, url: str, token: str, *, timeout: float = 30.0) -> HttpOps:
        """A source for the worker at ``url`` (close it with :meth:`aclose`)."""
        return cls(
            httpx.AsyncClient(
                base_url=url.rstrip("/"),
                headers={"Authorization": f"Bearer {token}"},
                timeout=timeout,
            )
        )

    async def aclose(self) -> None:
        """Closes the HTTP client."""
        await self.client.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> JSON:
        try:
            response = await self.client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise errors.StoreUnavailable(f"cannot reach the worker: {exc}") from exc
        try:
            body: JSON = response.json()
        except json.JSONDecodeError:
            body = {}
        if response.is_success:
            return body
        error = body.get("error") or {}
        kind = _ERROR_BY_CODE.get(str(error.get("code")), errors.DurableError)
        raise kind(error.get("message") or f"HTTP {response.status_code}")

    async def list_runs(
        self, status: RunStatus | None, limit: int, app_name: str | None = None
    ) -> list[JSON]:
        params: dict[str, Any] = {"limit": limit}
        if status is not None:
            params["status"] = status.value
        if app_name is not None:
            params["app_name"] = app_name
        runs: list[JSON] = (await self._call("GET", "/v1/runs", params=params))["runs"]
        return runs

    async def run_detail(self, run_id: str) -> JSON:
        return await self._call("GET", f"/v1/runs/{_segment(run_id)}")

    async def retry(self, run_id: str, by: str = "cli", reason: str | None = None) -> JSON:
        return await self._call(
            "POST", f"/v1/runs/{_segment(run_id)}/retry", json=_body(by=by, reason=reason)
        )

    async def cancel(self, run_id: str, by: str, reason: str | None) -> JSON:
        return await self._call(
            "POST", f"/v1/runs/{_segment(run_id)}/cancel", json=_body(by=by, reason=reason)
        )

    async def abandon(self, run_id: str, by: str, reason: str) -> JSON:
        return await self._call(
            "POST", f"/v1/runs/{_segment(run_id)}/abandon", json=_body(by=by, reason=reason)
        )

    async def resolve(
        self,
        run_id: str,
        by: str,
        reason: str | None,
        result: Any = None,
        results: dict[str, Any] | None = None,
    ) -> JSON:
        body = _body(by=by, reason=reason, result=result, results=results)
        return await self._call("POST", f"/v1/runs/{_segment(run_id)}/resolve", json=body)

    async def actions(self, run_id: str | None, app_name: str | None, limit: int) -> list[JSON]:
        params = _body(run_id=run_id, app_name=app_name, limit=limit)
        found: list[JSON] = (await self._call("GET", "/v1/actions", params=params))["actions"]
        return found

    async def dead_letters(
        self, run_id: str | None, limit: int, app_name: str | None = None
    ) -> list[JSON]:
        params: dict[str, Any] = {"limit": limit}
        if run_id is not None:
            params["run_id"] = run_id
        if app_name is not None:
            params["app_name"] = app_name
        letters: list[JSON] = (await self._call("GET", "/v1/dead-letters", params=params))[
            "dead_letters"
        ]
        return letters

    async def jobs(self, state: str | None, limit: int) -> JSON:
        params: dict[str, Any] = {"limit": limit}
        if state is not None:
            params["state"] = state
        return await self._call("GET", "/v1/jobs", params=params)

    async def complete_job(self, job_id: str, state: str, result: Any) -> JSON:
        return await self._call(
            "POST",
            f"/v1/jobs/{_segment(job_id)}/complete",
            json={"state": state, "result": result},
        )

    async def sagas(self, status: str | None, limit: int) -> JSON:
        params: dict[str, Any] = {"limit": limit}
        if status is not None:
            params["status"] = status
        return await self._call("GET", "/v1/sagas", params=params)

    async def a2a_pushes(self, app_name: str, status: str | None, limit: int) -> JSON:
        params: dict[str, Any] = {"app_name": app_name, "limit": limit}
        if status is not None:
            params["status"] = status
        return await self._call("GET", "/v1/a2a/pushes", params=params)

    async def keys_status(self) -> JSON:
        return await self._call("GET", "/v1/keys")

    async def keys_rotate(self, batch: int) -> JSON:
        return await self._call("POST", "/v1/keys/rotate", json={"batch": batch})

    async def forget_user(
        self, user_id: str, app_name: str | None, by: str, reason: str | None, cancel_live: bool
    ) -> JSON:
        body = {"by": by, "reason": reason, "app": app_name, "cancel_live": cancel_live}
        return await self._call("POST", f"/v1/users/{segment(user_id)}/forget", json=body)

    async def purge(
        self,
        retention: str | None,
        policy: RetentionPolicy | None,
        app_name: str | None,
        dry_run: bool,
        batch: int,
        duty: float,
    ) -> list[JSON]:
        body: dict[str, Any] = {"retention": retention, "dry_run": dry_run}
        if retention is None and batch != 500:
            body["batch"] = batch
        if duty != DEFAULT_DUTY:
            body["duty"] = duty
        return [await self._call("POST", "/v1/purge", json=body)]

    async def interrupts(
        self,
        status: str | None,
        app_name: str | None,
        session_id: str | None,
        kind: str | None,
        limit: int,
    ) -> list[JSON]:
        params = _body(
            status=status, app_name=app_name, session_id=session_id, kind=kind, limit=limit
        )
        found: list[JSON] = (await self._call("GET", "/v1/interrupts", params=params))["interrupts"]
        return found

    async def answer(
        self,
        call_id: str,
        by: str,
        decision: str | None,
        payload: Any,
        reason: str | None,
        session_id: str | None,
    ) -> JSON:
        body = _body(
            by=by, decision=decision, payload=payload, reason=reason, session_id=session_id
        )
        return await self._call("POST", f"/v1/interrupts/{_segment(call_id)}", json=body)

    def _session_path(self, user_id: str, session_id: str) -> str:
        return f"/v1/users/{_segment(user_id)}/sessions/{_segment(session_id)}"

    async def _of_app(self, app_name: str, found: JSON) -> JSON:
        if found.get("app_name", app_name) != app_name:
            raise UnknownApp(
                f"the worker serves app {found['app_name']!r}, not {app_name!r}: "
                "ask a worker of that app, or use --db"
            )
        return found

    async def session_repairs(self, app_name: str, user_id: str, session_id: str) -> JSON:
        path = f"{self._session_path(user_id, session_id)}/unreadable"
        return await self._of_app(app_name, await self._call("GET", path))

    async def repair_event(
        self,
        app_name: str,
        user_id: str,
        session_id: str,
        event_id: str,
        by: str,
        reason: str,
        replacement: dict[str, Any] | None,
    ) -> JSON:
        # The worker repairs its own app's sessions: make sure that is the one meant.
        await self.session_repairs(app_name, user_id, session_id)
        path = f"{self._session_path(user_id, session_id)}/events/{_segment(event_id)}/repair"
        body = _body(by=by, reason=reason, replacement=replacement)
        return await self._call("POST", path, json=body)

    async def app_of(self, app_name: str | None) -> str:
        serving = str((await self._call("GET", "/v1/apps"))["serving"])
        if app_name is not None and app_name != serving:
            raise UnknownApp(
                f"the worker serves app {serving!r}, not {app_name!r}: "
                "ask a worker of that app, or use --db"
            )
        return serving

    async def schedules(self, app_name: str) -> list[JSON]:
        found: list[JSON] = (await self._call("GET", "/v1/schedules"))["schedules"]
        return found

    async def schedule_change(
        self, app_name: str, name: str, action: str, by: str, reason: str | None
    ) -> JSON:
        path = f"/v1/schedules/{_segment(name)}/{action}"
        done = await self._call("POST", path, json=_body(by=by, reason=reason))
        return {**done["schedule"], "changed": done["changed"]}

    async def schedule_trigger(
        self, app_name: str, name: str, by: str, reason: str | None, trigger_id: str | None
    ) -> JSON:
        body = _body(by=by, reason=reason, trigger_id=trigger_id)
        return await self._call("POST", f"/v1/schedules/{_segment(name)}/trigger", json=body)

    async def schedule_ticks(self, app_name: str, name: str, limit: int) -> list[JSON]:
        path = f"/v1/schedules/{_segment(name)}/ticks"
        ticks: list[JSON] = (await self._call("GET", path, params={"limit": limit}))["ticks"]
        return ticks

    async def versions(self, app_name: str) -> list[JSON]:
        found: list[JSON] = (await self._call("GET", "/v1/versions"))["versions"]
        return found

    async def version_change(
        self, app_name: str, version: str, drain: bool, by: str, reason: str | None
    ) -> JSON:
        path = f"/v1/versions/{_segment(version)}/{'drain' if drain else 'undrain'}"
        return await self._call("POST", path, json=_body(by=by, reason=reason))

    async def version_move(
        self, app_name: str, version: str, to: str, by: str, reason: str | None
    ) -> JSON:
        body = _body(by=by, to=to, reason=reason)
        return await self._call("POST", f"/v1/versions/{_segment(version)}/move", json=body)

    async def version_abandon(self, app_name: str, version: str, by: str, reason: str) -> JSON:
        body = _body(by=by, reason=reason)
        return await self._call("POST", f"/v1/versions/{_segment(version)}/abandon", json=body)


def _segment(value: str) -> str:
    """An id as one percent-encoded path segment (:func:`durable_adk.service.paths.segment`)."""
    return segment(value)


def _body(**fields: Any) -> dict[str, Any]:
    """The fields that are given (None left out)."""
    return {name: value for name, value in fields.items() if value is not None}
