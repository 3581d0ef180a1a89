"""Crash matrices for the ADK app shapes of issue 11, real kills, both backends.

Each case drives a shape of ``tests/crash/shapes_app.py`` in a child process
that dies with ``os._exit(137)`` at a named crash point, lets a fresh child
(``worker-B``) recover it, and then asserts on the outside world (the acts the
fake billing service received, and from which worker), on the stored answers
(one answer per user message, each pause answered once) and on the end state
on the ledger (DONE, PAUSED, PARKED with a dead letter).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from children import run_module
from durable_adk.adk.services.sessions import DurableSessionService
from durable_adk.store import open_store
from durable_adk.tables.interrupts import InterruptTable
from durable_adk.tables.ledger import RunLedger, RunStatus
from durable_adk.testing import arm
from durable_adk.testing.services import FakeService

ROOT = Path(__file__).resolve().parents[2]
MODULE = "tests.crash.shapes_app"
APP, USER = "shapes", "u"

DONE, PAUSED, PARKED = RunStatus.DONE, RunStatus.PAUSED, RunStatus.PARKED


@pytest.fixture
def billing(tmp_path: Path) -> Iterator[FakeService]:
    with FakeService("billing", tmp_path / "billing.db") as service:
        yield service


@pytest.fixture
async def url(store_url: str) -> str:
    async with open_store(store_url):
        pass  # schema first, so child processes never race to create it
    return store_url


class Shape:
    """One shape's processes, against one database and one billing service."""

    def __init__(self, name: str, url: str, billing: FakeService, commits: str = "barrier") -> None:
        self.name, self.url, self.billing = name, url, billing
        self.commits = commits
        self.last_report: list[dict[str, Any]] = []

    def _child(
        self, action: str, *args: str, crash_at: str | None = None, after: int = 0
    ) -> subprocess.CompletedProcess[str]:
        base = {**os.environ, "SHAPES_COMMITS": self.commits}
        env = arm(base, crash_at, after=after) if crash_at else base
        argv = [self.name, action, "--db", self.url, "--billing", self.billing.url, *args]
        done = run_module(MODULE, argv, env=env, cwd=ROOT)
        if crash_at:
            assert done.returncode == 137, done.stderr
        else:
            assert done.returncode == 0, done.stderr
        return done

    def run(self, text: str = "go", **crash: Any) -> str | None:
        done = self._child("run", "--text", text, **crash)
        return None if crash else json.loads(done.stdout.strip().splitlines()[-1])["error"]

    def answer(self, payload: dict[str, Any], **crash: Any) -> str | None:
        done = self._child("answer", "--payload", json.dumps(payload), **crash)
        return None if crash else json.loads(done.stdout.strip().splitlines()[-1])["error"]

    def recover(self) -> list[tuple[str, str, str]]:
        done = self._child("recover")
        report = json.loads(done.stdout.strip().splitlines()[-1])
        self.last_report = report  # with each run's last error, for a failing assert
        return [(r["found"], r["action"], r["status"]) for r in report]

    def acts(self) -> list[tuple[str | None, str | None]]:
        """(worker, idempotency key) of every create the billing service received."""
        return [
            (r.caller.get("worker"), r.key) for r in self.billing.requests("invoices") if r.mutating
        ]

    async def inbox(self) -> list[tuple[str, str, str]]:
        """(kind, name, status) of every interrupt indexed, oldest first."""
        async with open_store(self.url) as store:
            found = await InterruptTable(store).list_interrupts(status=None)
        return [(i.kind.value, i.name, i.status.value) for i in found]

    async def facts(self) -> dict[str, Any]:
        async with open_store(self.url) as store:
            session = await DurableSessionService(store).get_session(
                app_name=APP, user_id=USER, session_id="s1"
            )
            runs = list(reversed(await RunLedger(store).list_runs()))
            letters = await RunLedger(store).dead_letters()
        assert session is not None
        texts = [
            "".join(p.text or "" for p in e.content.parts)
            for e in session.events
            if e.author != "user" and e.content and e.content.parts and e.content.parts[0].text
        ]
        answers = [
            r.id for e in session.events if e.author == "user" for r in e.get_function_responses()
        ]
        outputs = [e.output for e in session.events if e.output is not None]
        return {
            "status": [r.status for r in runs],
            "texts": texts,
            "answers": answers,
            "outputs": outputs,
            "letters": letters,
        }


