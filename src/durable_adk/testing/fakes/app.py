"""The request logic of a fake service: routing, parsing, checks, the request log; no sockets.

Every request is logged (:mod:`.request_log`) before it is handled, and its
outcome after; only the log's own reader, ``GET /_requests``, is not logged.

A request to a collection that carries fence headers
(:data:`durable_adk.fencing.fence.FENCE_HEADERS`) is admitted by the store before it
does anything: refused with 412 (outcome ``fenced``, reason ``fence_expired``
or ``fence_superseded``) when its valid-until has passed or a later epoch of
its run has been seen. Incomplete or malformed fence headers are a 400.
Requests without them are served as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from email.message import Message
from typing import Any

from durable_adk import errors
from durable_adk.fencing.fence import FENCE_REFUSED_STATUS, FenceToken
from durable_adk.testing.fakes.protocol import (
    REQUESTS_PATH,
    FailMode,
    JsonObject,
    Outcome,
    caller_of,
    fence_of,
    key_problem,
)
from durable_adk.testing.fakes.request_log import IN_MEMORY, RequestLog
from durable_adk.testing.fakes.specs import Field, Rejected, Resource, ServiceSpec, json_type
from durable_adk.testing.fakes.storage import FencedOff, NotFound, Store, StoreClosed

__all__ = ["HttpError", "Request", "Response", "ServiceApp", "bad_request"]


class HttpError(Exception):
    """An answer other than 2xx: ``{"error": message, "reason": reason}``."""

    def __init__(
        self, status: int, message: str, reason: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason
        self.headers = dict(headers or {})


def bad_request(message: str) -> HttpError:
    """A 400 answer with reason ``bad_request``."""
    return HttpError(400, message, "bad_request")


@dataclass
class Response:
    """An answer: its status, JSON body and extra headers.

    ``outcome`` is what the request log records; when None it follows from the
    status (2xx ``found``, 404 ``not_found`` with that reason, else ``error``).
    """

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    outcome: Outcome | None = None

    @property
    def reason(self) -> str | None:
        """The error answer's ``reason`` code, or None."""
        if self.status < 400 or not isinstance(self.body, dict):
            return None
        value = self.body.get("reason")
        return value if isinstance(value, str) else None

    def logged_outcome(self) -> Outcome:
        """The outcome the request log records for this answer."""
        if self.outcome is not None:
            return self.outcome
        if 200 <= self.status < 300:
            return "found"
        return "not_found" if self.status == 404 and self.reason == "not_found" else "error"


@dataclass
class Request:
    """A request as :class:`ServiceApp` sees it; ``read_body`` reads its body."""

    method: str
    target: str
    headers: Message
    read_body: Callable[[], bytes]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _no_duplicate_members(pairs: list[tuple[str, Any]]) -> JsonObject:
    result: JsonObject = {}
    for name, value in pairs:
        if name in result:
            raise ValueError(f"member {name!r} appears twice")
        result[name] = value
    return result


def _parse_object(body: bytes, *, empty_means: JsonObject | None = None) -> JsonObject:
    if not body.strip() and empty_means is not None:
        return dict(empty_means)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise bad_request("the body is not UTF-8") from err
    try:
        value = json.loads(
            text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicate_members
        )
    except (ValueError, RecursionError) as err:
        raise bad_request(f"the body is not valid JSON: {err}") from err
    if not isinstance(value, dict):
        raise bad_request(f"the body must be a JSON object, not {json_type(value)}")
    return value


def _check_fields(fields: Sequence[Field], payload: JsonObject) -> JsonObject:
    names = [f.name for f in fields]
    unknown = sorted(set(payload) - set(names))
    if unknown:
        raise bad_request(f"unknown field(s) {', '.join(map(repr, unknown))}; expected {names}")
    values: JsonObject = {}
    for f in fields:
        value = payload.get(f.name)
        if value is None:
            if f.required:
                raise bad_request(f"missing field {f.name!r}")
            values[f.name] = None
            continue
        problem = f.problem(value)
        if problem is not None:
            raise bad_request(f"field {f.name!r} {problem}")
        values[f.name] = value
    return values


def _split_path(target: str) -> list[str]:
    path = urllib.parse.urlsplit(target).path
    if not path.startswith("/"):
        raise HttpError(404, f"no such path: {target!r}", "no_route")
    parts = path[1:].split("/")
    if parts and parts[-1] == "":
        parts.pop()
    try:
        return [urllib.parse.unquote(p, errors="strict") for p in parts]
    except UnicodeDecodeError as err:
        raise bad_request("the path is not valid percent-encoded UTF-8") from err


def _only(method: str, *allowed: str) -> None:
    if method not in allowed:
        raise HttpError(
            405,
            f"method {method} is not allowed here; use {' or '.join(allowed)}",
            "method_not_allowed",
            {"Allow": ", ".join(allowed)},
        )


