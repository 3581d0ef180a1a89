"""Where sync tools run: ADK's tool thread pool (the default) or the event loop (issue 45).

``DurableRunner(sync_tools="loop")`` (``serve --sync-tools loop``) leaves ADK's
own default: a synchronous tool runs on the event loop, with no thread hop. A
tool that blocks there stalls every drive of the worker until it returns; the
lease watchdog (a thread of its own) keeps their leases meanwhile, so no run
loses its lease or runs twice (invariant 13). On the pool, the drives beside
go on while it blocks. The tests observe which, without timing anything: a
drive beside either ends while the tool is blocked or it does not.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, ToolThreadPoolConfig
from google.adk.models.llm_request import LlmRequest

from durable_adk import DurableRunner, RunStatus, errors
from durable_adk.service.settings import ServiceSettings
from durable_adk.store import Store
from durable_adk.testing import Call, Say, ScriptedModel

APP = "sync_tools"
LEASE = 4.0  # renewals every third of it: room for a slow one on a busy machine


def by_message(request: LlmRequest) -> Call:
    asked = " ".join(
        p.text or "" for c in request.contents if c.role == "user" for p in c.parts or ()
    )
    return Call("slow_report" if "slow" in asked else "quick", {"n": 1})


class Block:
    """A sync tool that blocks its thread past the lease, and when each run beside ran."""

    def __init__(self) -> None:
        self.entered = self.left = 0.0
        self.spans: list[tuple[float, float]] = []  # each run beside: (started, ended)

    def slow_report(self, n: int) -> dict[str, int]:
        """Blocks the calling thread for twice the lease (a legacy sync client)."""
        self.entered = time.monotonic()
        time.sleep(2 * LEASE)
        self.left = time.monotonic()
        return {"n": n}


def quick(n: int) -> dict[str, int]:
    """Answers at once."""
    return {"n": n}


async def drive_beside_a_blocked_tool(store: Store, sync_tools: str) -> tuple[Block, DurableRunner]:
    block = Block()
    agent = LlmAgent(
        name="clerk",
        model=ScriptedModel([by_message, Say("ok")]),
        tools=[block.slow_report, quick],
    )
    runner = DurableRunner(
        app=agent,
        app_name=APP,
        store=store,
        lease=LEASE,
        sync_tools=sync_tools,  # type: ignore[arg-type]
    )

    async def one(session: str, text: str = "go") -> None:
        async for _ in runner.run(user_id="u", session_id=session, message=text):
            pass

    async def timed(session: str) -> None:
        started = time.monotonic()
        await one(session)
        block.spans.append((started, time.monotonic()))

    async def beside() -> None:
        wave = 0
        while not block.left:  # runs in flight all along, until the slow tool returned
            await asyncio.gather(*(timed(f"o{wave}-{i}") for i in range(3)))
            wave += 1

    await asyncio.gather(one("blocked", "slow please"), beside())
    runs = await runner.ledger.list_runs(limit=1000)
    assert {r.status for r in runs} == {RunStatus.DONE}
    assert all(r.epoch == 1 and r.attempts <= 1 for r in runs), [
        (r.session_id, r.epoch, r.attempts) for r in runs if r.epoch != 1
    ]
    return block, runner


async def test_on_the_pool_the_drives_beside_a_blocked_tool_go_on(store: Store) -> None:
    block, runner = await drive_beside_a_blocked_tool(store, "pool")
    during = [s for s in block.spans if block.entered < s[1] < block.left]
    assert len(during) >= 3, (block.entered, block.left, block.spans[:5])
    assert runner.run_config.tool_thread_pool_config is not None


async def test_on_the_loop_a_blocked_tool_stalls_the_worker_but_no_lease_is_lost(
    store: Store,
) -> None:
    block, runner = await drive_beside_a_blocked_tool(store, "loop")
    in_flight = [s for s in block.spans if s[0] < block.entered < s[1]]
    assert in_flight, (block.entered, block.left, block.spans[:5])
    # Each run under way when the tool began ended only after it returned.
    assert all(ended >= block.left for _, ended in in_flight), (block.left, in_flight)
    assert runner.run_config.tool_thread_pool_config is None


async def test_an_apps_own_pool_setting_is_kept_either_way(store: Store) -> None:
    agent = LlmAgent(name="clerk", model=ScriptedModel([Say("ok")]), tools=[quick])
    own = RunConfig(tool_thread_pool_config=ToolThreadPoolConfig(max_workers=3))
    for where in ("pool", "loop"):
        runner = DurableRunner(app=agent, store=store, run_config=own, sync_tools=where)  # type: ignore[arg-type]
        assert runner.run_config.tool_thread_pool_config == own.tool_thread_pool_config


@pytest.mark.parametrize("bad", ["threads", "", None, 1])
async def test_a_bad_place_is_refused(store: Store, bad: object) -> None:
    agent = LlmAgent(name="clerk", model=ScriptedModel([Say("ok")]), tools=[quick])
    with pytest.raises(errors.InvalidArgument, match="sync_tools must be 'pool' or 'loop'"):
        DurableRunner(app=agent, store=store, sync_tools=bad)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgument, match="sync_tools must be 'pool' or 'loop'"):
        ServiceSettings(db="sqlite:///x.db", token="t" * 12, sync_tools=bad)  # type: ignore[arg-type]
