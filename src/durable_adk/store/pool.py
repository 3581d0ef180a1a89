"""The connections of one PostgreSQL pool, handed out through its :class:`Lane`.

The store's lanes (:mod:`durable_adk.store.lanes`) already decide who gets a
connection next and when a wait is a fault; this pool only keeps the
connections. A unit takes one once its lane granted the slot and gives it
back in a plain call: no second wait with a timer of its own, no task per
release, no reset (asyncpg's own pool did these for every unit: about half
of a unit's client CPU, ``bench/unit_cost.py``).

What it guarantees:

* **At most ``size`` connections in use**: one per slot of the lane.
* **No connection in an unknown state is reused.** A connection given back
  closed, or still inside a transaction, is terminated and forgotten; the
  next unit that needs one opens a new one (bounded by ``connect``'s own
  timeout).
* **The floor is kept open.** ``floor`` connections are opened by
  :meth:`Pool.open`; one that is lost, idle or in use, is opened again in the
  background (a heartbeat on the lease pool never waits for a new
  connection), with a back-off while the server refuses.
* **A close waits for the connections in use** and closes each gracefully;
  :meth:`Pool.terminate` drops them all at once.

Connections are not recycled by age or by count (asyncpg's pool closed one
idle for 300 s above its floor, and one that ran 50,000 queries).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable, Callable
from typing import Any

from durable_adk.store.lanes import Lane


class Pool:
    """Up to ``lane.size`` connections, ``floor`` of them kept open."""

    def __init__(self, lane: Lane, connect: Callable[[], Awaitable[Any]], floor: int) -> None:
        """Makes an empty pool; :meth:`open` connects its floor.

        Args:
            lane: The slots of this pool (one connection per slot).
            connect: Opens one connection (bounded in time by itself).
            floor: Connections kept open (at most ``lane.size``).
        """
        self.lane = lane
        self._connect = connect
        self.floor = min(floor, lane.size)
        self._idle: list[Any] = []  # the last given back on top: warm caches first
        self._busy: set[Any] = set()
        self._opening = 0  # floor connections being opened in the background
        self._drained = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None
        self.closed = False

    async def open(self) -> Pool:
        """Opens the floor's connections; raises the first failure (none is kept then)."""
        try:
            for _ in range(self.floor):
                self._idle.append(await self._open_one())
        except BaseException:
            self.terminate()
            raise
        return self

    def size(self) -> int:
        """Connections open or being opened."""
        return len(self._idle) + len(self._busy) + self._opening

    def try_take(self) -> Any:
        """An open idle connection for a slot the lane granted, or None (no coroutine)."""
        while self._idle:
            conn = self._idle.pop()
            if not conn.is_closed():
                self._busy.add(conn)
                return conn
        return None

    async def take(self) -> Any:
        """A connection for a slot the lane granted: an open idle one, else a new one."""
        conn = self.try_take()
        if conn is not None:
            return conn
        if self.closed:
            raise ConnectionError("the pool is closed")
        conn = await self._open_one()
        if self.closed:
            conn.terminate()
            raise ConnectionError("the pool is closed")
        self._busy.add(conn)
        return conn

    async def _open_one(self) -> Any:
        conn = await self._connect()
        conn.add_termination_listener(self._lost)
        return conn

    def _lost(self, conn: Any) -> None:
        """A connection closed (by the server, the network or us): forgotten if idle."""
        with contextlib.suppress(ValueError):
            self._idle.remove(conn)
        self._keep_floor()

    def give_back(self, conn: Any) -> None:
        """Returns a connection taken with :meth:`take`; one in an unknown state is dropped."""
        self._busy.discard(conn)
        if conn.is_closed() or conn.is_in_transaction():
            conn.terminate()
            self._keep_floor()
        else:
            self._idle.append(conn)
        if not self._busy:
            self._drained.set()

    def _keep_floor(self) -> None:
        if self.closed or self.size() >= self.floor or self._keeper is not None:
            return
        # Its own context: no unit's patience, fence or receipts.
        self._keeper = asyncio.get_running_loop().create_task(
            self._reopen(), name="durable-adk-pool-floor", context=contextvars.Context()
        )

    async def _reopen(self) -> None:
        delay = 0.5
        try:
            while not self.closed and self.size() < self.floor:
                self._opening += 1
                try:
                    conn = await self._open_one()
                except Exception:  # the server is away: the outage is said by the store
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 30.0)
                    continue
                finally:
                    self._opening -= 1
                if self.closed:
                    conn.terminate()
                else:
                    self._idle.insert(0, conn)
        finally:
            self._keeper = None

    async def close(self) -> None:
        """Waits for the connections in use, then closes every one gracefully."""
        self.closed = True
        if self._keeper is not None:
            self._keeper.cancel()
        while self._busy:
            self._drained.clear()
            await self._drained.wait()
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()

    def terminate(self) -> None:
        """Drops every connection at once (a close that did not end in time)."""
        self.closed = True
        if self._keeper is not None:
            self._keeper.cancel()
        for conn in [*self._idle, *self._busy]:
            conn.terminate()
        self._idle.clear()
        self._busy.clear()
        self._drained.set()
