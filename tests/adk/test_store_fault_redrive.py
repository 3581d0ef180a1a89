"""A store fault around a journaled tool's answer: recovered to DONE, the tool acting once.

Real ADK runs (google-adk 2.13) on both backends, through a store wrapper that
fails one named query once with ``StoreUnavailable``, as a database restart
does:

* while ADK stores the tool's answer (the function response's ``append_event``):
  ADK stores nothing more and raises; the log ends on the unanswered call;
* while the journal records the tool's result (``journal_done``): the tool
  raises, and ADK stores an error event after the call. ADK does not replay a
  call followed by its error event (it pauses the agent and writes its end
  marker); the sweeper shows ADK the invocation without that event, so the
  call is replayed and the journal finds the effect by its lookup.

Either way the runner hands the run back (``RunInterrupted``), recovery
re-drives it, and the session ends with the call answered once, one final
answer, the run DONE and the outside act counted exactly once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from google.adk.agents import LlmAgent

from durable_adk import errors
from durable_adk.adk.loops.recovery import Sweeper
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.tools.journaling import journaled
from durable_adk.effect_tables.journal import Journal, JournalStatus
from durable_adk.store import Store, open_store
from durable_adk.store.base import Params, Row
from durable_adk.tables.ledger import RunStatus
from durable_adk.testing import Call, Say, ScriptedModel

Fault = Callable[[str, Params | None], bool]


class FaultyStore(Store):
    """A store that fails the first query matching ``fault`` with StoreUnavailable."""

    def __init__(self, inner: Store, fault: Fault) -> None:
        self.inner = inner
        self.fault = fault
        self.dialect = inner.dialect
        self.url = inner.url
        self.failed: list[str] = []

    async def fetch(self, query: str, params: Params | None = None) -> Sequence[Row]:
        if not self.failed and self.fault(query, params):
            self.failed.append(query)
            raise errors.StoreUnavailable(f"injected: {query} during a database restart")
        return await self.inner.fetch(query, params)

    async def now(self) -> float:
        return await self.inner.now()

    async def schema_version(self) -> int:
        return await self.inner.schema_version()

    async def run_script(self, sql: str) -> None:
        await self.inner.run_script(sql)

    async def close(self) -> None:
        await self.inner.close()


def answer_append(query: str, params: Params | None) -> bool:
    data = str((params or {}).get("data", ""))
    return query == "append_event" and ("function_response" in data or "functionResponse" in data)


def journal_done(query: str, params: Params | None) -> bool:
    return query == "journal_done"


class Billing:
    """The outside world: one charge per act, found again by idempotency key."""

    def __init__(self) -> None:
        self.acts: list[str] = []
        self.charges: dict[str, dict[str, Any]] = {}

    def charge(self, order: str, key: str) -> dict[str, Any]:
        self.acts.append(key)
        return self.charges.setdefault(key, {"order": order, "charge_id": f"ch-{len(self.acts)}"})

    def find(self, key: str) -> dict[str, Any] | None:
        return self.charges.get(key)


def make_runner(store: Store, billing: Billing) -> DurableRunner:
    @journaled(key="charge:{order}", lookup=billing.find)
    async def charge(order: str, idempotency_key: str) -> dict[str, Any]:
        """Charges an order."""
        return billing.charge(order, idempotency_key)

    script = [Call("charge", {"order": "o-1"}, id="c1"), Say("Charged o-1.")]
    agent = LlmAgent(name="clerk", model=ScriptedModel({"clerk": script}), tools=[charge])
    return DurableRunner(app=agent, app_name="shop", store=store, worker_id="w1", backoff=0.0)


@pytest.mark.parametrize(
    ("fault", "query", "error_event"),
    [(answer_append, "append_event", False), (journal_done, "journal_done", True)],
    ids=["answer_append", "journal_done"],
)
async def test_a_store_fault_at_the_tools_answer_is_recovered_to_done_acting_once(
    store_url: str,
    fault: Fault,
    query: str,
    error_event: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    billing = Billing()
    async with open_store(store_url) as inner:
        store = FaultyStore(inner, fault)
        runner = make_runner(store, billing)
        with pytest.raises(errors.RunInterrupted):
            async for _ in runner.run(user_id="u", session_id="s", message="charge o-1"):
                pass
        assert store.failed == [query]
        assert billing.acts == ["charge:o-1"]
        (run,) = await runner.ledger.list_runs()
        assert run.status is RunStatus.RUNNING  # handed back for recovery, not FAILED
        session = await runner.sessions.get_session(app_name="shop", user_id="u", session_id="s")
        assert session is not None
        assert not [r for e in session.events for r in e.get_function_responses()]
        errors_after_call = [e.error_code for e in session.events if e.error_code]
        assert errors_after_call == (["StoreUnavailable"] if error_event else [])

        await runner.ledger.backdate(run.run_id, 3600)
        with caplog.at_level(logging.INFO, logger="durable_adk.recovery"):
            (recovery,) = await Sweeper(runner).recover_once()
        assert (recovery.found.value, recovery.action, recovery.status) == (
            "TOOL_UNANSWERED",
            "redrive",
            RunStatus.DONE,
        )
        replayed = [r for r in caplog.records if "re-drives the call without" in r.getMessage()]
        assert len(replayed) == (1 if error_event else 0)
        recovered = [r for r in caplog.records if r.getMessage().startswith("recovered run=")]
        assert len(recovered) == 1 and recovered[0].levelno == logging.INFO
        assert run.run_id in recovered[0].getMessage()
        assert "TOOL_UNANSWERED" in recovered[0].getMessage()
        assert "epoch=2" in recovered[0].getMessage()

        assert billing.acts == ["charge:o-1"]  # the outside act happened exactly once
        done = await runner.ledger.get(run.run_id)
        assert done is not None and (done.status, done.epoch) == (RunStatus.DONE, 2)
        session = await runner.sessions.get_session(app_name="shop", user_id="u", session_id="s")
        assert session is not None
        responses = [r for e in session.events for r in e.get_function_responses()]
        assert [(r.id, r.name) for r in responses] == [("c1", "charge")]
        assert responses[0].response == billing.charges["charge:o-1"]
        finals = [
            e.content.parts[0].text
            for e in session.events
            if e.author == "clerk" and e.content and e.content.parts and e.content.parts[0].text
        ]
        assert finals == ["Charged o-1."]
        # The error event stays in the log (nothing is rewritten); it answers nothing.
        assert [e.error_code for e in session.events if e.error_code] == errors_after_call
        entry = await Journal(inner).get("charge:o-1")
        assert entry is not None
        assert entry.status is JournalStatus.DONE
        assert await Sweeper(runner).recover_once() == []
