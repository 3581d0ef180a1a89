"""The orphan classifier: real ADK event logs cut at every prefix, plus Hypothesis.

The real logs come from running agents through ``google.adk.runners.Runner``
with `ScriptedModel` and `InMemorySessionService`. Cutting a log after its
``n``-th event is what a crash right after that append leaves behind, so each
scenario lists the class expected at every prefix (N, M, T, P, D below).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from google.adk.agents import BaseAgent, LlmAgent, SequentialAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.events import Event, EventActions
from google.adk.events._abort_events import _build_abort_events
from google.adk.events._rewind_events import _apply_rewinds
from google.adk.models import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.adk.workflow import Workflow
from google.genai import types
from hypothesis import given, settings
from hypothesis import strategies as st

from durable_adk.adk.eventlog.classify import (
    ABORT_ERROR_CODE,
    Classification,
    OrphanClass,
    classify,
    live_events,
    recover_invocation_id,
    replay_blockers,
)
from durable_adk.adk.eventlog.events import LogIndex
from durable_adk.testing.scripted_model import Call, Fail, Say, ScriptedModel

N = OrphanClass.NOT_STARTED
M = OrphanClass.MODEL_INFLIGHT
T = OrphanClass.TOOL_UNANSWERED
P = OrphanClass.PAUSED
D = OrphanClass.ACTUALLY_DONE


# ---------------------------------------------------------------- real ADK runs


class Crash(BaseException):
    """Simulated process death: ADK stores nothing for a BaseException."""


CRASH = {"on": False}


def charge(amount: int) -> dict[str, bool]:
    """Charges money."""
    if CRASH["on"]:
        raise Crash
    return {"ok": True}


def boom(amount: int) -> dict[str, bool]:
    """Fails."""
    raise RuntimeError("tool broke")


def approve(amount: int) -> dict[str, str]:
    """Asks a human; returns an interim status."""
    return {"status": "pending"}


def approve_quietly(amount: int) -> None:
    """Asks a human; returns nothing."""
    return None


class SafetyModel(BaseLlm):
    """Answers every request with an error response (no content)."""

    model: str = "safety"

    async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
        yield LlmResponse(error_code="SAFETY", error_message="blocked")


def msg(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


def confirm(events: list[Event]) -> types.Content:
    """The user's approval of the pending tool confirmation."""
    request = next(e for e in events if e.long_running_tool_ids)
    call_id = next(iter(request.long_running_tool_ids or ()))
    response = types.FunctionResponse(
        id=call_id, name="adk_request_confirmation", response={"confirmed": True}
    )
    return types.Content(role="user", parts=[types.Part(function_response=response)])


def answer(call_id: str, name: str) -> types.Content:
    response = types.FunctionResponse(id=call_id, name=name, response={"approved": True})
    return types.Content(role="user", parts=[types.Part(function_response=response)])


