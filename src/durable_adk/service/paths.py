"""How an id goes in a URL path: one percent-encoded segment, for every id.

The worker's routes name runs, sessions, users and interrupts' call ids in
the path. Each id is sent as one segment: its UTF-8 bytes percent-encoded,
every byte but the unreserved ``A-Z a-z 0-9 - . _ ~`` (RFC 3986), so ``/``
becomes ``%2F``, ``%`` becomes ``%25``, ``?`` becomes ``%3F``. An id that is
exactly ``.`` or ``..`` has its dots encoded too (``%2E``), or an HTTP client
would read it as a dot segment and drop it. The server decodes the path once
(uvicorn), and the route of a call id takes the rest of the path
(``/v1/interrupts/{call_id:path}``), so a call id with ``/`` in it is found
whether the ``/`` was encoded or sent plain.

The same encoding is used by :class:`~durable_adk.cli.client.HttpOps` (the
CLI's ``--url``), the dashboard (``encodeURIComponent``, whose result is the
same for every id but ``.`` and ``..``: browsers drop those as dot segments
whatever their encoding) and the ``events_url`` a new run's answer carries.
"""

from __future__ import annotations

from urllib.parse import quote


def segment(value: str) -> str:
    """``value`` as one percent-encoded path segment (see the module doc)."""
    if value in (".", ".."):
        return "%2E" * len(value)
    return quote(value, safe="")


__all__ = ["segment"]
