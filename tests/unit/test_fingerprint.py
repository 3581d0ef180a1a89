"""The app fingerprint: the same in every process, moved by each change of the definition."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent, SequentialAgent
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.adk.workflow import Workflow

from durable_adk.adk.runs.fingerprint import Known, definition, fingerprint
from durable_adk.adk.tools.journaling import journaled
from durable_adk.adk.tools.long_running import long_running_tool
from durable_adk.adk.tools.saga_agent import SagaSequence, SagaStage
from durable_adk.testing import ScriptedModel

REPO = Path(__file__).resolve().parents[2]

# The order saga example, in a fresh interpreter with its own hash seed: set
# and dict orders that depend on hashing must not reach the fingerprint.
_CHILD = (
    "import sys; sys.path.insert(0, sys.argv[1]);"
    "from examples.order_saga.app import build_saga;"
    "from examples.approvals.app import build_workflow;"
    "from durable_adk.adk.runs.fingerprint import fingerprint;"
    "u = 'http://127.0.0.1:1';"
    "urls = {k: u for k in ('inventory', 'payments', 'carrier', 'notifications')};"
    "print(fingerprint(build_saga(urls)), fingerprint(build_workflow(u, u)))"
)


def _in_child(seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(REPO)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.strip()


def test_two_processes_compute_the_same_fingerprint() -> None:
    one, two = _in_child("1"), _in_child("2")
    assert one == two
    saga, flow = one.split()
    assert len(saga) == 16 and len(flow) == 16 and saga != flow


# ------------------------------------------------------------- one app, varied


def send(order_id: str, amount: int, idempotency_key: str) -> dict[str, Any]:
    return {"order_id": order_id, "amount": amount}


def send_renamed_param(order: str, amount: int, idempotency_key: str) -> dict[str, Any]:
    return {"order": order, "amount": amount}


def start_report(quarter: str) -> dict[str, Any]:
    return {"quarter": quarter}


def act(state: dict[str, Any], key: str) -> dict[str, Any]:
    return {"id": key}


def undo(record: dict[str, Any], key: str) -> None:
    return None


def step_a(x: str) -> str:
    return x


def step_b(x: str) -> str:
    return x


def step_c(x: str) -> str:
    return x


def build(change: str = "") -> tuple[Any, Workflow]:
    """A tree with every kind of definition the fingerprint covers; ``change`` alters one."""
    model = ScriptedModel([])
    send_fn = send_renamed_param if change == "tool_params" else send
    key = "send:{order_id}:v2" if change == "journal_key" else "send:{order_id}"
    if change == "tool_params":
        key = "send:{order}"
    tool = journaled(key=key, name="send_mail" if change == "tool_name" else None)(send_fn)
    report_name = "start_sales" if change == "long_running_name" else "start_report"
    report = long_running_tool(
        start_report,
        job_key="report:{quarter}:x" if change == "job_key" else "report:{quarter}",
        deadline=60,
        name=report_name,
    )
    tools: list[Any] = [tool, report]
    if change == "plain_long_running":
        tools.append(LongRunningFunctionTool(func=step_a))
    clerk = LlmAgent(
        name="clerk_v2" if change == "agent_name" else "clerk",
        model=model,
        instruction="changed words" if change == "instruction" else "help",
        tools=tools,
    )
    stages = [SagaStage(name="reserve", action=act), SagaStage(name="charge", action=act)]
    if change == "saga_stage":
        stages.insert(1, SagaStage(name="verify", action=act, uncompensatable=True))
        stages = [stages[0], stages[2], stages[1]]
    compensators = {"reserve": undo, "charge": undo}
    if change == "compensator":
        stages.append(SagaStage(name="ship", action=act))
        compensators["ship"] = undo
    saga = SagaSequence("order", stages, compensators)
    edges = [("START", step_a, step_b)]
    if change == "workflow_edge":
        edges = [("START", step_a, step_c, step_b)]
    flow = Workflow(name="flow", edges=edges)
    kind = SequentialAgent
    if change == "agent_kind":
        from google.adk.agents import ParallelAgent

        kind = ParallelAgent
    return kind(name="root", sub_agents=[clerk, saga]), flow


def prints(change: str = "") -> tuple[str, str]:
    """The fingerprints of the agent tree and of the Workflow of :func:`build`."""
    root, flow = build(change)
    return fingerprint(root), fingerprint(flow)


CHANGES = [
    "agent_name",
    "agent_kind",
    "workflow_edge",
    "tool_name",
    "tool_params",
    "long_running_name",
    "job_key",
    "plain_long_running",
    "saga_stage",
    "compensator",
    "journal_key",
]


def test_the_same_definition_gives_the_same_fingerprint() -> None:
    assert prints() == prints()
    assert definition(build()[0]) == definition(build()[0])


def test_an_instruction_is_not_part_of_it() -> None:
    assert prints("instruction") == prints()


@pytest.mark.parametrize("change", CHANGES)
def test_each_change_of_the_definition_moves_it(change: str) -> None:
    assert prints(change) != prints(), change


def test_known_names_are_read_by_the_one_walk() -> None:
    root, flow = build()
    known = Known.of(root)
    assert {"root", "clerk", "order", "reserve", "charge"} <= known.agents
    assert {"flow", "step_a", "step_b"} <= Known.of(flow).agents
    assert {"send", "start_report"} <= known.tools
    assert known.long_running == {"start_report": "report:{quarter}"}
    assert known.saga_steps == {"order": frozenset({"reserve", "charge"})}
    assert known.compensators == {"order": frozenset({"reserve", "charge"})}
