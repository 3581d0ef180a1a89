"""RunLedger.start: the session made if missing, the run recorded and claimed, in one unit.

On both backends; the concurrent case only on PostgreSQL, where several
connections really start at the same instant.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.sessions.session import Session
from google.genai import types

from durable_adk import errors
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.store import Store
from durable_adk.tables.ledger import RunLedger, RunStatus, Started
from durable_adk.testing import Say, ScriptedModel

REQUEST = {"role": "user", "parts": [{"text": "hello"}]}


async def start(
    ledger: RunLedger,
    *,
    app_name: str = "a",
    user_id: str = "u",
    session_id: str = "s",
    owner: str = "w1",
    request: dict[str, Any] | None = None,
    now: float | None = None,
    invocation_id: str | None = None,
) -> Started:
    started = await ledger.start(
        app_name=app_name,
        user_id=user_id,
        session_id=session_id,
        request=REQUEST if request is None else request,
        owner=owner,
        now=time.time() if now is None else now,
        invocation_id=invocation_id,
    )
    assert started is not None
    return started


async def load(store: Store, app_name: str = "a", user_id: str = "u", session_id: str = "s"):
    """The session as a fresh service (no cache) reads it."""
    return await DurableSessionService(store).get_session(
        app_name=app_name, user_id=user_id, session_id=session_id
    )


def pk_of(session: Session) -> int:
    marker = session._storage_update_marker
    assert marker is not None
    return int(marker.split(":")[0])


def texts(session: Session | None) -> list[str]:
    assert session is not None
    return [e.content.parts[0].text or "" for e in session.events if e.content and e.content.parts]


# --------------------------------------------------------------- new / free


async def test_start_on_a_new_session_claims_the_run_and_makes_the_session(store: Store) -> None:
    ledger = RunLedger(store, lease_seconds=30.0, backoff_seconds=2.0)
    before = await store.now()
    started = await start(ledger, now=1_700_000_000.25, invocation_id="e-chosen")
    after = await store.now()
    run = started.run
    assert run.status is RunStatus.RUNNING
    assert (run.epoch, run.attempts, run.owner) == (1, 1, "w1")
    assert (run.app_name, run.user_id, run.session_id) == ("a", "u", "s")
    assert run.invocation_id == "e-chosen"
    assert json.loads(run.request) == REQUEST
    assert run.run_id.startswith("run-")
    assert run.finished_at is None and run.last_error is None
    # Leased on the database clock; the next recovery waits lease + backoff * 2**0.
    assert before + 30.0 - 1 <= run.lease_until <= after + 30.0 + 1
    assert run.next_attempt_at == pytest.approx(run.lease_until + 2.0, abs=1e-3)
    assert started.created_session_pk is not None and started.created_session_pk > 0
    assert started.app_state is None and started.user_state is None
    # The ledger holds exactly what start returned.
    assert await ledger.get(run.run_id) == run
    assert await ledger.list_runs() == [run]
    # The session row exists, empty, with the caller's creation time.
    session = await load(store)
    assert session is not None
    assert session.events == [] and session.state == {}
    assert session.last_update_time == 1_700_000_000.25
    assert pk_of(session) == started.created_session_pk
    listed = await DurableSessionService(store).list_sessions(app_name="a", user_id="u")
    assert [s.id for s in listed.sessions] == ["s"]


async def test_start_chooses_an_invocation_id_when_none_is_given(store: Store) -> None:
    ledger = RunLedger(store)
    one = await start(ledger, session_id="s1")
    two = await start(ledger, session_id="s2")
    assert one.run.invocation_id.startswith("e-") and two.run.invocation_id.startswith("e-")
    assert one.run.invocation_id != two.run.invocation_id
    assert one.run.run_id != two.run.run_id
    assert one.created_session_pk != two.created_session_pk


async def test_start_on_an_existing_free_session_claims_without_making_it(store: Store) -> None:
    sessions = DurableSessionService(store)
    created = await sessions.create_session(
        app_name="a", user_id="u", session_id="s", state={"k": 1}
    )
    ledger = RunLedger(store)
    started = await start(ledger, now=5.0)
    assert started.run.status is RunStatus.RUNNING
    assert (started.run.epoch, started.run.attempts) == (1, 1)
    assert started.created_session_pk is None
    session = await load(store)
    assert session is not None
    # Untouched: same row, same state, same creation time.
    assert pk_of(session) == pk_of(created)
    assert session.state == {"k": 1}
    assert session.last_update_time == created.last_update_time != 5.0


@pytest.mark.parametrize("ending", ["DONE", "FAILED", "PAUSED", "PARKED"])
async def test_a_session_whose_runs_have_ended_is_free(store: Store, ending: str) -> None:
    ledger = RunLedger(store)
    first = await start(ledger, owner="w1")
    if ending == "PARKED":
        assert await ledger.park(first.run.lease, error="gave up")
    else:
        assert await ledger.finish(first.run.lease, RunStatus(ending))
    second = await start(ledger, owner="w2")
    assert second.run.status is RunStatus.RUNNING
    assert (second.run.epoch, second.run.attempts, second.run.owner) == (1, 1, "w2")
    assert second.created_session_pk is None
    assert [r.status.value for r in await ledger.list_runs()] == ["RUNNING", ending]


async def test_other_sessions_users_and_apps_do_not_block_a_start(store: Store) -> None:
    ledger = RunLedger(store)
    await start(ledger)
    for app_name, user_id, session_id in [("a", "u", "s2"), ("a", "u2", "s"), ("b", "u", "s")]:
        other = await start(ledger, app_name=app_name, user_id=user_id, session_id=session_id)
        assert other.run.status is RunStatus.RUNNING, (app_name, user_id, session_id)
        assert other.created_session_pk is not None
    assert len(await ledger.list_runs(status=RunStatus.RUNNING)) == 4


# ------------------------------------------------------------------ queueing


async def test_start_behind_a_running_run_queues_and_is_claimed_in_order(store: Store) -> None:
    ledger = RunLedger(store)
    first = await start(ledger, owner="w1")
    second = await start(ledger, owner="w2")
    third = await start(ledger, owner="w3")
    for queued in (second, third):
        run = queued.run
        assert run.status is RunStatus.QUEUED
        assert (run.epoch, run.attempts, run.next_attempt_at) == (0, 0, 0.0)
        assert queued.created_session_pk is None
    # Nobody jumps the queue while the first runs, nor the second's place after.
    assert await ledger.claim_queued(second.run.run_id, "w2") is None
    assert await ledger.claim_queued(third.run.run_id, "w3") is None
    assert await ledger.finish(first.run.lease, RunStatus.DONE)
    assert await ledger.claim_queued(third.run.run_id, "w3") is None
    assert await ledger.claim_queued(second.run.run_id, "someone-else") is None  # not its owner
    claimed = await ledger.claim_queued(second.run.run_id, "w2")
    assert claimed is not None
    assert (claimed.status, claimed.epoch, claimed.attempts) == (RunStatus.RUNNING, 1, 1)
    assert await ledger.claim_queued(third.run.run_id, "w3") is None
    assert await ledger.finish(claimed.lease, RunStatus.DONE)
    last = await ledger.claim_queued(third.run.run_id, "w3")
    assert last is not None and last.status is RunStatus.RUNNING and last.epoch == 1
    statuses = {r.run_id: r.status for r in await ledger.list_runs()}
    assert statuses == {
        first.run.run_id: RunStatus.DONE,
        second.run.run_id: RunStatus.DONE,
        third.run.run_id: RunStatus.RUNNING,
    }


async def test_start_behind_a_queued_run_queues(store: Store) -> None:
    """A QUEUED run alone (its caller waiting for its turn) also keeps the session busy."""
    ledger = RunLedger(store)
    await DurableSessionService(store).create_session(app_name="a", user_id="u", session_id="s")
    waiting = await ledger.submit(
        app_name="a", user_id="u", session_id="s", request=REQUEST, owner="w1"
    )
    later = await start(ledger, owner="w2")
    assert later.run.status is RunStatus.QUEUED and later.run.epoch == 0
    assert later.created_session_pk is None
    assert await ledger.claim_queued(later.run.run_id, "w2") is None  # the first is ahead
    head = await ledger.claim_queued(waiting.run_id, "w1")
    assert head is not None and head.status is RunStatus.RUNNING
    assert await ledger.finish(head.lease, RunStatus.DONE)
    claimed = await ledger.claim_queued(later.run.run_id, "w2")
    assert claimed is not None and (claimed.epoch, claimed.attempts) == (1, 1)


async def test_a_queued_start_whose_caller_died_is_recovered_in_turn(store: Store) -> None:
    ledger = RunLedger(store, backoff_seconds=0)
    first = await start(ledger, owner="w1")
    queued = await start(ledger, owner="dead")
    assert queued.run.status is RunStatus.QUEUED
    await ledger.backdate(queued.run.run_id, 3600)
    assert await ledger.claim_expired("sweeper") == []  # the first still runs, lease valid
    assert await ledger.finish(first.run.lease, RunStatus.DONE)
    (taken,) = await ledger.claim_expired("sweeper")
    assert taken.run_id == queued.run.run_id
    assert (taken.owner, taken.epoch, taken.attempts) == ("sweeper", 1, 1)


async def test_an_expired_started_run_is_recovered_with_a_new_epoch(store: Store) -> None:
    ledger = RunLedger(store, backoff_seconds=0)
    started = await start(ledger, owner="dead")
    assert await ledger.claim_expired("sweeper") == []  # leased
    await ledger.backdate(started.run.run_id, 3600)
    (taken,) = await ledger.claim_expired("sweeper")
    assert (taken.run_id, taken.owner, taken.epoch, taken.attempts) == (
        started.run.run_id,
        "sweeper",
        2,
        2,
    )
    assert not (await ledger.renew(started.run.lease)).ok  # the dead worker is fenced
    assert not await ledger.finish(started.run.lease, RunStatus.DONE)


# -------------------------------------------------------------- shared state


async def test_start_returns_the_app_and_user_state(store: Store) -> None:
    sessions = DurableSessionService(store)
    await sessions.create_session(
        app_name="a",
        user_id="u",
        session_id="earlier",
        state={"app:plan": "gold", "user:lang": "nb", "local": 1},
    )
    ledger = RunLedger(store)
    mine = await start(ledger, session_id="new")
    assert json.loads(mine.app_state or "null") == {"plan": "gold"}
    assert json.loads(mine.user_state or "null") == {"lang": "nb"}
    other_user = await start(ledger, user_id="u2", session_id="new")
    assert json.loads(other_user.app_state or "null") == {"plan": "gold"}
    assert other_user.user_state is None
    other_app = await start(ledger, app_name="b", session_id="new")
    assert other_app.app_state is None and other_app.user_state is None
    # Also for a session that already existed (and while the session is busy).
    again = await start(ledger, session_id="earlier")
    busy = await start(ledger, session_id="earlier", owner="w2")
    assert busy.run.status is RunStatus.QUEUED
    for started in (again, busy):
        assert json.loads(started.app_state or "null") == {"plan": "gold"}
        assert json.loads(started.user_state or "null") == {"lang": "nb"}
    # The new session carries the shared state, and none of the other session's own.
    session = await load(store, session_id="new")
    assert session is not None and session.state == {"app:plan": "gold", "user:lang": "nb"}


# ----------------------------------------------------------------- bad input

BAD_INPUTS: list[dict[str, Any]] = [
    {"app_name": ""},
    {"user_id": ""},
    {"session_id": ""},
    {"owner": ""},
    {"session_id": 42},
    {"session_id": None},
    {"user_id": None},
    {"app_name": b"a"},
    {"owner": ["w1"]},
]


async def test_bad_input_is_refused_and_writes_nothing(store: Store) -> None:
    ledger = RunLedger(store)
    good: dict[str, Any] = {
        "app_name": "a",
        "user_id": "u",
        "session_id": "s",
        "owner": "w1",
        "request": REQUEST,
        "now": 1.0,
    }
    for bad in BAD_INPUTS:
        with pytest.raises(errors.InvalidArgument):
            await ledger.start(**{**good, **bad})
    assert await ledger.list_runs() == []
    listed = await DurableSessionService(store).list_sessions(app_name="a")
    assert listed.sessions == []
    assert await load(store) is None
    # The same call with good arguments still works: nothing half-written is in the way.
    ok = await ledger.start(**good)
    assert ok is not None and ok.run.status is RunStatus.RUNNING
    assert ok.created_session_pk is not None


@pytest.mark.parametrize(
    "bad",
    [{"session_id": "s" * 513}, {"user_id": "u\x00v"}, {"app_name": "a" * 600}],
    ids=["long-session-id", "nul-in-user-id", "long-app-name"],
)
async def test_ids_the_session_service_refuses_are_refused_by_start(
    store: Store, bad: dict[str, Any]
) -> None:
    """start makes a session row: it must not make one DurableSessionService cannot read
    (before start, DurableRunner.submit read the session first, which refused these ids)."""
    ledger = RunLedger(store)
    args: dict[str, Any] = {
        "app_name": "a",
        "user_id": "u",
        "session_id": "s",
        "owner": "w1",
        "request": REQUEST,
        "now": 1.0,
        **bad,
    }
    with pytest.raises(errors.InvalidArgument):
        await ledger.start(**args)
    assert await ledger.list_runs() == []


# ------------------------------------------------------------ with the runner


def two_turn_runner(store: Store, worker: str) -> DurableRunner:
    agent = LlmAgent(name="assistant", model=ScriptedModel({"assistant": [Say("one"), Say("two")]}))
    return DurableRunner(app=agent, app_name="shop", store=store, worker_id=worker)


async def test_runner_refuses_a_session_id_the_session_service_refuses_before_writing(
    store: Store,
) -> None:
    runner = two_turn_runner(store, "w1")
    with pytest.raises(errors.InvalidArgument):
        async for _ in runner.run(user_id="u", session_id="s" * 513, message="hi"):
            pass
    assert await runner.ledger.list_runs() == []
    assert (await DurableSessionService(store).list_sessions(app_name="shop")).sessions == []


async def test_a_session_made_by_start_works_with_durable_runner(store: Store) -> None:
    runner = two_turn_runner(store, "w1")
    content = types.Content(role="user", parts=[types.Part(text="first")])
    started = await runner.ledger.start(
        app_name="shop",
        user_id="u",
        session_id="s",
        request=content.model_dump(mode="json", exclude_none=True),
        owner="w1",
        now=time.time(),
    )
    assert started is not None and started.created_session_pk is not None
    claimed = await runner.wait_for_turn(started.run)
    assert claimed is started.run  # already ours: no second claim
    async for _ in runner.drive(claimed, content, resume=False):
        pass
    done = await runner.ledger.get(started.run.run_id)
    assert done is not None and done.status is RunStatus.DONE and done.epoch == 1
    assert texts(await load(store, "shop")) == ["first", "one"]
    # Another worker, with its own session cache, takes the next turn.
    other = two_turn_runner(store, "w2")
    async for _ in other.run(user_id="u", session_id="s", message="second"):
        pass
    session = await load(store, "shop")
    assert texts(session) == ["first", "one", "second", "two"]
    assert session is not None and pk_of(session) == started.created_session_pk
    runs = await runner.ledger.list_runs()
    assert [(r.status, r.owner, r.epoch, r.attempts) for r in runs] == [
        (RunStatus.DONE, "w2", 1, 1),
        (RunStatus.DONE, "w1", 1, 1),
    ]


async def test_submit_claims_a_new_run_at_once_and_queues_behind_a_busy_one(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = two_turn_runner(store, "w1")
    asked: list[str] = []
    original = store.fetch

    async def counted(query: str, params: Any = None) -> Any:
        asked.append(query)
        return await original(query, params)

    monkeypatch.setattr(store, "fetch", counted)
    first, content = await runner.submit(user_id="u", session_id="s", message="first")
    assert asked == ["run_start"]  # one unit of work before ADK
    assert first.status is RunStatus.RUNNING and first.owner == "w1"
    assert (first.epoch, first.attempts) == (1, 1)
    assert runner.sessions.cached_events(("shop", "u", "s")) == []
    asked.clear()
    assert await runner.wait_for_turn(first) is first
    assert asked == []  # returned at once, no claim
    # A second turn of the same session, submitted while the first holds it, waits.
    second, second_content = await runner.submit(user_id="u", session_id="s", message="second")
    assert second.status is RunStatus.QUEUED and second.epoch == 0
    waiting = asyncio.create_task(runner.wait_for_turn(second))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    async for _ in runner.drive(first, content, resume=False):
        pass
    claimed = await asyncio.wait_for(waiting, timeout=30)
    assert claimed.run_id == second.run_id
    assert (claimed.status, claimed.epoch, claimed.attempts) == (RunStatus.RUNNING, 1, 1)
    async for _ in runner.drive(claimed, second_content, resume=False):
        pass
    monkeypatch.undo()
    assert texts(await load(store, "shop")) == ["first", "one", "second", "two"]
    assert [r.status for r in await runner.ledger.list_runs()] == [RunStatus.DONE] * 2


async def test_a_session_made_for_a_queued_run_is_read_when_its_turn_comes(
    store: Store,
) -> None:
    """A queued run must not trust the session it made: others write before its turn."""
    runner = two_turn_runner(store, "w1")
    # A run of the session is RUNNING although the session row is gone (deleted
    # while its run was live): the next start makes the row, but must wait.
    ahead, ahead_content = await runner.submit(user_id="u", session_id="s", message="first")
    await DurableSessionService(store).delete_session(app_name="shop", user_id="u", session_id="s")
    runner.sessions.distrust(("shop", "u", "s"))
    second, second_content = await runner.submit(user_id="u", session_id="s", message="second")
    assert second.status is RunStatus.QUEUED
    key = ("shop", "u", "s")
    cached = runner.sessions._cache.get(key)
    assert cached is None or not cached.trusted
    # Meanwhile another service writes to the new row: our cache cannot know.
    reader = DurableSessionService(store)
    fresh = await reader.get_session(app_name="shop", user_id="u", session_id="s")
    assert fresh is not None
    await reader.append_event(
        fresh,
        Event(
            author="user",
            invocation_id="inv-x",
            content=types.Content(role="user", parts=[types.Part(text="meanwhile")]),
        ),
    )
    assert await runner.ledger.finish(ahead.lease, RunStatus.DONE)
    claimed = await runner.wait_for_turn(second)
    async for _ in runner.drive(claimed, second_content, resume=False):
        pass
    # ADK saw the event written meanwhile: the turn's read went to the store.
    assert texts(await load(store, "shop")) == ["meanwhile", "second", "one"]
    assert ahead_content.parts and ahead_content.parts[0].text == "first"


async def test_wait_for_turn_claims_a_running_run_of_another_worker_only_by_queue(
    store: Store,
) -> None:
    """The shortcut is for our own RUNNING run; a run another worker holds is not ours."""
    mine = two_turn_runner(store, "w1")
    theirs = await start(RunLedger(store), app_name="shop", owner="w2")
    waiting = asyncio.create_task(mine.wait_for_turn(theirs.run))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    run = await mine.ledger.get(theirs.run.run_id)
    assert run is not None and (run.owner, run.epoch) == ("w2", 1)


# ------------------------------------------------------ concurrent (PostgreSQL)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgresql"])
@pytest.mark.parametrize("existing", [False, True], ids=["new-session", "existing-session"])
async def test_concurrent_starts_never_run_two(store: Store, existing: bool) -> None:
    ledger = RunLedger(store)
    sessions = DurableSessionService(store)
    for round_ in range(8):
        session_id = f"s{round_}"
        made = None
        if existing:
            made = await sessions.create_session(app_name="a", user_id="u", session_id=session_id)
        results = await asyncio.gather(
            *(
                ledger.start(
                    app_name="a",
                    user_id="u",
                    session_id=session_id,
                    request=REQUEST,
                    owner=f"w{i}",
                    now=time.time(),
                )
                for i in range(10)
            )
        )
        started = [s for s in results if s is not None]
        running = [s for s in started if s.run.status is RunStatus.RUNNING]
        assert len(running) == 1, f"round {round_}: {[s.run.status for s in started]}"
        assert all(s.run.status is RunStatus.QUEUED for s in started if s is not running[0]), round_
        on_ledger = [r for r in await ledger.list_runs() if r.session_id == session_id]
        assert sorted(r.run_id for r in on_ledger) == sorted(s.run.run_id for s in started)
        assert [r.status for r in on_ledger].count(RunStatus.RUNNING) == 1
        session = await load(store, session_id=session_id)
        assert session is not None
        makers = [s.created_session_pk for s in started if s.created_session_pk is not None]
        if existing:
            assert made is not None and makers == [] and pk_of(session) == pk_of(made)
        else:
            assert makers == [pk_of(session)]


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgresql"])
async def test_concurrent_starts_behind_a_running_run_all_queue_in_order(store: Store) -> None:
    ledger = RunLedger(store)
    first = await start(ledger, owner="w-first")
    results = await asyncio.gather(
        *(start(ledger, owner=f"w{i}") for i in range(10))  # start() asserts none is None
    )
    assert all(s.run.status is RunStatus.QUEUED for s in results)
    assert all(s.created_session_pk is None for s in results)
    queue = list(reversed(await ledger.list_runs(status=RunStatus.QUEUED)))  # oldest first
    assert len(queue) == 10
    holder = first.run
    for run in queue:
        assert await ledger.finish(holder.lease, RunStatus.DONE)
        # Only the head of the queue can be claimed.
        for later in queue[queue.index(run) + 1 :]:
            assert await ledger.claim_queued(later.run_id, later.owner or "") is None
        claimed = await ledger.claim_queued(run.run_id, run.owner or "")
        assert claimed is not None and claimed.status is RunStatus.RUNNING
        holder = claimed
    assert await ledger.finish(holder.lease, RunStatus.DONE)
    assert len(await ledger.list_runs(status=RunStatus.DONE)) == 11


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgresql"])
async def test_concurrent_runner_turns_on_a_new_session_all_complete_in_turn(
    store: Store,
) -> None:
    """Starts that lose the race (None) fall back to submit and wait their turn."""
    script = [Say(f"answer {i}") for i in range(8)]
    runners = [
        DurableRunner(
            app=LlmAgent(name="assistant", model=ScriptedModel({"assistant": script})),
            app_name="shop",
            store=store,
            worker_id=f"w{i}",
            queue_poll=0.02,
        )
        for i in range(8)
    ]

    async def turn(runner: DurableRunner, text: str) -> None:
        async for _ in runner.run(user_id="u", session_id="s", message=text):
            pass

    await asyncio.gather(*(turn(r, f"q{i}") for i, r in enumerate(runners)))
    runs = await RunLedger(store).list_runs()
    assert len(runs) == 8 and all(r.status is RunStatus.DONE for r in runs)
    session = await load(store, "shop")
    assert session is not None
    by_invocation = [e.invocation_id for e in session.events]
    assert by_invocation == sorted(by_invocation, key=by_invocation.index)  # never interleaved
    got = texts(session)
    assert got[1::2] == [f"answer {i}" for i in range(8)]
    assert sorted(got[0::2]) == sorted(f"q{i}" for i in range(8))
