"""``/readyz`` tells an orchestrator whether a worker can take work; ``/healthz`` stays liveness.

On each backend, in the test's event loop: ready (200) while the store takes
writes; not ready (503, with the reason) while the worker drains, and when its
store cannot be reached; ``/healthz`` answers 200 throughout. The round trip
through a real outage (503 while PostgreSQL is down, 200 once it is back) is in
``tests/chaos/test_outage.py``; a standby that is read-only, in
``tests/chaos/test_failover.py``.
"""

from __future__ import annotations

from svc_support import Service


async def test_ready_while_the_store_takes_writes_not_while_draining(service: Service) -> None:
    ready = await service.anon.get("/readyz")  # no token: probes carry none
    assert ready.status_code == 200, ready.text
    assert ready.json()["ready"] is True
    assert ready.json()["worker_id"] == service.worker.worker_id
    service.worker.begin_drain()
    draining = await service.anon.get("/readyz")
    assert draining.status_code == 503
    assert draining.json()["ready"] is False and "draining" in draining.json()["reason"]
    alive = await service.anon.get("/healthz")
    assert alive.status_code == 200 and alive.json()["draining"] is True


async def test_not_ready_when_the_store_cannot_be_reached(service: Service) -> None:
    assert (await service.anon.get("/readyz")).status_code == 200
    await service.store.close()  # every statement now fails with StoreUnavailable
    answer = await service.anon.get("/readyz")
    assert answer.status_code == 503, answer.text
    assert "unavailable" in answer.json()["reason"]
    assert service.store.health.down
    assert (await service.anon.get("/healthz")).status_code == 200
