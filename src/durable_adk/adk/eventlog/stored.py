"""Events read back from the store's own rows without validating them again.

What it guarantees: :func:`load_event` returns an ``Event`` equal to
``Event.model_validate_json(raw)`` (same field values, same set fields, same
types down to every nested model, enum and set) for every row this project
writes, and for any row it cannot vouch for it *is* that call.

Why: every event row is written by :class:`DurableSessionService` from an
``Event`` that pydantic validated when ADK built it
(``model_dump_json(exclude_none=True)``). Validating it again on every cold read
repeats checks that already passed, and google.genai's models run a Python
before-validator on every nested object (each ``Content``, ``Part``,
``FunctionCall``): about 96% of a cold read of a long session.

How: per model class, a plan computed once from its fields says which keys it
knows and how a JSON value becomes a field's value: a nested model, a list or
dict of models, an enum member, a set, a float. A string, number or boolean is
kept as parsed once its JSON type is the field's type; free-form values
(``Any``, ``dict[str, Any]``) are kept as parsed. The object is then made the
way ``model_construct`` makes it (defaults filled, ``model_fields_set`` from
the given keys, ``model_post_init`` called), in a fraction of its time.

Where trust ends, validation takes over, for the whole row: a key the plan does
not know (a row written by another ADK version), a value of a type the plan does
not convert (bytes, a datetime, a union of models, a value of another JSON
type than its field's), or a class with a validator the
plan does not know to be harmless. A field validator is harmless only for the
values it is listed for below; any new validator in ADK or google.genai makes
its model take the validating path until it is reviewed here.
"""

from __future__ import annotations

import copy
import enum
import gc
import os
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

import pydantic
import pydantic_core
from google.adk.events.event import Event
from pydantic_core import PydanticUndefined

__all__ = ["VERIFY_ENV", "load_event", "load_events", "same_model"]

VERIFY_ENV = "DURABLE_ADK_VERIFY_STORED_EVENTS"
"""Set to ``1`` (the test suite does) to validate every row as well and compare.

Read when the process loads its first event (again in a forked child).

Each rebuilt event is then checked against ``Event.model_validate_json`` with
:func:`same_model`, and a difference raises :class:`AssertionError` naming the
row: every test that reads a session becomes a differential test of this
module.
"""

Convert = Callable[[Any], Any]


class _Untrusted(Exception):
    """A value this module does not vouch for: validate the whole row instead."""


def _refuse(_: object) -> Any:
    raise _Untrusted


def _only_empty(value: object) -> object:
    if value:
        raise _Untrusted
    return value


# Validators reviewed as not changing the values this module passes through.
# Model validators in mode "before" see the raw input only: google.genai's
# warns about mismatched model types, ADK's Event moves convenience keyword
# arguments (message, state, route, node_path) that are not fields, so a stored
# row never holds them (and an unknown key is refused anyway).
_HARMLESS_MODEL_VALIDATORS = frozenset(
    {
        "google.genai._common.BaseModel._check_field_type_mismatches",
        "google.adk.events.event.Event._accept_convenience_kwargs",
    }
)
# Field validators whose output equals their input for the values given here:
# EventActions parses non-empty auth configs into AuthConfig objects, and
# leaves an empty dict as it is.
_FIELD_VALIDATED_WHEN: Mapping[str, Convert] = {
    "google.adk.events.event_actions.EventActions._parse_auth_configs": _only_empty,
}

_IMMUTABLE = (type(None), str, int, float, bool, tuple, frozenset, enum.Enum)


@dataclass(frozen=True)
class _Plan:
    """How rows become instances of one model class."""

    convert: Mapping[str, Convert]
    make: Callable[[dict[str, Any]], Any]

    def build(self, data: object) -> Any:
        if type(data) is not dict:
            raise _Untrusted
        convert = self.convert
        for key, value in data.items():
            step = convert.get(key)
            if step is None:
                raise _Untrusted
            if step is not _keep:
                data[key] = step(value)
        return self.make(data)


_PLANS: dict[type[pydantic.BaseModel], _Plan] = {}
_VERIFY: bool | None = None
"""Whether :data:`VERIFY_ENV` is set, read at the first load of this process."""


