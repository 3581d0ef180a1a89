"""Two ``durable-adk serve`` processes on one PostgreSQL: one dies mid-run, the
client reconnects to the other and sees the run finish; a SIGTERM drains."""

from __future__ import annotations

import os
import signal
import subprocess

import httpx
import pytest
from svc_support import (
    AUTH,
    ServeProcess,
    SseMessage,
    launch_serve,
    parse_sse,
    wait_ready,
    wait_until,
)

from durable_adk.testing import arm


def stop(processes: list[subprocess.Popen[str]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


def follow(url: str, path: str, seen: list[SseMessage], **headers: str) -> None:
    """Reads an SSE stream into ``seen`` until it ends or the connection breaks."""
    try:
        with (
            httpx.Client(base_url=url, headers=AUTH, timeout=60) as client,
            client.stream("GET", path, headers=headers) as response,
        ):
            assert response.status_code == 200
            seen.extend(parse_sse(response.iter_lines()))
    except httpx.HTTPError:
        pass  # the worker died under us


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_run_whose_worker_is_killed_finishes_on_another_worker(store_url: str) -> None:
    doomed_env = {**arm({}, "service_app.in_check_stock"), "DURABLE_ADK_DEMO_TOOL_SECONDS": "0.3"}
    launched = [
        launch_serve(store_url, worker_id="worker-a", env=doomed_env),
        launch_serve(store_url, worker_id="worker-b"),
    ]
    workers: list[ServeProcess] = []
    try:
        workers.extend(wait_ready(process) for process in launched)
        a, b = workers
        with httpx.Client(base_url=a.base_url, headers=AUTH, timeout=30) as client:
            started = client.post("/v1/users/ann/sessions/order-1/runs", json={"message": "lamps"})
        assert started.status_code == 202, started.text
        run_id = started.json()["run"]["run_id"]
        before: list[SseMessage] = []
        follow(a.base_url, started.json()["events_url"], before)
        assert a.process.wait(30) == 137, "".join(a.lines)  # died at the crash point
        assert before and all(m.event == "event" for m in before)  # no end: the stream broke
        last = before[-1].id
        assert last is not None

        after: list[SseMessage] = []
        path = f"/v1/users/ann/sessions/order-1/stream?run_id={run_id}"
        follow(b.base_url, path, after, **{"Last-Event-ID": last})
        assert after[-1].event == "end", "".join(b.lines)
        assert after[-1].data["runs"] == {run_id: "DONE"} and after[-1].data["reason"] == "settled"
        seqs = [m.data["seq"] for m in before + after if m.event == "event"]
        assert seqs == list(range(1, len(seqs) + 1))  # every event once, in order
        texts = [
            part.get("text")
            for m in after
            if m.event == "event"
            for part in (m.data["event"].get("content") or {}).get("parts", [])
        ]
        assert "7 in stock for 'lamps'." in texts
        with httpx.Client(base_url=b.base_url, headers=AUTH, timeout=30) as client:
            run = client.get(f"/v1/runs/{run_id}").json()["run"]
        assert (run["status"], run["owner"], run["classification"]) == (
            "DONE",
            "worker-b",
            "TOOL_UNANSWERED",  # what worker B's sweeper found: the tool had no answer
        )
        assert run["attempts"] == 2 and run["epoch"] == 2
    finally:
        stop(launched)


@pytest.mark.parametrize("backend", ["postgresql"])
def test_sigterm_hands_a_run_back_to_another_worker(store_url: str) -> None:
    slow = {"DURABLE_ADK_DEMO_TOOL_SECONDS": "60"}
    launched = [
        launch_serve(store_url, worker_id="worker-a", env=slow),
        launch_serve(store_url, worker_id="worker-b"),
    ]
    workers: list[ServeProcess] = []
    try:
        workers.extend(wait_ready(process) for process in launched)
        a, b = workers
        with httpx.Client(base_url=a.base_url, headers=AUTH, timeout=30) as client:
            started = client.post("/v1/users/bob/sessions/order-2/runs", json={"message": "sofas"})
            run_id = started.json()["run"]["run_id"]
            wait_until(
                lambda: client.get(f"/v1/runs/{run_id}").json()["run"]["status"] == "RUNNING"
            )
        os.kill(a.process.pid, signal.SIGTERM)
        assert a.process.wait(30) == 0, "".join(a.lines)  # drained, exited cleanly
        with httpx.Client(base_url=b.base_url, headers=AUTH, timeout=30) as client:
            # Handed back with an expired lease: B takes it over at its first sweep,
            # long before the 2-second lease would have run out by itself.
            run = wait_until(
                lambda: (
                    (r := client.get(f"/v1/runs/{run_id}").json()["run"])["status"] == "DONE" and r
                ),
                timeout=30,
            )
        assert run["owner"] == "worker-b" and run["attempts"] == 1
    finally:
        stop(launched)
