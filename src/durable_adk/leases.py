"""One heartbeat per worker: every lease it holds renewed by one statement.

What it guarantees (framework-agnostic: no ADK import here):

* A :class:`LeaseKeeper` renews all the leases held through it with one
  statement per renewal interval (a third of the lease), whatever their number
  (:meth:`~durable_adk.ledger.RunLedger.renew_many`), from one task. The
  statements per second of a worker's heartbeat do not grow with its runs.
* Each holding keeps the semantics of a run's own heartbeat: its fence's
  local deadline is *last renewal sent + lease - margin*
  (:func:`trust_from`); a timer per holding loses the fence at that deadline
  if no renewal answered before it, whatever the renewal loop is doing. A
  renewal that finds the run no longer ours at its epoch loses that run's
  fence at once; the holding's ``on_lost`` is called exactly once either way.
* A renewal that fails (a store error, or no answer within 80% of the
  interval) is retried with a short back-off for as long as any holding is
  still trusted; each run is lost at its own deadline, not at the first
  failure.
* Every renewal's per-run result reaches the holding's ``on_renewal``
  (a :class:`~durable_adk.ledger.RenewResult`: ``ok`` and
  ``cancel_requested_by``, so the owner can stop a cancelled run at its next
  heartbeat).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from durable_adk.fence import RunFence
from durable_adk.ledger import Lease, RenewResult, RunLedger

logger = logging.getLogger("durable_adk.runner")

LEASE_MARGIN_FRACTION = 1 / 6
"""The share of the lease a drive gives up to be safe: its local deadline is
``last renewal sent + lease * (1 - LEASE_MARGIN_FRACTION)``."""


def trust_from(sent: float | None, lease_seconds: float) -> float:
    """The local deadline of a lease renewed or claimed at monotonic ``sent`` (None: now)."""
    at = time.monotonic() if sent is None else sent
    return at + lease_seconds * (1 - LEASE_MARGIN_FRACTION)


@dataclass(eq=False)
class Holding:
    """One lease kept by a :class:`LeaseKeeper`.

    Attributes:
        lease: The lease (run, owner, epoch).
        fence: The run's fence, renewed or lost by the keeper.
        on_lost: Called once with the reason when the lease is lost.
        on_renewal: Called with each renewal's result for this run, if given.
    """

    lease: Lease
    fence: RunFence
    on_lost: Callable[[str], None]
    on_renewal: Callable[[RenewResult], None] | None = None
    last: RenewResult | None = None
    _timer: asyncio.TimerHandle | None = field(default=None, repr=False)


class LeaseKeeper:
    """The heartbeat of one worker on one store: renews all its leases in one statement."""

    def __init__(self, ledger: RunLedger, owner: str) -> None:
        """Creates the keeper; its task starts with the first holding.

        Args:
            ledger: The ledger (its ``lease_seconds`` is the lease renewed).
            owner: The worker whose leases these are.
        """
        self.ledger = ledger
        self.owner = owner
        self.lease_seconds = ledger.lease_seconds
        self.renewals = 0  # statements sent (tests, benches)
        self._held: dict[str, Holding] = {}
        self._task: asyncio.Task[None] | None = None

    @property
    def interval(self) -> float:
        """Seconds between renewals: a third of the lease."""
        return self.lease_seconds / 3

    def held(self) -> int:
        """How many leases are kept now."""
        return len(self._held)

    def hold(
        self,
        lease: Lease,
        fence: RunFence,
        on_lost: Callable[[str], None],
        on_renewal: Callable[[RenewResult], None] | None = None,
    ) -> Holding:
        """Keeps ``lease`` renewed until :meth:`drop`; its fence's deadline is armed now."""
        holding = Holding(lease, fence, on_lost, on_renewal)
        self._held[lease.run_id] = holding
        self._arm(holding)
        loop = asyncio.get_running_loop()
        task = self._task
        if task is None or task.done() or task.get_loop() is not loop:
            self._task = loop.create_task(self._run(), name=f"durable-adk-leases-{self.owner}")
        return holding

    def drop(self, holding: Holding) -> None:
        """Stops keeping a lease (its drive ended); safe to call twice."""
        if self._held.get(holding.lease.run_id) is holding:
            del self._held[holding.lease.run_id]
        if holding._timer is not None:
            holding._timer.cancel()
            holding._timer = None

    async def aclose(self) -> None:
        """Stops the heartbeat task (the holdings are left as they are)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def renew_once(self) -> dict[str, RenewResult]:
        """Renews everything held now in one statement, at once (tests, a drain); no retry.

        Returns:
            The per-run results (lost runs are lost and their ``on_lost`` called).

        Raises:
            durable_adk.errors.StoreError: The renewal failed (nothing is lost by it).
        """
        batch = self._live()
        sent = time.monotonic()
        self.renewals += bool(batch)
        results = await self.ledger.renew_many(self.owner, [h.lease for h in batch])
        self._apply(batch, results, sent)
        return results

    def _live(self) -> list[Holding]:
        return [h for h in self._held.values() if h.fence.lost is None]

    def _arm(self, holding: Holding) -> None:
        """(Re)sets the holding's deadline timer on the fence's ``trusted_until``."""
        if holding._timer is not None:
            holding._timer.cancel()
        loop = asyncio.get_running_loop()

        def expire() -> None:
            holding._timer = None
            fence = holding.fence
            if fence.lost is None and time.monotonic() >= fence.trusted_until:
                self._lose(holding, "the lease's local deadline passed before a renewal succeeded")

        holding._timer = loop.call_at(holding.fence.trusted_until, expire)

    def _lose(self, holding: Holding, reason: str) -> None:
        self.drop(holding)
        holding.on_lost(reason)
        holding.fence.lose(reason)  # lost for good, whatever on_lost did

    async def _run(self) -> None:
        """Renews every interval while anything is held; ends when nothing is (hold restarts it)."""
        interval = self.interval
        next_renewal = time.monotonic() + interval
        while self._held:
            await asyncio.sleep(max(0.0, next_renewal - time.monotonic()))
            sent = await self._renew_until_answered(interval)
            next_renewal = (sent if sent is not None else time.monotonic()) + interval

    async def _renew_until_answered(self, interval: float) -> float | None:
        """One renewal of everything held, retried until it answers or nothing is trusted.

        Returns:
            When the renewal that answered was sent, or None if none did.
        """
        retry_in = min(interval / 4, 0.5)
        while True:
            batch = self._live()
            if not batch:
                return None
            until = max(h.fence.trusted_until for h in batch)
            sent = time.monotonic()
            if sent >= until:
                for holding in batch:  # the timers are due too; whichever runs first loses
                    self._lose(holding, "no renewal succeeded before the lease's local deadline")
                return None
            try:
                self.renewals += 1
                results = await asyncio.wait_for(
                    self.ledger.renew_many(self.owner, [h.lease for h in batch]),
                    timeout=min(interval * 0.8, until - sent),
                )
            except Exception as exc:  # the store's, or the timeout: retried until the deadlines
                logger.warning(
                    "lease renewal of %d runs failed (%s: %s); retrying",
                    len(batch),
                    type(exc).__name__,
                    exc,
                )
                await asyncio.sleep(max(0.0, min(retry_in, until - time.monotonic())))
                retry_in = min(retry_in * 2, interval)
                continue
            self._apply(batch, results, sent)
            return sent

    def _apply(self, batch: list[Holding], results: dict[str, RenewResult], sent: float) -> None:
        trusted = trust_from(sent, self.lease_seconds)
        for holding in batch:
            if self._held.get(holding.lease.run_id) is not holding or holding.fence.lost:
                continue  # dropped, or lost at its deadline, while the renewal was out
            result = results.get(holding.lease.run_id)
            if result is None or not result.ok:
                self._lose(holding, "the run was taken over or has ended")
                continue
            holding.fence.renewed(trusted)
            holding.last = result
            self._arm(holding)
            if holding.on_renewal is not None:
                holding.on_renewal(result)
