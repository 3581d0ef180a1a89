"""The soak's verdict on hand-made records: each check finds what it must, and only that."""

from __future__ import annotations

import dataclasses
from typing import Any

from durable_adk.chaos.check import (
    Claim,
    EventRow,
    Request,
    RunRow,
    SagaRow,
    TickRow,
    judge,
)

RUN = "run-1"


def request(
    key: str,
    epoch: int,
    at: float,
    *,
    mutating: bool = True,
    run: str = RUN,
    service: str = "p",
    outcome: str | None = None,
) -> Request:
    return Request(
        outcome=outcome or ("created" if mutating else "found"),
        reason="fence_expired" if outcome == "fenced" else None,
        service=service,
        seq=int(at * 10),
        method="POST" if mutating else "GET",
        path="/x",
        action="create" if mutating else "lookup",
        key=key,
        mutating=mutating,
        worker=f"w{epoch}",
        run_id=run,
        epoch=epoch,
        at=at,
    )


def run_row(status: str = "DONE", run: str = RUN, invocation: str = "inv-1") -> RunRow:
    return RunRow(run, "chaos", "s1", invocation, status, "w2", 2, 2, None, None)


def event(seq: int, parts: list[dict[str, Any]], *, epoch: int = 1, inv: str = "inv-1") -> EventRow:
    data = {
        "content": {"parts": parts},
        "custom_metadata": {"durable_adk": {"run_id": RUN, "epoch": epoch}},
    }
    return EventRow("chaos", "s1", seq, inv, "user" if seq == 1 else "chaos", data)


def good_log() -> list[EventRow]:
    return [
        event(1, [{"text": "Please charge order ORD-1 and tell the customer."}]),
        event(2, [{"function_call": {"id": "c1", "name": "charge"}}]),
        event(3, [{"function_response": {"id": "c1", "name": "charge"}}]),
        event(4, [{"function_call": {"id": "c2", "name": "notify"}}]),
        event(5, [{"function_response": {"id": "c2", "name": "notify"}}], epoch=2),
        event(6, [{"text": "Order ORD-1 charged and confirmed."}], epoch=2),
    ]


CLAIMS = [Claim(RUN, 1, "w1", "RUNNING", 1.0), Claim(RUN, 2, "w2", "RUNNING", 5.0)]
GOOD = [request("charge:ORD-1", 1, 2.0), request("notify:ORD-1", 2, 6.0)]


def verdict(**changes: Any) -> dict[str, list[str]]:
    records: dict[str, Any] = {
        "runs": [run_row()],
        "accepted": [RUN],
        "claims": CLAIMS,
        "events": good_log(),
        "requests": GOOD,
    }
    records.update(changes)
    return {k: v for k, v in judge(**records).findings.items() if v}


def test_a_clean_takeover_is_no_violation() -> None:
    assert verdict() == {}


def test_a_call_of_the_old_epoch_after_the_takeover_is_found() -> None:
    late = request("notify:ORD-1", 1, 5.5, mutating=False)  # even a lookup counts
    found = verdict(requests=[*GOOD, late])
    assert list(found) == ["calls after takeover"]


def test_two_acts_under_one_key_are_a_doubled_effect_even_if_deduplicated() -> None:
    found = verdict(requests=[*GOOD, request("notify:ORD-1", 2, 6.5)])
    assert list(found) == ["doubled effects"]


def test_an_old_epoch_acting_after_a_newer_one_is_a_double_drive() -> None:
    found = verdict(requests=[*GOOD, request("charge:ORD-1", 1, 7.0)])
    assert set(found) == {"calls after takeover", "double drives", "doubled effects"}


def test_an_event_of_an_older_epoch_after_a_newer_one_is_a_double_drive() -> None:
    log = good_log()
    log.append(event(7, [{"text": "late"}], epoch=1))
    assert list(verdict(events=log)) == ["double drives"]


