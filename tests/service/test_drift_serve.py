"""Redeploys that meet the journal, moved runs and answers handed to another version,
through real ``durable-adk serve`` workers on both backends (issue 41).

The app (``drift_app``) is deployed with code ``a`` and then with code ``b``,
which changed a journaled tool's key template, dropped a tool and renamed a
tool behind a confirmation. Workers die at real crash points (exit 137, as a
SIGKILL); every effect is counted at fake outside services.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from svc_support import AUTH, TOKEN, ServeProcess, wait_ready, wait_until
from typer.testing import CliRunner

from children import spawn
from durable_adk.cli import app as cli_app
from durable_adk.testing import FakeService, arm

HERE = Path(__file__).parent


@pytest.fixture
def outside(tmp_path: Path) -> Iterator[dict[str, FakeService]]:
    """The payments and carrier services the app's tools act on (they count every act)."""
    with (
        FakeService("payments", tmp_path / "payments.db") as payments,
        FakeService("carrier", tmp_path / "carrier.db") as carrier,
    ):
        yield {"payments": payments, "carrier": carrier}


class Fleet:
    """``durable-adk serve drift_app:app`` workers of one test, stopped at its end."""

    def __init__(self, db: str, outside: dict[str, FakeService]) -> None:
        self.db = db
        self.outside = outside
        self.processes: list[subprocess.Popen[str]] = []

    def launch(
        self,
        worker_id: str,
        *,
        code: str,
        version: str,
        compatible: tuple[str, ...] = (),
        crash_at: str | None = None,
    ) -> ServeProcess:
        command = [
            sys.executable, "-m", "durable_adk.cli", "serve", "drift_app:app",
            "--db", self.db, "--port", "0", "--token", TOKEN, "--worker-id", worker_id,
            "--lease", "2", "--sweep-interval", "0.2", "--drain-seconds", "1",
            "--app-version", version,
        ]  # fmt: skip
        for older in compatible:
            command += ["--compatible-version", older]
        env = {
            **os.environ,
            "DRIFT_APP_CODE": code,
            "DRIFT_PAYMENTS_URL": self.outside["payments"].url,
            "DRIFT_CARRIER_URL": self.outside["carrier"].url,
        }
        if crash_at is not None:
            env = arm(env, crash_at)
        process = spawn(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=HERE
        )
        self.processes.append(process)
        return wait_ready(process)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture
def fleet(store_url: str, outside: dict[str, FakeService]) -> Iterator[Fleet]:
    workers = Fleet(store_url, outside)
    try:
        yield workers
    finally:
        workers.stop()


def client(worker: ServeProcess) -> httpx.Client:
    return httpx.Client(base_url=worker.base_url, headers=AUTH, timeout=30)


def start(worker: ServeProcess, session: str, message: str) -> str:
    with client(worker) as http:
        started = http.post(f"/v1/users/ann/sessions/{session}/runs", json={"message": message})
    assert started.status_code == 202, started.text
    return str(started.json()["run"]["run_id"])


def run_of(worker: ServeProcess, run_id: str) -> dict[str, Any]:
    with client(worker) as http:
        detail: dict[str, Any] = http.get(f"/v1/runs/{run_id}").json()
    return detail


