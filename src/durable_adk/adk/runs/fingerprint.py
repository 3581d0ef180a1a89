"""The definition of an ADK app, and its fingerprint: the same on every worker.

:func:`definition` reads an app's tree through the one walk
(:mod:`durable_adk.adk.shapes.agent_tree`) and returns what a run's log can refer to,
as plain JSON values:

* every agent and graph node: its path, its name and its kind (the class);
* each Workflow's graph: its edges (from, to, route);
* every tool: its name, kind, parameter signature (names, kinds, annotations),
  whether it is long-running and its job key template, and a journaled tool's
  key template;
* each SagaSequence: its stages in order, the steps it has compensators for,
  and the steps marked uncompensatable.

:func:`fingerprint` is the SHA-256 of that definition as canonical JSON (keys
sorted, no spaces), so two processes loading the same code compute the same
value, and each of the changes above moves it. Instructions, descriptions and
models are not part of it: a changed prompt does not change what the log can
refer to. Drift detection compares a run's log with the same definition.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from google.adk.agents import BaseAgent
from google.adk.workflow import Workflow

from durable_adk.adk.shapes import agent_tree
from durable_adk.adk.tools.journaling import JOURNALED_MARK
from durable_adk.adk.tools.long_running import DurableLongRunningTool
from durable_adk.adk.tools.saga_agent import SagaSequence, SagaStage

FINGERPRINT_CHARS = 16
"""Hex characters of the SHA-256 kept as the fingerprint (64 bits: enough to tell versions)."""


def _kind(item: object) -> str:
    return type(item).__name__


def _signature(func: object) -> list[list[str]]:
    """``[[name, kind, annotation], ...]`` of a tool's function, context parameter left out."""
    try:
        signature = inspect.signature(func)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return []
    return [
        [
            name,
            parameter.kind.name,
            ""
            if parameter.annotation is inspect.Parameter.empty
            else inspect.formatannotation(parameter.annotation),
        ]
        for name, parameter in signature.parameters.items()
        if name != "tool_context"
    ]


def _route(route: Any) -> Any:
    if isinstance(route, list | tuple):
        return [_route(r) for r in route]
    return route if isinstance(route, bool | int | str) or route is None else repr(route)


def _agent_entry(found: agent_tree.Found) -> dict[str, Any]:
    item = found.item
    entry: dict[str, Any] = {"path": found.path, "name": agent_tree.tool_name(item)}
    entry["kind"] = _kind(item)
    if isinstance(item, Workflow) and item.graph is not None:
        entry["edges"] = [
            [edge.from_node.name, edge.to_node.name, _route(edge.route)]
            for edge in item.graph.edges
        ]
    if isinstance(item, SagaSequence):
        entry["stages"] = [stage.name for stage in item.stages]
        entry["compensators"] = sorted(item.compensators)
        entry["uncompensatable"] = sorted(item.uncompensatable)
        entry["apology"] = item.apology
    if isinstance(item, SagaStage):
        entry["uncompensatable"] = item.uncompensatable
    return entry


def _tool_entry(found: agent_tree.Found) -> dict[str, Any]:
    item = found.item
    func = getattr(item, "func", item)
    entry: dict[str, Any] = {
        "path": found.path,
        "name": agent_tree.tool_name(item),
        "kind": _kind(item),
        "params": _signature(func) if callable(func) else [],
        "long_running": bool(getattr(item, "is_long_running", False)),
    }
    if isinstance(item, DurableLongRunningTool):
        entry["job_key"] = item.job_key
    key = getattr(func, JOURNALED_MARK, None)
    if key is not None:
        entry["journal_key"] = str(key)
    return entry


def definition(root: object) -> dict[str, Any]:
    """What a run of the app rooted at ``root`` can refer to, as JSON values (see module doc)."""
    found = list(agent_tree.walk(root))
    return {
        "agents": [_agent_entry(f) for f in found if f.kind == "agent"],
        "tools": [_tool_entry(f) for f in found if f.kind == "tool"],
    }


def canonical(value: Mapping[str, Any]) -> str:
    """``value`` as canonical JSON: keys sorted, no spaces, ASCII only."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def fingerprint(root: object) -> str:
    """The fingerprint of the app rooted at ``root``: a stable hash of its definition."""
    digest = hashlib.sha256(canonical(definition(root)).encode("ascii")).hexdigest()
    return digest[:FINGERPRINT_CHARS]


@dataclass(frozen=True, slots=True)
class Known:
    """The names an app's code knows, for drift detection.

    Attributes:
        agents: Names of every agent and graph node.
        tools: Names of every tool.
        long_running: Long-running tool names, with their job key template
            (empty for a plain LongRunningFunctionTool).
        saga_steps: Per saga name, its stage names.
        compensators: Per saga name, the steps it has compensators for.
        journal_keys: Per journaled tool (and journaled Workflow node) name,
            its key template.
    """

    agents: frozenset[str]
    tools: frozenset[str]
    long_running: Mapping[str, str] = field(default_factory=dict)
    saga_steps: Mapping[str, frozenset[str]] = field(default_factory=dict)
    compensators: Mapping[str, frozenset[str]] = field(default_factory=dict)
    journal_keys: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, root: object) -> Known:
        """The names known to the app rooted at ``root`` (the one walk)."""
        agents: set[str] = set()
        tools: set[str] = set()
        long_running: dict[str, str] = {}
        steps: dict[str, frozenset[str]] = {}
        compensators: dict[str, frozenset[str]] = {}
        journal_keys: dict[str, str] = {}
        for found in agent_tree.walk(root):
            name = agent_tree.tool_name(found.item)
            key = getattr(getattr(found.item, "func", found.item), JOURNALED_MARK, None)
            if key is not None:
                journal_keys[name] = str(key)
            if found.kind == "tool":
                tools.add(name)
                if getattr(found.item, "is_long_running", False):
                    long_running[name] = getattr(found.item, "job_key", "")
                continue
            agents.add(name)
            if isinstance(found.item, SagaSequence):
                steps[name] = frozenset(s.name for s in found.item.stages)
                compensators[name] = frozenset(found.item.compensators)
            if isinstance(found.item, BaseAgent) and found.item.name:
                agents.add(found.item.name)
        return cls(
            agents=frozenset(agents),
            tools=frozenset(tools),
            long_running=long_running,
            saga_steps=steps,
            compensators=compensators,
            journal_keys=journal_keys,
        )
