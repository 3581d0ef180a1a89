"""The cron evaluator and the catch-up plan: fields, names, steps, the day rule, DST, policies."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durable_adk import errors
from durable_adk.cron import Cron
from durable_adk.schedules import Schedule, plan

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def at(zone: ZoneInfo, *parts: int) -> float:
    return datetime(*parts, tzinfo=zone).timestamp()


def local(instants: list[float], zone: ZoneInfo) -> list[str]:
    return [datetime.fromtimestamp(t, zone).strftime("%a %m-%d %H:%M%z") for t in instants]


def first(cron: Cron, after: float, n: int) -> list[float]:
    return list(itertools.islice(cron.ticks(after), n))


def test_fields_lists_ranges_steps_and_names() -> None:
    cron = Cron("0,30 9-10 * JAN-FEB MON-FRI", "UTC")
    got = local(first(cron, at(ZoneInfo("UTC"), 2027, 1, 1), 5), ZoneInfo("UTC"))
    assert got == [
        "Fri 01-01 09:00+0000",
        "Fri 01-01 09:30+0000",
        "Fri 01-01 10:00+0000",
        "Fri 01-01 10:30+0000",
        "Mon 01-04 09:00+0000",
    ]
    steps = Cron("*/20 10-14/2 * * *")
    assert local(first(steps, at(ZoneInfo("UTC"), 2027, 1, 1), 4), ZoneInfo("UTC"))[:3] == [
        "Fri 01-01 10:00+0000",
        "Fri 01-01 10:20+0000",
        "Fri 01-01 10:40+0000",
    ]
    assert Cron("5/20 * * * *").after(at(ZoneInfo("UTC"), 2027, 1, 1)) == at(
        ZoneInfo("UTC"), 2027, 1, 1, 0, 5
    )


def test_sunday_is_0_and_7_and_shorthands() -> None:
    utc = ZoneInfo("UTC")
    start = at(utc, 2027, 1, 1)  # a Friday
    assert Cron("0 0 * * 0").after(start) == Cron("0 0 * * 7").after(start) == at(utc, 2027, 1, 3)
    assert Cron("@weekly").after(start) == at(utc, 2027, 1, 3)
    assert Cron("@daily").after(start) == at(utc, 2027, 1, 2)
    assert Cron("@hourly").after(start) == at(utc, 2027, 1, 1, 1)
    assert Cron("@monthly").after(start) == at(utc, 2027, 2, 1)
    assert Cron("@yearly").after(start) == at(utc, 2028, 1, 1)


def test_day_of_month_or_day_of_week_when_both_are_restricted() -> None:
    utc = ZoneInfo("UTC")
    either = Cron("0 0 13 * FRI")  # the 13th, and every Friday (Vixie cron)
    got = local(first(either, at(utc, 2027, 1, 1), 4), utc)
    assert got == [
        "Fri 01-08 00:00+0000",
        "Wed 01-13 00:00+0000",
        "Fri 01-15 00:00+0000",
        "Fri 01-22 00:00+0000",
    ]
    only_fridays = Cron("0 0 * * FRI")
    assert Cron("0 0 */1 * FRI").after(at(utc, 2027, 1, 1)) == only_fridays.after(
        at(utc, 2027, 1, 1)
    )


@pytest.mark.parametrize(
    "expression, words",
    [
        ("60 * * * *", "minute: 60 is outside 0-59"),
        ("* 24 * * *", "hour: 24 is outside 0-23"),
        ("* * 0 * *", "day of month: 0 is outside 1-31"),
        ("* * * 13 *", "month: 13 is outside 1-12"),
        ("* * * * 8", "day of week: 8 is outside 0-7"),
        ("* * * FOO *", "month: 'FOO' is not a number or name"),
        ("5-1 * * * *", "runs backwards"),
        ("1,,2 * * * *", "empty item"),
        ("*/x * * * *", "bad step"),
        ("0 0 31 2,4 *", "never fires"),
        ("@sometimes", "5 fields"),
        ("", "5 fields"),
    ],
)
def test_bad_expressions_name_the_field(expression: str, words: str) -> None:
    with pytest.raises(errors.InvalidArgument, match=words):
        Cron(expression)


def test_dst_in_new_york_too() -> None:
    daily = Cron("30 2 * * *", "America/New_York")
    spring = local(first(daily, at(NEW_YORK, 2027, 3, 13), 3), NEW_YORK)
    assert spring == ["Sat 03-13 02:30-0500", "Sun 03-14 03:30-0400", "Mon 03-15 02:30-0400"]
    autumn = local(first(daily, at(NEW_YORK, 2027, 11, 6), 3), NEW_YORK)
    assert autumn == ["Sat 11-06 02:30-0400", "Sun 11-07 02:30-0500", "Mon 11-08 02:30-0500"]
    hourly = Cron("30 * * * *", "America/New_York")
    night = local(first(hourly, at(NEW_YORK, 2027, 11, 7, 0), 4), NEW_YORK)
    # 01:30 exists twice: it fires once, at its first occurrence (EDT).
    assert night == [
        "Sun 11-07 00:30-0400",
        "Sun 11-07 01:30-0400",
        "Sun 11-07 02:30-0500",
        "Sun 11-07 03:30-0500",
    ]


@settings(max_examples=60, deadline=None)
@given(
    minute=st.sampled_from(["*", "*/7", "0", "15,45", "10-20/5"]),
    hour=st.sampled_from(["*", "*/5", "3", "0-6", "22,23"]),
    zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]),
    start=st.integers(min_value=1_700_000_000, max_value=1_900_000_000),
)
def test_ticks_increase_and_match_their_fields(
    minute: str, hour: str, zone: str, start: int
) -> None:
    cron = Cron(f"{minute} {hour} * * *", zone)
    ticks = first(cron, float(start), 30)
    assert all(a < b for a, b in itertools.pairwise(ticks))
    assert ticks[0] > start
    minutes, hours = Cron(f"{minute} {hour} * * *", "UTC")._parsed[:2]  # allowed values
    tz = ZoneInfo(zone)

    def matches(instant: float) -> bool:
        wall = datetime.fromtimestamp(instant, tz)
        return wall.minute in minutes[0] and wall.hour in hours[0]

    for tick in ticks:
        wall = datetime.fromtimestamp(tick, tz).replace(tzinfo=None)
        exists = datetime(*wall.timetuple()[:6], tzinfo=tz).timestamp() == tick
        # A tick is a matching wall time, or the jump over one that does not exist.
        assert matches(tick) or not exists or tick != wall.replace(tzinfo=tz).timestamp()
    # Brute force over real instants (two days at most): every first occurrence of a
    # matching wall time is a tick, and no second occurrence is.
    end = min(ticks[-1], start + 2 * 86400)
    probe = (start // 60 + 1) * 60.0
    while probe <= end:
        wall = datetime.fromtimestamp(probe, tz)
        if matches(probe):
            assert (probe in ticks) == (wall.fold == 0), (wall, zone)
        probe += 60.0


# ----------------------------------------------------------------- the plan


def every_hour(**kw: object) -> Schedule:
    return Schedule(
        name="s",
        message="m",
        user_id="u",
        every=timedelta(hours=1),
        **kw,  # type: ignore[arg-type]
    )


NOW = datetime(2027, 1, 1, 12, 10, tzinfo=UTC).timestamp()
NINE = datetime(2027, 1, 1, 9, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    "catch_up, fired, missed",
    [("none", [], 4), ("latest", [3], 3), ("all", [1, 2, 3], 1)],
)
def test_plan_by_catch_up_policy(catch_up: str, fired: list[int], missed: int) -> None:
    # Ticks at 9, 10, 11, 12 are due at 12:10; all later than a 60 s grace.
    chosen = plan(every_hour(catch_up=catch_up, catch_up_limit=3), NINE, NOW)
    assert chosen.fire == tuple(NINE + 3600 * i for i in fired)
    assert chosen.missed == missed
    assert chosen.next_tick == NINE + 4 * 3600


def test_plan_fires_a_tick_on_time_under_none_and_nothing_not_due() -> None:
    on_time = plan(every_hour(catch_up="none", grace=timedelta(minutes=15)), NINE, NOW)
    assert on_time.fire == (NINE + 3 * 3600,) and on_time.missed == 3
    assert plan(every_hour(), NOW + 60, NOW).fire == ()


def test_plan_with_jitter_waits_for_the_ticks_fire_time() -> None:
    schedule = every_hour(jitter=timedelta(minutes=30))
    tick = NINE + 3 * 3600  # 12:00
    offset = schedule.fire_at(tick) - tick
    assert 0 <= offset < 1800 and schedule.fire_at(tick) == schedule.fire_at(tick)
    before = plan(schedule, tick, tick + offset - 0.001)
    after = plan(schedule, tick, tick + offset)
    assert before.fire == () and before.next_tick == tick
    assert after.fire == (tick,)
