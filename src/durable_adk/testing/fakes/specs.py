"""What a fake service serves: its resources, their fields and actions, the registry.

A new service is one :class:`ServiceSpec` passed to :func:`register`; the five
services the project uses (billing, notifications, inventory, payments,
carrier) are defined at the end of this module.
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from durable_adk.testing.fakes.protocol import JsonObject, utc_now

__all__ = [
    "BILLING",
    "CARRIER",
    "INVENTORY",
    "NOTIFICATIONS",
    "PAYMENTS",
    "SERVICES",
    "Action",
    "Field",
    "FieldKind",
    "Rejected",
    "Resource",
    "ServiceSpec",
    "json_type",
    "register",
]

FieldKind = Literal["string", "number", "integer", "boolean"]


def json_type(value: object) -> str:
    """The JSON type name of a decoded value, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


@dataclass(frozen=True)
class Field:
    """One field of a create or action request body.

    Attributes:
        name: The JSON member name.
        kind: ``string``, ``number`` (int or float, finite), ``integer`` or
            ``boolean``. Booleans are never numbers.
        required: Whether the member must be present and not null. A missing
            optional field is stored as null.
        allow_empty: Whether a string may be empty or only whitespace.
        max_length: The longest string accepted.
    """

    name: str
    kind: FieldKind
    required: bool = True
    allow_empty: bool = False
    max_length: int = 10_000

    def problem(self, value: object) -> str | None:
        """Says what is wrong with a non-null value for this field, or None."""
        got = json_type(value)
        if self.kind == "string":
            if not isinstance(value, str):
                return f"must be a string, not {got}"
            if not self.allow_empty and not value.strip():
                return "must not be empty"
            if len(value) > self.max_length:
                return f"is longer than {self.max_length} characters"
        elif self.kind == "number":
            if isinstance(value, bool) or not isinstance(value, int | float):
                return f"must be a number, not {got}"
            if not math.isfinite(value):
                return "must be a finite number"
        elif self.kind == "integer":
            if isinstance(value, bool) or not isinstance(value, int):
                return f"must be an integer, not {got}"
        elif not isinstance(value, bool):
            return f"must be a boolean, not {got}"
        return None


class Rejected(Exception):
    """Raised by a resource's ``validate`` or an action's ``apply`` to refuse a request.

    Nothing is written; the client gets ``status`` and ``message``.

    Args:
        message: What is wrong, for the client.
        status: The HTTP status, 409 (conflict) unless given.
        reason: A short machine-readable code for the answer's ``reason``.
    """

    def __init__(self, message: str, *, status: int = 409, reason: str = "conflict") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Action:
    """An extra operation on one item: ``POST /<collection>/<id>/<name>``.

    Attributes:
        name: The last path segment.
        apply: Given the current item and the checked request fields, returns
            the item as it should be stored (``id``, ``idempotency_key`` and
            ``created_at`` are kept whatever it returns), or raises
            :class:`Rejected`. It runs under the store's write lock.
        fields: The accepted request body fields; an empty body means ``{}``.
    """

    name: str
    apply: Callable[[JsonObject, JsonObject], JsonObject]
    fields: tuple[Field, ...] = ()


@dataclass(frozen=True)
class Resource:
    """A named collection of items created under idempotency keys.

    Attributes:
        collection: The first path segment, e.g. ``invoices``.
        id_prefix: Prefix of generated ids, e.g. ``inv`` gives ``inv_3f2a...``.
        fields: The create request's fields, stored as given.
        defaults: Members every new item starts with (e.g. a status).
        validate: Optional check of the checked fields that may raise
            :class:`Rejected`.
        actions: Extra operations on one item.
        singular: The item's name in messages; defaults to ``collection``
            without a trailing ``s``.
    """

    collection: str
    id_prefix: str
    fields: tuple[Field, ...]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    validate: Callable[[JsonObject], None] | None = None
    actions: tuple[Action, ...] = ()
    singular: str = ""

    @property
    def noun(self) -> str:
        """The item's name in messages."""
        return self.singular or self.collection.removesuffix("s")

    def action(self, name: str) -> Action | None:
        """The action called ``name``, or None."""
        return next((a for a in self.actions if a.name == name), None)

    def new_item(self, values: JsonObject, idempotency_key: str) -> JsonObject:
        """Builds a new item from checked request fields."""
        item: JsonObject = {"id": f"{self.id_prefix}_{secrets.token_hex(8)}"}
        item.update(values)
        item.update(json.loads(json.dumps(dict(self.defaults))))  # a deep copy
        item["idempotency_key"] = idempotency_key
        item["created_at"] = utc_now()
        return item


@dataclass(frozen=True)
class ServiceSpec:
    """A fake service: a name and its resources.

    Attributes:
        name: The command-line name, e.g. ``billing``.
        resources: The collections it serves; their names must differ.
    """

    name: str
    resources: tuple[Resource, ...]