async def _drive(
    root: BaseAgent | Workflow,
    resumable: bool,
    turns: Sequence[types.Content | str | Callable[[list[Event]], types.Content]],
    redrive: bool = False,
) -> list[Event]:
    """Runs ``turns`` (a str ``"rewind:<k>"`` rewinds before the k-th invocation)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = ResumabilityConfig(is_resumable=resumable)
    app = App(name="app", root_agent=root, resumability_config=config)
    sessions = InMemorySessionService()
    await sessions.create_session(app_name="app", user_id="u", session_id="s")

    async def events() -> list[Event]:
        session = await sessions.get_session(app_name="app", user_id="u", session_id="s")
        assert session is not None
        return session.events

    for turn in turns:
        runner = Runner(app=app, session_service=sessions)
        if isinstance(turn, str):
            invocations = list(dict.fromkeys(e.invocation_id for e in await events()))
            before = invocations[int(turn.split(":")[1])]
            await runner.rewind_async(
                user_id="u", session_id="s", rewind_before_invocation_id=before
            )
            continue
        if callable(turn):
            turn = turn(await events())
        try:
            async for _ in runner.run_async(user_id="u", session_id="s", new_message=turn):
                pass
        except (Crash, RuntimeError):
            if not redrive:
                continue
            CRASH["on"] = False
            inv = (await events())[0].invocation_id
            async for _ in Runner(app=app, session_service=sessions).run_async(
                user_id="u", session_id="s", invocation_id=inv, new_message=turn
            ):
                pass
    return list(await events())


def llm(script: Any, name: str = "payer", **kw: Any) -> LlmAgent:
    return LlmAgent(name=name, model=ScriptedModel(script), **kw)


def pipeline(workflow: bool) -> BaseAgent | Workflow:
    model = ScriptedModel({"a": [Say("A")], "b": [Say("B")]})
    a, b = LlmAgent(name="a", model=model), LlmAgent(name="b", model=model)
    if workflow:
        return Workflow(name="pipe", edges=[("START", a, b)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return SequentialAgent(name="pipe", sub_agents=[a, b])


@functools.cache
def scenario(name: str, resumable: bool) -> tuple[Event, ...]:
    """Builds and runs a named scenario once per test session."""
    tool_script = [Call("charge", {"amount": 5}, id="c1"), Say("charged")]
    roots: dict[str, tuple[Any, list[Any], bool]] = {
        "tool": (llm(tool_script, tools=[charge]), [msg("pay")], False),
        "sequential": (pipeline(workflow=False), [msg("go")], False),
        "workflow": (pipeline(workflow=True), [msg("go")], False),
        "lr_interim": (
            llm(
                [Call("approve", {"amount": 5}, id="lr1"), Say("waiting"), Say("approved")],
                tools=[LongRunningFunctionTool(approve)],
            ),
            [msg("pay"), answer("lr1", "approve")],
            False,
        ),
        "lr_none": (
            llm(
                [Call("approve_quietly", {"amount": 5}, id="lr1"), Say("approved")],
                tools=[LongRunningFunctionTool(approve_quietly)],
            ),
            [msg("pay"), answer("lr1", "approve_quietly")],
            False,
        ),
        "transfer": (
            LlmAgent(
                name="root",
                model=ScriptedModel(
                    {"root": [Call("transfer_to_agent", {"agent_name": "helper"})]}
                ),
                sub_agents=[llm({"helper": [Say("helped"), Say("again")]}, name="helper")],
            ),
            [msg("hi"), msg("more")],
            False,
        ),
        "crash_redrive": (
            llm([Call("charge", {"amount": 5}), Say("charged")], tools=[charge]),
            [msg("pay")],
            True,
        ),
        "model_fails": (llm([Fail(RuntimeError("model down"))]), [msg("pay")], False),
        "tool_raises": (
            llm([Call("boom", {"amount": 1}, id="c1")], tools=[boom]),
            [msg("pay")],
            False,
        ),
        "safety": (LlmAgent(name="payer", model=SafetyModel()), [msg("pay")], False),
        "confirm": (
            llm(tool_script, tools=[FunctionTool(charge, require_confirmation=True)]),
            [msg("pay"), confirm],
            False,
        ),
        "rewind": (
            llm([*tool_script, Say("second"), Say("third")], tools=[charge]),
            [msg("pay"), msg("again"), "rewind:1", msg("after")],
            False,
        ),
    }
    root, turns, redrive = roots[name]
    CRASH["on"] = redrive
    return tuple(asyncio.run(_drive(root, resumable, turns, redrive)))


def invocation(events: Sequence[Event], k: int = 0) -> tuple[str, list[Event]]:
    """The k-th invocation's id and events (rewind events excluded)."""
    ids = list(
        dict.fromkeys(e.invocation_id for e in events if e.content or e.actions.end_of_agent)
    )
    inv = ids[k]
    return inv, [e for e in events if e.invocation_id == inv]


def prefix_classes(events: Sequence[Event], inv: str, **kw: Any) -> list[OrphanClass]:
    kw.setdefault("root_agent_name", "payer")
    return [classify(events[:n], inv, **kw).cls for n in range(len(events) + 1)]


