"""The settings of one worker process, as one frozen value.

Everything the worker, its HTTP API and its loops need to know comes from a
:class:`ServiceSettings` handed to their constructors; nothing is read from
globals. ``durable-adk serve`` builds it from its options. Defaults are safe
ones: the API binds 127.0.0.1 and every operation needs a bearer token (a
random one is made when none is given).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from durable_adk import errors
from durable_adk.adk.loops.every import require_positive
from durable_adk.adk.runs.policy import DEFAULT_POLICY, SyncTools, check_sync_tools
from durable_adk.lifecycle.policy import RetentionPolicy
from durable_adk.limits import DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH, PayloadLimits
from durable_adk.store.sealing.codec import Keyring, keyring_from_env

if TYPE_CHECKING:
    from durable_adk.adk.services.app_services import AppServices

DEFAULT_MAX_BODY_BYTES = 1_048_576
"""Requests with a larger body are refused with 413 (1 MiB)."""


def new_token() -> str:
    """A fresh random bearer token (URL-safe, 256 bits)."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    """How a worker serves.

    Attributes:
        db: The store URL (``sqlite:///path.db`` or ``postgresql://...``).
        host: The address the HTTP API binds (127.0.0.1 unless told otherwise).
        port: The HTTP port (0: any free port).
        token: The bearer token every operation needs.
        worker_id: This worker's name on the ledger (None: host:pid:random).
        lease: Run lease length in seconds; renewed every third of it.
        max_attempts: Recovery claims before a run is parked.
        backoff: First back-off between recovery attempts, doubled each time.
        idempotent_tools: Tools the sweeper may re-run after a crash.
        sync_tools: Where sync tools run (``DurableRunner(sync_tools=)``): ``"pool"``
            or ``"loop"``.
        sweep_interval: Seconds between recovery passes.
        sweep_batch: Most runs one recovery pass claims.
        poll_interval: How often a follower polls the store for new events.
        keepalive: Seconds between SSE comments on an idle stream.
        drain_seconds: On SIGTERM, how long runs in progress may take to
            finish before their leases are handed back.
        max_body_bytes: Larger request bodies are refused with 413.
        max_message_chars: Longest user message a run accepts.
        max_payload_depth: The deepest nesting (objects and arrays) of a value
            from outside the worker stores: a job's result, a webhook's, an
            answer, a run's message, a tool's result, a state delta (deeper:
            422 ``payload_too_deep``; at most
            :data:`durable_adk.limits.MAX_DEPTH_CEILING`).
        max_payload_bytes: The largest such value, as compact JSON (larger:
            413 ``payload_too_large``). A request body is capped first by
            ``max_body_bytes``.
        webhook_secret: The HMAC secret of the job-completion webhook (None:
            no webhook route).
        resume_interval: Seconds between passes of the job resumer.
        expiry_interval: Seconds between passes of the job deadline sweep.
        progress_interval: At most one progress delivery per job per this many seconds.
        saga_quiet: Quiet seconds before a saga with no final status counts as stuck.
        interrupt_deadlines: Seconds an interrupt waits for a person before its
            default outcome (deny) applies, as ``(tool name, seconds)`` pairs
            (``"*"``: any call); see ``DurableRunner(interrupt_deadlines=...)``.
        streaming: Drive runs with ADK's ``StreamingMode.SSE``: the model's
            text reaches the event stream live as partial events (never
            stored); a run may ask otherwise (``streaming`` in its body).
        services: The app's artifact, memory and credential services, used by
            every run the worker drives, recovered ones included (None: none
            but the default durable artifact service). ``durable-adk serve``
            loads them with :func:`durable_adk.adk.services.app_services.load_services`.
        app_version: The app's version (PEP 440), recorded on every run this
            worker starts; it claims only runs it serves (None: unversioned;
            see ``DurableRunner(version=...)`` and docs/deploying.md).
        compatible_versions: Earlier versions whose runs this worker continues.
        key_file: A key file (docs/data.md, "Encryption at rest"): the payload
            columns are sealed with its first key and opened with any of them
            (None: ``DURABLE_ADK_KEY_FILE`` if set, else values in clear).
        per_user_keys: Seal each user's rows under a data key of their own
            (needs keys), so ``shred_user`` can make them unreadable.
        a2a: Serve the app over A2A too (needs the ``a2a`` extra): the agent
            card at ``/.well-known/agent-card.json``, JSON-RPC at ``/a2a``,
            every task a durable run (docs/a2a.md). Its JSON-RPC routes need
            ``token`` (the caller with no name) or a token of ``a2a_callers``.
        a2a_callers: ``(name, token)`` pairs: more A2A callers, each admitted
            with its token and owning its own tasks and push configs (not
            admitted to the run API).
        a2a_push_hosts: The only hosts an A2A push URL may name
            (``*.example.com``: any host under it); empty: any host.
        retention: The app's retention policy, run by the worker's purge loop
            (None, the default: nothing is purged; docs/data.md).
    """

    db: str
    host: str = "127.0.0.1"
    port: int = 8000
    token: str = field(default_factory=new_token, repr=False)
    worker_id: str | None = None
    lease: float = DEFAULT_POLICY.lease
    max_attempts: int = DEFAULT_POLICY.max_attempts
    backoff: float = DEFAULT_POLICY.backoff
    idempotent_tools: tuple[str, ...] = ()
    sync_tools: SyncTools = "pool"
    sweep_interval: float = 5.0
    sweep_batch: int = 10
    poll_interval: float = 0.2
    keepalive: float = 15.0
    drain_seconds: float = 10.0
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_message_chars: int = 100_000
    max_payload_depth: int = DEFAULT_MAX_DEPTH
    max_payload_bytes: int = DEFAULT_MAX_BYTES
    webhook_secret: str | None = field(default=None, repr=False)
    resume_interval: float = 1.0
    expiry_interval: float = 30.0
    progress_interval: float = 60.0
    saga_quiet: float = 300.0
    interrupt_deadlines: tuple[tuple[str, float], ...] = ()
    streaming: bool = False
    services: AppServices | None = None
    app_version: str | None = None
    compatible_versions: tuple[str, ...] = ()
    key_file: str | None = None
    per_user_keys: bool = False
    a2a: bool = False
    a2a_callers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    a2a_push_hosts: tuple[str, ...] = ()
    retention: RetentionPolicy | None = None

    def __post_init__(self) -> None:
        from durable_adk.versions import Serving  # refuses a bad declaration before anything runs

        Serving.declare(self.app_version, compatible=self.compatible_versions)
        if self.services is not None:
            from durable_adk.adk.services.app_services import (
                AppServices,  # imports ADK: only when given
            )

            if not isinstance(self.services, AppServices):
                raise errors.InvalidArgument(
                    f"services must be AppServices, not {type(self.services).__name__}"
                )
        check_sync_tools(self.sync_tools)
        if not self.token or len(self.token) < 8:
            raise errors.InvalidArgument("the bearer token must be at least 8 characters")
        require_positive(
            lease=self.lease,
            sweep_interval=self.sweep_interval,
            poll_interval=self.poll_interval,
            keepalive=self.keepalive,
            resume_interval=self.resume_interval,
            expiry_interval=self.expiry_interval,
            progress_interval=self.progress_interval,
            saga_quiet=self.saga_quiet,
        )
        if self.drain_seconds < 0 or self.max_body_bytes < 1 or self.max_message_chars < 1:
            raise errors.InvalidArgument(
                "drain_seconds must be >= 0, max_body_bytes and max_message_chars >= 1"
            )
        if any(seconds <= 0 for _, seconds in self.interrupt_deadlines):
            raise errors.InvalidArgument("interrupt deadlines must be > 0 seconds")
        PayloadLimits(self.max_payload_depth, self.max_payload_bytes)  # refuses bad bounds
        if self.key_file is not None:
            self.keyring()  # a missing or bad key file is refused before anything runs
        if self.per_user_keys and self.keyring() is None:
            raise errors.InvalidArgument("per_user_keys needs keys: give key_file")
        if self.retention is not None and not isinstance(self.retention, RetentionPolicy):
            raise errors.InvalidArgument(
                f"retention must be a RetentionPolicy, not {type(self.retention).__name__}"
            )
        if (self.a2a_callers or self.a2a_push_hosts) and not self.a2a:
            raise errors.InvalidArgument("A2A callers and push hosts need --a2a")
        names = [name for name, _ in self.a2a_callers]
        tokens = [self.token, *(secret for _, secret in self.a2a_callers)]
        if any(not name for name in names) or len(set(names)) != len(names):
            raise errors.InvalidArgument("every A2A caller needs a name of its own")
        if len(set(tokens)) != len(tokens):
            raise errors.InvalidArgument(
                "every A2A caller needs a token of its own (not the worker's --token)"
            )
        if not 0 <= self.port <= 65535:
            raise errors.InvalidArgument(f"port must be 0..65535, got {self.port}")

    def keyring(self) -> Keyring | None:
        """The keys of ``key_file`` (else of ``DURABLE_ADK_KEY_FILE``), or None."""
        if self.key_file is not None:
            return Keyring.from_file(self.key_file)
        return keyring_from_env()

    def a2a_owners(self) -> dict[str, str]:
        """The bearer tokens of the A2A routes and the owner each names (the worker's: ``""``)."""
        return {self.token: "", **{secret: name for name, secret in self.a2a_callers}}

    @property
    def payload_limits(self) -> PayloadLimits:
        """``max_payload_depth`` and ``max_payload_bytes`` as the store's limits."""
        return PayloadLimits(self.max_payload_depth, self.max_payload_bytes)
