"""DurableArtifactService: ADK's artifact contract on both backends, versions, fencing.

The same script runs against ADK's InMemoryArtifactService and ours: every
answer must agree (version numbers, latest reads, key lists, user scope,
deletion); tests/adk/test_artifact_parity.py drives the full differential
suite. Then what only ours does: artifacts survive a reopened store,
a save for a run that was taken over is refused, and a re-driven save of the
same bytes in one invocation keeps its version.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from google.adk.artifacts import InMemoryArtifactService
from google.adk.errors.input_validation_error import InputValidationError
from google.genai import types

from durable_adk import DurableArtifactService, RunLedger, errors, open_store
from durable_adk.fencing.fence import RunFence, using_fence
from durable_adk.store import Store

APP, USER = "reports", "u1"


def blob(data: bytes, mime: str = "application/pdf") -> types.Part:
    return types.Part(inline_data=types.Blob(mime_type=mime, data=data))


async def script(service: Any) -> list[Any]:
    """A run of calls whose answers both services must give alike."""
    out: list[Any] = []
    save = service.save_artifact
    out.append(
        await save(
            app_name=APP, user_id=USER, session_id="s1", filename="r.pdf", artifact=blob(b"v0")
        )
    )
    out.append(
        await save(
            app_name=APP,
            user_id=USER,
            session_id="s1",
            filename="r.pdf",
            artifact=blob(b"v1"),
            custom_metadata={"pages": 3},
        )
    )
    out.append(
        await save(
            app_name=APP,
            user_id=USER,
            session_id="s1",
            filename="notes.txt",
            artifact=types.Part(text="hello"),
        )
    )
    out.append(
        await save(
            app_name=APP,
            user_id=USER,
            session_id="s1",
            filename="user:prefs",
            artifact=types.Part(text="dark"),
        )
    )
    out.append(
        await save(
            app_name=APP, user_id=USER, session_id="s2", filename="r.pdf", artifact=blob(b"other")
        )
    )
    load = service.load_artifact
    for kwargs in (
        {"session_id": "s1", "filename": "r.pdf"},
        {"session_id": "s1", "filename": "r.pdf", "version": 0},
        {"session_id": "s1", "filename": "r.pdf", "version": 7},
        {"session_id": "s2", "filename": "r.pdf"},
        {"session_id": "s2", "filename": "user:prefs"},
        {"session_id": "s1", "filename": "missing"},
    ):
        part = await load(app_name=APP, user_id=USER, **kwargs)
        out.append(None if part is None else part.model_dump(exclude_none=True))
    out.append(await service.list_artifact_keys(app_name=APP, user_id=USER, session_id="s1"))
    out.append(await service.list_artifact_keys(app_name=APP, user_id=USER, session_id="s2"))
    out.append(
        await service.list_versions(app_name=APP, user_id=USER, session_id="s1", filename="r.pdf")
    )
    version = await service.get_artifact_version(
        app_name=APP, user_id=USER, session_id="s1", filename="r.pdf"
    )
    out.append((version.version, version.mime_type, version.custom_metadata))
    await service.delete_artifact(app_name=APP, user_id=USER, session_id="s1", filename="r.pdf")
    out.append(await service.list_artifact_keys(app_name=APP, user_id=USER, session_id="s1"))
    out.append(await load(app_name=APP, user_id=USER, session_id="s1", filename="r.pdf"))
    return out


async def test_answers_agree_with_adks_in_memory_service(store: Store) -> None:
    ours = await script(DurableArtifactService(store))
    adks = await script(InMemoryArtifactService())
    assert ours == adks
    assert ours[:5] == [0, 1, 0, 0, 0]


async def test_artifacts_survive_a_reopened_store(store_url: str) -> None:
    async with open_store(store_url) as store:
        service = DurableArtifactService(store)
        await service.save_artifact(
            app_name=APP, user_id=USER, session_id="s1", filename="r.pdf", artifact=blob(b"kept")
        )
    async with open_store(store_url) as store:
        part = await DurableArtifactService(store).load_artifact(
            app_name=APP, user_id=USER, session_id="s1", filename="r.pdf"
        )
    assert part is not None and part.inline_data is not None
    assert part.inline_data.data == b"kept"


def fence_of(run: Any) -> RunFence:
    """A trusted local fence for ``run`` (the database still fences by epoch)."""
    return RunFence(
        run.run_id,
        run.epoch,
        trusted_until=time.monotonic() + 3600,
        invocation_id=run.invocation_id,
    )


async def running_run(store: Store, session_id: str = "s1") -> Any:
    ledger = RunLedger(store)
    started = await ledger.start(
        app_name=APP,
        user_id=USER,
        session_id=session_id,
        request={"parts": []},
        owner="w1",
        now=0.0,
    )
    assert started is not None
    return ledger, started.run


async def test_a_save_for_a_run_taken_over_is_refused_and_writes_nothing(store: Store) -> None:
    ledger, run = await running_run(store)
    service = DurableArtifactService(store)
    with using_fence(fence_of(run)):
        assert (
            await service.save_artifact(
                app_name=APP,
                user_id=USER,
                session_id="s1",
                filename="r.pdf",
                artifact=blob(b"mine"),
            )
            == 0
        )
    await ledger.backdate(run.run_id, 3600)
    (taken,) = await ledger.claim_expired("w2")
    assert taken.epoch == run.epoch + 1
    with using_fence(fence_of(run)), pytest.raises(errors.Fenced):
        await service.save_artifact(
            app_name=APP, user_id=USER, session_id="s1", filename="r.pdf", artifact=blob(b"zombie")
        )
    assert await service.list_versions(
        app_name=APP, user_id=USER, session_id="s1", filename="r.pdf"
    ) == [0]
    with using_fence(fence_of(taken)):
        assert (
            await service.save_artifact(
                app_name=APP,
                user_id=USER,
                session_id="s1",
                filename="r.pdf",
                artifact=blob(b"new owner"),
            )
            == 1
        )


async def test_a_re_driven_save_of_the_same_bytes_keeps_its_version(store: Store) -> None:
    _, run = await running_run(store)
    service = DurableArtifactService(store)
    stamp = fence_of(run)
    kwargs: dict[str, Any] = {
        "app_name": APP,
        "user_id": USER,
        "session_id": "s1",
        "filename": "r.pdf",
    }
    with using_fence(stamp):
        first = await service.save_artifact(artifact=blob(b"report"), **kwargs)
        again = await service.save_artifact(artifact=blob(b"report"), **kwargs)
        changed = await service.save_artifact(artifact=blob(b"report v2"), **kwargs)
    # Outside a run nothing can say it is a re-drive: a new version each time.
    plain = await service.save_artifact(artifact=blob(b"report v2"), **kwargs)
    assert (first, again, changed, plain) == (0, 0, 1, 2)


async def test_concurrent_saves_of_one_file_get_distinct_versions(store: Store) -> None:
    service = DurableArtifactService(store)
    versions = await asyncio.gather(
        *(
            service.save_artifact(
                app_name=APP,
                user_id=USER,
                session_id="s1",
                filename="log",
                artifact=types.Part(text=f"line {i}"),
            )
            for i in range(8)
        )
    )
    assert sorted(versions) == list(range(8))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"session_id": None, "filename": "r.pdf"},
        {"session_id": "s1", "filename": ""},
        {"session_id": "s1", "filename": "../r.pdf"},
        {"session_id": "s\x00", "filename": "r.pdf"},
        {"session_id": "..", "filename": "r.pdf"},
        {"session_id": "s1", "filename": "r.pdf", "artifact": types.Part()},
        {"session_id": "s1", "filename": "r.pdf", "custom_metadata": {"x": object()}},
        {"session_id": "s1", "filename": "r.pdf", "custom_metadata": ["not", "a", "dict"]},
    ],
)
async def test_bad_input_is_refused_with_adks_error_and_writes_nothing(
    store: Store, kwargs: dict[str, Any]
) -> None:
    service = DurableArtifactService(store)
    call = {"app_name": APP, "user_id": USER, "artifact": blob(b"x"), **kwargs}
    with pytest.raises(InputValidationError) as raised:
        await service.save_artifact(**call)
    # ADK's type is what ADK's callers (api_server: 400) catch; ours still catches it too.
    assert isinstance(raised.value, errors.InvalidArgument)
    assert await service.list_artifact_keys(app_name=APP, user_id=USER, session_id="s1") == []
