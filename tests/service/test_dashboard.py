"""The dashboard end to end in headless Chromium (Debian's, driven by Playwright).

A worker serves the page; the test logs in with the token, finds the parked
run with its reason, clicks Retry, watches the run leave the parked list and
finish, opens its session's timeline, and checks a screenshot. Without
Chromium the test skips, unless DURABLE_ADK_REQUIRE_BROWSER=1 (as .ci/run
sets) makes that a failure.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import struct
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import wf_support
from svc_support import TOKEN, ThreadedWorker, settings_for, threaded_worker

from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.effect_tables.jobs import JobTable
from durable_adk.store import open_store
from durable_adk.tables.ledger import RunLedger

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
SCREENSHOTS = (
    Path(os.environ.get("DURABLE_ADK_SCREENSHOTS", ""))
    if os.environ.get("DURABLE_ADK_SCREENSHOTS")
    else None
)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        found = None
    if found is None:
        if os.environ.get("DURABLE_ADK_REQUIRE_BROWSER") == "1":
            pytest.fail("Chromium and Playwright are required (DURABLE_ADK_REQUIRE_BROWSER=1)")
        pytest.skip("Chromium or Playwright is not installed")
    return found


async def park_a_run(url: str) -> str:
    async with open_store(url) as store:
        await DurableSessionService(store).create_session(
            app_name="stock_assistant", user_id="ann", session_id="order-7"
        )
        ledger = RunLedger(store)
        run = await ledger.submit(
            app_name="stock_assistant",
            user_id="ann",
            session_id="order-7",
            request={"role": "user", "parts": [{"text": "lamps"}]},
            owner="dead-worker",
        )
        claimed = await ledger.claim_queued(run.run_id, "dead-worker")
        assert claimed is not None
        await ledger.park(
            claimed.lease,
            error="outcome unknown: <script>alert('x')</script> may have acted",
            classification="TOOL_UNANSWERED",
        )
        return run.run_id


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[ThreadedWorker]:
    url = f"sqlite:///{tmp_path}/dashboard.db"
    run_id = asyncio.run(park_a_run(url))
    with threaded_worker(settings_for(url)) as running:
        running.parked_run = run_id  # type: ignore[attr-defined]
        yield running


def test_dashboard_shows_a_parked_run_and_retries_it(
    worker: ThreadedWorker, tmp_path: Path
) -> None:
    executable = chromium()
    from playwright.sync_api import expect, sync_playwright

    run_id: str = worker.parked_run  # type: ignore[attr-defined]
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            dialogs: list[str] = []
            page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
            console: list[str] = []  # errors the page logs (issue 42: a 404 at every load)
            page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
            failed: list[str] = []
            page.on(
                "response",
                lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None,
            )
            page.goto(f"{worker.base_url}/dashboard/")
            expect(page.locator("#login")).to_be_visible()
            page.fill("#token", "wrong-token")
            page.click("#connect")
            expect(page.locator("#login-error")).to_contain_text("token")
            page.fill("#token", TOKEN)
            page.click("#connect")

            expect(page.locator("#login")).to_be_hidden()
            row = page.locator(f"#parked tr[data-run-id='{run_id}']")
            expect(row).to_be_visible()
            expect(row).to_contain_text("TOOL_UNANSWERED")
            expect(row).to_contain_text("<script>alert('x')</script> may have acted")
            parked_tile = page.locator(".tile[data-status='PARKED']")
            expect(parked_tile).to_have_text("1PARKED")
            assert parked_tile.evaluate("t => getComputedStyle(t).color") != "rgb(255, 255, 255)"
            shot = tmp_path / "parked.png"
            page.screenshot(path=str(shot), full_page=True)
            check_screenshot(shot)
            if SCREENSHOTS:
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                shutil.copy(shot, SCREENSHOTS / "dashboard-parked.png")

            row.locator("button.retry").click()
            expect(page.locator("#action-message")).to_contain_text("QUEUED")
            expect(row).to_have_count(0, timeout=20_000)
            runs_row = page.locator(f"#runs tr[data-run-id='{run_id}']")
            expect(runs_row.locator(".status")).to_have_text("DONE", timeout=20_000)

            runs_row.click()
            expect(page.locator("#timeline-title")).to_have_text(
                "ann/order-7 · app stock_assistant"
            )
            expect(page.locator("#timeline li.action").first).to_contain_text("retry")
            expect(page.locator("#timeline li.action").first).to_contain_text("dashboard")
            timeline = page.locator("#timeline li[data-seq]")
            expect(timeline.first).to_contain_text("lamps")
            expect(page.locator("#timeline")).to_contain_text("7 in stock for 'lamps'.")
            expect(page.locator("#finding")).to_contain_text("ACTUALLY_DONE")
            # Each empty table says what would appear there.
            expect(page.locator("#jobs-note")).to_contain_text("long-running work would appear")
            expect(page.locator("#sagas-note")).to_contain_text("A saga's run would appear")
            expect(page.locator("#jobs")).to_be_hidden()
            expect(page.locator("#parked-empty")).to_contain_text("would appear here")
            expect(page.locator("#interrupts-empty")).to_contain_text("would appear here")
            expect(page.locator("#runs-empty")).to_be_hidden()
            with ThreadPoolExecutor(1) as other:  # Playwright's loop runs in this thread
                other.submit(
                    asyncio.run, start_a_job(f"sqlite:///{tmp_path}/dashboard.db")
                ).result()
            page.reload()
            headers = page.locator("#jobs thead th")
            expect(headers.first).to_have_text("job", timeout=20_000)
            titles = headers.all_inner_texts()
            assert titles[:2] == ["job", "tool"] and all("_" not in t for t in titles), titles
            expect(page.locator("#jobs tbody tr")).to_contain_text("check_stock")
            expect(page.locator("#jobs-note")).to_have_text("")
            assert dialogs == []  # the hostile reason was shown, not run
            # No console errors but the wrong token's 401s (by design); no 404 (a favicon).
            assert [t for t in console if "status of 401" not in t] == [], console
            assert [f for f in failed if not f.startswith("401 ")] == [], failed
            after = tmp_path / "retried.png"
            page.screenshot(path=str(after), full_page=True)
            check_screenshot(after)
            if SCREENSHOTS:
                shutil.copy(after, SCREENSHOTS / "dashboard-retried.png")
        finally:
            browser.close()


async def start_a_job(url: str) -> None:
    async with open_store(url) as store:
        await JobTable(store).create("stock-check-7", tool_name="check_stock", deadline=600)


def check_screenshot(path: Path) -> None:
    """The screenshot is a real page: a PNG of the viewport's width whose pixels vary.

    The image data is inflated with zlib (no imaging library needed). A blank
    page, once PNG-filtered, is almost all zero bytes of one or two values; a
    page with tables and text has hundreds of distinct bytes and many non-zero.
    """
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    assert width == 1400 and height >= 600, (width, height)
    chunks, offset = [], 8
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        if kind == b"IDAT":
            chunks.append(data[offset + 8 : offset + 8 + length])
        offset += 12 + length
    pixels = zlib.decompress(b"".join(chunks))
    distinct = len(set(pixels))
    busy = sum(1 for byte in pixels[::97] if byte) / len(pixels[::97])
    assert distinct > 100 and busy > 0.01, f"the screenshot looks blank ({distinct}, {busy:.3f})"


async def prepare_operator_runs(url: str) -> dict[str, str]:
    """Two parked runs with an unknown effect, one of another app, and a queued run."""
    from op_support import park_in_store

    async with open_store(url) as store:
        to_resolve, call_id = await park_in_store(store, "resolve-me", item="chairs")
        to_abandon, _ = await park_in_store(store, "abandon-me")
        foreign, _ = await park_in_store(store, "foreign", app_name="billing_app")
        await DurableSessionService(store).create_session(
            app_name="stock_assistant", user_id="u1", session_id="busy"
        )
        ledger = RunLedger(store, lease_seconds=600)
        holder = await ledger.submit(
            app_name="stock_assistant", user_id="u1", session_id="busy",
            request={"parts": []}, owner="elsewhere",
        )  # fmt: skip
        assert await ledger.claim_queued(holder.run_id, "elsewhere") is not None
        waiting = await ledger.submit(
            app_name="stock_assistant", user_id="u1", session_id="busy",
            request={"parts": []}, owner="elsewhere",
        )  # fmt: skip
        return {
            "resolve": to_resolve.run_id,
            "call": call_id,
            "abandon": to_abandon.run_id,
            "foreign": foreign.run_id,
            "queued": waiting.run_id,
        }


def test_dashboard_resolves_abandons_and_cancels_runs_of_every_app(tmp_path: Path) -> None:
    executable = chromium()
    from playwright.sync_api import expect, sync_playwright

    url = f"sqlite:///{tmp_path}/operator.db"
    ids = asyncio.run(prepare_operator_runs(url))
    with (
        threaded_worker(settings_for(url)) as worker,
        sync_playwright() as driver,
    ):
        browser = driver.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{worker.base_url}/dashboard/#token={TOKEN}")
            expect(page.locator("#main")).to_be_visible()
            message = page.locator("#action-message")

            # Every app's runs, with an app column and an app filter.
            foreign_row = page.locator(f"#parked tr[data-run-id='{ids['foreign']}']")
            expect(foreign_row).to_contain_text("billing_app")
            page.select_option("#app-filter", "billing_app")
            expect(page.locator("#parked tbody tr")).to_have_count(1)
            expect(page.locator(".tile[data-status='PARKED']")).to_have_text("1PARKED")
            foreign_row.locator("button.open").click()
            expect(page.locator("#finding")).to_contain_text("not classified")
            expect(page.locator("#finding")).to_contain_text("'billing_app'")
            expect(page.locator("#timeline")).to_contain_text("check_stock")
            page.select_option("#app-filter", "")
            expect(page.locator("#parked tbody tr")).to_have_count(3)

            # Resolve: the operator's result is the call's answer; the run goes on.
            row = page.locator(f"#parked tr[data-run-id='{ids['resolve']}']")
            row.locator("button.open").click()
            expect(page.locator("#controls-run")).to_contain_text(ids["resolve"])
            page.fill("#op-by", "ana")
            page.fill("#op-reason", "counted by hand")
            page.fill("#op-result", "{nope")
            page.click("#do-resolve")
            expect(message).to_contain_text("not JSON")
            page.fill("#op-result", '{"item": "chairs", "in_stock": 11}')
            page.click("#do-resolve")
            expect(message).to_contain_text("resolved")
            expect(row).to_have_count(0, timeout=20_000)
            expect(page.locator("#finding")).to_contain_text("DONE", timeout=20_000)
            timeline = page.locator("#timeline")
            expect(timeline).to_contain_text("11 in stock for 'chairs'.")
            expect(page.locator("#timeline li.takeover[data-epoch='2']")).to_contain_text(
                "operator ana"
            )
            expect(page.locator("#timeline li.action[data-action='resolve']")).to_contain_text(
                "counted by hand"
            )
            expect(page.locator("#do-resolve")).to_be_disabled()

            # Abandon needs a reason.
            row = page.locator(f"#parked tr[data-run-id='{ids['abandon']}']")
            row.locator("button.open").click()
            expect(page.locator("#controls-run")).to_contain_text(ids["abandon"])
            page.fill("#op-reason", "")
            page.click("#do-abandon")
            expect(message).to_contain_text("abandon failed")
            page.fill("#op-reason", "refunded the customer")
            page.click("#do-abandon")
            expect(message).to_contain_text("abandoned: it is FAILED")
            expect(row).to_have_count(0)

            # Cancel a queued run.
            page.select_option("#status-filter", "QUEUED")
            queued_row = page.locator(f"#runs tr[data-run-id='{ids['queued']}']")
            queued_row.click()
            expect(page.locator("#controls-run")).to_contain_text(ids["queued"])
            page.click("#do-cancel")
            expect(message).to_contain_text("CANCELLED")
            page.select_option("#status-filter", "CANCELLED")
            expect(page.locator(f"#runs tr[data-run-id='{ids['queued']}'] .status")).to_have_text(
                "CANCELLED"
            )
            shot = tmp_path / "operator.png"
            page.screenshot(path=str(shot), full_page=True)
            check_screenshot(shot)
            if SCREENSHOTS:
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                shutil.copy(shot, SCREENSHOTS / "dashboard-operator.png")
        finally:
            browser.close()


async def pause_for_approval(url: str, orders: list[str]) -> list[str]:
    """Runs of the approvals app, each PAUSED on its tool's confirmation."""
    from durable_adk.adk.runner import DurableRunner
    from durable_adk.demo.approvals_app import APP_NAME
    from durable_adk.demo.approvals_app import app as approvals_app

    async with open_store(url) as store:
        durable = DurableRunner(app=approvals_app(), app_name=APP_NAME, store=store)
        for order in orders:
            async for _ in durable.run(user_id="ann", session_id=order, message=order):
                pass
        return [r.run_id for r in await durable.ledger.list_runs()]


