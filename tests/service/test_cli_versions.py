"""``durable-adk versions`` on a database, both backends: list, drain, undrain, bad input."""

from __future__ import annotations

import asyncio
import json

from google.adk.agents import LlmAgent
from typer.testing import CliRunner

from durable_adk.adk.loops.background import Background
from durable_adk.adk.runner import DurableRunner
from durable_adk.cli import app
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger
from durable_adk.testing import Say, ScriptedModel
from durable_adk.versions import Serving

runner = CliRunner()


def cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


async def two_versions(url: str) -> None:
    """A run of 1.0 and one of 1.1 (which continues 1.0), each worker beating as a server."""
    async with open_store(url) as store:
        for worker, version, compatible in (("w-old", "1.0", ()), ("w-new", "1.1", ("1.0",))):
            agent = LlmAgent(name="assistant", model=ScriptedModel({"assistant": [Say("hi")]}))
            durable = DurableRunner(
                app=agent,
                app_name="shop",
                store=store,
                worker_id=worker,
                version=version,
                compatible_versions=compatible,
                background=False,
            )
            async for _ in durable.run(user_id="u", session_id=f"s-{worker}", message="hello"):
                pass
            await Background(durable).beat()  # it serves its version
            await durable.aclose()


async def actions(url: str) -> list[tuple[str, str]]:
    async with open_store(url) as store:
        found = await RunLedger(store).actions(app_name="shop")
        return [(a.action, a.actor) for a in found]


def test_versions_list_drain_and_undrain(store_url: str) -> None:
    asyncio.run(two_versions(store_url))
    code, out = cli("versions", "list", "--app", "shop", "--db", store_url, "--json")
    assert code == 0, out
    listed = json.loads(out)["items"]
    assert [(v["version"], v["runs"]) for v in listed] == [
        ("1.1", {"DONE": 1}),
        ("1.0", {"DONE": 1}),
    ]
    assert listed[1]["own_workers"] == ["w-old"] and listed[1]["continued_by"] == ["w-new"]
    code, out = cli("versions", "list", "--app", "shop", "--db", store_url)
    assert code == 0 and "versions of app 'shop'" in out and "taking runs" in out

    code, out = cli(
        "versions", "drain", "1.0", "--app", "shop", "--db", store_url, "--by", "ana",
        "--reason", "1.1 is out",
    )  # fmt: skip
    assert code == 0 and "drained: it starts no new run" in out, out
    code, out = cli("versions", "drain", "1.0", "--app", "shop", "--db", store_url, "--by", "ana")
    assert code == 0 and "already drained: nothing changed" in out
    code, out = cli("versions", "list", "--app", "shop", "--db", store_url)
    assert "drained by ana" in out
    code, out = cli("versions", "undrain", "1.0", "--app", "shop", "--db", store_url, "--json")
    assert code == 0 and json.loads(out) == {"version": "1.0", "drained": False, "changed": True}
    assert [a for a, _ in asyncio.run(actions(store_url))] == ["version_undrain", "version_drain"]


def test_a_bad_version_or_operator_exits_2_and_changes_nothing(store_url: str) -> None:
    asyncio.run(two_versions(store_url))
    for args in (["blue", "--by", "ana"], ["1.0", "--by", "a/b"]):
        code, out = cli("versions", "drain", *args, "--app", "shop", "--db", store_url)
        assert code == 2, out  # the library rejects the argument: bad input
        assert "PEP 440" in out or "by must be" in out, out
    assert asyncio.run(actions(store_url)) == []
    code, out = cli("versions", "drain", "--app", "shop", "--db", store_url)
    assert code == 2  # no version given


async def an_open_run_of(url: str, version: str) -> str:
    async with open_store(url) as store:
        ledger = RunLedger(store, serving=Serving.declare(version, fingerprint=f"fp-{version}"))
        run = await ledger.submit(
            app_name="shop", user_id="u", session_id="open", request={}, owner="gone"
        )
        return run.run_id


async def status_of(url: str, run_id: str) -> tuple[str, str | None]:
    async with open_store(url) as store:
        run = await RunLedger(store).get(run_id)
        assert run is not None
        return run.status.value, run.app_version


def test_versions_move_and_abandon(store_url: str) -> None:
    asyncio.run(two_versions(store_url))
    run_id = asyncio.run(an_open_run_of(store_url, "1.0"))
    where = ["--app", "shop", "--db", store_url, "--by", "ana"]
    code, out = cli("versions", "move", "1.0", "--to", "0.5", *where)
    assert code == 2 and "only move to a newer version" in out, out
    code, out = cli("versions", "abandon", "1.0", *where)
    assert code == 2  # --reason is required
    assert asyncio.run(actions(store_url)) == []

    code, out = cli("versions", "move", "1.0", "--to", "1.1", *where, "--json")
    assert code == 0 and json.loads(out) == {"version": "1.0", "to": "1.1", "moved": 1}, out
    assert asyncio.run(status_of(store_url, run_id)) == ("QUEUED", "1.1")
    code, out = cli("versions", "abandon", "1.1", *where, "--reason", "bad release")
    assert code == 0 and "1 open run(s) of version 1.1 cancelled" in out, out
    assert asyncio.run(status_of(store_url, run_id)) == ("CANCELLED", "1.1")
    assert asyncio.run(actions(store_url)) == [("cancel", "ana"), ("version_move", "ana")]
