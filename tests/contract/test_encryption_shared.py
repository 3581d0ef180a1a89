"""Encryption at rest of what the first pass left in clear (issue 43), both backends.

The shared ``app:``/``user:`` state is sealed value by value (the database
still merges a delta key by key), an artifact's custom metadata is sealed
beside its bytes, what an operator gives with an action (a resolve's
results, an answer's calls) is sealed in the audit line, and an operator's
repair of an unreadable event seals its stand-in and the audit's copies. Each test writes
through the library's own paths, reads the raw rows without opening them,
and reads back through the same paths: with the key the values, without it
a failure naming the key (or, in a view, a placeholder naming it).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from typer.testing import CliRunner

from durable_adk import errors
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.services.artifacts import DurableArtifactService
from durable_adk.adk.services.repairs import repair_event, repairs_of, unreadable_events
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.cli import app as cli_app
from durable_adk.store import Keyring, Store, open_store
from durable_adk.store.queries import parse_queries
from durable_adk.store.rotation import key_status, rotate
from durable_adk.store.sealing.codec import KEY_FILE_ENV, MARK, column, envelope_key, lenient_reads
from durable_adk.tables.ledger import RunLedger
from durable_adk.testing import Call, Say, ScriptedModel

SECRET = "SECRET-8086"
APP, USER = "app", "alice"
KEYS = {i: os.urandom(32) for i in ("k1", "k2")}
SHARED = ("app_state.state", "user_state.state")

RAW_SQL = """
-- name: raw_app_state
SELECT app_name, state AS v FROM app_state ORDER BY app_name;

-- name: raw_user_state
SELECT app_name, user_id, state AS v FROM user_state ORDER BY app_name, user_id;

-- name: raw_artifact_metadata
SELECT custom_metadata AS v FROM artifacts;

