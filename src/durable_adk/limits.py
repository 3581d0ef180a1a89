"""Bounds on what the library stores from outside: a value's nesting depth and its size.

What it guarantees: every value that comes from outside the library and ends
up in the store (a job's result, a webhook's body, an interrupt's answer, a
run's request and message, a tool's result, a state delta, an artifact's
metadata) is checked here, by :meth:`PayloadLimits.check`, before anything is
written; a value past a bound is refused with :class:`~durable_adk.errors.PayloadTooDeep`
or :class:`~durable_adk.errors.PayloadTooLarge` (both
:class:`~durable_adk.errors.InvalidArgument`; HTTP 422 and 413) naming the
bound, and nothing changes. The session service checks each event it stores
with :meth:`PayloadLimits.check_event` as a last guard.

Why: the log must load back on every worker (DESIGN invariant 14). Its readers
stop at a nesting depth: pydantic-core's JSON parser (ours, and ADK's
``Event.model_validate_json``) at 200 levels, its serializer at 254, Python's
``json`` near the recursion limit. A payload sits inside an event several
levels deep (``content.parts[].function_response.response``), so the depth
a payload may have is bounded well below the readers' (:data:`MAX_DEPTH_CEILING`
plus :data:`EVENT_ENVELOPE` levels of event around it);
``tests/unit/test_payload_limits.py`` measures every reader and proves the
margin.

How deep and how large: the depth of a value is the number of containers
(objects and arrays) on its deepest path: ``1`` has depth 0, ``{}`` and
``[1]`` depth 1, ``{"a": [1]}`` depth 2. Its size is the length in bytes of
its compact UTF-8 JSON encoding, as the store writes it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from durable_adk import errors

DEFAULT_MAX_DEPTH = 64
"""The deepest nesting a stored value may have by default (levels of objects and arrays)."""

DEFAULT_MAX_BYTES = 1_048_576
"""The largest stored value by default: 1 MiB of compact JSON."""

MAX_DEPTH_CEILING = 128
"""The deepest ``max_depth`` may be set: a value this deep, in the deepest place an
event holds one, still loads in every reader of the log (proven by a test)."""

EVENT_ENVELOPE = 16
"""Levels an event may add around a payload: ``Event.content.parts[].function_response
.response`` is 6, a confirmation's payload in an answer 7; the rest is margin."""

MESSAGE_ENVELOPE = 5
"""Levels of a run's message that do not count: ``Content.parts[].function_response``
(4) holds an answer's response, and an answer the library makes wraps a value in
one object more (``{"result": value}``, ``{"confirmed": ..., "payload": value}``)."""

MODEL_ENVELOPE = 4
"""Levels of a model's ``Content`` around a function call's arguments."""

_SCALARS = (str, int, float, bool, type(None))
_SEQUENCES = (list, tuple)


@dataclass(frozen=True, slots=True)
class PayloadLimits:
    """How deep and how large a value from outside may be before it is stored.

    One value for the whole store: :func:`durable_adk.store.open_store` takes
    it (``limits=``), ``durable-adk serve`` builds it from
    ``--max-payload-depth`` and ``--max-payload-bytes``, and every table,
    service and route on that store checks with it.

    Attributes:
        max_depth: The deepest nesting of objects and arrays (1 to
            :data:`MAX_DEPTH_CEILING`).
        max_bytes: The largest compact JSON encoding, in bytes.
    """

    max_depth: int = DEFAULT_MAX_DEPTH
    max_bytes: int = DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        if not isinstance(self.max_depth, int) or not 1 <= self.max_depth <= MAX_DEPTH_CEILING:
            raise errors.InvalidArgument(
                f"max_depth must be 1..{MAX_DEPTH_CEILING} (deeper values would not load back "
                f"in every reader of the log), not {self.max_depth!r}"
            )
        if not isinstance(self.max_bytes, int) or self.max_bytes < 1:
            raise errors.InvalidArgument(f"max_bytes must be >= 1, not {self.max_bytes!r}")

    def check(self, value: Any, what: str, *, envelope: int = 0) -> None:
        """Refuses ``value`` if it is nested deeper or encodes larger than the limits.

        Args:
            value: A JSON-like value (objects, arrays, scalars; other objects
                are measured as pydantic encodes them).
            what: What the value is, for the message ("the job's result").
            envelope: Levels of ``value`` that are its envelope, not its
                payload, and do not count (a message's ``Content`` around
                its answers: :data:`MESSAGE_ENVELOPE`).

        Raises:
            PayloadTooDeep: It is nested deeper than ``max_depth``.
            PayloadTooLarge: Its JSON is larger than ``max_bytes``.
        """
        deepest = self.max_depth + envelope
        found, opaque = depth_of(value, stop=deepest + 1)
        if found > deepest:
            raise self._too_deep(what)
        try:
            encoded = _encoded(value, opaque=opaque)
        except RecursionError:
            raise self._too_deep(what) from None
        if encoded is None:
            return  # not JSON at all: the caller's own check says so
        if opaque and _nested_over(encoded, deepest):
            raise self._too_deep(what)
        if len(encoded) > self.max_bytes:
            raise errors.PayloadTooLarge(
                f"{what} is {len(encoded)} bytes of JSON, over the limit of {self.max_bytes} "
                "(max_payload_bytes); nothing was stored"
            )

    def check_event(self, data: str, what: str) -> None:
        """Refuses an event's JSON nested deeper than ``max_depth`` plus :data:`EVENT_ENVELOPE`.

        The last guard before the log: a payload that reached an event by a
        way no edge checked (an app's callback, a tool's state change) never
        makes the session unreadable.

        Raises:
            PayloadTooDeep: It is.
        """
        deepest = self.max_depth + EVENT_ENVELOPE
        found = _nested_over(data, deepest)
        if found:
            raise errors.PayloadTooDeep(
                f"{what} is nested {found} levels deep, over the limit of "
                f"{deepest} (max_payload_depth {self.max_depth} plus "
                f"{EVENT_ENVELOPE} for the event around it); it was not stored"
            )

    def _too_deep(self, what: str) -> errors.PayloadTooDeep:
        return errors.PayloadTooDeep(
            f"{what} is nested more than {self.max_depth} levels deep, over the limit of "
            f"{self.max_depth} (max_payload_depth); nothing was stored"
        )


