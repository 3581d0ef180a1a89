"""An app's versions on the store, both backends: the report, waiting runs, drain and undrain.

Workers are DurableRunners whose background loops beat as servers (one beat
each); leases move back in the database, never by sleeping.
"""

from __future__ import annotations

import json

import pytest
from google.adk.agents import LlmAgent

from durable_adk import errors
from durable_adk.adk.loops.background import Background
from durable_adk.adk.loops.recovery import Sweeper
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.runs import path as runpath
from durable_adk.adk.runs.operators import abandon_version
from durable_adk.store import Store
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.tables.versions import NO_VERSION, VersionTable
from durable_adk.testing import Say, ScriptedModel
from durable_adk.versions import Serving


def runner(store: Store, worker: str, version: str | None, *compatible: str) -> DurableRunner:
    agent = LlmAgent(name="assistant", model=ScriptedModel({"assistant": [Say("hi")] * 8}))
    return DurableRunner(
        app=agent,
        app_name="shop",
        store=store,
        worker_id=worker,
        version=version,
        compatible_versions=compatible,
        background=False,
    )


async def one_run(worker: DurableRunner, session: str) -> None:
    async for _ in worker.run(user_id="u", session_id=session, message="hello"):
        pass


async def test_the_report_counts_runs_by_version_and_names_who_serves_each(store: Store) -> None:
    old, new = runner(store, "w-old", "1.0"), runner(store, "w-new", "1.1", "1.0")
    await one_run(old, "a")
    await one_run(new, "b")
    await one_run(new, "c")
    # A run of 2.0 whose worker died: no live worker serves 2.0.
    v2 = RunLedger(store, serving=Serving.declare("2.0", fingerprint="fp-2"))
    orphan = await v2.submit(app_name="shop", user_id="u", session_id="d", request={}, owner="x")
    assert await v2.claim_queued(orphan.run_id, "x") is not None
    await v2.backdate(orphan.run_id, 3600)
    for worker in (old, new):
        await Background(worker).beat()  # its beat: a live worker, with what it serves

    report = await VersionTable(store, "shop").report()
    assert [v.version for v in report] == ["2.0", "1.1", "1.0"]  # newest first
    by = {v.version: v for v in report}
    assert by["1.1"].runs == {"DONE": 2} and by["1.1"].own_workers == ("w-new",)
    assert by["1.0"].runs == {"DONE": 1} and by["1.0"].own_workers == ("w-old",)
    assert by["1.0"].continued_by == ("w-new",)
    assert by["2.0"].runs == {"RUNNING": 1} and not by["2.0"].served
    assert by["2.0"].waiting == 1  # waiting for its version, not parked
    assert (await v2.get(orphan.run_id)).status is RunStatus.RUNNING  # type: ignore[union-attr]
    assert by["1.0"].waiting == 0 and by["1.0"].describe()["total"] == 1


async def test_runs_without_a_version_are_listed_as_none(store: Store) -> None:
    plain = runner(store, "w", None)
    await one_run(plain, "a")
    await Background(plain).beat()
    (line,) = await VersionTable(store, "shop").report()
    assert line.version == NO_VERSION and line.runs == {"DONE": 1} and line.served


async def test_a_drained_version_starts_no_new_run_and_its_runs_finish(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runpath, "DRAIN_CHECK_EVERY", 0.0)  # every submit reads the drain
    old = runner(store, "w-old", "1.0")
    table = VersionTable(store, "shop")
    # A run of 1.0 in flight when the drain comes: its worker died, it is recovered after.
    started = await old.ledger.submit(
        app_name="shop",
        user_id="u",
        session_id="inflight",
        request={"role": "user", "parts": [{"text": "hello"}]},
        owner="dead",
    )
    await old.path.sessions.create_session(app_name="shop", user_id="u", session_id="inflight")
    assert await old.ledger.claim_queued(started.run_id, "dead") is not None
    await old.ledger.backdate(started.run_id, 3600)

    assert await table.drain("1.0", by="ana", reason="rolling out 1.1") is True
    assert await table.drain("1.0", by="ana") is False  # drained already: nothing more
    before = await old.ledger.list_runs()
    with pytest.raises(errors.Draining, match=r"version 1\.0 of app 'shop' is drained"):
        await one_run(old, "fresh")
    assert await old.ledger.list_runs() == before  # nothing written
    (recovery,) = await Sweeper(old).recover_once()
    assert recovery.status is RunStatus.DONE  # its runs still finish on its workers
    (line,) = [v for v in await table.report() if v.version == "1.0"]
    assert line.drained_by == "ana" and line.reason == "rolling out 1.1" and line.drained_at

    assert await table.undrain("1.0", by="bo") is True
    assert await table.undrain("1.0", by="bo") is False
    await one_run(old, "fresh")  # takes new runs again
    actions = await old.ledger.actions(run_id="version:1.0")
    assert [(a.action, a.actor) for a in actions] == [
        ("version_undrain", "bo"),
        ("version_drain", "ana"),
    ]


