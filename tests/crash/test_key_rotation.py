"""``keys rotate`` with runs live, a writer racing the swap, and a kill half-way (issue 43).

On both backends: runs keep appending (sealed under the new key) while the
rotation re-seals the old rows, and every run ends DONE with all its events;
a row a writer rewrites between the rotation's read and its swap keeps the
writer's value; ``durable-adk keys rotate`` killed for real (os._exit at a
crash point, in a child process) half-way leaves every row readable, and run
again it finishes.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App

from children import run_module
from durable_adk import errors
from durable_adk.adk.runner import DurableRunner
from durable_adk.effect_tables.jobs import JobTable
from durable_adk.store import Keyring, Store, open_store
from durable_adk.store.rotation import key_status, rotate
from durable_adk.store.sealing.codec import KEY_FILE_ENV
from durable_adk.tables.ledger import RunStatus
from durable_adk.testing import Call, Say, ScriptedModel, arm

APP = "shop"


def lookup(order_id: str) -> dict[str, Any]:
    """Looks an order up."""
    return {"order_id": order_id, "status": "packed"}


def shop() -> App:
    script = [Call("lookup", {"order_id": "A-1"}), Say("Packed.")]
    model = ScriptedModel({"clerk": script * 40})
    return App(name=APP, root_agent=LlmAgent(name="clerk", model=model, tools=[lookup]))


def key_file(path: Path, *ids: str) -> Path:
    lines = {i: Keyring.new_line(i) for i in ids}
    path.write_text("\n".join(lines[i] for i in ids) + "\n")
    return path


def with_first(path: Path, newer: str, target: Path) -> Path:
    """A key file with a new key on top of ``path``'s."""
    target.write_text(Keyring.new_line(newer) + "\n" + path.read_text())
    return target


async def drive(store: Store, sessions: range) -> list[str]:
    runner = DurableRunner(app=shop(), store=store)
    for n in sessions:
        async for _ in runner.run(user_id="u", session_id=f"s{n}", message=f"order {n}"):
            pass
    return [r.run_id for r in await runner.ledger.list_runs(limit=1000)]


async def test_rotation_while_runs_append(store_url: str, tmp_path: Path) -> None:
    old = key_file(tmp_path / "old.keys", "k1")
    new = with_first(old, "k2", tmp_path / "new.keys")
    async with open_store(store_url, keyring=Keyring.from_file(old)) as store:
        await drive(store, range(8))
    async with open_store(store_url, keyring=Keyring.from_file(new)) as store:
        before = await key_status(store)
        assert set(before) == {"k1"} and before["k1"]["runs.request"] == 8, before
        live = asyncio.create_task(drive(store, range(8, 16)))
        report = await rotate(store, batch=3)
        runs = await live
        assert not report.unreadable and report.total > 0
        assert len(runs) == 16
        runner = DurableRunner(app=shop(), store=store)
        for run in await runner.ledger.list_runs(limit=100):
            assert run.status is RunStatus.DONE, run
        for n in range(16):
            session = await runner.sessions.get_session(
                app_name=APP, user_id="u", session_id=f"s{n}"
            )
            assert session is not None and len(session.events) == 5
            said = [p.text for e in session.events if e.content for p in e.content.parts or ()]
            assert "Packed." in said
        assert set(await key_status(store)) == {"k2"}


async def test_a_row_rewritten_during_the_swap_keeps_the_writers_value(
    store_url: str, tmp_path: Path
) -> None:
    old = key_file(tmp_path / "old.keys", "k1")
    new = with_first(old, "k2", tmp_path / "new.keys")
    async with open_store(store_url, keyring=Keyring.from_file(old)) as writer:
        jobs = JobTable(writer)
        await jobs.create("j1", tool_name="t", deadline=60)
        await jobs.progress("j1", {"step": 1})
        async with open_store(store_url, keyring=Keyring.from_file(new)) as rotator:

            async def rewrite(column: str, row: dict[str, Any]) -> None:
                if column == "jobs.progress":  # an old worker reports progress meanwhile
                    await jobs.progress("j1", {"step": 2})

            report = await rotate(rotator, columns=("jobs.progress",), before_swap=rewrite)
            assert report.raced == {"jobs.progress": 1} and not report.moved
            job = await JobTable(rotator).get("j1")
            assert job is not None and job.progress == {"step": 2}  # not the stale {"step": 1}
            again = await rotate(rotator, columns=("jobs.progress",))  # the writer is gone
            assert again.moved == {"jobs.progress": 1}
            assert (await key_status(rotator))["k2"]["jobs.progress"] == 1


def rotate_in_child(
    url: str, keys: Path, *, crash_after: int | None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, KEY_FILE_ENV: str(keys)}
    if crash_after is not None:
        env = arm(env, "keys.rotate.swapped", after=crash_after)
    return run_module("durable_adk.cli", ["keys", "rotate", "--db", url, "--batch", "2"], env=env)


async def test_a_rotation_killed_half_way_then_retried_finishes(
    store_url: str, tmp_path: Path
) -> None:
    old = key_file(tmp_path / "old.keys", "k1")
    new = with_first(old, "k2", tmp_path / "new.keys")
    async with open_store(store_url, keyring=Keyring.from_file(old)) as store:
        await drive(store, range(5))
        total = sum(sum(by.values()) for by in (await key_status(store)).values())
    killed = rotate_in_child(store_url, new, crash_after=7)
    assert killed.returncode == 137, killed.stderr
    async with open_store(store_url, keyring=Keyring.from_file(new)) as store:
        half = await key_status(store)
        assert sum(half["k2"].values()) == 8 and half["k1"], half  # the 8th swap fired it
        done = rotate_in_child(store_url, new, crash_after=None)
        assert done.returncode == 0, done.stdout + done.stderr
        after = await key_status(store)
        assert set(after) == {"k2"} and sum(after["k2"].values()) == total
    async with open_store(store_url, keyring=Keyring.from_file(tmp_path / "new.keys")) as store:
        runner = DurableRunner(app=shop(), store=store)
        for n in range(5):
            session = await runner.sessions.get_session(
                app_name=APP, user_id="u", session_id=f"s{n}"
            )
            assert session is not None and len(session.events) == 5


async def test_a_run_on_data_whose_key_is_missing_fails_clearly_and_writes_nothing(
    store_url: str, tmp_path: Path
) -> None:
    old = key_file(tmp_path / "old.keys", "k1")
    async with open_store(store_url, keyring=Keyring.from_file(old)) as store:
        await drive(store, range(1))
        before = await key_status(store)
    async with open_store(store_url) as keyless:
        runner = DurableRunner(app=shop(), store=keyless)
        with pytest.raises(errors.KeyUnavailable, match="'k1'"):
            async for _ in runner.run(user_id="u", session_id="s0", message="again"):
                pass
    async with open_store(store_url, keyring=Keyring.from_file(old)) as store:
        after = await key_status(store)
        assert after["k1"] == before["k1"]  # not one event more, nothing rewritten
        runs = await DurableRunner(app=shop(), store=store).ledger.list_runs()
        assert sorted(r.status.value for r in runs) != ["DONE", "DONE"]  # the new one did not end
        session = await DurableRunner(app=shop(), store=store).sessions.get_session(
            app_name=APP, user_id="u", session_id="s0"
        )
        assert session is not None and len(session.events) == 5