def _encoded(value: Any, *, opaque: bool) -> bytes | None:
    """The compact UTF-8 JSON of a value (None if it has none; RecursionError if too deep).

    Plain values (dicts, lists, scalars) are encoded by :mod:`json`: the core
    runs without any dependency. Anything else (a model, a set, a datetime)
    is encoded as pydantic encodes it when an event is stored; pydantic is
    there whenever such a value is (it comes from the ADK layer).
    """
    if not opaque:
        try:
            return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
        except (TypeError, ValueError):
            return None
    import pydantic_core  # only values from the ADK layer get here

    try:
        return pydantic_core.to_json(value, serialize_unknown=True)
    except (ValueError, pydantic_core.PydanticSerializationError) as exc:
        if "depth" in str(exc):  # deeper than pydantic writes (about 254 levels)
            raise RecursionError(str(exc)) from None
        return None


DEFAULT_LIMITS = PayloadLimits()
"""The limits a store has unless it was opened with others."""


def depth_of(value: Any, *, stop: int) -> tuple[int, bool]:
    """The nesting depth of a Python value, counted up to ``stop``, and whether it holds others.

    Walks without recursion (a value too deep for Python's own recursion is
    still measured) and stops at ``stop``. The second result says whether an
    object other than a dict, list, tuple or scalar was met (a model, a
    dataclass, a set): the value is then measured on its JSON as pydantic
    writes it.
    """
    deepest = 0
    opaque = False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, _SEQUENCES):
            children = item
        elif isinstance(item, _SCALARS):
            continue
        elif isinstance(item, (set, frozenset)):
            opaque = True  # a list in JSON, but not to json.dumps
            children = item
        else:
            opaque = True
            continue
        if level > deepest:
            deepest = level
            if deepest >= stop:
                return deepest, opaque
        for child in children:
            if not isinstance(child, _SCALARS):
                stack.append((child, level + 1))
    return deepest, opaque


_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def _nested_over(text: str | bytes, deepest: int) -> int:
    """The nesting depth of a JSON text when it is over ``deepest``, else 0.

    A text with no more brackets than levels allowed (the usual event, model
    response or message) cannot nest deeper: it is counted at C speed, and
    only one with more is scanned token by token."""
    if isinstance(text, bytes):
        if text.count(b"{") + text.count(b"[") <= deepest:
            return 0
        text = text.decode("utf-8", "replace")
    elif text.count("{") + text.count("[") <= deepest:
        return 0
    found = json_depth(text)
    return found if found > deepest else 0


def json_depth(text: str) -> int:
    """The nesting depth of a JSON text (strings skipped; the text is not validated)."""
    depth = deepest = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token == "[" or token == "{":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif token == "]" or token == "}":
            depth -= 1
    return deepest


__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "EVENT_ENVELOPE",
    "MAX_DEPTH_CEILING",
    "MESSAGE_ENVELOPE",
    "MODEL_ENVELOPE",
    "PayloadLimits",
    "depth_of",
    "json_depth",
]
