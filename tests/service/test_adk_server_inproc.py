"""DurableRunsPlugin in process: ``get_fast_api_app`` starts recovery with its lifespan,
and a queued turn whose session was deleted meanwhile fails clearly.

(The crash and queueing tests against a real ``adk api_server`` process are in
test_adk_server_runs.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.runners import Runner
from google.genai import types
from test_adk_server_workflow import server

from durable_adk import (
    DurableRunsPlugin,
    Run,
    RunLedger,
    RunStatus,
    ServerSettings,
    open_store,
)
from durable_adk.adk.loops.recovery import Sweeper
from durable_adk.adk.servers.uri import DurableUriSessionService
from durable_adk.adk.services.sessions import DurableSessionService

AGENT = """
from google.adk.agents import LlmAgent
from durable_adk.testing import Say, ScriptedModel

root_agent = LlmAgent(name="greeter", model=ScriptedModel([Say("hello"), Say("again")]))
"""


def texts(events: list[Any]) -> list[str]:
    return [p.text for e in events if e.content for p in e.content.parts or [] if p.text]


async def eventually(check: Callable[[], Awaitable[bool]], seconds: float = 60) -> None:
    """Polls ``check`` (a database read) until it holds."""

    async def poll() -> None:
        while True:
            if await check():
                return
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), seconds)


async def has_runs(ledger: RunLedger, status: RunStatus) -> bool:
    return bool(await ledger.list_runs(status=status))


async def test_get_fast_api_app_lifespan_recovers_without_a_request(
    store_url: str, tmp_path: Path
) -> None:
    agents = tmp_path / "agents"
    (agents / "greeter").mkdir(parents=True)
    (agents / "greeter" / "__init__.py").write_text("from . import agent\n")
    (agents / "greeter" / "agent.py").write_text(AGENT)
    message = {"role": "user", "parts": [{"text": "hi"}]}
    async with open_store(store_url) as store:
        await DurableSessionService(store).create_session(
            app_name="greeter", user_id="ann", session_id="s1"
        )
        ledger = RunLedger(store)
        queued = await ledger.submit(
            app_name="greeter", user_id="ann", session_id="s1", request=message, owner="dead"
        )
        orphan = await ledger.claim_queued(queued.run_id, "dead")
        assert orphan is not None and orphan.status is RunStatus.RUNNING
        await ledger.backdate(orphan.run_id, 120)  # its worker died long ago

    app, service = server(agents, store_url)
    async with app.router.lifespan_context(app):
        # No request yet: the lifespan started recovery, which drives the orphan.
        async def done() -> RunStatus:
            while True:
                run = await RunLedger(service.store).get(orphan.run_id)
                assert run is not None
                if run.status is not RunStatus.RUNNING:
                    return run.status
                await asyncio.sleep(0.1)

        assert await asyncio.wait_for(done(), 60) is RunStatus.DONE
        # The server runs a worker's loops, not only the sweeper: long-running
        # jobs are resumed and interrupts' deadlines applied under adk api_server too.
        running = {t.get_name() for t in asyncio.all_tasks() if not t.done()}
        assert {
            "durable-adk-sweeper",
            "durable-adk-submitter",
            "durable-adk-resumer",
            "durable-adk-expiry",
            "durable-adk-interrupt-deadlines",
        } <= running
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            ran = await http.post(
                "/run",
                json={
                    "app_name": "greeter",
                    "user_id": "ann",
                    "session_id": "s1",
                    "new_message": {"role": "user", "parts": [{"text": "again?"}]},
                },
                timeout=60,
            )
            assert ran.status_code == 200, ran.text
        session = await service.get_session(app_name="greeter", user_id="ann", session_id="s1")
        assert session is not None
        assert texts(session.events) == ["hi", "hello", "again?", "again"]
        runs = await RunLedger(service.store).list_runs()
        assert [r.status for r in runs] == [RunStatus.DONE, RunStatus.DONE]
        # The request's run is the invocation ADK ran, and its events carry its fence.
        newest = runs[0]
        stamped = [e for e in session.events if e.invocation_id == newest.invocation_id]
        assert stamped and all(
            (e.custom_metadata or {}).get("durable_adk", {}).get("run_id") == newest.run_id
            for e in stamped
        )


async def test_a_queued_turn_whose_session_was_deleted_fails_clearly(store_url: str) -> None:
    service = DurableUriSessionService(f"durable+{store_url}")
    release = asyncio.Event()

    async def hold() -> dict[str, bool]:
        """Holds the session's run until released."""
        await release.wait()
        return {"ok": True}

    from durable_adk.testing import Call, Say, ScriptedModel

    agent = LlmAgent(
        name="greeter",
        model=ScriptedModel([Call("hold", {}), Say("first"), Say("second")]),
        tools=[hold],
    )
    runner = Runner(
        app=App(name="greeter", root_agent=agent, plugins=[DurableRunsPlugin()]),
        session_service=service,
    )
    await service.create_session(app_name="greeter", user_id="ann", session_id="s1")

    async def turn(text: str) -> list[object]:
        message = types.Content(role="user", parts=[types.Part(text=text)])
        return [
            e async for e in runner.run_async(user_id="ann", session_id="s1", new_message=message)
        ]

    try:
        first = asyncio.create_task(turn("one"))
        ledger = RunLedger(service.store)
        await eventually(lambda: has_runs(ledger, RunStatus.RUNNING))
        second = asyncio.create_task(turn("two"))
        await eventually(lambda: has_runs(ledger, RunStatus.QUEUED))
        await service.delete_session(app_name="greeter", user_id="ann", session_id="s1")
        release.set()
        with pytest.raises(Exception):  # noqa: B017 - the first turn's append finds no session
            await first
        # ADK wraps a plugin's error in a RuntimeError naming the plugin.
        with pytest.raises(RuntimeError, match="deleted while its turn waited") as caught:
            await second
        assert isinstance(caught.value.__cause__, SessionNotFoundError)
        statuses = {r.status for r in await ledger.list_runs()}
        assert RunStatus.QUEUED not in statuses
        failed = [r for r in await ledger.list_runs() if r.status is RunStatus.FAILED]
        assert any("deleted while its turn waited" in (r.last_error or "") for r in failed)
    finally:
        await service.durable_runs.aclose()
        await service.store.close()


