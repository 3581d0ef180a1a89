"""Real parts for the fencing tests: a counting HTTP server and a store that misbehaves on cue."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx

from durable_adk import errors
from durable_adk.store.base import Params, Row, Store


class Counter:
    """An HTTP server on 127.0.0.1 that counts the requests it gets (the outside world's acts)."""

    def __init__(self) -> None:
        self.requests = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/act"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            self.requests += 1
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            await writer.drain()
        finally:
            writer.close()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Counter]:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            self._server.close()
            await self._server.wait_closed()

    async def act(self) -> None:
        """One outside call, as a tool makes it."""
        async with httpx.AsyncClient(timeout=10) as client:
            (await client.post(self.url, content=b"{}")).raise_for_status()

    async def settled(self, quiet: float = 1.0) -> int:
        """The count once no request came for ``quiet`` seconds."""
        while True:
            before = self.requests
            await asyncio.sleep(quiet)
            if self.requests == before:
                return before


RENEWALS = ("run_renew", "run_renew_many")


class FaultyStore(Store):
    """Delegates to a real store, but can hang renewals or fail chosen queries once.

    Attributes:
        hang_renewals: While set, renewals (``run_renew``, the keeper's
            ``run_renew_many``) never answer.
        fail_next: Query name -> how many calls to skip before raising its error once.
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.hang_renewals = False
        self.renewals = 0
        self.renewed = asyncio.Event()  # set after each renewal that answered
        self.fail_next: dict[str, tuple[int, BaseException]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def _gate(self, query: str) -> None:
        if query in RENEWALS:
            self.renewals += 1
            if self.hang_renewals:
                await asyncio.Event().wait()  # a partition: the call never returns
        planned = self.fail_next.get(query)
        if planned is not None:
            skip, error = planned
            if skip == 0:
                del self.fail_next[query]
                raise error
            self.fail_next[query] = (skip - 1, error)

    async def fetch(self, query: str, params: Params | None = None) -> Sequence[Row]:
        await self._gate(query)
        rows = await self.inner.fetch(query, params)
        if query in RENEWALS:
            self.renewed.set()
        return rows

    async def fetchrow(self, query: str, params: Params | None = None) -> Row | None:
        await self._gate(query)
        row = await self.inner.fetchrow(query, params)
        if query in RENEWALS:
            self.renewed.set()
        return row

    async def fetchval(self, query: str, params: Params | None = None) -> Any:
        await self._gate(query)
        return await self.inner.fetchval(query, params)

    async def execute(self, query: str, params: Params | None = None) -> None:
        await self._gate(query)
        await self.inner.execute(query, params)

    async def now(self) -> float:
        return await self.inner.now()

    async def schema_version(self) -> int:
        return await self.inner.schema_version()

    async def run_script(self, sql: str) -> None:
        await self.inner.run_script(sql)

    async def close(self) -> None:
        await self.inner.close()


def busy() -> errors.DatabaseBusy:
    return errors.DatabaseBusy("injected: database is locked")