def shape(name: str, url: str, billing: FakeService, commits: str = "barrier") -> Shape:
    return Shape(name, url, billing, commits)


# What a kill before the drive's finish finds, by commit mode. Barrier commits
# write the last events in the finish's own unit: the kill loses them (the
# model or node is asked again; no act is repeated). One unit per event leaves
# them stored and the row unfinished: marked done without asking again.
BEFORE_FINISH = [
    pytest.param("barrier", ("MODEL_INFLIGHT", "redrive", "DONE"), id="barrier"),
    pytest.param("per_event", ("ACTUALLY_DONE", "mark_done", "DONE"), id="per_event"),
]


# ------------------------------------------------- RequestInput loop, reused id


async def test_a_reused_interrupt_id_pauses_and_resumes_each_time(
    url: str, billing: FakeService
) -> None:
    app = shape("input_loop", url, billing)
    assert app.run() is None
    assert (await app.facts())["status"] == [PAUSED]
    assert app.answer({"answer": "no"}) is None  # the loop asks again, same id
    assert (await app.facts())["status"] == [PAUSED, PAUSED]
    assert app.answer({"answer": "yes"}) is None
    seen = await app.facts()
    assert seen["status"] == [DONE, DONE, DONE]
    assert seen["answers"] == ["review", "review"]  # each pause answered once
    assert "approved: yes" in seen["outputs"]
    # A third answer: the pause it would answer was answered; refused, nothing written.
    refused = app.answer({"answer": "yes"})
    assert refused is not None and "Conflict" in refused and "already answered" in refused
    again = await app.facts()
    assert again["status"] == seen["status"] and again["answers"] == seen["answers"]


@pytest.mark.parametrize(
    ("point", "found"),
    [
        # The answer's run is on the ledger, nothing of it stored: re-driven with it.
        ("runner.before_first_event", "PAUSED"),
        # The answer was stored and the loop asked again (same id): paused, not re-sent.
        ("runner.before_finish", "PAUSED"),
    ],
)
async def test_a_kill_around_an_answer_to_a_reused_id_ends_paused_then_done(
    url: str, billing: FakeService, point: str, found: str
) -> None:
    app = shape("input_loop", url, billing)
    assert app.run() is None
    app.answer({"answer": "no"}, crash_at=point)
    assert [(f, s) for f, _, s in app.recover()] == [(found, "PAUSED")]
    seen = await app.facts()
    assert seen["status"] == [PAUSED, PAUSED]
    assert seen["answers"] == ["review"]  # stored once, never twice
    assert app.answer({"answer": "yes"}) is None
    seen = await app.facts()
    assert seen["status"] == [DONE, DONE, DONE]
    assert seen["answers"] == ["review", "review"]
    assert "approved: yes" in seen["outputs"]
    assert app.recover() == []


async def test_a_kill_before_the_first_pause_is_recorded_ends_paused(
    url: str, billing: FakeService
) -> None:
    app = shape("input_loop", url, billing)
    app.run(crash_at="runner.before_finish")
    assert app.recover() == [("PAUSED", "mark_paused", "PAUSED")]
    assert app.answer({"answer": "yes"}) is None
    assert (await app.facts())["status"] == [DONE, DONE]


# ------------------------------------------ tool confirmation, approved, killed


