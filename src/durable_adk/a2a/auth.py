"""Who may call the A2A routes: bearer tokens, each naming the caller who owns what it makes.

A server given callers (``{token: owner}``) admits a JSON-RPC request only
with ``Authorization: Bearer <token>`` of one of them: a missing or wrong
token is answered HTTP 401 with ``WWW-Authenticate: Bearer`` (A2A leaves
authentication to HTTP) before the body is read, so a refused call changes
nothing. An admitted request carries its caller as Starlette's
authenticated user (``scope["user"]``); the SDK's call context builder
makes it the :class:`~a2a.server.context.ServerCallContext` user, whose name
is the owner every store scopes by (:func:`durable_adk.a2a.codec.owner_of`)
and ADK's user id of the run. The caller named ``""`` (the worker's own
token under ``durable-adk serve``) owns what an unauthenticated caller
owned before, and runs as ADK's ``A2A_USER_<context_id>``.

The agent card stays public and says so truly: a ``bearer`` HTTP security
scheme, required by every call (:func:`declare_bearer`), which the SDK's
client ``AuthInterceptor`` reads to send the token.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence

from a2a.types import AgentCard, HTTPAuthSecurityScheme, SecurityRequirement, SecurityScheme
from starlette.authentication import AuthCredentials, SimpleUser
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from durable_adk import errors

SCHEME_NAME = "bearer"
"""The security scheme's name in the agent card."""

CALLER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}")
"""A named caller: what its tasks are owned by and its runs' ADK user id."""

MIN_TOKEN_CHARS = 8

Endpoint = Callable[[Request], Awaitable[Response]]


class Callers:
    """The bearer tokens admitted to the A2A routes, each with the owner it names."""

    def __init__(self, owners: Mapping[str, str]) -> None:
        """Checks and keeps ``{token: owner}``.

        Raises:
            durable_adk.errors.InvalidArgument: No token, a token shorter than
                8 characters, or an owner name that is neither ``""`` nor a
                name of letters, digits and ``._@-`` (at most 128).
        """
        if not owners:
            raise errors.InvalidArgument("A2A callers need at least one token")
        for token, owner in owners.items():
            if len(token) < MIN_TOKEN_CHARS:
                raise errors.InvalidArgument(
                    f"the A2A token of caller {owner!r} must be at least "
                    f"{MIN_TOKEN_CHARS} characters"
                )
            if owner and CALLER_NAME.fullmatch(owner) is None:
                raise errors.InvalidArgument(
                    f"A2A caller name {owner!r}: letters, digits and ._@- only, "
                    "starting with a letter or digit, at most 128"
                )
        self._owners = [(token.encode(), owner) for token, owner in owners.items()]

    def owner(self, request: Request) -> str | None:
        """The owner the request's bearer token names; None for no token or a wrong one.

        Every token is compared (``secrets.compare_digest``), so the time taken
        says nothing about which one came closest.
        """
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        offered = given.strip().encode() if scheme.lower() == "bearer" else b""
        found: str | None = None
        for token, owner in self._owners:
            if secrets.compare_digest(offered, token) and offered:
                found = owner
        return found


def unauthorized() -> JSONResponse:
    """HTTP 401 with ``WWW-Authenticate: Bearer`` and a JSON-RPC error body (id null)."""
    return JSONResponse(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32600,
                "message": "unauthorized: a missing or wrong bearer token; nothing was read",
            },
        },
        status_code=401,
        headers={"WWW-Authenticate": 'Bearer realm="a2a"'},
    )


def guard(endpoint: Endpoint, callers: Callers) -> Endpoint:
    """``endpoint`` admitting only ``callers``; the caller becomes the request's user."""

    async def guarded(request: Request) -> Response:
        owner = callers.owner(request)
        if owner is None:
            return unauthorized()
        request.scope["user"] = SimpleUser(owner)
        request.scope["auth"] = AuthCredentials(["a2a"])
        return await endpoint(request)

    return guarded


def guard_routes(routes: Sequence[BaseRoute], callers: Callers) -> list[BaseRoute]:
    """The JSON-RPC routes, each guarded by :func:`guard`."""
    guarded: list[BaseRoute] = []
    for route in routes:
        if not isinstance(route, Route):
            raise errors.InvalidArgument(f"cannot guard the A2A route {route!r}")
        guarded.append(
            Route(
                route.path,
                endpoint=guard(route.endpoint, callers),
                methods=sorted(route.methods or ()),
                name=route.name,
            )
        )
    return guarded


def declare_bearer(card: AgentCard) -> None:
    """Says in the card that every call needs a bearer token (the ``bearer`` HTTP scheme)."""
    card.security_schemes[SCHEME_NAME].CopyFrom(
        SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(
                scheme="Bearer",
                description="A token the server's operator gave the caller "
                "(Authorization: Bearer <token>); it names who owns the caller's tasks.",
            )
        )
    )
    del card.security_requirements[:]
    requirement = SecurityRequirement()
    requirement.schemes[SCHEME_NAME].SetInParent()
    card.security_requirements.append(requirement)
