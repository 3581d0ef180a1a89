"""A log already holding an event the reader cannot parse (issue 47), both backends.

Before the library bounded what it stores, a job result nested 250 levels
deep was stored as a call's answer; pydantic-core's JSON parser stops at
about 200 levels, so every fresh worker failed to load the session and a
plain ``hello`` ended FAILED. The poisoned row is written here with SQL, as
that older version left it. The session must still load (the row kept as
stored, shown as unreadable with its id and reason), a run that meets it is
PARKED with that reason, recovery, the run's view (``runs show``, the
dashboard's API) and the events route never crash on it, and an operator's
repair (CLI or HTTP, audited) makes the session readable: the next run is
DONE.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.events.event import Event
from google.adk.flows.llm_flows.context._contents import _get_contents
from google.adk.runners import Runner
from google.genai import types
from svc_support import AUTH, Service, launch_serve, wait_ready
from typer.testing import CliRunner

from durable_adk import DurableRunsPlugin, RunStatus
from durable_adk.adk.eventlog.unreadable import UNREADABLE_KEY, unreadable_in
from durable_adk.adk.runs.driver import UnreadableLog
from durable_adk.adk.servers.uri import DurableUriSessionService
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.cli import app as cli_app
from durable_adk.demo.service_app import APP_NAME
from durable_adk.store import Store, open_store
from durable_adk.tables.ledger import RunLedger
from durable_adk.testing import Say, ScriptedModel

DEPTH = 250


def nested(depth: int) -> Any:
    value: Any = "the report"
    for _ in range(depth):
        value = {"rows": value}
    return value


def deep_answer(invocation_id: str) -> Event:
    """The call's answer an older version stored: a job's result nested 250 levels."""
    event = Event(
        invocation_id=invocation_id,
        author=APP_NAME,
        content=types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(
                        id="call-report", name="check_stock", response={"result": nested(DEPTH)}
                    )
                )
            ],
        ),
    )
    event.actions.state_delta = {"last_report": "ready"}
    return event


POISON_SQLITE = (
    "INSERT INTO events (session_pk, seq, event_id, invocation_id, author, timestamp, delta, data) "
    "SELECT pk, last_seq + 1, ?, ?, ?, ?, ?, ? FROM sessions "
    "WHERE app_name = ? AND user_id = ? AND session_id = ?"
)
POISON_PG = (
    "INSERT INTO events (session_pk, seq, event_id, invocation_id, author, timestamp, delta, data) "
    "SELECT pk, last_seq + 1, $1, $2, $3, $4, $5, $6 FROM sessions "
    "WHERE app_name = $7 AND user_id = $8 AND session_id = $9"
)
BUMP_SQLITE = (
    "UPDATE sessions SET last_seq = last_seq + 1 WHERE app_name = ? AND user_id = ? "
    "AND session_id = ?"
)
BUMP_PG = (
    "UPDATE sessions SET last_seq = last_seq + 1 WHERE app_name = $1 AND user_id = $2 "
    "AND session_id = $3"
)


async def write_row(
    store_url: str, session_id: str, event: Event, data: str, app_name: str = APP_NAME
) -> None:
    """Appends a row with SQL, as an older version (or a damaged disk) left it."""
    delta = json.dumps(event.actions.state_delta) if event.actions.state_delta else None
    values = (event.id, event.invocation_id, event.author, event.timestamp, delta, data)
    key = (app_name, "u1", session_id)
    if store_url.startswith("sqlite"):
        conn = sqlite3.connect(store_url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(POISON_SQLITE, (*values, *key))
            conn.execute(BUMP_SQLITE, key)
            conn.execute("COMMIT")
        finally:
            conn.close()
        return
    pg = await asyncpg.connect(store_url)
    try:
        async with pg.transaction():
            await pg.execute(POISON_PG, *values, *key)
            await pg.execute(BUMP_PG, *key)
    finally:
        await pg.close()


async def poisoned_session(store_url: str, session_id: str, app_name: str = APP_NAME) -> Event:
    """A session whose earlier turn holds the deep answer; returns that event."""
    async with open_store(store_url) as store:
        sessions = DurableSessionService(store)
        session = await sessions.create_session(
            app_name=app_name, user_id="u1", session_id=session_id
        )
        for event in (
            Event(
                invocation_id="e-old",
                author="user",
                content=types.Content(role="user", parts=[types.Part(text="stools")]),
            ),
            Event(
                invocation_id="e-old",
                author=APP_NAME,
                content=types.Content(
                    role="model",
                    parts=[
                        types.Part(
                            function_call=types.FunctionCall(
                                id="call-report", name="check_stock", args={"item": "stools"}
                            )
                        )
                    ],
                ),
            ),
        ):
            await sessions.append_event(session, event)
    poison = deep_answer("e-old")
    data = poison.model_dump_json(exclude_none=True)
    await write_row(store_url, session_id, poison, data, app_name=app_name)
    return poison


async def wait_status(service: Service, run_id: str, *statuses: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        run = (await service.client.get(f"/v1/runs/{run_id}")).json()["run"]
        if run["status"] in statuses:
            return run
        assert time.monotonic() < deadline, f"run {run_id} stayed {run['status']}"
        await asyncio.sleep(0.05)


async def say(service: Service, session_id: str, text: str) -> dict[str, Any]:
    response = await service.client.post(
        f"/v1/users/u1/sessions/{session_id}/runs", json={"message": text}
    )
    assert response.status_code in (200, 202), response.text
    run_id = response.json()["run"]["run_id"]
    return await wait_status(service, run_id, "DONE", "FAILED", "PARKED")


async def totals(store: Store) -> dict[str, Any]:
    return dict(await store.fetchrow("service_store_stats") or {})


async def test_a_poisoned_log_loads_parks_its_run_and_is_repaired(
    service: Service, store_url: str
) -> None:
    poison = await poisoned_session(store_url, "s1")

    # A fresh worker's hello parks with the reason, instead of failing.
    parked = await say(service, "s1", "hello")
    assert parked["status"] == "PARKED", parked
    assert "unreadable event" in parked["last_error"]
    assert poison.id in parked["last_error"] and "recursion limit" in parked["last_error"]
    assert parked["classification"] == "UNREADABLE_EVENT"
    letters = await RunLedger(service.store).dead_letters(run_id=parked["run_id"])
    assert len(letters) == 1 and poison.id in (letters[0].error or "")

    # The session loads: the row is kept as stored, shown as unreadable.
    session = await service.worker.sessions.get_session(
        app_name=APP_NAME, user_id="u1", session_id="s1"
    )
    assert session is not None
    (found,) = unreadable_in(session.events)
    assert (found.event_id, found.seq, found.invocation_id) == (poison.id, 3, "e-old")
    assert "recursion limit" in found.reason
    stand_in = next(e for e in session.events if e.id == poison.id)
    assert stand_in.content is None and stand_in.custom_metadata is not None
    assert session.state["last_report"] == "ready"  # the row's delta still counts
    listed = await service.worker.sessions.list_sessions(app_name=APP_NAME, user_id="u1")
    assert [s.id for s in listed.sessions] == ["s1"]
    fresh = DurableSessionService(service.store)  # another process's cold read
    partial = await fresh.get_session(
        app_name=APP_NAME,
        user_id="u1",
        session_id="s1",
        config=_recent(10),
    )
    assert partial is not None and unreadable_in(partial.events)[0].event_id == poison.id

    # The run's view (runs show, the dashboard), the events route and the listing.
    detail = await service.client.get(f"/v1/runs/{parked['run_id']}")
    assert detail.status_code == 200, detail.text
    events = await service.client.get("/v1/users/u1/sessions/s1/events")
    # The parked run wrote nothing (not even its message): three events, the last unreadable.
    assert events.status_code == 200 and len(events.json()["events"]) == 3
    shown = events.json()["events"][-1]["event"]
    assert shown["id"] == poison.id and "recursion limit" in str(shown["custom_metadata"])
    assert (await service.client.get("/dashboard/")).status_code == 200
    listing = await service.client.get("/v1/users/u1/sessions/s1/unreadable")
    assert listing.status_code == 200
    assert [(u["event_id"], u["seq"]) for u in listing.json()["unreadable"]] == [(poison.id, 3)]

    # Bad repairs are refused and change nothing.
    before = await totals(service.store)
    readable = session.events[0].id
    refused = [
        await service.client.post(
            f"/v1/users/u1/sessions/s1/events/{readable}/repair",
            json={"by": "ops", "reason": "x"},
        ),
        await service.client.post(
            "/v1/users/u1/sessions/s1/events/no-such-event/repair",
            json={"by": "ops", "reason": "x"},
        ),
        await service.client.post(
            f"/v1/users/u1/sessions/s1/events/{poison.id}/repair", json={"by": "ops"}
        ),
        await service.client.post(
            f"/v1/users/u1/sessions/s1/events/{poison.id}/repair",
            json={"by": "ops", "reason": "x", "replacement": {"author": "someone-else"}},
        ),
    ]
    assert [r.status_code for r in refused] == [409, 404, 422, 422], [r.text for r in refused]
    assert await totals(service.store) == before

    # Another worker that has the log cached (with the stand-in) reads the repair.
    other = DurableSessionService(service.store)
    assert unreadable_in(
        (await other.get_session(app_name=APP_NAME, user_id="u1", session_id="s1")).events  # type: ignore[union-attr]
    )

    # The operator's repair: the calls kept by id, the answer an error; audited.
    repaired = await service.client.post(
        f"/v1/users/u1/sessions/s1/events/{poison.id}/repair",
        json={"by": "ops-ana", "reason": "job result nested too deep"},
    )
    assert repaired.status_code == 200, repaired.text
    body = repaired.json()
    assert body["repair"]["action"] == "drop" and body["repair"]["actor"] == "ops-ana"
    listing = (await service.client.get("/v1/users/u1/sessions/s1/unreadable")).json()
    assert listing["unreadable"] == [] and len(listing["repairs"]) == 1
    session = await service.worker.sessions.get_session(
        app_name=APP_NAME, user_id="u1", session_id="s1"
    )
    assert session is not None and unreadable_in(session.events) == []
    (answer,) = session.events[2].get_function_responses()
    assert answer.id == "call-report" and "dropped by ops-ana" in str(answer.response)
    assert session.state["last_report"] == "ready"
    seen_elsewhere = await other.get_session(app_name=APP_NAME, user_id="u1", session_id="s1")
    assert seen_elsewhere is not None and unreadable_in(seen_elsewhere.events) == []
    again = await service.client.post(
        f"/v1/users/u1/sessions/s1/events/{poison.id}/repair",
        json={"by": "ops", "reason": "again"},
    )
    assert again.status_code == 409  # readable now: nothing to repair

    # A new run completes; the parked one is retried and completes too.
    assert (await say(service, "s1", "hello"))["status"] == "DONE"
    retried = await service.client.post(f"/v1/runs/{parked['run_id']}/retry", json={"by": "ops"})
    assert retried.status_code == 200, retried.text
    assert (await wait_status(service, parked["run_id"], "DONE", "FAILED", "PARKED"))[
        "status"
    ] == "DONE"


def _recent(n: int) -> Any:
    from google.adk.sessions.base_session_service import GetSessionConfig

    return GetSessionConfig(num_recent_events=n)


async def test_recovery_parks_an_orphan_of_a_poisoned_session(
    service: Service, store_url: str
) -> None:
    poison = await poisoned_session(store_url, "s2")
    ledger = RunLedger(service.store)
    request = {"role": "user", "parts": [{"text": "hello"}]}
    orphan = await ledger.submit(
        app_name=APP_NAME, user_id="u1", session_id="s2", request=request, owner="dead-worker"
    )
    claimed = await ledger.claim_queued(orphan.run_id, "dead-worker")
    assert claimed is not None
    await ledger.backdate(orphan.run_id, 120)  # its worker died long ago
    run = await wait_status(service, orphan.run_id, "DONE", "FAILED", "PARKED")
    assert run["status"] == "PARKED" and poison.id in run["last_error"], run
    assert run["attempts"] >= 1


async def test_a_damaged_row_is_unreadable_too(service: Service, store_url: str) -> None:
    await poisoned_session(store_url, "s3")
    damaged = Event(invocation_id="e-old", author="user")
    await write_row(store_url, "s3", damaged, '{"id": "' + damaged.id + '", "content": {')
    session = await service.worker.sessions.get_session(
        app_name=APP_NAME, user_id="u1", session_id="s3"
    )
    assert session is not None
    assert [u.seq for u in unreadable_in(session.events)] == [3, 4]
    events = await service.client.get("/v1/users/u1/sessions/s3/events")
    assert events.status_code == 200
    assert UNREADABLE_KEY in events.json()["events"][-1]["event"]["custom_metadata"]
    # The damaged row keeps nothing to answer: dropped, it is an empty stand-in.
    done = await service.client.post(
        f"/v1/users/u1/sessions/s3/events/{damaged.id}/repair",
        json={"by": "ops", "reason": "damaged row"},
    )
    assert done.status_code == 200, done.text
    session = await service.worker.sessions.get_session(
        app_name=APP_NAME, user_id="u1", session_id="s3"
    )
    assert session is not None and [u.seq for u in unreadable_in(session.events)] == [3]
    assert session.events[3].id == damaged.id and session.events[3].content is None


async def _poisoned_with_run(store_url: str, session_id: str) -> tuple[Event, str]:
    poison = await poisoned_session(store_url, session_id)
    async with open_store(store_url) as store:
        run = await RunLedger(store).submit(
            app_name=APP_NAME,
            user_id="u1",
            session_id=session_id,
            request={"parts": []},
            owner="w",
        )
    return poison, run.run_id


async def _answer_of(store_url: str, session_id: str) -> Any:
    async with open_store(store_url) as store:
        session = await DurableSessionService(store).get_session(
            app_name=APP_NAME, user_id="u1", session_id=session_id
        )
    assert session is not None
    (response,) = session.events[2].get_function_responses()
    return response.response


def test_the_cli_lists_shows_and_repairs(store_url: str, tmp_path: Path) -> None:
    poison, run_id = asyncio.run(_poisoned_with_run(store_url, "s4"))
    runner = CliRunner()

    def cli(*args: str) -> tuple[int, str]:
        result = runner.invoke(cli_app, [*args, "--db", store_url], env={"COLUMNS": "200"})
        return result.exit_code, result.output

    code, out = cli("runs", "show", run_id)
    assert code == 0, out
    code, out = cli("sessions", "unreadable", "u1", "s4", "--app", APP_NAME)
    assert code == 0 and poison.id in out and "recursion limit" in out, out
    answer = {
        "content": {
            "role": "user",
            "parts": [
                {
                    "function_response": {
                        "id": "call-report",
                        "name": "check_stock",
                        "response": {"result": "the report (trimmed)"},
                    }
                }
            ],
        },
        "actions": {"state_delta": {"last_report": "ready"}},
    }
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({**answer, "actions": {"state_delta": {"other": 1}}}))
    code, out = cli(
        "sessions", "repair", "u1", "s4", poison.id, "--reason", "x", "--with", str(wrong)
    )
    assert code == 2 and "state delta" in out, out  # the library rejects it: bad input
    code, out = cli("sessions", "repair", "u1", "s4", poison.id, "--reason", "x")
    assert code == 2 and "exactly one of --drop and --with" in out, out
    replacement = tmp_path / "answer.json"
    replacement.write_text(json.dumps(answer))
    code, out = cli(
        "sessions",
        "repair",
        "u1",
        "s4",
        poison.id,
        "--reason",
        "trimmed by hand",
        "--with",
        str(replacement),
        "--by",
        "ops-ben",
        "--json",
    )
    assert code == 0, out
    assert json.loads(out)["repair"]["action"] == "replace"
    code, out = cli("sessions", "unreadable", "u1", "s4", "--app", APP_NAME)
    assert code == 0 and "every event is readable" in out and "replace by ops-ben" in out, out
    assert asyncio.run(_answer_of(store_url, "s4")) == {"result": "the report (trimmed)"}


def test_adk_builds_contents_without_the_stand_in() -> None:
    from durable_adk.adk.eventlog.unreadable import placeholder

    user = Event(
        invocation_id="i",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text="hello")]),
    )
    stand_in = placeholder(
        seq=2,
        data=deep_answer("i").model_dump_json(exclude_none=True),
        reason="Invalid JSON: recursion limit exceeded",
    )
    contents = _get_contents(None, [user, stand_in], APP_NAME)
    assert [p.text for c in contents for p in c.parts or []] == ["hello"]


@pytest.mark.parametrize("depth", [DEPTH])
def test_the_stand_in_keeps_the_row_when_only_the_text_is_known(depth: int) -> None:
    from durable_adk.adk.eventlog.unreadable import placeholder

    event = deep_answer("i")
    stand_in = placeholder(seq=7, data=event.model_dump_json(exclude_none=True), reason="too deep")
    assert (stand_in.id, stand_in.invocation_id, stand_in.author) == (
        event.id,
        "i",
        APP_NAME,
    )
    assert stand_in.actions.state_delta == {"last_report": "ready"}
    assert stand_in.custom_metadata == {UNREADABLE_KEY: {"seq": 7, "reason": "too deep"}}


async def test_adks_own_runner_under_the_plugin_parks_before_the_model(store_url: str) -> None:
    poison = await poisoned_session(store_url, "s5", app_name="greeter")
    service = DurableUriSessionService(f"durable+{store_url}")
    model = ScriptedModel([Say("hello")])
    runner = Runner(
        app=App(
            name="greeter",
            root_agent=LlmAgent(name="greeter", model=model),
            plugins=[DurableRunsPlugin()],
        ),
        session_service=service,
    )
    message = types.Content(role="user", parts=[types.Part(text="hello")])
    try:
        # ADK wraps a plugin's error in a RuntimeError naming the plugin.
        with pytest.raises(RuntimeError) as caught:
            async for _ in runner.run_async(user_id="u1", session_id="s5", new_message=message):
                pass
        assert isinstance(caught.value.__cause__, UnreadableLog)
        (run,) = await RunLedger(service.store).list_runs()
        assert run.status is RunStatus.PARKED and poison.id in (run.last_error or "")
        assert model.calls == []  # the model was never asked
    finally:
        await service.durable_runs.aclose()
        await service.store.close()


def test_a_fresh_serve_process_parks_hello_and_the_repair_lets_the_next_one_finish(
    store_url: str,
) -> None:
    # The report, end to end: `durable-adk serve` (a process of its
    # own, nothing cached) on a database an older version poisoned.
    poison = asyncio.run(poisoned_session(store_url, "s6"))
    process = launch_serve(store_url, worker_id="fresh-worker")
    try:
        served = wait_ready(process)
        with httpx.Client(base_url=served.base_url, headers=AUTH, timeout=30) as client:

            def hello() -> dict[str, Any]:
                started = client.post("/v1/users/u1/sessions/s6/runs", json={"message": "hello"})
                assert started.status_code == 202, started.text
                run_id = started.json()["run"]["run_id"]
                deadline = time.monotonic() + 60
                while True:
                    run: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()["run"]
                    if run["status"] in ("DONE", "FAILED", "PARKED"):
                        return run
                    assert time.monotonic() < deadline, run
                    time.sleep(0.05)

            parked = hello()
            assert parked["status"] == "PARKED" and poison.id in parked["last_error"], parked
            repaired = client.post(
                f"/v1/users/u1/sessions/s6/events/{poison.id}/repair",
                json={"by": "ops", "reason": "nested too deep"},
            )
            assert repaired.status_code == 200, repaired.text
            assert hello()["status"] == "DONE"
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
