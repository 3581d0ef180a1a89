"""The run ledger and DurableRunner in one process, on both backends.

Leases are expired by moving them back in the database, never by sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.sessions.in_memory_session_service import InMemorySessionService
from google.genai import types

from durable_adk import errors
from durable_adk.adk.loops.recovery import Recovery, Sweeper
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.services.sessions import RUN_METADATA_KEY, DurableSessionService
from durable_adk.demo import recovery_demo as demo
from durable_adk.store import Store, open_store
from durable_adk.tables.ledger import Run, RunLedger, RunStatus
from durable_adk.testing import Call, Say, ScriptedModel


async def test_two_sweepers_never_claim_the_same_run(store_url: str) -> None:
    async with open_store(store_url) as one, open_store(store_url) as two:
        ledgers = [RunLedger(one), RunLedger(two)]
        for round_ in range(50):
            runs = []
            for i in range(4):
                run = await ledgers[0].submit(
                    app_name="a", user_id="u", session_id=f"r{round_}-{i}", request={}, owner="dead"
                )
                claimed = await ledgers[0].claim_queued(run.run_id, "dead")
                assert claimed is not None
                await ledgers[0].backdate(run.run_id, 3600)
                runs.append(run.run_id)
            got = await asyncio.gather(
                ledgers[0].claim_expired("sweeper-1", limit=10),
                ledgers[1].claim_expired("sweeper-2", limit=10),
            )
            ids = [r.run_id for batch in got for r in batch]
            assert sorted(ids) == sorted(runs), f"round {round_}: {ids}"


async def test_takeover_fences_the_old_worker(store: Store) -> None:
    ledger = RunLedger(store)
    sessions = DurableSessionService(store)
    session = await sessions.create_session(app_name="a", user_id="u", session_id="s")
    run = await ledger.submit(app_name="a", user_id="u", session_id="s", request={}, owner="old")
    old = await ledger.claim_queued(run.run_id, "old")
    assert old is not None
    await ledger.backdate(run.run_id, 3600)
    (new,) = await ledger.claim_expired("new")
    assert new.epoch == old.epoch + 1 and new.owner == "new"

    def stamped(epoch: int, text: str) -> Event:
        return Event(
            author="agent",
            invocation_id=run.invocation_id,
            content=types.Content(role="model", parts=[types.Part(text=text)]),
            custom_metadata={RUN_METADATA_KEY: {"run_id": run.run_id, "epoch": epoch}},
        )

    with pytest.raises(errors.Fenced):
        await sessions.append_event(session, stamped(old.epoch, "from the presumed-dead worker"))
    assert not (await ledger.renew(old.lease)).ok
    assert not await ledger.finish(old.lease, RunStatus.DONE)
    await sessions.append_event(session, stamped(new.epoch, "from the new owner"))
    assert await ledger.finish(new.lease, RunStatus.DONE)
    with pytest.raises(errors.Fenced):  # a finished run takes no more events either
        await sessions.append_event(session, stamped(new.epoch, "late"))
    loaded = await DurableSessionService(store).get_session(
        app_name="a", user_id="u", session_id="s"
    )
    assert loaded is not None
    assert [e.content.parts[0].text for e in loaded.events if e.content] == ["from the new owner"]
    assert (await ledger.get(run.run_id)).status is RunStatus.DONE  # type: ignore[union-attr]


async def test_retry_of_a_parked_run_is_safe_twice(store: Store) -> None:
    ledger = RunLedger(store)
    run = await ledger.submit(app_name="a", user_id="u", session_id="s", request={}, owner="w")
    claimed = await ledger.claim_queued(run.run_id, "w")
    assert claimed is not None
    assert await ledger.park(
        claimed.lease, error="outcome unknown", classification="TOOL_UNANSWERED"
    )
    first, second = await ledger.retry(run.run_id), await ledger.retry(run.run_id)
    assert first is not None and second is not None
    assert first.status is second.status is RunStatus.QUEUED
    (again,) = await ledger.claim_expired("sweeper")
    assert again.run_id == run.run_id and again.attempts == 1
    assert len(await ledger.dead_letters(run_id=run.run_id)) == 1
    assert await ledger.retry("no-such-run") is None


async def test_an_abandoned_run_is_never_retried_by_the_ledger(store: Store) -> None:
    """Abandon is final in the statement itself, not only in the operator's check before it."""
    ledger = RunLedger(store)
    run = await ledger.submit(app_name="a", user_id="u", session_id="s", request={}, owner="w")
    claimed = await ledger.claim_queued(run.run_id, "w")
    assert claimed is not None
    assert await ledger.park(claimed.lease, error="outcome unknown")
    assert (await ledger.abandon(run.run_id, by="ops", reason="checked by hand")).changed
    left = await ledger.retry(run.run_id)  # the run as it stands: not re-queued
    assert left is not None and left.status is RunStatus.FAILED
    recorded = await ledger.retry_recorded(run.run_id, by="ops")
    assert not recorded.changed and recorded.run.status is RunStatus.FAILED
    assert await ledger.claim_expired("sweeper") == []