@pytest.mark.parametrize(
    ("point", "acts_by"),
    [
        ("journal.before_intent", ["worker-B"]),  # killed before the act: B acts
        ("journal.after_act", ["worker-A"]),  # killed after it: B looks it up
    ],
)
async def test_an_approved_tool_killed_in_the_tool_runs_once(
    url: str, billing: FakeService, point: str, acts_by: list[str]
) -> None:
    app = shape("confirm", url, billing)
    assert app.run() is None
    assert (await app.facts())["status"] == [PAUSED]
    assert app.acts() == []  # nothing before the approval
    app.answer({"confirmed": True}, crash_at=point)
    assert app.recover() == [("TOOL_UNANSWERED", "redrive", "DONE")]
    seen = await app.facts()
    assert seen["status"] == [DONE, DONE]
    assert [w for w, _ in app.acts()] == acts_by  # the approved effect, once
    assert [k for _, k in app.acts()] == ["pay:C-1"]
    assert seen["texts"] == ["Paid C-1."]  # one answer
    refused = app.answer({"confirmed": True})  # the approval cannot be given twice
    assert refused is not None and "already answered" in refused
    assert len(app.acts()) == 1 and (await app.facts())["status"] == [DONE, DONE]
    assert app.recover() == []


@pytest.mark.parametrize(
    ("commits", "paused", "found"),
    [
        # The call to the journaled tool waits for its intent, and the
        # confirmation request goes with the PAUSED finish: a kill before it
        # leaves nothing of the turn stored, and the re-drive asks again (no act).
        pytest.param(
            "barrier",
            ("NOT_STARTED", "redrive", "PAUSED"),
            ("MODEL_INFLIGHT", "redrive", "DONE"),
            id="barrier",
        ),
        pytest.param(
            "per_event",
            ("PAUSED", "mark_paused", "PAUSED"),
            ("ACTUALLY_DONE", "mark_done", "DONE"),
            id="per_event",
        ),
    ],
)
async def test_an_approval_killed_before_its_drive_finishes_is_done_once(
    url: str,
    billing: FakeService,
    commits: str,
    paused: tuple[str, str, str],
    found: tuple[str, str, str],
) -> None:
    app = shape("confirm", url, billing, commits)
    app.run(crash_at="runner.before_finish")
    assert app.recover() == [paused]
    assert app.acts() == []  # nothing before the approval
    app.answer({"confirmed": True}, crash_at="runner.before_finish")
    assert app.recover() == [found]
    assert [(w, k) for w, k in app.acts()] == [("worker-A", "pay:C-1")]
    assert (await app.facts())["texts"] == ["Paid C-1."]


async def test_journaled_with_require_confirmation_pauses_acts_once_and_parks_by_its_name(
    url: str, billing: FakeService
) -> None:
    """``journaled(require_confirmation=True)`` (issue 42): the tool's name everywhere."""
    app = shape("confirm_option", url, billing)
    assert app.run() is None
    assert (await app.facts())["status"] == [PAUSED]
    assert await app.inbox() == [("confirmation", "adk_request_confirmation", "OPEN")]
    assert app.acts() == []  # nothing before the approval
    assert app.answer({"confirmed": True}) is None
    assert (await app.facts())["status"] == [DONE, DONE]
    assert app.acts() == [("worker-A", "ship:C-1")]  # the approved effect, once
    refused = app.answer({"confirmed": True})
    assert refused is not None and "already answered" in refused
    assert len(app.acts()) == 1


async def test_journaled_with_require_confirmation_denied_never_acts(
    url: str, billing: FakeService
) -> None:
    app = shape("confirm_option", url, billing)
    assert app.run() is None
    assert app.answer({"confirmed": False}) is None
    assert (await app.facts())["status"] == [DONE, DONE]
    assert app.acts() == []
    assert app.recover() == []
    assert app.acts() == []


async def test_journaled_with_require_confirmation_killed_in_the_tool_parks_by_its_name(
    url: str, billing: FakeService
) -> None:
    app = shape("confirm_option", url, billing)
    assert app.run() is None
    app.answer({"confirmed": True}, crash_at="shapes.in_ship")
    assert app.acts() == [("worker-A", "ship:C-1")]  # acted, then killed before its result
    assert app.recover() == [("TOOL_UNANSWERED", "park", "PARKED")]
    assert len(app.acts()) == 1  # never re-acted
    (letter,) = (await app.facts())["letters"]
    reason = letter.error or ""
    assert "ship_order recorded the intent" in reason, reason
    assert "_ship" not in reason.replace("ship_order", ""), reason


