"""Durable tools and agents: journaled, long-running, saga stages, workflow nodes, agent tools.

Holds ``@journaled`` tools (:mod:`.journaling`: outside effects through the
journal), long-running tools on the job table (:mod:`.long_running`),
:class:`~.saga_agent.SagaSequence` and its sweeper (:mod:`.saga_agent`),
Workflow graph nodes (:mod:`.workflow_nodes`), what ``AgentTool`` children
may do inside a durable run (:mod:`.agent_tools`) and
:class:`~.remote_a2a.DurableRemoteA2aAgent`, a remote A2A agent called as an
outside effect (:mod:`.remote_a2a`, needs the ``a2a`` extra: nothing here
imports it).

May import: ``google.adk``, the core, and :mod:`~durable_adk.adk.shapes`,
:mod:`~durable_adk.adk.eventlog`, :mod:`~durable_adk.adk.commits` and
:mod:`~durable_adk.adk.services`. Never the run path above it.

Until 0.1.0 this path was the module now at :mod:`.journaling`; its names
(``journaled``, ``attempt_of``, ...) are still found here, with a
:class:`DeprecationWarning`, through release 0.2.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from durable_adk._moved import moved_note

_OLD_NAMES = frozenset(
    {
        "JOURNALED_MARK",
        "KEY_PARAM",
        "as_async",
        "attempt_in",
        "attempt_of",
        "effect_parameters",
        "format_key",
        "is_journaled",
        "journaled",
        "present_as",
        "template_fields",
    }
)


def __getattr__(name: str) -> Any:
    if name not in _OLD_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        moved_note(f"{__name__}.{name}", f"{__name__}.journaling.{name}"),
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module("durable_adk.adk.tools.journaling"), name)