-- name: raw_action_detail
SELECT action, detail AS v FROM operator_actions ORDER BY pk;
"""


def keyring(*ids: str) -> Keyring:
    return Keyring([(i, KEYS[i]) for i in ids])


def key_file(tmp_path: Path, *ids: str) -> Path:
    path = tmp_path / ("keys-" + "-".join(ids))
    path.write_text("".join(f"{i} {base64.b64encode(KEYS[i]).decode()}\n" for i in ids))
    return path


async def raw(store: Store, name: str) -> list[dict[str, Any]]:
    """Rows as stored (nothing opened); a jsonb state comes back as its text."""
    if "raw_app_state" not in store._queries:
        store.add_queries(parse_queries(RAW_SQL, store.dialect))
    found = [dict(r) for r in await store._fetch(name)]
    for row in found:
        if not isinstance(row["v"], str) and row["v"] is not None:
            row["v"] = json.dumps(row["v"])
    return found


async def raw_shared(store: Store) -> dict[str, dict[str, Any]]:
    """``{"app": state object, "user:<id>": state object}`` as stored."""
    found = {f"app:{r['app_name']}": json.loads(r["v"]) for r in await raw(store, "raw_app_state")}
    for r in await raw(store, "raw_user_state"):
        found[f"user:{r['user_id']}"] = json.loads(r["v"])
    return found


async def write_shared(store: Store) -> DurableSessionService:
    """app:/user: state through the session service: at creation and by two appends."""
    sessions = DurableSessionService(store)
    session = await sessions.create_session(
        app_name=APP,
        user_id=USER,
        session_id="s1",
        state={"app:motd": SECRET + "-motd", "user:email": SECRET + "@example.com", "plain": 1},
    )
    for delta in (
        {"user:phone": SECRET + "-phone", "user:prefs": {"lang": "fr", "card": SECRET}},
        {"app:flags": [1, 2, SECRET], "user:empty": None},
    ):
        await sessions.append_event(
            session,
            Event(author="user", invocation_id="i1", actions=EventActions(state_delta=delta)),
        )
    return sessions


WANT = {
    "app:motd": SECRET + "-motd",
    "app:flags": [1, 2, SECRET],
    "user:email": SECRET + "@example.com",
    "user:phone": SECRET + "-phone",
    "user:prefs": {"lang": "fr", "card": SECRET},
    "user:empty": None,
}


async def assert_reads_back(store: Store) -> None:
    sessions = DurableSessionService(store)  # a fresh service: nothing cached
    got = await sessions.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert got is not None
    assert {k: v for k, v in got.state.items() if k in WANT} == WANT
    assert got.state["plain"] == 1
    (listed,) = (await sessions.list_sessions(app_name=APP, user_id=USER)).sessions
    assert {k: v for k, v in listed.state.items() if k in WANT} == WANT
    user_state = await sessions.get_user_state(app_name=APP, user_id=USER)
    for k, v in WANT.items():
        if k.startswith("user:"):
            assert user_state[k.removeprefix("user:")] == v


async def test_shared_state_is_sealed_value_by_value_and_merges_key_by_key(
    store_url: str,
) -> None:
    async with open_store(store_url, keyring=keyring("k1")) as store:
        await write_shared(store)
        stored = await raw_shared(store)
        assert set(stored["app:app"]) == {"motd", "flags"}  # merged key by key
        assert set(stored["user:alice"]) == {"email", "phone", "prefs", "empty"}
        for scope, values in stored.items():
            for key, value in values.items():
                assert SECRET not in json.dumps(value), f"{scope} {key}: {value!r}"
                assert envelope_key(value) == "k1", (scope, key, value)
                table = "app_state" if scope.startswith("app:") else "user_state"
                assert value.startswith(f"{MARK}k1:{table}.state:")
        await assert_reads_back(store)
    async with open_store(store_url, keyring=keyring("k1")) as again:
        await assert_reads_back(again)


async def test_a_shared_value_moved_to_another_state_key_does_not_open(store_url: str) -> None:
    async with open_store(store_url, keyring=keyring("k1")) as store:
        await write_shared(store)
        (row,) = await raw(store, "raw_user_state")
        state = json.loads(row["v"])
        state["phone"] = state["email"]  # same row, another key
        cast = "::jsonb" if store.dialect == "postgresql" else ""
        store.add_queries(
            parse_queries(
                f"-- name: t_put_user_state\nUPDATE user_state SET state = :s{cast};\n",
                store.dialect,
            )
        )
        await store.execute("t_put_user_state", {"s": json.dumps(state)})
        with pytest.raises(errors.KeyUnavailable, match=r"user_state\.state.*does not open"):
            await DurableSessionService(store).get_session(
                app_name=APP, user_id=USER, session_id="s1"
            )


async def test_shared_state_without_the_key_fails_naming_it_and_views_show_placeholders(
    store_url: str,
) -> None:
    async with open_store(store_url, keyring=keyring("k1")) as store:
        await write_shared(store)
        before = await raw_shared(store)
    for ring in (None, keyring("k2")):
        async with open_store(store_url, keyring=ring) as other:
            sessions = DurableSessionService(other)
            with pytest.raises(errors.KeyUnavailable, match=r"state.*'k1'") as caught:
                await sessions.get_user_state(app_name=APP, user_id=USER)
            assert caught.value.key_id == "k1"
            with pytest.raises(errors.KeyUnavailable, match="'k1'"):
                await sessions.list_sessions(app_name=APP)
            with lenient_reads():
                shown = await sessions.get_user_state(app_name=APP, user_id=USER)
            assert SECRET not in json.dumps(shown) and MARK not in json.dumps(shown)
            assert shown["email"] == {
                "durable_adk_encrypted": {"key_id": "k1", "note": "key k1 not held by this process"}
            }
            assert await raw_shared(other) == before  # nothing written


async def test_a_durable_run_writes_sealed_shared_state_and_reads_it_in_the_next_turn(
    store_url: str,
) -> None:
    def remember(email: str, tool_context: ToolContext) -> dict[str, str]:
        """Remembers the user's email for every session, and the app's counter."""
        tool_context.state["user:email"] = email
        tool_context.state["app:seen"] = tool_context.state.get("app:seen", 0) + 1
        return {"ok": "yes"}

    model = ScriptedModel({"mem": [Call("remember", {"email": SECRET}), Say("noted")]})
    agent = LlmAgent(name="mem", model=model, tools=[remember])
    async with open_store(store_url, keyring=keyring("k1")) as store:
        runner = DurableRunner(app=agent, app_name=APP, store=store, worker_id="w", queue_poll=0.02)
        async for _ in runner.run(user_id=USER, session_id="a", message="my email"):
            pass
        # A new session of the same user, made by the run's start: its script
        # calls the tool again, which reads the app's counter the first run sealed.
        async for _ in runner.run(user_id=USER, session_id="b", message="hi"):
            pass
        stored = await raw_shared(store)
        assert envelope_key(stored["user:alice"]["email"]) == "k1"
        assert SECRET not in json.dumps(stored)
        got = await runner.sessions.get_session(app_name=APP, user_id=USER, session_id="b")
        assert got is not None and got.state["user:email"] == SECRET
        assert got.state["app:seen"] == 2


async def test_a_clear_database_stays_readable_and_rotation_seals_and_moves_shared_state(
    store_url: str,
) -> None:
    async with open_store(store_url) as clear:
        await write_shared(clear)
        assert SECRET in json.dumps(await raw_shared(clear))
    async with open_store(store_url, keyring=keyring("k1")) as sealed:
        await assert_reads_back(sealed)
        status = await key_status(sealed)
        assert status["clear"]["app_state.state"] == 2 and status["clear"]["user_state.state"] == 4
        report = await rotate(sealed, batch=1)
        assert not report.unreadable
        assert report.moved["app_state.state"] == 2 and report.moved["user_state.state"] == 4
        assert set(await key_status(sealed)) == {"k1"}
        assert SECRET not in json.dumps(await raw_shared(sealed))
        await assert_reads_back(sealed)
    async with open_store(store_url, keyring=keyring("k2", "k1")) as new:
        merged: list[str] = []

        async def a_run_merges_meanwhile(name: str, row: dict[str, Any]) -> None:
            # The first swap of the user's row finds it changed by a run's
            # delta (sealed under k2): the rotation reads it again and redoes it.
            if name == "user_state.state" and not merged:
                merged.append(name)
                sessions = DurableSessionService(new)
                got = await sessions.get_session(app_name=APP, user_id=USER, session_id="s1")
                assert got is not None
                await sessions.append_event(
                    got,
                    Event(
                        author="user",
                        invocation_id="i2",
                        actions=EventActions(state_delta={"user:late": SECRET + "-late"}),
                    ),
                )

        report = await rotate(new, batch=1, before_swap=a_run_merges_meanwhile)
        assert merged and not report.unreadable and not report.raced
        status = await key_status(new)
        assert set(status) == {"k2"}, status
        assert status["k2"]["user_state.state"] == 5 and status["k2"]["app_state.state"] == 2
        assert (await rotate(new)).total == 0
    async with open_store(store_url, keyring=keyring("k2")) as only_new:
        await assert_reads_back(only_new)
        state = await DurableSessionService(only_new).get_user_state(app_name=APP, user_id=USER)
        assert state["late"] == SECRET + "-late"


async def test_per_user_keys_seal_a_users_state_under_the_users_key(store_url: str) -> None:
    async with open_store(store_url, keyring=keyring("k1"), per_user_keys=True) as store:
        await write_shared(store)
        stored = await raw_shared(store)
        assert {envelope_key(v) for v in stored["app:app"].values()} == {"k1"}
        user_keys = {envelope_key(v) for v in stored["user:alice"].values()}
        assert len(user_keys) == 1 and next(iter(user_keys)).startswith("u-")  # type: ignore[union-attr]
        await assert_reads_back(store)


async def test_artifact_custom_metadata_is_sealed_and_reads_back(store_url: str) -> None:
    async with open_store(store_url, keyring=keyring("k1")) as store:
        artifacts = DurableArtifactService(store)
        await artifacts.save_artifact(
            app_name=APP,
            user_id=USER,
            session_id="s1",
            filename="scan.txt",
            artifact=types.Part(text="bytes"),
            custom_metadata={"owner": SECRET, "pages": 3},
        )
        (stored,) = await raw(store, "raw_artifact_metadata")
        assert SECRET not in stored["v"] and envelope_key(stored["v"]) == "k1"
        (version,) = await artifacts.list_artifact_versions(
            app_name=APP, user_id=USER, session_id="s1", filename="scan.txt"
        )
        assert version.custom_metadata == {"owner": SECRET, "pages": 3}
        latest = await artifacts.get_artifact_version(
            app_name=APP, user_id=USER, session_id="s1", filename="scan.txt"
        )
        assert latest is not None and latest.custom_metadata["owner"] == SECRET
    async with open_store(store_url) as keyless:
        with pytest.raises(errors.KeyUnavailable, match=r"artifacts\.custom_metadata.*'k1'"):
            await DurableArtifactService(keyless).list_artifact_versions(
                app_name=APP, user_id=USER, session_id="s1", filename="scan.txt"
            )


def test_operator_details_are_sealed_and_shown_only_with_the_key(
    store_url: str, tmp_path: Path
) -> None:
    run_id = asyncio.run(_write_operator_details(store_url))
    env = {"COLUMNS": "300", KEY_FILE_ENV: ""}
    runner = CliRunner()
    args = ["runs", "actions", "--db", store_url, "--run", run_id, "--json"]
    with_key = {**env, KEY_FILE_ENV: str(key_file(tmp_path, "k1"))}
    shown = runner.invoke(cli_app, args, env=with_key)
    assert shown.exit_code == 0, shown.output
    assert SECRET in shown.output and MARK not in shown.output
    hidden = runner.invoke(cli_app, args, env=env)
    assert hidden.exit_code == 0, hidden.output
    assert SECRET not in hidden.output and MARK not in hidden.output
    assert "key k1 not held" in hidden.output


async def _write_operator_details(store_url: str) -> str:
    """An answer's and a resolve's details through the ledger; the run's id."""
    async with open_store(store_url, keyring=keyring("k1")) as store:
        ledger = RunLedger(store)
        run = await ledger.submit(
            app_name=APP, user_id=USER, session_id="s1", request={"text": "hi"}, owner="w"
        )
        claimed = await ledger.claim_queued(run.run_id, "w")
        assert claimed is not None
        recorded = await ledger.record_action(
            run.run_id, action="answer", by="ops", detail={"calls": [SECRET + "-call"]}
        )
        assert recorded is not None and SECRET in str(recorded.detail)
        requeued = await ledger.operator_requeue(
            claimed.lease,
            action="resolve",
            by="ops",
            reason="the outside system answered",
            status_before=claimed.status,
            detail={"results": {"c1": {"card": SECRET}}},
        )
        assert requeued is not None
        await ledger.cancel(run.run_id, by="ops", reason="done with it")
        stored = await raw(store, "raw_action_detail")
        by_action = {r["action"]: r["v"] for r in stored}
        assert envelope_key(by_action["answer"]) == "k1"
        assert envelope_key(by_action["resolve"]) == "k1"
        assert all(SECRET not in str(r["v"]) for r in stored)
        details = {a.action: a.detail for a in await ledger.actions(run_id=run.run_id)}
        assert json.loads(details["resolve"] or "")["results"]["c1"]["card"] == SECRET
    return run.run_id


