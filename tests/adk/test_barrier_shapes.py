"""Barriers for every shape, plugins behind the barrier, and a blocked tool that loses no lease.

Both backends. Each check looks at the store from a cold session service (as
a fresh process would) at the moment that matters.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from google.adk.agents import LlmAgent, ParallelAgent
from google.adk.agents.run_config import RunConfig, ToolThreadPoolConfig
from google.adk.models.llm_request import LlmRequest
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext

from durable_adk import DurableRunner, RunStatus
from durable_adk.adk.commits.drive import BarrierPlugin
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.store import Store, open_store
from durable_adk.tables.ledger import RunLedger
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.scripted_model import Turn

APP = "shapes"


async def stored_ids(store: Store, session_id: str) -> set[str]:
    session = await DurableSessionService(store).get_session(
        app_name=APP, user_id="u", session_id=session_id
    )
    return {e.id for e in session.events} if session else set()


def branch(name: str, tool: Any) -> LlmAgent:
    return LlmAgent(
        name=name,
        model=ScriptedModel({name: [Call(tool.__name__, {"n": 1}), Say(f"{name} done")]}),
        tools=[tool],
    )


async def test_parallel_branches_hand_the_caller_only_stored_events(store: Store) -> None:
    release = asyncio.Event()

    async def slow(n: int) -> dict[str, int]:
        """Waits until the fast branch has run ahead."""
        await asyncio.wait_for(release.wait(), 30)
        return {"n": n}

    async def fast(n: int) -> dict[str, int]:
        """Answers at once."""
        return {"n": n}

    root = ParallelAgent(name="fanout", sub_agents=[branch("a", slow), branch("b", fast)])
    runner = DurableRunner(app=root, app_name=APP, store=store)
    handed = 0
    async for event in runner.run(user_id="u", session_id="p", message="go"):
        handed += 1
        ids = await stored_ids(store, "p")
        assert event.id in ids, f"event {handed} ({event.author}) handed over before it was stored"
        if event.author == "b" and event.get_function_responses():
            release.set()  # the slow branch goes on while b's events are being handed over
    assert handed >= 6
    (run,) = await runner.ledger.list_runs()
    assert run.status is RunStatus.DONE


class AuditPlugin(BasePlugin):
    """An app's own plugin: audits each tool call (reads the store), may answer it itself."""

    def __init__(self, store: Store, *, answer: bool) -> None:
        super().__init__(name="audit")
        self.store = store
        self.answer = answer
        self.saw_call_stored: list[bool] = []

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        ids = await stored_ids(self.store, "q")
        session = tool_context.session
        calls = [
            e.id
            for e in session.events
            if any(c.id == tool_context.function_call_id for c in e.get_function_calls())
        ]
        self.saw_call_stored.append(bool(calls) and calls[0] in ids)
        return {"answered_by": "plugin"} if self.answer else None


async def test_the_barrier_runs_before_the_apps_plugins(store: Store) -> None:
    for answer in (False, True):
        plugin = AuditPlugin(store, answer=answer)

        def lookup(n: int) -> dict[str, int]:
            """Looks n up."""
            return {"n": n}

        agent = LlmAgent(
            name="clerk",
            model=ScriptedModel([Call("lookup", {"n": 1}), Say("ok")] * 2),
            tools=[lookup],
        )
        from google.adk.apps import App

        app = App(name=APP, root_agent=agent, plugins=[plugin])
        runner = DurableRunner(app=app, store=store)
        names = [p.name for p in runner.plugin_manager.plugins]
        assert names[0] == BarrierPlugin().name and "audit" in names
        async for _ in runner.run(user_id="u", session_id="q", message=f"go {answer}"):
            pass
        assert plugin.saw_call_stored == [True], (answer, plugin.saw_call_stored)


def by_message(request: LlmRequest) -> Turn:
    """Calls the slow tool for the session that asked "slow", the quick one otherwise."""
    asked = "".join(
        p.text or "" for c in request.contents if c.role == "user" for p in c.parts or ()
    )
    return Call("slow_report" if "slow" in asked else "quick", {"n": 1})


