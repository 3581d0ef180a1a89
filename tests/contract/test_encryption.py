"""Encryption at rest (issue 43): every payload column sealed, on both backends.

Each test writes through the library's own code paths (the session service,
the ledger, the journal, the job table, the inbox, the saga ledger, the
artifact service), reads the raw rows with a store that holds no keys and
opens nothing (``_fetch``) to prove no clear text is stored, and reads back
through the same paths to get the values.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.genai import types
from typer.testing import CliRunner

from durable_adk import errors
from durable_adk.adk.services.artifacts import DurableArtifactService
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.cli import app as cli_app
from durable_adk.effect_tables.jobs import JobTable
from durable_adk.effect_tables.journal import Attempt, Journal
from durable_adk.effect_tables.sagas import SagaLedger
from durable_adk.store import Keyring, Store, open_store
from durable_adk.store.queries import parse_queries
from durable_adk.store.rotation import key_status, rotate, shred_user
from durable_adk.store.sealing.codec import COLUMNS, KEY_FILE_ENV, MARK, envelope_key
from durable_adk.tables.interrupts import InterruptKind, InterruptTable
from durable_adk.tables.ledger import RunLedger

SECRET = "SECRET-4711"
A2A = [c for c in COLUMNS if c.table.startswith("a2a_")]
"""Written here by no writer: tests/adk/test_a2a_lifecycle.py seals and reads them."""
REPAIRS = ("event_repairs.original", "event_repairs.replacement")
"""Written by an operator's repair: tests/contract/test_encryption_shared.py seals them."""
APP, USER = "app", "alice"


def keyring(*ids: str) -> Keyring:
    return Keyring([(i, KEYS[i]) for i in ids])


KEYS = {i: os.urandom(32) for i in ("k1", "k2", "k3")}


def raw_queries(dialect: str) -> dict[str, Any]:
    text = "\n".join(
        f"-- name: raw__{c.table}__{c.column}\nSELECT {c.column} AS v FROM {c.table};\n"
        for c in COLUMNS
    )
    return parse_queries(text, dialect)


async def raw_values(store: Store) -> dict[str, list[Any]]:
    """Every stored value of every encrypted column, as stored (nothing opened)."""
    if "raw__events__data" not in store._queries:
        store.add_queries(raw_queries(store.dialect))
    found: dict[str, list[Any]] = {}
    for c in COLUMNS:
        rows = await store._fetch(f"raw__{c.table}__{c.column}")
        found[c.name] = [r["v"] for r in rows if r["v"] is not None]
    return found


@pytest.fixture
async def sealed(store_url: str) -> AsyncIterator[Store]:
    async with open_store(store_url, keyring=keyring("k1")) as opened:
        yield opened