async def test_one_running_run_per_session_in_order(store: Store) -> None:
    def two_turn_runner(worker: str) -> DurableRunner:
        script = [Say("first answer"), Say("second answer")]
        agent = LlmAgent(name="assistant", model=ScriptedModel({"assistant": script}))
        return DurableRunner(app=agent, app_name=demo.APP_NAME, store=store, worker_id=worker)

    runner_a, runner_b = two_turn_runner("worker-A"), two_turn_runner("worker-B")
    order: list[str] = []

    async def turn(runner: DurableRunner, text: str) -> None:
        async for event in runner.run(user_id=demo.USER_ID, session_id="shared", message=text):
            if event.author == "user":
                continue
        order.append(text)

    first = asyncio.create_task(turn(runner_a, "first"))
    for _ in range(1000):  # the first must be on the ledger before the second arrives
        if await RunLedger(store).list_runs():
            break
        await asyncio.sleep(0.01)
    second = asyncio.create_task(turn(runner_b, "second"))
    await asyncio.gather(first, second)
    runs = await RunLedger(store).list_runs()
    assert [r.status for r in runs] == [RunStatus.DONE, RunStatus.DONE]
    session = await DurableSessionService(store).get_session(
        app_name=demo.APP_NAME, user_id=demo.USER_ID, session_id="shared"
    )
    assert session is not None
    by_invocation = [e.invocation_id for e in session.events]
    # The two invocations never interleave in the log.
    assert by_invocation == sorted(by_invocation, key=by_invocation.index)
    assert len(set(by_invocation)) == 2
    assert order == ["first", "second"]
    texts = [e.content.parts[0].text for e in session.events if e.content and e.content.parts]
    assert texts == ["first", "first answer", "second", "second answer"]


async def test_bad_configurations_are_refused(store: Store) -> None:
    with pytest.raises(errors.InvalidArgument, match="DurableSessionService"):
        DurableRunner(app=demo.build_agent(), store=store, session_service=InMemorySessionService())
    with pytest.raises(errors.InvalidArgument):
        RunLedger(store, lease_seconds=0)
    with pytest.raises(errors.InvalidArgument):
        await RunLedger(store).submit(
            app_name="", user_id="u", session_id="s", request={}, owner="w"
        )
    assert await RunLedger(store).list_runs() == []


async def test_run_dead_before_its_first_event_is_not_mistaken_for_the_last_turn(
    store: Store,
) -> None:
    """A run whose invocation left no event yet must be driven, even when the
    previous turn's message is only a moment older (review finding)."""
    script = [Say("first answer"), Say("second answer")]
    agent = LlmAgent(name="assistant", model=ScriptedModel({"assistant": script}))
    runner = DurableRunner(app=agent, app_name="shop", store=store, worker_id="w1")
    async for _ in runner.run(user_id="u", session_id="s", message="first"):
        pass
    # The second turn's worker dies right after claiming, before ADK stored anything.
    second = await runner.ledger.submit(
        app_name="shop",
        user_id="u",
        session_id="s",
        request={"role": "user", "parts": [{"text": "second"}]},
        owner="dead",
    )
    assert await runner.ledger.claim_queued(second.run_id, "dead") is not None
    await runner.ledger.backdate(second.run_id, 3600)
    (recovery,) = await Sweeper(runner).recover_once()
    assert (recovery.found.value, recovery.action) == ("NOT_STARTED", "redrive")
    run = await runner.ledger.get(second.run_id)
    assert run is not None and run.status is RunStatus.DONE and run.classification == "NOT_STARTED"
    session = await runner.sessions.get_session(app_name="shop", user_id="u", session_id="s")
    assert session is not None
    texts = [e.content.parts[0].text for e in session.events if e.content and e.content.parts]
    assert texts == ["first", "first answer", "second", "second answer"]