async def paid_once_and_answered(app: Shape) -> None:
    """The approved payment made once (by the answering worker), one answer, the pause closed."""
    seen = await app.facts()
    assert seen["status"] == [DONE, DONE]
    assert await app.inbox() == [("confirmation", "adk_request_confirmation", "ANSWERED")]
    assert [(w, k) for w, k in app.acts()] == [("worker-A", "pay:C-1")]
    assert seen["texts"] == ["Paid C-1."]


async def test_a_kill_right_after_a_pause_or_its_answer_is_written_keeps_the_inbox_true(
    url: str, billing: FakeService
) -> None:
    """The pause's inbox entry is written in its finish's unit, and so is the answer's close."""
    app = shape("confirm", url, billing)
    app.run(crash_at="ending.after_write")
    assert app.recover() == []  # PAUSED: nothing to recover
    assert (await app.facts())["status"] == [PAUSED]
    # An operator sees the call the run paused on (before: nothing re-indexed it).
    assert await app.inbox() == [("confirmation", "adk_request_confirmation", "OPEN")]
    assert app.acts() == []
    app.answer({"confirmed": True}, crash_at="ending.after_write")
    assert app.recover() == []
    # The paused run ended DONE with its answer's run, and the call left the inbox.
    await paid_once_and_answered(app)


@pytest.mark.parametrize(
    ("commits", "found"),
    [
        # The call only asked for confirmation: written with the pause, so a kill
        # before it leaves the user's message alone, and the re-drive asks again.
        pytest.param("barrier", ("NOT_STARTED", "redrive", "PAUSED"), id="barrier"),
        pytest.param("per_event", ("PAUSED", "mark_paused", "PAUSED"), id="per_event"),
    ],
)
async def test_a_plain_tool_killed_before_its_confirmation_is_recorded_is_asked_again(
    url: str, billing: FakeService, commits: str, found: tuple[str, str, str]
) -> None:
    """Not parked as "may have acted": a tool waiting for its confirmation never ran."""
    app = shape("confirm_plain", url, billing, commits)
    app.run(crash_at="runner.before_finish")
    assert app.recover() == [found]
    assert app.acts() == []
    assert await app.inbox() == [("confirmation", "adk_request_confirmation", "OPEN")]
    assert app.answer({"confirmed": True}) is None
    await paid_once_and_answered(app)


# ---------------------------------------------------------- two-turn transfer


@pytest.mark.parametrize(
    ("commits", "found"),
    [
        # Turn 2 is the user's message and one answer, both written with the
        # finish: a kill before that unit left nothing of it stored.
        pytest.param("barrier", ("NOT_STARTED", "redrive", "DONE"), id="barrier"),
        pytest.param("per_event", ("ACTUALLY_DONE", "mark_done", "DONE"), id="per_event"),
    ],
)
async def test_a_kill_after_the_specialists_second_answer_is_done_with_one_answer(
    url: str, billing: FakeService, commits: str, found: tuple[str, str, str]
) -> None:
    app = shape("transfer", url, billing, commits)
    assert app.run("refund R-1 please") is None
    app.run("thanks", crash_at="runner.before_finish")
    # The specialist owns turn 2: a stored answer ends it (the model is not
    # asked again); a lost one is asked of the specialist again, once.
    assert app.recover() == [found]
    seen = await app.facts()
    assert seen["status"] == [DONE, DONE]
    assert seen["texts"] == ["Refunded R-1.", "You are welcome."]  # one answer per message
    assert app.acts() == [("worker-A", "refund:R-1")]
    assert app.recover() == []


