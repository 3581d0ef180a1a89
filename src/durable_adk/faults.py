"""Fault points: where a test kills the process for real (armed only by the test switch).

``crash_point("name")`` does nothing unless the environment variable
``DURABLE_ADK_CRASH_AT`` names that point (a comma-separated list is allowed);
then it calls ``os._exit(137)``, as ``kill -9`` would end the process: no
``finally`` blocks, no ``atexit`` hooks, no flush of anything not yet durable.
``DURABLE_ADK_CRASH_AFTER=N`` lets the point pass N times before it fires
(default 0: the first time). Tests arm a point in a child process's environment
and assert on what a fresh process finds afterwards.
"""

from __future__ import annotations

import os
import sys
from collections import Counter

CRASH_ENV = "DURABLE_ADK_CRASH_AT"
AFTER_ENV = "DURABLE_ADK_CRASH_AFTER"
EXIT_CODE = 137

_passes: Counter[str] = Counter()


def armed_points() -> frozenset[str]:
    """The crash points armed for this process."""
    raw = os.environ.get(CRASH_ENV, "")
    return frozenset(p.strip() for p in raw.split(",") if p.strip())


def crash_point(name: str) -> None:
    """Ends the process with exit code 137 if this point is armed; else nothing.

    Args:
        name: The point's name, e.g. ``"journal.after_act"``.
    """
    if name not in armed_points():
        return
    _passes[name] += 1
    if _passes[name] <= int(os.environ.get(AFTER_ENV, "0")):
        return
    sys.stderr.write(f"durable-adk: crash point {name!r} fired, exiting 137\n")
    sys.stderr.flush()
    os._exit(EXIT_CODE)


def arm(env: dict[str, str], name: str, *, after: int = 0) -> dict[str, str]:
    """Returns a copy of ``env`` with the crash point ``name`` armed."""
    armed = dict(env)
    armed[CRASH_ENV] = name
    armed[AFTER_ENV] = str(after)
    return armed
