"""Forgetting a user survives a kill half-way, on both backends (issue 43).

A child process runs ``durable-adk users forget`` and dies with os._exit(137)
at the purge's fault point after a few batches (``lifecycle.after_batch``):
some of the user's rows are gone, others not, the audit line is still open.
The same command run again by a fresh process carries the request on: every
row of the user goes, the other user's stay, the audit line is closed once
with the counts of both calls.
"""

from __future__ import annotations

import json
import os

from children import run_module
from durable_adk import DurableRunner
from durable_adk.store import open_store
from durable_adk.store.queries import parse_queries
from durable_adk.testing import Say, ScriptedModel, arm

CHECK_SQL = """
-- name: test_user_rows
SELECT (SELECT COUNT(*) FROM sessions WHERE user_id = :user_id) AS sessions,
       (SELECT COUNT(*) FROM events e JOIN sessions s ON s.pk = e.session_pk
         WHERE s.user_id = :user_id) AS events,
       (SELECT COUNT(*) FROM runs WHERE user_id = :user_id) AS runs,
       (SELECT COUNT(*) FROM user_state WHERE user_id = :user_id) AS user_state;

-- name: test_forget_audit
SELECT status, deleted FROM forget_requests ORDER BY pk;
"""


async def counts(url: str, user: str) -> dict[str, int]:
    async with open_store(url) as store:
        store.add_queries(parse_queries(CHECK_SQL, store.dialect))
        row = await store.fetchrow("test_user_rows", {"user_id": user})
        assert row is not None
        return {k: int(v) for k, v in row.items()}


async def audit(url: str) -> list[tuple[str, dict[str, int]]]:
    async with open_store(url) as store:
        store.add_queries(parse_queries(CHECK_SQL, store.dialect))
        return [
            (str(r["status"]), json.loads(r["deleted"]))
            for r in await store.fetch("test_forget_audit")
        ]


async def test_a_forget_killed_half_way_is_finished_by_the_same_command_again(
    store_url: str,
) -> None:
    async with open_store(store_url) as store:
        model = ScriptedModel({"chat": [Say(f"reply {n}") for n in range(20)]})
        from google.adk.agents import LlmAgent

        runner = DurableRunner(app=LlmAgent(name="chat", model=model), store=store, app_name="chat")
        for user in ("ada", "bob"):
            for n in range(4):
                async for _ in runner.run(user_id=user, session_id=f"s{n}", message="hi"):
                    pass
        await runner.sessions.create_session(
            app_name="chat", user_id="ada", session_id="prefs", state={"user:lang": "fr"}
        )
    before = await counts(store_url, "ada")
    assert before["runs"] == 4 and before["events"] >= 8 and before["user_state"] == 1
    bob = await counts(store_url, "bob")
    env = {**os.environ, "DURABLE_ADK_REQUIRE_POSTGRES": "1"}
    args = ["users", "forget", "ada", "--db", store_url, "--by", "ops", "--json"]
    # The first batch (the events: the tables that hold nothing of ada's sessions are
    # not visited) is written, then the process is killed before the next one.
    crashed = run_module("durable_adk.cli", args, env=arm(env, "lifecycle.after_batch"))
    assert crashed.returncode == 137, crashed.stderr
    half = await counts(store_url, "ada")
    assert half["events"] == 0 and half["runs"] == 4 and half["user_state"] == 1
    assert [status for status, _ in await audit(store_url)] == ["STARTED"]
    again = run_module("durable_adk.cli", args, env=env)
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["deleted"]["runs"]["rows"] == 4 and "events" not in report["deleted"]
    assert await counts(store_url, "ada") == {
        "sessions": 0,
        "events": 0,
        "runs": 0,
        "user_state": 0,
    }
    assert await counts(store_url, "bob") == bob
    ((status, deleted),) = await audit(store_url)
    assert status == "DONE"
    assert deleted["events"] == before["events"] and deleted["runs"] == 4
    assert deleted["sessions"] == before["sessions"] and deleted["user_state"] == 1