PIPE = {"root_agent_name": "pipe"}
PIPE_B = {**PIPE, "terminal_agent_name": "b"}
CASES = [
    # user, FC, FR, text, [end_of_agent]
    ("tool", True, {}, [N, M, T, M, D, D]),
    ("tool", False, {}, [N, M, T, M, D]),
    # user, state(a), a text, a end, state(b), b text, b end, pipe end
    ("sequential", True, PIPE_B, [N, M, M, M, M, M, D, D, D]),
    ("sequential", True, PIPE, [N, M, M, M, M, M, M, M, D]),
    ("sequential", False, PIPE_B, [N, M, M, D]),
    ("sequential", False, PIPE, [N, M, M, M]),
    ("workflow", True, PIPE_B, [N, M, M, M, M, M, M, D, D, D, D]),
    ("workflow", False, PIPE_B, [N, M, M, D]),
    # user, FC(lr), interim FR, "waiting", user FR, text, [end_of_agent]
    ("lr_interim", True, {}, [N, M, P, P, P, M, D, D]),
    ("lr_interim", False, {}, [N, M, P, P, P, M, D]),
    # user, FC(lr), user FR, text, [end_of_agent]
    ("lr_none", True, {}, [N, M, P, M, D, D]),
    ("lr_none", False, {}, [N, M, P, M, D]),
    # user, FC transfer, FR(transfer=helper), [root end], helper text, [helper end]
    ("transfer", True, {"root_agent_name": "root"}, [N, M, T, M, M, D, D]),
    ("transfer", False, {"root_agent_name": "root"}, [N, M, T, M, D]),
    # resumable: the call is replayed with its id: user, FC, FR, text, end
    ("crash_redrive", True, {}, [N, M, T, M, D, D]),
    # not resumable: the model is asked again: user, FC (abandoned), FC, FR, text;
    # the first call is never answered, so the invocation is never done
    ("crash_redrive", False, {}, [N, M, T, T, T, T]),
    # user, FC c1, FC confirmation(lr), FR c1 "needs confirmation", user's
    # approval (reopens c1), FR c1, text, [end_of_agent]
    ("confirm", True, {}, [N, M, T, P, P, T, M, D, D]),
    ("confirm", False, {}, [N, M, T, P, P, T, M, D]),
    ("model_fails", True, {}, [N, M, M]),
    ("tool_raises", True, {}, [N, M, T, T]),
    # an error response ends the agent normally (resumable: end marker follows)
    ("safety", True, {}, [N, M, M, D]),
    ("safety", False, {}, [N, M, M]),
]


@pytest.mark.parametrize(("name", "resumable", "kw", "expected"), CASES)
def test_crash_at_every_prefix_of_a_real_run(
    name: str, resumable: bool, kw: dict[str, Any], expected: list[OrphanClass]
) -> None:
    inv, events = invocation(scenario(name, resumable))
    assert prefix_classes(events, inv, **kw) == expected


def test_sub_agent_final_text_is_not_done() -> None:
    inv, events = invocation(scenario("sequential", False))
    assert [e.author for e in events] == ["user", "a", "b"]
    assert events[1].is_final_response()
    verdict = classify(events[:2], inv, root_agent_name="pipe", terminal_agent_name="b")
    assert verdict.cls is M and "not the terminal agent b" in verdict.reason


def test_transferred_chat_later_turn_needs_the_owning_agent() -> None:
    inv, events = invocation(scenario("transfer", True), 1)
    assert [e.author for e in events] == ["user", "helper", "helper"]
    got = prefix_classes(events, inv, root_agent_name="root", terminal_agent_name="helper")
    assert got == [N, M, D, D]


def test_long_running_call_reports_its_id() -> None:
    inv, events = invocation(scenario("lr_interim", True))
    verdict = classify(events[:4], inv, root_agent_name="payer")
    assert verdict.pending_long_running == ("lr1",) and verdict.unanswered_calls == ()
    assert verdict.last_event_id == events[3].id and verdict.invocation_id == inv


def test_unanswered_call_reports_id_and_name() -> None:
    inv, events = invocation(scenario("tool", True))
    verdict = classify(events[:2], inv, root_agent_name="payer")
    assert verdict.unanswered_calls == (("c1", "charge"),)


