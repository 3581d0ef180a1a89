"""A Workflow node's confirmation in the inbox, over a real worker, on both backends.

A real ADK Workflow (``wf_support``) whose FunctionNode was built with
``require_confirmation=True`` pauses on ``adk_request_input`` under the call
id ``wf_tool_confirmation:shipping@1/ship@1``. The inbox lists it as a
**confirmation** (with the call it guards), so it is approved or denied like
a tool's confirmation: over HTTP (httpx against uvicorn on a socket), with
the call id percent-encoded or its ``/`` sent plain, and through the CLI
(``interrupts list/answer --url``, ``--db``, ``--approve``/``--reject``).
Approved, the node runs once; denied, it does not run; a second answer is
refused and changes nothing; a payload alone is refused for a confirmation.
``runs resolve --url`` takes a call id with ``/`` too.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import wf_support
from op_support import park_in_store
from svc_support import TOKEN, ThreadedWorker, settings_for, threaded_worker
from typer.testing import CliRunner

from durable_adk.cli import app
from durable_adk.service.paths import segment
from durable_adk.store import open_store

runner = CliRunner()
CALL = "wf_tool_confirmation:shipping@1/ship@1"


def cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(
        app, list(args), env={"COLUMNS": "250", "DURABLE_ADK_OPERATOR": "ops-ana"}
    )
    return result.exit_code, result.output


@pytest.fixture
def worker(store_url: str) -> Iterator[ThreadedWorker]:
    wf_support.SHIPPED.clear()
    with threaded_worker(settings_for(store_url), app=wf_support.app()) as running:
        yield running


def wait_status(client: httpx.Client, run_id: str, *statuses: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        run: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()["run"]
        if run["status"] in statuses:
            return run
        assert time.monotonic() < deadline, f"run {run_id} stayed {run['status']}"
        time.sleep(0.05)


def pause(client: httpx.Client, session: str, order: str) -> tuple[str, dict[str, Any]]:
    """A run of the workflow that pauses on the ship node's confirmation."""
    started = client.post(f"/v1/users/u1/sessions/{session}/runs", json={"message": order})
    assert started.status_code == 202, started.text
    run_id = started.json()["run"]["run_id"]
    wait_status(client, run_id, "PAUSED")
    found = client.get("/v1/interrupts", params={"session_id": session}).json()["interrupts"]
    (interrupt,) = found
    return run_id, interrupt


def state(client: httpx.Client) -> tuple[Any, ...]:
    """Everything an answer could change: the totals, the inbox, the audit trail, the runs."""
    inbox = [
        client.get("/v1/interrupts", params={"status": s}).json()["interrupts"]
        for s in ("OPEN", "ANSWERED", "EXPIRED", "CLOSED")
    ]
    return (
        client.get("/v1/stats").json(),
        inbox,
        client.get("/v1/actions").json(),
        client.get("/v1/runs").json(),
        list(wf_support.SHIPPED),
    )


