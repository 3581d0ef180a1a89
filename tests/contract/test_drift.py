"""Drift: a run continued on code that lacks what its log refers to is parked before it acts.

Both backends. A worker of version 1.0 leaves a run paused on a long-running
approval call; a worker of 1.1, which declares 1.0 compatible, continues it.
When 1.1 renamed the approval tool (or the agent the run is in), the answer's
drive parks the run with a dead letter naming what is missing, and neither
its model nor any tool is called. When 1.1 only added a tool, the run goes on.
Through DurableRunner (a live answer) and through recovery (the answer left
queued by a worker that died). Leases move back in the database, never by sleeping.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.events.event import Event, NodeInfo
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.genai import types

from durable_adk.adk.loops.recovery import Sweeper
from durable_adk.adk.loops.resume import Resumer
from durable_adk.adk.runner import DurableRunner
from durable_adk.adk.runs.drift import RecordedStep, RunDrifted, drift, node_names
from durable_adk.adk.runs.fingerprint import Known
from durable_adk.adk.tools.long_running import long_running_tool
from durable_adk.adk.tools.saga_agent import SagaSequence, SagaStage
from durable_adk.effect_tables.jobs import JobState, JobTable
from durable_adk.effect_tables.sagas import SagaLedger
from durable_adk.store import Store
from durable_adk.tables.ledger import RunStatus
from durable_adk.testing import Call, Say, ScriptedModel


def approve_refund(order_id: str) -> dict[str, Any]:
    """Asks a person to approve the refund of an order."""
    return {"status": "waiting for a person", "order_id": order_id}


def approve_return(order_id: str) -> dict[str, Any]:
    """Asks a person to approve the return of an order (1.1's name for the same step)."""
    return {"status": "waiting for a person", "order_id": order_id}


def refund(order_id: str) -> dict[str, Any]:
    """Refunds an order."""
    return {"refunded": order_id}


def app(agent_name: str, *tools: Any) -> tuple[LlmAgent, ScriptedModel]:
    model = ScriptedModel(
        {
            agent_name: [
                Call("approve_refund", {"order_id": "O-1"}),
                Say("Waiting for approval."),
                Say("Refunded O-1."),
            ]
        }
    )
    agent = LlmAgent(name=agent_name, model=model, tools=list(tools))
    return agent, model


def runner(
    store: Store, worker: str, agent: LlmAgent, version: str, *compatible: str
) -> DurableRunner:
    return DurableRunner(
        app=agent,
        app_name="shop",
        store=store,
        worker_id=worker,
        version=version,
        compatible_versions=compatible,
        background=False,
    )


async def paused_under_1_0(store: Store) -> tuple[str, str, str]:
    """A run of 1.0 paused on its approval call; returns (run id, invocation id, call id)."""
    agent, _ = app("clerk", LongRunningFunctionTool(approve_refund))
    old = runner(store, "w-1.0", agent, "1.0")
    calls = []
    async for event in old.run(user_id="u", session_id="s", message="Refund order O-1."):
        calls.extend(c.id for c in event.get_function_calls())
    (run,) = await old.ledger.list_runs()
    assert run.status is RunStatus.PAUSED and run.app_version == "1.0"
    return run.run_id, str(run.invocation_id), str(calls[0])


def approval(call_id: str) -> types.Content:
    answer = types.FunctionResponse(id=call_id, name="approve_refund", response={"approved": True})
    return types.Content(role="user", parts=[types.Part(function_response=answer)])


@pytest.mark.parametrize(
    ("agent_name", "tools", "missing"),
    [
        ("clerk", [LongRunningFunctionTool(approve_return)], "tool 'approve_refund'"),
        ("cashier", [LongRunningFunctionTool(approve_refund)], "agent 'clerk'"),
        ("clerk", [approve_refund], "tool 'approve_refund' (no longer long-running)"),
    ],
    ids=["tool-renamed", "agent-renamed", "no-longer-long-running"],
)
async def test_an_answer_driven_on_code_that_lacks_what_the_log_names_parks_before_acting(
    store: Store, agent_name: str, tools: list[Any], missing: str
) -> None:
    run_id, invocation, call_id = await paused_under_1_0(store)
    agent, model = app(agent_name, *tools)
    new = runner(store, "w-1.1", agent, "1.1", "1.0")
    with pytest.raises(RunDrifted) as raised:
        async for _ in new.run(
            user_id="u", session_id="s", message=approval(call_id), invocation_id=invocation
        ):
            pass
    assert missing in str(raised.value)
    assert model.calls == []  # no model call, no tool: nothing acted
    runs = {r.run_id: r for r in await new.ledger.list_runs()}
    parked = [r for r in runs.values() if r.status is RunStatus.PARKED and r.run_id != run_id]
    (answer,) = parked
    assert answer.app_version == "1.0" and answer.last_error is not None
    assert "drift" in answer.last_error and missing in answer.last_error
    (letter,) = await new.ledger.dead_letters(run_id=answer.run_id)
    assert letter.error is not None and missing in letter.error
    session = await new.path.sessions.get_session(app_name="shop", user_id="u", session_id="s")
    assert session is not None
    said = [p.text for e in session.events if e.content for p in e.content.parts or () if p.text]
    assert "Refunded O-1." not in said
    # The paused run ends with its parked continuation (never left PAUSED, its answer
    # taken), naming it; the continuation's dead letter is the one to act on.
    paused = runs[run_id]
    assert paused.status is RunStatus.PARKED, paused
    assert paused.last_error is not None and answer.run_id in paused.last_error
    assert missing in paused.last_error
    assert await new.ledger.dead_letters(run_id=run_id) == []


async def test_a_parked_continuation_retried_on_code_that_has_the_tool_ends_its_pause_done(
    store: Store,
) -> None:
    run_id, invocation, call_id = await paused_under_1_0(store)
    renamed, _ = app("clerk", LongRunningFunctionTool(approve_return))
    new = runner(store, "w-1.1", renamed, "1.1", "1.0")
    with pytest.raises(RunDrifted):
        async for _ in new.run(
            user_id="u", session_id="s", message=approval(call_id), invocation_id=invocation
        ):
            pass
    (answer,) = [r for r in await new.ledger.list_runs() if r.run_id != run_id]
    # The fix: code that has the tool again (1.0's own definition) retries the answer.
    fixed, model = app("clerk", LongRunningFunctionTool(approve_refund))
    again = runner(store, "w-1.0b", fixed, "1.0")
    assert (await again.ledger.retry(answer.run_id)) is not None
    (recovery,) = await Sweeper(again).recover_once()
    assert recovery.status is RunStatus.DONE, recovery
    assert model.calls  # the model got the answer this time
    runs = {r.run_id: r.status for r in await again.ledger.list_runs()}
    assert runs == {run_id: RunStatus.DONE, answer.run_id: RunStatus.DONE}


async def test_an_added_tool_is_no_drift_and_the_answer_goes_on(store: Store) -> None:
    _, invocation, call_id = await paused_under_1_0(store)
    agent, model = app("clerk", LongRunningFunctionTool(approve_refund), refund)
    new = runner(store, "w-1.1", agent, "1.1", "1.0")
    before, _ = app("clerk", LongRunningFunctionTool(approve_refund))
    assert (
        new.path.serving.fingerprint != runner(store, "x", before, "1.0").path.serving.fingerprint
    )
    texts = []
    async for event in new.run(
        user_id="u", session_id="s", message=approval(call_id), invocation_id=invocation
    ):
        texts.extend(p.text for p in (event.content.parts if event.content else []) if p.text)
    assert model.calls and texts  # the model was called with the answer and spoke
    assert all(r.status is RunStatus.DONE for r in await new.ledger.list_runs())


async def test_recovery_of_a_queued_answer_on_drifted_code_parks_it(store: Store) -> None:
    _, invocation, call_id = await paused_under_1_0(store)
    agent, model = app("clerk", LongRunningFunctionTool(approve_return))
    new = runner(store, "w-1.1", agent, "1.1", "1.0")
    # The answer was recorded by a worker that died before driving it.
    queued = await new.path.submit_answer("u", "s", invocation, approval(call_id))
    await new.ledger.backdate(queued.run_id, 3600)
    (recovery,) = await Sweeper(new).recover_once()
    assert recovery.action == "park" and recovery.status is RunStatus.PARKED
    assert "tool 'approve_refund'" in recovery.reason
    assert model.calls == []


def start_report(quarter: str, region: str) -> dict[str, Any]:
    """Starts building a quarter's report for a region (a long-running job)."""
    return {"message": f"building {quarter} {region}"}


def reports(job_key: str) -> tuple[LlmAgent, ScriptedModel]:
    model = ScriptedModel(
        {
            "clerk": [
                Call("start_report", {"quarter": "Q3", "region": "EMEA"}),
                Say("Building it."),
                Say("Here is the report."),
            ]
        }
    )
    tool = long_running_tool(start_report, job_key=job_key, deadline=600)
    return LlmAgent(name="clerk", model=model, tools=[tool]), model


async def test_a_jobs_result_on_code_that_keys_the_job_anew_parks_and_ends_its_pause(
    store: Store,
) -> None:
    """1.1 keys the report job ``report:{quarter}:{region}``: the 1.0 job's result is
    not delivered to code that would make another job of the same work."""
    agent, _ = reports("report:{quarter}")
    old = runner(store, "w-1.0", agent, "1.0")
    async for _ in old.run(user_id="u", session_id="s", message="The Q3 report, please."):
        pass
    (paused,) = await old.ledger.list_runs()
    assert paused.status is RunStatus.PAUSED
    jobs = JobTable(store)
    assert [j.job_id for j in await jobs.list_jobs()] == ["report:Q3"]
    await jobs.complete("report:Q3", JobState.SUCCEEDED, {"rows": 3})

    agent, model = reports("report:{quarter}:{region}")
    new = runner(store, "w-1.1", agent, "1.1", "1.0")
    (resumed,) = await Resumer(new, gather=0).resume_once(wait=True)
    assert resumed.status is RunStatus.PARKED
    assert model.calls == []  # nothing asked, nothing started
    assert [j.job_id for j in await jobs.list_jobs()] == ["report:Q3"]
    runs = {r.run_id: r for r in await new.ledger.list_runs()}
    answer = runs[resumed.run_id]
    assert answer.last_error is not None and "long-running tool 'start_report'" in answer.last_error
    assert "'report:Q3:EMEA'" in answer.last_error
    assert "'report:{quarter}:{region}'" in answer.last_error
    assert runs[paused.run_id].status is RunStatus.PARKED  # its pause ends with it


def test_the_drift_of_a_log_lists_each_missing_name_once() -> None:
    known = Known(agents=frozenset({"flow", "review"}), tools=frozenset({"ship"}))
    assert node_names("flow@1/review@2") == ["flow", "review"]
    assert node_names("") == []
    assert drift([], "inv", known) == []

    def call(event_id: str, name: str, author: str = "review", path: str = "") -> Event:
        part = types.Part(function_call=types.FunctionCall(id=event_id, name=name))
        return Event(
            invocation_id="inv",
            author=author,
            content=types.Content(role="model", parts=[part]),
            node_info=NodeInfo(path=path),
        )

    answered = Event(
        invocation_id="inv",
        author="review",
        content=types.Content(
            role="user",
            parts=[types.Part(function_response=types.FunctionResponse(id="c3", name="gone"))],
        ),
    )
    log = [
        call("c1", "old_tool", author="gone", path="flow@1/old@1"),
        call("c2", "old_tool", path="flow@1/review@1"),
        call("c3", "gone"),  # answered: history, not drift
        answered,
        call("c4", "ship"),
        call("c5", "adk_request_input"),  # ADK's own
        call("c6", "other_tool"),
    ]
    log.append(log[0].model_copy(update={"invocation_id": "older"}))  # another invocation's
    assert drift(log, "inv", known) == [
        "agent 'gone'",
        "node 'old'",
        "tool 'old_tool'",
        "tool 'other_tool'",
    ]


async def test_the_steps_a_saga_recorded_are_checked_against_the_code(store: Store) -> None:
    """A saga step the invocation recorded that the new code has no stage for is drift."""
    ledger = SagaLedger(store)
    saga_id = "inv-1/checkout"
    await ledger.begin(
        saga_id=saga_id, name="checkout", app_name="shop", user_id="u", session_id="s",
        invocation_id="inv-1",
    )  # fmt: skip
    for step in ("charge", "reserve"):
        await ledger.step_pending(saga_id, step)
    rows = await store.fetch(
        "saga_steps_of_invocation", {"app_name": "shop", "invocation_id": "inv-1"}
    )
    recorded = [RecordedStep.from_row(r) for r in rows]
    assert [(r.saga, r.step) for r in recorded] == [("checkout", "charge"), ("checkout", "reserve")]

    def stage(name: str) -> SagaStage:
        return SagaStage(name=name, action=lambda state, key: {"id": key}, uncompensatable=True)

    renamed = SagaSequence("checkout", [stage("charge"), stage("hold_stock")])
    assert drift([], "inv-1", Known.of(renamed), recorded) == ["saga step 'checkout'/'reserve'"]
    same = SagaSequence("checkout", [stage("charge"), stage("reserve"), stage("ship")])
    assert drift([], "inv-1", Known.of(same), recorded) == []  # a stage added: no drift
    other = SagaSequence("order", [stage("charge"), stage("reserve")])
    assert drift([], "inv-1", Known.of(other), recorded) == ["saga 'checkout'"]


async def test_a_workflow_waking_in_a_node_the_new_code_renamed_is_parked(store: Store) -> None:
    """A 1.0 graph asleep in node 'sleep'; 1.1 calls it 'nap': its wake-up is never run there."""
    from google.adk.workflow import Workflow

    from durable_adk.adk.loops.background import Background
    from durable_adk.adk.loops.sleep import sleep_node
    from durable_adk.effect_tables.jobs import JobTable

    outputs: list[Any] = []

    def after(node_input: Any) -> dict[str, Any]:
        """Runs once the sleep is over."""
        outputs.append(node_input)
        return {"after": node_input["status"]}

    def flow(node: str) -> DurableRunner:
        graph = Workflow(name="flow", edges=[("START", sleep_node(seconds=600, name=node), after)])
        version, compatible = ("1.0", ()) if node == "sleep" else ("1.1", ("1.0",))
        return DurableRunner(
            app=graph,
            app_name="shop",
            store=store,
            worker_id=f"w-{version}",
            version=version,
            compatible_versions=compatible,
            background=False,
        )

    old = flow("sleep")
    async for _ in old.run(user_id="u", session_id="w", message="go"):
        pass
    jobs = JobTable(store)
    (timer,) = [j for j in await jobs.list_jobs() if j.timer]
    await jobs.backdate(timer.job_id, 601)
    new = flow("nap")
    report = await Background(new, one_off=True).once()
    assert [j.job_id for j in report.woken] == [timer.job_id]
    runs = await new.ledger.list_runs()
    # The wake-up's run is parked with a dead letter; the run paused on the sleep ends with it.
    parked = [r for r in runs if r.status is RunStatus.PARKED]
    assert len(parked) == 2 and not [r for r in runs if r.status is RunStatus.PAUSED]
    assert all(r.last_error is not None and "node 'sleep'" in r.last_error for r in parked)
    letters = [await new.ledger.dead_letters(run_id=r.run_id) for r in parked]
    assert sorted(len(found) for found in letters) == [0, 1]
    assert outputs == []  # the node after the sleep never ran
