"""``DurableRunner.submit`` under a run id the caller chose: sent again, it records nothing.

Both backends. The library's side of the HTTP API's ``Idempotency-Key``
(``tests/service/test_idempotent_submit.py``): the second submit returns the
first one's run marked ``replayed``; another message, session or user under
the id is refused and writes nothing; a run id is not for a run under an
invocation ADK chose.
"""

from __future__ import annotations

import pytest
from google.adk.agents import LlmAgent

from durable_adk import errors
from durable_adk.adk.runner import DurableRunner
from durable_adk.store import Store
from durable_adk.tables.ledger import RunStatus
from durable_adk.testing import Say, ScriptedModel

APP = "submit-id"


def runner(store: Store) -> DurableRunner:
    agent = LlmAgent(name="root", model=ScriptedModel({"root": [Say("Done.")] * 4}))
    return DurableRunner(app=agent, app_name=APP, store=store, worker_id="w-1")


async def test_a_submit_sent_again_under_its_run_id_is_the_first_run(store: Store) -> None:
    durable = runner(store)
    first, _ = await durable.submit(user_id="u", session_id="s", message="hi", run_id="run-a")
    assert not first.replayed and first.run_id == "run-a"
    again, content = await durable.submit(user_id="u", session_id="s", message="hi", run_id="run-a")
    assert again.replayed and again.run_id == "run-a" and again.epoch == first.epoch
    assert content.parts and content.parts[0].text == "hi"
    (only,) = await durable.ledger.list_runs()
    assert only.run_id == "run-a" and only.status is RunStatus.RUNNING

    # Driven once, by the caller of the submit that was not a replay.
    claimed = await durable.wait_for_turn(first)
    events = [e async for e in durable.drive(claimed, content, resume=False)]
    assert [e.content.parts[0].text for e in events if e.content and e.content.parts] == ["Done."]
    ended, _ = await durable.submit(user_id="u", session_id="s", message="hi", run_id="run-a")
    assert ended.replayed and ended.status is RunStatus.DONE


@pytest.mark.parametrize(
    ("user", "session", "message"),
    [("u", "s", "another message"), ("u", "s2", "hi"), ("v", "s", "hi")],
)
async def test_another_request_under_the_run_id_is_refused_and_writes_nothing(
    store: Store, user: str, session: str, message: str
) -> None:
    durable = runner(store)
    await durable.submit(user_id="u", session_id="s", message="hi", run_id="run-b")
    with pytest.raises(errors.InvalidArgument, match="submitted before with another"):
        await durable.submit(user_id=user, session_id=session, message=message, run_id="run-b")
    assert [r.run_id for r in await durable.ledger.list_runs()] == ["run-b"]
    assert await durable.path.sessions.get_session(
        app_name=APP, user_id=user, session_id=session
    ) is None or (user, session) == ("u", "s")


async def test_a_run_id_is_not_for_a_run_under_an_invocation_adk_chose(store: Store) -> None:
    durable = runner(store)
    with pytest.raises(errors.InvalidArgument, match="invocation ADK chose"):
        await durable.path.submit(
            user_id="u", session_id="s", message="hi", run_id="run-c", chosen_invocation_id="e-1"
        )
    assert await durable.ledger.list_runs() == []
