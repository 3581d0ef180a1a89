"""The one agent-tree walk: sub-agents, Workflow graph nodes, AgentTool children, toolsets."""

from __future__ import annotations

from typing import Any

import pytest
from google.adk.agents import LlmAgent, SequentialAgent
from google.adk.tools.agent_tool import AgentTool
from google.adk.tools.base_toolset import BaseToolset
from google.adk.tools.function_tool import FunctionTool
from google.adk.workflow import Workflow

from durable_adk.adk.shapes import agent_tree
from durable_adk.testing import Say, ScriptedModel

# SequentialAgent is deprecated in ADK 2.x, but apps still build with it.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def send_invoice(invoice_id: str) -> str:
    """Sends an invoice."""
    return invoice_id


def check_stock(sku: str) -> int:
    """Counts stock."""
    return 1


def ship(order_id: str) -> str:
    """Ships an order."""
    return order_id


def audit(note: str) -> str:
    """Writes an audit note."""
    return note


async def tally(node_input: Any = None) -> str:
    return "tallied"


class StaticToolset(BaseToolset):
    """A toolset whose tools are known before a run."""

    def __init__(self, tools: list[FunctionTool]) -> None:
        super().__init__()
        self.tools = tools

    async def get_tools(self, readonly_context: Any = None) -> list[Any]:
        return list(self.tools)


def model() -> ScriptedModel:
    return ScriptedModel([Say("ok")])


def names(root: object) -> set[str]:
    return {agent_tree.tool_name(f.item) for f in agent_tree.tools(root)}


def test_sub_agents_and_their_tools() -> None:
    billing = LlmAgent(name="billing", model=model(), tools=[send_invoice])
    root = SequentialAgent(name="root", sub_agents=[billing])
    assert names(root) == {"send_invoice"}
    assert [f.path for f in agent_tree.agents(root)] == ["root", "root/billing"]


def test_agent_tool_children_are_followed() -> None:
    child = LlmAgent(name="warehouse", model=model(), tools=[check_stock])
    root = LlmAgent(name="front", model=model(), tools=[AgentTool(agent=child)])
    found = {agent_tree.tool_name(f.item): f for f in agent_tree.tools(root)}
    assert set(found) == {"warehouse", "check_stock"}
    assert found["check_stock"].owner is child
    assert found["check_stock"].path == "front/warehouse/warehouse/check_stock"


def test_workflow_graph_nodes_are_followed() -> None:
    shipper = LlmAgent(name="shipper", model=model(), tools=[ship])
    flow = Workflow(name="flow", edges=[("START", shipper), (shipper, tally)])
    agent_names = {agent_tree.tool_name(f.item) for f in agent_tree.agents(flow)}
    assert {"flow", "shipper", "tally"} <= agent_names
    assert "ship" in names(flow)


def test_static_toolsets_are_followed() -> None:
    toolset = StaticToolset([FunctionTool(audit)])
    root = LlmAgent(name="root", model=model(), tools=[toolset])
    assert "audit" in names(root)


def test_shared_and_repeated_items_are_visited_once() -> None:
    shared = FunctionTool(audit)
    a = LlmAgent(name="a", model=model(), tools=[shared])
    b = LlmAgent(name="b", model=model(), tools=[shared])
    root = SequentialAgent(name="root", sub_agents=[a, b])
    assert [agent_tree.tool_name(f.item) for f in agent_tree.tools(root)] == ["audit"]


def test_marked_and_journaled_tools_anywhere_are_safe_to_re_drive(tmp_path: Any) -> None:
    """The runner's safe-tool set comes from the one walk and the marks tools carry."""
    import asyncio

    from durable_adk import DurableRunner, idempotent, journaled, open_store

    @idempotent
    def read_weather(city: str) -> str:
        """Reads the weather."""
        return "sunny"

    @journaled(key="mail:{to}")
    def send_mail(to: str, idempotency_key: str) -> str:
        """Sends a mail."""
        return to

    child = LlmAgent(name="helper", model=model(), tools=[send_mail])
    node = LlmAgent(name="node", model=model(), tools=[read_weather, AgentTool(agent=child)])
    flow = Workflow(name="flow", edges=[("START", node)])

    async def safe() -> frozenset[str]:
        async with open_store(f"sqlite:///{tmp_path / 'x.db'}") as store:
            return DurableRunner(app=flow, store=store, app_name="app").idempotent_tools

    found = asyncio.run(safe())
    assert {"read_weather", "send_mail"} <= found
    assert "check_stock" not in found
