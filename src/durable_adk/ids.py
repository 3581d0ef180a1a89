"""The rule every id the library stores obeys (app, user, session, owner).

One rule for the session service and the run ledger, so a run never names a
session the session service would refuse.
"""

from __future__ import annotations

from durable_adk import errors

MAX_ID_LENGTH = 512


def check_id(name: str, value: object) -> str:
    """Returns ``value`` if it is a valid id, else raises InvalidArgument naming ``name``."""
    if not isinstance(value, str) or not value or len(value) > MAX_ID_LENGTH or "\x00" in value:
        raise errors.InvalidArgument(
            f"{name} must be a non-empty string of at most {MAX_ID_LENGTH} characters "
            f"without NUL, got {value!r:.80}"
        )
    return value