def test_gaps_interleaved_runs_and_early_answers_are_order_violations() -> None:
    log = good_log()
    del log[2]
    assert "order violations" in verdict(events=log)  # a gap
    other = event(7, [{"text": "x"}], inv="inv-2")
    mixed = [*good_log()[:3], other, *good_log()[3:]]
    runs = [run_row(), run_row(run="run-2", invocation="inv-2")]
    found = verdict(
        events=[
            EventRow(e.user_id, e.session_id, i + 1, e.invocation_id, e.author, e.data)
            for i, e in enumerate(mixed)
        ],
        runs=runs,
        accepted=[RUN, "run-2"],
    )
    assert any("interleave" in line for line in found["order violations"])
    answer_first = [good_log()[0], good_log()[2], good_log()[1], *good_log()[3:]]
    renumbered = [
        EventRow(e.user_id, e.session_id, i + 1, e.invocation_id, e.author, e.data)
        for i, e in enumerate(answer_first)
    ]
    assert any(
        "before it was made" in line for line in verdict(events=renumbered)["order violations"]
    )


def test_runs_not_ended_or_unknown_are_lost() -> None:
    assert list(verdict(runs=[run_row("RUNNING")])) == ["lost"]
    assert verdict(accepted=[RUN, "run-ghost"])["lost"] == [
        "run run-ghost was accepted but is not on the ledger"
    ]


def test_failed_parked_and_hollow_done_runs_are_unexpected_endings() -> None:
    assert list(verdict(runs=[run_row("FAILED")])) == ["unexpected endings"]
    assert list(verdict(runs=[run_row("PARKED")])) == ["unexpected endings"]
    hollow = verdict(requests=[GOOD[0]])  # DONE, but notify never acted
    assert list(hollow) == ["unexpected endings"]
    unanswered = verdict(events=good_log()[:-1])  # DONE without the final answer
    assert list(unanswered) == ["unexpected endings"]


def test_a_late_request_the_service_refused_as_fenced_is_no_violation_but_is_reported() -> None:
    # Sent by epoch 1 while its lease was valid, held by the network, received
    # after epoch 2 took over: the service refused it before acting.
    late = request("charge:ORD-1", 1, 6.2, outcome="fenced")
    late_lookup = request("notify:ORD-1", 1, 5.5, mutating=False, outcome="fenced")
    records: dict[str, Any] = {
        "runs": [run_row()],
        "accepted": [RUN],
        "claims": CLAIMS,
        "events": good_log(),
        "requests": [*GOOD, late, late_lookup],
    }
    result = judge(**records)
    assert result.violations == 0
    assert result.acts == 2  # the refused act is not one
    assert len(result.fenced) == 2
    assert "refused (fence_expired), 1.200s after the takeover" in result.fenced[0]


def test_a_late_request_the_service_accepted_is_still_a_violation() -> None:
    # The same late request without fence headers (or from a service that does
    # not check them): the service answered it from the key: an act after takeover.
    late = request("charge:ORD-1", 1, 6.2, outcome="replayed")
    found = verdict(requests=[*GOOD, late])
    assert set(found) == {"calls after takeover", "doubled effects", "double drives"}
    unanswered = dataclasses.replace(late, outcome=None)  # never answered: may have acted
    assert set(verdict(requests=[*GOOD, unanswered])) == set(found)


def test_a_run_whose_only_charge_was_refused_as_fenced_never_acted() -> None:
    refused = request("charge:ORD-1", 1, 2.0, outcome="fenced")
    found = verdict(requests=[refused, request("notify:ORD-1", 2, 6.0)])
    assert list(found) == ["unexpected endings"]
    assert "never acted: ['charge:ORD-1']" in found["unexpected endings"][0]


def napping_log(wakes: int) -> list[EventRow]:
    """The good log with a nap first: sleep call, its pending answer, ``wakes`` wake-ups."""
    woke = {
        "function_response": {"id": "z", "name": "durable_sleep", "response": {"status": "woke"}}
    }
    head = [
        event(1, [{"text": "Please charge order ORD-1 and tell the customer. nap 2"}]),
        event(2, [{"function_call": {"id": "z", "name": "durable_sleep"}}]),
        event(3, [{"function_response": {"id": "z", "name": "durable_sleep"}}]),
        *[dataclasses.replace(event(4 + i, [woke]), author="user") for i in range(wakes)],
    ]
    tail = [dataclasses.replace(e, seq=e.seq + len(head) - 1) for e in good_log()[1:]]
    return head + tail


