"""Helpers of the operator tests: a run parked with an unanswered call, as recovery leaves one."""

from __future__ import annotations

from google.adk.events.event import Event
from google.genai import types

from durable_adk.adk.services.sessions import RUN_METADATA_KEY, DurableSessionService
from durable_adk.store import Store
from durable_adk.tables.ledger import Run, RunLedger

APP = "stock_assistant"


async def park_in_store(
    store: Store,
    session: str,
    *,
    app_name: str = APP,
    item: str = "stools",
    call_id: str | None = None,
) -> tuple[Run, str]:
    """A run whose worker died inside a tool that is not idempotent, parked by recovery.

    The log holds what the dead worker wrote (the user's message, the model's
    call, stamped with the run's epoch) and no response; the ledger says
    PARKED with a dead letter, as the sweeper leaves it ("outcome unknown").
    """
    sessions = DurableSessionService(store)
    await sessions.create_session(app_name=app_name, user_id="u1", session_id=session)
    ledger = RunLedger(store)
    request = {"role": "user", "parts": [{"text": item}]}
    run = await ledger.submit(
        app_name=app_name, user_id="u1", session_id=session, request=request, owner="dead-worker"
    )
    claimed = await ledger.claim_queued(run.run_id, "dead-worker")
    assert claimed is not None
    stamp = {RUN_METADATA_KEY: {"run_id": run.run_id, "epoch": claimed.epoch}}
    loaded = await sessions.get_session(app_name=app_name, user_id="u1", session_id=session)
    assert loaded is not None
    call_id = call_id or f"call-{session}"
    for event in (
        Event(
            invocation_id=run.invocation_id,
            author="user",
            content=types.Content(role="user", parts=[types.Part(text=item)]),
            custom_metadata=stamp,
        ),
        Event(
            invocation_id=run.invocation_id,
            author=APP,
            content=types.Content(
                role="model",
                parts=[
                    types.Part(
                        function_call=types.FunctionCall(
                            id=call_id, name="check_stock", args={"item": item}
                        )
                    )
                ],
            ),
            custom_metadata=stamp,
        ),
    ):
        await sessions.append_event(loaded, event)
    assert await ledger.park(
        claimed.lease,
        error="outcome unknown: check_stock may have acted",
        classification="TOOL_UNANSWERED",
    )
    parked = await ledger.get(run.run_id)
    assert parked is not None and parked.status.value == "PARKED"
    return parked, call_id