def test_abort_seals_mean_done() -> None:
    inv, events = invocation(scenario("tool", True))
    lr_inv, lr_events = invocation(scenario("lr_none", True))
    for evs, i, cut in ((events, inv, 2), (events, inv, 1), (lr_events, lr_inv, 2)):
        head = list(evs[:cut])
        seals = _build_abort_events(head, invocation_id=i, root_agent_name="payer", branch=None)
        assert all(s.error_code == ABORT_ERROR_CODE for s in seals)
        assert classify(head + seals, i, root_agent_name="payer").cls is D


def test_rewinds_follow_adk() -> None:
    events = scenario("rewind", True)
    assert any(e.actions.rewind_before_invocation_id for e in events)
    assert [e.id for e in live_events(events)] == [e.id for e in _apply_rewinds(list(events))]
    first, second, third = (invocation(events, k)[0] for k in range(3))
    assert classify(events, first, root_agent_name="payer").cls is D
    rewound = classify(events, second, root_agent_name="payer")
    assert rewound.cls is N and "rewound" in rewound.reason
    assert classify(events, third, root_agent_name="payer").cls is D
    # A crash while the second invocation awaited the model, then a rewind of it.
    cut = next(i for i, e in enumerate(events) if e.invocation_id == second) + 1
    rewind = next(e for e in events if e.actions.rewind_before_invocation_id)
    assert classify(events[:cut], second, root_agent_name="payer").cls is M
    assert classify([*events[:cut], rewind], second, root_agent_name="payer").cls is N


def test_legacy_input_request_without_long_running_ids_pauses() -> None:
    ask = mk("inv", "payer", calls=[("r1", "adk_request_input")])
    events = [mk("inv", "user", text="hi"), ask]
    assert verdict(events).cls is P and verdict(events).pending_long_running == ("r1",)
    reply = mk("inv", "user", responses=[("r1", "adk_request_input")])
    assert verdict([*events, reply]).cls is M


def test_no_invocation_id_or_no_events_is_not_started() -> None:
    inv, events = invocation(scenario("tool", True))
    assert classify(events, None, root_agent_name="payer").cls is N
    assert classify([], inv, root_agent_name="payer").cls is N
    assert classify(events, "other", root_agent_name="payer").cls is N


def test_recover_invocation_id_from_the_stored_user_event() -> None:
    events = list(scenario("transfer", True))
    first, second = invocation(events, 0)[0], invocation(events, 1)[0]
    start = events[0].timestamp
    assert recover_invocation_id(events, started_at=start) == first
    assert recover_invocation_id(events, started_at=start + 3) == first  # within the skew
    assert recover_invocation_id(events, started_at=start, request_text=" more ") == second
    assert recover_invocation_id(events, started_at=start, request_text="unknown") == first
    assert recover_invocation_id(events, started_at=time.time() + 60) is None
    # The answer to a long-running call is stored under the older invocation.
    lr = list(scenario("lr_none", True))
    answer_at = next(e for e in lr if e.author == "user" and e.get_function_responses()).timestamp
    assert recover_invocation_id(lr, started_at=answer_at, skew=0) is None


def test_a_call_followed_by_its_error_event_stays_unanswered_after_an_adk_redrive() -> None:
    """ADK 2.13 does not replay a call followed by its error event: it pauses and writes
    the agent's end marker, with no answer. The classifier must not call that done."""
    acts: list[int] = []

    def flaky(amount: int) -> dict[str, bool]:
        """Charges money; the first attempt meets a store fault."""
        acts.append(amount)
        if len(acts) == 1:
            raise RuntimeError("store unavailable")
        return {"ok": True}

    agent = llm([Call("flaky", {"amount": 5}, id="c1"), Say("charged")], tools=[flaky])
    events = asyncio.run(_drive(agent, True, [msg("pay")], redrive=True))
    inv, mine = invocation(events)
    shape = [(e.author, bool(e.content), e.error_code, e.actions.end_of_agent) for e in mine]
    assert shape == [
        ("user", True, None, None),
        ("payer", True, None, None),  # the call
        ("payer", False, "RuntimeError", None),  # the tool's error event, no response
        ("payer", False, None, True),  # the re-drive: end marker, the call was skipped
    ]
    assert acts == [5]  # ADK did not run the tool again
    assert prefix_classes(mine, inv) == [N, M, T, T, T]
    verdict = classify(mine, inv, root_agent_name="payer")
    assert verdict.unanswered_calls == (("c1", "flaky"),) and verdict.abandoned_calls == ()
    # What keeps ADK from replaying the call: the error event and the end marker.
    assert replay_blockers(events, verdict) == {mine[2].id, mine[3].id}