def test_a_sleep_woken_once_is_no_violation_and_none_or_twice_is() -> None:
    assert verdict(events=napping_log(1)) == {}  # every check, not only the sleeps
    (never,) = verdict(events=napping_log(0))["sleeps not woken once"]
    assert "woke 0 times" in never
    (twice,) = verdict(events=napping_log(2))["sleeps not woken once"]
    assert "woke 2 times" in twice


def test_a_nap_asked_but_never_slept_is_a_violation() -> None:
    log = good_log()
    log[0] = event(1, [{"text": "Please charge order ORD-1 and tell the customer. nap 2"}])
    (found,) = verdict(events=log)["sleeps not woken once"]
    assert "1 nap(s) asked, 0 sleep call(s)" in found


def tick(at: float, *, state: str = "SUBMITTED", run: str | None = None) -> TickRow:
    key = f"at:{at:.0f}"
    return TickRow("tick", key, at, "tick", run or f"run-{at:.0f}", f"tick@{key}", state)


def tick_runs(*ticks: TickRow) -> list[RunRow]:
    return [
        dataclasses.replace(run_row(run=t.run_id, invocation=t.run_id), session_id=t.session_id)
        for t in ticks
    ]


def tick_findings(ticks: list[TickRow], runs: list[RunRow]) -> list[str]:
    return judge(
        runs=runs, accepted=[], claims=[], events=[], requests=[], ticks=ticks, tick_every=5.0
    ).findings["ticks not fired once"]


def test_ticks_each_with_their_one_run_and_no_gap_are_no_violation() -> None:
    ticks = [tick(100.0), tick(105.0), tick(110.0)]
    assert tick_findings(ticks, tick_runs(*ticks)) == []


def test_a_lost_tick_a_pending_one_a_missing_run_and_a_second_run_are_found() -> None:
    ticks = [tick(100.0), tick(110.0), tick(115.0, state="PENDING"), tick(120.0)]
    runs = tick_runs(*ticks[:3])  # the last tick's run is not on the ledger
    runs.append(
        dataclasses.replace(runs[0], run_id="run-extra")
    )  # a second run in a tick's session
    found = tick_findings(ticks, runs)
    assert len(found) == 4, found
    assert any("10.000s between the ticks at 100.000 and 110.000" in line for line in found)
    assert any("left PENDING" in line for line in found)
    assert any("not on the ledger" in line for line in found)
    assert any("also holds runs ['run-extra']" in line for line in found)


def test_a_drive_by_an_older_version_is_found_a_queued_answer_from_it_is_not() -> None:
    runs = [dataclasses.replace(run_row(), app_version="1.1")]
    versions = {"w1": "1.0", "w2": "1.1"}
    queued_by_old = [Claim(RUN, 0, "w1", "QUEUED", 1.0), Claim(RUN, 1, "w2", "RUNNING", 2.0)]
    driven_by_old = [*queued_by_old, Claim(RUN, 2, "w1", "RUNNING", 5.0)]

    def found(claims: list[Claim]) -> list[str]:
        return judge(
            runs=runs, accepted=[RUN], claims=claims, events=[], requests=[], versions=versions
        ).findings["claims by an older version"]

    assert found(queued_by_old) == []
    (line,) = found(driven_by_old)
    assert "worker w1 (1.0) claimed run run-1 of 1.1 (epoch 2" in line
    # A 1.0 run driven by the 1.1 worker is a drive across versions (information).
    older_run = [dataclasses.replace(run_row(), app_version="1.0")]
    across = judge(
        runs=older_run, accepted=[RUN], claims=queued_by_old, events=[], requests=[],
        versions=versions,
    )  # fmt: skip
    assert across.across_versions == 1 and across.count("claims by an older version") == 0


ASK = "Please charge order ORD-1 and tell the customer. Only with approval."


