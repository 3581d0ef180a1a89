"""Seed 003's worked example end to end: a real builder process, two webhooks, one answer."""

from __future__ import annotations

from examples.sales_report.app import OTHER_ANSWER, demo

from durable_adk.store import open_store


async def test_the_nineteen_minute_report_scaled_to_seconds(store_url: str) -> None:
    async with open_store(store_url):
        pass
    story = await demo(store_url, minute=0.05)
    assert story["job_state"] == "SUCCEEDED"
    assert story["submissions"] == 1
    assert story["webhook_answers"] == [200, 200]  # the builder called twice ...
    assert [a["changed"] for a in story["accepted"]] == [True, False]  # ... once changed
    assert len(story["answers"]) == 1 and story["answers"][0]["status"] == "done"
    ready = "Your report is ready: https://reports.example/2026-Q3-EMEA.xlsx (1284 rows)."
    assert story["texts"][-2:] == [OTHER_ANSWER, ready]
    assert story["runs"] == ["DONE", "DONE", "DONE"]  # the paused run followed its invocation
