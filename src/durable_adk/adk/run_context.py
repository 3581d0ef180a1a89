"""Which durable run the code now executing belongs to.

ADK calls some services without telling them the invocation they serve: a
tool's ``save_artifact`` reaches the artifact service with the app, user,
session and file name only. To fence such writes by the run's epoch, the
runner sets this context variable while it drives a run; asyncio copies it into
every task ADK starts for the run (parallel tool calls, sub-agents), and a task
another run starts has its own. Outside a durable run it is None and the
services write unfenced.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RunStamp:
    """The durable run being driven.

    Attributes:
        run_id: The run.
        epoch: Its fencing epoch held by this worker.
        invocation_id: The ADK invocation it drives.
    """

    run_id: str
    epoch: int
    invocation_id: str


_current: contextvars.ContextVar[RunStamp | None] = contextvars.ContextVar(
    "durable_adk_run", default=None
)


def current_run() -> RunStamp | None:
    """The run the calling code belongs to, or None outside a durable run."""
    return _current.get()


@contextlib.contextmanager
def driving(stamp: RunStamp) -> Iterator[RunStamp]:
    """Marks the code inside the block (and the tasks it starts) as part of ``stamp``'s run."""
    token = _current.set(stamp)
    try:
        yield stamp
    finally:
        _current.reset(token)
