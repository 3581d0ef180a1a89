"""Push notifications from the durable outbox: at least once, signed, retried, dead-lettered.

:class:`PushDelivery` runs in every A2A worker. It takes due pushes of its
app (:class:`~durable_adk.a2a_tables.outbox.PushOutbox`) and POSTs each
event (a ``StreamResponse``, the SDK's JSON) to the URL the client
registered, with the client's token in ``X-A2A-Notification-Token`` (A2A's
scheme for a token the client gave; a config with credentials sends them as
``Authorization``) and an ``Idempotency-Key`` (task, version, config) the
receiver can dedupe on. A 2xx answer marks it sent; anything else, or no
answer, is tried again after a growing back-off (``backoff`` doubled per
attempt, at most ``max_backoff``), and after ``max_attempts`` the push is
DEAD, kept with its last error for operators; a URL the server's push
policy refuses now (:mod:`durable_adk.a2a.push_urls`) is never POSTed to:
its push is DEAD at once, saying why. A worker killed mid-delivery
loses nothing: the push's lease runs out and another worker sends it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import httpx

from durable_adk import errors
from durable_adk.a2a import codec
from durable_adk.a2a.push_urls import PushUrlPolicy
from durable_adk.a2a_tables.outbox import Push, PushOutbox
from durable_adk.store.base import Store

logger = logging.getLogger("durable_adk.a2a")

TOKEN_HEADER = "X-A2A-Notification-Token"
IDEMPOTENCY_HEADER = "Idempotency-Key"


class PushDelivery:
    """Delivers an app's pushes from the outbox (see the module)."""

    def __init__(
        self,
        store: Store,
        app_name: str,
        *,
        every: float = 0.2,
        lease: float = 10.0,
        timeout: float = 5.0,
        backoff: float = 1.0,
        max_backoff: float = 300.0,
        max_attempts: int = 10,
        push_urls: PushUrlPolicy | None = None,
    ) -> None:
        """Binds the delivery to the app's outbox.

        Args:
            store: The runs' database.
            app_name: The app whose pushes it sends.
            every: Seconds between two looks at the outbox when it was empty.
            lease: Seconds a taken push is this worker's (more than ``timeout``).
            timeout: Seconds to wait for a receiver's answer.
            backoff: Seconds before the second attempt, doubled each time.
            max_backoff: The longest wait between two attempts.
            max_attempts: Attempts before the push is DEAD.
            push_urls: The URLs it sends to (asked again before each POST: a
                refused URL's push is DEAD at once, never sent).
        """
        if lease <= timeout or max_attempts < 1 or backoff <= 0 or every <= 0:
            raise errors.InvalidArgument(
                "push delivery needs lease > timeout, max_attempts >= 1, backoff > 0, every > 0"
            )
        self.outbox = PushOutbox(store, app_name)
        self.every = every
        self.lease = lease
        self.timeout = timeout
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_attempts = max_attempts
        self.push_urls = push_urls or PushUrlPolicy()

    async def once(self, http: httpx.AsyncClient) -> int:
        """Sends the pushes due now; returns how many it tried."""
        taken = await self.outbox.claim(lease=self.lease)
        await asyncio.gather(*(self._send(http, push) for push in taken))
        return len(taken)

    async def run(self) -> None:
        """Delivers until cancelled."""
        async with httpx.AsyncClient(timeout=self.timeout) as http:
            while True:
                tried = 0
                with contextlib.suppress(errors.StoreError):
                    tried = await self.once(http)
                if not tried:
                    await asyncio.sleep(self.every)

    async def _send(self, http: httpx.AsyncClient, push: Push) -> None:
        config = codec.push_from_text(push.config)
        refused = self.push_urls.refusal(config.url)
        if refused is not None:
            logger.warning(
                "push %s of task %s not sent: %s", push.idempotency_key, push.task_id, refused
            )
            await self.outbox.failed(
                push, error=f"not sent: {refused}", backoff=0, max_attempts=push.attempts
            )
            return
        headers = {"Content-Type": "application/json", IDEMPOTENCY_HEADER: push.idempotency_key}
        if config.token:
            headers[TOKEN_HEADER] = config.token
        if config.HasField("authentication") and config.authentication.credentials:
            scheme = config.authentication.scheme or "Bearer"
            headers["Authorization"] = f"{scheme} {config.authentication.credentials}"
        error: str | None = None
        try:
            answer = await http.post(config.url, content=push.body, headers=headers)
            if not 200 <= answer.status_code < 300:
                error = f"HTTP {answer.status_code}"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
        if error is None:
            await self.outbox.sent(push)
            return
        wait = min(self.max_backoff, self.backoff * 2 ** max(0, push.attempts - 1))
        logger.info(
            "push %s of task %s to %s failed (attempt %d): %s",
            push.idempotency_key,
            push.task_id,
            config.url,
            push.attempts,
            error,
        )
        await self.outbox.failed(push, error=error, backoff=wait, max_attempts=self.max_attempts)
