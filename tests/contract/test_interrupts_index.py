"""The interrupts index on both backends: an open row takes the kind its call has now."""

from __future__ import annotations

from durable_adk.store import Store
from durable_adk.tables.interrupts import InterruptKind, InterruptStatus, InterruptTable
from durable_adk.tables.ledger import RunLedger


async def test_an_open_interrupt_indexed_with_an_old_kind_takes_the_new_one(store: Store) -> None:
    """A node confirmation indexed as an input before the kind rule was fixed becomes an
    approval when its invocation's interrupts are synced again; nothing else of it changes."""
    run = await RunLedger(store).submit(
        app_name="a", user_id="u", session_id="s", request={}, owner="w"
    )
    table = InterruptTable(store)
    call = "wf_tool_confirmation:node/charge@1"
    await table.open(run, call_id=call, kind=InterruptKind.INPUT, name="adk_request_input", args={})
    await table.open(
        run, call_id=call, kind=InterruptKind.CONFIRMATION, name="adk_request_input", args={"x": 1}
    )
    (row,) = await table.list_interrupts(session_id="s")
    assert row.kind is InterruptKind.CONFIRMATION and row.status is InterruptStatus.OPEN
    assert row.args == {}  # the first row's call, kept
    await table.close_of_run(run.run_id)
    await table.open(run, call_id=call, kind=InterruptKind.INPUT, name="adk_request_input", args={})
    (closed,) = await table.list_interrupts(session_id="s", status=None)
    assert closed.status is InterruptStatus.CLOSED and closed.kind is InterruptKind.CONFIRMATION