def test_dashboard_answers_interrupts_once(tmp_path: Path) -> None:
    executable = chromium()
    from playwright.sync_api import expect, sync_playwright

    from durable_adk.demo.approvals_app import app as approvals_app

    url = f"sqlite:///{tmp_path}/inbox.db"
    paused = asyncio.run(pause_for_approval(url, ["O-1", "O-2"]))
    with (
        threaded_worker(settings_for(url), app=approvals_app()) as worker,
        sync_playwright() as driver,
    ):
        browser = driver.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{worker.base_url}/dashboard/#token={TOKEN}")
            expect(page.locator("#main")).to_be_visible()
            rows = page.locator("#interrupts tbody tr")
            expect(rows).to_have_count(2)
            expect(rows.first).to_contain_text("ship_order")
            expect(rows.first).to_contain_text("O-1")
            expect(rows.first).to_contain_text("confirmation")
            message = page.locator("#answer-message")

            page.fill("#answer-by", "")
            rows.first.locator("button.approve").click()
            expect(message).to_contain_text("Give your name")
            expect(rows).to_have_count(2)  # nothing was answered

            page.fill("#answer-by", "ana")
            first = page.locator("#interrupts tbody tr", has_text="O-1")
            first.locator("button.approve").click()
            expect(message).to_contain_text("answered by ana")
            expect(rows).to_have_count(1)
            second = page.locator("#interrupts tbody tr", has_text="O-2")
            second.locator("button.deny").click()
            expect(message).to_contain_text("answered by ana")
            expect(rows).to_have_count(0)
            expect(page.locator("#interrupts-empty")).to_be_visible()

            with worker.client() as client:
                deadline = 60.0
                for run_id in paused:  # the paused runs follow their invocations to DONE
                    waited = 0.0
                    while client.get(f"/v1/runs/{run_id}").json()["run"]["status"] != "DONE":
                        assert waited < deadline, run_id
                        page.wait_for_timeout(100)
                        waited += 0.1
                answered = client.get("/v1/interrupts", params={"status": "ANSWERED"}).json()
                by_order = {
                    i["args"]["originalFunctionCall"]["args"]["order_id"]: i
                    for i in answered["interrupts"]
                }
                assert by_order["O-1"]["answer"] == {"confirmed": True}
                assert by_order["O-2"]["answer"] == {"confirmed": False}
                assert {i["answered_by"] for i in by_order.values()} == {"ana"}
                again = client.post(
                    f"/v1/interrupts/{by_order['O-1']['call_id']}",
                    json={"by": "bo", "decision": "deny"},
                )
                assert again.status_code == 409
            shot = tmp_path / "inbox.png"
            page.screenshot(path=str(shot), full_page=True)
            check_screenshot(shot)
            if SCREENSHOTS:
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                shutil.copy(shot, SCREENSHOTS / "dashboard-interrupts.png")
        finally:
            browser.close()


