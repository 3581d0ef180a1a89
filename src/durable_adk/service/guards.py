"""What stands between the network and the worker: token, body size, error codes.

* :func:`bearer_guard` makes a FastAPI dependency: a missing or wrong
  ``Authorization: Bearer`` token gets 401 and no data. The comparison takes
  the same time whatever the token (``secrets.compare_digest``).
* :class:`BodyLimit` is ASGI middleware: a request whose body is larger than
  the limit gets 413 before any route sees it, whether it announced its length
  or streamed it in chunks.
* :func:`install_error_handlers` turns every error into
  ``{"error": {"code", "message"}}``, chosen by the error's class (never by its
  text); an unexpected error is a 500 that says nothing about the internals.
"""

# No `from __future__ import annotations`: FastAPI must see the real types of
# the closure's parameters, which name a local (the bearer scheme).
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from durable_adk import errors
from durable_adk.store.sealing.codec import lenient_reads

logger = logging.getLogger("durable_adk.service")

# Error classes and what each becomes on the wire, most specific first.
_STATUS_BY_ERROR: tuple[tuple[type[errors.DurableError], int, str], ...] = (
    (errors.Unauthorized, 401, "unauthorized"),
    (errors.NotFound, 404, "not_found"),
    (errors.Conflict, 409, "conflict"),
    (errors.VersionElsewhere, 409, "version_elsewhere"),
    (errors.Fenced, 409, "fenced"),
    (errors.Draining, 503, "draining"),
    (errors.PayloadTooLarge, 413, "payload_too_large"),
    (errors.PayloadTooDeep, 422, "payload_too_deep"),
    (errors.InvalidArgument, 422, "invalid_argument"),
    (errors.DatabaseBusy, 503, "store_busy"),
    (errors.StoreUnavailable, 503, "store_unavailable"),
    (errors.StoreError, 500, "store_error"),
)

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "body_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
}


def error_response(status: int, code: str, message: str) -> JSONResponse:
    """The body every error gets."""
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


def bearer_guard(token: str) -> Callable[..., Awaitable[None]]:
    """A FastAPI dependency admitting only requests that carry ``token`` as bearer token.

    It is declared through FastAPI's ``HTTPBearer``, so the OpenAPI spec names
    the security scheme of every guarded route.
    """
    scheme = HTTPBearer(auto_error=False, description="The worker's bearer token.")
    expected = token.encode()

    async def guard(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(scheme)],
    ) -> None:
        given = credentials.credentials.encode() if credentials else b""
        if not secrets.compare_digest(given, expected):
            raise errors.Unauthorized()

    return guard


class ViewReads:
    """ASGI middleware: a ``GET`` (a view: dashboard, listings, event streams) reads
    values sealed under a key this worker does not hold as a placeholder naming
    the key (:func:`~durable_adk.store.sealing.codec.lenient_reads`) instead of failing;
    every other request, and every run, still fails on such a value."""

    def __init__(self, app: ASGIApp) -> None:
        """Wraps an ASGI app."""
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") in ("GET", "HEAD"):
            with lenient_reads():
                await self.app(scope, receive, send)
            return
        await self.app(scope, receive, send)


class BodyLimit:
    """ASGI middleware refusing request bodies over ``limit`` bytes with 413.

    A body that announces its length (``Content-Length``) is refused from the
    header alone: no byte of it is read into memory and no route sees it. A
    chunked body is read up to the limit and refused at the first byte past it.

    The refusal keeps the connection open (no ``Connection: close``): a client
    that sends the whole body before it reads the answer (``http.client``,
    ``requests``, ``curl`` without ``Expect``) would otherwise have its
    connection reset under it (the socket closed with its body unread) and
    see a broken pipe instead of the 413. uvicorn discards the rest of the
    refused body as it arrives (never buffered), and closes the connection
    when it stays idle past its keep-alive timeout. A client that asked
    ``Expect: 100-continue`` has not sent the body: it gets the 413 with
    ``Connection: close`` and no ``100 Continue``.
    """

    def __init__(self, app: ASGIApp, *, limit: int) -> None:
        """Wraps an ASGI app.

        Args:
            app: The app.
            limit: The largest body accepted, in bytes.
        """
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await self._refuse(scope, receive, send, declared=declared)
            return
        # Read the body up front (it is at most `limit` bytes), then replay it.
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(scope, receive, send, declared=None)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, *, declared: int | None
    ) -> None:
        size = f"({declared} bytes, says its Content-Length) " if declared is not None else ""
        response = error_response(
            413,
            "body_too_large",
            f"the request body {size}is larger than the limit of {self.limit} bytes; "
            "nothing was read or changed",
        )
        if _header(scope, b"expect").lower() == b"100-continue":
            # The client waits for our word before it sends the body: it never will.
            response.headers["Connection"] = "close"
        await response(scope, receive, send)


def _header(scope: Scope, wanted: bytes) -> bytes:
    for name, value in scope.get("headers", ()):
        if name == wanted:
            return bytes(value)
    return b""


def _content_length(scope: Scope) -> int | None:
    value = _header(scope, b"content-length")
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _not_json(reason: str, doc: object, pos: int | None) -> str:
    """``the body is not JSON: REASON at line L, column C (character P)``."""
    if pos is None:
        return f"the body is not JSON: {reason}"
    text = doc.decode("utf-8", "replace") if isinstance(doc, bytes) else doc
    if not isinstance(text, str):
        return f"the body is not JSON: {reason} (character {pos})"
    line = text.count("\n", 0, pos) + 1
    column = pos - text.rfind("\n", 0, pos)
    return f"the body is not JSON: {reason} at line {line}, column {column} (character {pos})"


def install_error_handlers(app: FastAPI) -> None:
    """Maps every error to ``{"error": {"code", "message"}}`` by its class."""

    @app.exception_handler(errors.DurableError)
    async def durable(_request: Request, exc: Exception) -> JSONResponse:
        for kind, status, code in _STATUS_BY_ERROR:
            if isinstance(exc, kind):
                if status >= 500:
                    # A 503 for a store outage is said once, by the store (store.health).
                    outage = isinstance(exc, errors.StoreUnavailable)
                    logger.log(
                        logging.DEBUG if outage else logging.WARNING, "request failed: %s", exc
                    )
                return error_response(status, code, str(exc))
        logger.exception("unexpected durable-adk error", exc_info=exc)
        return error_response(500, "internal", "the worker failed; see its log")

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        malformed = [e for e in exc.errors() if e.get("type") == "json_invalid"]
        if malformed:
            # A body that is not JSON at all is malformed (400), not invalid (422).
            first = malformed[0]
            reason = first.get("ctx", {}).get("error", "cannot be parsed")
            loc = first.get("loc", ())
            place = loc[-1] if loc and isinstance(loc[-1], int) else None
            return error_response(400, "bad_request", _not_json(reason, exc.body, place))
        problems = [
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}"
            for e in exc.errors()
        ]
        return error_response(422, "invalid_request", "; ".join(problems)[:2000])

    @app.exception_handler(StarletteHTTPException)
    async def http(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        return error_response(exc.status_code, code, str(exc.detail))

    @app.exception_handler(json.JSONDecodeError)
    async def bad_json(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, json.JSONDecodeError)
        return error_response(400, "bad_request", _not_json(exc.msg, exc.doc, exc.pos))

    @app.exception_handler(Exception)
    async def unexpected(_request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error", exc_info=exc)
        return error_response(500, "internal", "the worker failed; see its log")