def approval_log(answers: int, *, approved_at: float = 1.5) -> list[EventRow]:
    """The good log after an approval: the call, its pending answer, ``answers`` approvals."""

    def approval(seq: int) -> EventRow:
        answer = {"id": "a", "name": "approve_order", "response": {"approved": True}}
        made = dataclasses.replace(event(seq, [{"function_response": answer}]), author="user")
        return dataclasses.replace(made, data={**made.data, "timestamp": approved_at})

    call = {"id": "a", "name": "approve_order", "args": {"order_id": "ORD-1"}}
    head = [
        event(1, [{"text": ASK}]),
        event(2, [{"function_call": call}]),
        event(3, [{"function_response": {"id": "a", "name": "approve_order"}}]),
        *[approval(4 + i) for i in range(answers)],
    ]
    charge = {"id": "c1", "name": "charge", "args": {"order_id": "ORD-1"}}
    tail = [dataclasses.replace(e, seq=e.seq + len(head) - 1) for e in good_log()[1:]]
    tail[0] = dataclasses.replace(tail[0], data={"content": {"parts": [{"function_call": charge}]}})
    return head + tail


def test_an_approval_answered_once_before_the_charge_is_no_violation() -> None:
    assert verdict(events=approval_log(1)) == {}  # every check, not only the approvals
    judged = judge(runs=[], accepted=[], claims=[], events=approval_log(1), requests=[])
    assert judged.approvals == 1


def test_an_approval_answered_never_or_twice_or_after_the_charge_is_a_violation() -> None:
    (never,) = verdict(events=approval_log(0))["approvals not answered once"]
    assert "answered 0x" in never
    (twice,) = verdict(events=approval_log(2))["approvals not answered once"]
    assert "answered 2x" in twice
    # The charge (received at 2.0) came before the approval was made (3.0).
    (early,) = verdict(events=approval_log(1, approved_at=3.0))["approvals not answered once"]
    assert "ORD-1 acted on 1.000s before its approval was made" in early
    log = approval_log(1)
    log[3], log[4] = dataclasses.replace(log[4], seq=4), dataclasses.replace(log[3], seq=5)
    found = verdict(events=log)["approvals not answered once"]
    assert any("called an effect before its approval" in f for f in found)


def test_a_failing_verdict_traces_the_sessions_its_findings_name() -> None:
    log = approval_log(1, approved_at=3.0)
    judged = judge(runs=[run_row()], accepted=[RUN], claims=CLAIMS, events=log, requests=GOOD)
    assert judged.violations
    head, *rest = judged.evidence
    assert head == f"session s1: {len(log)} events"
    assert any("answer approve_order#a={'approved': True}" in line for line in rest)
    assert any("call charge#c1({'order_id': 'ORD-1'})" in line for line in rest)
    assert any(line.startswith("  run run-1 DONE epoch 2 by w2") for line in rest)
    assert any("claim run-1 epoch 2 RUNNING by w2" in line for line in rest)
    assert any("p POST charge:ORD-1 from w1 run run-1@1" in line for line in rest)
    # A clean verdict carries none.
    assert judge(**{**_records(), "events": approval_log(1)}).evidence == []


def _records() -> dict[str, Any]:
    return {"runs": [run_row()], "accepted": [RUN], "claims": CLAIMS, "requests": GOOD}


def test_an_approval_asked_but_never_called_is_a_violation() -> None:
    log = good_log()
    log[0] = event(1, [{"text": ASK}])
    (found,) = verdict(events=log)["approvals not answered once"]
    assert "1 approval(s) asked, 0 call(s)" in found


def test_a_drive_of_a_version_the_worker_does_not_serve_is_found() -> None:
    runs = [dataclasses.replace(run_row(), app_version="1.1")]
    pinned = {"w1": frozenset({"1.2"}), "w2": frozenset({"1.1", "1.0"})}
    claims = [Claim(RUN, 1, "w2", "RUNNING", 1.0), Claim(RUN, 2, "w1", "RUNNING", 5.0)]
    found = judge(
        runs=runs, accepted=[], claims=claims, events=[], requests=[], serves=pinned
    ).findings["claims of a version not served"]
    assert found == ["worker w1 (serves 1.2) claimed run run-1 of 1.1 (epoch 2)"]
    queued = [Claim(RUN, 0, "w1", "QUEUED", 1.0), Claim(RUN, 1, "w2", "RUNNING", 2.0)]
    assert not judge(
        runs=runs, accepted=[], claims=queued, events=[], requests=[], serves=pinned
    ).findings["claims of a version not served"]


