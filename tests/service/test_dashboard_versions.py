"""The dashboard's versions: listed with their runs and workers, drained and undrained in a
real browser; a drained version's worker refuses a new run, then takes one again."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from op_support import APP
from svc_support import TOKEN, settings_for, threaded_worker
from test_dashboard import CHROMIUM_ARGS, chromium

from durable_adk.adk.runs import path as runpath
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger
from durable_adk.versions import Serving


def wait_done(client: httpx.Client, run_id: str) -> None:
    deadline = time.monotonic() + 30
    while client.get(f"/v1/runs/{run_id}").json()["run"]["status"] != "DONE":
        assert time.monotonic() < deadline, run_id
        time.sleep(0.05)


async def open_run(db: str, version: str) -> str:
    """A QUEUED run of ``version`` with an hour's lease: nobody claims it meanwhile."""
    async with open_store(db) as store:
        ledger = RunLedger(
            store, lease_seconds=3600, serving=Serving.declare(version, fingerprint="fp-old")
        )
        run = await ledger.submit(
            app_name=APP, user_id="u1", session_id="old", request={}, owner="gone"
        )
        return run.run_id


def test_dashboard_drains_and_undrains_a_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    executable = chromium()
    from playwright.sync_api import expect, sync_playwright

    monkeypatch.setattr(runpath, "DRAIN_CHECK_EVERY", 0.0)  # every submit reads the drain
    settings = settings_for(
        f"sqlite:///{tmp_path}/versions.db",
        app_version="1.4.0",
        compatible_versions=("1.3.0",),
        worker_id="w-dash",
    )
    with threaded_worker(settings) as worker, sync_playwright() as driver:
        with worker.client() as client:
            started = client.post("/v1/users/u1/sessions/s1/runs", json={"message": "lamps"})
            assert started.status_code == 202, started.text
        browser = driver.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{worker.base_url}/dashboard/#token={TOKEN}")
            expect(page.locator("#main")).to_be_visible()
            current = page.locator("#versions tbody tr", has_text="1.4.0")
            expect(current).to_contain_text("DONE 1")
            expect(current).to_contain_text("taking runs")
            older = page.locator("#versions tbody tr", has_text="1.3.0")
            expect(older).to_contain_text("w-dash")  # continued by this worker
            message = page.locator("#version-message")

            current.locator("button.drain").click()
            expect(message).to_contain_text("Give your name")
            page.fill("#version-by", "ana")
            current.locator("button.drain").click()
            expect(message).to_contain_text("1.4.0 is now drained")
            expect(current).to_contain_text("drained by ana")
            with worker.client() as client:
                refused = client.post("/v1/users/u1/sessions/s2/runs", json={"message": "desks"})
                assert refused.status_code == 503 and "drained" in refused.text
            current.locator("button.undrain").click()
            expect(message).to_contain_text("1.4.0 is now taking new runs")
            with worker.client() as client:
                again = client.post("/v1/users/u1/sessions/s2/runs", json={"message": "desks"})
                assert again.status_code == 202, again.text
                wait_done(client, again.json()["run"]["run_id"])

            # A run of 1.3.0 left open: moved to 1.4.0, then abandoned, from the page.
            # In a thread of its own: Playwright's sync API runs a loop in this one.
            with ThreadPoolExecutor(1) as pool:
                old = pool.submit(asyncio.run, open_run(settings.db, "1.3.0")).result()
            page.reload()
            expect(page.locator("#main")).to_be_visible()
            older = page.locator("#versions tbody tr", has_text="1.3.0")
            expect(older).to_contain_text("QUEUED 1")
            page.fill("#version-by", "ana")
            older.locator("button.move").click()
            expect(message).to_contain_text("Give the version to move to")
            page.fill("#version-to", "1.4.0")
            older.locator("button.move").click()
            expect(message).to_contain_text("1 open run(s) of 1.3.0 moved to 1.4.0")
            current = page.locator("#versions tbody tr", has_text="1.4.0")
            expect(current).to_contain_text("QUEUED 1")
            current.locator("button.abandon").click()
            expect(message).to_contain_text("Give a reason")
            page.fill("#version-reason", "1.3.0 is retired")
            current.locator("button.abandon").click()
            expect(message).to_contain_text("1 open run(s) of 1.4.0 cancelled")
            with worker.client() as client:
                run = client.get(f"/v1/runs/{old}").json()["run"]
                assert (run["status"], run["app_version"]) == ("CANCELLED", "1.4.0")
                actions = client.get("/v1/actions", params={"limit": 10}).json()["actions"]
            assert [a["action"] for a in reversed(actions)] == [
                "version_drain",
                "version_undrain",
                "version_move",
                "cancel",
            ]
        finally:
            browser.close()