def _verifying() -> bool:
    """Reads :data:`VERIFY_ENV` when the first event is loaded, not at import.

    A process forked from one that imported this module (a test's fork server)
    and then given an environment of its own must follow that environment.
    """
    global _VERIFY
    if _VERIFY is None:
        _VERIFY = os.environ.get(VERIFY_ENV) == "1"
    return _VERIFY


def _forget_verify() -> None:
    global _VERIFY
    _VERIFY = None


os.register_at_fork(after_in_child=_forget_verify)


GC_PAUSE_FROM = 256
"""From this many rows, :func:`load_events` pauses the cyclic garbage collector."""


def load_events(raws: Iterable[str | bytes], *, count: int) -> list[Event]:
    """:func:`load_event` of each row, with the cyclic collector paused for a large batch.

    Building thousands of small objects in a row triggers collection after
    collection, each walking every object still alive: on a 10,000-event read
    that was more than half the time (a measurement in ``bench/sessions.py``'s
    profile; 547 ms against 241 ms with it paused, on SQLite). None of the new
    objects is garbage, so nothing is lost by not looking for it; the collector
    runs again as usual right after. The build does not await: no other task
    runs meanwhile.
    """
    if count < GC_PAUSE_FROM or not gc.isenabled():
        return [load_event(raw) for raw in raws]
    gc.disable()
    try:
        return [load_event(raw) for raw in raws]
    finally:
        gc.enable()


def load_event(raw: str | bytes) -> Event:
    """The ``Event`` stored as ``raw`` by this project's session service.

    Equal to ``Event.model_validate_json(raw)``; rows it cannot vouch for go
    through exactly that call, with its errors.
    """
    try:
        event: Event = _plan(Event).build(pydantic_core.from_json(raw))
    except (_Untrusted, ValueError, TypeError, KeyError):
        return Event.model_validate_json(raw)
    if _verifying():
        validated = Event.model_validate_json(raw)
        if not same_model(event, validated):
            raise AssertionError(f"stored event rebuilt unlike its validation: {raw!r}")
    return event


