"""What both ends of a fake service agree on: address, limits, keys, timestamps.

The server side (:mod:`.app`, :mod:`.server`) and the client side
(:mod:`.clients`, :mod:`.process`) import this module and not each other.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import Message
from typing import Any, Final, Literal

__all__ = [
    "CALLER_PREFIX",
    "FENCE_PREFIX",
    "HOST",
    "MAX_BODY_BYTES",
    "MAX_KEY_LENGTH",
    "MAX_LOG_PAGE",
    "READY_PREFIX",
    "REQUESTS_PATH",
    "Caller",
    "FailMode",
    "JsonObject",
    "Outcome",
    "RequestRecord",
    "caller_headers",
    "caller_of",
    "fence_of",
    "key_problem",
    "utc_now",
]

JsonObject = dict[str, Any]
FailMode = Literal["before", "after"]

HOST: Final = "127.0.0.1"
MAX_BODY_BYTES: Final = 64 * 1024
MAX_KEY_LENGTH: Final = 256
READY_PREFIX: Final = "READY "  # a started service prints this and its port on stdout
REQUESTS_PATH: Final = "/_requests"  # the request log; requests to it are not logged
MAX_LOG_PAGE: Final = 1000  # the most records one ``GET /_requests`` returns
CALLER_PREFIX: Final = "X-Caller-"  # headers a caller tags its requests with

Outcome = Literal["created", "applied", "replayed", "found", "not_found", "fenced", "error"]
"""What a logged request came to (None while it is being handled, or if it never ended):