async def test_caller_leaving_early_leaves_the_run_to_end_in_the_worker(store: Store) -> None:
    script = [Call("lookup", {"q": "x"}), Say("done")]
    looked_up: list[str] = []
    release = asyncio.Event()  # the drive goes on only once the reader is seen gone

    async def lookup(q: str) -> dict[str, str]:
        """Looks something up."""
        await release.wait()
        looked_up.append(q)
        return {"q": q}

    agent = LlmAgent(name="assistant", model=ScriptedModel({"assistant": script}), tools=[lookup])
    runner = DurableRunner(
        app=agent, app_name="shop", store=store, worker_id="w1", idempotent_tools=["lookup"]
    )
    async with contextlib.aclosing(runner.run(user_id="u", session_id="s", message="go")) as events:
        async for _ in events:
            break  # the client went away after the first event
    (run,) = await runner.ledger.list_runs()
    assert runner.detached_runs == [run.run_id]  # driven on without a reader, not stranded
    release.set()
    await runner.aclose()
    done = await runner.ledger.get(run.run_id)
    assert done is not None and done.status is RunStatus.DONE and done.attempts == 1
    assert looked_up == ["x"]
    assert await Sweeper(runner).recover_once() == []  # nothing was left for recovery


async def test_a_worker_recovers_only_its_own_apps_runs(store: Store) -> None:
    ledger = RunLedger(store)
    for app in ("shop", "crm"):
        run = await ledger.submit(
            app_name=app, user_id="u", session_id="s", request={}, owner="dead"
        )
        assert await ledger.claim_queued(run.run_id, "dead") is not None
        await ledger.backdate(run.run_id, 3600)
    taken = await ledger.claim_expired("shop-worker", app_name="shop")
    assert [r.app_name for r in taken] == ["shop"]
    assert [r.app_name for r in await ledger.claim_expired("crm-worker", app_name="crm")] == ["crm"]


async def test_a_recovery_claim_never_exceeds_its_limit(store: Store) -> None:
    """On a fresh (unanalysed) table PostgreSQL may re-run a LIMIT subquery per row."""
    ledger = RunLedger(store)
    for i in range(200):
        run = await ledger.submit(
            app_name="a", user_id="u", session_id=f"s{i}", request={}, owner="dead"
        )
        assert await ledger.claim_queued(run.run_id, "dead") is not None
        await ledger.backdate(run.run_id, 3600)
    sizes = [len(await ledger.claim_expired("sweeper", limit=n)) for n in (20, 20, 5, 1)]
    assert sizes == [20, 20, 5, 1]