class HeldTurn:
    """A turn under DurableRunsPlugin whose tool waits (then would act), on lease 3 s."""

    def __init__(self, store_url: str) -> None:
        # Lease 3 s: renewed every second by DurableRunner's heartbeat.
        self.service = DurableUriSessionService(
            f"durable+{store_url}", settings=ServerSettings(lease=3.0, sweep_interval=3600)
        )
        self.entered = asyncio.Event()
        self.acted: list[str] = []

        async def hold() -> dict[str, bool]:
            """Waits, then would act."""
            self.entered.set()
            await asyncio.sleep(60)
            self.acted.append("acted")  # never reached: the drive is stopped first
            return {"ok": True}

        from durable_adk.testing import Call, Say, ScriptedModel

        agent = LlmAgent(
            name="greeter", model=ScriptedModel([Call("hold", {}), Say("done")]), tools=[hold]
        )
        self.runner = Runner(
            app=App(name="greeter", root_agent=agent, plugins=[DurableRunsPlugin()]),
            session_service=self.service,
        )

    async def start(self) -> asyncio.Task[None]:
        """Starts the turn and waits until its tool is at work."""
        await self.service.create_session(app_name="greeter", user_id="ann", session_id="s1")
        message = types.Content(role="user", parts=[types.Part(text="hi")])

        async def turn() -> None:
            async for _ in self.runner.run_async(
                user_id="ann", session_id="s1", new_message=message
            ):
                pass

        driving = asyncio.create_task(turn())
        await asyncio.wait_for(self.entered.wait(), 30)
        return driving

    async def close(self) -> None:
        await self.service.durable_runs.aclose()
        await self.service.store.close()