``created`` / ``applied``: this request wrote the item / applied the action;
``replayed``: its idempotency key had already been used, nothing was written;
``found``: a read answered 2xx; ``not_found``: a 404 for a missing item or key;
``fenced``: refused with 412 because of its fence headers (its valid-until had
passed, or a later epoch of its run had been seen), before anything was done;
``error``: any other answer that is not 2xx, with nothing written.
"""

Caller = Mapping[str, str] | Callable[[], Mapping[str, str]]
"""Who a client's requests come from: names and values sent as ``X-Caller-<name>``
headers, or a function asked before each request (for values that change, such
as a run's epoch)."""

_CALLER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")


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


def caller_headers(caller: Mapping[str, str]) -> dict[str, str]:
    """The ``X-Caller-<name>`` headers that tag a request with who sent it.

    Args:
        caller: e.g. ``{"worker": "w1", "run": run_id, "epoch": "2"}``. Names
            are letters, digits and ``-``; they are logged lower-cased.

    Raises:
        ValueError: A name or value cannot be sent as a header.
    """
    headers: dict[str, str] = {}
    for name, value in caller.items():
        if not _CALLER_NAME.fullmatch(name):
            raise ValueError(f"caller name {name!r} must be letters, digits and '-'")
        if not isinstance(value, str) or not all(" " <= ch <= "~" for ch in value):
            raise ValueError(f"caller {name!r} must be a printable ASCII string, got {value!r}")
        headers[f"{CALLER_PREFIX}{name}"] = value.strip(" ")
    return headers


FENCE_PREFIX: Final = "Durable-Fence-"  # durable_adk.fencing.fence's headers share it


def fence_of(headers: Message) -> dict[str, str]:
    """The fence headers of a received request as :attr:`RequestRecord.fence` holds them.

    Names are lower-cased without the ``Durable-Fence-`` prefix; a repeated
    header's values are joined with ``", "`` (the service refuses it).
    """
    return _tagged(headers, FENCE_PREFIX)


def caller_of(headers: Message) -> dict[str, str]:
    """The ``X-Caller-*`` headers of a received request, as :attr:`RequestRecord.caller` holds them.

    Names are lower-cased without the prefix; a repeated header's values are
    joined with ``", "``.
    """
    return _tagged(headers, CALLER_PREFIX)


def _tagged(headers: Message, prefix: str) -> dict[str, str]:
    prefix = prefix.lower()
    found: dict[str, str] = {}
    for name, value in headers.items():
        if name.lower().startswith(prefix) and len(name) > len(prefix):
            short = name[len(prefix) :].lower()
            found[short] = f"{found[short]}, {value}" if short in found else str(value)
    return found


@dataclass(frozen=True)
class RequestRecord:
    """One request as a fake service received it: a row of its request log.

    Logged before it is handled, so a request that failed, was refused, was
    answered from an earlier one with the same key, or never got an answer
    (the service died) is in the log all the same.

    Attributes:
        seq: Its place in the log, from 1, in the order received.
        method: ``GET``, ``POST``, ...
        path: The request target as sent (path and query).
        collection: The collection it addresses, or None (``GET /``, unknown paths).
        action: What it asks for: ``create``, an action's name (``void``,
            ``refund``, ...), or a read: ``lookup``, ``get``, ``list``,
            ``count``, ``info``; None for a path the service has no route for.
        item_id: The item id in the path (``GET /C/<id>``, ``POST /C/<id>/<action>``).
        key: The idempotency key as the service reads it: the single
            ``Idempotency-Key`` header (or the key in a lookup's path, or the
            body member a service keys by); None if there was none.
        mutating: Whether it is an act: a ``POST`` to a create or action route,
            whatever its answer.
        caller: Its ``X-Caller-*`` headers, names lower-cased without the
            prefix (``X-Caller-Worker: w1`` is ``{"worker": "w1"}``).
        fence: Its fence headers (``Durable-Fence-*``, see
            :func:`durable_adk.fencing.fence.fence_headers`) as sent, by short name
            (``run``, ``epoch``, ``valid-until``); empty if it had none.
        outcome: What it came to (see :data:`Outcome`); None if it was never answered.
        status: The HTTP status answered, or None.
        reason: The error answer's ``reason`` code (``injected_failure``, ...), or None.
        received_at: The service's wall clock (Unix seconds) when it arrived.
        answered_at: The same when the answer was ready, or None.
    """

    seq: int
    method: str
    path: str
    collection: str | None
    action: str | None
    item_id: str | None
    key: str | None
    mutating: bool
    caller: Mapping[str, str] = field(default_factory=dict)
    outcome: Outcome | None = None
    status: int | None = None
    reason: str | None = None
    received_at: float = 0.0
    answered_at: float | None = None
    fence: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        """The record as ``GET /_requests`` sends it."""
        return {
            "seq": self.seq,
            "method": self.method,
            "path": self.path,
            "collection": self.collection,
            "action": self.action,
            "item_id": self.item_id,
            "key": self.key,
            "mutating": self.mutating,
            "caller": dict(self.caller),
            "outcome": self.outcome,
            "status": self.status,
            "reason": self.reason,
            "received_at": self.received_at,
            "answered_at": self.answered_at,
            "fence": dict(self.fence),
        }

    @classmethod
    def from_json(cls, data: Any) -> RequestRecord:
        """Reads one record of ``GET /_requests``.

        Raises:
            ValueError: ``data`` is not such a record.
        """
        if not isinstance(data, dict):
            raise ValueError(f"a request record must be an object, not {type(data).__name__}")
        try:
            caller = data["caller"]
            if not isinstance(caller, dict):
                raise ValueError("caller must be an object")
            return cls(
                seq=int(data["seq"]),
                method=str(data["method"]),
                path=str(data["path"]),
                collection=_optional_str(data["collection"]),
                action=_optional_str(data["action"]),
                item_id=_optional_str(data["item_id"]),
                key=_optional_str(data["key"]),
                mutating=bool(data["mutating"]),
                caller={str(k): str(v) for k, v in caller.items()},
                outcome=data["outcome"],
                status=None if data["status"] is None else int(data["status"]),
                reason=_optional_str(data["reason"]),
                received_at=float(data["received_at"]),
                answered_at=None if data["answered_at"] is None else float(data["answered_at"]),
                fence={str(k): str(v) for k, v in (data.get("fence") or {}).items()},
            )
        except (KeyError, TypeError) as err:
            raise ValueError(f"not a request record: {data!r}") from err

    def matches(
        self,
        *,
        collection: str | None = None,
        action: str | None = None,
        key: str | None = None,
        caller: Mapping[str, str] | None = None,
        mutating: bool | None = None,
        outcome: str | None = None,
    ) -> bool:
        """Whether the record has every value given (``caller``: each of its names)."""
        return (
            (outcome is None or self.outcome == outcome)
            and (collection is None or self.collection == collection)
            and (action is None or self.action == action)
            and (key is None or self.key == key)
            and (mutating is None or self.mutating is mutating)
            and (caller is None or all(self.caller.get(k.lower()) == v for k, v in caller.items()))
        )


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)
