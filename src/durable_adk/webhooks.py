"""Job completions by webhook: verify, parse, complete; anything doubtful changes nothing.

:func:`handle_job_webhook` is framework-agnostic: the HTTP service (or any
other server) hands it the request's headers and raw body and answers with the
status it returns or the one carried by the :class:`WebhookError` it raises.
Guarantees:

* The signature is HMAC-SHA256, keyed by a shared secret, over
  ``"<timestamp>.<raw body>"``, sent as ``X-Durable-Signature: sha256=<hex>``
  with ``X-Durable-Timestamp: <unix seconds>``; it is compared in constant
  time. The timestamp must lie within ``window`` seconds of now, so a
  captured request cannot be replayed later.
* A bad or missing signature (401), a stale timestamp (401), a malformed body
  (400), an unknown job (404) or a result nested deeper (422) or larger (413)
  than the store's payload limits raises before anything is written, and the
  error's message says which.
* A valid completion goes through :meth:`~durable_adk.effect_tables.jobs.JobTable.complete`:
  a duplicate or late delivery is answered 200 like the first, and changes
  nothing.

Body: ``{"job_id": str, "state": "SUCCEEDED"|"FAILED"|"CANCELLED", "result": {...}}``.
:func:`sign` builds the headers a sender needs.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from durable_adk import errors
from durable_adk.effect_tables.jobs import COMPLETION_STATES, JobNotFound, JobState, JobTable
from durable_adk.metrics import Metrics

SIGNATURE_HEADER = "X-Durable-Signature"
TIMESTAMP_HEADER = "X-Durable-Timestamp"
DEFAULT_WINDOW = 300.0
"""Seconds a signed request stays acceptable, either side of now."""
MAX_BODY = 1 << 20
"""Largest body accepted, in bytes."""


class WebhookError(errors.DurableError):
    """The webhook was refused and nothing was changed."""

    status = 400


class BadSignature(WebhookError):
    """The webhook's signature is missing or does not match its body and timestamp."""

    status = 401


class StaleTimestamp(WebhookError):
    """The webhook's timestamp is missing or outside the accepted window."""

    status = 401


class MalformedBody(WebhookError):
    """The webhook's body is not a completion: a JSON object with job_id, state and result."""

    status = 400


class UnknownJob(WebhookError):
    """The webhook names a job that does not exist."""

    status = 404


class TooDeep(WebhookError):
    """The webhook's result is nested deeper than the store's limit (max_payload_depth)."""

    status = 422


class TooLarge(WebhookError):
    """The webhook's result is larger than the store's limit (max_payload_bytes)."""

    status = 413


@dataclass(frozen=True, slots=True)
class WebhookResult:
    """What an accepted webhook did.

    Attributes:
        status: The HTTP status to answer with (200).
        job_id: The job.
        state: The job's state now (the first terminal result's).
        changed: Whether this delivery ended the job (False for a duplicate
            or a late result).
        result: The result the job kept (the first terminal result's): a
            sender whose delivery lost learns what won.
    """

    status: int
    job_id: str
    state: JobState
    changed: bool
    result: Any = None

    def body(self) -> dict[str, Any]:
        """The JSON answer for the sender."""
        return {
            "job_id": self.job_id,
            "state": self.state.value,
            "changed": self.changed,
            "result": self.result,
        }


