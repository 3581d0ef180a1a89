"""The files a run saved are the A2A task's artifacts: live, after a kill, sealed at rest.

Issue 44, "artifacts the run saved are the task's artifacts". The invoicer's
``report N`` saves ``report-N.txt`` (a draft), acts once in the billing
service, then saves the report's next version and ``chart-N.png``. The task
shows one artifact per file, at its newest version (a new version replaces
the old: ``append`` false), text as text and the chart as bytes with its
media type; through tasks/get and the stream, after a SIGKILL mid-task on
another worker too, every version published once. Real workers, the SDK's
client, both backends.
"""

from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path

import pytest
from a2a.types import (
    Artifact,
    GetTaskRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
)
from a2a_app import PNG, SECRET
from a2a_support import a2a_client, message, runs_of, send, stream, wait_for_file, workers

from durable_adk.a2a import codec
from durable_adk.a2a_tables.tasks import A2aTable
from durable_adk.store import Keyring, open_store
from durable_adk.store.queries import parse_queries
from durable_adk.testing.fakes.process import FakeService

pytestmark = pytest.mark.timeout(240)

VERSION = "durable_adk_artifact_version"


def _files(task: Task) -> dict[str, Artifact]:
    found = {a.name: a for a in task.artifacts if a.artifact_id.startswith("file:")}
    assert len(found) == len([a for a in task.artifacts if a.artifact_id.startswith("file:")])
    return found


def _check_files(task: Task, report_id: str) -> None:
    files = _files(task)
    assert set(files) == {
        f"report-{report_id}.txt",
        f"notes-{report_id}.md",
        f"chart-{report_id}.png",
    }
    (notes,) = files[f"notes-{report_id}.md"].parts
    assert (notes.text, notes.media_type) == (f"# notes {report_id}", "text/markdown")
    (report,) = files[f"report-{report_id}.txt"].parts
    assert report.text == f"report {report_id} final {SECRET}"
    assert report.media_type == "text/plain"
    assert int(files[f"report-{report_id}.txt"].metadata[VERSION]) == 1
    (chart,) = files[f"chart-{report_id}.png"].parts
    assert chart.raw == PNG + report_id.encode()
    assert (chart.media_type, chart.filename) == ("image/png", f"chart-{report_id}.png")
    assert int(files[f"chart-{report_id}.png"].metadata[VERSION]) == 0
    answers = [a for a in task.artifacts if not a.artifact_id.startswith("file:")]
    assert ["".join(p.text for p in a.parts) for a in answers] == [f"{report_id} reported"]


def _updates(responses: list[StreamResponse]) -> list[tuple[str, int]]:
    return [
        (r.artifact_update.artifact.name, int(r.artifact_update.artifact.metadata[VERSION]))
        for r in responses
        if r.HasField("artifact_update") and VERSION in r.artifact_update.artifact.metadata
    ]


async def _stored_updates(db: str, task_id: str) -> list[tuple[str, int]]:
    """Every saved-file update the task's stored event log holds (what any stream replays)."""
    async with open_store(db) as store:
        found = await A2aTable(store, "invoicer").events_after(task_id, 0)
    wrapped = []
    for _, text in found:
        event = codec.event_from_text(text)
        response = StreamResponse()
        if isinstance(event, TaskArtifactUpdateEvent):
            response.artifact_update.CopyFrom(event)
        wrapped.append(response)
    return _updates(wrapped)


async def test_a_runs_saved_files_are_its_tasks_artifacts_live_and_after_a_kill(
    store_url: str, tmp_path: Path, billing: FakeService
) -> None:
    go = tmp_path / "go"
    go.mkdir()
    (go / "L1.go").write_text("go")
    env = {"DADK_BILLING_URL": billing.url, "DADK_GO_DIR": str(go)}
    with workers(store_url, env, "w1", "w2") as (w1, w2):
        # live: the stream shows each save as it happens, the new version replacing the draft
        async with a2a_client(w1.base_url, streaming=True) as client:
            events = await stream(client, message("report L1"))
        assert _updates(events) == [
            ("report-L1.txt", 0),
            ("notes-L1.md", 0),
            ("report-L1.txt", 1),
            ("chart-L1.png", 0),
        ]
        live = next(e.task for e in events if e.HasField("task")).id
        async with a2a_client(w2.base_url) as on_w2:
            _check_files(await on_w2.get_task(GetTaskRequest(id=live)), "L1")
        # killed mid-task (after the draft, in the middle of the invoice): w2 ends it
        async with (
            a2a_client(w1.base_url) as on_w1,
            a2a_client(w2.base_url, streaming=True) as following,
        ):
            task = await send(on_w1, message("report K1"), return_immediately=True)
            await asyncio.to_thread(wait_for_file, go / "K1.reached")
            # the draft's files are the task's before the kill (the task sync must not
            # publish them again)
            deadline = time.monotonic() + 30
            while "notes-K1.md" not in _files(await following.get_task(GetTaskRequest(id=task.id))):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            followed: list[StreamResponse] = []
            subscribed = asyncio.Event()

            async def follow() -> None:
                async for response in following.subscribe(SubscribeToTaskRequest(id=task.id)):
                    followed.append(response)
                    subscribed.set()

            follower = asyncio.create_task(follow())
            await asyncio.wait_for(subscribed.wait(), 30)
            w1.kill()
            (go / "K1.go").write_text("go")
            await asyncio.wait_for(follower, 90)
            done = await following.get_task(GetTaskRequest(id=task.id))
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        _check_files(done, "K1")
        # the follower saw the task as it stood, then each later version once
        snapshot = followed[0].task
        seen = [*((a.name, int(a.metadata[VERSION])) for a in _files(snapshot).values())]
        seen += _updates(followed[1:])
        assert len(seen) == len(set(seen)), seen
        assert ("report-K1.txt", 1) in seen and ("chart-K1.png", 0) in seen
        assert ("notes-K1.md", 0) in seen
    for task_id in (live, task.id):
        stored = await _stored_updates(store_url, task_id)
        assert len(stored) == len(set(stored)), stored  # no version published twice
    runs = await runs_of(store_url)
    assert sorted(r.status.value for r in runs) == ["DONE", "DONE"]
    assert {r.owner for r in runs} == {"w1", "w2"}
    assert billing.acts("invoices", "create") == 2


RAW_SQL = """
-- name: t_raw_a2a_bodies
SELECT body AS v FROM a2a_tasks UNION ALL SELECT body AS v FROM a2a_task_events;
"""


async def test_a_tasks_artifacts_are_sealed_at_rest(
    store_url: str, tmp_path: Path, billing: FakeService
) -> None:
    keys = tmp_path / "keys"
    keys.write_text(Keyring.new_line("k1") + "\n")
    env = {"DADK_BILLING_URL": billing.url}
    with workers(store_url, env, "w1", extra=("--key-file", str(keys))) as (w1,):
        async with a2a_client(w1.base_url) as client:
            done = await send(client, message("report E1"))
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            _check_files(await client.get_task(GetTaskRequest(id=done.id)), "E1")
    async with open_store(store_url, keyring=None) as store:
        store.add_queries(parse_queries(RAW_SQL, store.dialect))
        raw = [str(r["v"]) for r in await store._fetch("t_raw_a2a_bodies")]
    assert len(raw) > 5
    chart = base64.b64encode(PNG + b"E1").decode()
    for value in raw:
        assert SECRET not in value and "report E1" not in value and chart not in value, value
