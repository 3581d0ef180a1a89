"""Clients of the fake services: what an agent's tools (and the tests) call.

Synchronous ``urllib``, short timeouts, never through a proxy. Inside a
durable run, every request of a :class:`ResourceClient` (and so of the typed
clients) carries the run's fence headers (:func:`durable_adk.fencing.fence.fence_headers`,
which also refuses to send once the lease is not trusted), and a refusal of
the service's fence check is :class:`ServiceFenced`, a
:class:`durable_adk.errors.FenceRefused`: the journal knows it did not act.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from email.message import Message
from typing import Any

from durable_adk import errors
from durable_adk.fencing.fence import FENCE_REFUSED_STATUS, fence_headers
from durable_adk.testing.fakes.protocol import (
    MAX_LOG_PAGE,
    REQUESTS_PATH,
    Caller,
    JsonObject,
    RequestRecord,
    caller_headers,
    key_problem,
)

__all__ = [
    "BillingClient",
    "LookupUnavailable",
    "NotificationClient",
    "ResourceClient",
    "ServiceError",
    "ServiceFenced",
    "ServiceUnreachable",
    "as_object",
    "read_requests",
    "request_json",
]


class ServiceError(Exception):
    """A service answered with a status other than 2xx, or did not answer.

    Attributes:
        status: The HTTP status, or None if no answer arrived.
        body: The answer's JSON (usually ``{"error": ..., "reason": ...}``), its
            text if it was not JSON, or a description of the transport error.
        request: ``"METHOD url"`` of the failed request.
    """

    def __init__(self, status: int | None, body: Any, *, request: str = "") -> None:
        self.status = status
        self.body = body
        self.request = request
        what = "no answer" if status is None else f"HTTP {status}"
        super().__init__(f"{request}: {what}: {body}" if request else f"{what}: {body}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.status, self.body), {"request": self.request})

    @property
    def reason(self) -> str | None:
        """The answer's ``reason`` code, if it had one."""
        if isinstance(self.body, dict):
            value = self.body.get("reason")
            return value if isinstance(value, str) else None
        return None


class ServiceUnreachable(ServiceError):
    """No answer arrived (refused, reset, timed out): a create may or may not have happened."""


class LookupUnavailable(ServiceError):
    """The service offers no lookup by idempotency key (it answered 501)."""


class ServiceFenced(ServiceError, errors.FenceRefused):
    """The service refused the request's fence (412): it did nothing.

    Its ``reason`` is ``fence_expired`` or ``fence_superseded``. Being a
    :class:`durable_adk.errors.FenceRefused` too, it tells the journal that
    the effect did not happen, and the runner that the drive is fenced off.
    """


def _fenced_refusal(status: int, body: Any) -> bool:
    reason = body.get("reason") if isinstance(body, dict) else None
    return status == FENCE_REFUSED_STATUS and isinstance(reason, str) and reason.startswith("fence")


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy


