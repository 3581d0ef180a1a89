"""What the saga tests share: a lamp reservation at the fake inventory service and its undo."""

from __future__ import annotations

import asyncio
from typing import Any

from durable_adk.adk.tools.saga_agent import SagaStage
from durable_adk.testing.services import ResourceClient, ServiceError


class Releases:
    """The compensator: releases a reservation once per key, and counts its calls.

    ``before`` (an async function) runs first on each call, for a test to
    hold the compensation at that point.
    """

    def __init__(self, client: ResourceClient, *, before: Any = None) -> None:
        self.client = client
        self.calls: list[str] = []
        self.before = before

    async def __call__(self, record: dict[str, Any], key: str) -> None:
        self.calls.append(key)
        if self.before is not None:
            await self.before()
        try:
            await asyncio.to_thread(self.client.act, record["reservation_id"], "release", key)
        except ServiceError as exc:
            if exc.status not in (404, 409):
                raise


def reserve_stage(client: ResourceClient, *, uncompensatable: bool = False) -> SagaStage:
    """A stage reserving one lamp for order O-1, with a lookup and what the undo needs."""
    return SagaStage(
        name="reserve",
        action=lambda state, key: client.create(
            {"order_id": "O-1", "sku": "LAMP", "quantity": 1}, key
        ),
        find=client.find,
        undo_of=lambda r: {"reservation_id": r["id"]},
        uncompensatable=uncompensatable,
    )