async def write_everything(store: Store) -> dict[str, Any]:
    """One of every kind of payload, each holding SECRET, through the real writers."""
    sessions = DurableSessionService(store, snapshot_every=1)
    session = await sessions.create_session(
        app_name=APP, user_id=USER, session_id="s1", state={"init": SECRET}
    )
    credential = types.FunctionResponse(
        id="cred-1",
        name="adk_request_credential",
        response={"auth_config": {"exchanged_auth_credential": {"oauth2": {"token": SECRET}}}},
    )
    await sessions.append_event(
        session,
        Event(
            author="user",
            invocation_id="i1",
            content=types.Content(role="user", parts=[types.Part(function_response=credential)]),
            actions=EventActions(state_delta={"note": SECRET}),
        ),
    )
    ledger = RunLedger(store)
    run = await ledger.submit(
        app_name=APP, user_id=USER, session_id="s1", request={"text": SECRET}, owner="w"
    )
    claimed = await ledger.claim_queued(run.run_id, "w")
    assert claimed is not None
    assert await ledger.park(claimed.lease, error="x", last_events=[{"text": SECRET}])
    journal = Journal(store)

    async def act(key: str) -> dict[str, str]:
        return {"paid": SECRET}

    await journal.execute("charge:1", Attempt(tool_name="charge"), act, None)
    jobs = JobTable(store)
    await jobs.start(
        "report:1",
        tool_name="report",
        deadline=60,
        request={"q": SECRET},
        app_name=APP,
        user_id=USER,
        session_id="s1",
        invocation_id="i1",
        function_call_id="c9",
    )
    await jobs.progress("report:1", {"pct": SECRET})
    await jobs.complete("report:1", "SUCCEEDED", {"url": SECRET})
    inbox = InterruptTable(store)
    paused = await ledger.submit(
        app_name=APP, user_id=USER, session_id="s2", request={"text": "hi"}, owner="w"
    )
    await inbox.open(
        paused,
        call_id="ask-1",
        kind=InterruptKind.INPUT,
        name="ask_user",
        args={"hint": SECRET},
    )
    (interrupt,) = await inbox.list_interrupts(app_name=APP)
    answered = await inbox.answer(
        interrupt,
        response={"answer": SECRET},
        request={"parts": [SECRET]},
        ask=1,
        by="ops",
        reason=None,
        owner="w",
        lease=30,
    )
    assert answered is not None
    sagas = SagaLedger(store)
    await sagas.begin(
        saga_id="i1/order",
        name="order",
        app_name=APP,
        user_id=USER,
        session_id="s1",
        invocation_id="i1",
    )
    await sagas.step_pending("i1/order", "reserve")
    await sagas.step_done("i1/order", "reserve", {"reservation": SECRET})
    artifacts = DurableArtifactService(store)
    await artifacts.save_artifact(
        app_name=APP,
        user_id=USER,
        session_id="s1",
        filename="r.txt",
        artifact=types.Part(text=SECRET),
    )
    return {"run": run, "answered": answered, "interrupt": interrupt}


async def read_everything(store: Store, made: dict[str, Any]) -> None:
    """Reads each payload back through the library and finds SECRET in it."""
    sessions = DurableSessionService(store)
    got = await sessions.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert got is not None
    assert got.state["init"] == SECRET and got.state["note"] == SECRET
    response = got.events[0].content.parts[0].function_response  # type: ignore[index,union-attr]
    assert SECRET in str(response.response)  # type: ignore[union-attr]
    listed = (await sessions.list_sessions(app_name=APP)).sessions
    assert listed[0].state["note"] == SECRET
    ledger = RunLedger(store)
    run = await ledger.get(made["run"].run_id)
    assert run is not None and SECRET in run.request
    (letter,) = await ledger.dead_letters(run_id=run.run_id)
    assert SECRET in str(letter.request) and SECRET in str(letter.last_events)
    entry = await Journal(store).get("charge:1")
    assert entry is not None and entry.result == {"paid": SECRET}
    job = await JobTable(store).get("report:1")
    assert job is not None
    assert job.request == {"q": SECRET} and job.result == {"url": SECRET}
    assert job.progress == {"pct": SECRET}
    (interrupt,) = await InterruptTable(store).list_interrupts(app_name=APP, status=None)
    assert interrupt.args == {"hint": SECRET} and interrupt.answer == {"answer": SECRET}
    carried = await ledger.get(made["answered"].run_id)
    assert carried is not None and SECRET in carried.request
    (step,) = await SagaLedger(store).steps("i1/order")
    assert step.record == {"reservation": SECRET}
    part = await DurableArtifactService(store).load_artifact(
        app_name=APP, user_id=USER, session_id="s1", filename="r.txt"
    )
    assert part is not None and part.text == SECRET


async def test_every_encrypted_column_is_sealed_and_reads_back(sealed: Store) -> None:
    made = await write_everything(sealed)
    stored = await raw_values(sealed)
    must_hold = {
        c.name
        for c in COLUMNS
        if c.name not in ("jobs.progress_sent", "operator_actions.detail", *REPAIRS)
        and c not in A2A
    }
    for name, values in stored.items():
        if name in must_hold:
            assert values, f"{name}: nothing was written there"
        for value in values:
            assert SECRET not in str(value), f"{name} holds clear text: {value!r}"
            assert envelope_key(value) == "k1", f"{name}: {value!r}"
    await read_everything(sealed, made)
    # A fresh process with the key reads it all back too (nothing cached).
    async with open_store(sealed.url, keyring=keyring("k1")) as again:
        await read_everything(again, made)


