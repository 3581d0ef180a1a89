"""The dashboard's schedules: listed with their next ticks, paused, resumed and triggered
in a real browser; the triggered tick's run is driven to its end by the worker."""

from __future__ import annotations

from pathlib import Path

from schedules_app import durable_adk_schedules, root_agent
from svc_support import TOKEN, settings_for, threaded_worker
from test_dashboard import CHROMIUM_ARGS, chromium

from durable_adk.adk.services.app_services import AppServices


def test_dashboard_pauses_resumes_and_triggers_a_schedule(tmp_path: Path) -> None:
    executable = chromium()
    from playwright.sync_api import expect, sync_playwright

    url = f"sqlite:///{tmp_path}/schedules.db"
    settings = settings_for(
        url, services=AppServices(schedules=tuple(durable_adk_schedules)), app_version="3.1"
    )
    with threaded_worker(settings, app=root_agent) as worker, sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{worker.base_url}/dashboard/#token={TOKEN}")
            expect(page.locator("#main")).to_be_visible()
            rows = page.locator("#schedules tbody tr")
            expect(rows).to_have_count(2)
            weekly = page.locator("#schedules tbody tr", has_text="weekly-report")
            expect(weekly).to_contain_text("0 9 * * FRI (Europe/Berlin)")
            expect(weekly.locator("td.version")).to_have_text("3.1")  # the version declaring it
            message = page.locator("#schedule-message")

            weekly.locator("button.pause").click()
            expect(message).to_contain_text("Give your name")
            page.fill("#schedule-by", "ana")
            weekly.locator("button.pause").click()
            expect(message).to_contain_text("weekly-report is now paused")
            expect(weekly).to_contain_text("paused")
            weekly.locator("button.resume").click()
            expect(message).to_contain_text("weekly-report is now active")
            weekly.locator("button.trigger").click()
            expect(message).to_contain_text("Triggered weekly-report")

            with worker.client() as client:
                waited = 0.0
                while True:  # the worker's next poll fires the tick; its run ends DONE
                    ticks = client.get("/v1/schedules/weekly-report/ticks").json()["ticks"]
                    run_id = ticks[0]["run_id"] if ticks else None
                    status = run_id and client.get(f"/v1/runs/{run_id}").json()
                    if status and status.get("run", {}).get("status") == "DONE":
                        break
                    assert waited < 30.0, ticks
                    page.wait_for_timeout(100)
                    waited += 0.1
                actions = client.get("/v1/actions", params={"limit": 10}).json()
            expect(weekly).to_contain_text(run_id[:10])
            assert [a["action"] for a in reversed(actions["actions"])] == [
                "schedule_pause",
                "schedule_resume",
                "schedule_trigger",
            ]
        finally:
            browser.close()
