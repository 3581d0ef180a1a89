"""The policies of a durable run: documented value objects instead of repeated keywords.

* :class:`RunPolicy` says how long a lease lasts, how often recovery may
  claim a run before it is parked, how far apart the attempts are, how a
  queued run polls for its turn and how long a cancel lets acts under way
  finish. One value, handed to the run path; DurableRunner's keyword
  arguments of the same names build it.
* :class:`RetryPolicy` says which errors of a drive are transient (the run is
  handed back for recovery) rather than terminal (FAILED).

Both are frozen and checked when made: a bad value is refused with
:class:`~durable_adk.errors.InvalidArgument` before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from google.adk.errors import StaleSessionError
from google.genai import errors as genai_errors

from durable_adk import errors


@dataclass(frozen=True, slots=True)
class RunPolicy:
    """How runs are leased, retried, queued and cancelled.

    Attributes:
        lease: Lease length in seconds, renewed every third of it. A drive
            whose renewals fail for ``lease * 5/6`` since the last one sent is
            cancelled (docs/runs.md, "Lease loss stops the work").
        max_attempts: Recovery claims of a run before it is parked with a
            dead letter.
        backoff: The first back-off between recovery attempts in seconds,
            doubled at each attempt.
        queue_poll: The first back-off of a queued run's claim attempts
            (doubled after each attempt that was not woken).
        queue_poll_max: The longest back-off between two claim attempts
            (default: 2 s, or ``queue_poll`` if that is longer).
        cancel_grace: When an operator cancels a running run, how long its
            owner lets the outside acts already under way (and a saga's
            compensation) finish before it aborts the invocation.
    """

    lease: float = 30.0
    max_attempts: int = 3
    backoff: float = 1.0
    queue_poll: float = 0.1
    queue_poll_max: float | None = None
    cancel_grace: float = 30.0

    def __post_init__(self) -> None:
        if not self.lease > 0:
            raise errors.InvalidArgument(f"lease must be > 0 seconds, not {self.lease!r}")
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise errors.InvalidArgument(f"max_attempts must be >= 1, not {self.max_attempts!r}")
        if self.backoff < 0 or self.cancel_grace < 0:
            raise errors.InvalidArgument("backoff and cancel_grace must be >= 0")
        if self.queue_poll_max is None:
            object.__setattr__(self, "queue_poll_max", max(2.0, self.queue_poll))
        if not 0 < self.queue_poll <= self.poll_max:
            raise errors.InvalidArgument("queue_poll must be > 0 and at most queue_poll_max")

    @property
    def poll_max(self) -> float:
        """``queue_poll_max`` as set (never None once made)."""
        assert self.queue_poll_max is not None
        return self.queue_poll_max


DEFAULT_POLICY = RunPolicy()
"""The defaults every entry point takes (DurableRunner, the worker, the api_server plugin)."""


def model_error_is_retryable(exc: BaseException) -> bool:
    """The default :attr:`RetryPolicy.retryable`: a model API error 429 (rate limit) or 5xx."""
    if not isinstance(exc, genai_errors.APIError):
        return False
    code = exc.code if isinstance(exc.code, int) else 0
    return code == 429 or 500 <= code <= 599


TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    errors.DatabaseBusy,
    errors.StoreUnavailable,
    TimeoutError,
    StaleSessionError,
)
"""The errors :class:`RetryPolicy` treats as transient by default."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Which errors of a drive are transient: the run is handed back, not failed.

    An error is transient when it, or any error in its cause/context chain
    (ADK wraps agent errors), is an instance of ``transient`` or satisfies
    ``retryable``. A transient error hands the run back to recovery
    (:meth:`durable_adk.tables.ledger.RunLedger.release`): it stays RUNNING, its
    lease expires now and the sweeper takes it after
    ``backoff * 2 ** (attempts - 1)`` seconds, counting an attempt; past the
    runner's ``max_attempts`` the sweeper parks it with a dead letter. Every
    other error ends the run FAILED for good (an error the app raised
    deterministically would fail again). See docs/runs.md, "Transient and
    terminal errors".

    Attributes:
        transient: Error types that are transient wherever they appear in the
            chain. Default: :data:`TRANSIENT_ERRORS` (the store busy or
            unreachable, a timeout, a session appended to by another writer).
            A bare ``StoreError`` (a constraint, a schema mismatch) is not.
        retryable: A predicate for other errors, meant for model errors.
            Default: :func:`model_error_is_retryable` (google.genai API errors
            with code 429 or 5xx).
    """

    transient: tuple[type[BaseException], ...] = field(default=TRANSIENT_ERRORS)
    retryable: Callable[[BaseException], bool] = field(default=model_error_is_retryable)

    def is_transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` (or an error behind it) is transient under this policy."""
        return any(isinstance(e, self.transient) or self.retryable(e) for e in causes(exc))


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the errors behind it (cause, else context), each once.

    ADK's node runner wraps agent errors, so what a drive meets is often a
    wrapper around the error that decides what to do.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        yield current
        seen.add(id(current))
        current = current.__cause__ or current.__context__


SyncTools = Literal["pool", "loop"]
"""Where a drive runs synchronous tools and FunctionNodes (``DurableRunner(sync_tools=)``)."""


def check_sync_tools(where: object) -> SyncTools:
    """``where`` if it names where sync tools run.

    Raises:
        durable_adk.errors.InvalidArgument: It does not.
    """
    if where == "pool":
        return "pool"
    if where == "loop":
        return "loop"
    raise errors.InvalidArgument(f"sync_tools must be 'pool' or 'loop', got {where!r}")
