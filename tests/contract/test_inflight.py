"""Many runs in flight: one batched heartbeat per worker, queued runs woken, a lease pool.

Both backends. The heartbeat tests drive the keeper's renewal by hand
(:meth:`LeaseKeeper.renew_once`) under a long lease, so no timer decides
them; the wake-up tests set the queued run's polling back-off to ten minutes
where a wake-up must be what starts it, so a missing wake-up fails on the
generous timeout instead of passing slowly. The cross-process test finishes
the first run in a real child process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from test_group_commit import _busy_pool

from children import spawn
from durable_adk import errors
from durable_adk.adk.runner import DurableRunner
from durable_adk.fencing.fence import RunFence, current_fence
from durable_adk.fencing.leases import LeaseKeeper, trust_from
from durable_adk.store import Store, open_store
from durable_adk.tables.ledger import RenewResult, Run, RunLedger, RunStatus
from durable_adk.testing import Call, Say, ScriptedModel

APP = "inflight"
NEVER = 600.0  # a polling back-off no test waits out: only a wake-up starts the run


def runner_on(
    store: Store, worker: str, *, poll: float = 0.1, poll_max: float = 2.0, lease: float = 30.0
) -> Any:
    agent = LlmAgent(name="a", model=ScriptedModel({"a": [Say("ok")] * 10}))
    return DurableRunner(
        app=agent,
        app_name=APP,
        store=store,
        worker_id=worker,
        queue_poll=poll,
        queue_poll_max=poll_max,
        lease=lease,
    )


async def started(ledger: RunLedger, session: str, owner: str) -> Run:
    made = await ledger.start(
        app_name=APP,
        user_id="u",
        session_id=session,
        request={"role": "user", "parts": [{"text": "hi"}]},
        owner=owner,
        now=time.time(),
    )
    assert made is not None
    return made.run


class Counted:
    """Counts the named queries a store runs (wraps ``fetch`` on the instance)."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        self.done: dict[str, asyncio.Event] = {}
        original = store.fetch

        async def fetch(query: str, params: Any = None) -> Any:
            self.names.append(query)
            rows = await original(query, params)
            self.done.setdefault(query, asyncio.Event()).set()
            return rows

        monkeypatch.setattr(store, "fetch", fetch)

    def event(self, query: str) -> asyncio.Event:
        return self.done.setdefault(query, asyncio.Event())


# ------------------------------------------------------------- heartbeats