def wait_status(worker: ServeProcess, run_id: str, *statuses: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        detail = run_of(worker, run_id)
        return detail if detail["run"]["status"] in statuses else None

    try:
        found: dict[str, Any] = wait_until(reached, timeout=60, interval=0.1)
    except AssertionError:
        raise AssertionError(
            f"run {run_id}: {run_of(worker, run_id)['run']}\n" + "".join(worker.lines[-60:])
        ) from None
    return found


def interrupt_of(worker: ServeProcess, session: str) -> dict[str, Any]:
    with client(worker) as http:
        found = http.get("/v1/interrupts", params={"session_id": session}).json()["interrupts"]
    (interrupt,) = [i for i in found if i["status"] == "OPEN"]
    return dict(interrupt)


def runs_of(worker: ServeProcess) -> list[dict[str, Any]]:
    with client(worker) as http:
        runs: list[dict[str, Any]] = http.get("/v1/runs", params={"limit": 100}).json()["runs"]
    return runs


def test_a_redeploy_that_changed_a_journaled_key_parks_instead_of_charging_twice(
    fleet: Fleet, outside: dict[str, FakeService]
) -> None:
    """1.0 deployed twice: the second code keys ``charge`` differently. The first worker
    dies after the payments service took the charge and before the journal's DONE; the
    second parks the run naming the tool and both templates, and never charges again."""
    payments = outside["payments"]
    first = fleet.launch("w-a", code="a", version="1.0", crash_at="journal.after_act")
    run_id = start(first, "o-1", "charge o-1 40")
    assert first.process.wait(60) == 137, "".join(first.lines)
    assert payments.acts("charges", "create") == 1  # the charge was taken, DONE never written

    second = fleet.launch("w-b", code="b", version="1.0")
    parked = wait_status(second, run_id, "PARKED", "DONE", "FAILED")
    reason = parked["run"]["last_error"] or ""
    assert parked["run"]["status"] == "PARKED", reason
    assert "drift" in reason and "journaled tool 'charge'" in reason, reason
    assert "'charge:{order_id}'" in reason and "'charge:{order_id}:{amount}'" in reason, reason
    (letter,) = parked["dead_letters"]
    assert "'charge:{order_id}:{amount}'" in letter["error"]
    # Counted at the outside service: one charge, one act, whatever the new code keys.
    assert payments.acts("charges", "create") == 1 and payments.count("charges") == 1


def test_a_run_mid_tool_whose_tool_the_new_code_dropped_is_parked_naming_both_reasons(
    fleet: Fleet, outside: dict[str, FakeService]
) -> None:
    """The worker dies inside ``ship`` (the carrier booked it); the new code has no
    ``ship``: the park names the missing tool and that its outcome is unknown."""
    carrier = outside["carrier"]
    first = fleet.launch("w-a", code="a", version="1.0", crash_at="drift_app.after_ship")
    run_id = start(first, "o-2", "ship o-2")
    assert first.process.wait(60) == 137, "".join(first.lines)

    second = fleet.launch("w-b", code="b", version="1.1", compatible=("1.0",))
    parked = wait_status(second, run_id, "PARKED", "DONE", "FAILED")
    reason = parked["run"]["last_error"] or ""
    assert parked["run"]["status"] == "PARKED", reason
    assert "drift" in reason and "tool 'ship'" in reason, reason  # no worker of it can go on
    assert "outcome unknown: ship may have acted" in reason, reason  # and it may have acted
    (letter,) = parked["dead_letters"]
    assert "tool 'ship'" in letter["error"] and "outcome unknown" in letter["error"]
    assert carrier.acts("shipments", "create") == 1


def test_a_moved_run_whose_confirmed_tool_was_renamed_parks_and_its_pause_ends_with_it(
    fleet: Fleet, outside: dict[str, FakeService], store_url: str
) -> None:
    """``versions move 1.1 --to 2.0`` onto code that renamed the tool behind a
    confirmation: the approval's run parks with a dead letter naming the tool, the
    paused run ends with it, and the carrier is never called."""
    carrier = outside["carrier"]
    old = fleet.launch("w-1.1", code="a", version="1.1")
    paused_id = start(old, "o-3", "confirm o-3")
    wait_status(old, paused_id, "PAUSED")
    call_id = interrupt_of(old, "o-3")["call_id"]
    old.process.terminate()
    assert old.process.wait(30) == 0

    moved = CliRunner().invoke(
        cli_app,
        ["versions", "move", "1.1", "--to", "2.0", "--app", "shop", "--db", store_url,
         "--by", "ana", "--json"],
    )  # fmt: skip
    assert moved.exit_code == 0 and '"moved": 1' in moved.output, moved.output

    new = fleet.launch("w-2.0", code="b", version="2.0")
    with client(new) as http:
        answered = http.post(f"/v1/interrupts/{call_id}", json={"by": "ana", "decision": "approve"})
    assert answered.status_code == 200, answered.text  # 2.0 now serves the moved run
    answer_id = answered.json()["run"]["run_id"]
    parked = wait_status(new, answer_id, "PARKED", "FAILED", "DONE")
    reason = parked["run"]["last_error"] or ""
    assert parked["run"]["status"] == "PARKED", reason
    assert "tool 'ship_order'" in reason, reason
    (letter,) = parked["dead_letters"]
    assert "tool 'ship_order'" in letter["error"]
    paused = run_of(new, paused_id)["run"]
    assert paused["status"] == "PARKED" and answer_id in (paused["last_error"] or ""), paused
    assert not [r for r in runs_of(new) if r["status"] == "PAUSED"]
    assert carrier.acts("shipments", "create") == 0


def test_answers_handed_to_a_worker_of_another_version_are_answered_409(
    fleet: Fleet, outside: dict[str, FakeService]
) -> None:
    """A pinned 2.0 beside 1.0 runs: an answer to a 1.0 pause sent to the 2.0 worker,
    by the inbox, the run API, the CLI or a job completion (API and CLI), is recorded
    and answered 409 ``version_elsewhere``; the 1.0 worker then finishes each, once."""
    carrier = outside["carrier"]
    v1 = fleet.launch("w-1.0", code="a", version="1.0")
    v2 = fleet.launch("w-2.0", code="a", version="2.0")
    paused = {s: start(v1, s, f"confirm {s}") for s in ("p-1", "p-2", "p-3")}
    paused["p-4"] = start(v1, "p-4", "report q3")
    paused["p-5"] = start(v1, "p-5", "report q4")
    for run_id in paused.values():
        wait_status(v1, run_id, "PAUSED")
    calls = {s: interrupt_of(v1, s) for s in ("p-1", "p-2", "p-3")}

    with client(v2) as http:
        by_inbox = http.post(
            f"/v1/interrupts/{calls['p-1']['call_id']}", json={"by": "ana", "decision": "approve"}
        )
        confirmation = {
            "function_response": {
                "id": calls["p-2"]["call_id"],
                "name": "adk_request_confirmation",
                "response": {"confirmed": True},
            }
        }
        by_api = http.post(
            "/v1/users/ann/sessions/p-2/runs",
            json={
                "invocation_id": calls["p-2"]["invocation_id"],
                "content": {"role": "user", "parts": [confirmation]},
            },
        )
        by_job = http.post(
            "/v1/jobs/report:q3/complete", json={"state": "SUCCEEDED", "result": {"rows": 3}}
        )
    for answer in (by_inbox, by_api, by_job):
        assert answer.status_code == 409, answer.text
        error = answer.json()["error"]
        assert error["code"] == "version_elsewhere", error
        assert "is recorded" in error["message"] and "version 1.0" in error["message"], error
    by_cli = CliRunner().invoke(
        cli_app,
        ["interrupts", "answer", calls["p-3"]["call_id"], "--approve", "--by", "ana",
         "--url", v2.base_url, "--token", TOKEN],
    )  # fmt: skip
    job_by_cli = CliRunner().invoke(
        cli_app,
        ["jobs", "complete", "report:q4", "--state", "SUCCEEDED", "--result", '{"rows": 4}',
         "--url", v2.base_url, "--token", TOKEN],
    )  # fmt: skip
    for done in (by_cli, job_by_cli):
        assert done.exit_code == 1, done.output
        assert "is recorded" in done.output and "version 1.0" in done.output, done.output

    # Recorded, not lost: the 1.0 worker continues every one, each acting once.
    for run_id in paused.values():
        wait_status(v1, run_id, "DONE")
    assert carrier.acts("shipments", "create") == 3 and carrier.count("shipments") == 3
    with client(v1) as http:
        jobs = [j for j in http.get("/v1/jobs").json()["items"] if j["job_id"].startswith("report")]
    assert sorted(j["job_id"] for j in jobs) == ["report:q3", "report:q4"]
    assert all(j["resumed_at"] is not None for j in jobs), jobs


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_bad_job_completion_to_another_version_changes_nothing(
    fleet: Fleet, outside: dict[str, FakeService]
) -> None:
    """Bad input to the routes that now answer 409 is refused as before, nothing written."""
    v2 = fleet.launch("w-2.0", code="a", version="2.0")
    with client(v2) as http:
        unknown = http.post("/v1/jobs/report:none/complete", json={"state": "SUCCEEDED"})
        wrong = http.post("/v1/jobs/report:none/complete", json={"state": "DONE", "result": 1})
        no_call = http.post("/v1/interrupts/nope", json={"by": "ana", "decision": "approve"})
    assert unknown.status_code in (404, 422) and wrong.status_code == 422, (unknown, wrong)
    assert no_call.status_code == 404, no_call.text
    assert runs_of(v2) == []