def saga_records(
    status: str, *, out_of_stock: bool = False, **outcomes: list[str]
) -> dict[str, Any]:
    """A saga order's session and the services' log: ``charge``, ``refund``, ``confirm``."""
    ask = "Please charge order ORD-9 and tell the customer. As a saga"
    ask += ", out of stock." if out_of_stock else "."
    user = dataclasses.replace(event(1, [{"text": ask}], inv="inv-9"), author="user")
    saga = SagaRow("inv-9/order_saga", "order_saga", "inv-9", status)
    keys = {
        "charge": "saga:inv-9/order_saga:take_payment",
        "refund": "saga:inv-9/order_saga:take_payment:undo",
        "confirm": "saga:inv-9/order_saga:confirm",
    }
    requests = [
        dataclasses.replace(request(keys[what], 1, 1.0 + i), outcome=outcome)
        for what, said in outcomes.items()
        for i, outcome in enumerate(said)
    ]
    return {"events": [user], "sagas": [saga], "requests": requests}


def saga_findings(records: dict[str, Any]) -> list[str]:
    return judge(runs=[], accepted=[], claims=[], **records).findings["sagas not finished once"]


def test_sagas_whose_acts_match_their_end_are_no_violation() -> None:
    committed = saga_records("COMMITTED", charge=["created"], confirm=["created"])
    assert saga_findings(committed) == []
    # The refund retried after a crash: the service applied it once, replayed it once.
    undone = saga_records(
        "COMPENSATED", out_of_stock=True, charge=["created"], refund=["applied", "replayed"]
    )
    assert saga_findings(undone) == []
    assert judge(runs=[], accepted=[], claims=[], **undone).findings["doubled effects"] == []
    never = saga_records("COMPENSATED", out_of_stock=True)  # died before the charge
    assert saga_findings(never) == []


def test_sagas_left_unfinished_or_acting_against_their_end_are_found() -> None:
    (wrong,) = saga_findings(saga_records("COMMITTED", out_of_stock=True, charge=["created"]))
    assert "ended COMMITTED, not COMPENSATED" in wrong
    (stuck,) = saga_findings(saga_records("COMPENSATING", out_of_stock=True))
    assert "ended COMPENSATING" in stuck
    (unrefunded,) = saga_findings(
        saga_records("COMPENSATED", out_of_stock=True, charge=["created"])
    )
    assert "COMPENSATED but charged 1, refunded 0" in unrefunded
    (half,) = saga_findings(saga_records("COMMITTED", charge=["created"]))
    assert "COMMITTED but charged 1, refunded 0, confirmed 0" in half
    missing = saga_records("COMMITTED")
    missing["sagas"] = []
    (none,) = saga_findings(missing)
    assert "a saga was asked for, none was recorded" in none


def test_an_answer_parked_for_a_dropped_approval_tool_is_expected_when_nothing_acted() -> None:
    log = approval_log(0)[:3]  # paused on its approval; the answer never reached the session
    reason = "drift: the run was recorded under ... lacks what its log refers to: tool "
    parked = dataclasses.replace(
        run_row("PARKED"), last_error=reason + "'approve_order'. Deploy code that has it"
    )
    records = {"runs": [parked], "accepted": [RUN], "claims": CLAIMS, "events": log}
    judged = judge(**records, requests=[])
    assert {k: v for k, v in judged.findings.items() if v} == {}
    assert judged.drift_parks == 1
    # The same park after its order was charged: a violation.
    acted = judge(**records, requests=[request("charge:ORD-1", 1, 2.0)])
    assert acted.drift_parks == 0 and acted.findings["unexpected endings"]
    # Another drift (a tool the soak never drops) is no designed park either.
    other = dataclasses.replace(parked, last_error=reason + "'charge'.")
    assert judge(**{**records, "runs": [other]}, requests=[]).findings["unexpected endings"]


