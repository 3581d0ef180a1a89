"""Bad input a new user meets (issue 14, item 7): store URLs with a query string,
malformed JSON, the message size limit. Clear errors, nothing created or changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from svc_support import Service

from durable_adk import errors
from durable_adk.store import connect, open_store


@pytest.mark.parametrize(
    ("suffix", "words"),
    [
        ("?mode=memory", "mode=memory cannot apply"),
        ("?cache=shared", "cache=shared cannot apply"),
        ("?busy_timeout_ms=soon", "busy_timeout_ms takes a whole number"),
        ("#frag", "no '#' fragment"),
    ],
)
async def test_a_sqlite_url_query_string_is_refused_not_made_a_file(
    tmp_path: Path, suffix: str, words: str
) -> None:
    url = f"sqlite:///{tmp_path}/x.db{suffix}"
    with pytest.raises(errors.UnsupportedUrl, match=words):
        await connect(url)
    assert os.listdir(tmp_path) == []  # no database was created under any name


async def test_a_known_sqlite_url_parameter_is_honoured(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path}/x.db?busy_timeout_ms=1234") as store:
        assert store.path == f"{tmp_path}/x.db"  # type: ignore[attr-defined]
        assert store._busy_timeout_ms == 1234  # type: ignore[attr-defined]
    assert [n for n in os.listdir(tmp_path) if n.endswith(".db")] == ["x.db"]


async def test_malformed_json_is_400_and_an_invalid_body_422(service: Service) -> None:
    before = await service.stats()
    for url in ("/v1/users/u1/sessions/s1/runs", "/v1/runs/run-x/cancel"):
        broken = await service.client.post(
            url, content=b'{"message": ', headers={"content-type": "application/json"}
        )
        assert broken.status_code == 400, broken.text
        assert broken.json()["error"]["code"] == "bad_request"
        assert "not JSON" in broken.json()["error"]["message"]
        wrong = await service.client.post(url, json={"nope": 1})
        assert wrong.status_code == 422, wrong.text
    assert await service.stats() == before


@pytest.mark.parametrize("service", [{"max_message_chars": 10}], indirect=True)
async def test_the_message_size_limit_is_settable(service: Service) -> None:
    before = await service.stats()
    long = await service.client.post("/v1/users/u1/sessions/s1/runs", json={"message": "x" * 11})
    assert long.status_code == 422 and "1..10 characters" in long.json()["error"]["message"]
    assert await service.stats() == before
    fits = await service.client.post("/v1/users/u1/sessions/s1/runs", json={"message": "x" * 10})
    assert fits.status_code == 202


async def test_one_id_rule_for_the_library_and_the_api(service: Service) -> None:
    from urllib.parse import quote

    from durable_adk.ids import check_id

    # Any id the library stores can be named in a path, and the reverse.
    session = "order 7 é:ü@x"
    created = await service.worker.sessions.create_session(
        app_name="stock_assistant", user_id="ann lee", session_id=session
    )
    assert created.id == session
    url = f"/v1/users/{quote('ann lee', safe='')}/sessions/{quote(session, safe='')}/events"
    listed = await service.client.get(url)
    assert listed.status_code == 200, listed.text
    for bad in ("a/b", "tab\there", "", "x" * 513):
        with pytest.raises(errors.InvalidArgument):
            check_id("session_id", bad)
    before = await service.stats()
    refused = await service.client.get("/v1/users/u1/sessions/tab%09here/events")
    assert refused.status_code == 422
    assert await service.stats() == before