# ---------------------------------------------------------------- Hypothesis

AGENTS = ("payer", "a", "b")
FAST = settings(max_examples=60, deadline=None)  # keeps the file under a few seconds


def mk(
    inv: str,
    author: str,
    *,
    text: str | None = None,
    calls: Sequence[tuple[str, str]] = (),
    responses: Sequence[tuple[str, str]] = (),
    long_running: Sequence[str] = (),
    state: dict[str, Any] | None = None,
    end: bool = False,
    error: str | None = None,
    rewind: str | None = None,
) -> Event:
    """An event in the shape ADK stores."""
    parts = [types.Part(text=text)] if text else []
    parts += [types.Part(function_call=types.FunctionCall(id=i, name=n)) for i, n in calls]
    parts += [
        types.Part(function_response=types.FunctionResponse(id=i, name=n, response={}))
        for i, n in responses
    ]
    role = "user" if author == "user" or responses else "model"
    return Event(
        invocation_id=inv,
        author=author,
        content=types.Content(role=role, parts=parts) if parts else None,
        long_running_tool_ids=set(long_running) or None,
        error_code=error,
        actions=EventActions(
            agent_state=state, end_of_agent=end or None, rewind_before_invocation_id=rewind
        ),
    )


@st.composite
def invocation_logs(draw: st.DrawFn, inv: str = "inv") -> list[Event]:
    """Random sequences of user text, model text, calls, responses, checkpoints, errors."""
    events = [mk(inv, "user", text="hello")] if draw(st.integers(0, 9)) else []
    calls: list[tuple[str, str, str, bool]] = []
    for _ in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(["text", "call", "answer", "answer", "check", "error", "user"]))
        author = draw(st.sampled_from(AGENTS))
        if kind == "text":
            events.append(mk(inv, author, text="t"))
        elif kind == "call":
            new = [
                (f"{inv}-c{len(calls) + k}", f"tool{k}", author, draw(st.booleans()))
                for k in range(draw(st.integers(1, 2)))
            ]
            calls += new
            lr_ids = [c[0] for c in new if c[3]]
            events.append(mk(inv, author, calls=[c[:2] for c in new], long_running=lr_ids))
        elif kind == "answer" and calls:
            call_id, name, caller, lr = draw(st.sampled_from(calls))
            responder = "user" if lr and draw(st.booleans()) else caller
            events.append(mk(inv, responder, responses=[(call_id, name)]))
        elif kind == "check":
            end = draw(st.booleans())
            events.append(mk(inv, author, end=end, state=None if end else {"step": 1}))
        elif kind == "error":
            events.append(mk(inv, author, error=draw(st.sampled_from(["Boom", ABORT_ERROR_CODE]))))
        elif kind == "user":
            events.append(mk(inv, "user", text="more"))
    return events


def oracle(events: Sequence[Event], inv: str) -> tuple[bool, list[str], list[str], list[str]]:
    """(user message stored, unanswered non-long-running calls, open long-running calls,
    the unanswered calls whose author made a later model turn)."""
    mine = [e for e in _apply_rewinds(list(events)) if e.invocation_id == inv]
    lr = {i for e in mine for i in e.long_running_tool_ids or ()}
    answered = {r.id for e in mine for r in e.get_function_responses()}
    by_user = {
        r.id
        for e in mine
        if e.author == "user" or e.error_code == ABORT_ERROR_CODE
        for r in e.get_function_responses()
    }
    unanswered, pending, abandoned = [], [], []
    for i, e in enumerate(mine):
        for c in e.get_function_calls():
            assert c.id is not None
            if c.id in lr:
                pending += [] if c.id in by_user else [c.id]
            elif c.id not in answered:
                unanswered.append(c.id)
                if any(
                    later.author == e.author
                    and later.content
                    and not later.get_function_responses()
                    for later in mine[i + 1 :]
                ):
                    abandoned.append(c.id)
    user = any(e.author == "user" and e.content for e in mine)
    return user, unanswered, pending, abandoned