@pytest.mark.parametrize(
    ("point", "found", "acts_by"),
    [
        ("journal.after_act", "TOOL_UNANSWERED", ["worker-A"]),
        # The refund is stored; its final answer goes with the finish: asked again.
        ("runner.before_finish", "MODEL_INFLIGHT", ["worker-A"]),
    ],
)
async def test_a_kill_in_the_specialists_first_turn_is_recovered_once(
    url: str, billing: FakeService, point: str, found: str, acts_by: list[str]
) -> None:
    app = shape("transfer", url, billing)
    app.run("refund R-1 please", crash_at=point)
    assert [(f, s) for f, _, s in app.recover()] == [(found, "DONE")]
    assert app.run("thanks") is None
    seen = await app.facts()
    assert seen["status"] == [DONE, DONE]
    assert seen["texts"] == ["Refunded R-1.", "You are welcome."]
    assert [w for w, _ in app.acts()] == acts_by


# ----------------------------------------------- AgentTool child, journaled tool


@pytest.mark.parametrize(
    ("point", "acts_by"),
    [
        ("journal.before_intent", ["worker-B"]),
        ("journal.after_act", ["worker-A"]),
    ],
)
async def test_a_journaled_tool_in_an_agent_tools_child_acts_once_across_a_kill(
    url: str, billing: FakeService, point: str, acts_by: list[str]
) -> None:
    app = shape("agent_tool", url, billing)
    app.run(crash_at=point)
    assert app.recover() == [("TOOL_UNANSWERED", "redrive", "DONE")]
    seen = await app.facts()
    assert seen["status"] == [DONE]
    assert [w for w, _ in app.acts()] == acts_by and [k for _, k in app.acts()] == ["refund:R-7"]
    assert seen["texts"] == ["The clerk refunded R-7."]
    assert app.recover() == []


async def test_an_unjournaled_tool_in_an_agent_tools_child_parks_the_run(
    url: str, billing: FakeService
) -> None:
    app = shape("agent_tool_unsafe", url, billing)
    app.run(crash_at="shapes.after_plain_refund")
    assert app.recover() == [("TOOL_UNANSWERED", "park", "PARKED")]
    seen = await app.facts()
    assert seen["status"] == [PARKED]
    (letter,) = seen["letters"]
    assert "outcome unknown: clerk" in letter.error
    assert app.acts() == [("worker-A", "plain:R-7")]  # not run again blindly
    assert app.recover() == []


# ------------------------------------------------------ ParallelAgent, LoopAgent


def each_acted_once(requests: list[Any], keys: list[str]) -> bool:
    """Whether billing made each invoice once, and the recovery looked up what worker-A sent.

    A ParallelAgent's two branches run at once: when one branch's act kills
    worker-A, the other may be anywhere in its own call.

    * Its create may be on its way, received or in the service's hands but
      not yet answered, when worker-B's recovery looks its key up a few
      milliseconds later (the lease is backdated). The lookup finds nothing,
      worker-B sends the create again with the same idempotency key, and the
      service answers the later one from the key (``replayed``) or refuses
      it for its fence: two create requests, one invoice.
    * Its create may be torn: the headers sent, the body not (``http.client``
      sends them apart), so the service refuses it unread (a 4xx, nothing
      done).
    * It may not have recorded its intent yet: it sent nothing, and
      worker-B acquires the intent afresh and acts with no lookup (there is
      nothing to look up).

    So, per key: exactly one request created the invoice; every other create
    was answered from the key or fenced, or is worker-A's refused unread;
    worker-A sent at most one; and when worker-A sent any, worker-B never
    created without first looking the key up and finding nothing (without the
    journal it would not look up at all; with a DONE entry it would not send).
    """

    def refused_unread(r: Any) -> bool:
        return r.outcome == "error" and r.status is not None and 400 <= r.status < 500

    for key in keys:
        mine = sorted((r for r in requests if r.key == key), key=lambda r: r.seq)
        creates = [r for r in mine if r.mutating]
        if [r.outcome for r in creates].count("created") != 1:
            return False
        by_a = [r for r in creates if r.caller.get("worker") == "worker-A"]
        if len(by_a) > 1:
            return False
        for r in creates:
            if r.outcome not in ("created", "replayed", "fenced") and not (
                r in by_a and refused_unread(r)
            ):
                return False
        if not by_a:
            continue  # worker-A sent nothing for it: nothing for worker-B to look up
        for create in (r for r in creates if r.caller.get("worker") == "worker-B"):
            looked = [
                r
                for r in mine
                if r.action == "lookup"
                and r.caller.get("worker") == "worker-B"
                and r.seq < create.seq
            ]
            if not looked or looked[-1].outcome != "not_found":
                return False
    return {r.key for r in requests if r.mutating} == set(keys)


