"""A journaled tool's request refused by the outside service's fence: the run goes to recovery.

A real ADK run (google-adk 2.13) on both backends, and the fake billing
service in its own process. Before the tool's first request, a request of a
later epoch of the same run reaches billing (as when the network held this
one until another worker had taken the run over): billing refuses the tool's
request with 412 before acting. The journal forgets its intent (nothing
happened, so no lookup is needed: the tool has none), the runner hands the
run back (``RunInterrupted``, not FAILED, not PARKED), and recovery drives it
to DONE with exactly one act at billing.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent

from durable_adk import (
    DurableRunner,
    FenceToken,
    Journal,
    RunStatus,
    Sweeper,
    current_fence,
    errors,
    journaled,
    open_store,
)
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.services import BillingClient, FakeService, request_json


async def test_a_refused_request_hands_the_run_back_and_recovery_acts_once(
    store_url: str, tmp_path: Path
) -> None:
    with FakeService("billing", tmp_path / "billing.db") as billing:
        client = BillingClient(billing.url)
        first = []

        @journaled(key="send-invoice:{invoice_id}")  # no lookup on purpose
        def send_invoice(invoice_id: str, idempotency_key: str) -> dict[str, Any]:
            """Sends the invoice."""
            fence = current_fence()
            assert fence is not None
            if not first:  # a later epoch of this run reached billing first
                first.append(fence.epoch)
                later = FenceToken(fence.run_id, fence.epoch + 1, time.time() + 60).headers()
                request_json("GET", f"{billing.url}/invoices/count", headers=later)
            return client.create_invoice(invoice_id, "acme", 10.0, idempotency_key)

        script = [Call("send_invoice", {"invoice_id": "INV-9"}, id="c1"), Say("Sent INV-9.")]
        agent = LlmAgent(name="clerk", model=ScriptedModel({"clerk": script}), tools=[send_invoice])
        async with open_store(store_url) as store:
            runner = DurableRunner(
                app=agent, app_name="billing", store=store, worker_id="w1", backoff=0.0
            )
            try:
                async for _ in runner.run(user_id="u", session_id="s", message="invoice"):
                    pass
            except errors.RunInterrupted as exc:
                assert "refused" in str(exc)
            else:
                raise AssertionError("the refused request did not interrupt the run")
            (run,) = await runner.ledger.list_runs()
            assert run.status is RunStatus.RUNNING  # handed back, neither FAILED nor PARKED
            assert run.last_error is not None and "fence" in run.last_error
            assert await Journal(store).get("send-invoice:INV-9") is None  # forgotten
            assert billing.count("invoices") == 0
            (refused,) = billing.requests("invoices", "create", outcome="fenced")
            assert refused.reason == "fence_superseded" and refused.fence["epoch"] == "1"

            (recovery,) = await Sweeper(runner).recover_once()
            assert recovery.status is RunStatus.DONE
            done = await runner.ledger.get(run.run_id)
            assert done is not None and (done.status, done.epoch) == (RunStatus.DONE, 2)
            assert billing.count("invoices") == 1
            assert billing.acts("invoices", "create") == 1  # the refused request is not an act
            (acted,) = [r for r in billing.requests("invoices", "create") if r.outcome == "created"]
            assert acted.fence["epoch"] == "2"
            await runner.aclose()
