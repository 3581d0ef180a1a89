"""Retention and forgetting a user over A2A tasks made by the A2A request path, both backends.

Tasks are sent through the served handler (:class:`DurableA2aServer`'s, the
one ``durable-adk serve --a2a`` and ``to_a2a`` mount), as an authenticated
caller whose name is the ADK user, with a push config carrying the client's
token: each task leaves its task row, its events, its push config, push
outbox rows, its message-id claim and the link to its invocation. A purge
takes them with the session; a pending push or a task not ended keeps the
session; forgetting a user takes that user's and no one else's.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from a2a.auth.user import User
from a2a.server.cluster.version import TaskVersion
from a2a.server.context import ServerCallContext
from a2a.types import (
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.adk.agents import LlmAgent

from durable_adk import errors
from durable_adk.a2a import codec as a2a_codec
from durable_adk.a2a.server import DurableA2aServer
from durable_adk.a2a.stores import DurableVersionedTaskStore
from durable_adk.a2a_tables.outbox import PushOutbox
from durable_adk.adk.runner import DurableRunner
from durable_adk.lifecycle import RetentionPolicy, forget_user, purge
from durable_adk.lifecycle.purge import A2A_STEPS
from durable_adk.store import Keyring, Store, open_store
from durable_adk.store.queries import parse_queries
from durable_adk.store.rotation import key_status, rotate
from durable_adk.store.sealing.codec import COLUMNS, envelope_key
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.testing import Say, ScriptedModel

APP = "a2a_life"
ALL_AT_ONCE = RetentionPolicy(
    done=0, failed=0, cancelled=0, parked=0, abandoned=0, idle_sessions=0, batch=2
)
"""Everything finished goes now, two rows a batch (every A2A table takes several)."""

# What the tests read that the library never asks: A2A rows per user (through the
# links of their invocations), and the sessions of a user.
TEST_SQL = """
-- name: test_a2a_rows
SELECT
  (SELECT COUNT(*) FROM a2a_task_runs WHERE user_id = :user_id) AS a2a_task_runs,
  (SELECT COUNT(*) FROM a2a_tasks WHERE task_id IN
      (SELECT task_id FROM a2a_task_runs WHERE user_id = :user_id)) AS a2a_tasks,
  (SELECT COUNT(*) FROM a2a_task_events WHERE task_id IN
      (SELECT task_id FROM a2a_task_runs WHERE user_id = :user_id)) AS a2a_task_events,
  (SELECT COUNT(*) FROM a2a_push_configs WHERE task_id IN
      (SELECT task_id FROM a2a_task_runs WHERE user_id = :user_id)) AS a2a_push_configs,
  (SELECT COUNT(*) FROM a2a_push_outbox WHERE task_id IN
      (SELECT task_id FROM a2a_task_runs WHERE user_id = :user_id)) AS a2a_push_outbox,
  (SELECT COUNT(*) FROM a2a_messages WHERE task_id IN
      (SELECT task_id FROM a2a_task_runs WHERE user_id = :user_id)) AS a2a_messages,
  (SELECT COUNT(*) FROM sessions WHERE user_id = :user_id) AS sessions;

-- name: test_a2a_all
SELECT (SELECT COUNT(*) FROM a2a_tasks) AS tasks, (SELECT COUNT(*) FROM a2a_task_events) AS events,
       (SELECT COUNT(*) FROM a2a_push_configs) AS configs,
       (SELECT COUNT(*) FROM a2a_push_outbox) AS outbox,
       (SELECT COUNT(*) FROM a2a_messages) AS messages,
       (SELECT COUNT(*) FROM a2a_task_runs) AS links;