def _req(seq: int, worker: str, action: str, outcome: str, status: int = 200) -> Any:
    return SimpleNamespace(
        seq=seq,
        key="invoice:P-S",
        action=action,
        mutating=action == "create",
        caller={"worker": worker},
        outcome=outcome,
        status=status,
    )


def _retried(a: tuple[str, int], looked: bool, b: tuple[str, int]) -> list[Any]:
    """worker-A's create (outcome, status), worker-B's lookup if ``looked``, then its create."""
    log = [_req(1, "worker-A", "create", *a)]
    if looked:
        log.append(_req(2, "worker-B", "lookup", "not_found", 404))
    return [*log, _req(3, "worker-B", "create", *b)]


@pytest.mark.parametrize(
    ("log", "once"),
    [
        # worker-A never recorded its intent: worker-B acts with no lookup.
        ([_req(1, "worker-B", "create", "created", 201)], True),
        # worker-A's create in the service's hands: found nothing, replayed.
        (_retried(("created", 201), True, ("replayed", 200)), True),
        # worker-A's create torn by its crash (refused unread), worker-B's made it.
        (_retried(("error", 400), True, ("created", 201)), True),
        # worker-A sent one: worker-B created without looking it up.
        (_retried(("error", 400), False, ("created", 201)), False),
        # Two invoices made.
        (_retried(("created", 201), True, ("created", 201)), False),
        # A server error on a create is not known to have done nothing.
        (_retried(("error", 500), True, ("created", 201)), False),
    ],
)
def test_the_parallel_act_check_passes_what_a_crash_can_leave_and_nothing_else(
    log: list[Any], once: bool
) -> None:
    assert each_acted_once(log, ["invoice:P-S"]) is once


@pytest.mark.parametrize("after", [0, 1])
async def test_a_parallel_root_killed_after_an_act_finishes_with_each_act_once(
    url: str, billing: FakeService, after: int
) -> None:
    app = shape("parallel", url, billing)
    app.run(crash_at="journal.after_act", after=after)
    recovered = [(a, s) for _, a, s in app.recover()]
    assert recovered == [("redrive", "DONE")], app.last_report
    requests = app.billing.requests("invoices")
    # On failure, say who sent each request, when, and what it came to: one
    # line each, as text (pytest shortens a message that is not a string).
    log = "\n".join(
        f"#{r.seq} {r.caller.get('worker')} {r.action} {r.key} -> {r.outcome} ({r.reason}) "
        f"received {r.received_at:.4f} answered {r.answered_at} fence {r.fence}"
        for r in requests
    )
    assert each_acted_once(requests, ["invoice:P-N", "invoice:P-S"]), (
        f"billing's requests:\n{log}\nrecovery: {app.last_report}"
    )
    seen = await app.facts()
    assert seen["status"] == [DONE]
    assert sorted(seen["texts"]) == ["North invoiced.", "South invoiced."]


