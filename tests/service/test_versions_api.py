"""A versioned worker through the HTTP API, both backends: the run answer shows its version."""

from __future__ import annotations

import pytest
from svc_support import Service
from test_api import start, wait_status

from durable_adk import errors
from durable_adk.service.settings import ServiceSettings


@pytest.mark.parametrize(
    "service", [{"app_version": "1.4.0", "compatible_versions": ("1.3.0",)}], indirect=True
)
async def test_the_api_shows_the_version_a_run_was_started_under(service: Service) -> None:
    body = await start(service, "s1")
    run = await wait_status(service, body["run"]["run_id"], "DONE")
    assert run["app_version"] == "1.4.0"
    assert run["app_fingerprint"] == service.worker.runner.path.serving.fingerprint
    listed = (await service.client.get("/v1/runs")).json()["runs"]
    assert [r["app_version"] for r in listed] == ["1.4.0"]


def test_a_bad_version_setting_is_refused() -> None:
    with pytest.raises(errors.InvalidVersion):
        ServiceSettings(db="sqlite:///x.db", app_version="green")
    with pytest.raises(errors.InvalidVersion):
        ServiceSettings(db="sqlite:///x.db", app_version="1.0", compatible_versions=("1.1",))
