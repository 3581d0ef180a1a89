"""Encryption at rest through real ``durable-adk serve`` workers (issue 43).

A worker started with ``--key-file`` stores a run's message, events and
request sealed (the raw rows hold no clear text) and shows them decrypted;
``durable-adk keys status`` answers alike on the database and through the
worker; a worker without the key shows a placeholder naming the key id
where the data was, instead of failing or showing ciphertext.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
from google.genai import types
from svc_support import AUTH, TOKEN, launch_serve, wait_ready
from typer.testing import CliRunner

from durable_adk.adk.services.artifacts import DurableArtifactService
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.cli import app
from durable_adk.store import Keyring, open_store
from durable_adk.store.queries import parse_queries
from durable_adk.store.sealing.codec import KEY_FILE_ENV, envelope_key
from durable_adk.tables.ledger import RunLedger

SECRET = "lamps-SECRET-99"


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "400", KEY_FILE_ENV: ""})
    return result.exit_code, result.output


def done(client: httpx.Client, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        detail: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
        if detail["run"]["status"] == "DONE":
            return detail
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not finish")


async def raw_events(url: str) -> list[str]:
    async with open_store(url, keyring=None) as store:
        store.add_queries(
            parse_queries("-- name: t_raw\nSELECT data FROM events;\n", store.dialect)
        )
        return [str(r["data"]) for r in await store._fetch("t_raw")]


def test_a_keyed_worker_seals_and_a_keyless_one_shows_placeholders(
    store_url: str, tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    keys.write_text(Keyring.new_line("k1") + "\n")
    env = {k: v for k, v in os.environ.items() if k != KEY_FILE_ENV}
    keyed = wait_ready(
        launch_serve(store_url, worker_id="keyed", env=env, options=["--key-file", str(keys)])
    )
    try:
        with httpx.Client(base_url=keyed.base_url, headers=AUTH, timeout=30) as client:
            started = client.post("/v1/users/ann/sessions/s1/runs", json={"message": SECRET})
            assert started.status_code == 202, started.text
            run_id = started.json()["run"]["run_id"]
            detail = done(client, run_id)
            assert SECRET in json.dumps(detail)  # the key holder sees it
            events = client.get("/v1/users/ann/sessions/s1/events").json()
            assert SECRET in json.dumps(events)
        stored = asyncio.run(raw_events(store_url))
        assert stored and all(envelope_key(d) == "k1" for d in stored)
        assert not any(SECRET in d for d in stored)
        code, out = cli("keys", "status", "--url", keyed.base_url, "--token", TOKEN, "--json")
        assert code == 0, out
        through_worker = json.loads(out)
        assert through_worker["primary"] == "k1"
        assert {k["key_id"] for k in through_worker["keys"]} == {"k1"}
    finally:
        keyed.process.terminate()
        keyed.process.wait(30)
    code, out = cli("keys", "status", "--db", store_url, "--key-file", str(keys), "--json")
    assert code == 0, out
    assert json.loads(out)["keys"] == through_worker["keys"]
    keyless = wait_ready(launch_serve(store_url, worker_id="keyless", env=env))
    try:
        with httpx.Client(base_url=keyless.base_url, headers=AUTH, timeout=30) as client:
            shown = client.get(f"/v1/runs/{run_id}")
            assert shown.status_code == 200, shown.text + "".join(keyless.lines)
            assert SECRET not in shown.text and "key k1 not held" in shown.text
            events = client.get("/v1/users/ann/sessions/s1/events")
            assert events.status_code == 200, events.text
            at = events.text.find(SECRET)
            assert at < 0, events.text[max(0, at - 300) : at + 50]
            assert "key k1 not held" in events.text
            assert "dadk:enc:" not in events.text  # a placeholder, never the ciphertext
    finally:
        keyless.process.terminate()
        keyless.process.wait(30)


async def _write_shared_and_details(url: str, keys: Keyring) -> str:
    """user:/app: state, an artifact's metadata and an operator's detail, sealed; the run id."""
    async with open_store(url, keyring=keys) as store:
        sessions = DurableSessionService(store)
        await sessions.create_session(
            app_name="lamps",
            user_id="ann",
            session_id="prefs",
            state={"user:email": SECRET, "app:motd": SECRET},
        )
        await DurableArtifactService(store).save_artifact(
            app_name="lamps",
            user_id="ann",
            session_id="prefs",
            filename="scan.txt",
            artifact=types.Part(text="x"),
            custom_metadata={"owner": SECRET},
        )
        ledger = RunLedger(store)
        run = await ledger.submit(
            app_name="lamps", user_id="ann", session_id="prefs", request={"t": "x"}, owner="w"
        )
        await ledger.record_action(
            run.run_id, action="answer", by="ops", detail={"response": SECRET}
        )
        return run.run_id


def test_workers_show_sealed_operator_details_only_with_the_key_and_count_the_new_columns(
    store_url: str, tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    keys.write_text(Keyring.new_line("k1") + "\n")
    run_id = asyncio.run(_write_shared_and_details(store_url, Keyring.from_file(keys)))
    env = {k: v for k, v in os.environ.items() if k != KEY_FILE_ENV}
    keyed = wait_ready(
        launch_serve(store_url, worker_id="keyed", env=env, options=["--key-file", str(keys)])
    )
    try:
        with httpx.Client(base_url=keyed.base_url, headers=AUTH, timeout=30) as client:
            actions = client.get("/v1/actions", params={"run_id": run_id})
            assert actions.status_code == 200, actions.text
            assert SECRET in actions.text and "dadk:enc:" not in actions.text
            status = client.get("/v1/keys").json()
            (k1,) = status["keys"]
            assert k1["key_id"] == "k1"
            for column in (
                "app_state.state",
                "user_state.state",
                "artifacts.custom_metadata",
                "operator_actions.detail",
            ):
                assert k1["columns"].get(column, 0) >= 1, (column, k1["columns"])
            metrics = client.get("/metrics").text
            assert f'durable_adk_encrypted_values{{key_id="k1"}} {float(k1["values"])}' in metrics
    finally:
        keyed.process.terminate()
        keyed.process.wait(30)
    keyless = wait_ready(launch_serve(store_url, worker_id="keyless", env=env))
    try:
        with httpx.Client(base_url=keyless.base_url, headers=AUTH, timeout=30) as client:
            actions = client.get("/v1/actions", params={"run_id": run_id})
            assert actions.status_code == 200, actions.text + "".join(keyless.lines)
            assert SECRET not in actions.text and "dadk:enc:" not in actions.text
            assert "key k1 not held" in actions.text
    finally:
        keyless.process.terminate()
        keyless.process.wait(30)