@pytest.mark.parametrize(("after", "found"), [(0, "TOOL_UNANSWERED"), (1, "TOOL_UNANSWERED")])
async def test_a_loop_root_killed_in_a_round_finishes_with_each_round_once(
    url: str, billing: FakeService, after: int, found: str
) -> None:
    app = shape("loop", url, billing)
    app.run(crash_at="journal.after_act", after=after)
    assert app.recover() == [(found, "redrive", "DONE")]
    assert [k for _, k in app.acts()] == ["invoice:L-1", "invoice:L-2"]
    assert all(w for w, _ in app.acts())
    seen = await app.facts()
    assert seen["status"] == [DONE]
    assert seen["texts"] == ["Round 1 invoiced.", "Round 2 invoiced."]


@pytest.mark.parametrize(("commits", "found"), BEFORE_FINISH)
async def test_a_loop_root_killed_before_finish_is_done_without_another_round(
    url: str, billing: FakeService, commits: str, found: tuple[str, str, str]
) -> None:
    app = shape("loop", url, billing, commits)
    app.run(crash_at="runner.before_finish")
    assert app.recover() == [found]
    assert [(w, k) for w, k in app.acts()] == [
        ("worker-A", "invoice:L-1"),
        ("worker-A", "invoice:L-2"),
    ]
    seen = await app.facts()
    assert seen["status"] == [DONE]
    assert seen["texts"] == ["Round 1 invoiced.", "Round 2 invoiced."]  # no third round


# ------------------------------------------------------ a plain BaseNode root


async def test_a_plain_node_root_runs_to_done_and_is_recovered_after_a_kill(
    url: str, billing: FakeService
) -> None:
    app = shape("basenode", url, billing)
    assert app.run() is None
    assert (await app.facts())["status"] == [DONE]  # not handed back as MODEL_INFLIGHT
    # A node root is driven lock-step: its output is stored before it is
    # handed over, so the kill finds it stored and the row not finished.
    app.run(crash_at="runner.before_finish")
    assert app.recover() == [("ACTUALLY_DONE", "mark_done", "DONE")]
    app.run(crash_at="runner.before_first_event")  # recorded, nothing driven yet
    assert app.recover() == [("NOT_STARTED", "redrive", "DONE")]
    seen = await app.facts()
    assert seen["status"] == [DONE, DONE, DONE]
    assert seen["outputs"] == [{"tally": 3}] * 3


# ------------------------------------- barriers under a kill: caller and plugins


async def stored_event_ids(url: str) -> tuple[set[str], set[str]]:
    """(event ids, function call ids) a fresh process reads from the store."""
    async with open_store(url) as store:
        session = await DurableSessionService(store).get_session(
            app_name=APP, user_id=USER, session_id="s1"
        )
    assert session is not None
    calls = {c.id or "" for e in session.events for c in e.get_function_calls()}
    return {e.id for e in session.events}, calls


async def test_parallel_branches_killed_mid_way_the_caller_saw_only_stored_events(
    url: str, billing: FakeService
) -> None:
    app = shape("parallel_slow", url, billing)
    crashed = app._child("run", "--text", "go", crash_at="shapes.in_slow_branch")
    handed = [line.split()[1] for line in crashed.stdout.splitlines() if line.startswith("HANDED")]
    assert handed, crashed.stdout  # the fast branch's events reached the caller first
    ids, _ = await stored_event_ids(url)
    assert [h for h in handed if h not in ids] == []  # none a crash could lose
    assert app.recover()[0][2] == "DONE"
    assert [key for _, key in app.acts()] == ["invoice:P-N"]  # one invoice, whatever re-ran


async def test_an_app_plugin_killed_in_before_tool_acted_for_a_stored_call(
    url: str, billing: FakeService
) -> None:
    app = shape("audited", url, billing)
    crashed = app._child("run", "--text", "go", crash_at="shapes.in_plugin_before_tool")
    seen = [line.split()[1] for line in crashed.stdout.splitlines() if line.startswith("PLUGIN")]
    assert len(seen) == 1, crashed.stdout
    _, calls = await stored_event_ids(url)
    assert seen[0] in calls  # the barrier ran before the app's plugin: the call is durable
    assert app.recover() == [("TOOL_UNANSWERED", "redrive", "DONE")]
    assert [key for _, key in app.acts()] == ["invoice:A-1"]
