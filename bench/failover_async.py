"""What an asynchronous standby loses at a failover, and what that does to runs and acts.

Not a default and not in the suite: an experiment, run from the repository root::

    .venv/bin/python -m bench.failover_async [--runs 12] [--lag 2.0]

A private primary with an *asynchronous* streaming standby
(:class:`~durable_adk.chaos.failover.ReplicatedPostgres` with
``synchronous=False``), two ``durable-adk serve`` workers of the chaos app on
the two-host URL (default 30 s lease), and the soak's counting services.
Replication lag is made deterministic: the primary's WAL sender is frozen
(SIGSTOP) for ``--lag`` seconds while runs go on, so everything the primary
acknowledged in that window exists only on the primary. Then the primary is
SIGKILLed (its sender with it) and the standby promoted: the window's
acknowledged commits are gone.

It prints what the workers had been told before the failover against what the
new primary holds (runs the API had answered DONE or 202 for, journal entries,
acts counted at the services), the soak's verdict, and every WARNING or ERROR
line the workers logged afterwards (what the library noticed). Figures are in
docs/postgres.md, "Asynchronous replication".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from durable_adk.chaos.check import TERMINAL, judge
from durable_adk.chaos.failover import ReplicatedPostgres
from durable_adk.chaos.soak import (
    AUTH,
    install_observer,
    read_log,
    read_store,
    serve_command,
    start_logged,
    wait_listening,
    worker_env,
)
from durable_adk.store import open_store
from durable_adk.testing.services import FakeService


def walsender_pid(data_dir: Path) -> int:
    """The primary's WAL sender process (a child of its postmaster).

    Frozen, it sends nothing: what the primary commits meanwhile is on the
    primary alone (freezing the standby's receiver would not do: what the
    sender had written waits in the socket and arrives when it thaws).
    """
    postmaster = int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            title = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == postmaster and "walsender" in title:
            return int(entry.name)
    raise RuntimeError("no WAL sender found under the primary's postmaster")


def run_row(url: str, run_id: str) -> dict[str, Any] | None:
    try:
        answer = httpx.get(f"{url}/v1/runs/{run_id}", headers=AUTH, timeout=10)
    except httpx.HTTPError:
        return None
    return dict(answer.json()["run"]) if answer.status_code == 200 else None


def submit(url: str, session: str, order: str, *, approval: bool = False) -> str | None:
    ask = " Only with approval." if approval else ""
    body = {"message": f"Please charge order {order} and tell the customer.{ask}"}
    try:
        answer = httpx.post(
            f"{url}/v1/users/chaos/sessions/{session}/runs", json=body, headers=AUTH, timeout=30
        )
    except httpx.HTTPError:
        return None
    return str(answer.json()["run"]["run_id"]) if answer.status_code == 202 else None


def open_approvals(url: str) -> dict[str, dict[str, Any]]:
    """The open approval calls of the inbox, by the run they pause."""
    query = {"app_name": "chaos", "kind": "long_running", "limit": 500}
    try:
        answer = httpx.get(f"{url}/v1/interrupts", params=query, headers=AUTH, timeout=10)
    except httpx.HTTPError:
        return {}
    if answer.status_code != 200:
        return {}
    items = answer.json()["interrupts"]
    return {str(i["run_id"]): dict(i) for i in items if i.get("name") == "approve_order"}


def approve(url: str, item: dict[str, Any]) -> int:
    """Answers one approval call; the HTTP status (200 taken, 409 already answered)."""
    body = {"by": "bench", "payload": {"approved": True}, "session_id": item["session_id"]}
    try:
        answer = httpx.post(
            f"{url}/v1/interrupts/{item['call_id']}", json=body, headers=AUTH, timeout=30
        )
    except httpx.HTTPError:
        return 0
    return answer.status_code


def wait_for_approvals(url: str, runs: list[str], seconds: float) -> dict[str, dict[str, Any]]:
    """Waits until each of ``runs`` waits on its approval; the open calls of those found."""
    deadline = time.monotonic() + seconds
    found: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        found = {r: i for r, i in open_approvals(url).items() if r in runs}
        if len(found) == len(runs):
            break
        time.sleep(0.3)
    return found


async def journal_of(db: str) -> dict[str, str]:
    async with open_store(db) as store:
        rows = await store.fetch("journal_list", {"invocation_id": None, "limit": 10_000})
    return {str(r["key"]): str(r["status"]) for r in rows}


def experiment(runs: int, lag: float, approvals: int, folder: Path) -> None:
    say = print
    with (
        ReplicatedPostgres(synchronous=False) as pair,
        FakeService("payments", folder / "payments.db", quiet=True) as payments,
        FakeService("notifications", folder / "notifications.db", quiet=True) as notifications,
    ):
        urls = {"payments": payments.url, "notifications": notifications.url}
        pair.create_database("chaos")
        db = pair.url("chaos")
        asyncio.run(install_observer(db))
        workers: list[tuple[subprocess.Popen[bytes], Path, str]] = []
        for name in ("a1", "a2"):
            log = folder / f"{name}.log"
            env = worker_env(name, urls, tool_seconds=0.5)
            process = start_logged(
                serve_command(db, name, lease=30.0, sweep_interval=5.0), env, log
            )
            workers.append((process, log, wait_listening(process, log)))
        api = workers[0][2]
        try:
            accepted: list[str] = []
            for i in range(runs // 2):  # before the lag: replicated
                run_id = submit(workers[i % 2][2], f"s{i}", f"ORD-A{i}")
                if run_id:
                    accepted.append(run_id)
            paused: list[str] = []
            for i in range(approvals):  # paused on a person before the lag: replicated
                run_id = submit(workers[i % 2][2], f"p{i}", f"ORD-P{i}", approval=True)
                if run_id:
                    accepted.append(run_id)
                    paused.append(run_id)
            waiting = wait_for_approvals(api, paused, 60)
            time.sleep(1.0)
            sender = walsender_pid(pair.primary.data_dir)
            os.kill(sender, signal.SIGSTOP)  # the primary stops sending: lag begins
            lag_started = time.monotonic()
            in_lag: list[str] = []
            for i in range(runs // 2, runs):  # accepted during the lag: on the primary only
                run_id = submit(workers[i % 2][2], f"s{i}", f"ORD-A{i}")
                if run_id:
                    accepted.append(run_id)
                    in_lag.append(run_id)
            answered = {r: approve(api, item) for r, item in waiting.items()}  # primary only
            time.sleep(max(0.0, lag - (time.monotonic() - lag_started)))
            told = {r: (run_row(api, r) or {}).get("status") for r in accepted}
            journal_before = asyncio.run(journal_of(db))
            pair.kill_primary()  # the frozen sender with it: its WAL never leaves
            pair.promote()
            promoted = time.monotonic()
            time.sleep(6.0)  # a sweep of each worker meets the new primary
            reopened = wait_for_approvals(api, paused, 0.1)
            again = {r: approve(api, item) for r, item in reopened.items()}  # a person looks again
            for i in range(runs, runs + 2):  # new work on the new primary
                run_id = submit(workers[i % 2][2], f"s{i}", f"ORD-A{i}")
                if run_id:
                    accepted.append(run_id)
            deadline = promoted + 90
            rows: dict[str, dict[str, Any] | None] = {}
            while time.monotonic() < deadline:
                rows = {r: run_row(api, r) for r in accepted}
                if all(row is None or row["status"] in TERMINAL for row in rows.values()):
                    break
                time.sleep(0.5)
            settled = time.monotonic() - promoted
            journal_after = asyncio.run(journal_of(db))
        finally:
            for process, _log, _url in workers:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process, _log, _url in workers:
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
        records = asyncio.run(read_store(db))
        requests = [r for name, url in urls.items() for r in read_log(name, url)]
        verdict = judge(accepted=accepted, requests=requests, **records)

        say(f"\nruns accepted: {len(accepted)} ({len(in_lag)} during the {lag:.1f}s lag)")
        say(
            f"approvals answered during the lag: {len(answered)} "
            f"(HTTP {sorted(answered.values())});"
            f" open again in the inbox after the promotion: {len(reopened)};"
            f" answered again: {sorted(again.values())}; those runs now: "
            f"{sorted(((rows.get(r) or {}).get('status') or 'MISSING') for r in paused)}"
        )
        lost_rows = [r for r in accepted if rows.get(r) is None]
        say(f"runs answered 202 whose row the new primary lacks: {len(lost_rows)}")
        done_before = [r for r, s in told.items() if s == "DONE"]
        redone = [r for r in done_before if (rows.get(r) or {}).get("epoch", 1) > 1]
        say(
            f"runs the API answered DONE before the kill: {len(done_before)}; re-driven after: "
            f"{len(redone)}"
        )
        say(
            f"settled {settled:.1f}s after the promotion; statuses now: "
            f"{sorted(((rows.get(r) or {}).get('status') or 'MISSING') for r in accepted)}"
        )
        lost_done = [
            k for k, s in journal_before.items() if s == "DONE" and journal_after.get(k) != "DONE"
        ]
        say(
            f"journal entries DONE before the kill and not after the promotion (before the "
            f"runs went on): {len(lost_done)}"
        )
        acts: dict[str, int] = {}
        for request in requests:
            if request.acted:
                acts[request.key] = acts.get(request.key, 0) + 1
        doubled = {k: n for k, n in acts.items() if n > 1}
        lookups = sum(1 for r in requests if r.action == "lookup")
        say(
            f"acts at the services: {sum(acts.values())}; keys acted twice: {doubled or 'none'}; "
            f"lookups asked: {lookups}"
        )
        for name in verdict.findings:
            found = verdict.findings[name]
            if found:
                say(f"verdict: {name}: {len(found)}: {found[:3]}")
        say(f"verdict violations: {verdict.violations}")
        for _process, log, _url in workers:
            loud = [
                line
                for line in log.read_text(errors="replace").splitlines()
                if " WARNING " in line or " ERROR " in line or "LISTEN" in line
            ]
            say(f"--- {log.stem}: {len(loud)} WARNING/ERROR lines")
            for line in loud[:12]:
                say("   " + line[:300])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--lag", type=float, default=2.0)
    parser.add_argument("--approvals", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dadk-async-") as folder:
        experiment(args.runs, args.lag, args.approvals, Path(folder))


if __name__ == "__main__":
    main()