def test_a_second_charge_of_an_order_under_a_rekeyed_template_is_a_doubled_effect() -> None:
    rekeyed = [*GOOD, request("charge:ORD-1:v2", 2, 5.5)]
    (doubled,) = verdict(requests=rekeyed)["doubled effects"]
    assert doubled.startswith("p charge:ORD-1: 2 acts")
    # The schedule's order is charged by each tick under its code's key: not a double.
    ticks = [request("charge:ORD-tick", 1, 2.0), request("charge:ORD-tick:v2", 2, 5.5)]
    assert "doubled effects" not in verdict(requests=[*GOOD, *ticks])


def test_a_run_killed_mid_charge_parked_by_a_rekeyed_version_is_expected_if_charged_once() -> None:
    log = good_log()[:2]  # charging when its worker died; the new code keys the charge anew
    reason = (
        "drift: the run was recorded under ... lacks what its log refers to: journaled tool "
        "'charge' keyed 'charge:{order_id}' (journal entry 'charge:ORD-1') where this code keys "
        "it 'charge:{order_id}:v2'. Deploy code that has it"
    )
    parked = dataclasses.replace(run_row("PARKED"), last_error=reason)
    paused = dataclasses.replace(
        run_row("PARKED", run="run-0"),
        last_error=f"its continuation, run {RUN}, was parked: {reason}",
    )
    records = {
        "runs": [parked, paused],
        "accepted": [RUN, "run-0"],
        "claims": CLAIMS,
        "events": log,
    }
    once = judge(**records, requests=[request("charge:ORD-1", 1, 2.0)])
    assert {k: v for k, v in once.findings.items() if v} == {} and once.drift_parks == 2
    twice = judge(
        **records, requests=[request("charge:ORD-1", 1, 2.0), request("charge:ORD-1:v2", 2, 3.0)]
    )
    assert twice.findings["doubled effects"] and twice.findings["unexpected endings"]


def test_an_approval_asked_under_a_version_without_the_tool_needs_no_call() -> None:
    log = good_log()
    log[0] = event(1, [{"text": ASK}])
    runs = [dataclasses.replace(run_row(), app_version="1.3")]
    judged = judge(
        runs=runs, accepted=[RUN], claims=CLAIMS, events=log, requests=GOOD,
        without_approvals=frozenset({"1.3"}),
    )  # fmt: skip
    assert {k: v for k, v in judged.findings.items() if v} == {}


def test_a_report_answered_once_by_its_job_is_no_violation_and_twice_is() -> None:
    def report_log(results: int) -> list[EventRow]:
        done = {"id": "r", "name": "build_report", "response": {"status": "succeeded"}}
        call = {"id": "r", "name": "build_report", "args": {"order_id": "ORD-1"}}
        ask = "Please charge order ORD-1 and tell the customer. Only with a report."
        head = [
            event(1, [{"text": ask}]),
            event(2, [{"function_call": call}]),
            event(3, [{"function_response": {"id": "r", "name": "build_report"}}]),
            *[
                dataclasses.replace(
                    dataclasses.replace(event(4 + i, [{"function_response": done}]), author="user"),
                    data={"content": {"parts": [{"function_response": done}]}, "timestamp": 1.5},
                )
                for i in range(results)
            ],
        ]
        return head + [dataclasses.replace(e, seq=e.seq + len(head) - 1) for e in good_log()[1:]]

    assert verdict(events=report_log(1)) == {}
    (twice,) = verdict(events=report_log(2))["reports not resumed once"]
    assert "report r answered 2x" in twice
    (never,) = verdict(events=report_log(0))["reports not resumed once"]
    assert "report r answered 0x" in never


def tick_started(t: TickRow, version: str) -> EventRow:
    """The user event a tick's run starts with, naming the version whose definition fired."""
    text = f"Please charge order ORD-tick and tell the customer. Tick schedule of {version}."
    data = {"author": "user", "content": {"role": "user", "parts": [{"text": text}]}}
    return EventRow("chaos", t.session_id, 1, t.run_id, "user", data)


