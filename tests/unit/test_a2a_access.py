"""Who may call the A2A routes and where pushes may go: the checks themselves.

The service tests (tests/service/test_a2a_auth.py, test_a2a_push_urls.py)
drive them through real workers; here, each rule's edge, and bad settings
refused before anything serves.
"""

from __future__ import annotations

import pytest
from a2a.utils.errors import InvalidParamsError
from starlette.requests import Request

from durable_adk import errors
from durable_adk.a2a.auth import Callers
from durable_adk.a2a.push_urls import MAX_URL_CHARS, PushUrlPolicy
from durable_adk.a2a.server import to_a2a
from durable_adk.service.settings import ServiceSettings


def _request(authorization: str | None) -> Request:
    headers = [] if authorization is None else [(b"authorization", authorization.encode())]
    return Request({"type": "http", "method": "POST", "path": "/", "headers": headers})


def test_a_token_names_its_owner_and_nothing_else_is_admitted() -> None:
    callers = Callers({"worker-token-1": "", "alice-token-1": "alice"})
    assert callers.owner(_request("Bearer worker-token-1")) == ""
    assert callers.owner(_request("bearer alice-token-1")) == "alice"
    for refused in (
        None,
        "",
        "Bearer",
        "Bearer ",
        "Bearer alice-token-",
        "Bearer alice-token-12",
        "Basic alice-token-1",
        "alice-token-1",
    ):
        assert callers.owner(_request(refused)) is None, refused


@pytest.mark.parametrize(
    ("owners", "why"),
    [
        ({}, "at least one token"),
        ({"short": "alice"}, "at least 8"),
        ({"alice-token-1": "al ice"}, "letters, digits"),
        ({"alice-token-1": "-alice"}, "letters, digits"),
    ],
)
def test_bad_callers_are_refused(owners: dict[str, str], why: str) -> None:
    with pytest.raises(errors.InvalidArgument, match=why):
        Callers(owners)


async def test_the_push_url_rules() -> None:
    policy = PushUrlPolicy()
    for url in (
        "http://127.0.0.1:8080/push",
        "https://hooks.example.com/a2a?x=1",
        "HTTPS://Hooks.Example.com/p",
        "http://[::1]:9/p",
        "http://h/" + "a" * (MAX_URL_CHARS - 9),
    ):
        assert policy.refusal(url) is None, url
        assert await policy(url) is True
    for url, why in (
        ("http://h/" + "a" * (MAX_URL_CHARS - 8), "more than"),
        ("gopher://h/", "http or https"),
        ("//h/p", "http or https"),
        ("https://u:p@h/", "credentials"),
        ("https://@h/", "credentials"),
        ("https:///p", "no host"),
        ("http://h:0x50/", "cannot be parsed"),
        ("http://h/\x00", "control"),
        ("http://hé/", "non-ASCII"),
    ):
        assert why in (policy.refusal(url) or ""), url
        with pytest.raises(InvalidParamsError, match=why):
            await policy(url)


def test_push_hosts_match_a_host_or_the_hosts_under_a_domain() -> None:
    policy = PushUrlPolicy(["hooks.example.com", "*.svc.example", "10.0.0.7"])
    for url in (
        "https://hooks.example.com/p",
        "https://HOOKS.example.com./p",
        "https://a.svc.example/p",
        "https://a.b.svc.example/p",
        "http://10.0.0.7:9000/p",
    ):
        assert policy.refusal(url) is None, url
    for url in (
        "https://svc.example/p",
        "https://evil-svc.example/p",
        "https://hooks.example.com.evil/p",
        "https://x.hooks.example.com/p",
        "http://10.0.0.70/p",
    ):
        assert "is not one this server pushes to" in (policy.refusal(url) or ""), url


@pytest.mark.parametrize("entry", ["https://h", "h:80", "h/p", "*", "*.", "", ".h", "a b"])
def test_a_bad_push_host_is_refused(entry: str) -> None:
    with pytest.raises(errors.InvalidArgument, match="push host"):
        PushUrlPolicy([entry])


def test_serve_settings_refuse_bad_a2a_callers_before_anything_serves() -> None:
    base = {"db": "sqlite:///x.db", "token": "worker-token-1"}
    for extra, why in (
        ({"a2a_callers": (("alice", "alice-token-1"),)}, "need --a2a"),
        ({"a2a_push_hosts": ("h",), "a2a": False}, "need --a2a"),
        ({"a2a": True, "a2a_callers": (("", "alice-token-1"),)}, "a name of its own"),
        (
            {"a2a": True, "a2a_callers": (("a", "alice-token-1"), ("a", "bob-token-12"))},
            "a name of its own",
        ),
        ({"a2a": True, "a2a_callers": (("alice", "worker-token-1"),)}, "a token of its own"),
    ):
        with pytest.raises(errors.InvalidArgument, match=why):
            ServiceSettings(**base, **extra)  # type: ignore[arg-type]
    settings = ServiceSettings(**base, a2a=True, a2a_callers=(("alice", "alice-token-1"),))
    assert settings.a2a_owners() == {"worker-token-1": "", "alice-token-1": "alice"}


def test_to_a2a_refuses_bad_callers_and_push_hosts_at_once() -> None:
    with pytest.raises(errors.InvalidArgument, match="at least 8"):
        to_a2a(runner=object(), callers={"short": "alice"})  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgument, match="push host"):
        to_a2a(runner=object(), push_hosts=["https://h"])  # type: ignore[arg-type]