def same_model(a: object, b: object) -> bool:
    """Whether ``a`` and ``b`` hold equal values of the same types, all the way down.

    Stricter than ``==``: a ``str`` is not its enum member, a ``list`` is not a
    ``set``, an ``int`` is not a ``float``, and two models must also agree on
    which fields were set.
    """
    if type(a) is not type(b):
        return False
    if isinstance(a, pydantic.BaseModel):
        assert isinstance(b, pydantic.BaseModel)
        return (
            a.model_fields_set == b.model_fields_set
            and a.__pydantic_extra__ == b.__pydantic_extra__
            and a.__pydantic_private__ == b.__pydantic_private__
            and all(same_model(v, getattr(b, k)) for k, v in a.__dict__.items())
            and a.__dict__.keys() == b.__dict__.keys()
        )
    if isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple))
        return len(a) == len(b) and all(same_model(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return a.keys() == b.keys() and all(same_model(v, b[k]) for k, v in a.items())
    return a == b


def _plan(cls: type[pydantic.BaseModel]) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _plan_of(cls)
    return plan


def _plan_of(cls: type[pydantic.BaseModel]) -> _Plan:
    decorators = cls.__pydantic_decorators__
    model_validators = {_name_of(d.func) for d in decorators.model_validators.values()}
    if (
        not model_validators <= _HARMLESS_MODEL_VALIDATORS
        or decorators.validators
        or decorators.root_validators
        or cls.model_config.get("extra") == "allow"
    ):
        return _Plan(convert={}, make=_refuse)
    validated: dict[str, Convert] = {}
    for d in decorators.field_validators.values():
        check = _FIELD_VALIDATED_WHEN.get(_name_of(d.func), _refuse)
        for field in d.info.fields:
            validated[field] = check
    convert = {
        name: validated.get(name) or _converter(info.annotation)
        for name, info in cls.model_fields.items()
    }
    return _Plan(convert=convert, make=_maker(cls))


def _name_of(func: Any) -> str:
    """A validator's full name, of the class that defines it (not a subclass)."""
    func = getattr(func, "__func__", func)
    return f"{func.__module__}.{func.__qualname__}"


def _keep(value: Any) -> Any:
    return value


def _converter(annotation: Any) -> Convert:
    """How a JSON value becomes a value of ``annotation``; ``_refuse`` if unknown."""
    origin = get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        members = [a for a in get_args(annotation) if a is not type(None)]
        if any(a is Any for a in members):
            return _keep
        if all(a in _SCALARS for a in members):
            kinds = frozenset(members) | {type(None)}
            return lambda v: v if type(v) in kinds else _refuse(v)
        if len(members) != 1:
            return _refuse
        inner = _converter(members[0])
        if inner is _keep or inner is _refuse:
            return inner
        return lambda v: None if v is None else inner(v)
    if annotation is Any:
        return _keep
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    if origin is Literal:
        allowed = get_args(annotation)
        return lambda v: v if v in allowed else _refuse(v)
    if annotation is float:
        return _float
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        model = annotation
        return lambda v: _plan(model).build(v)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return annotation
    args = get_args(annotation)
    if origin is list and len(args) == 1:
        item = _converter(args[0])
        if item is _refuse:
            return _refuse
        if item is _keep:
            return _list
        return lambda v: [item(x) for x in _list(v)]
    if origin is set and args == (str,):
        return lambda v: set(_list(v))
    if origin is dict and len(args) == 2 and args[0] is str:
        value = _converter(args[1])
        if value is _refuse:
            return _refuse
        if value is _keep:
            return _dict
        return lambda v: {k: value(x) for k, x in _dict(v).items()}
    return _refuse


def _str(value: Any) -> str:
    if type(value) is not str:
        raise _Untrusted
    return value


def _bool(value: Any) -> bool:
    if type(value) is not bool:
        raise _Untrusted
    return value


def _int(value: Any) -> int:
    if type(value) is not int:
        raise _Untrusted
    return value


def _float(value: Any) -> float:
    if type(value) is float:
        return value
    if type(value) is int:
        return float(value)
    raise _Untrusted


_SCALARS: Mapping[Any, Convert] = {str: _str, bool: _bool, int: _int, float: _float}


def _list(value: Any) -> list[Any]:
    if type(value) is not list:
        raise _Untrusted
    return value


def _dict(value: Any) -> dict[str, Any]:
    if type(value) is not dict:
        raise _Untrusted
    return value


def _maker(cls: type[pydantic.BaseModel]) -> Callable[[dict[str, Any]], Any]:
    """Makes an instance from converted values, as ``model_construct`` does."""
    base: dict[str, Any] = {}
    factories: list[tuple[str, Callable[[], Any]]] = []
    mutable: dict[str, Any] = {}
    required: set[str] = set()
    for name, info in cls.model_fields.items():
        base[name] = None
        if info.default_factory is not None:
            factory = info.default_factory
            if info.default_factory_takes_validated_data:
                return _refuse
            factories.append((name, _fast_factory(factory)))  # type: ignore[arg-type]
        elif info.default is PydanticUndefined:
            required.add(name)
        elif isinstance(info.default, _IMMUTABLE):
            base[name] = info.default
        else:
            mutable[name] = info.default
    private = cls.__private_attributes__
    post_init = cls.__pydantic_post_init__ is not None
    new = object.__new__
    put = object.__setattr__

    def make(values: dict[str, Any]) -> Any:
        if required and not values.keys() >= required:
            raise _Untrusted
        fields = base.copy()
        fields.update(values)
        for name, factory in factories:
            if name not in values:
                fields[name] = factory()
        for name, default in mutable.items():
            if name not in values:
                fields[name] = copy.deepcopy(default)
        obj = new(cls)
        put(obj, "__dict__", fields)
        put(obj, "__pydantic_fields_set__", set(values))
        put(obj, "__pydantic_extra__", None)
        put(obj, "__pydantic_private__", _private_defaults(private) if private else None)
        if post_init:
            obj.model_post_init(None)
        return obj

    return make


def _private_defaults(private: Mapping[str, Any]) -> dict[str, Any]:
    defaults = {name: attr.get_default() for name, attr in private.items()}
    return {name: value for name, value in defaults.items() if value is not PydanticUndefined}


def _fast_factory(factory: Callable[[], Any]) -> Callable[[], Any]:
    """A default factory, made without validation when it is a model class."""
    if isinstance(factory, type) and issubclass(factory, pydantic.BaseModel):
        model = factory
        return lambda: _plan(model).build({})
    return factory
