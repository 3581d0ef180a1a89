"""Fake outside services for crash tests: real HTTP servers, each its own process.

A crash test must be able to ask "did the effect happen, and how many times?"
of something that outlives the agent process it kills. The services here are
that something: small HTTP servers on ``127.0.0.1``, each running in its own
process with its own SQLite file, which tests query over HTTP.

Every service is a set of *resources*: named collections whose items are
created under an idempotency key and can be looked up by that key, counted and
listed; a resource may offer extra *actions* on an item (billing's ``void``).
``billing`` (``/invoices``), ``notifications`` (``/notifications``),
``inventory`` (``/reservations``), ``payments`` (``/charges``) and ``carrier``
(``/shipments``) are defined; a new service is one :class:`ServiceSpec` passed
to :func:`register`.

Run one with::

    python -m durable_adk.testing.services billing --db /tmp/billing.db [--port 0]
        [--no-lookup] [--fail-times N] [--fail-mode before|after] [--fail-actions N]
        [--quiet]
        [--parent-pid PID]

It prints ``READY <port>`` on stdout once it accepts connections and stops
cleanly on SIGTERM or SIGINT (the write in progress finishes, the database is
closed, exit code 0), or when the process ``--parent-pid`` names goes away.
:class:`FakeService` does all this for a test; its readers and the clients
below go over HTTP like any other caller.

HTTP interface, for each collection ``C`` (e.g. ``invoices``):

* ``POST /C`` with a JSON object and an ``Idempotency-Key`` header: 201 and the
  new item; a repeated key: 200 and the original item.
* ``GET /C/by-key/<percent-encoded key>``: 200 and the item, or 404; 501 if the
  service was started with ``--no-lookup``.
* ``GET /C/count``: ``{"count": n}``. ``GET /C``: every item, oldest first.
  ``GET /C/<id>``: one item by its generated id, or 404.
* ``POST /C/<id>/<action>`` with an ``Idempotency-Key`` header: 200 and the
  changed item; a repeated key: 200 and the original answer.
* ``GET /``: the service's name, collections, pid and whether lookup is on.
* ``GET /_requests?since=SEQ&limit=N``: the request log, ``{"requests":
  [...], "more": bool}``, records with ``seq > SEQ`` (default 0), at most N
  (default and limit 1000) per page, oldest first. Every request the service
  receives (but these reads of the log) is logged when it arrives, before it
  is handled: its ``seq``, method, path, the collection and action it
  addresses, its idempotency key, whether it is an act (a create or an
  action), its ``X-Caller-*`` headers, and, once answered, its outcome
  (``created``, ``applied``, ``replayed``, ``found``, ``not_found``,
  ``fenced``, ``error``), status, its fence headers and the service's
  wall-clock times. See
  :class:`RequestRecord`; :meth:`FakeService.requests` and
  :meth:`FakeService.acts` read it.

Guarantees:

* **Durable once acknowledged.** A write is committed to SQLite (WAL,
  ``synchronous=FULL``) before any 2xx answer is sent, so an acknowledged item
  survives ``kill -9`` of the service and a restart on the same file.
* **At most one item per key.** Per collection, an idempotency key creates at
  most one item, also under concurrent requests and across restarts. A repeat
  answers 200 with exactly the original item (header
  ``Idempotent-Replayed: true``) and writes nothing; the repeat's body is not
  compared with the original's. The same holds for an action and its key.
  Business fields (an invoice's ``invoice_id``) are *not* deduplicated: two
  keys make two invoices, which is the double effect crash tests look for.
* **Bad input writes nothing.** Malformed or non-object JSON, missing, unknown
  or mistyped fields, a missing, empty, repeated or over-long (more than 256
  characters) key, a body over 64 KiB (over 1 MiB the connection is simply
  closed), an unknown path and a method the path does not take (PUT, PATCH,
  DELETE, ...) each get a 4xx answer ``{"error": <message>, "reason": <code>}``
  before any write.
* **Acts are counted, not only records.** A repeat that the key dedupes
  writes no item but is in the request log: ``acts`` counts it.
* **Fenced requests are checked before anything is done.** A request to a
  collection that carries the fence headers of a durable run
  (``Durable-Fence-Run``, ``Durable-Fence-Epoch``,
  ``Durable-Fence-Valid-Until``: :func:`durable_adk.fencing.fence.fence_headers`) is
  refused with 412 (``reason`` ``fence_expired`` or ``fence_superseded``,
  logged with the outcome ``fenced``) when its valid-until has passed by the
  service's clock, or when the service has already admitted a request with
  a higher epoch of the same run; otherwise its epoch is recorded (per run,
  in the SQLite file, so across restarts) and it is served. The check and
  the write it guards happen under one lock. Incomplete or malformed fence
  headers are a 400. Requests without them are served as they always were.
  The clients send the current run's fence headers by themselves and raise
  :class:`ServiceFenced` (a :class:`durable_adk.errors.FenceRefused`) on a
  refusal.
* **Only loopback.** The server binds ``127.0.0.1`` and nothing else.
* **Injected failures.** With ``--fail-times N``, the first N create requests
  that pass validation (repeats included) answer 503: ``--fail-mode before``
  fails before the write (nothing is created), ``after`` fails after the
  commit (the item exists but the client sees an error, as with a timeout
  after the effect). The counter lives in the process: a restart resets it.
  Actions fail only with ``--fail-actions N`` (the first N answer 503
  before anything is applied); reads never fail on purpose.

The clients (:class:`BillingClient`, :class:`NotificationClient`) are what an
agent's tools call: synchronous ``urllib``, short timeouts, :class:`ServiceError`
on any non-2xx answer, :class:`ServiceUnreachable` when no answer came at all
(the outcome of a create is then unknown), :class:`LookupUnavailable` when the
service offers no lookup. Only the standard library is used.

This module is the public face; the code lives in :mod:`durable_adk.testing.fakes`
(``protocol``, ``specs``, ``storage``, ``app``, ``server``, ``clients``,
``process``). Import from here: the names below are the stable ones.
"""