def test_a_node_confirmation_is_approved_by_its_call_id_with_a_slash(
    worker: ThreadedWorker,
) -> None:
    with worker.client() as client:
        approved, interrupt = pause(client, "w1", "O-1")
        denied, _ = pause(client, "w2", "O-2")
        assert interrupt["call_id"] == CALL and "/" in interrupt["call_id"]
        assert interrupt["name"] == "adk_request_input"
        assert interrupt["kind"] == "confirmation"
        assert interrupt["guarded_call"] == {"name": "ship", "args": {"order_id": "O-1"}}
        assert len(client.get("/v1/interrupts", params={"kind": "confirmation"}).json()[
            "interrupts"
        ]) == 2  # fmt: skip
        assert client.get("/v1/interrupts", params={"kind": "input"}).json()["interrupts"] == []
        assert wf_support.SHIPPED == []

        encoded = f"/v1/interrupts/{segment(CALL)}"
        assert "%2F" in encoded
        before = state(client)
        for path, body, status, says in (
            (encoded, {"by": "ana", "payload": {"confirmed": True}, "session_id": "w1"}, 422,
             "answer approve or deny"),
            (f"/v1/interrupts/{segment('wf_tool_confirmation:shipping@1/nope@1')}",
             {"by": "ana", "decision": "approve"}, 404, "no interrupt"),
            (encoded, {"by": "ana", "decision": "approve"}, 409, "open in several sessions"),
            ("/v1/interrupts/a%00b", {"by": "ana", "decision": "approve"}, 422, ""),
        ):  # fmt: skip
            refused = client.post(path, json=body)
            assert refused.status_code == status and says in refused.text, (path, refused.text)
        assert state(client) == before

        # Percent-encoded, as the client, the CLI and the dashboard send it.
        answered = client.post(
            encoded, json={"by": "ana", "decision": "approve", "session_id": "w1"}
        )
        assert answered.status_code == 200, answered.text
        body = answered.json()
        assert body["interrupt"]["answer"] == {"confirmed": True}
        assert body["interrupt"]["call_id"] == CALL
        wait_status(client, body["run"]["run_id"], "DONE")
        wait_status(client, approved, "DONE")
        assert wf_support.SHIPPED == ["O-1"]
        detail = client.get(f"/v1/runs/{body['run']['run_id']}").json()
        assert {"shipped": "O-1"} in wf_support.outputs(detail)

        # The '/' sent plain reaches the same route.
        plain = client.post(
            f"/v1/interrupts/{CALL}", json={"by": "bo", "decision": "deny", "session_id": "w2"}
        )
        assert plain.status_code == 200, plain.text
        wait_status(client, plain.json()["run"]["run_id"], "DONE")
        wait_status(client, denied, "DONE")
        assert wf_support.SHIPPED == ["O-1"]  # denied: the node did not run
        detail = client.get(f"/v1/runs/{plain.json()['run']['run_id']}").json()
        assert {"error": "This tool call is rejected."} in wf_support.outputs(detail)

        before = state(client)
        again = client.post(encoded, json={"by": "bo", "decision": "approve", "session_id": "w1"})
        assert again.status_code == 409 and "already answered by ana" in again.text
        assert state(client) == before


def test_the_cli_lists_and_approves_a_node_confirmation(
    worker: ThreadedWorker, store_url: str
) -> None:
    url = ["--url", worker.base_url, "--token", TOKEN]
    with worker.client() as client:
        first, _ = pause(client, "c1", "O-7")
        second, _ = pause(client, "c2", "O-8")
    code, out = cli("interrupts", "list", "--kind", "confirmation", "--json", *url)
    assert code == 0, out
    listed = json.loads(out)["items"]
    assert [(i["call_id"], i["kind"]) for i in listed] == [(CALL, "confirmation")] * 2
    code, out = cli("interrupts", "list", *url)
    assert code == 0 and 'ship({"order_id": "O-7"})' in out and "confirmation" in out, out

    code, out = cli("interrupts", "answer", CALL, "--approve", "--session", "c1", *url)
    assert code == 0, out
    assert "answered by ops-ana" in out
    # On the database, with --reject: the worker's next sweep carries it on.
    code, out = cli(
        "interrupts", "answer", CALL, "--reject", "--session", "c2", "--json",
        "--db", store_url,
    )  # fmt: skip
    assert code == 0, out
    assert json.loads(out)["interrupt"]["answer"] == {"confirmed": False}
    with worker.client() as client:
        wait_status(client, first, "DONE")
        wait_status(client, second, "DONE")
    assert wf_support.SHIPPED == ["O-7"]
    code, out = cli("interrupts", "answer", CALL, "--approve", "--session", "c1", *url)
    assert code == 1 and "already answered by ops-ana" in out


async def park_with_slashed_call(url: str) -> tuple[str, str]:
    async with open_store(url) as store:
        run, call_id = await park_in_store(store, "r1", call_id="node/sub@1/confirm")
        return run.run_id, call_id


def test_runs_resolve_through_a_worker_takes_a_call_id_with_a_slash(
    store_url: str,
) -> None:
    run_id, call_id = asyncio.run(park_with_slashed_call(store_url))
    with threaded_worker(settings_for(store_url)) as running:
        url = ["--url", running.base_url, "--token", TOKEN]
        code, out = cli(
            "runs", "resolve", run_id, "--call", f'{call_id}={{"in_stock": 3}}', "--json", *url
        )
        assert code == 0, out
        outcome = json.loads(out)
        assert outcome["changed"] and outcome["run"]["status"] == "QUEUED"
        assert call_id in outcome["message"]
        with running.client() as client:
            wait_status(client, run_id, "DONE")
            detail = client.get(f"/v1/runs/{run_id}").json()
        answers = [
            part["function_response"]
            for item in detail["events"]
            for part in (item["event"].get("content") or {}).get("parts") or []
            if part.get("function_response")
        ]
        assert [(a["id"], a["response"]) for a in answers] == [(call_id, {"in_stock": 3})]