def old_definitions(fired: list[tuple[float, str]]) -> list[str]:
    ticks = [tick(at) for at, _ in fired]
    events = [tick_started(t, version) for t, (_, version) in zip(ticks, fired, strict=True)]
    return judge(
        runs=tick_runs(*ticks), accepted=[], claims=[], events=events, requests=[], ticks=ticks
    ).findings["ticks of an old definition"]


def test_a_tick_fired_with_an_older_versions_definition_after_a_newer_one_is_found() -> None:
    # A rollout: 1.0's definition, then 1.1's (1.10 after 1.9: versions are compared as numbers).
    assert old_definitions([(100, "1.0"), (105, "1.1"), (110, "1.9"), (115, "1.10")]) == []
    found = old_definitions([(100, "1.0"), (105, "1.1"), (110, "1.0"), (115, "1.1")])
    assert found == [
        "tick at:110 fired with the definition of 1.0 after tick at:105 fired a newer one's"
    ]


def test_a_tick_charged_only_under_a_rekeyed_versions_key_acted() -> None:
    """Each tick charges under the key of the code that runs it (a rekeyed version:
    ``charge:ORD-tick:v2``): a tick run whose charge went under that key acted."""
    log = [dataclasses.replace(e, data=_with_order(e.data, "ORD-tick")) for e in good_log()]
    rekeyed = [request("charge:ORD-tick:v2", 1, 2.0), request("notify:ORD-tick", 2, 6.0)]
    assert "unexpected endings" not in verdict(events=log, requests=rekeyed)
    (hollow,) = verdict(events=log, requests=rekeyed[1:])["unexpected endings"]
    assert "never acted: ['charge:ORD-tick']" in hollow
    # Another order's charge under a rekeyed key is not this run's.
    other = [request("charge:ORD-tick-2:v2", 1, 2.0), rekeyed[1]]
    assert "unexpected endings" in verdict(events=log, requests=other)


def _with_order(data: dict[str, Any], order: str) -> dict[str, Any]:
    parts = [
        {**p, "text": p["text"].replace("ORD-1", order)} if "text" in p else p
        for p in data["content"]["parts"]
    ]
    return {**data, "content": {"parts": parts}}


def test_a_failing_soak_prints_the_worker_log_lines_of_the_traced_runs(tmp_path: Any) -> None:
    from durable_adk.chaos.soak import EVIDENCE_LOG_LINES, Soak, SoakConfig

    soak = Soak(SoakConfig())
    soak.folder = tmp_path
    (tmp_path / "w1.1.log").write_text("run run-1 claimed\nrun run-9 claimed\n")
    (tmp_path / "w2.1.log").write_text("".join(f"run run-1 step {i}\n" for i in range(100)))
    runs = [run_row(), dataclasses.replace(run_row(), run_id="run-9", session_id="s9")]
    judged = judge(
        runs=runs,
        accepted=[RUN],
        claims=CLAIMS,
        events=approval_log(1, approved_at=3.0),
        requests=GOOD,
    )
    lines = soak.logged(judged, runs)
    assert lines[0] == "  w1.1: run run-1 claimed"  # run-9's session is not traced
    assert lines[1] == "  w2.1: run run-1 step 0"
    assert len(lines) == EVIDENCE_LOG_LINES + 1
    assert lines[-1] == f"  ... and {101 - EVIDENCE_LOG_LINES} more"


def test_an_order_whose_message_started_two_invocations_is_a_submit_recorded_twice() -> None:
    assert verdict() == {}
    again = [dataclasses.replace(e, seq=e.seq + 6, invocation_id="inv-2") for e in good_log()[:1]]
    (found,) = verdict(events=[*good_log(), *again])["submits recorded twice"]
    assert found == "session s1: ORD-1 started 2 invocations"
    # The schedule's order starts an invocation at every tick.
    ticks = [
        dataclasses.replace(
            event(1, [{"text": "Please charge order ORD-tick."}]), invocation_id=f"t{i}"
        )
        for i in range(3)
    ]
    assert (
        judge(runs=[], accepted=[], claims=[], events=ticks, requests=[]).findings[
            "submits recorded twice"
        ]
        == []
    )