async def test_a_value_moved_to_another_row_does_not_open(sealed: Store) -> None:
    ledger = RunLedger(sealed)
    one = await ledger.submit(
        app_name=APP, user_id=USER, session_id="s1", request={"text": SECRET}, owner="w"
    )
    two = await ledger.submit(
        app_name=APP, user_id=USER, session_id="s2", request={"text": "other"}, owner="w"
    )
    sealed.add_queries(
        parse_queries(
            "-- name: t_copy_request\nUPDATE runs SET request = "
            "(SELECT request FROM runs WHERE run_id = :src) WHERE run_id = :dst;\n",
            sealed.dialect,
        )
    )
    await sealed.execute("t_copy_request", {"src": one.run_id, "dst": two.run_id})
    with pytest.raises(errors.KeyUnavailable, match="does not open") as caught:
        await ledger.get(two.run_id)
    assert caught.value.key_id == "k1"
    assert (await ledger.get(one.run_id)) is not None  # the original row still opens


async def test_a_missing_or_wrong_key_fails_clearly_and_changes_nothing(
    store_url: str, sealed: Store
) -> None:
    await write_everything(sealed)
    before = await raw_values(sealed)
    for ring in (None, keyring("k2")):
        async with open_store(store_url, keyring=ring) as other:
            with pytest.raises(errors.KeyUnavailable, match="'k1'") as caught:
                await DurableSessionService(other).get_session(
                    app_name=APP, user_id=USER, session_id="s1"
                )
            assert caught.value.key_id == "k1"
            with pytest.raises(errors.KeyUnavailable, match="'k1'"):
                await Journal(other).get("charge:1")
    wrong = Keyring([("k1", os.urandom(32))])  # the right id, the wrong bytes
    async with open_store(store_url, keyring=wrong) as other:
        with pytest.raises(errors.KeyUnavailable, match=r"k1.*does not open"):
            await JobTable(other).get("report:1")
    assert await raw_values(sealed) == before


async def test_a_clear_database_stays_readable_once_keys_are_turned_on(store_url: str) -> None:
    async with open_store(store_url) as clear:
        made = await write_everything(clear)
        assert any(SECRET in str(v) for v in (await raw_values(clear))["events.data"])
    async with open_store(store_url, keyring=keyring("k1")) as sealed:
        await read_everything(sealed, made)
        status = await key_status(sealed)
        assert "k1" not in status and status["clear"]["events.data"] == 1
        report = await rotate(sealed, batch=2)
        assert not report.unreadable and report.total >= len(COLUMNS) - len(A2A) - 2
        status = await key_status(sealed)
        assert set(status) == {"k1"}, status
        for values in (await raw_values(sealed)).values():
            assert all(SECRET not in str(v) for v in values)
        await read_everything(sealed, made)


async def test_rotation_moves_every_value_to_the_newest_key(store_url: str) -> None:
    async with open_store(store_url, keyring=keyring("k1")) as old:
        made = await write_everything(old)
    async with open_store(store_url, keyring=keyring("k2", "k1")) as new:
        await read_everything(new, made)  # the old key still opens
        report = await rotate(new, batch=3)
        assert not report.unreadable and report.moved
        assert set(await key_status(new)) == {"k2"}
        again = await rotate(new, batch=3)
        assert again.total == 0  # done: nothing left
    async with open_store(store_url, keyring=keyring("k2")) as only_new:
        await read_everything(only_new, made)  # the old key can go


async def test_keys_configuration_is_checked(tmp_path: Any) -> None:
    with pytest.raises(errors.InvalidArgument, match="32 bytes"):
        Keyring([("k1", b"short")])
    with pytest.raises(errors.InvalidArgument, match="given twice"):
        Keyring([("k1", KEYS["k1"]), ("k1", KEYS["k2"])])
    path = tmp_path / "keys"
    path.write_text("# newest first\nk2 not-base64!\n")
    with pytest.raises(errors.InvalidArgument, match="line 2: key 'k2' is not base64"):
        Keyring.from_file(path)
    path.write_text(Keyring.new_line("k2") + "\n" + Keyring.new_line("k1") + "\n")
    ring = Keyring.from_file(path)
    assert ring.ids == ("k2", "k1") and ring.primary == "k2"
    assert SECRET not in str(base64.b64encode(KEYS["k1"]))


