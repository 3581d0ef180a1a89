"""A database outage, as one worker lives it: noticed once, waited out, said twice.

What it guarantees (framework-agnostic: no ADK import here):

* Every store keeps one :class:`StoreHealth` (``store.health``). The first
  :class:`~durable_adk.errors.StoreUnavailable` of an outage starts it: one
  WARNING line says which hosts were tried and why each refused
  (unreachable, read-only, auth), from a look at each host on its own
  (:meth:`~durable_adk.store.base.Store.diagnose`). One probe task then asks
  the store, a few times a second, whether it takes writes again; when it
  does, a second WARNING line ends the outage: how long it lasted, how many
  runs waited, and, when the database came back with another history (a
  PostgreSQL timeline: a standby was promoted), that it failed over. Everything
  in between (each failed statement, renewal, sweep, reconnect) is DEBUG.
* A statement made inside a drive that holds its lease (:func:`using_patience`)
  does not fail on an outage: it waits for the store to come back and is sent
  again, for as long as the lease is trusted (the :class:`Patience`'s
  deadline: the fence's local deadline, moved by each renewal; given up when
  the lease is lost). Only statements that surely did nothing are sent again:
  one that never left (no connection could be had) or one that only reads. A
  write whose connection broke after it left may have committed: its error
  is raised as before (the run is handed back and recovered from its log).
* :meth:`StoreHealth.ready` is what ``/readyz`` reports: not ready during an
  outage (unreachable or read-only), ready again when a write works.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any

from durable_adk import errors

logger = logging.getLogger("durable_adk.store")

PROBE_EVERY = 0.25
"""Seconds between two probes of a store that is down."""

OUTAGE_AFTERMATH = 60.0
"""Seconds after an outage during which what runs report of it is part of it (log levels)."""

DIAGNOSE_TIMEOUT = 2.0
"""Seconds the look at each host may take when an outage starts."""


class Patience:
    """How long the statements of one drive may wait out an outage.

    Attributes:
        run_id: The run the drive holds (counted among the runs that waited).
        until: The local monotonic deadline: the lease's, moved by each renewal.
    """

    def __init__(self, run_id: str, until: float) -> None:
        self.run_id = run_id
        self.until = until

    def give_up(self) -> None:
        """The lease was lost: no statement waits any more."""
        self.until = float("-inf")

    def left(self) -> float:
        """Seconds left to wait (<= 0: none)."""
        return self.until - time.monotonic()


_patience: ContextVar[Patience | None] = ContextVar("durable_adk_patience", default=None)


@contextlib.contextmanager
def using_patience(patience: Patience | None) -> Iterator[Patience | None]:
    """Lets the statements made inside the block wait out an outage (see the module)."""
    token = _patience.set(patience)
    try:
        yield patience
    finally:
        _patience.reset(token)


def current_patience() -> Patience | None:
    """The patience of the drive this code runs in, or None."""
    return _patience.get()


class StoreHealth:
    """Whether one store takes writes now; the outage in progress, if any."""

    def __init__(
        self,
        probe: Callable[[], Awaitable[str | None]],
        diagnose: Callable[[], Awaitable[list[str]]],
        name: str,
        *,
        remember: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        """Creates the health of a store.

        Args:
            probe: Raises unless the store takes writes now; returns the identity of
                the database's history (a PostgreSQL timeline), if it has one.
            diagnose: One line per host tried, with why it refused.
            name: The store, as the log names it (its URL without password).
            remember: Records a new history once a probe found one (in a task of
                its own; a failure is said at DEBUG and tried at the next change).
        """
        self._remember = remember
        self._probe = probe
        self._diagnose = diagnose
        self.name = name
        self.down_since: float | None = None
        self.ended_at: float | None = None  # when the last outage ended (monotonic)
        self.identity: str | None = None  # the database's history as last probed
        self.failovers = 0  # outages that ended on a new history (a promoted standby)
        self.error: str | None = None
        self.outages = 0  # outages seen so far (tests)
        self._waited: set[str] = set()
        self._back = asyncio.Event()
        self._prober: asyncio.Task[None] | None = None
        self._listeners: list[Callable[[], None]] = []
        self._recording: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def down(self) -> bool:
        """Whether an outage is in progress."""
        return self.down_since is not None

    def in_outage(self, *, within: float = OUTAGE_AFTERMATH) -> bool:
        """Whether an outage is on, or ended less than ``within`` seconds ago (what a run
        that met it reports then is part of it, and said by its two lines)."""
        if self.down_since is not None:
            return True
        return self.ended_at is not None and time.monotonic() - self.ended_at < within

    def on_back(self, listener: Callable[[], None]) -> None:
        """Calls ``listener`` each time an outage ends (the sweeper's nudge)."""
        self._listeners.append(listener)

    def ready(self) -> tuple[bool, str]:
        """Whether the store takes writes, as far as this worker knows, and why not."""
        if self.down_since is None:
            return True, "the store takes writes"
        return False, f"the store is unavailable: {self.error}"

    def failed(self, exc: BaseException) -> None:
        """A statement met ``exc`` (a StoreUnavailable): starts an outage if none is on."""
        if self.down_since is not None:
            logger.debug("store still unavailable: %s", exc)
            return
        self.down_since = time.monotonic()
        self.error = str(exc)
        self.outages += 1
        self._waited = set()
        self._back = asyncio.Event()
        if self._closed:
            return  # the store is closed: nothing to wait for
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        # A task of its own, in a context of its own: no drive's patience or fence.
        self._prober = loop.create_task(
            self._watch(), name="durable-adk-store-probe", context=contextvars.Context()
        )

    def succeeded(self, identity: str | None = None) -> None:
        """A write worked: ends the outage in progress, if any (``identity``: the probe's)."""
        since = self.down_since
        if since is None:
            return
        self.down_since = None
        self.ended_at = time.monotonic()
        self._back.set()
        prober, self._prober = self._prober, None
        if prober is not None and prober is not asyncio.current_task() and not prober.done():
            prober.cancel()
        waited = len(self._waited)
        moved = ""
        if identity is not None and self.identity is not None and identity != self.identity:
            self.failovers += 1
            self._record(identity)
            moved = (
                f", on a new primary ({self.identity} -> {identity}: a standby was promoted; "
                "with asynchronous replication, commits acknowledged just before the failover "
                "may be lost, see docs/postgres.md)"
            )
        if identity is not None:
            self.identity = identity
        logger.warning(
            "the store is back after %.1fs (%s)%s; %d run(s) waited for it and go on",
            time.monotonic() - since,
            self.name,
            moved,
            waited,
        )
        self.nudge()

    def nudge(self) -> None:
        """Tells the listeners of :meth:`on_back` (a run was handed back as the store returned)."""
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:  # a listener's bug must not stop the others
                logger.exception("a listener of the store's return failed")

    def seen(self, identity: str | None) -> None:
        """The database's history as a probe outside an outage found it (a reconnect's):
        says so once, at WARNING, when it changed (a standby was promoted meanwhile)."""
        if identity is None or self.down_since is not None:
            return  # an outage's end compares it, in its own line
        if self.identity is not None and identity != self.identity:
            self.failovers += 1
            self._record(identity)
            logger.warning(
                "the store (%s) is on a new primary (%s -> %s): a standby was promoted; with "
                "asynchronous replication, commits acknowledged just before the failover may "
                "be lost (docs/postgres.md)",
                self.name,
                self.identity,
                identity,
            )
        self.identity = identity

    def _record(self, identity: str) -> None:
        """Records a new history in the database, in a task of its own (see ``remember``)."""
        remember = self._remember
        if remember is None:
            return

        async def record() -> None:
            try:
                await remember(identity)
            except Exception as exc:  # the next probe that finds a change tries again
                logger.debug("could not record the store's new history %s: %s", identity, exc)

        with contextlib.suppress(RuntimeError):  # no running loop: nothing to record from
            task = asyncio.get_running_loop().create_task(record(), context=contextvars.Context())
            self._recording.add(task)
            task.add_done_callback(self._recording.discard)

    async def wait_back(self, patience: Patience) -> bool:
        """Waits until the store is back or the patience runs out; True if it is back."""
        if self.down_since is None:
            return True
        self._waited.add(patience.run_id)
        if self._closed:
            return False
        if self._prober is None or self._prober.done():
            self._prober = asyncio.get_running_loop().create_task(
                self._watch(), name="durable-adk-store-probe", context=contextvars.Context()
            )
        back = self._back
        left = patience.left()
        while left > 0 and not back.is_set():
            with contextlib.suppress(TimeoutError):
                # Re-read: a renewal (the watchdog's, after a blocked loop) may
                # move the deadline while we wait.
                await asyncio.wait_for(back.wait(), timeout=min(left, 1.0))
            left = patience.left()
        return back.is_set()

    async def _watch(self) -> None:
        """The outage's probe: says it began (with each host's refusal), then waits it out."""
        try:
            hosts = await asyncio.wait_for(self._diagnose(), timeout=DIAGNOSE_TIMEOUT * 3)
        except Exception as exc:  # the look is a courtesy: the outage is said anyway
            hosts = [f"(could not look at the hosts: {type(exc).__name__}: {exc})"]
        if self.down_since is None:
            return  # back already: a blip, said only at DEBUG
        logger.warning(
            "the store is unavailable (%s): %s; tried %s; runs in flight wait for it while "
            "their leases last, new work is refused (503 store_unavailable)",
            self.name,
            self.error,
            "; ".join(hosts) if hosts else "its one database",
        )
        while self.down_since is not None:
            await asyncio.sleep(PROBE_EVERY)
            try:
                identity = await self._probe()
            except Exception as exc:
                logger.debug("store probe failed: %s", exc)
                continue
            self.succeeded(identity)
            return

    async def aclose(self) -> None:
        """Stops the probe (the store is closing); none starts again."""
        self._closed = True
        prober, self._prober = self._prober, None
        if prober is not None and not prober.done():
            prober.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await prober


def may_send_again(exc: errors.StoreUnavailable, *, sent: bool, writes: bool) -> bool:
    """Whether a statement that failed with ``exc`` surely did nothing: then it may go again."""
    return not sent or not writes


def quiet_during_outage(record: logging.LogRecord, is_outage: Callable[[Any], bool]) -> bool:
    """A log filter's test: a record about an expected outage goes to DEBUG, without traceback.

    Whether or not this worker has noticed the outage yet: the store's own
    statements meet it too and say it once (ADK logs an error a callback of
    ours raised during the outage before our own handling says it).

    Args:
        record: The record (an ERROR or WARNING of a library we use).
        is_outage: Whether its exception is an outage of the store.

    Returns:
        Whether the record is kept (as it is, or turned into a DEBUG line).
    """
    if record.levelno <= logging.DEBUG:
        return True
    exc = record.exc_info[1] if record.exc_info else None
    if exc is None or not is_outage(exc):
        return True
    record.levelno, record.levelname = logging.DEBUG, "DEBUG"
    record.msg = f"{record.getMessage()} ({type(exc).__name__}: {exc})"
    record.args = None
    record.exc_info, record.exc_text = None, None
    return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def causes_of(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the errors behind it (cause, else context), each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        yield current
        seen.add(id(current))
        current = current.__cause__ or current.__context__


def is_store_outage(exc: BaseException) -> bool:
    """Whether a StoreUnavailable is behind ``exc``."""
    return any(isinstance(e, errors.StoreUnavailable) for e in causes_of(exc))


class OutageFilter(logging.Filter):
    """Turns another library's ERROR/WARNING about an expected store outage into DEBUG."""

    def __init__(self, is_outage: Callable[[Any], bool] = is_store_outage) -> None:
        super().__init__()
        self.is_outage = is_outage

    def filter(self, record: logging.LogRecord) -> bool:
        return quiet_during_outage(record, self.is_outage)


def quiet_logger(name: str, is_outage: Callable[[Any], bool] = is_store_outage) -> None:
    """Installs an :class:`OutageFilter` on logger ``name`` (once)."""
    target = logging.getLogger(name)
    if not any(isinstance(f, OutageFilter) for f in target.filters):
        target.addFilter(OutageFilter(is_outage))
