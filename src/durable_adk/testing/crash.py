"""Named crash points for tests: re-exported from :mod:`durable_adk.faults`.

The points live in the library itself (production modules call
:func:`~durable_adk.faults.crash_point`); tests arm them in a child's
environment with :func:`arm`.
"""

from durable_adk.faults import AFTER_ENV, CRASH_ENV, EXIT_CODE, arm, armed_points, crash_point

__all__ = ["AFTER_ENV", "CRASH_ENV", "EXIT_CODE", "arm", "armed_points", "crash_point"]
