"""ParallelAgent branches that could pause side by side: refused when the app is loaded.

ADK 2.13's ParallelAgent resumes a paused invocation by running again every
branch that has not ended. A long-running tool that answers its call at once
(a durable job's ``pending``, a sleep's ``sleeping``, any
``LongRunningFunctionTool`` returning a value) leaves its own answer in the
branch, and ADK's resume rule (``flows/llm_flows/core/_resume.py``) counts
that answer as the call's: when branch A's real answer resumes the
invocation, branch B's model is asked again, B ends and the ParallelAgent
ends with it. B's own answer (a wake-up, a job's result) then finds an
invocation that is over: it is never acted on. ADK's own Runner drops it the
same way.

So a ParallelAgent two or more of whose branches can reach such a tool is
refused before any run: :func:`refuse_parallel_pauses` raises
:class:`~durable_adk.errors.InvalidArgument` naming the ParallelAgent, the
branches and their tools (docs/time.md, "Sleeping in a ParallelAgent"). One
pausing branch beside branches that never pause is accepted: the ended
branches are not run again, and the pausing branch resumes alone.
"""

from __future__ import annotations

from google.adk.agents import ParallelAgent
from google.adk.tools.long_running_tool import LongRunningFunctionTool

from durable_adk import errors
from durable_adk.adk.shapes import agent_tree


def pausing_tools(branch: object) -> list[str]:
    """Names of the long-running tools anywhere under ``branch`` (the one tree walk)."""
    return [
        agent_tree.tool_name(found.item)
        for found in agent_tree.tools(branch)
        if isinstance(found.item, LongRunningFunctionTool)
    ]


def refuse_parallel_pauses(root: object) -> None:
    """Raises if a ParallelAgent has two or more branches that can pause on a long-running call.

    Raises:
        durable_adk.errors.InvalidArgument: The message names the
            ParallelAgent, its pausing branches and their tools.
    """
    for found in agent_tree.agents(root):
        parallel = found.item
        if not isinstance(parallel, ParallelAgent):
            continue
        pausing = {
            branch.name: tools
            for branch in parallel.sub_agents
            if (tools := sorted(set(pausing_tools(branch))))
        }
        if len(pausing) < 2:
            continue
        listed = "; ".join(f"{name!r} ({', '.join(tools)})" for name, tools in pausing.items())
        raise errors.InvalidArgument(
            f"ParallelAgent {parallel.name!r} (at {found.path}) has {len(pausing)} branches that "
            f"can pause on a long-running call: {listed}. When one branch's answer resumes the "
            "invocation, ADK runs the other branches again and ends them, so a second branch's "
            "answer (a wake-up, a job's result) would never be acted on. Keep long-running tools "
            "(durable_sleep, job-backed tools) in at most one branch of a ParallelAgent, or run "
            "the pausing branches one after the other in a SequentialAgent (docs/time.md)"
        )