def verdict(events: Sequence[Event], inv: str = "inv") -> Classification:
    return classify(events, inv, root_agent_name="payer")


def sans_last(c: Classification) -> Classification:
    return dataclasses.replace(c, last_event_id=None)


def merge(a: list[Event], b: list[Event], picks: list[bool]) -> list[Event]:
    a, b, out = list(a), list(b), []
    for pick in picks:
        source = a if (pick and a) or not b else b
        if source:
            out.append(source.pop(0))
    return out + a + b


@FAST
@given(invocation_logs())
def test_class_matches_the_calls_in_the_log(events: list[Event]) -> None:
    before = [e.model_dump() for e in events]
    got = verdict(events)
    assert [e.model_dump() for e in events] == before
    user, unanswered, pending, abandoned = oracle(events, "inv")
    if not user:
        assert got.cls is N
        return
    assert [c for c, _ in got.unanswered_calls] == unanswered
    assert list(got.abandoned_calls) == abandoned
    assert list(got.pending_long_running) == pending
    if unanswered:
        assert got.cls is T
    elif pending:
        assert got.cls is P
    else:
        assert got.cls in (M, D)


@FAST
@given(invocation_logs())
def test_root_end_marker_means_done(events: list[Event]) -> None:
    user, unanswered, pending, _ = oracle(events, "inv")
    marked = [*events, mk("inv", "payer", end=True)]
    if user and not unanswered and not pending:
        assert verdict(marked).cls is D
    else:
        assert verdict(marked).cls is verdict(events).cls


@FAST
@given(invocation_logs())
def test_trailing_text_decides_by_author(events: list[Event]) -> None:
    user, _, pending, _ = oracle(events, "inv")
    by_sub_agent = verdict([*events, mk("inv", "a", text="sub")])
    assert by_sub_agent.cls is not D
    by_root = [*events, mk("inv", "payer", text="final")]
    _, unanswered, _, _ = oracle(by_root, "inv")
    if user and not unanswered and not pending:
        assert verdict(by_root).cls is D


@FAST
@given(invocation_logs(), invocation_logs("other"), st.lists(st.booleans(), max_size=30))
def test_other_invocations_never_change_the_result(
    events: list[Event], others: list[Event], picks: list[bool]
) -> None:
    assert verdict(merge(events, others, picks)) == verdict(events)


@FAST
@given(
    invocation_logs(),
    st.lists(
        st.tuples(
            st.integers(0, 20), st.sampled_from(["state", "sub_end", "root_end"]), st.booleans()
        )
    ),
)
def test_checkpoints_do_not_change_the_result(
    events: list[Event], inserts: list[tuple[int, str, bool]]
) -> None:
    meaningful = [i for i, e in enumerate(events) if e.content or e.error_code]
    padded = list(events)
    for pos, kind, root in sorted(inserts, reverse=True):
        if kind == "state":
            padded.insert(min(pos, len(padded)), mk("inv", "payer" if root else "a", state={}))
        elif kind == "sub_end":
            padded.insert(min(pos, len(padded)), mk("inv", "a", end=True))
        elif meaningful:  # a root marker before the last meaningful event
            padded.insert(min(pos, meaningful[-1]), mk("inv", "payer", end=True))
    assert sans_last(verdict(padded)) == sans_last(verdict(events))


def logged_with_rewinds(order: list[str], data: st.DataObject, rewinds: list[Any]) -> list[Event]:
    """A log of the invocations in ``order`` (each drawn whole, ids unique), with
    a rewind event inserted at each ``(place, target)`` of ``rewinds``."""
    events: list[Event] = []
    for k, inv in enumerate(order):
        part = data.draw(invocation_logs(inv))
        events += [e.model_copy(update={"id": f"{inv}{k}-{i}"}) for i, e in enumerate(part)]
    for n, (pos, target) in enumerate(sorted(rewinds, reverse=True)):
        events.insert(min(pos, len(events)), mk(f"rw{n}", "user", rewind=target))
    return events