def _decode(data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return data.decode("utf-8", errors="replace")


def request_json(
    method: str,
    url: str,
    *,
    payload: JsonObject | None = None,
    idempotency_key: str | None = None,
    timeout: float = 5.0,
    caller: Caller | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, Any, Message]:
    """Sends one JSON request and returns the status, decoded body and headers.

    Any HTTP answer is returned, whatever its status.

    Args:
        caller: Sent as ``X-Caller-<name>`` headers (see :data:`Caller`).
        headers: More headers to send as they are (such as the fence's).

    Raises:
        ServiceUnreachable: No answer arrived.
        ValueError: ``caller`` has a name or value that cannot be a header.
    """
    data = None if payload is None else json.dumps(payload, allow_nan=True).encode("utf-8")
    sent = {"Accept": "application/json", **(headers or {})}
    if caller is not None:
        sent.update(caller_headers(caller() if callable(caller) else caller))
    if data is not None:
        sent["Content-Type"] = "application/json"
    if idempotency_key is not None:
        sent["Idempotency-Key"] = idempotency_key
    request = urllib.request.Request(url, data=data, method=method, headers=sent)
    try:
        with _OPENER.open(request, timeout=timeout) as answer:
            return int(answer.status), _decode(answer.read()), answer.headers
    except urllib.error.HTTPError as err:
        with err:
            return err.code, _decode(err.read()), err.headers
    except (OSError, http.client.HTTPException) as err:
        reason = err.reason if isinstance(err, urllib.error.URLError) else err
        raise ServiceUnreachable(None, str(reason), request=f"{method} {url}") from err


def read_requests(
    base_url: str, *, since: int = 0, timeout: float = 10.0, **match: Any
) -> list[RequestRecord]:
    """The request log of the service at ``base_url``: records after ``since``, oldest first.

    Every page of ``GET /_requests`` is read; ``match`` filters the records
    (the keywords of :meth:`RequestRecord.matches`).

    Raises:
        ServiceError: The service did not answer with its log.
    """
    records: list[RequestRecord] = []
    base = base_url.rstrip("/")
    while True:
        url = f"{base}{REQUESTS_PATH}?since={since}&limit={MAX_LOG_PAGE}"
        status, body, _ = request_json("GET", url, timeout=timeout)
        if (
            status != 200
            or not isinstance(body, dict)
            or not isinstance(body.get("requests"), list)
        ):
            raise ServiceError(status, body, request=f"GET {url}")
        try:
            page = [RequestRecord.from_json(item) for item in body["requests"]]
        except ValueError as err:
            raise ServiceError(status, str(err), request=f"GET {url}") from err
        records += [r for r in page if r.matches(**match)]
        if not body.get("more") or not page:
            return records
        since = page[-1].seq


def as_object(body: Any, request: str) -> JsonObject:
    """``body`` if it is a JSON object; else :class:`ServiceError` naming ``request``."""
    if not isinstance(body, dict):
        raise ServiceError(200, body, request=f"{request} (expected a JSON object)")
    return body


class ResourceClient:
    """Calls one collection of a fake service; the typed clients build on it.

    Args:
        base_url: The service's URL, e.g. ``http://127.0.0.1:8123``.
        collection: The collection, e.g. ``invoices``.
        timeout: Seconds to wait for each answer.
        caller: Tags every request with ``X-Caller-<name>`` headers, which the
            service's request log records (see :data:`Caller`).
        fenced: Send the current durable run's fence headers with every
            request (:func:`durable_adk.fencing.fence.fence_headers`: none outside a
            run; :class:`durable_adk.errors.Fenced` instead of sending once
            the run's lease is not trusted). False sends none (a caller that
            does not fence, for tests).
    """

    def __init__(
        self,
        base_url: str,
        collection: str,
        *,
        timeout: float = 5.0,
        caller: Caller | None = None,
        fenced: bool = True,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.collection = collection
        self.timeout = timeout
        self.caller = caller
        self.fenced = fenced
        if isinstance(caller, Mapping):
            caller_headers(caller)  # a bad name fails here, not at the first call

    def _url(self, *segments: str) -> str:
        quoted = [urllib.parse.quote(s, safe="") for s in (self.collection, *segments)]
        return f"{self.base_url}/{'/'.join(quoted)}"

    @staticmethod
    def _check_key(key: str) -> None:
        problem = key_problem(key)
        if problem is not None:
            raise ValueError(problem)

    def _send(
        self, method: str, url: str, *, payload: JsonObject | None = None, key: str | None = None
    ) -> tuple[int, Any]:
        """One request, with the fence's headers; a refused fence raises :class:`ServiceFenced`."""
        status, body, _ = request_json(
            method,
            url,
            payload=payload,
            idempotency_key=key,
            timeout=self.timeout,
            caller=self.caller,
            headers=fence_headers() if self.fenced else None,  # the last check before sending
        )
        if _fenced_refusal(status, body):
            raise ServiceFenced(status, body, request=f"{method} {url}")
        return status, body

    def _post(self, url: str, payload: JsonObject, key: str) -> JsonObject:
        self._check_key(key)
        status, body = self._send("POST", url, payload=payload, key=key)
        if not 200 <= status < 300:
            raise ServiceError(status, body, request=f"POST {url}")
        return as_object(body, f"POST {url}")

    def _get_optional(self, url: str) -> JsonObject | None:
        status, body = self._send("GET", url)
        if status == 404 and isinstance(body, dict) and body.get("reason") == "not_found":
            return None
        if status == 501:
            raise LookupUnavailable(status, body, request=f"GET {url}")
        if not 200 <= status < 300:
            raise ServiceError(status, body, request=f"GET {url}")
        return as_object(body, f"GET {url}")

    def create(self, payload: JsonObject, idempotency_key: str) -> JsonObject:
        """Creates an item (or gets the one already made under this key).

        Raises:
            ValueError: The key is not acceptable (nothing was sent).
            ServiceError: The answer was not 2xx.
            ServiceUnreachable: No answer; the item may or may not exist.
        """
        return self._post(self._url(), payload, idempotency_key)

    def find(self, idempotency_key: str) -> JsonObject | None:
        """The item created under this key, or None if there is none.

        Raises:
            LookupUnavailable: The service offers no lookup by key.
            ServiceError: Any other non-2xx answer.
        """
        self._check_key(idempotency_key)
        return self._get_optional(self._url("by-key", idempotency_key))

    def get(self, item_id: str) -> JsonObject | None:
        """The item with this generated id, or None."""
        return self._get_optional(self._url(item_id))

    def act(
        self, item_id: str, action: str, idempotency_key: str, payload: JsonObject | None = None
    ) -> JsonObject:
        """Applies an action to an item once per key; returns the changed item."""
        return self._post(self._url(item_id, action), payload or {}, idempotency_key)

    def count(self) -> int:
        """How many items the collection holds."""
        url = self._url("count")
        status, body = self._send("GET", url)
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("count"), int):
            raise ServiceError(status, body, request=f"GET {url}")
        return int(body["count"])

    def items(self) -> list[JsonObject]:
        """Every item of the collection, oldest first."""
        url = self._url()
        status, body = self._send("GET", url)
        if status != 200 or not isinstance(body, list):
            raise ServiceError(status, body, request=f"GET {url}")
        return [as_object(item, f"GET {url}") for item in body]


class BillingClient:
    """The billing service as an agent's tool sees it.

    Args:
        base_url: The service's URL.
        timeout: Seconds to wait for each answer.
        caller: Tags every request (see :class:`ResourceClient`).
        fenced: Send the current run's fence headers (see :class:`ResourceClient`).
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 5.0,
        caller: Caller | None = None,
        fenced: bool = True,
    ) -> None:
        self.invoices = ResourceClient(
            base_url, "invoices", timeout=timeout, caller=caller, fenced=fenced
        )

    def create_invoice(
        self,
        invoice_id: str,
        customer: str,
        amount: float,
        idempotency_key: str,
        summary: str | None = None,
    ) -> JsonObject:
        """Creates an invoice, or returns the one already made under this key.

        Returns:
            The invoice: ``id``, ``invoice_id``, ``customer``, ``amount``,
            ``summary``, ``status``, ``idempotency_key``, ``created_at``.

        Raises:
            ServiceError: The answer was not 2xx (e.g. 400 for bad input).
            ServiceUnreachable: No answer; the invoice may or may not exist.
        """
        payload: JsonObject = {"invoice_id": invoice_id, "customer": customer, "amount": amount}
        if summary is not None:
            payload["summary"] = summary
        return self.invoices.create(payload, idempotency_key)

    def find_invoice(self, idempotency_key: str) -> JsonObject | None:
        """The invoice created under this key, or None.

        Raises:
            LookupUnavailable: The service offers no lookup by key.
            ServiceError: Any other non-2xx answer.
        """
        return self.invoices.find(idempotency_key)

    def get_invoice(self, id: str) -> JsonObject | None:
        """The invoice with this generated id, or None."""
        return self.invoices.get(id)

    def void_invoice(self, id: str, idempotency_key: str, reason: str | None = None) -> JsonObject:
        """Voids an invoice (a saga's compensation); returns it with ``status: void``.

        Raises:
            ServiceError: 404 if there is no such invoice, 409 if it was already
                voided under another key.
        """
        payload: JsonObject = {} if reason is None else {"reason": reason}
        return self.invoices.act(id, "void", idempotency_key, payload)


class NotificationClient:
    """The notifications service as an agent's tool sees it.

    Args:
        base_url: The service's URL.
        timeout: Seconds to wait for each answer.
        caller: Tags every request (see :class:`ResourceClient`).
        fenced: Send the current run's fence headers (see :class:`ResourceClient`).
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 5.0,
        caller: Caller | None = None,
        fenced: bool = True,
    ) -> None:
        self.notifications = ResourceClient(
            base_url, "notifications", timeout=timeout, caller=caller, fenced=fenced
        )

    def send(self, to: str, message: str, idempotency_key: str) -> JsonObject:
        """Sends a notification, or returns the one already sent under this key.

        Raises:
            ServiceError: The answer was not 2xx.
            ServiceUnreachable: No answer; it may or may not have been sent.
        """
        return self.notifications.create({"to": to, "message": message}, idempotency_key)

    def find(self, idempotency_key: str) -> JsonObject | None:
        """The notification sent under this key, or None.

        Raises:
            LookupUnavailable: The service offers no lookup by key.
            ServiceError: Any other non-2xx answer.
        """
        return self.notifications.find(idempotency_key)