class ServiceApp:
    """The request logic of one service, independent of the socket handling.

    Args:
        spec: The service.
        store: Its open database.
        lookup: Whether ``GET /<collection>/by-key/<key>`` is offered (else 501).
        fail_times: How many create requests fail on purpose.
        fail_mode: ``before`` (nothing written) or ``after`` (written) the commit.
        fail_actions: How many action requests (``POST /<c>/<id>/<action>``)
            fail on purpose with 503, before anything is applied.
        db_path: Shown by ``GET /``.
        log: Where requests are logged; by default a log in memory.
    """

    def __init__(
        self,
        spec: ServiceSpec,
        store: Store,
        *,
        lookup: bool = True,
        fail_times: int = 0,
        fail_mode: FailMode = "before",
        fail_actions: int = 0,
        db_path: str = "",
        log: RequestLog | None = None,
    ) -> None:
        self.spec = spec
        self.store = store
        self.log = log if log is not None else RequestLog(IN_MEMORY)
        self.lookup = lookup
        self.fail_mode: FailMode = fail_mode
        self.db_path = db_path
        self._failures_left = fail_times
        self._action_failures_left = fail_actions
        self._fail_lock = threading.Lock()
        self._resources = {r.collection: r for r in spec.resources}

    def _take_action_failure(self) -> bool:
        with self._fail_lock:
            if self._action_failures_left <= 0:
                return False
            self._action_failures_left -= 1
            return True

    def _take_failure(self) -> bool:
        with self._fail_lock:
            if self._failures_left <= 0:
                return False
            self._failures_left -= 1
            return True

    def handle(self, request: Request) -> Response:
        """Answers one request; never raises for bad input.

        The request is logged before anything else is done with it, and its
        outcome once the answer is ready (also when handling it raised).
        """
        if urllib.parse.urlsplit(request.target).path == REQUESTS_PATH:
            return self._answer(self._read_log, request)  # reading the log does not change it
        try:
            seq = self.log.received(**self._describe(request))
        except StoreClosed:
            return _shutting_down()
        response = Response(500, {"error": "internal error", "reason": "internal"})
        try:
            response = self._answer(self._route, request)
        finally:
            with contextlib.suppress(StoreClosed):  # stopping: logged without its outcome
                self.log.answered(seq, response.logged_outcome(), response.status, response.reason)
        return response

    @staticmethod
    def _answer(route: Callable[[Request], Response], request: Request) -> Response:
        try:
            return route(request)
        except HttpError as err:
            return Response(err.status, {"error": err.message, "reason": err.reason}, err.headers)
        except Rejected as err:
            return Response(err.status, {"error": err.message, "reason": err.reason})
        except FencedOff as err:
            return Response(
                FENCE_REFUSED_STATUS,
                {
                    "error": "refused: the request's fence is stale (its valid-until has passed, "
                    "or a later epoch of its run has been seen); nothing was done",
                    "reason": err.reason,
                    "highest_epoch": err.highest_epoch,
                },
                outcome="fenced",
            )
        except StoreClosed:
            return _shutting_down()

    def _describe(self, request: Request) -> dict[str, Any]:
        """What the request log records on arrival; never raises, reads no body.

        It follows :meth:`_route`'s reading of the path, leniently.
        """
        method = request.method
        path = urllib.parse.urlsplit(request.target).path
        parts = [urllib.parse.unquote(p, errors="replace") for p in path[1:].split("/")]
        if parts and parts[-1] == "":
            parts.pop()
        keys = request.headers.get_all("Idempotency-Key") or []
        key = str(keys[0]) if len(keys) == 1 else None
        collection = action = item_id = None
        mutating = False
        resource = self._resources.get(parts[0]) if parts and path.startswith("/") else None
        if not path.startswith("/"):
            pass
        elif not parts:
            action = "info"
        elif resource is not None:
            collection, rest = resource.collection, parts[1:]
            if not rest:
                action = "create" if method == "POST" else "list"
                mutating = method == "POST"
            elif rest == ["count"]:
                action = "count"
            elif rest[0] == "by-key" and len(rest) == 2:
                action, key = "lookup", rest[1]
            elif len(rest) == 1 and rest[0] != "by-key":
                action, item_id = "get", rest[0]
            elif len(rest) == 2 and resource.action(rest[1]) is not None:
                action, item_id = rest[1], rest[0]
                mutating = method == "POST"
        return {
            "method": method,
            "path": request.target,
            "collection": collection,
            "action": action,
            "item_id": item_id,
            "key": key,
            "mutating": mutating,
            "caller": caller_of(request.headers),
            "fence": fence_of(request.headers),
        }

    def _read_log(self, request: Request) -> Response:
        _only(request.method, "GET")
        try:
            return Response(200, self.log.answer(urllib.parse.urlsplit(request.target).query))
        except ValueError as err:
            raise bad_request(str(err)) from err

    def _route(self, request: Request) -> Response:
        method = request.method
        segments = _split_path(request.target)
        if not segments:
            _only(method, "GET")
            return Response(200, self._info())
        resource = self._resources.get(segments[0])
        if resource is None:
            known = sorted(self._resources)
            raise HttpError(
                404, f"no such collection {segments[0]!r}; this service has {known}", "no_route"
            )
        rest = segments[1:]
        fence = self._fence_from(request)
        if not rest:
            _only(method, "GET", "POST")
            if method == "POST":
                return self._create(request, resource, fence)
            self.store.admit(fence)
            return Response(200, self.store.items(resource.collection))
        if rest == ["count"]:
            _only(method, "GET")
            self.store.admit(fence)
            return Response(200, {"count": self.store.count(resource.collection)})
        if rest[0] == "by-key" and len(rest) == 2:
            _only(method, "GET")
            return self._by_key(resource, rest[1], fence)
        if len(rest) == 1 and rest[0] != "by-key":
            _only(method, "GET")
            self.store.admit(fence)
            item = self.store.get(resource.collection, rest[0])
            if item is None:
                raise HttpError(404, f"no {resource.noun} with id {rest[0]!r}", "not_found")
            return Response(200, item)
        if len(rest) == 2 and resource.action(rest[1]) is not None:
            _only(method, "POST")
            return self._act(request, resource, rest[0], rest[1], fence)
        raise HttpError(404, f"no such path: {request.target!r}", "no_route")

    def _info(self) -> JsonObject:
        return {
            "service": self.spec.name,
            "collections": [r.collection for r in self.spec.resources],
            "lookup": self.lookup,
            "pid": os.getpid(),
            "db": self.db_path,
        }

    @staticmethod
    def _fence_from(request: Request) -> FenceToken | None:
        try:
            return FenceToken.from_headers(request.headers)
        except errors.InvalidArgument as err:
            raise bad_request(str(err)) from err

    @staticmethod
    def _key_from(request: Request) -> str:
        keys = request.headers.get_all("Idempotency-Key") or []
        if not keys:
            raise bad_request("the Idempotency-Key header is required")
        if len(keys) > 1:
            raise bad_request("send exactly one Idempotency-Key header")
        key = str(keys[0])
        problem = key_problem(key)
        if problem is not None:
            raise bad_request(problem)
        return key

    def _create(self, request: Request, resource: Resource, fence: FenceToken | None) -> Response:
        body = request.read_body()  # first, so that no answer leaves a body unread
        key = self._key_from(request)
        values = _check_fields(resource.fields, _parse_object(body))
        if resource.validate is not None:
            resource.validate(values)
        fail = self._take_failure()
        if fail and self.fail_mode == "before":
            return Response(
                503, {"error": "injected failure before the write", "reason": "injected_failure"}
            )
        item, created = self.store.create(
            resource.collection, key, lambda: resource.new_item(values, key), fence
        )
        outcome: Outcome = "created" if created else "replayed"
        if fail:
            return Response(
                503,
                {"error": "injected failure after the write", "reason": "injected_failure"},
                outcome=outcome,
            )
        replayed = {"Idempotent-Replayed": "false" if created else "true"}
        return Response(201 if created else 200, item, replayed, outcome=outcome)

    def _by_key(self, resource: Resource, key: str, fence: FenceToken | None) -> Response:
        if not self.lookup:
            raise HttpError(
                501,
                f"this service offers no lookup of {resource.collection} by idempotency key",
                "lookup_unavailable",
            )
        problem = key_problem(key)
        if problem is not None:
            raise bad_request(problem)
        self.store.admit(fence)
        item = self.store.by_key(resource.collection, key)
        if item is None:
            raise HttpError(404, f"no {resource.noun} with this idempotency key", "not_found")
        return Response(200, item)

    def _act(
        self,
        request: Request,
        resource: Resource,
        item_id: str,
        name: str,
        fence: FenceToken | None,
    ) -> Response:
        body = request.read_body()
        key = self._key_from(request)
        action = resource.action(name)
        assert action is not None
        values = _check_fields(action.fields, _parse_object(body, empty_means={}))
        if self._take_action_failure():
            return Response(
                503, {"error": "injected failure before the action", "reason": "injected_failure"}
            )
        try:
            answer, applied = self.store.act(
                resource.collection,
                item_id,
                name,
                key,
                lambda item: action.apply(item, values),
                fence,
            )
        except NotFound:
            raise HttpError(404, f"no {resource.noun} with id {item_id!r}", "not_found") from None
        return Response(
            200,
            answer,
            {"Idempotent-Replayed": "false" if applied else "true"},
            outcome="applied" if applied else "replayed",
        )


def _shutting_down() -> Response:
    return Response(503, {"error": "the service is shutting down", "reason": "shutdown"})