def signature(secret: str | bytes, timestamp: str, body: bytes) -> str:
    """The ``sha256=<hex>`` signature of a body sent at ``timestamp``."""
    key = secret.encode() if isinstance(secret, str) else secret
    digest = hmac.new(key, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def sign(secret: str | bytes, body: bytes, now: float) -> dict[str, str]:
    """The headers that authenticate ``body`` sent at ``now`` (Unix seconds)."""
    timestamp = str(int(now))
    return {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: signature(secret, timestamp, body)}


def _header(headers: Mapping[str, str], name: str) -> str | None:
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


def verify(
    secret: str | bytes,
    headers: Mapping[str, str],
    body: bytes,
    now: float,
    *,
    window: float = DEFAULT_WINDOW,
) -> None:
    """Checks the timestamp window and the signature.

    Raises:
        StaleTimestamp: Missing, not a number, or more than ``window`` seconds off.
        BadSignature: Missing or not matching.
    """
    timestamp = _header(headers, TIMESTAMP_HEADER)
    if timestamp is None or not timestamp.strip().isdigit():
        raise StaleTimestamp(f"missing or malformed {TIMESTAMP_HEADER} header")
    if abs(now - int(timestamp)) > window:
        raise StaleTimestamp(
            f"{TIMESTAMP_HEADER} {timestamp} is more than {window:.0f}s from now ({now:.0f})"
        )
    given = _header(headers, SIGNATURE_HEADER)
    if given is None:
        raise BadSignature(f"missing {SIGNATURE_HEADER} header")
    expected = signature(secret, timestamp.strip(), body)
    if not hmac.compare_digest(given.strip().encode(), expected.encode()):
        raise BadSignature()


def parse(body: bytes) -> tuple[str, JobState, Any]:
    """Reads ``(job_id, state, result)`` from a completion body.

    Raises:
        MalformedBody: Anything else.
    """
    if len(body) > MAX_BODY:
        raise MalformedBody(f"body over {MAX_BODY} bytes")
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MalformedBody(f"body is not JSON: {exc}") from exc
    except RecursionError:
        raise TooDeep("the body is nested too deep to parse; nothing was stored") from None
    if not isinstance(payload, dict):
        raise MalformedBody("body must be a JSON object")
    job_id = payload.get("job_id")
    if not isinstance(job_id, str) or not job_id:
        raise MalformedBody("job_id must be a non-empty string")
    state = payload.get("state")
    if state not in {s.value for s in COMPLETION_STATES}:
        raise MalformedBody("state must be SUCCEEDED, FAILED or CANCELLED")
    if "result" not in payload:
        raise MalformedBody("result is missing")
    unknown = set(payload) - {"job_id", "state", "result"}
    if unknown:
        raise MalformedBody(f"unknown fields {sorted(unknown)}")
    return job_id, JobState(state), payload["result"]


async def handle_job_webhook(
    jobs: JobTable,
    secret: str | bytes,
    headers: Mapping[str, str],
    body: bytes,
    now: float,
    *,
    window: float = DEFAULT_WINDOW,
    metrics: Metrics | None = None,
) -> WebhookResult:
    """Verifies a completion webhook and completes its job.

    Args:
        jobs: The job table.
        secret: The secret shared with the sender.
        headers: The request headers (names compared case-insensitively).
        body: The raw request body, exactly as received.
        now: The receiver's clock, Unix seconds (for the timestamp window).
        window: Seconds of clock difference accepted.
        metrics: Counts each outcome in ``durable_adk_job_completions``:
            ``applied``, ``duplicate`` (the same result again), ``late``
            (after another terminal result, such as an expiry) or ``rejected``.

    Returns:
        What it did; a duplicate or late result is accepted with ``changed=False``.

    Raises:
        WebhookError: ``BadSignature``, ``StaleTimestamp``, ``MalformedBody``,
            ``UnknownJob``, ``TooDeep`` (422) or ``TooLarge`` (413: the result
            past the store's :class:`~durable_adk.limits.PayloadLimits`), each
            with its HTTP ``status``; nothing was written.
    """
    try:
        verify(secret, headers, body, now, window=window)
        job_id, state, result = parse(body)
        try:
            done = await jobs.complete(job_id, state, result)
        except JobNotFound as exc:
            raise UnknownJob(f"no job {job_id!r}") from exc
        except errors.PayloadTooDeep as exc:
            raise TooDeep(str(exc)) from exc
        except errors.PayloadTooLarge as exc:
            raise TooLarge(str(exc)) from exc
        except errors.InvalidArgument as exc:
            raise MalformedBody(str(exc)) from exc
    except WebhookError:
        if metrics is not None:
            metrics.job_completion("rejected")
        raise
    if metrics is not None:
        same = done.job.state is state and done.job.result == result
        metrics.job_completion("applied" if done.changed else "duplicate" if same else "late")
    return WebhookResult(
        status=200,
        job_id=job_id,
        state=done.job.state,
        changed=done.changed,
        result=done.job.result,
    )