@pytest.mark.parametrize(
    ("version", "by", "error"),
    [
        ("blue", "ana", errors.InvalidVersion),
        ("", "ana", errors.InvalidVersion),
        ("1.0", "", errors.InvalidArgument),
        ("1.0", "a/b", errors.InvalidArgument),
    ],
)
async def test_a_bad_drain_is_refused_and_writes_nothing(
    store: Store, version: str, by: str, error: type[Exception]
) -> None:
    table = VersionTable(store, "shop")
    with pytest.raises(error):
        await table.drain(version, by=by)
    assert await table.report() == []
    assert await RunLedger(store).actions(app_name="shop") == []


async def test_an_unknown_version_is_not_found(store: Store) -> None:
    with pytest.raises(errors.NotFound, match=r"no version '9\.9'"):
        await VersionTable(store, "shop").get("9.9")


async def orphan(worker: DurableRunner, session: str, *, claimed: bool = True) -> str:
    """A run of ``worker``'s version whose worker died (RUNNING past its lease) or never ran."""
    await worker.path.sessions.create_session(app_name="shop", user_id="u", session_id=session)
    run = await worker.ledger.submit(
        app_name="shop",
        user_id="u",
        session_id=session,
        request={"role": "user", "parts": [{"text": "hello"}]},
        owner="dead",
    )
    if claimed:
        assert await worker.ledger.claim_queued(run.run_id, "dead") is not None
        await worker.ledger.backdate(run.run_id, 3600)
    return run.run_id


async def test_moving_a_retired_versions_open_runs_lets_a_newer_worker_finish_them(
    store: Store,
) -> None:
    old, new = runner(store, "w-old", "1.0"), runner(store, "w-new", "1.1")  # 1.1 pinned
    await one_run(old, "done-before")
    stuck = {await orphan(old, "a"), await orphan(old, "b")}
    assert await Sweeper(new).recover_once() == []  # pinned: not its version
    table = VersionTable(store, "shop")
    for bad, error in (("0.9", errors.InvalidArgument), ("1.0", errors.InvalidArgument),
                       ("blue", errors.InvalidVersion)):  # fmt: skip
        with pytest.raises(error):
            await table.move("1.0", bad, by="ana")
    assert await old.ledger.actions(app_name="shop") == []

    assert await table.move("1.0", "1.1", by="ana", reason="1.0 is retired") == 2
    assert await table.move("1.0", "1.1", by="ana") == 0  # nothing open is left on 1.0
    runs = {r.run_id: r for r in await old.ledger.list_runs()}
    assert {r for r, run in runs.items() if run.app_version == "1.1"} == stuck
    assert [r.status for r in runs.values() if r.app_version == "1.0"] == [RunStatus.DONE]
    recovered = await Sweeper(new).recover_once()
    assert {r.run_id for r in recovered} == stuck
    assert all(r.status is RunStatus.DONE for r in recovered)
    (action,) = await old.ledger.actions(run_id="version:1.0")
    assert action.action == "version_move" and action.actor == "ana"
    assert action.detail is not None and json.loads(action.detail) == {"to": "1.1", "runs": 2}


async def test_abandoning_a_versions_open_runs_cancels_each(store: Store) -> None:
    gone = runner(store, "w-2", "2.0")
    queued = await orphan(gone, "q", claimed=False)
    running = await orphan(gone, "r")
    table = VersionTable(store, "shop")
    with pytest.raises(errors.InvalidArgument, match="needs a reason"):
        await abandon_version(table, "2.0", by="ana", reason=" ")
    assert await gone.ledger.actions(app_name="shop") == []
    cancelled = await abandon_version(table, "2.0", by="ana", reason="2.0 was a bad release")
    assert cancelled == [queued, running]
    assert (await gone.ledger.get(queued)).status is RunStatus.CANCELLED  # type: ignore[union-attr]
    # The running one's owner is dead: any worker's sweeper ends it (whatever its version).
    other = runner(store, "w-3", "3.0")
    await Sweeper(other).recover_once()
    assert (await gone.ledger.get(running)).status is RunStatus.CANCELLED  # type: ignore[union-attr]
    assert await abandon_version(table, "2.0", by="ana", reason="again") == []
    actions = [(a.run_id, a.action) for a in await gone.ledger.actions(app_name="shop")]
    assert sorted(actions) == sorted([(queued, "cancel"), (running, "cancel")])
