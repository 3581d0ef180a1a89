"""Retention and forgetting a user through a real ``durable-adk serve`` worker, both backends.

The worker is started with a retention policy (``--retention``): its purge
loop takes the finished sessions away by itself, and its ``/metrics`` count
the rows. The CLI reaches the same purge and forget through the worker
(``--url``/``--token``) and on the database (``--db``); the routes need the
operator token; a user with a run under way is refused (409, exit 1) and
nothing changes.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator

import httpx
import pytest
from svc_support import AUTH, TOKEN, ServeProcess, launch_serve, wait_ready
from typer.testing import CliRunner

from durable_adk.cli import app
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger

runner = CliRunner()
EVERYTHING = "done=0,failed=0,cancelled=0,parked=0,abandoned=0,idle=0"


def cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "400"})
    return result.exit_code, result.output


@pytest.fixture
def worker(store_url: str) -> Iterator[ServeProcess]:
    process = launch_serve(
        store_url,
        worker_id="keeper",
        options=["--retention", EVERYTHING, "--purge-interval", "0.3"],
    )
    try:
        yield wait_ready(process)
    finally:
        process.terminate()
        process.wait(timeout=30)


def wait_for(predicate: object, timeout: float = 30.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()  # type: ignore[operator]
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError("timed out")


async def queue_a_run(store_url: str) -> str:
    """A run QUEUED for user ``busy``, leased by another worker: under way."""
    async with open_store(store_url) as store:
        queued = await RunLedger(store).submit(
            app_name="stock_assistant",
            user_id="busy",
            session_id="b1",
            request={"role": "user", "parts": [{"text": "stools"}]},
            owner="another-worker",
        )
    return queued.run_id


def purged_runs(worker: ServeProcess) -> float:
    """The worker's count of runs rows its purge loop deleted (its metric)."""
    text = httpx.get(f"{worker.base_url}/metrics", headers=AUTH, timeout=30).text
    found = re.search(r'durable_adk_purged_rows_total\{table="runs"\} ([0-9.e+]+)', text)
    return float(found.group(1)) if found else 0.0


def test_the_workers_purge_loop_forget_route_and_cli_through_it(
    worker: ServeProcess, store_url: str
) -> None:
    with httpx.Client(base_url=worker.base_url, headers=AUTH, timeout=30) as client:
        started = client.post("/v1/users/u1/sessions/s1/runs", json={"message": "lamps"})
        assert started.status_code == 202, started.text
        run_id = started.json()["run"]["run_id"]

        def gone() -> bool:
            # The run ends DONE, then the purge loop takes its session, run and all.
            return client.get(f"/v1/runs/{run_id}").status_code == 404

        wait_for(gone)
        assert client.get("/v1/users/u1/sessions/s1").status_code == 404
        # The pass records its counts when it ends, just after the rows went.
        metrics = wait_for(
            lambda: (
                'durable_adk_purged_rows_total{table="runs"} 1.0'
                in (text := client.get("/metrics").text)
                and text
            )
        )
        assert 'durable_adk_purged_rows_total{table="events"}' in str(metrics)

        # A user with a run under way: refused, nothing changes.
        queued = asyncio.run(queue_a_run(store_url))
        refused = client.post("/v1/users/busy/forget", json={"by": "ops"})
        assert refused.status_code == 409, refused.text
        assert queued in refused.json()["error"]["message"]
        assert client.get(f"/v1/runs/{queued}").status_code == 200
        code, out = cli("users", "forget", "busy", "--url", worker.base_url, "--token", TOKEN)
        assert code == 1 and "under way" in out and "--cancel-live" in out
        assert (
            httpx.post(f"{worker.base_url}/v1/users/busy/forget", json={"by": "x"}).status_code
            == 401
        )
        bad = client.post("/v1/purge", json={"retention": "finished=1d"})
        assert bad.status_code == 422 and "unknown retention name" in bad.text
        bad = client.post("/v1/purge", json={"duty": 2})
        assert bad.status_code == 422 and "duty must be a share of the time" in bad.text

    runs_before = purged_runs(worker)
    code, out = cli(
        "users", "forget", "busy", "--cancel-live", "--url", worker.base_url,
        "--token", TOKEN, "--by", "ops", "--json",
    )  # fmt: skip
    assert code == 0, out
    report = json.loads(out)
    assert report["cancelled"] == [queued]
    # The run went once. Forgetting marks the user's sessions (here a stand-in for
    # the run's session, which has no row), and the worker's own purge loop, every
    # 0.3 s, drains whatever is marked too: either may delete the run. The worker
    # counts every row deleted in it once, by its loop (at the end of a pass) or
    # by the forget route; the report, what the forget itself deleted.
    assert report["deleted"].get("runs", {}).get("rows", 0) in (0, 1), report
    wait_for(lambda: purged_runs(worker) - runs_before >= 1)
    assert purged_runs(worker) - runs_before == 1
    with httpx.Client(base_url=worker.base_url, headers=AUTH, timeout=30) as client:
        assert client.get(f"/v1/runs/{queued}").status_code == 404
    code, out = cli("purge", "--dry-run", "--url", worker.base_url, "--token", TOKEN, "--json")
    assert code == 0, out
    (report,) = json.loads(out)["items"]
    assert report["dry_run"] is True
    code, out = cli("purge", "--retention", EVERYTHING, "--db", store_url, "--dry-run")
    assert code == 0 and "nothing to purge" in out, out  # the worker took it all
    code, out = cli("purge", "--retention", "done=-1d", "--db", store_url)
    assert code == 2 and "must not be negative" in out
    code, out = cli("purge", "--retention", "done=1d", "--db", store_url, "--app", "nope")
    assert code == 2 and "unknown app 'nope'" in out  # bad input: exit 2