async def test_a_run_taken_over_is_cancelled_and_writes_nothing_more(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The plugin's own sweeper passes once when the service starts. On a loaded
    # machine that pass could land after a backdate below, claim the run and
    # park it (its tool may have acted: CI saw it), leaving the thief nothing to
    # claim; so the thief begins once that pass is over.
    swept = asyncio.Event()
    recover_once = Sweeper.recover_once

    async def counted(self: Sweeper, **kwargs: Any) -> Any:
        try:
            return await recover_once(self, **kwargs)
        finally:
            swept.set()

    monkeypatch.setattr(Sweeper, "recover_once", counted)
    held = HeldTurn(store_url)
    service = held.service
    try:
        driving = await held.start()
        await asyncio.wait_for(swept.wait(), 30)
        ledger = RunLedger(service.store)
        [mine] = await ledger.list_runs(status=RunStatus.RUNNING)
        # As if this worker had stalled: its lease moved back, then claimed. A
        # renewal of the live owner landing between the two moves it forward
        # again; then the stall is made again (the claim is what is tested).
        # The plugin's own sweeper races for the expired lease too (and renews
        # it once it holds it): try until the thief wins one, within a bound.
        claimed: list[Run] = []
        deadline = asyncio.get_running_loop().time() + 30
        while not claimed:
            assert asyncio.get_running_loop().time() < deadline, "the thief never claimed"
            await ledger.backdate(mine.run_id, 120)
            claimed = await ledger.claim_expired("thief", app_name="greeter")
            if not claimed:
                await asyncio.sleep(0.02)
        [taken] = claimed
        # Above mine: a pass of the plugin's own sweeper (a nudge, say) may
        # still claim the run between a backdate and the thief's claim (CI saw
        # epoch 3); the thief's claim after it is the one tested.
        assert taken.owner == "thief" and taken.epoch > mine.epoch
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(driving, 30)  # the next renewal finds it taken: cancelled
        assert held.acted == []
        after = await ledger.get(mine.run_id)
        assert after is not None
        assert (after.status, after.owner, after.epoch) == (RunStatus.RUNNING, "thief", taken.epoch)
        fresh = DurableSessionService(service.store)
        session = await fresh.get_session(app_name="greeter", user_id="ann", session_id="s1")
        assert session is not None
        assert not [e for e in session.events if e.get_function_responses()]  # no answer stored
    finally:
        await held.close()


async def test_an_operators_cancel_aborts_the_invocation_adks_runner_drives(
    store_url: str,
) -> None:
    # The renewal that sees the cancel stops new acts and, the fence idle,
    # aborts ADK's invocation through its InvocationContext. The run ends
    # CANCELLED, not DONE, and is never re-driven.
    from durable_adk.adk.runs.operators import cancel_run

    held = HeldTurn(store_url)
    service = held.service
    try:
        driving = await held.start()
        ledger = RunLedger(service.store)
        [mine] = await ledger.list_runs(status=RunStatus.RUNNING)
        asked = await cancel_run(ledger, mine.run_id, by="ops-carol", reason="customer withdrew")
        assert asked.run.status is RunStatus.RUNNING and "next heartbeat" in asked.message
        started = asyncio.get_running_loop().time()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(driving, 30)
        assert asyncio.get_running_loop().time() - started < 30  # aborted, not run out
        assert held.acted == []
        await eventually(lambda: has_runs(ledger, RunStatus.CANCELLED), 30)
        after = await ledger.get(mine.run_id)
        assert after is not None and after.status is RunStatus.CANCELLED
        assert after.epoch == mine.epoch  # ended by its owner, not taken over
        # Recovery finds nothing to re-drive.
        assert await ledger.claim_expired("sweeper", app_name="greeter") == []
        actions = [a.action for a in await ledger.actions(run_id=mine.run_id)]
        assert "cancel" in actions
    finally:
        await held.close()
