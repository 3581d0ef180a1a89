"""What both ends of a fake service agree on: address, limits, keys, timestamps.

The server side (:mod:`.app`, :mod:`.server`) and the client side
(:mod:`.clients`, :mod:`.process`) import this module and not each other.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final, Literal

__all__ = [
    "HOST",
    "MAX_BODY_BYTES",
    "MAX_KEY_LENGTH",
    "READY_PREFIX",
    "FailMode",
    "JsonObject",
    "key_problem",
    "utc_now",
]

JsonObject = dict[str, Any]
FailMode = Literal["before", "after"]

HOST: Final = "127.0.0.1"
MAX_BODY_BYTES: Final = 64 * 1024
MAX_KEY_LENGTH: Final = 256
READY_PREFIX: Final = "READY "  # a started service prints this and its port on stdout


def utc_now() -> str:
    """The current UTC time as ISO 8601 with microseconds."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def key_problem(key: str) -> str | None:
    """Says what is wrong with an idempotency key, or None if it is acceptable.

    A key is 1 to 256 printable ASCII characters (space to ``~``) without
    leading or trailing spaces (HTTP would strip those from a header).
    """
    if not key:
        return "the idempotency key is empty"
    if len(key) > MAX_KEY_LENGTH:
        return f"the idempotency key has {len(key)} characters; the limit is {MAX_KEY_LENGTH}"
    if key != key.strip(" ") or not all(" " <= ch <= "~" for ch in key):
        return "the idempotency key must be printable ASCII without leading or trailing spaces"
    return None