from __future__ import annotations

import os
import sys

from durable_adk.testing.fakes.app import ServiceApp as ServiceApp
from durable_adk.testing.fakes.clients import (
    BillingClient,
    LookupUnavailable,
    NotificationClient,
    ResourceClient,
    ServiceError,
    ServiceFenced,
    ServiceUnreachable,
    read_requests,
    request_json,
)
from durable_adk.testing.fakes.process import FakeService, ServiceStartError
from durable_adk.testing.fakes.protocol import HOST as HOST
from durable_adk.testing.fakes.protocol import (
    MAX_BODY_BYTES,
    MAX_KEY_LENGTH,
    Caller,
    Outcome,
    RequestRecord,
    key_problem,
)
from durable_adk.testing.fakes.protocol import FailMode as FailMode
from durable_adk.testing.fakes.protocol import JsonObject as JsonObject
from durable_adk.testing.fakes.protocol import utc_now as utc_now
from durable_adk.testing.fakes.server import main
from durable_adk.testing.fakes.specs import BILLING as BILLING
from durable_adk.testing.fakes.specs import CARRIER as CARRIER
from durable_adk.testing.fakes.specs import INVENTORY as INVENTORY
from durable_adk.testing.fakes.specs import NOTIFICATIONS as NOTIFICATIONS
from durable_adk.testing.fakes.specs import PAYMENTS as PAYMENTS
from durable_adk.testing.fakes.specs import (
    SERVICES,
    Action,
    Field,
    Rejected,
    Resource,
    ServiceSpec,
    register,
)
from durable_adk.testing.fakes.specs import FieldKind as FieldKind
from durable_adk.testing.fakes.storage import NotFound as NotFound
from durable_adk.testing.fakes.storage import Store as Store
from durable_adk.testing.fakes.storage import StoreClosed as StoreClosed
from durable_adk.testing.fakes.storage import StoreError as StoreError

# The stable names. The ``X as X`` imports above are further public names of
# the module before it was split (the store, the app, the five specs, ...),
# kept importable from here.
__all__ = [
    "MAX_BODY_BYTES",
    "MAX_KEY_LENGTH",
    "SERVICES",
    "Action",
    "BillingClient",
    "Caller",
    "FakeService",
    "Field",
    "LookupUnavailable",
    "NotificationClient",
    "Outcome",
    "Rejected",
    "RequestRecord",
    "Resource",
    "ResourceClient",
    "ServiceError",
    "ServiceFenced",
    "ServiceSpec",
    "ServiceStartError",
    "ServiceUnreachable",
    "key_problem",
    "main",
    "read_requests",
    "register",
    "request_json",
]


if __name__ == "__main__":
    _code = main()
    # The database is closed and nothing else holds state: skip the interpreter's
    # teardown of every module the package imported (a few hundred ms).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_code)
