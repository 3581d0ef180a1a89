"""``journaled(require_confirmation=callable)`` asks only for the calls it names (issue 42).

A real ADK run on both backends, the fake billing service in its own process
counting every act. The predicate gets the call's arguments: a small invoice
acts at once, a big one pauses for its confirmation and acts once approved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.genai import types

from durable_adk import DurableRunner, RunStatus, errors, journaled, open_store
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.services import BillingClient, FakeService


async def test_a_confirmation_predicate_pauses_only_the_calls_it_names(
    store_url: str, tmp_path: Path
) -> None:
    with FakeService("billing", tmp_path / "billing.db") as billing:
        client = BillingClient(billing.url)

        def big(invoice_id: str, amount: float) -> bool:
            return amount > 100

        @journaled(key="pay:{invoice_id}", name="pay_invoice", require_confirmation=big)
        def _pay(invoice_id: str, amount: float, idempotency_key: str) -> dict[str, Any]:
            """Pays an invoice."""
            return client.create_invoice(invoice_id, "acme", amount, idempotency_key)

        script = [
            Call("pay_invoice", {"invoice_id": "S-1", "amount": 5.0}),
            Say("Paid S-1."),
            Call("pay_invoice", {"invoice_id": "B-1", "amount": 500.0}),
            Say("Paid B-1."),
        ]
        agent = LlmAgent(name="clerk", model=ScriptedModel({"clerk": script}), tools=[_pay])
        async with open_store(store_url) as store:
            runner = DurableRunner(app=agent, app_name="billing", store=store, worker_id="w1")

            async def turn(message: Any, invocation_id: str | None = None) -> None:
                async for _ in runner.run(
                    user_id="u", session_id="s", message=message, invocation_id=invocation_id
                ):
                    pass

            def acts() -> list[str | None]:
                return [r.key for r in billing.requests("invoices") if r.mutating]

            await turn("pay S-1")
            assert acts() == ["pay:S-1"]  # small: no confirmation asked
            await turn("pay B-1")
            paused = (await runner.ledger.list_runs())[0]
            assert paused.status is RunStatus.PAUSED
            assert acts() == ["pay:S-1"]  # big: nothing before the approval
            session = await runner.sessions.get_session(
                app_name="billing", user_id="u", session_id="s"
            )
            assert session is not None
            (request,) = [
                c
                for e in session.events
                for c in e.get_function_calls()
                if c.name == "adk_request_confirmation"
            ]
            assert request.args and request.args["originalFunctionCall"]["name"] == "pay_invoice"
            answer = types.FunctionResponse(
                id=request.id, name=request.name, response={"confirmed": True}
            )
            approval = types.Content(role="user", parts=[types.Part(function_response=answer)])
            await turn(approval, paused.invocation_id)
            assert acts() == ["pay:S-1", "pay:B-1"]
            with pytest.raises(errors.Conflict, match="already answered"):
                await turn(approval, paused.invocation_id)
            assert acts() == ["pay:S-1", "pay:B-1"]


def test_a_require_confirmation_neither_bool_nor_callable_is_refused() -> None:
    with pytest.raises(errors.InvalidArgument, match="require_confirmation must be"):
        journaled(key="pay:{invoice_id}", require_confirmation="yes")  # type: ignore[arg-type]
