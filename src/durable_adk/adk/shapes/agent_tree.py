"""One walk over an ADK app's tree: every agent, graph node and tool, once each.

Every feature that looks for tools (journaled, idempotent, long-running, saga
stages, the classifier's facts) asks this module instead of walking the tree
itself, so a shape that one walk follows and another forgets cannot exist.

What the walk follows, on google-adk 2.13:

* ``sub_agents`` of every agent (LlmAgent, Sequential/Parallel/Loop agents,
  custom agents, our saga agents);
* the static children ADK itself enumerates (``BaseNode._iter_static_children``:
  a Workflow's graph nodes, an LlmAgent's node tools, a parallel worker's inner
  node) - a private ADK name, listed in docs/adk-notes.md and checked by
  docs/adk-notes/verify_adk_facts.py;
* ``tools`` of every agent, and through them the child agent of an
  ``AgentTool`` (``.agent``), the node of a node tool (``.node``), the tool of a
  Workflow tool node (``.tool``);
* toolsets whose tools are known without a context (a ``tools`` list on the
  toolset). A toolset that only lists its tools in ``get_tools(ctx)`` (an MCP
  server, say) cannot be seen before a run; its tools are not journaled by us
  and are treated as unsafe to re-drive, which is the safe default.

Nodes are deduplicated by identity, so a graph with a cycle or a node shared by
two paths is visited once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Found:
    """One thing the walk reached.

    Attributes:
        item: The agent, node, tool or toolset.
        kind: ``"agent"`` (an agent or graph node) or ``"tool"``.
        owner: The agent or node whose ``tools`` list held a tool (None for
            agents and for the root).
        path: Names from the root down to the item, joined by ``/``.
    """

    item: Any
    kind: str
    owner: Any
    path: str


def _name(item: object) -> str:
    return str(
        getattr(item, "name", None) or getattr(item, "__name__", None) or type(item).__name__
    )


def _static_children(node: object) -> list[Any]:
    """ADK's own list of a node's static children, if it has one."""
    children = getattr(node, "_iter_static_children", None)
    if children is None:
        return []
    try:
        return list(children())
    except Exception:  # a custom node whose enumeration needs a run context
        return []


def walk(root: object) -> Iterator[Found]:
    """Everything reachable from ``root``: agents and nodes first-seen order, then their tools."""
    seen: set[int] = set()
    pending: list[tuple[Any, Any, str]] = [(root, None, _name(root))]
    while pending:
        item, owner, path = pending.pop(0)
        if id(item) in seen:
            continue
        seen.add(id(item))
        is_tool = owner is not None
        yield Found(item=item, kind="tool" if is_tool else "agent", owner=owner, path=path)
        inner: list[tuple[Any, Any, str]] = []
        if is_tool:
            # Through a tool into the agents or nodes it runs.
            for attribute in ("agent", "node"):
                child = getattr(item, attribute, None)
                if child is not None and not isinstance(child, str | int | float | bool):
                    inner.append((child, None, f"{path}/{_name(child)}"))
            for tool in getattr(item, "tools", None) or ():  # a toolset's static tools
                inner.append((tool, owner, f"{path}/{_name(tool)}"))
        else:
            for child in list(getattr(item, "sub_agents", None) or ()) + _static_children(item):
                inner.append((child, None, f"{path}/{_name(child)}"))
            wrapped = getattr(item, "agent", None)  # an agent wrapped as a node
            if wrapped is not None and hasattr(wrapped, "name"):
                inner.append((wrapped, None, f"{path}/{_name(wrapped)}"))
            tool_of_node = getattr(item, "tool", None)  # a Workflow tool node
            if tool_of_node is not None and hasattr(tool_of_node, "name"):
                inner.append((tool_of_node, item, f"{path}/{_name(tool_of_node)}"))
            for tool in getattr(item, "tools", None) or ():
                inner.append((tool, item, f"{path}/{_name(tool)}"))
        pending.extend(inner)


def tools(root: object) -> list[Found]:
    """Every tool reachable from ``root`` (functions given as tools included)."""
    return [found for found in walk(root) if found.kind == "tool"]


def agents(root: object) -> list[Found]:
    """Every agent and graph node reachable from ``root``, the root first."""
    return [found for found in walk(root) if found.kind == "agent"]


def tool_name(tool: object) -> str:
    """The name the model calls a tool by (a plain function's is its ``__name__``)."""
    return _name(tool)
