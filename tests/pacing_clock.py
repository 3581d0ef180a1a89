"""A clock the purge's pacing tests move by hand: ``sleep`` records each rest and moves it.

The pacer takes its clock and its sleep as arguments, so its tests drive it
without waiting (tests/unit/test_purge_pacing*.py).
"""

from __future__ import annotations


class Clock:
    """Seconds that pass only when the code under test sleeps (or the test moves ``now``)."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
