"""One heartbeat per worker: every lease it holds renewed by one statement.

What it guarantees (framework-agnostic: no ADK import here):

* A :class:`LeaseKeeper` renews all the leases held through it with one
  statement per renewal interval (a third of the lease), whatever their number
  (:meth:`~durable_adk.tables.ledger.RunLedger.renew_many`), from one task. The
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
  (a :class:`~durable_adk.tables.ledger.RenewResult`: ``ok`` and
  ``cancel_requested_by``, so the owner can stop a cancelled run at its next
  heartbeat).
* A blocked event loop costs no lease (:class:`LeaseWatchdog`): a thread of
  its own, with its own connection to the store, watches the loop; when the
  loop has not ticked for half a renewal interval and a renewal is due, the
  watchdog sends the same one statement itself and moves each fence's local
  deadline (the loop learns of it when it runs again). A synchronous tool or
  callback that blocks for minutes therefore loses neither its own lease nor
  those of the runs beside it, nor that of a run whose claim committed while
  the loop was blocked (the watchdog renews every live lease of the worker
  for a lease after each claim, and the keeper credits that renewal to the
  run's fence when it holds the lease). Every write is still fenced by the
  store, and a run the watchdog finds taken over is lost on the loop as soon
  as it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from durable_adk import errors
from durable_adk.fencing.fence import RunFence
from durable_adk.tables.ledger import Lease, RenewResult, RunLedger

logger = logging.getLogger("durable_adk.runner")

LEASE_MARGIN_FRACTION = 1 / 6
"""The share of the lease a drive gives up to be safe: its local deadline is
``last renewal sent + lease * (1 - LEASE_MARGIN_FRACTION)``."""


RETRY_MAX = 1.0
"""Most seconds between two tries of a failed renewal."""


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
        self.watchdog = LeaseWatchdog(self)
        ledger.claim_listeners.append(self._claiming)

    @property
    def interval(self) -> float:
        """Seconds between renewals: a third of the lease."""
        return self.lease_seconds / 3

    def held(self) -> int:
        """How many leases are kept now."""
        return len(self._held)

    def unheld_until(self) -> float:
        """Until when (``time.monotonic()``) this worker may hold a lease it keeps no holding of.

        A claim's lease runs from the moment its statement commits; its holding
        comes when the drive has read the answer. Until a lease after the last
        claim was sent (or after the watchdog last renewed such a lease), the
        watchdog renews every live lease of this worker.
        """
        claimed = self.ledger.claimed_at.get(self.owner, float("-inf"))
        return max(claimed, self.watchdog.credited_at) + self.lease_seconds

    def busy(self) -> bool:
        """Whether any lease of this worker may need renewing: one is held, or may be unheld."""
        return bool(self._held) or time.monotonic() < self.unheld_until()

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
        credited = self.watchdog.credit(lease)
        if credited is not None:  # renewed by the watchdog while the claim's answer waited
            fence.extend(trust_from(credited, self.lease_seconds))
        self._arm(holding)
        loop = asyncio.get_running_loop()
        task = self._task
        if task is None or task.done() or task.get_loop() is not loop:
            # Started by whichever drive holds a lease first: in a context of
            # its own, not that drive's (whose run, fence and spans it would
            # otherwise keep alive, and carry, for as long as it runs).
            self._task = loop.create_task(
                self._run(), name=f"durable-adk-leases-{self.owner}", context=contextvars.Context()
            )
        self.watchdog.watch(loop)
        return holding

    def drop(self, holding: Holding) -> None:
        """Stops keeping a lease (its drive ended); safe to call twice."""
        if self._held.get(holding.lease.run_id) is holding:
            del self._held[holding.lease.run_id]
        if holding._timer is not None:
            holding._timer.cancel()
            holding._timer = None

    async def aclose(self) -> None:
        """Stops the heartbeat task and its watchdog (the holdings are left as they are)."""
        await self.watchdog.stop()
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
        return [h for h in list(self._held.values()) if h.fence.lost is None]

    def _claiming(self, owner: str) -> None:
        """A claim of ``owner`` is being sent (the ledger's call): the watchdog watches."""
        if owner != self.owner:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self.watchdog.watch(loop)

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

        # A cancelled timer stays in the loop's queue until its time, with its
        # context: the drive's would keep the ended drive alive until then.
        holding._timer = loop.call_at(
            holding.fence.trusted_until, expire, context=contextvars.Context()
        )

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
                # An outage is said once by the store (store.health); each retry at DEBUG.
                outage = isinstance(exc, errors.StoreUnavailable) or self._store_down()
                logger.log(
                    logging.DEBUG if outage else logging.WARNING,
                    "lease renewal of %d runs failed (%s: %s); retrying",
                    len(batch),
                    type(exc).__name__,
                    exc,
                )
                await asyncio.sleep(max(0.0, min(retry_in, until - time.monotonic())))
                # At most RETRY_MAX apart: a store back from an outage is found soon.
                retry_in = min(retry_in * 2, interval, RETRY_MAX)
                continue
            self._apply(batch, results, sent)
            self.watchdog.renewed(sent)
            return sent

    def _store_down(self) -> bool:
        health = getattr(self.ledger.store, "health", None)
        return bool(getattr(health, "down", False))

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


class LeaseWatchdog:
    """Renews a keeper's leases from a thread of its own while the event loop is blocked.

    The loop ticks a timestamp every tenth of the renewal interval while any
    lease is held or may be (:meth:`LeaseKeeper.busy`). The watchdog thread
    looks at it as often: when the loop has been silent for half an interval
    and a renewal is due (an interval since the last one sent), it renews,
    on a store connection of its own (opened at first need, from the store's
    URL, in the thread's own event loop):

    * every live holding, with the keeper's one statement; it moves each
      fence's local deadline (:meth:`~durable_adk.fencing.fence.RunFence.extend`,
      safe from a thread) and hands the per-run results to the loop for when
      it runs again (renewal callbacks, lost runs);
    * while a claim may have leased a run the keeper holds no lease of yet
      (its answer waits for the blocked loop: :meth:`LeaseKeeper.unheld_until`),
      every live lease of the worker as well
      (:meth:`~durable_adk.tables.ledger.RunLedger.renew_owned`); such a
      renewal is kept as a credit, which :meth:`LeaseKeeper.hold` applies to
      the lease's fence when the drive takes it, at the epoch renewed.

    While the loop ticks, the watchdog sends nothing: the keeper's own task
    renews. A store it cannot open (an in-memory SQLite database has no
    second connection) leaves it idle.
    """

    def __init__(self, keeper: LeaseKeeper) -> None:
        self.keeper = keeper
        self.renewals = 0  # renewals the watchdog made that kept a lease (tests)
        self.credited_at = float("-inf")  # when it last renewed a lease no holding had
        self._credits: dict[str, tuple[int, float]] = {}  # run id: (epoch, renewal sent)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._seen = time.monotonic()  # the loop's last tick
        self._last_sent = time.monotonic()  # the last renewal sent, by either side
        self._main: asyncio.AbstractEventLoop | None = None
        self._tick: asyncio.TimerHandle | None = None

    @property
    def every(self) -> float:
        """How often the loop ticks and the watchdog looks: a tenth of the renewal interval."""
        return self.keeper.interval / 10

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Starts the loop's tick and the watchdog thread (once; again after they stopped)."""
        url = getattr(self.keeper.ledger.store, "url", None)
        if not isinstance(url, str) or ":memory:" in url:
            return  # no second connection reaches this database
        if self._main is not loop or self._tick is None:
            self._seen = time.monotonic()
            self._main = loop
            self._schedule_tick()
        with self._lock:
            if self._thread is not None:
                return  # it leaves only under this lock, once the keeper is not busy
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._thread_main,
                args=(url,),
                name=f"durable-adk-lease-watchdog-{self.keeper.owner}",
                daemon=True,
            )
            self._thread.start()

    def renewed(self, sent: float) -> None:
        """The keeper's own renewal answered (sent at ``sent``)."""
        self._last_sent = max(self._last_sent, sent)

    def credit(self, lease: Lease) -> float | None:
        """When the watchdog renewed ``lease`` before any holding had it (taken once), or None."""
        if not self._credits:  # the usual case, without the lock: see _keep_credits
            return None
        with self._lock:
            credit = self._credits.get(lease.run_id)
            if credit is None or credit[0] != lease.epoch:
                return None
            del self._credits[lease.run_id]
        return credit[1]

    async def stop(self) -> None:
        """Stops the thread (waits for it) and the loop's tick."""
        self._stop.set()
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None
        thread = self._thread
        if thread is not None and thread.is_alive():
            await asyncio.to_thread(thread.join, 10)

    def _schedule_tick(self) -> None:
        def tick() -> None:
            self._seen = time.monotonic()
            if self.keeper.busy() and not self._stop.is_set():
                assert self._main is not None
                self._tick = self._main.call_later(self.every, tick, context=contextvars.Context())
            else:
                self._tick = None

        assert self._main is not None
        self._tick = self._main.call_later(self.every, tick, context=contextvars.Context())

    def _thread_main(self, url: str) -> None:
        try:
            asyncio.run(self._watch(url))
        except Exception:  # never take the process down; the loop's own renewal goes on
            logger.exception("the lease watchdog stopped")
        finally:
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None

    def _leaving(self) -> bool:
        """Whether the thread ends now: stopped, or nothing to keep (decided under the lock)."""
        main = self._main
        if self._stop.is_set() or main is None or main.is_closed():
            return True  # stopped, or the loop it watched is gone
        if self.keeper.busy():
            return False
        with self._lock:
            if self.keeper.busy():
                return False
            self._thread = None  # a hold or claim from now on starts a new thread
            return True

    async def _watch(self, url: str) -> None:
        from durable_adk.store import connect

        store: Any = None
        try:
            while not self._leaving():
                # Waits on the stop event, not a sleep, so stop() returns at once
                # (this thread's loop runs nothing else between looks).
                if self._stop.wait(self.every):
                    break
                now = time.monotonic()
                # Read once: the loop may mark itself seen again while this renews.
                quiet_for = now - self._seen
                stalled = quiet_for > self.keeper.interval / 2
                due = now - self._last_sent >= self.keeper.interval
                if not (stalled and due):
                    continue
                batch = self.keeper._live()
                unheld = now < self.keeper.unheld_until()
                if not batch and not unheld:
                    continue
                sent = time.monotonic()
                try:
                    if store is None:
                        store = await connect(url, **_one_connection(url))
                    results, owned = await asyncio.wait_for(
                        self._renew(store, batch, unheld), timeout=self.keeper.interval * 0.8
                    )
                except Exception as exc:  # retried at the next look, until the deadlines
                    logger.log(
                        logging.DEBUG
                        if isinstance(exc, errors.StoreUnavailable)
                        else logging.WARNING,
                        "the lease watchdog's renewal failed: %s",
                        exc,
                    )
                    continue
                self._last_sent = sent
                trusted = trust_from(sent, self.keeper.lease_seconds)
                for holding in batch:
                    result = results.get(holding.lease.run_id)
                    if result is not None and result.ok:
                        holding.fence.extend(trusted)
                credited = self._keep_credits(batch, owned, sent)
                if not batch and not credited:
                    continue  # no lease was waiting for its holding
                self.renewals += 1
                logger.warning(
                    "the event loop has not run for %.1fs: the lease watchdog renewed %d "
                    "lease(s) from its own thread (%d not yet held)",
                    quiet_for,
                    len(batch) + credited,
                    credited,
                )
                self._hand_to_loop(batch, results, sent)
        finally:
            if store is not None:
                with contextlib.suppress(Exception):
                    await store.close()

    async def _renew(
        self, store: Any, batch: list[Holding], unheld: bool
    ) -> tuple[dict[str, RenewResult], dict[str, tuple[int, RenewResult]]]:
        """The holdings' renewal, then (while a claim may be unheld) every live lease's."""
        ledger = RunLedger(store, lease_seconds=self.keeper.lease_seconds)
        owner = self.keeper.owner
        results = await ledger.renew_many(owner, [h.lease for h in batch])
        owned = await ledger.renew_owned(owner) if unheld else {}
        return results, owned

    def _keep_credits(
        self, batch: list[Holding], owned: dict[str, tuple[int, RenewResult]], sent: float
    ) -> int:
        """Credits each lease renewed that no holding of the batch had.

        A holding taken since the batch was (the loop ran again meanwhile)
        has its fence moved here; else a credit is kept for :meth:`credit`.
        Decided under the lock, after the holding is registered and before
        :meth:`credit` looks: whichever comes first, the renewal reaches the
        fence once.
        """
        held = {h.lease.run_id for h in batch}
        fresh = {
            run_id: (epoch, sent)
            for run_id, (epoch, result) in owned.items()
            if run_id not in held and result.ok
        }
        trusted = trust_from(sent, self.keeper.lease_seconds)
        with self._lock:
            stale = sent - self.keeper.lease_seconds
            for run_id in [r for r, (_, at) in self._credits.items() if at < stale]:
                del self._credits[run_id]
            for run_id, (epoch, _) in fresh.items():
                holding = self.keeper._held.get(run_id)
                if holding is not None and holding.lease.epoch == epoch:
                    holding.fence.extend(trusted)
                else:
                    self._credits[run_id] = (epoch, sent)
            if fresh:
                self.credited_at = sent
        return len(fresh)

    def _hand_to_loop(self, batch: list[Holding], results: Any, sent: float) -> None:
        """The loop applies the results when it runs again (callbacks, lost runs, timers)."""
        main = self._main
        if main is None or main.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            main.call_soon_threadsafe(self.keeper._apply, batch, results, sent)


def _one_connection(url: str) -> dict[str, Any]:
    """Options for the watchdog's own store: as small as the backend allows."""
    if url.startswith("sqlite"):
        return {}
    return {"min_size": 1, "max_size": 1, "lease_pool_size": 1, "notify": False}