@FAST
@given(
    st.lists(st.sampled_from(["inv", "x", "y"]), min_size=1, max_size=4),
    st.data(),
    st.lists(st.tuples(st.integers(0, 40), st.sampled_from(["inv", "x", "y", "gone"]))),
)
def test_rewinds_match_adk(order: list[str], data: st.DataObject, rewinds: list[Any]) -> None:
    events = logged_with_rewinds(order, data, rewinds)
    assert [e.id for e in live_events(events)] == [e.id for e in _apply_rewinds(events)]
    for inv in ("inv", "x"):
        got = classify(events, inv, root_agent_name="payer")
        want = classify(_apply_rewinds(events), inv, root_agent_name="payer")
        assert dataclasses.replace(got, reason="") == dataclasses.replace(want, reason="")


FINISHERS = {
    "root_end": lambda: mk("inv", "payer", end=True),
    "root_text": lambda: mk("inv", "payer", text="all done"),
    "abort_seal": lambda: mk("inv", "payer", error=ABORT_ERROR_CODE),
    "error": lambda: mk("inv", "payer", error="StoreUnavailable"),
    "sub_end": lambda: mk("inv", "a", end=True),
}


@FAST
@given(invocation_logs(), st.lists(st.sampled_from(sorted(FINISHERS)), max_size=3))
def test_never_done_while_a_call_is_unanswered(events: list[Event], tail: list[str]) -> None:
    logged = [*events, *(FINISHERS[name]() for name in tail)]
    user, unanswered, _, _ = oracle(logged, "inv")
    got = verdict(logged)
    if user and unanswered:
        assert got.cls is T and got.cls is not D
        assert {c for c, _ in got.unanswered_calls} == set(unanswered)
    if got.cls is D:
        assert not got.unanswered_calls and not unanswered


def test_replay_blockers_are_only_the_callers_own_content_less_events() -> None:
    user = mk("inv", "user", text="hi")
    call = mk("inv", "payer", calls=[("c1", "tool0")])
    err = mk("inv", "payer", error="StoreUnavailable")
    end = mk("inv", "payer", end=True)
    seal = mk("inv", "payer", error=ABORT_ERROR_CODE)
    other = mk("inv", "a", error="Boom")
    state = mk("inv", "payer", state={"step": 1})
    events = [user, call, err, other, state, end]
    assert replay_blockers(events, verdict(events)) == {err.id, end.id}
    # An abort seal is the client's decision: never hidden (and then nothing is replayed).
    assert seal.id not in replay_blockers([*events, seal], verdict([*events, seal]))
    # Another branch's events are not the caller's.
    branched = err.model_copy(update={"id": "e-branch", "branch": "payer.sub"})
    assert replay_blockers([user, call, branched], verdict([user, call, branched])) == set()
    # An answered call, or one the agent moved past, has nothing to replay.
    answered = [user, call, mk("inv", "payer", responses=[("c1", "tool0")]), err]
    assert replay_blockers(answered, verdict(answered)) == set()
    moved_on = [user, call, err, mk("inv", "payer", text="done anyway")]
    assert verdict(moved_on).abandoned_calls == ("c1",)
    assert replay_blockers(moved_on, verdict(moved_on)) == set()


# ------------------------------------- interrupts by count; the turn's owner


def _review_loop() -> Workflow:
    from google.adk.events.request_input import RequestInput
    from google.adk.workflow import FunctionNode

    def ask(ctx: Any) -> Any:
        got = ctx.resume_inputs.get("review")
        return got if got is not None else RequestInput(interrupt_id="review", message="ok?")

    def decide(node_input: Any) -> Event:
        answer = node_input.get("answer") if isinstance(node_input, dict) else node_input
        return Event(output=answer, route="again" if answer != "yes" else "done")

    def finish(node_input: Any) -> str:
        return f"approved: {node_input}"

    asking = FunctionNode(func=ask, name="ask", rerun_on_resume=True)
    deciding = FunctionNode(func=decide, name="decide")
    return Workflow(
        name="loop",
        edges=[
            ("START", asking, deciding),
            (deciding, {"again": asking, "done": FunctionNode(func=finish, name="finish")}),
        ],
    )


def review(answer: str) -> types.Content:
    response = types.FunctionResponse(
        id="review", name="adk_request_input", response={"answer": answer}
    )
    return types.Content(role="user", parts=[types.Part(function_response=response)])


