"""ADK ``AgentTool`` children inside a durable run: what is guarded, what is refused.

ADK 2.13's ``AgentTool.run_async`` (``google/adk/tools/agent_tool.py``) runs
its child agent through a fresh ``Runner`` on a throw-away
``InMemorySessionService``, with the caller's RunConfig and in the caller's
task. What that means for a durable run, and what this module guarantees:

* **Journaled tools are guarded.** The child's invocation carries the run's
  stamp (``RunConfig.custom_metadata``) and the drive's fence (a context
  variable the task inherits), and the fence carries the store: a
  ``@journaled`` tool in the child uses the parent run's journal, epoch and
  invocation id (:func:`durable_adk.adk.tools.journaling.attempt_in`), so its effect
  happens once across crashes and a worker that lost the run acts no more.
  Where the journal cannot be reached inside a durable drive, the tool
  refuses (``Fenced``) instead of acting unguarded.
* **Re-driven only when safe.** A crash inside the child leaves the parent's
  call to the AgentTool unanswered. The AgentTool counts as safe to re-drive
  (:func:`safe_agent_tools`) when every tool its child can reach is journaled
  or idempotent (or is such an AgentTool itself): the child then runs again
  from the start, its model is asked again (its turns were never stored),
  and its journaled tools answer from the journal. Otherwise the run parks,
  as for any unsafe tool.
* **Refused at construction** (:func:`refuse_unguardable`): shapes whose
  effects or pauses would live only in the throw-away session. A durable
  long-running tool (its job would answer a call in a session that no
  longer exists; ADK says an AgentTool "cannot resume"), any other
  long-running tool, and a :class:`~durable_adk.adk.tools.saga_agent.SagaSequence`
  (its ledger and compensations are keyed by the discarded session) inside
  an AgentTool's child raise :class:`~durable_adk.errors.InvalidArgument`
  naming the tool and the AgentTool.

Only AgentTools that run their child that way are concerned: subclasses with
a ``run_async`` of their own (ADK's single-turn and task-mode agent tools run
the child inline, on the parent's session) are ordinary parts of the tree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from google.adk.tools.agent_tool import AgentTool
from google.adk.tools.long_running_tool import LongRunningFunctionTool

from durable_adk import errors
from durable_adk.adk.shapes import agent_tree
from durable_adk.adk.tools.saga_agent import SagaSequence


def _runs_on_a_throwaway_session(tool: object) -> bool:
    return isinstance(tool, AgentTool) and type(tool).run_async is AgentTool.run_async


def agent_tools(root: object) -> Iterator[agent_tree.Found]:
    """The AgentTools in ``root``'s tree that run their child on a throw-away session."""
    return (found for found in agent_tree.tools(root) if _runs_on_a_throwaway_session(found.item))


def refuse_unguardable(root: object) -> None:
    """Raises if an AgentTool's child holds something a durable run cannot guard there.

    Raises:
        durable_adk.errors.InvalidArgument: A long-running tool or a saga in
            an AgentTool's child (the message names both).
    """
    for holder in agent_tools(root):
        for found in agent_tree.walk(holder.item.agent):
            item = found.item
            if isinstance(item, LongRunningFunctionTool):
                what = f"long-running tool {agent_tree.tool_name(item)!r}"
                why = "its pause could never be answered"
            elif isinstance(item, SagaSequence):
                what = f"saga {item.name!r}"
                why = "its saga ledger and compensations would belong to no session"
            else:
                continue
            raise errors.InvalidArgument(
                f"{what} is inside AgentTool {holder.item.name!r} (at {found.path}): ADK runs an "
                f"AgentTool's agent on a throw-away in-memory session, so {why}; put "
                f"{holder.item.name!r} under sub_agents (e.g. mode='single_turn') instead"
            )


def safe_agent_tools(root: object, is_safe: Callable[[object], bool]) -> frozenset[str]:
    """Names of the AgentTools whose child reaches only tools that are safe to re-drive.

    Args:
        root: The app's root agent.
        is_safe: Whether a (non-AgentTool) tool is safe to run again
            (journaled or idempotent).
    """
    holders = list(agent_tools(root))
    throwaway = {id(found.item) for found in holders}
    return frozenset(
        agent_tree.tool_name(holder.item)
        for holder in holders
        if all(
            id(found.item) in throwaway or is_safe(found.item)
            for found in agent_tree.tools(holder.item.agent)
        )
    )
