"""The one rule every id obeys (app, user, session, run, owner): library, URIs and HTTP API.

One rule for the session service, the run ledger, ADK's servers on a
``durable+`` session URI and the worker's HTTP API, so every session the
library stores can be named in a URL path and no URL can name one the library
would refuse: 1 to 512 characters, none of them NUL or another control
character, nor ``/`` (a path separator in every URL).
"""

from __future__ import annotations

import hashlib
import re

from durable_adk import errors

MAX_ID_LENGTH = 512

ID_PATTERN = r"^[^\x00-\x1f\x7f/]{1,512}$"
"""The rule as a regular expression (what the HTTP API's OpenAPI spec states)."""

_ID = re.compile(ID_PATTERN)


def check_id(name: str, value: object) -> str:
    """Returns ``value`` if it is a valid id, else raises InvalidArgument naming ``name``."""
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise errors.InvalidArgument(
            f"{name} must be 1 to {MAX_ID_LENGTH} characters without '/', NUL or other "
            f"control characters, got {value!r:.80}"
        )
    return value


IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]([\x20-\x7e]{0,253}[\x21-\x7e])?$"
"""An ``Idempotency-Key``: 1 to 255 printable ASCII characters, no space at either end."""


def run_id_for_key(app_name: str, user_id: str, key: str) -> str:
    """The run id an idempotency key names: one per app, user and key.

    A digest, so that a key says nothing of the run ids the library chooses
    and two users' keys never meet: ``run-`` and 32 hex digits, as a new run's.
    """
    digest = hashlib.sha256("\x00".join((app_name, user_id, key)).encode()).hexdigest()
    return f"run-{digest[:32]}"