async def pause_workflow_nodes(url: str, orders: list[str]) -> list[str]:
    """Runs of a Workflow, each PAUSED on its FunctionNode's confirmation (a '/' in its id)."""
    from durable_adk.adk.runner import DurableRunner

    async with open_store(url) as store:
        durable = DurableRunner(app=wf_support.app(), store=store)
        for order in orders:
            async for _ in durable.run(user_id="ann", session_id=order, message=order):
                pass
        return [r.run_id for r in await durable.ledger.list_runs()]


def test_dashboard_approves_a_workflow_nodes_confirmation(tmp_path: Path) -> None:
    executable = chromium()
    from playwright.sync_api import expect, sync_playwright

    url = f"sqlite:///{tmp_path}/nodes.db"
    wf_support.SHIPPED.clear()
    paused = asyncio.run(pause_workflow_nodes(url, ["O-5", "O-6"]))
    with (
        threaded_worker(settings_for(url), app=wf_support.app()) as worker,
        sync_playwright() as driver,
    ):
        browser = driver.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{worker.base_url}/dashboard/#token={TOKEN}")
            expect(page.locator("#main")).to_be_visible()
            rows = page.locator("#interrupts tbody tr")
            expect(rows).to_have_count(2)
            first = page.locator("#interrupts tbody tr", has_text="O-5")
            second = page.locator("#interrupts tbody tr", has_text="O-6")
            # An approval, like a tool's: the guarded node call, Approve and Deny.
            expect(first).to_contain_text("confirmation")
            expect(first).to_contain_text('ship({"order_id":"O-5"})')
            expect(first.locator("button.approve")).to_be_visible()
            expect(first.locator("button.send")).to_have_count(0)
            message = page.locator("#answer-message")

            page.fill("#answer-by", "ana")
            first.locator("button.approve").click()
            expect(message).to_contain_text("answered by ana")
            expect(rows).to_have_count(1)
            second.locator("button.deny").click()
            expect(message).to_contain_text("answered by ana")
            expect(rows).to_have_count(0)

            with worker.client() as client:
                for run_id in paused:  # the paused runs follow their invocations to DONE
                    waited = 0.0
                    while client.get(f"/v1/runs/{run_id}").json()["run"]["status"] != "DONE":
                        assert waited < 60.0, run_id
                        page.wait_for_timeout(100)
                        waited += 0.1
                answered = client.get("/v1/interrupts", params={"status": "ANSWERED"}).json()
                by_order = {
                    i["guarded_call"]["args"]["order_id"]: i for i in answered["interrupts"]
                }
                assert by_order["O-5"]["answer"] == {"confirmed": True}
                assert by_order["O-6"]["answer"] == {"confirmed": False}
                assert all("/" in i["call_id"] for i in by_order.values())
            assert wf_support.SHIPPED == ["O-5"]  # approved once, the denied node never ran
        finally:
            browser.close()