SERVICES: dict[str, ServiceSpec] = {}
"""The services the command line knows, by name; :func:`register` adds one."""


def register(spec: ServiceSpec) -> ServiceSpec:
    """Adds a service to :data:`SERVICES` and returns it.

    A new service is a few lines, e.g.::

        register(ServiceSpec("carrier", (Resource("shipments", "shp", (
            Field("order_id", "string"), Field("address", "string"))),)))

    Raises:
        ValueError: The name is taken, two resources share a collection name,
            a collection name starts with ``_`` (kept for the service's own
            paths, such as ``/_requests``) or an action is named ``create``
            (the request log's name for a create).
    """
    if spec.name in SERVICES:
        raise ValueError(f"service {spec.name!r} is already registered")
    names = [r.collection for r in spec.resources]
    if len(set(names)) != len(names) or not names:
        raise ValueError(f"service {spec.name!r} needs distinct collection names, got {names}")
    if any(not name or name.startswith("_") for name in names):
        raise ValueError(f"service {spec.name!r}: a collection name must not start with '_'")
    if any(a.name == "create" for r in spec.resources for a in r.actions):
        raise ValueError(f"service {spec.name!r}: no action may be named 'create'")
    SERVICES[spec.name] = spec
    return spec


def _void_invoice(invoice: JsonObject, values: JsonObject) -> JsonObject:
    if invoice.get("status") == "void":
        raise Rejected(f"invoice {invoice['id']} is already void")
    return {
        **invoice,
        "status": "void",
        "void_reason": values.get("reason"),
        "voided_at": utc_now(),
    }


def _check_amount(values: JsonObject) -> None:
    if values["amount"] < 0:
        raise Rejected("field 'amount' must not be negative", status=400, reason="bad_request")


BILLING = register(
    ServiceSpec(
        "billing",
        (
            Resource(
                collection="invoices",
                id_prefix="inv",
                fields=(
                    Field("invoice_id", "string", max_length=200),
                    Field("customer", "string", max_length=200),
                    Field("amount", "number"),
                    Field("summary", "string", required=False, allow_empty=True),
                ),
                defaults={"status": "open"},
                validate=_check_amount,
                actions=(
                    Action("void", _void_invoice, (Field("reason", "string", required=False),)),
                ),
            ),
        ),
    )
)

NOTIFICATIONS = register(
    ServiceSpec(
        "notifications",
        (
            Resource(
                collection="notifications",
                id_prefix="ntf",
                fields=(Field("to", "string", max_length=320), Field("message", "string")),
            ),
        ),
    )
)


def _undo_once(done_status: str, counter: str) -> Callable[[JsonObject, JsonObject], JsonObject]:
    """An undo action (release, refund, cancel) that applies once per item.

    Each applied undo bumps ``counter``, so a test can see that an undo happened
    exactly once; undoing an item already undone is refused with 409.
    """

    def apply(item: JsonObject, values: JsonObject) -> JsonObject:
        if item.get("status") == done_status:
            raise Rejected(
                f"{item['id']} is already {done_status}", reason=f"already_{done_status}"
            )
        return {**item, "status": done_status, counter: int(item.get(counter) or 0) + 1}

    return apply


def _check_quantity(values: JsonObject) -> None:
    if values["quantity"] <= 0:
        raise Rejected("field 'quantity' must be positive", status=400, reason="bad_request")


def _check_address(values: JsonObject) -> None:
    if "nowhere" in str(values["address"]).lower():
        raise Rejected(
            f"the carrier does not deliver to {values['address']!r}",
            status=422,
            reason="cannot_ship",
        )


INVENTORY = register(
    ServiceSpec(
        "inventory",
        (
            Resource(
                collection="reservations",
                id_prefix="rsv",
                fields=(
                    Field("order_id", "string", max_length=200),
                    Field("sku", "string", max_length=100),
                    Field("quantity", "integer"),
                ),
                defaults={"status": "held", "releases": 0},
                validate=_check_quantity,
                actions=(Action("release", _undo_once("released", "releases")),),
            ),
        ),
    )
)

PAYMENTS = register(
    ServiceSpec(
        "payments",
        (
            Resource(
                collection="charges",
                id_prefix="chg",
                fields=(
                    Field("order_id", "string", max_length=200),
                    Field("customer", "string", max_length=200),
                    Field("amount", "number"),
                ),
                defaults={"status": "captured", "refunds": 0},
                validate=_check_amount,
                actions=(Action("refund", _undo_once("refunded", "refunds")),),
            ),
        ),
    )
)

CARRIER = register(
    ServiceSpec(
        "carrier",
        (
            Resource(
                collection="shipments",
                id_prefix="shp",
                fields=(
                    Field("order_id", "string", max_length=200),
                    Field("address", "string", max_length=500),
                ),
                defaults={"status": "booked", "cancellations": 0},
                validate=_check_address,
                actions=(Action("cancel", _undo_once("cancelled", "cancellations")),),
            ),
        ),
    )
)