"""


class Caller(User):
    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._name


def context_of(name: str) -> ServerCallContext:
    return ServerCallContext(user=Caller(name))


async def a2a_rows(store: Store, user_id: str) -> dict[str, int]:
    if "test_a2a_rows" not in store._queries:
        store.add_queries(parse_queries(TEST_SQL, store.dialect))
    row = await store.fetchrow("test_a2a_rows", {"user_id": user_id})
    assert row is not None
    return {k: int(v) for k, v in row.items()}


async def a2a_all(store: Store) -> dict[str, int]:
    if "test_a2a_all" not in store._queries:
        store.add_queries(parse_queries(TEST_SQL, store.dialect))
    row = await store.fetchrow("test_a2a_all")
    assert row is not None
    return {k: int(v) for k, v in row.items()}


def served(store: Store) -> tuple[DurableRunner, DurableA2aServer]:
    model = ScriptedModel({"helper": [Say(f"answer {i}") for i in range(10)]})
    runner = DurableRunner(
        app=LlmAgent(name="helper", model=model),
        app_name=APP,
        store=store,
        worker_id="w1",
        queue_poll=0.02,
    )
    return runner, DurableA2aServer(runner)


async def send_task(server: DurableA2aServer, user: str, text: str) -> Task:
    """A message from ``user`` with a push config (the client's token): the task, ended."""
    handler = await server.handler()
    request = SendMessageRequest(
        message=Message(
            message_id=uuid.uuid4().hex,
            role=Role.ROLE_USER,
            parts=[Part(text=text)],
        ),
        configuration=SendMessageConfiguration(
            task_push_notification_config=TaskPushNotificationConfig(
                url="http://127.0.0.1:9/push", token=f"{user}-push-token"
            )
        ),
    )
    task = await handler.on_message_send(request, context_of(user))
    assert isinstance(task, Task)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, task
    return task


async def deliver_all(store: Store) -> int:
    """What a push deliverer does once its receiver answered 2xx: every due push marked sent."""
    outbox = PushOutbox(store, APP)
    done = 0
    while pushes := await outbox.claim(lease=30.0, limit=50):
        for push in pushes:
            await outbox.sent(push)
            done += 1
    return done


async def test_purge_takes_a_sessions_a2a_rows_and_keeps_a_pending_push_and_a_live_task(
    store: Store,
) -> None:
    runner, server = served(store)
    async with runner:
        for user in ("alice", "bob"):
            await send_task(server, user, f"order for {user}")
        # carol's task was left working by a worker that died after its run ended
        # (the task sync has not published the end yet): the task still needs its session.
        events = [e async for e in runner.run(user_id="carol", session_id="c1", message="hi")]
        live = await server.tasks.save(
            Task(
                id="t-carol", context_id="c1", status=TaskStatus(state=TaskState.TASK_STATE_WORKING)
            ),
            event=None,
            prev=None,
            prev_version=TaskVersion.MISSING,
            context=context_of("carol"),
        )
        assert live.is_after(TaskVersion.MISSING)
        await server.tasks.table.link_run(
            "t-carol", user_id="carol", session_id="c1", invocation_id=events[-1].invocation_id
        )
        await server.stop()
    for user in ("alice", "bob"):
        found = await a2a_rows(store, user)
        assert all(found[t] > 0 for t in A2A_STEPS), found
        assert found["a2a_push_outbox"] >= 2  # the task's events after the config was set

    # every push still owed: nothing of alice's or bob's goes, carol's task is not ended
    kept = await purge(store, APP, ALL_AT_ONCE)
    assert kept.sessions_marked == 0
    assert (await a2a_rows(store, "alice"))["sessions"] == 1

    assert await deliver_all(store) > 0
    preview = await purge(store, APP, ALL_AT_ONCE, dry_run=True)
    shown = preview.as_dict()["tables"]
    for table in A2A_STEPS:
        assert shown[table]["rows"] > 0, (table, shown)
    assert shown["a2a_push_configs"]["bytes"] > 0
    assert (await a2a_rows(store, "alice"))["a2a_tasks"] == 1  # a dry run deletes nothing

    report = await purge(store, APP, ALL_AT_ONCE)
    for user in ("alice", "bob"):
        assert all(n == 0 for n in (await a2a_rows(store, user)).values()), user
    tables = report.as_dict()["tables"]
    for table in A2A_STEPS:
        assert tables[table]["rows"] == shown[table]["rows"], (table, tables, shown)
    carol = await a2a_rows(store, "carol")
    assert carol["sessions"] == 1 and carol["a2a_tasks"] == 1 and carol["a2a_task_runs"] == 1
    assert await a2a_all(store) == {
        "tasks": 1,
        "events": 0,
        "configs": 0,
        "outbox": 0,
        "messages": 0,
        "links": 1,
    }


async def test_forget_takes_the_users_a2a_rows_and_no_one_elses(store: Store) -> None:
    runner, server = served(store)
    async with runner:
        await send_task(server, "alice", "alice's private order")
        await send_task(server, "alice", "alice's second order")
        await send_task(server, "bob", "bob's order")
        await server.stop()
    before_bob = await a2a_rows(store, "bob")
    assert (await a2a_rows(store, "alice"))["a2a_tasks"] == 2

    # pushes still owed do not hold a forget back: the user asked to be forgotten
    report = await forget_user(store, "alice", app_name=APP, by="dpo", batch=2)
    assert all(n == 0 for n in (await a2a_rows(store, "alice")).values())
    deleted: dict[str, Any] = report.as_dict()["deleted"]
    for table in A2A_STEPS:
        assert deleted[table]["rows"] > 0, (table, deleted)
    assert await a2a_rows(store, "bob") == before_bob
    # and again: nothing left to delete, nothing of bob's touched
    again = await forget_user(store, "alice", app_name=None, by="dpo")
    assert again.rows == 0
    assert await a2a_rows(store, "bob") == before_bob


# ------------------------------------------------------------------ encryption at rest

SECRET = "SECRET-A2A-4711"
TOKEN = "alice-push-token"
SEALED = (
    "a2a_tasks.body",
    "a2a_task_events.body",
    "a2a_push_configs.body",
    "a2a_push_outbox.config",
    "a2a_push_outbox.body",
)
"""The A2A columns that carry the caller's data (messages, answers, the push token)."""
RAW_SQL = "\n".join(
    f"-- name: raw_a2a__{name.replace('.', '__')}\n"
    f"SELECT {name.split('.')[1]} AS v FROM {name.split('.')[0]};\n"
    for name in SEALED
)


async def raw_a2a(store: Store) -> dict[str, list[str]]:
    """Every stored value of the A2A columns that carry the caller's data, as stored."""
    if "raw_a2a__a2a_tasks__body" not in store._queries:
        store.add_queries(parse_queries(RAW_SQL, store.dialect))
    return {
        name: [r["v"] for r in await store._fetch(f"raw_a2a__{name.replace('.', '__')}")]
        for name in SEALED
    }


async def write_tasks(store: Store) -> str:
    """alice's task through the handler (her message holds SECRET), and a task cancelled
    by another replica that read no version (the save that overwrites); the first's id."""
    runner, server = served(store)
    async with runner:
        task = await send_task(server, "alice", f"order {SECRET}")
        alice = context_of("alice")
        v1 = await server.tasks.save(
            Task(
                id="t-cancel",
                context_id="c2",
                status=TaskStatus(state=TaskState.TASK_STATE_WORKING),
            ),
            event=Task(
                id="t-cancel",
                context_id="c2",
                status=TaskStatus(state=TaskState.TASK_STATE_WORKING),
            ),
            prev=None,
            prev_version=TaskVersion.MISSING,
            context=alice,
        )
        cancel = TaskStatusUpdateEvent(
            task_id="t-cancel",
            context_id="c2",
            status=TaskStatus(
                state=TaskState.TASK_STATE_CANCELED,
                message=Message(message_id="m", role=Role.ROLE_AGENT, parts=[Part(text=SECRET)]),
            ),
        )
        v2 = await server.tasks.save(
            Task(id="t-cancel", context_id="c2", status=cancel.status),
            event=cancel,
            prev=None,
            prev_version=TaskVersion.MISSING,
            context=alice,
        )
        assert v2.is_after(v1)
        await server.stop()
    return task.id


async def read_tasks(store: Store, task_id: str) -> None:
    """Everything of alice's tasks reads back in clear through the A2A stores."""
    _, server = served(store)
    alice = context_of("alice")
    stored = await server.tasks.get(task_id, alice)
    assert stored is not None and SECRET in a2a_codec.task_to_text(stored.task)
    listed = await server.tasks.list(ListTasksRequest(), alice)
    assert {t.id for t in listed.tasks} == {task_id, "t-cancel"}
    events = await server.tasks.table.events_after(task_id, 0)
    assert events and any(SECRET in body for _, body in events)
    for _, body in events:
        a2a_codec.event_from_text(body)
    cancelled = await server.tasks.table.events_after("t-cancel", 0)
    assert [v for v, _ in cancelled] == [1, 2] and SECRET in cancelled[-1][1]
    [config] = await server.push_configs.get_info(task_id, alice)
    assert config.token == TOKEN
    [config] = await server.push_configs.get_info_for_dispatch(task_id)
    assert config.token == TOKEN
    pushes = await PushOutbox(store, APP).claim(lease=30.0, limit=50)
    assert pushes and all(TOKEN in p.config for p in pushes)
    assert any(SECRET in p.body for p in pushes)
    for push in pushes:
        a2a_codec.event_from_text(push.body)
        await PushOutbox(store, APP).failed(push, error="test", backoff=0.0, max_attempts=99)


async def test_a2a_rows_are_sealed_and_read_back_through_the_a2a_stores(store_url: str) -> None:
    ring = Keyring([("k1", os.urandom(32))])
    async with open_store(store_url, keyring=ring) as sealed:
        task_id = await write_tasks(sealed)
        for name, values in (await raw_a2a(sealed)).items():
            assert values, f"{name}: nothing was written there"
            for value in values:
                assert SECRET not in value and TOKEN not in value, (name, value)
                assert envelope_key(value) == "k1", (name, value)
        await read_tasks(sealed, task_id)
        status = await key_status(sealed)
        assert set(SEALED) <= set(status["k1"])
        assert set(SEALED) <= {c.name for c in COLUMNS}
    async with open_store(store_url) as keyless:  # no key: a clear error naming it
        with pytest.raises(errors.KeyUnavailable, match="'k1'"):
            await DurableVersionedTaskStore(keyless, APP).get(task_id, context_of("alice"))


async def test_a2a_rows_written_in_clear_stay_readable_and_rotate_to_the_key(
    store_url: str,
) -> None:
    async with open_store(store_url) as clear:
        task_id = await write_tasks(clear)
        raw = await raw_a2a(clear)
        assert any(SECRET in v for v in raw["a2a_tasks.body"])
        assert any(TOKEN in v for v in raw["a2a_push_configs.body"])
    async with open_store(store_url, keyring=Keyring([("k1", os.urandom(32))])) as sealed:
        await read_tasks(sealed, task_id)
        assert "a2a_push_outbox.config" in (await key_status(sealed))["clear"]
        report = await rotate(sealed, batch=2)
        assert not report.unreadable, report.errors
        assert set(await key_status(sealed)) == {"k1"}
        for name, values in (await raw_a2a(sealed)).items():
            for value in values:
                assert SECRET not in value and TOKEN not in value, (name, value)
        await read_tasks(sealed, task_id)


async def test_a_cancel_that_meets_a_newer_version_seals_its_event_for_the_one_it_makes(
    store_url: str,
) -> None:
    """A cancel from a replica that read no version overwrites whatever is stored: it
    reads the version first, and when a live writer moves the task in between, it
    reads again, so its event opens at the version it made."""
    async with open_store(store_url, keyring=Keyring([("k1", os.urandom(32))])) as sealed:
        tasks = DurableVersionedTaskStore(sealed, APP)
        alice = context_of("alice")
        working = TaskStatus(state=TaskState.TASK_STATE_WORKING)
        v1 = await tasks.save(
            Task(id="t1", context_id="c", status=working),
            event=Task(id="t1", context_id="c", status=working),
            prev=None,
            prev_version=TaskVersion.MISSING,
            context=alice,
        )
        real_fetch = sealed.fetch
        moved: list[int] = []

        async def fetch(query: str, params: Any = None) -> Any:
            rows = await real_fetch(query, params)
            if query == "a2a_task_version" and not moved:  # the live writer goes first
                update = TaskStatusUpdateEvent(task_id="t1", context_id="c", status=working)
                done = await tasks.save(
                    Task(id="t1", context_id="c", status=working),
                    event=update,
                    prev=None,
                    prev_version=v1,
                    context=alice,
                )
                moved.append(int(done._value))
            return rows

        sealed.fetch = fetch  # type: ignore[method-assign]
        try:
            cancel = TaskStatusUpdateEvent(
                task_id="t1",
                context_id="c",
                status=TaskStatus(
                    state=TaskState.TASK_STATE_CANCELED,
                    message=Message(
                        message_id="m", role=Role.ROLE_AGENT, parts=[Part(text=SECRET)]
                    ),
                ),
            )
            v3 = await tasks.save(
                Task(id="t1", context_id="c", status=cancel.status),
                event=cancel,
                prev=None,
                prev_version=TaskVersion.MISSING,
                context=alice,
            )
        finally:
            del sealed.fetch
        assert moved == [2] and int(v3._value) == 3
        events = await tasks.table.events_after("t1", 0)
        assert [v for v, _ in events] == [1, 2, 3] and SECRET in events[-1][1]
        assert all(SECRET not in v for v in (await raw_a2a(sealed))["a2a_task_events.body"])


async def test_payload_only_retention_takes_the_a2a_rows_and_keeps_the_runs(store: Store) -> None:
    runner, server = served(store)
    async with runner:
        await send_task(server, "alice", "alice's order")
        await server.stop()
    assert await deliver_all(store) > 0
    policy = RetentionPolicy(
        done=0, failed=0, cancelled=0, parked=0, abandoned=0, payload_only=True, batch=2
    )
    report = await purge(store, APP, policy)
    assert report.as_dict()["tables"]["a2a_tasks"]["rows"] == 1
    assert all(n == 0 for n in (await a2a_rows(store, "alice")).values())
    [run] = await RunLedger(store).list_runs()  # the run's skeleton stays, emptied
    assert run.status == RunStatus.DONE and run.user_id == "alice"