async def test_a_sweep_recovers_its_claimed_runs_side_by_side_in_claim_order(
    store: Store,
) -> None:
    in_flight, peaks, finished = 0, [], []

    async def slow_lookup(q: str, tool_context) -> dict[str, str]:  # type: ignore[no-untyped-def]
        """Looks something up, slowly."""
        nonlocal in_flight
        session_id = tool_context.session.id
        in_flight += 1
        peaks.append(in_flight)
        try:
            # Runs claimed earlier take longer: they finish after later ones.
            await asyncio.sleep(0.1 + 0.1 * (6 - int(session_id[1:])))
        finally:
            in_flight -= 1
        finished.append(session_id)
        return {"q": q}

    script = [Call("slow_lookup", {"q": "x"}), Say("found it")]
    agent = LlmAgent(
        name="assistant", model=ScriptedModel({"assistant": script}), tools=[slow_lookup]
    )
    runner = DurableRunner(
        app=agent, app_name="shop", store=store, worker_id="w1", idempotent_tools=["slow_lookup"]
    )
    for bad in ({"batch": 0}, {"concurrency": 0}, {"concurrency": -1}, {"interval": 0.0}):
        with pytest.raises(errors.InvalidArgument):
            Sweeper(runner, **bad)  # type: ignore[arg-type]
    # Six runs started by a worker that died before ADK stored anything.
    orphans = []
    for i in range(6):
        message = types.Content(role="user", parts=[types.Part(text=f"question {i}")])
        started = await runner.ledger.start(
            app_name="shop",
            user_id="u",
            session_id=f"s{i}",
            request=message.model_dump(mode="json", exclude_none=True),
            owner="dead",
            now=await store.now(),
        )
        assert started is not None and started.run.status is RunStatus.RUNNING
        await runner.ledger.backdate(started.run.run_id, 3600)
        orphans.append(started.run.run_id)

    first = await Sweeper(runner, batch=4, concurrency=2).recover_once()
    assert finished[:2] == ["s1", "s0"]  # s1 overtook s0 ...
    assert [r.run_id for r in first] == orphans[:4]  # ... yet results come in claim order
    assert max(peaks) == 2  # side by side, never more than the concurrency
    peaks.clear()
    second = await Sweeper(runner, batch=10, concurrency=1).recover_once()
    assert [r.run_id for r in second] == orphans[4:]
    assert max(peaks) == 1
    for recovery in first + second:
        assert (recovery.found.value, recovery.action, recovery.status) == (
            "NOT_STARTED",
            "redrive",
            RunStatus.DONE,
        )
    assert await Sweeper(runner).recover_once() == []
    runs = {r.run_id: r for r in await runner.ledger.list_runs()}
    assert sorted(runs) == sorted(orphans)
    for i, run_id in enumerate(orphans):
        run = runs[run_id]
        assert (run.status, run.owner, run.epoch, run.attempts, run.classification) == (
            RunStatus.DONE,
            "w1",
            2,
            2,
            "NOT_STARTED",
        )
        session = await DurableSessionService(store).get_session(
            app_name="shop", user_id="u", session_id=f"s{i}"
        )
        assert session is not None
        assert {e.invocation_id for e in session.events} == {run.invocation_id}
        texts = [e.content.parts[0].text for e in session.events if e.content and e.content.parts]
        assert texts == [f"question {i}", None, None, "found it"]


async def test_a_failing_recovery_fails_the_pass_only_after_the_others_end(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One run's recovery raising must not leave the pass's other recoveries running unseen."""
    agent = LlmAgent(name="assistant", model=ScriptedModel({"assistant": [Say("hello")]}))
    runner = DurableRunner(app=agent, app_name="shop", store=store, worker_id="w1")
    orphans = []
    for i in range(3):
        message = types.Content(role="user", parts=[types.Part(text=f"hi {i}")])
        started = await runner.ledger.start(
            app_name="shop",
            user_id="u",
            session_id=f"s{i}",
            request=message.model_dump(mode="json", exclude_none=True),
            owner="dead",
            now=await store.now(),
        )
        assert started is not None
        await runner.ledger.backdate(started.run.run_id, 3600)
        orphans.append(started.run.run_id)
    sweeper = Sweeper(runner, batch=3, concurrency=3)
    recover = sweeper._recover

    async def first_one_breaks(run: Run) -> Recovery:
        if run.run_id == orphans[0]:
            raise errors.StoreUnavailable("the database went away")
        await asyncio.sleep(0.2)  # still at work when the first one fails
        return await recover(run)

    monkeypatch.setattr(sweeper, "_recover", first_one_breaks)
    with pytest.raises(errors.StoreUnavailable):
        await sweeper.recover_once()
    runs = {r.run_id: r for r in await runner.ledger.list_runs()}
    assert runs[orphans[0]].status is RunStatus.RUNNING  # claimed; retried after its lease
    assert [runs[r].status for r in orphans[1:]] == [RunStatus.DONE, RunStatus.DONE]