REPAIR_SQL = """
-- name: t_session_pk
SELECT pk FROM sessions WHERE session_id = :session_id;

-- name: t_put_event
UPDATE events SET data = :data WHERE session_pk = :pk AND seq = :seq;

-- name: t_raw_event
SELECT data AS v FROM events WHERE session_pk = :pk AND seq = :seq;

-- name: t_raw_repairs
SELECT original, replacement FROM event_repairs;
"""


async def test_an_operators_repair_of_a_sealed_event_is_sealed_too(store_url: str) -> None:
    async with open_store(store_url, keyring=keyring("k1")) as store:
        store.add_queries(parse_queries(REPAIR_SQL, store.dialect))
        sessions = DurableSessionService(store)
        session = await sessions.create_session(app_name=APP, user_id=USER, session_id="r")
        said = types.Content(role="user", parts=[types.Part(text=SECRET)])
        event = Event(author="user", invocation_id="i1", content=said)
        await sessions.append_event(session, event)
        pk = await store.fetchval("t_session_pk", {"session_id": "r"})
        # What no reader can parse (a content that is no Content), sealed as events are.
        bad = json.dumps({"id": event.id, "author": "user", "content": {"parts": 7, "x": SECRET}})
        assert store.codec is not None
        sealed = store.codec.seal(bad, column("events", "data"), (pk, 1))
        await store.execute("t_put_event", {"data": sealed, "pk": pk, "seq": 1})
        where = {"app_name": APP, "user_id": USER, "session_id": "r"}
        (unreadable,) = await unreadable_events(DurableSessionService(store), **where)
        assert unreadable.event_id == event.id
        fixed = {"content": {"role": "user", "parts": [{"text": SECRET + "-fixed"}]}}
        done = await repair_event(
            DurableSessionService(store),
            **where,
            event_id=event.id,
            by="ops",
            reason="unparsable content",
            replacement=fixed,
        )
        assert SECRET in done.original and SECRET + "-fixed" in done.replacement
        (stored,) = await store._fetch("t_raw_event", {"pk": pk, "seq": 1})
        assert envelope_key(stored["v"]) == "k1" and SECRET not in stored["v"]
        (audit,) = await store._fetch("t_raw_repairs")
        for value in (audit["original"], audit["replacement"]):
            assert envelope_key(value) == "k1" and SECRET not in value
        got = await DurableSessionService(store).get_session(**where)
        assert got is not None
        assert got.events[0].content.parts[0].text == SECRET + "-fixed"  # type: ignore[index,union-attr]
        (listed,) = await repairs_of(DurableSessionService(store), **where)
        assert SECRET in listed.original
    async with open_store(store_url) as keyless:
        with pytest.raises(errors.KeyUnavailable, match=r"event_repairs\.original.*'k1'"):
            await repairs_of(DurableSessionService(keyless), **where)
