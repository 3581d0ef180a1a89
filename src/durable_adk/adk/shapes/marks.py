"""Marks a tool carries itself: what recovery may do with its unanswered calls.

``@idempotent`` on a tool's function (or on the tool, or on a Workflow
node's function or the ``FunctionNode`` itself) says "running this call
again after a crash is harmless" (a read, a lookup, an upsert keyed by the
call's own arguments). The mark travels with the tool, so every worker that
loads the app honours it: no per-worker list of names to keep in step.
``DurableRunner(idempotent_tools=[...])`` still adds names on top, as an
override for tools one cannot decorate.

Journaled tools (:func:`durable_adk.adk.tools.journaling.journaled`) need no mark: the
journal makes their re-drive safe.
"""

from __future__ import annotations

from typing import Any, TypeVar

IDEMPOTENT_MARK = "__durable_adk_idempotent__"
JOURNALED_MARK = "__durable_adk_journaled__"
WITH_CALL_MARK = "__durable_adk_writes_with_call__"

T = TypeVar("T")


def idempotent(tool: T) -> T:
    """Marks a tool (a function, or an ADK tool object) as safe to run again after a crash.

    Returns the tool itself, so it works as a decorator::

        @idempotent
        def get_weather(city: str) -> dict: ...
    """
    # A FunctionTool marks its function, and so does a Workflow FunctionNode.
    target: Any = getattr(tool, "func", None) or getattr(tool, "_func", None) or tool
    try:
        setattr(target, IDEMPOTENT_MARK, True)
    except (AttributeError, TypeError):
        # Objects that take no attributes (a bound method, say): mark the tool.
        setattr(tool, IDEMPOTENT_MARK, True)
    return tool


def is_idempotent(tool: object) -> bool:
    """Whether a tool (or its function) was marked with :func:`idempotent`."""
    return bool(
        getattr(tool, IDEMPOTENT_MARK, False)
        or getattr(getattr(tool, "func", None), IDEMPOTENT_MARK, False)
        or getattr(getattr(tool, "_func", None), IDEMPOTENT_MARK, False)
    )


def is_journaled(tool: object) -> bool:
    """Whether an ADK tool (or function) was made by ``@journaled`` (:mod:`.journaling`)."""
    func = getattr(tool, "func", tool)
    return hasattr(func, JOURNALED_MARK)


def writes_with_its_call(tool: object) -> bool:
    """Whether a tool writes the run's buffered events (its call among them) itself.

    A journaled tool with its intent, a durable long-running tool with its
    job: the barrier before the tool is left to that write (one unit).
    """
    return is_journaled(tool) or bool(getattr(tool, WITH_CALL_MARK, False))