async def test_per_user_keys_shred_one_user_only(store_url: str) -> None:
    async with open_store(store_url, keyring=keyring("k1"), per_user_keys=True) as store:
        sessions = DurableSessionService(store)
        for user in ("alice", "bob"):
            s = await sessions.create_session(
                app_name=APP, user_id=user, session_id="s", state={"who": SECRET + user}
            )
            await sessions.append_event(
                s,
                Event(
                    author="user",
                    invocation_id="i1",
                    content=types.Content(role="user", parts=[types.Part(text=SECRET)]),
                ),
            )
        keys = {envelope_key(v) for v in (await raw_values(store))["events.data"]}
        assert len(keys) == 2 and all(k and k.startswith("u-") for k in keys)
        destroyed = await shred_user(store, APP, "alice")
        assert destroyed is not None and destroyed in keys
        assert await shred_user(store, APP, "alice") is None  # idempotent
    async with open_store(store_url, keyring=keyring("k1"), per_user_keys=True) as fresh:
        sessions = DurableSessionService(fresh)
        bob = await sessions.get_session(app_name=APP, user_id="bob", session_id="s")
        assert bob is not None and bob.state["who"] == SECRET + "bob"
        with pytest.raises(errors.KeyUnavailable, match=destroyed):
            await sessions.get_session(app_name=APP, user_id="alice", session_id="s")
        # Rotating the keyring re-wraps bob's data key; his values stay as they are.
    async with open_store(store_url, keyring=keyring("k2", "k1"), per_user_keys=True) as rotated:
        report = await rotate(rotated)
        assert report.rewrapped == 1 and not report.moved and not report.unreadable
        # Values under users' keys are not re-sealed (alice's stay, unreadable for good).
        assert (await key_status(rotated))["user keys"]["events.data"] == 2
    async with open_store(store_url, keyring=keyring("k2"), per_user_keys=True) as only_new:
        bob = await DurableSessionService(only_new).get_session(
            app_name=APP, user_id="bob", session_id="s"
        )
        assert bob is not None and bob.state["who"] == SECRET + "bob"


def test_marker_is_not_json() -> None:
    # A clear value is JSON text, which never starts with the marker.
    assert not MARK.startswith(("{", "[", '"', "t", "f", "n")) and not MARK[0].isdigit()


def test_keys_without_the_crypto_extra_name_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.ciphers.aead", None)
    with pytest.raises(errors.InvalidArgument, match=r"durable-adk\[crypto\]"):
        Keyring([("k1", KEYS["k1"])])


def test_keys_commands_refuse_bad_input_and_change_nothing(store_url: str, tmp_path: Any) -> None:
    asyncio.run(_clear_run(store_url))
    runner = CliRunner()
    env = {"COLUMNS": "300", KEY_FILE_ENV: ""}
    result = runner.invoke(cli_app, ["keys", "rotate", "--db", store_url], env=env)
    assert result.exit_code == 2 and "--key-file" in result.output
    bad = tmp_path / "bad.keys"
    bad.write_text("k1 c2hvcnQ=\n")
    result = runner.invoke(
        cli_app, ["keys", "rotate", "--db", store_url, "--key-file", str(bad)], env=env
    )
    assert result.exit_code == 2 and "32 bytes" in result.output
    result = runner.invoke(cli_app, ["keys", "new", "u-1"], env=env)
    assert result.exit_code == 2 and "users' data keys" in result.output
    result = runner.invoke(cli_app, ["keys", "status", "--db", store_url, "--json"], env=env)
    assert result.exit_code == 0, result.output
    assert [k["key_id"] for k in json.loads(result.output)["keys"]] == ["clear"]


async def _clear_run(url: str) -> None:
    async with open_store(url) as store:
        await RunLedger(store).submit(
            app_name=APP, user_id=USER, session_id="s1", request={"text": SECRET}, owner="w"
        )