async def test_one_statement_renews_every_lease_the_keeper_holds(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = RunLedger(store, lease_seconds=300)
    runs = [await started(ledger, f"s{i}", "w1") for i in range(40)]
    keeper = LeaseKeeper(ledger, "w1")
    seen: list[RenewResult] = []
    fences = []
    for run in runs:
        fence = RunFence(run.run_id, run.epoch, trusted_until=time.monotonic() + 200)
        fences.append(fence)
        keeper.hold(run.lease, fence, lambda reason: pytest.fail(reason), seen.append)
    before = [await ledger.get(r.run_id) for r in runs]
    counted = Counted(store, monkeypatch)
    for _ in range(3):
        results = await keeper.renew_once()
        assert len(results) == 40 and all(r.ok and not r.cancel_requested for r in results.values())
    assert counted.names == ["run_renew_many"] * 3  # one statement a round, not forty
    monkeypatch.undo()
    assert len(seen) == 120
    after = [await ledger.get(r.run_id) for r in runs]
    assert all(
        a and b and a.lease_until > b.lease_until for a, b in zip(after, before, strict=True)
    )
    assert all(f.trusted_until > time.monotonic() + 240 for f in fences)  # sent + 300 * 5/6
    await keeper.aclose()


async def test_a_renewal_loses_only_the_runs_no_longer_ours_and_reports_cancels(
    store: Store,
) -> None:
    ledger = RunLedger(store, lease_seconds=300)
    runs = [await started(ledger, f"s{i}", "w1") for i in range(3)]
    keeper = LeaseKeeper(ledger, "w1")
    lost: dict[str, str] = {}
    last: dict[str, RenewResult] = {}
    fences = {}
    for run in runs:
        fence = RunFence(run.run_id, run.epoch, trusted_until=time.monotonic() + 200)
        fences[run.run_id] = fence
        keeper.hold(
            run.lease,
            fence,
            lambda reason, rid=run.run_id: lost.setdefault(rid, reason),
            lambda r, rid=run.run_id: last.__setitem__(rid, r),
        )
    ended, cancelled, kept = runs
    assert await ledger.finish(ended.lease, RunStatus.DONE)
    asked = await ledger.cancel(cancelled.run_id, by="ops")
    assert asked.run.status is RunStatus.RUNNING  # a live lease: the owner is asked to stop
    results = await keeper.renew_once()
    assert not results[ended.run_id].ok
    assert lost == {ended.run_id: "the run was taken over or has ended"}
    assert fences[ended.run_id].lost is not None and keeper.held() == 2
    assert last[cancelled.run_id].cancel_requested_by == "ops"
    assert last[kept.run_id].ok and not last[kept.run_id].cancel_requested
    # A run taken over at a new epoch is lost too; the other still renews.
    await ledger.backdate(kept.run_id, 400)
    taken = await ledger.claim_expired("w2", limit=10)
    assert [t.run_id for t in taken] == [kept.run_id]
    await keeper.renew_once()
    assert lost[kept.run_id] == "the run was taken over or has ended"
    assert keeper.held() == 1 and fences[cancelled.run_id].trusted()
    await keeper.aclose()


async def test_renew_many_refuses_leases_of_another_owner_and_sends_nothing_for_none(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = RunLedger(store)
    run = await started(ledger, "s", "w1")
    counted = Counted(store, monkeypatch)
    assert await ledger.renew_many("w1", []) == {}
    with pytest.raises(errors.InvalidArgument):
        await ledger.renew_many("w2", [run.lease])
    assert counted.names == []


async def test_a_runner_with_many_runs_in_flight_renews_them_in_one_statement(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    release, all_in = asyncio.Event(), asyncio.Event()
    entered: list[str] = []

    async def wait(job: str) -> dict[str, str]:
        """Waits until the test lets it go."""
        entered.append(job)
        if len(entered) == 12:
            all_in.set()
        await release.wait()
        return {"job": job}

    script = {"a": [Call("wait", {"job": "x"}), Say("done")] * 30}
    agent = LlmAgent(name="a", model=ScriptedModel(script), tools=[wait])
    # A long lease: the keeper's own loop does not renew within the test; it
    # is made to renew by hand, so no timer decides the outcome.
    runner = DurableRunner(app=agent, app_name=APP, store=store, worker_id="w1", lease=300.0)

    async def one(session: str) -> None:
        async for _ in runner.run(user_id="u", session_id=session, message="go"):
            pass

    tasks = [asyncio.create_task(one(f"s{i}")) for i in range(12)]
    try:
        await asyncio.wait_for(all_in.wait(), 60)
        assert runner.keeper.held() == 12
        counted = Counted(store, monkeypatch)
        for _ in range(2):
            results = await runner.keeper.renew_once()
            assert len(results) == 12 and all(r.ok for r in results.values())
        assert counted.names == ["run_renew_many"] * 2  # twelve drives, one statement a round
        monkeypatch.undo()
    finally:
        release.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    done = await runner.ledger.list_runs(status=RunStatus.DONE)
    assert len(done) == 12


# ------------------------------------------------------------- wake-ups


async def test_a_queued_run_is_woken_when_the_run_before_it_ends(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = runner_on(store, "w1", poll=NEVER, poll_max=NEVER)
    first = await started(runner.ledger, "s", "holder")
    second, _ = await runner.submit(user_id="u", session_id="s", message="next")
    assert second.status is RunStatus.QUEUED
    counted = Counted(store, monkeypatch)
    waiting = asyncio.create_task(runner.wait_for_turn(second))
    await asyncio.wait_for(counted.event("run_claim_queued").wait(), 30)  # tried, and waits
    assert not waiting.done()
    assert await runner.ledger.finish(first.lease, RunStatus.DONE)
    claimed = await asyncio.wait_for(waiting, 60)
    assert claimed.run_id == second.run_id and claimed.status is RunStatus.RUNNING
    assert counted.names.count("run_claim_queued") == 2
    assert store.wakeups.waiting() == 0


async def test_a_queued_run_starts_by_polling_when_no_wake_up_reaches_it(
    store_url: str, store: Store
) -> None:
    # Another store object stands for another process: its in-process
    # wake-ups never reach ours, and PostgreSQL's NOTIFY is off.
    url = store_url + ("?notify=off" if store_url.startswith("postgresql") else "")
    async with open_store(url) as elsewhere:
        runner = runner_on(store, "w1", poll=0.05, poll_max=0.2)
        other = RunLedger(elsewhere)
        first = await started(other, "s", "holder")
        second, _ = await runner.submit(user_id="u", session_id="s", message="next")
        waiting = asyncio.create_task(runner.wait_for_turn(second))
        await asyncio.sleep(0.3)  # a few claims tried and refused
        assert not waiting.done()
        assert await other.finish(first.lease, RunStatus.DONE)
        claimed = await asyncio.wait_for(waiting, 60)
        assert claimed.run_id == second.run_id


async def test_a_queued_run_is_taken_as_lost_when_its_lease_is(store: Store) -> None:
    runner = runner_on(store, "w1", poll=NEVER, poll_max=NEVER)
    await started(runner.ledger, "s", "holder")
    second, _ = await runner.submit(user_id="u", session_id="s", message="next")
    waiting = asyncio.create_task(runner.wait_for_turn(second))
    await asyncio.sleep(0.2)
    # An operator cancels the queued run: it ends CANCELLED at once.
    await runner.ledger.cancel(second.run_id, by="ops")
    await runner.keeper.renew_once()  # the heartbeat finds it gone
    with pytest.raises(errors.RunCancelled, match="was cancelled: cancelled by ops"):
        await asyncio.wait_for(waiting, 60)


CHILD = """
import asyncio, sys
from durable_adk.tables.ledger import Lease, RunLedger, RunStatus
from durable_adk.store import open_store

async def main(url, run_id, owner, epoch):
    async with open_store(url) as store:
        ledger = RunLedger(store)
        print("ready", flush=True)
        sys.stdin.readline()
        ok = await ledger.finish(Lease(run_id, owner, int(epoch)), RunStatus.DONE)
        print("finished" if ok else "lost", flush=True)

asyncio.run(main(*sys.argv[1:]))
"""


@contextlib.asynccontextmanager
async def child_holding(store_url: str, run: Run) -> AsyncIterator[subprocess.Popen[str]]:
    """A real process that finishes ``run`` when told to (a line on its stdin)."""
    proc = spawn(
        [sys.executable, "-c", CHILD, store_url, run.run_id, run.owner or "", str(run.epoch)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.to_thread(proc.stdout.readline)
        assert line.strip() == "ready", line
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


async def test_a_run_ending_in_another_process_starts_the_queued_one(
    store_url: str, store: Store
) -> None:
    postgres = store_url.startswith("postgresql")
    # PostgreSQL: NOTIFY wakes it (polling could not, in ten minutes); SQLite: polling.
    runner = runner_on(store, "w1", poll=NEVER if postgres else 0.05, poll_max=NEVER)
    if postgres:
        await asyncio.wait_for(store.listening.wait(), 30)  # type: ignore[attr-defined]
    first = await started(runner.ledger, "s", "holder")
    second, _ = await runner.submit(user_id="u", session_id="s", message="next")
    waiting = asyncio.create_task(runner.wait_for_turn(second))
    async with child_holding(store_url, first) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        await asyncio.sleep(0.2)
        assert not waiting.done()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        said = await asyncio.to_thread(proc.stdout.readline)
        assert said.strip() == "finished"
        claimed = await asyncio.wait_for(waiting, 60)
    assert claimed.run_id == second.run_id and claimed.epoch == 1


# ------------------------------------------------------------- the lease pool


async def test_heartbeats_renew_while_slow_readers_hold_every_main_connection(
    store_url: str,
) -> None:
    postgres = store_url.startswith("postgresql")
    url = store_url + ("?pool_size=2&acquire_timeout=1" if postgres else "")
    async with open_store(url) as store:
        ledger = RunLedger(store, lease_seconds=300)
        runs = [await started(ledger, f"s{i}", "w1") for i in range(5)]
        queued = await ledger.submit(
            app_name=APP,
            user_id="u",
            session_id="free",
            request={"role": "user", "parts": [{"text": "hi"}]},
            owner="w1",
        )
        held = threading.Event()
        free = threading.Event()
        async with contextlib.AsyncExitStack() as stack:
            if postgres:
                # Every connection of the main pool taken, as slow event-stream readers would.
                for _ in range(2):
                    await stack.enter_async_context(_busy_pool(store))
                with pytest.raises(errors.StoreUnavailable):  # the main pool is truly full
                    await store.now()
            else:
                # SQLite's readers run on its database thread: block it with a slow read.
                def slow_read() -> None:
                    held.set()
                    free.wait(60)

                blocked = asyncio.get_running_loop().run_in_executor(
                    store._executor,  # type: ignore[attr-defined]
                    slow_read,
                )
                await asyncio.to_thread(held.wait, 30)
            results = await asyncio.wait_for(ledger.renew_many("w1", [r.lease for r in runs]), 30)
            assert all(r.ok for r in results.values())
            assert (await ledger.claim_queued(queued.run_id, "w1")) is not None
            if not postgres:
                free.set()
                await blocked


@pytest.mark.parametrize("backend", ["postgresql"])
async def test_a_heartbeat_is_not_kept_waiting_by_claims_on_the_lease_pool(store_url: str) -> None:
    from durable_adk.store.lanes import CLAIM

    async with open_store(store_url + "?lease_pool_size=2&acquire_timeout=30") as store:
        ledger = RunLedger(store, lease_seconds=300)
        runs = [await started(ledger, f"s{i}", "w1") for i in range(3)]
        queued = await ledger.submit(
            app_name=APP,
            user_id="u",
            session_id="s0",
            request={"role": "user", "parts": [{"text": "again"}]},
            owner="w1",
        )
        release = asyncio.Event()

        async def slow_claim(conn: Any) -> None:
            await conn.execute("SELECT 1")
            await release.wait()  # a claim that holds its connection until told

        # A claim holds one of the two lease connections; a second claim must
        # wait for it even though the other connection is free, which keeps
        # that one for the heartbeat.
        holding = asyncio.create_task(
            store._with_connection(slow_claim, lease=True, kind=CLAIM)  # type: ignore[attr-defined]
        )
        await asyncio.sleep(0.2)
        second_claim = asyncio.create_task(ledger.claim_queued(queued.run_id, "w1"))
        renewal = asyncio.create_task(ledger.renew_many("w1", [r.lease for r in runs]))
        done, _ = await asyncio.wait(
            {second_claim, renewal}, timeout=20, return_when=asyncio.FIRST_COMPLETED
        )
        assert done == {renewal}  # renewed while the claims still wait
        assert not second_claim.done()
        assert all(r.ok for r in renewal.result().values())
        release.set()
        await holding
        assert await asyncio.wait_for(second_claim, 20) is None  # s0 is busy: not its turn


@pytest.mark.parametrize("backend", ["postgresql"])
async def test_a_burst_of_submissions_waits_its_turn_instead_of_failing(store_url: str) -> None:
    """Far more submissions than the pool serves within acquire_timeout: all are taken in,
    and a run's own writes sent during the burst are served before the intake still waiting.

    The timeout is 1 s, not less: on a loaded machine one commit may take a few tenths
    of a second, and a pool none of whose connections comes back for the timeout is
    rightly a fault (``tests/unit/test_lanes.py`` checks that a queue outlasting the
    timeout is not, deterministically)."""
    async with open_store(store_url + "?pool_size=2&acquire_timeout=1") as store:
        # Both connections opened first: the timeout also bounds making a connection.
        async with _busy_pool(store), _busy_pool(store):
            pass
        ledger = RunLedger(store, lease_seconds=300)
        first = await started(ledger, "burst-first", "w1")
        order: list[str] = []

        async def submit(i: int) -> None:
            await started(ledger, f"burst-{i}", "w1")
            order.append("intake")

        async def own_write() -> None:
            assert await ledger.get(first.run_id) is not None
            order.append("urgent")

        burst = [asyncio.create_task(submit(i)) for i in range(1500)]
        await asyncio.sleep(0.05)  # the burst is queued for the two connections
        writes = [asyncio.create_task(own_write()) for _ in range(5)]
        # About 1.1-1.3 s on a quiet machine: the queue outlasts the timeout.
        await asyncio.wait_for(asyncio.gather(*burst, *writes), 300)
        assert len(order) == 1505
        # The writes were served as soon as a connection came back, not after the burst.
        assert max(i for i, kind in enumerate(order) if kind == "urgent") < 750
        rows = await ledger.list_runs(limit=2000)
        assert len(rows) == 1501


async def test_a_leases_local_deadline_counts_from_when_its_claim_was_sent(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim whose answer comes late (a long wait for a connection, a slow round
    trip) is trusted from when it was sent: the database's lease began before the
    answer arrived, so trusting it from the answer would outlive it."""
    late = 2.0
    real_fetch = store.fetch

    async def slow_answer(query: str, params: Any = None) -> Any:
        rows = await real_fetch(query, params)
        if query in ("run_start", "run_claim_queued"):
            await asyncio.sleep(late)  # the statement ran; its answer is late
        return rows

    seen: list[float] = []

    def answer(request: Any) -> Say:
        # The model call runs under the drive's fence (its lease, as trusted now).
        fence = current_fence()
        if fence is not None and not seen:
            seen.append(fence.trusted_until)
        return Say("ok")

    monkeypatch.setattr(store, "fetch", slow_answer)
    runner = DurableRunner(
        app=LlmAgent(name="a", model=ScriptedModel({"a": [answer]})),
        app_name=APP,
        store=store,
        worker_id="w1",
        queue_poll=0.05,
        lease=6.0,
    )
    sent = time.monotonic()
    run, content = await runner.submit(user_id="u", session_id="late", message="hi")
    assert run.claim_sent is not None and sent <= run.claim_sent <= sent + 0.5
    assert time.monotonic() - run.claim_sent >= late
    async with contextlib.aclosing(runner.drive(run, content, resume=False)) as events:
        async for _ in events:
            pass
    # Before the first renewal (2 s of 6): the deadline of the claim as sent.
    assert seen == [pytest.approx(trust_from(run.claim_sent, 6.0))]
    # A row only read carries no claim: nothing to count from.
    read = await runner.ledger.get(run.run_id)
    assert read is not None and read.claim_sent is None
    assert dataclasses.replace(read, claim_sent=1.0) == read  # not part of the row's value


@pytest.mark.parametrize("backend", ["postgresql"])
async def test_a_claim_that_waits_for_a_connection_is_trusted_from_when_it_left(
    store_url: str,
) -> None:
    """The wait for a pooled connection happens before the database grants the lease,
    so it does not eat into the lease: the claim counts from when its statement left."""
    async with open_store(store_url + "?pool_size=1&acquire_timeout=30") as store:
        ledger = RunLedger(store, lease_seconds=300)
        release = asyncio.Event()
        taken = asyncio.Event()

        async def hold(conn: Any) -> None:
            taken.set()
            await release.wait()

        holder = asyncio.create_task(store._with_connection(hold))  # type: ignore[attr-defined]
        await taken.wait()
        asked = time.monotonic()
        claim = asyncio.create_task(started(ledger, "waited", "w1"))
        await asyncio.sleep(1.0)
        assert not claim.done()  # waiting for the one connection
        freed = time.monotonic()
        release.set()
        await holder
        run = await claim
        assert run.claim_sent is not None and run.claim_sent >= freed > asked + 0.9
        rows, sent = await store.fetch_sent("db_now")
        assert rows and sent <= time.monotonic()


@pytest.mark.parametrize("backend", ["postgresql"])
async def test_a_claim_blocked_between_its_prepare_and_its_send_is_trusted_from_the_send(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement new to a connection is prepared in a round trip of its own first.
    An event loop blocked between that round trip and the statement's send (a sync
    tool on the loop) delays the send, so the lease runs from the send, not from
    before the prepare: noted earlier, a claim blocked longer than its lease was
    trusted for a deadline already past and lost at once, though nobody took it."""
    import asyncpg.connection

    prepare = asyncpg.connection.Connection._get_statement
    block = {"seconds": 0.0, "ended": 0.0}

    async def prepared_then_blocked(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        statement = await prepare(self, query, *args, **kwargs)
        if block["seconds"] and "INSERT INTO runs" in query:  # the claim's (run_start's) own
            time.sleep(block["seconds"])  # noqa: ASYNC251 -- the loop held, as a blocking tool holds it
            block["ended"] = time.monotonic()
        return statement

    monkeypatch.setattr(asyncpg.connection.Connection, "_get_statement", prepared_then_blocked)
    async with open_store(store_url + "?pool_size=1") as store:
        ledger = RunLedger(store, lease_seconds=1.0)
        block["seconds"] = 1.5  # longer than the lease: its deadline passed if counted before
        run = await started(ledger, "blocked", "w1")
        assert block["ended"], "the claim's statement was not prepared on this connection"
        assert run.claim_sent is not None and run.claim_sent >= block["ended"]
        assert time.monotonic() < trust_from(run.claim_sent, 1.0)  # trusted on its answer
        block["seconds"] = 0.0
        # Prepared once per connection: the next claim sends at once.
        again = await started(ledger, "again", "w1")
        assert again.claim_sent is not None and again.claim_sent > run.claim_sent
        held = store._prepared  # type: ignore[attr-defined]
        assert held and all(held.values())
    # A closed connection's statements are let go with it (each holds its connection).
    await asyncio.sleep(0)  # the termination listeners run on the loop
    assert held == {}


@pytest.mark.parametrize("backend", ["postgresql"])
async def test_a_claim_prepared_before_a_deploy_migrated_its_table_is_prepared_again(
    store_url: str,
) -> None:
    """A deploy's migration adds a column to ``runs`` while this worker runs: a claim
    prepared before it returns another row type now, which the server refuses
    before running it; the store prepares it again, once, and the claim is made."""
    import asyncpg

    from durable_adk.store.postgres import split_url_options

    async with open_store(store_url + "?pool_size=1") as store:
        ledger = RunLedger(store, lease_seconds=30)
        await started(ledger, "before", "w1")  # prepared on the one connection
        other = await asyncpg.connect(split_url_options(store_url)[0])
        try:
            await other.execute("ALTER TABLE runs ADD COLUMN added_by_a_deploy integer")
        finally:
            await other.close()
        run = await started(ledger, "after", "w1")
        assert run.session_id == "after" and run.claim_sent is not None


@pytest.mark.parametrize("backend", ["postgresql"])
async def test_a_claim_whose_answer_meets_a_changed_type_is_not_sent_again(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncpg raises OutdatedSchemaCacheError while decoding a statement's answer,
    after the server ran it (a type changed since the connection cached it): the
    claim fails as an outage and is not sent a second time, since it may have acted.
    The next claim is prepared afresh on a new connection."""
    import asyncpg.prepared_stmt

    fetch = asyncpg.prepared_stmt.PreparedStatement.fetch
    sent: list[str] = []

    async def ran_then_outdated(self: Any, *args: Any, **kwargs: Any) -> Any:
        rows = await fetch(self, *args, **kwargs)  # the server ran it
        sent.append(self.get_query())
        if len(sent) == 1:
            self._state.mark_closed()  # as asyncpg leaves it
            raise asyncpg.exceptions.OutdatedSchemaCacheError("a type changed")
        return rows

    monkeypatch.setattr(asyncpg.prepared_stmt.PreparedStatement, "fetch", ran_then_outdated)
    async with open_store(store_url + "?pool_size=1") as store:
        ledger = RunLedger(store, lease_seconds=30)
        with pytest.raises(errors.StoreUnavailable, match="a type changed"):
            await started(ledger, "outdated", "w1")
        assert len(sent) == 1, "the claim was sent again after it ran"
        run = await started(ledger, "next", "w1")
        assert run.session_id == "next" and len(sent) == 2


def test_pool_sizes_and_notify_come_from_the_url_and_are_checked() -> None:
    from durable_adk.store.postgres import PostgresStore, split_url_options

    dsn, options = split_url_options(
        "postgresql://u@h/db?pool_size=20&lease_pool_size=3&notify=off&sslmode=disable"
    )
    assert options == {"pool_size": 20, "lease_pool_size": 3, "notify": False}
    assert dsn == "postgresql://u@h/db?sslmode=disable"
    store = PostgresStore("postgresql://u@h/db?pool_size=20&lease_pool_size=3&notify=off")
    assert (store._max_size, store._lease_size, store.notify) == (20, 3, False)
    assert PostgresStore("postgresql://u@h/db").notify is True
    for bad in ("pool_size=0", "lease_pool_size=two", "notify=maybe", "pool_size=1.5"):
        with pytest.raises(errors.InvalidArgument):
            PostgresStore(f"postgresql://u@h/db?{bad}")
    with pytest.raises(errors.InvalidArgument):
        PostgresStore("postgresql://u@h/db", lease_pool_size=0)


async def test_queue_polls_are_checked(store: Store) -> None:
    for first, most in ((0.0, 1.0), (3.0, 2.0), (-1.0, 2.0)):
        with pytest.raises(errors.InvalidArgument):
            runner_on(store, "w1", poll=first, poll_max=most)
    agent = LlmAgent(name="a", model=ScriptedModel({"a": []}))
    slow = DurableRunner(app=agent, app_name=APP, store=store, queue_poll=5.0)
    assert (slow.policy.queue_poll, slow.policy.queue_poll_max) == (5.0, 5.0)  # a long first poll


def busy_app(store: Store, gate: asyncio.Event, seen: dict[str, int], **kwargs: Any) -> Any:
    """A runner whose one tool counts how many drives are inside it at once."""

    async def work(item: str) -> dict[str, str]:
        """Works on an item."""
        seen["now"] += 1
        seen["most"] = max(seen["most"], seen["now"])
        seen["calls"] += 1
        try:
            await asyncio.wait_for(gate.wait(), 60)
            await asyncio.sleep(0.01)
        finally:
            seen["now"] -= 1
        return {"done": item}

    model = ScriptedModel({"a": [Call("work", {"item": "x"}), Say("ok")] * 20})
    agent = LlmAgent(name="a", model=model, tools=[work])
    return DurableRunner(app=agent, app_name=APP, store=store, **kwargs)


async def test_admission_bounds_the_drives_running_at_once_and_every_run_ends(
    store: Store,
) -> None:
    from durable_adk import Admission

    gate, seen = asyncio.Event(), {"now": 0, "most": 0, "calls": 0}
    runner = busy_app(
        store, gate, seen, admission=Admission(adaptive=False, max_active=2, min_active=1)
    )

    async def turn(session: str) -> None:
        async for _ in runner.run(user_id="u", session_id=session, message="go"):
            pass

    turns = [asyncio.create_task(turn(f"s{i}")) for i in range(8)]
    deadline = time.monotonic() + 60
    # The first two may reach the model before the last submissions commit.
    while seen["now"] < 2 or runner.admission.waiting < 6:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    # Every run is on the ledger and holds its lease; two run ADK, six wait their turn.
    runs = await runner.ledger.list_runs()
    assert len(runs) == 8 and {r.status for r in runs} == {RunStatus.RUNNING}
    assert runner.admission.active == 2 and runner.admission.waiting == 6
    gate.set()
    await asyncio.wait_for(asyncio.gather(*turns), 60)
    assert seen["most"] == 2 and seen["calls"] == 8
    assert {r.status for r in await runner.ledger.list_runs()} == {RunStatus.DONE}
    await runner.aclose()


async def test_a_run_cancelled_while_it_waits_for_admission_ends_without_running(
    store: Store,
) -> None:
    from durable_adk import Admission

    gate, seen = asyncio.Event(), {"now": 0, "most": 0, "calls": 0}
    runner = busy_app(
        store, gate, seen, admission=Admission(adaptive=False, max_active=1, min_active=1)
    )

    async def turn(session: str) -> None:
        async for _ in runner.run(user_id="u", session_id=session, message="go"):
            pass

    first = asyncio.create_task(turn("s1"))
    deadline = time.monotonic() + 60
    while seen["now"] < 1:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    second = asyncio.create_task(turn("s2"))
    while runner.admission.waiting < 1:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    (waiting,) = [r for r in await runner.ledger.list_runs() if r.session_id == "s2"]
    outcome = await runner.cancel(waiting.run_id, by="ops", reason="not needed")
    assert "RUNNING" in outcome.message  # its owner is this runner: stopped at once
    with pytest.raises(errors.RunCancelled):
        await asyncio.wait_for(second, 30)
    ended = await runner.ledger.get(waiting.run_id)
    assert ended is not None and ended.status is RunStatus.CANCELLED
    assert seen["calls"] == 1  # its tool never ran
    gate.set()
    await asyncio.wait_for(first, 60)
    assert (await runner.ledger.list_runs(status=RunStatus.DONE))[0].session_id == "s1"
    with pytest.raises(errors.NotFound, match="of app"):
        await runner.cancel("run-nope")
    await runner.aclose()


async def test_a_pinned_session_stays_cached_beyond_the_cache_size(store: Store) -> None:
    from durable_adk.adk.services.sessions import DurableSessionService

    sessions = DurableSessionService(store, cache_sessions=2)
    keys = [(APP, "u", f"c{i}") for i in range(5)]
    sessions.pin(keys[0])
    sessions.pin(keys[0])  # pins nest
    for _, user, session in keys:
        await sessions.create_session(app_name=APP, user_id=user, session_id=session)
        await sessions.get_session(app_name=APP, user_id=user, session_id=session)
    assert sessions.cached_events(keys[0]) is not None  # held by a run: kept
    assert sessions.cached_events(keys[1]) is None  # least recently used: dropped
    assert all(sessions.cached_events(k) is not None for k in keys[3:])
    sessions.unpin(keys[0])
    assert sessions.cached_events(keys[0]) is not None  # one pin left
    sessions.unpin(keys[0])  # a run has just ended on it: the most recently used
    await sessions.get_session(app_name=APP, user_id="u", session_id="c1")
    assert sessions.cached_events(keys[0]) is not None
    await sessions.get_session(app_name=APP, user_id="u", session_id="c2")
    assert sessions.cached_events(keys[0]) is None  # unpinned and oldest now: dropped


async def test_a_thousand_held_sessions_are_not_walked_on_every_eviction(store: Store) -> None:
    """With most cached sessions held by live runs, an eviction never walks the
    held ones: a few checks per session cached (was: every session cached
    walked every older held one, a thousand checks each)."""
    from durable_adk.adk.services.sessions import DurableSessionService

    class CountedPins(dict[Any, int]):
        checks = 0

        def __contains__(self, key: object) -> bool:
            CountedPins.checks += 1
            return super().__contains__(key)

    sessions = DurableSessionService(store, cache_sessions=4)
    sessions._pins = CountedPins()
    held = [(APP, "u", f"held-{i}") for i in range(1000)]
    for pk, key in enumerate(held):
        sessions.pin(key)
        sessions.adopt_created(key, pk=pk, app_state=None, user_state=None, created_at=0.0)
    CountedPins.checks = 0
    for pk in range(1000):
        key = (APP, "u", f"free-{pk}")
        sessions.adopt_created(key, pk=10_000 + pk, app_state=None, user_state=None, created_at=0.0)
    assert CountedPins.checks < 3 * 1000, CountedPins.checks
    assert all(sessions.cached_events(k) is not None for k in held)
    free = [(APP, "u", f"free-{i}") for i in range(1000)]
    assert [k for k in free if sessions.cached_events(k) is not None] == free[-4:]


async def test_a_burst_of_runs_keeps_every_claimed_session_cached_until_its_drive_ends(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thirty runs submitted at once with room for four sessions in the cache: each
    session is pinned from the moment its run is claimed, so no drive reads its log
    back from the store (a run's own session is never evicted under it)."""
    from durable_adk import Admission
    from durable_adk.adk.services.sessions import DurableSessionService

    counted = Counted(store, monkeypatch)
    gate, seen = asyncio.Event(), {"now": 0, "most": 0, "calls": 0}
    runner = busy_app(
        store,
        gate,
        seen,
        session_service=DurableSessionService(store, cache_sessions=4),
        admission=Admission(adaptive=False, max_active=2, min_active=1),
    )

    async def turn(session: str) -> None:
        async for _ in runner.run(user_id="u", session_id=session, message="go"):
            pass

    turns = [asyncio.create_task(turn(f"burst-{i}")) for i in range(30)]
    deadline = time.monotonic() + 60
    while seen["most"] < 2:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    gate.set()
    await asyncio.wait_for(asyncio.gather(*turns), 120)
    assert seen["calls"] == 30
    assert counted.names.count("load_session_tail") == 0, counted.names.count("load_session_tail")
    assert not runner.sessions._pins  # every pin was given back
    await runner.aclose()


async def queued_behind_a_held_drive(store: Store) -> tuple[Any, ...]:
    """Two runs of one session: the first held inside its tool, the second queued behind it.

    Returns the runner, the tool's gate, its counters, the count of queued claims
    (``run_claim_queued`` statements) and the two callers' tasks.
    """
    gate, seen = asyncio.Event(), {"now": 0, "most": 0, "calls": 0}
    runner = busy_app(store, gate, seen, queue_poll=0.02, queue_poll_max=0.05)
    claims = [0]
    inner = store.fetch

    async def counting(query: str, params: Any = None) -> Any:
        if query == "run_claim_queued":
            claims[0] += 1
        return await inner(query, params)

    store.fetch = counting  # type: ignore[method-assign]

    async def turn() -> None:
        async for _ in runner.run(user_id="u", session_id="same", message="go"):
            pass

    first = asyncio.create_task(turn())
    deadline = time.monotonic() + 60
    while seen["now"] < 1:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    return runner, gate, seen, claims, first, asyncio.create_task(turn())


async def test_the_last_pin_of_a_session_wakes_the_runs_queued_behind_it(store: Store) -> None:
    """However many holders pinned it (the caller of ``run`` and its drive), the
    queued runs behind it are woken when the last one lets go, not before."""
    from durable_adk.adk.services.sessions import DurableSessionService
    from durable_adk.store.wakeups import session_key

    sessions = DurableSessionService(store)
    key = (APP, "u", "held")
    sessions.pin(key)
    sessions.pin(key)
    with store.wakeups.ticket(session_key(*key)) as woken:
        sessions.unpin(key)
        assert not woken.is_set()  # still held
        sessions.unpin(key)
        assert woken.is_set()
    with store.wakeups.ticket(session_key(*key)) as woken:
        sessions.unpin(key)  # never pinned (now): nothing to wake
        assert not woken.is_set()


async def test_a_queued_run_behind_a_drive_of_this_process_hardly_polls(store: Store) -> None:
    # Its turn comes with a wake-up from this process; polling is only a safety
    # net then: LOCAL_MAX_POLL (30 s) between claims, whatever queue_poll_max says.
    runner, gate, seen, claims, first, second = await queued_behind_a_held_drive(store)
    await asyncio.sleep(3.0)  # at queue_poll_max alone: some 60 claim attempts
    assert claims[0] <= 2, claims[0]  # one before the first drive held the session, at most
    gate.set()
    await asyncio.wait_for(asyncio.gather(first, second), 30)  # woken at once
    assert seen["calls"] == 2
    await runner.aclose()


async def test_a_queued_run_is_woken_when_the_drive_ahead_ends_without_finishing(
    store: Store,
) -> None:
    """A drive ahead that loses its lease writes no finish, so nothing else wakes the
    queued run: the drive's own end does, and the run goes back to polling (the run
    ahead is another worker's now, whose end this process may not hear of)."""
    runner, gate, _seen, claims, first, second = await queued_behind_a_held_drive(store)
    await asyncio.sleep(1.0)
    before = claims[0]
    assert before <= 2
    driver = runner.path.driver
    (drive,) = driver._drives.values()
    driver._lose(drive, "lost for the test")
    with pytest.raises(errors.Fenced):
        await asyncio.wait_for(first, 30)
    await asyncio.sleep(1.0)  # woken, then polling at queue_poll_max (0.05 s)
    assert claims[0] >= before + 5, (before, claims[0])
    assert not second.done()  # the run ahead is still RUNNING on the ledger
    second.cancel()
    # This test once hung past the suite's per-test limit (PostgreSQL, CI,
    # cause not found yet): each step is bounded so that a hang names its step.
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(second, 30)
    gate.set()
    await asyncio.wait_for(runner.aclose(), 60)