async def test_a_sync_tool_blocking_past_the_lease_loses_no_lease(store: Store) -> None:
    lease = 3.0  # as tests/adk/test_sync_tools.py: the tool blocks 6 s, two leases

    def slow_report(n: int) -> dict[str, int]:
        """Blocks the calling thread for twice the lease (a legacy sync client)."""
        time.sleep(2 * lease)
        return {"n": n}

    def quick(n: int) -> dict[str, int]:
        """Answers at once."""
        return {"n": n}

    agent = LlmAgent(
        name="clerk",
        model=ScriptedModel([by_message, Say("ok")]),
        tools=[slow_report, quick],
    )
    runner = DurableRunner(app=agent, app_name=APP, store=store, lease=lease)

    async def one(session: str, text: str = "go") -> None:
        async for _ in runner.run(user_id="u", session_id=session, message=text):
            pass

    async def beside() -> None:
        for wave in range(5):  # 100 runs on the same worker over the whole blocked time
            await asyncio.gather(*(one(f"o{wave}-{i}") for i in range(20)))
            await asyncio.sleep(lease / 3)

    await asyncio.gather(one("blocked", "slow please"), beside())
    runs = await runner.ledger.list_runs(limit=1000)
    assert len(runs) == 101
    assert {r.status for r in runs} == {RunStatus.DONE}
    assert all(r.epoch == 1 and r.attempts <= 1 for r in runs), [
        (r.session_id, r.epoch, r.attempts) for r in runs if r.epoch != 1
    ]
    # An app's own pool setting is kept; without one, sync tools go to ADK's pool.
    own = RunConfig(max_llm_calls=7, tool_thread_pool_config=ToolThreadPoolConfig(max_workers=3))
    kept = DurableRunner(app=agent, app_name=APP, store=store, run_config=own)
    assert kept.run_config.tool_thread_pool_config == own.tool_thread_pool_config
    assert runner.run_config.tool_thread_pool_config is not None


async def test_a_blocked_event_loop_costs_no_lease(store: Store) -> None:
    """A sync callback blocks the loop itself for twice the lease: the watchdog renews."""
    lease = 3.0
    blocked_once: list[str] = []
    waiting, stalled = asyncio.Event(), asyncio.Event()

    def stall(callback_context: Any, llm_request: LlmRequest) -> None:
        if callback_context.session.id == "stalls" and not blocked_once:
            blocked_once.append("x")
            stalled.set()  # seen by the run beside once the loop runs again
            time.sleep(2 * lease)  # on the event loop: no await, no heartbeat task
        return None

    async def wait_here(n: int) -> dict[str, int]:
        """Holds its run (and its lease) across the stall."""
        waiting.set()
        await asyncio.wait_for(stalled.wait(), 30)
        return {"n": n}

    agent = LlmAgent(
        name="clerk",
        model=ScriptedModel([Call("wait_here", {"n": 1}), Say("ok")]),
        tools=[wait_here],
        before_model_callback=stall,
    )
    runner = DurableRunner(app=agent, app_name=APP, store=store, lease=lease)

    async def one(session: str) -> None:
        async for _ in runner.run(user_id="u", session_id=session, message="go"):
            pass

    beside = asyncio.create_task(one("beside"))
    await asyncio.wait_for(waiting.wait(), 30)
    await one("stalls")
    await beside
    runs = await runner.ledger.list_runs()
    assert {r.session_id: (r.status, r.epoch) for r in runs} == {
        "beside": (RunStatus.DONE, 1),
        "stalls": (RunStatus.DONE, 1),
    }
    assert runner.keeper.watchdog.renewals >= 1  # the loop's own heartbeat could not have
    await runner.aclose()


async def test_a_claim_answered_while_the_loop_is_blocked_costs_no_lease(
    store: Store, store_url: str
) -> None:
    """The loop blocks while a claim's answer waits for it, and another worker sweeps.

    The claim committed, so the run's lease runs from then; its answer is read
    only after the loop comes back, two leases later. Meanwhile a second
    worker (a thread of its own, with its own store) tries to claim every
    expired run: the watchdog must have kept this one's lease too, so the
    run is not taken over and ends at its first epoch.
    """
    lease = 3.0
    real = store.fetch_sent
    taken: list[Any] = []

    def sweep_elsewhere() -> None:
        async def sweep() -> None:
            async with open_store(store_url) as other:
                taken.extend(await RunLedger(other, lease_seconds=lease).claim_expired("w2"))

        asyncio.run(sweep())

    def block_the_loop() -> None:
        time.sleep(1.5 * lease)  # the claim's answer waits, unread
        other = threading.Thread(target=sweep_elsewhere)
        other.start()
        other.join()
        taken.append(None)  # swept once
        time.sleep(0.5 * lease)

    async def answered_late(query: str, params: Any = None) -> Any:
        rows, sent = await real(query, params)
        if query == "run_start" and not taken and params["session_id"] == "late":
            block_the_loop()
        return rows, sent

    store.fetch_sent = answered_late  # type: ignore[method-assign]
    agent = LlmAgent(name="clerk", model=ScriptedModel([Say("ok")]), tools=[])
    runner = DurableRunner(app=agent, app_name=APP, store=store, lease=lease)
    async for _ in runner.run(user_id="u", session_id="late", message="go"):
        pass
    assert taken == [None], taken
    runs = await runner.ledger.list_runs()
    assert [(r.session_id, r.status, r.epoch, r.attempts) for r in runs] == [
        ("late", RunStatus.DONE, 1, 1)
    ]
    assert runner.keeper.watchdog.renewals >= 1
    await runner.aclose()
