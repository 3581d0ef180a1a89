"""The dashboard's versions: listed with their runs and workers, drained and undrained in a
real browser; a drained version's worker refuses a new run, then takes one again."""

from __future__ import annotations

from pathlib import Path

import pytest
from svc_support import TOKEN, settings_for, threaded_worker
from test_dashboard import CHROMIUM_ARGS, chromium

from durable_adk.adk import runpath


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
                actions = client.get("/v1/actions", params={"limit": 10}).json()["actions"]
            assert [a["action"] for a in reversed(actions)] == ["version_drain", "version_undrain"]
        finally:
            browser.close()
