"""The dashboard: a static page served by every worker, no build step.

The page (``static/index.html``, ``dashboard.js``, ``dashboard.css``) holds no
data: it asks for the bearer token, keeps it in the tab's ``sessionStorage``
and reads everything through the guarded ``/v1`` API, like any client. It
builds the page with DOM text nodes only (never ``innerHTML``), so hostile
strings in events or errors are shown, not run. A strict Content Security
Policy allows scripts and styles from the worker alone.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI, HTTPException, Response

ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}

_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def asset(name: str) -> Response:
    """One of the dashboard's files."""
    if name not in ASSETS:
        raise HTTPException(404, f"no dashboard file {name!r}")
    body = resources.files("durable_adk.service").joinpath("static", name).read_bytes()
    return Response(body, media_type=ASSETS[name], headers=_HEADERS)


def add_routes(app: FastAPI) -> None:
    """Serves the dashboard at ``/dashboard/``."""

    @app.get("/dashboard", include_in_schema=False)
    async def dashboard_redirect() -> Response:
        return Response(status_code=307, headers={"Location": "/dashboard/"})

    @app.get("/dashboard/", include_in_schema=False)
    async def dashboard_page() -> Response:
        return asset("index.html")

    @app.get("/dashboard/{name}", include_in_schema=False)
    async def dashboard_asset(name: str) -> Response:
        return asset(name)
