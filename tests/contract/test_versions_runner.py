"""Versioned runs through DurableRunner and recovery, both backends.

Leases are expired by moving them back in the database, never by sleeping.
"""

from __future__ import annotations

import pytest
from google.adk.agents import LlmAgent

from durable_adk import errors
from durable_adk.adk.loops.recovery import Sweeper
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.runs.fingerprint import fingerprint
from durable_adk.store import Store
from durable_adk.tables.ledger import RunStatus
from durable_adk.testing import Say, ScriptedModel


def runner(store: Store, worker: str, version: str | None, *compatible: str) -> DurableRunner:
    agent = LlmAgent(name="assistant", model=ScriptedModel({"assistant": [Say("hi")] * 4}))
    return DurableRunner(
        app=agent,
        app_name="shop",
        store=store,
        worker_id=worker,
        version=version,
        compatible_versions=compatible,
        background=False,
    )


async def test_an_old_worker_beside_newer_runs_claims_none_and_a_new_one_finishes_them(
    store: Store,
) -> None:
    new = runner(store, "new", "2.0.0", "1.0.0")
    old = runner(store, "old", "1.0.0")
    # A run of 2.0.0 whose worker died right after claiming it.
    await new.path.sessions.create_session(app_name="shop", user_id="u", session_id="s")
    run = await new.ledger.submit(
        app_name="shop",
        user_id="u",
        session_id="s",
        request={"role": "user", "parts": [{"text": "hello"}]},
        owner="dead",
    )
    assert run.app_version == "2.0.0"
    assert run.app_fingerprint == fingerprint(new.path.app.root_agent)
    assert await new.ledger.claim_queued(run.run_id, "dead") is not None
    await new.ledger.backdate(run.run_id, 3600)
    assert await Sweeper(old).recover_once() == []
    still = await old.ledger.get(run.run_id)
    assert still is not None and still.status is RunStatus.RUNNING and still.owner == "dead"
    (recovery,) = await Sweeper(new).recover_once()
    assert recovery.action == "redrive"
    done = await new.ledger.get(run.run_id)
    assert done is not None and done.status is RunStatus.DONE and done.owner == "new"
    assert done.app_version == "2.0.0"


async def test_a_run_started_by_the_runner_records_its_version(store: Store) -> None:
    v1 = runner(store, "w1", "1.0.0")
    async for _ in v1.run(user_id="u", session_id="s", message="hello"):
        pass
    (run,) = await v1.ledger.list_runs()
    assert run.status is RunStatus.DONE and run.app_version == "1.0.0"
    assert run.app_fingerprint == v1.path.serving.fingerprint


async def test_an_unparsable_version_is_refused_before_anything_is_written(store: Store) -> None:
    with pytest.raises(errors.InvalidVersion):
        runner(store, "w", "blue-green")
    with pytest.raises(errors.InvalidVersion):
        runner(store, "w", "1.0.0", "2.0.0")  # never continues a newer version
    assert await runner(store, "w", None).ledger.list_runs() == []
