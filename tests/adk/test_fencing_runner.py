"""Lease loss stops the work; transient faults are retried; a caller that leaves strands nothing.

Both backends, real parts: the store is the real one (wrapped only to hang a
renewal or fail one query on cue), the tools call a real HTTP server on
127.0.0.1 that counts requests, and the asserts are on those acts.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import asyncpg
import pytest
from fencing_parts import Counter, FaultyStore, busy
from google.adk.agents import BaseAgent, LlmAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events.event import Event
from google.adk.models.llm_request import LlmRequest
from google.genai import errors as genai_errors
from google.genai import types
from prometheus_client import CollectorRegistry

from durable_adk import errors
from durable_adk.adk.loops.recovery import Sweeper
from durable_adk.adk.runner import DurableRunner, RetryPolicy
from durable_adk.fencing.fence import RunFence, current_fence
from durable_adk.metrics import Metrics
from durable_adk.store import Store, open_store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.testing import Call, Fail, Say, ScriptedModel

APP = "fencing"


@pytest.fixture
async def counter() -> AsyncIterator[Counter]:
    async with Counter().running() as running:
        yield running


@pytest.fixture
async def faulty(store_url: str) -> AsyncIterator[FaultyStore]:
    async with open_store(store_url) as store:
        yield FaultyStore(store)


class Work:
    """A slow tool that acts on the outside world ``calls`` times, a little apart."""

    def __init__(self, counter: Counter, *, calls: int = 100, pause: float = 0.1) -> None:
        self.counter = counter
        self.calls = calls
        self.pause = pause
        self.started = asyncio.Event()
        self.cancelled = False
        self.finished = 0
        self.fences: list[RunFence | None] = []

    async def work(self, job: str) -> dict[str, Any]:
        """Does the job, calling out several times."""
        self.fences.append(current_fence())
        self.started.set()
        try:
            for _ in range(self.calls):
                await self.counter.act()
                await asyncio.sleep(self.pause)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        self.finished += 1
        return {"job": job, "done": True}


def agent_with(work: Any, script: list[Any] | None = None) -> LlmAgent:
    steps = script or [Call("work", {"job": "x"}), Say("finished")]
    return LlmAgent(name="assistant", model=ScriptedModel({"assistant": steps}), tools=[work])


def lost_leases(metrics: Metrics) -> float:
    return metrics.registry.get_sample_value("durable_adk_lease_renewal_failures_total") or 0.0


async def consume(runner: DurableRunner, session: str = "s") -> None:
    async for _ in runner.run(user_id="u", session_id=session, message="go"):
        pass


LEASE = 4.0
"""The lease of the drives these tests cut off: renewed every 4/3 s, lost some 3.5 s
after the last renewal. The waits of the tests follow it."""


async def warm_up(store: Store, counter: Counter) -> None:
    """One drive to its end on another session first: a cold first drive blocks the
    loop for seconds (ADK's lazy imports) on a loaded machine, which may really cost
    a short lease. Its act is not counted."""
    warm = Work(counter, calls=1, pause=0)
    await consume(DurableRunner(app=agent_with(warm.work), app_name=APP, store=store), "warm")
    counter.requests = 0


async def test_a_renewal_that_hangs_cancels_the_drive_and_its_tool_at_the_deadline(
    faulty: FaultyStore, counter: Counter
) -> None:
    work = Work(counter)
    metrics = Metrics(CollectorRegistry())
    lease = LEASE
    await warm_up(faulty.inner, counter)
    runner = DurableRunner(
        app=agent_with(work.work), app_name=APP, store=faulty, lease=lease, metrics=metrics
    )
    driving = asyncio.create_task(consume(runner))
    await asyncio.wait_for(work.started.wait(), 30)
    # Let one renewal succeed first, then cut the database off.
    faulty.renewed.clear()
    await asyncio.wait_for(faulty.renewed.wait(), 30)
    faulty.hang_renewals = True
    cut_at = time.monotonic()
    with pytest.raises(errors.Fenced):
        await asyncio.wait_for(driving, 30)
    stopped_after = time.monotonic() - cut_at
    # Not at the first failed renewal, and not later than the lease itself.
    assert lease / 3 < stopped_after < lease + 5, stopped_after
    assert work.cancelled and work.finished == 0
    acts = counter.requests
    assert await counter.settled() == acts  # no outside call after the drive was cancelled
    (fence,) = work.fences
    assert fence is not None and fence.lost is not None and not fence.trusted()
    with pytest.raises(errors.Fenced):
        fence.check()
    assert lost_leases(metrics) == 1
    assert runner.detached_runs == []  # the caller read to the end: nothing detached
    assert current_fence() is None  # only inside a drive
    faulty.hang_renewals = False
    (run,) = [r for r in await runner.ledger.list_runs() if r.session_id == "s"]
    assert run.status is RunStatus.RUNNING  # nothing written: recovery takes it over


async def test_a_takeover_cancels_the_slow_tool_at_the_next_renewal(
    store: Store, counter: Counter
) -> None:
    work = Work(counter)
    await warm_up(store, counter)
    runner = DurableRunner(app=agent_with(work.work), app_name=APP, store=store, lease=LEASE)
    driving = asyncio.create_task(consume(runner))
    await asyncio.wait_for(work.started.wait(), 30)
    (run,) = [r for r in await runner.ledger.list_runs() if r.session_id == "s"]
    assert runner.fence(run.run_id, run.epoch) is work.fences[0]
    await runner.ledger.backdate(run.run_id, 3600)
    (taken,) = await RunLedger(store, lease_seconds=600).claim_expired("thief")
    assert taken.epoch == run.epoch + 1
    with pytest.raises(errors.Fenced, match="taken over"):
        await asyncio.wait_for(driving, 30)
    assert work.cancelled and work.finished == 0
    acts = counter.requests
    assert await counter.settled() == acts
    after = await runner.ledger.get(run.run_id)
    assert after is not None and after.owner == "thief" and after.status is RunStatus.RUNNING
    assert runner.fence(run.run_id, run.epoch) is None


async def test_a_busy_store_mid_run_hands_the_run_back_and_recovery_ends_it_done(
    faulty: FaultyStore, counter: Counter
) -> None:
    async def lookup(q: str) -> dict[str, str]:
        """Looks something up (an outside call)."""
        await counter.act()
        return {"q": q}

    # The unit that writes the model's call (with the user's message) meets a
    # busy database once.
    faulty.fail_next["append_events"] = (0, busy())
    runner = DurableRunner(
        app=agent_with(lookup, [Call("lookup", {"q": "x"}), Say("found it")]),
        app_name=APP,
        store=faulty,
        backoff=30.0,
    )
    with pytest.raises(errors.RunInterrupted, match="handed back") as caught:
        await consume(runner)
    assert isinstance(caught.value.__cause__, BaseException)
    assert runner.detached_runs == []
    (run,) = await runner.ledger.list_runs()
    assert run.status is RunStatus.RUNNING and "DatabaseBusy" in (run.last_error or "")
    now = await faulty.now()
    assert run.lease_until <= now and run.next_attempt_at > now + 20  # back-off: 30 * 2^0
    assert await Sweeper(runner).recover_once() == []  # not before its back-off
    await runner.ledger.backdate(run.run_id, 3600)
    (recovery,) = await Sweeper(runner).recover_once()
    assert recovery.status is RunStatus.DONE
    done = await runner.ledger.get(run.run_id)
    assert done is not None and done.status is RunStatus.DONE and done.attempts == 2
    assert counter.requests == 1


async def test_a_deterministic_tool_error_ends_failed_and_retry_takes_it(
    store: Store, counter: Counter
) -> None:
    async def charge(amount: int) -> dict[str, str]:
        """Charges a card (always refuses)."""
        await counter.act()
        raise ValueError("card refused")

    runner = DurableRunner(
        app=agent_with(charge, [Call("charge", {"amount": 5}), Say("ok")]),
        app_name=APP,
        store=store,
    )
    with pytest.raises(Exception, match="card refused"):
        await consume(runner)
    (run,) = await runner.ledger.list_runs()
    assert run.status is RunStatus.FAILED and "card refused" in (run.last_error or "")
    assert counter.requests == 1
    retried = await runner.ledger.retry(run.run_id)
    assert retried is not None and retried.status is RunStatus.QUEUED
    assert retried.attempts == 0 and retried.last_error is None


async def test_a_rate_limited_model_is_retried_not_failed(store: Store, counter: Counter) -> None:
    asked: list[int] = []

    def first_rate_limited(request: LlmRequest) -> Any:
        asked.append(1)
        if len(asked) == 1:
            return Fail(
                genai_errors.ClientError(
                    429,
                    {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}},
                )
            )
        return Say("answered")

    runner = DurableRunner(
        app=LlmAgent(name="assistant", model=ScriptedModel({"assistant": [first_rate_limited]})),
        app_name=APP,
        store=store,
    )
    with pytest.raises(errors.RunInterrupted):
        await consume(runner)
    (run,) = await runner.ledger.list_runs()
    assert run.status is RunStatus.RUNNING and run.last_error
    await runner.ledger.backdate(run.run_id, 3600)
    (recovery,) = await Sweeper(runner).recover_once()
    assert recovery.status is RunStatus.DONE and len(asked) == 2
    # A policy that does not retry model errors fails the run instead.
    strict = DurableRunner(
        app=LlmAgent(
            name="assistant",
            model=ScriptedModel(
                {"assistant": [Fail(genai_errors.ServerError(503, {"error": {"code": 503}}))]}
            ),
        ),
        app_name=APP,
        store=store,
        retry_policy=RetryPolicy(retryable=lambda exc: False),
    )
    with pytest.raises(Exception):  # noqa: B017 - whatever ADK wraps it in
        await consume(strict, "s2")
    failed = [r for r in await strict.ledger.list_runs() if r.session_id == "s2"]
    assert [r.status for r in failed] == [RunStatus.FAILED]


async def test_retry_policy_classifies_by_type_and_cause() -> None:
    policy = RetryPolicy()
    assert policy.is_transient(errors.DatabaseBusy())
    assert policy.is_transient(errors.StoreUnavailable())
    assert policy.is_transient(TimeoutError())
    assert not policy.is_transient(errors.UniqueViolation())
    assert not policy.is_transient(errors.StoreError())
    assert not policy.is_transient(ValueError("app bug"))
    assert policy.is_transient(genai_errors.ServerError(500, {"error": {"code": 500}}))
    assert not policy.is_transient(genai_errors.ClientError(400, {"error": {"code": 400}}))
    try:
        try:
            raise errors.StoreUnavailable()
        except errors.StoreUnavailable as inner:
            raise RuntimeError("wrapped by ADK") from inner
    except RuntimeError as outer:
        assert policy.is_transient(outer)


@pytest.mark.parametrize("leave", ["aclose", "cancel"])
async def test_a_caller_that_stops_reading_leaves_the_run_to_end_done(
    store: Store, counter: Counter, leave: str
) -> None:
    work = Work(counter, calls=5, pause=0.05)
    runner = DurableRunner(app=agent_with(work.work), app_name=APP, store=store)
    if leave == "aclose":
        async with contextlib.aclosing(
            runner.run(user_id="u", session_id="s", message="go")
        ) as events:
            async for _ in events:
                break  # the client went away after the first event
    else:
        reading = asyncio.create_task(consume(runner))
        await asyncio.wait_for(work.started.wait(), 30)
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
    (run,) = await runner.ledger.list_runs()
    assert runner.detached_runs == [run.run_id]
    await asyncio.wait_for(runner.aclose(), 60)
    assert runner.detached_runs == []
    done = await runner.ledger.get(run.run_id)
    assert done is not None and done.status is RunStatus.DONE and done.attempts == 1
    assert work.finished == 1 and not work.cancelled
    assert counter.requests == 5  # the tool acted once (five calls), never again
    session = await runner.sessions.get_session(app_name=APP, user_id="u", session_id="s")
    assert session is not None
    texts = [p.text for e in session.events if e.content for p in e.content.parts or () if p.text]
    assert texts[-1] == "finished"  # a reconnecting client reads the whole answer


async def test_aclose_cancels_a_detached_drive_after_its_grace(
    store: Store, counter: Counter
) -> None:
    work = Work(counter)
    runner = DurableRunner(app=agent_with(work.work), app_name=APP, store=store)
    reading = asyncio.create_task(consume(runner))
    await asyncio.wait_for(work.started.wait(), 30)
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    await asyncio.wait_for(runner.aclose(grace=0.2), 30)
    assert work.cancelled and runner.detached_runs == []
    acts = counter.requests
    assert await counter.settled() == acts
    (run,) = await runner.ledger.list_runs()
    assert run.status is RunStatus.RUNNING  # left for recovery (or a worker's hand-back)


@contextlib.asynccontextmanager
async def row_locked(store_url: str, run_id: str) -> AsyncIterator[None]:
    """Holds a real lock another connection's renewal must wait for (a hung database)."""
    if store_url.startswith("sqlite:///"):
        # The write lock of the whole file: every other writer waits its busy timeout.
        conn = sqlite3.connect(store_url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    pg = await asyncpg.connect(store_url)
    try:
        async with pg.transaction():
            await pg.execute("SELECT 1 FROM runs WHERE run_id = $1 FOR UPDATE", run_id)
            yield
    finally:
        await pg.close()


async def test_a_renewal_blocked_by_a_real_lock_cancels_the_drive(
    store_url: str, store: Store, counter: Counter
) -> None:
    work = Work(counter)
    await warm_up(store, counter)
    runner = DurableRunner(app=agent_with(work.work), app_name=APP, store=store, lease=LEASE)
    driving = asyncio.create_task(consume(runner))
    await asyncio.wait_for(work.started.wait(), 30)
    (run,) = [r for r in await runner.ledger.list_runs() if r.session_id == "s"]
    async with row_locked(store_url, run.run_id):
        with pytest.raises(errors.Fenced, match="deadline"):
            await asyncio.wait_for(driving, 30)
        assert work.cancelled and work.finished == 0
        acts = counter.requests
        assert await counter.settled() == acts
    # Once the lock is gone the row is as the lost worker left it: nothing written.
    after = await runner.ledger.get(run.run_id)
    assert after is not None and after.status is RunStatus.RUNNING and after.epoch == run.epoch


class LeavesACallUnanswered(BaseAgent):
    """An agent whose invocation ends on a call nobody answers (as after a lost tool answer)."""

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        call = types.FunctionCall(name="charge", args={"amount": 5}, id="call-1")
        yield Event(
            author=self.name,
            invocation_id=ctx.invocation_id,
            content=types.Content(role="model", parts=[types.Part(function_call=call)]),
        )


async def test_a_drive_that_ends_with_a_call_unanswered_is_never_done(store: Store) -> None:
    runner = DurableRunner(app=LeavesACallUnanswered(name="assistant"), app_name=APP, store=store)
    with pytest.raises(errors.RunInterrupted, match="TOOL_UNANSWERED"):
        await consume(runner)
    (run,) = await runner.ledger.list_runs()
    assert run.status is RunStatus.RUNNING and "TOOL_UNANSWERED" in (run.last_error or "")
    # Recovery sees the same and, the tool being neither idempotent nor journaled, parks it.
    await runner.ledger.backdate(run.run_id, 3600)
    (recovery,) = await Sweeper(runner).recover_once()
    assert (recovery.found.value, recovery.status) == ("TOOL_UNANSWERED", RunStatus.PARKED)


async def test_a_renewal_that_fails_once_is_retried_and_the_run_ends_done(
    faulty: FaultyStore, counter: Counter
) -> None:
    work = Work(counter, calls=25, pause=0.2)  # outlives three renewal intervals (4 / 3 s)
    metrics = Metrics(CollectorRegistry())
    runner = DurableRunner(
        app=agent_with(work.work), app_name=APP, store=faulty, lease=LEASE, metrics=metrics
    )
    await warm_up(faulty.inner, counter)
    driving = asyncio.create_task(consume(runner))
    # Once the tool works, the next renewal meets a reset connection once.
    await asyncio.wait_for(work.started.wait(), 60)
    faulty.renewed.clear()
    await asyncio.wait_for(faulty.renewed.wait(), 60)  # the heartbeat is on time again
    faulty.fail_next["run_renew_many"] = (
        0,
        errors.StoreUnavailable("injected: connection reset"),
    )
    await asyncio.wait_for(driving, 120)
    assert "run_renew_many" not in faulty.fail_next  # the failure did happen
    run = next(r for r in await runner.ledger.list_runs() if r.session_id == "s")
    assert run.status is RunStatus.DONE and work.finished == 1 and counter.requests == 25
    assert lost_leases(metrics) == 0