def test_a_reused_interrupt_id_is_paused_at_each_ask_and_done_after_the_last_answer() -> None:
    events = asyncio.run(_drive(_review_loop(), True, [msg("go"), review("no"), review("yes")]))
    inv = events[0].invocation_id
    asks = [i for i, e in enumerate(events) if e.get_function_calls()]
    answers = [i for i, e in enumerate(events) if e.author == "user" and e.get_function_responses()]
    assert len(asks) == 2 and len(answers) == 2  # one id, asked twice, answered twice
    for cut in range(1, len(events) + 1):
        found = classify(events[:cut], inv, root_agent_name="loop")
        if asks[0] < cut <= answers[0] or asks[1] < cut <= answers[1]:
            # Asked and not (yet) answered this time: PAUSED, even the second time.
            assert found.cls is P and found.pending_long_running == ("review",), cut
        else:
            assert found.cls is not P, cut
    assert classify(events, inv, root_agent_name="loop").cls is D


def test_a_repeated_answer_to_a_confirmation_does_not_reopen_the_tool() -> None:
    script = [Call("charge", {"amount": 5}, id="c1"), Say("charged")]
    root = llm(script, tools=[FunctionTool(charge, require_confirmation=True)])
    events = asyncio.run(_drive(root, True, [msg("pay"), confirm]))
    inv = events[0].invocation_id
    assert classify(events, inv, root_agent_name="payer").cls is D
    repeat = confirm(events)
    again = Event(invocation_id=inv, author="user", content=repeat)
    found = classify([*events, again], inv, root_agent_name="payer")
    # The repeat answers nothing open: the tool is not waiting for a run again.
    assert found.cls is not T and found.unanswered_calls == ()


def test_the_done_test_follows_the_agent_that_owns_a_later_turn() -> None:
    model = ScriptedModel(
        {
            "triage": [Call("transfer_to_agent", {"agent_name": "billing"})],
            "billing": [Say("Refunded."), Say("You are welcome.")],
        }
    )
    specialist = LlmAgent(name="billing", model=model, description="billing")
    root = LlmAgent(name="triage", model=model, sub_agents=[specialist])
    events = asyncio.run(_drive(root, True, [msg("refund"), msg("thanks")]))
    second = events[-1].invocation_id
    start = next(i for i, e in enumerate(events) if e.invocation_id == second)
    text = next(i for i in range(start, len(events)) if events[i].content)
    text = next(i for i in range(text + 1, len(events)) if events[i].content)  # billing's
    for cut in range(start + 1, len(events) + 1):
        found = classify(events[:cut], second, root_agent_name="triage", owner_speaks_first=True)
        assert found.cls is (D if cut > text else M), cut
    # Without following the owner, the specialist's answer looks unfinished (re-asked).
    legacy = classify(events, second, root_agent_name="triage")
    assert legacy.cls is M


@FAST
@given(
    st.lists(st.sampled_from(["inv", "x", "y"]), min_size=1, max_size=5),
    st.data(),
    st.lists(st.tuples(st.integers(0, 40), st.sampled_from(["inv", "x", "y", "gone"]))),
    st.integers(0, 60),
)
def test_the_invocations_tail_classifies_as_the_whole_log(
    order: list[str], data: st.DataObject, rewinds: list[Any], indexed: int
) -> None:
    # An invocation may come back later in the log (an answer continues it),
    # rewinds may name one that started before it, or before the tail; the
    # log is indexed up to ``indexed`` events, the rest comes as ``later``.
    events = logged_with_rewinds(order, data, rewinds)
    cut = min(indexed, len(events))
    index = LogIndex().catch_up(events[:cut])
    assert index.size == cut and index.ids == {e.id for e in events[:cut]}
    for inv in ("inv", "x", "y", "gone"):
        start = index.tail_start(inv, events[cut:])
        tail = events[start:]
        assert all(e.invocation_id != inv for e in events[:start])
        assert [e.id for e in live_events(tail) if e.invocation_id == inv] == [
            e.id for e in live_events(events) if e.invocation_id == inv
        ]
        assert classify(tail, inv, root_agent_name="payer") == classify(
            events, inv, root_agent_name="payer"
        )
