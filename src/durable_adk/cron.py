"""Cron expressions in a time zone: which instants a schedule ticks at.

A :class:`Cron` is parsed once from the five classic fields (minute, hour,
day of month, month, day of week) with lists (``1,15``), ranges (``1-5``),
steps (``*/15``, ``10-50/20``, ``5/10``), names (``JAN``-``DEC``,
``SUN``-``SAT``, day 7 also Sunday) and the shorthands ``@hourly``,
``@daily`` (``@midnight``), ``@weekly``, ``@monthly``, ``@yearly``
(``@annually``). As in Vixie cron, when both the day of month and the day of
week are restricted a day matches if either does. Framework-agnostic: no ADK.

What it guarantees:

* Parsing refuses anything else with :class:`~durable_adk.errors.InvalidArgument`
  naming the field, and refuses an expression that never fires (``0 0 30 2 *``).
* Ticks are instants (UTC seconds). A wall time is read in the zone with
  ``fold=0``, which gives the rule for the two DST cases: a wall time that
  does not exist (the hour skipped in spring) fires once, at the instant the
  clock jumps over it (02:30 in a 02:00 -> 03:00 gap fires at 03:30 of the
  new offset, the same instant as a 03:30 tick, which then fires once); a
  wall time that exists twice (the hour repeated in autumn) fires once, at
  its first occurrence. Ticks are deduplicated by instant, so no instant
  fires twice.
* :meth:`Cron.after` returns the first tick strictly after an instant, for
  any instant, in increasing order when iterated (:meth:`Cron.ticks`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from durable_adk import errors

_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")

_SHORTHANDS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

# (name, lowest, highest, names whose index + offset is the value)
_FIELDS: tuple[tuple[str, int, int, tuple[str, ...], int], ...] = (
    ("minute", 0, 59, (), 0),
    ("hour", 0, 23, (), 0),
    ("day of month", 1, 31, (), 0),
    ("month", 1, 12, _MONTHS, 1),
    ("day of week", 0, 7, _DAYS, 0),
)

SEARCH_YEARS = 8
"""How far ahead a tick is looked for (a leap day fires at least once in 8 years)."""


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``.

    Raises:
        InvalidArgument: No such zone.
    """
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise errors.InvalidArgument(f"unknown time zone {name!r}") from exc


def _value(text: str, what: str, low: int, high: int, names: tuple[str, ...], base: int) -> int:
    upper = text.upper()
    if names and upper in names:
        return names.index(upper) + base
    if not text.isdigit():
        raise errors.InvalidArgument(f"cron {what}: {text!r} is not a number or name")
    value = int(text)
    if not low <= value <= high:
        raise errors.InvalidArgument(f"cron {what}: {value} is outside {low}-{high}")
    return value


def _field(text: str, index: int) -> tuple[frozenset[int], bool]:
    """The values one field allows, and whether it was restricted (not ``*``)."""
    what, low, high, names, base = _FIELDS[index]
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise errors.InvalidArgument(f"cron {what}: empty item in {text!r}")
        span, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) < 1:
                raise errors.InvalidArgument(f"cron {what}: bad step {step_text!r}")
            step = int(step_text)
        if span == "*":
            first, last = low, high
        elif "-" in span:
            a, _, b = span.partition("-")
            first = _value(a, what, low, high, names, base)
            last = _value(b, what, low, high, names, base)
            if first > last:
                raise errors.InvalidArgument(f"cron {what}: range {span!r} runs backwards")
        else:
            first = _value(span, what, low, high, names, base)
            last = high if slash else first  # "5/10": from 5 to the end, every 10
        values.update(range(first, last + 1, step))
    if index == 4 and 7 in values:  # 7 is Sunday too
        values.discard(7)
        values.add(0)
    return frozenset(values), text != "*" and not text.startswith("*/")


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed cron expression in a time zone.

    Attributes:
        expression: The expression as given.
        timezone: The IANA zone its wall times are read in.
    """

    expression: str
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        text = _SHORTHANDS.get(self.expression.strip().lower(), self.expression)
        parts = text.split()
        if len(parts) != 5:
            raise errors.InvalidArgument(
                f"cron {self.expression!r}: expected 5 fields (minute hour day-of-month "
                "month day-of-week) or a shorthand such as @daily"
            )
        parsed = [_field(part, i) for i, part in enumerate(parts)]
        object.__setattr__(self, "_parsed", parsed)
        object.__setattr__(self, "_zone", zone(self.timezone))
        if self._next_day_at_or_after(date(2000, 1, 1), limit=366 * SEARCH_YEARS) is None:
            raise errors.InvalidArgument(f"cron {self.expression!r} never fires")

    # Filled in __post_init__: the parsed fields and the zone.
    _parsed: list[tuple[frozenset[int], bool]] = field(init=False, repr=False, compare=False)
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def _day_matches(self, day: date) -> bool:
        (dom, dom_restricted), (months, _), (dow, dow_restricted) = self._parsed[2:5]
        if day.month not in months:
            return False
        in_dom = day.day in dom
        in_dow = (day.isoweekday() % 7) in dow
        if dom_restricted and dow_restricted:
            return in_dom or in_dow
        return in_dom and in_dow

    def _next_day_at_or_after(self, day: date, *, limit: int) -> date | None:
        for _ in range(limit):
            if self._day_matches(day):
                return day
            day += timedelta(days=1)
        return None

    def _instants_of(self, day: date) -> list[float]:
        """Every tick of one local day, as sorted distinct instants."""
        minutes, hours = self._parsed[0][0], self._parsed[1][0]
        found = {
            datetime(day.year, day.month, day.day, h, m, tzinfo=self._zone).timestamp()
            for h in hours
            for m in minutes
        }
        return sorted(found)

    def after(self, instant: float) -> float:
        """The first tick strictly after ``instant`` (UTC seconds)."""
        return next(self.ticks(instant))

    def ticks(self, instant: float) -> Iterator[float]:
        """Every tick strictly after ``instant``, in increasing order (an endless iterator)."""
        # A tick of local day D is read with fold=0, so it is never earlier
        # than D's midnight; a gap may move it later, even past the next
        # midnight. Ticks are held until no later day can come before them.
        day = datetime.fromtimestamp(instant, self._zone).date() - timedelta(days=1)
        pending: list[float] = []
        last = instant
        while True:
            found = self._next_day_at_or_after(day, limit=366 * SEARCH_YEARS)
            if found is None:  # pragma: no cover - refused at parse time
                return
            day = found + timedelta(days=1)
            pending = sorted({*pending, *self._instants_of(found)})
            bound = datetime(day.year, day.month, day.day, tzinfo=self._zone).timestamp()
            while pending and pending[0] < bound:
                tick = pending.pop(0)
                if tick > last:
                    last = tick
                    yield tick


def utc_iso(instant: float) -> str:
    """An instant as ``2026-12-04T09:00:00Z`` (the form tick keys and listings use)."""
    return datetime.fromtimestamp(instant, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
