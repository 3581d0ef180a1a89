"""DurableRemoteA2aAgent's own rules, without a remote: the message id, bad arguments.

The calls themselves, against a real remote process and real kills, are in
tests/crash/test_a2a_calls.py.
"""

from __future__ import annotations

import pytest
from google.adk.events.event import Event
from google.genai import types

from durable_adk import errors
from durable_adk.adk.tools.remote_a2a import DurableRemoteA2aAgent, _as_answer, message_id_for

CARD = "http://127.0.0.1:9/.well-known/agent-card.json"


def test_the_message_id_is_the_call_s_identity() -> None:
    """ADK makes a random message id per send; ours is the same on every re-drive."""

    class Session:
        id = "s1"
        events: list[Event] = []

    class Ctx:
        app_name, user_id, invocation_id, branch = "app", "u", "e-1", "boss.researcher"
        session = Session()

    first = message_id_for(Ctx(), "researcher")  # type: ignore[arg-type]
    assert first == message_id_for(Ctx(), "researcher")  # type: ignore[arg-type]
    assert first != message_id_for(Ctx(), "other")  # type: ignore[arg-type]

    class Later(Ctx):
        invocation_id = "e-2"

    assert first != message_id_for(Later(), "researcher")  # type: ignore[arg-type]
    # Once this exchange's answer is stored, the agent's next send is a new message.
    Session.events = [
        Event(
            author="researcher",
            invocation_id="e-1",
            content=types.Content(role="model", parts=[types.Part(text="done")]),
            custom_metadata={"a2a:request": {"messageId": first}},
        )
    ]
    second = message_id_for(Ctx(), "researcher")  # type: ignore[arg-type]
    assert second != first
    Session.events.append(Session.events[0])  # two events of one answer: one exchange
    assert message_id_for(Ctx(), "researcher") == second  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"poll_interval": 0},
        {"poll_interval": -1.0},
        {"max_poll_interval": 0.01, "poll_interval": 0.5},
        {"unreachable_for": 0},
        {"unreachable_for": "soon"},
    ],
)
def test_bad_intervals_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(errors.InvalidArgument):
        DurableRemoteA2aAgent(name="researcher", agent_card=CARD, **kwargs)  # type: ignore[arg-type]


def test_its_config_is_its_own() -> None:
    """The message-id stamp goes on the agent's copy of the config, not on a shared one."""
    from google.adk.a2a.agent.config import A2aRemoteAgentConfig

    shared = A2aRemoteAgentConfig()
    one = DurableRemoteA2aAgent(name="one", agent_card=CARD, config=shared)
    two = DurableRemoteA2aAgent(name="two", agent_card=CARD, config=shared)
    assert shared.request_interceptors in (None, [])
    assert len(one._config.request_interceptors or []) == 1
    assert len(two._config.request_interceptors or []) == 1


def test_a_record_that_is_not_an_answer_is_refused() -> None:
    with pytest.raises(errors.InvalidArgument):
        _as_answer({"task_id": "t-1"})


def test_the_adk_and_sdk_names_it_relies_on_are_there() -> None:
    """The private names of google-adk 2.13 and a2a-sdk 1.x it uses (docs/a2a-calling.md)."""
    import dataclasses

    from a2a.client import ClientConfig, ClientFactory
    from a2a.client.base_client import BaseClient
    from a2a.client.client_factory import minimal_agent_card
    from google.adk.agents.remote_a2a_agent import RemoteA2aAgent

    assert callable(RemoteA2aAgent._ensure_resolved)
    assert callable(RemoteA2aAgent._run_async_impl)
    agent = DurableRemoteA2aAgent(name="researcher", agent_card=CARD)
    for name in ("_config", "_agent_card", "_a2a_client_factory"):
        assert hasattr(agent, name), name
    factory = ClientFactory(ClientConfig())
    assert dataclasses.is_dataclass(factory._config)
    assert {"streaming", "polling"} <= {f.name for f in dataclasses.fields(factory._config)}
    card = minimal_agent_card("http://127.0.0.1:9", ["JSONRPC"])
    client = factory.create(card)
    assert isinstance(client, BaseClient) and client._card is card


async def test_a_remote_unreachable_past_its_patience_raises_instead_of_an_error_event() -> None:
    """ADK would end the invocation on an error event; a durable run must be handed back."""
    import socket

    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.runners import InMemoryRunner

    from durable_adk.adk.tools.remote_a2a import RemoteA2aUnavailable
    from durable_adk.testing import Call, ScriptedModel

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]  # nothing listens there once the socket is closed
    researcher = DurableRemoteA2aAgent(
        name="researcher",
        agent_card=f"http://127.0.0.1:{closed}/.well-known/agent-card.json",
        description="Researches.",
        poll_interval=0.05,
        max_poll_interval=0.1,
        unreachable_for=0.3,
    )
    boss = LlmAgent(
        name="boss",
        model=ScriptedModel({"boss": [Call("transfer_to_agent", {"agent_name": "researcher"})]}),
        sub_agents=[researcher],
    )
    runner = InMemoryRunner(app=App(name="desk", root_agent=boss))
    session = await runner.session_service.create_session(app_name="desk", user_id="u")
    message = types.Content(role="user", parts=[types.Part(text="research tides")])
    with pytest.raises(RemoteA2aUnavailable):
        async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=message):
            pass
