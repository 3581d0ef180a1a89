"""get_fast_api_app(task_store_uri=...): a durable+ URI gives the task store on the runs DB."""

from __future__ import annotations

import pytest
from a2a.server.cluster.version import TaskVersion
from a2a.server.context import ServerCallContext
from a2a.types import Task, TaskState, TaskStatus
from google.adk.cli.utils.service_factory import _create_task_store_from_options

from durable_adk import errors
from durable_adk.a2a.registry import register_task_store_uris
from durable_adk.a2a.stores import DurableVersionedTaskStore


def durable_uri(store_url: str) -> str:
    return "durable+" + store_url


async def test_a_task_saved_through_the_uri_outlives_its_store(store_url: str) -> None:
    register_task_store_uris()
    context = ServerCallContext()
    first = _create_task_store_from_options(task_store_uri=durable_uri(store_url))
    assert isinstance(first, DurableVersionedTaskStore)
    task = Task(id="t-uri", context_id="c", status=TaskStatus(state=TaskState.TASK_STATE_WORKING))
    await first.save(task, event=None, prev=None, prev_version=TaskVersion.MISSING, context=context)
    await first.table.store.close()
    # a new server process builds its own store from the same URI
    second = _create_task_store_from_options(task_store_uri=durable_uri(store_url))
    stored = await second.get("t-uri", context)
    assert stored is not None and stored.task.status.state == TaskState.TASK_STATE_WORKING
    await second.table.store.close()


def test_a_bad_durable_uri_is_refused_when_the_server_builds_the_store() -> None:
    register_task_store_uris()
    with pytest.raises(errors.UnsupportedUrl):
        _create_task_store_from_options(task_store_uri="durable+sqlite:///x.db?bogus=1")
