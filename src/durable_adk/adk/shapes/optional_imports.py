"""Optional ADK modules whose dependency is missing fail once, not on every run.

google-adk 2.13 imports ``google.adk.agents.remote_a2a_agent`` inside
``build_node`` (``workflow/utils/_workflow_graph_utils.py``), which runs at
every agent step, and treats an ``ImportError`` as "A2A not installed". Python
caches successful imports only: without the optional ``a2a`` package the module
is searched for, read and executed again each time: two failed imports per run
of a one-agent app, about 1.3 ms each here, while the whole scripted run takes
5-7 ms in memory.

When ``a2a`` cannot be found at all, :func:`remember_missing` records the
module as missing in ``sys.modules`` (the standard way to mark an import that
must fail): later imports raise ``ImportError`` at once, which ADK handles
exactly as before. Nothing changes when ``a2a`` is installed.
"""

from __future__ import annotations

import importlib.util
import sys

_NEEDS_A2A = ("google.adk.agents.remote_a2a_agent",)


def remember_missing() -> list[str]:
    """Marks the ADK modules that need a missing ``a2a`` as missing; returns their names."""
    if importlib.util.find_spec("a2a") is not None:
        return []
    marked = []
    for name in _NEEDS_A2A:
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]
            marked.append(name)
    return marked
