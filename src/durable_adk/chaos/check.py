"""The verdict of a chaos soak: what the outside world, the ledger and the logs show.

Pure functions over four records, read once the soak has settled:

* :class:`Request`: one request a fake service received (its request log,
  logged on arrival, before handling), tagged by the caller with the worker,
  run and epoch that sent it (``X-Caller-*`` headers, see
  :mod:`durable_adk.chaos.app`);
* :class:`Claim`: one change of a run's epoch, owner or status, with the
  database clock at the change (the soak's observer trigger, see
  ``chaos/sql/<dialect>/chaos_observer.sql``);
* :class:`RunRow`: a run as the ledger holds it at the end;
* :class:`EventRow`: one stored event of a session.

**What counts as acted on.** Every request of the chaos app carries its
drive's fence (``Durable-Fence-*`` headers), and the services refuse, before
doing anything, a request whose valid-until has passed or whose epoch is below
one they have seen for the run: status 412, outcome ``fenced`` in their log.
Such a refused request had no effect and gave its sender nothing, so the
checks below leave it out; the verdict counts those refusals separately
(``fenced``, with evidence), as information, not as a violation. Every other
request counts, whatever its answer: a replay that the idempotency key
deduplicated, a 400, an injected failure, a request never answered, and a
request with no fence headers at all (which the services serve as before).

The checks, each a count of violations with the evidence kept:

* **lost**: a run the ledger accepted (or a client was told was accepted)
  that is not DONE, PAUSED, FAILED or PARKED at the end;
* **unexpected endings**: FAILED or PARKED (the chaos app raises nothing, so
  only a fault can end a run so: a transient fault must never), or DONE
  without both effects acted on or without the final answer in the session.
  One park is expected: an answer to an approval of a version that had the
  approval tool, driven by a version without it (a drift park naming
  ``approve_order``), provided nothing of its order acted; and a run killed
  mid-charge that a version with another charge key template continues (a
  drift park naming ``journaled tool 'charge'``), provided its order was
  charged at most once. The runs paused on such a park's invocation end
  PARKED with it (their reason names it). Those are counted apart
  (``drift_parks``);
* **doubled effects**: more than one act acted on (a mutating request not
  refused as fenced, deduplicated or not) under one business key
  (``charge:<order>``, whatever a rekeyed template added after the order: a
  second charge of an order under a new key is a second charge): the journal
  must not even try twice;
* **calls after takeover**: a request (act or lookup) not refused as fenced,
  tagged with epoch ``e`` of a run, that the service received after epoch
  ``e + 1`` (or any later one) was claimed;
* **submits recorded twice**: an order whose message started more than one
  invocation: the soak sends each order's submit under an
  ``Idempotency-Key`` and sends it again when its answer is lost (a worker
  killed after the commit, a connection cut), so a second run of it is a
  retry the key did not catch;
* **double drives**: at the services, a request of epoch ``e`` not refused as
  fenced after one of a later epoch of the same run (two epochs interleaving);
  in the session, an event stamped with an older epoch after one with a newer
  epoch of that run;
* **order violations**: a session whose sequence numbers have a gap, whose
  runs' events interleave or come out of submission order, or where a function
  response comes before its call;
* **sleeps not woken once**: a durable sleep call (``durable_sleep``) that
  was not answered by exactly one wake-up (none: the timer was lost or never
  fired; two: it fired twice), or a message asking for a nap whose run never
  went to sleep;
* **approvals not answered once**: an approval call (``approve_order``) not
  answered by exactly one person's answer, a message asking for approval whose
  run never asked, or an effect of the order sent before its approval was in
  the session (the services' log, against the answer's store time);
* **reports not resumed once**: the same for a report job's call
  (``build_report``): answered by exactly one job result (``succeeded``),
  though the soak completes each job twice, and no effect before it;
* **sagas not finished once**: an order handed to the saga (``as a saga``)
  whose invocation recorded no saga, a saga left without its final status,
  or one whose acts disagree with it: COMMITTED needs the charge and the
  confirmation each created once and no refund; COMPENSATED needs no
  confirmation and a refund applied exactly when the charge was created;
  and an order out of stock must end COMPENSATED, any other COMMITTED;
* **ticks not fired once**: a schedule tick (:class:`TickRow`) whose run is
  not on the ledger, that is left PENDING or was SKIPPED (the soak's schedule
  allows overlap), a session of a tick with a run other than the tick's, or a
  gap in the ticks' times (a tick lost between two that fired);
* **ticks of an old definition**: a tick whose run started with an
  older app version's definition of the schedule than an earlier tick's (an
  old worker, restarting mid-rollout, rewrote the newer version's schedule);
* **claims by an older version**: a worker that drove (claimed RUNNING at an
  epoch: started, took over or continued) a run recorded under a newer app
  version than its own;
* **claims of a version not served**: a worker that drove a run of a version
  it does not serve (a pinned worker taking another version's run).

Clocks: the services stamp ``received_at`` with their wall clock, the observer
with the database's; in the soak both are the same machine's clock.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

TERMINAL = frozenset({"DONE", "PAUSED", "FAILED", "PARKED"})
EFFECT_PREFIXES = ("charge:", "notify:")
TICK_ORDER = "ORD-tick"
"""The order every tick of the app's schedule charges (``chaos.app.TICK_ORDER``)."""
ORDER_WORD = re.compile(r"\bORD-[A-Za-z0-9-]{1,60}\b")
"""An order as the chaos app's messages name it (``chaos.app.ORDER_RE``)."""
REKEYED_TOOL = "charge"
"""The journaled tool whose key template a rekeyed version changes (``chaos.app``)."""
CONTINUATION_PARKED = "its continuation, run "
"""How the reason of a run paused on an invocation whose continuation was parked begins."""
SLEEP_TOOL = "durable_sleep"
APPROVAL_TOOL = "approve_order"
APPROVAL_ASK = "with approval"
REPORT_TOOL = "build_report"
REPORT_ASK = "with a report"
SAGA_ASK = "as a saga"
OUT_OF_STOCK = "out of stock"
UNDO_SUFFIX = ":undo"


@dataclass(frozen=True)
class Request:
    """One request received by a fake service.

    Attributes:
        service: Which service (``payments``, ``notifications``).
        seq: Its place in the service's log.
        method: HTTP method.
        path: The request target.
        action: ``create``, an action name, or a read (``lookup``, ...).
        key: Its idempotency key (for a lookup: the key looked up).
        mutating: Whether it asks for an effect.
        worker: ``X-Caller-Worker``.
        run_id: ``X-Caller-Run`` (None if untagged).
        epoch: ``X-Caller-Epoch`` as an int (None if untagged).
        at: When the service received it (Unix seconds).
        outcome: What the service's log says it came to (``created``,
            ``replayed``, ``found``, ``fenced``, ...; None if never answered).
        reason: The error answer's reason code (``fence_expired``, ...), if any.
    """

    service: str
    seq: int
    method: str
    path: str
    action: str | None
    key: str | None
    mutating: bool
    worker: str | None
    run_id: str | None
    epoch: int | None
    at: float
    outcome: str | None = None
    reason: str | None = None

    @property
    def refused(self) -> bool:
        """Whether the service refused it as fenced off (it did nothing)."""
        return self.outcome == "fenced"

    @property
    def acted(self) -> bool:
        """A mutating request the service did not refuse as fenced (it may have acted)."""
        return self.mutating and not self.refused

    @classmethod
    def from_log(cls, service: str, record: Mapping[str, Any]) -> Request:
        """Reads one record of a service's ``GET /_requests``."""
        caller = record.get("caller") or {}
        epoch = caller.get("epoch")
        return cls(
            service=service,
            seq=int(record["seq"]),
            method=str(record["method"]),
            path=str(record["path"]),
            action=record.get("action"),
            key=record.get("key"),
            mutating=bool(record["mutating"]),
            worker=caller.get("worker"),
            run_id=caller.get("run") or None,
            epoch=int(epoch) if isinstance(epoch, str) and epoch.isdigit() else None,
            at=float(record["received_at"]),
            outcome=record.get("outcome"),
            reason=record.get("reason"),
        )


@dataclass(frozen=True)
class Claim:
    """A change of a run's epoch, owner or status, at the database's clock."""

    run_id: str
    epoch: int
    owner: str | None
    status: str
    at: float


@dataclass(frozen=True)
class RunRow:
    """A run as the ledger holds it at the end of the soak."""

    run_id: str
    user_id: str
    session_id: str
    invocation_id: str
    status: str
    owner: str | None
    epoch: int
    attempts: int
    last_error: str | None
    classification: str | None
    app_version: str | None = None


@dataclass(frozen=True)
class SagaRow:
    """A saga as the saga ledger holds it at the end of the soak."""

    saga_id: str
    name: str
    invocation_id: str
    status: str


@dataclass(frozen=True)
class TickRow:
    """A schedule tick as the ``schedule_ticks`` table holds it at the end of the soak."""

    schedule_name: str
    tick_key: str
    tick_at: float
    kind: str
    run_id: str
    session_id: str
    state: str


@dataclass(frozen=True)
class EventRow:
    """One stored event of a session (``data`` is the ADK event as JSON)."""

    user_id: str
    session_id: str
    seq: int
    invocation_id: str
    author: str
    data: Mapping[str, Any]

    @property
    def stamp(self) -> tuple[str | None, int | None]:
        """The run and epoch DurableRunner stamped on the event, if any."""
        meta = (self.data.get("custom_metadata") or {}).get("durable_adk") or {}
        epoch = meta.get("epoch")
        return meta.get("run_id"), int(epoch) if isinstance(epoch, int) else None

    def parts(self) -> list[Mapping[str, Any]]:
        """The parts of the event's content."""
        return list((self.data.get("content") or {}).get("parts") or [])


VIOLATIONS = (
    "lost",
    "unexpected endings",
    "doubled effects",
    "calls after takeover",
    "submits recorded twice",
    "double drives",
    "order violations",
    "sleeps not woken once",
    "approvals not answered once",
    "reports not resumed once",
    "sagas not finished once",
    "ticks not fired once",
    "ticks of an old definition",
    "claims by an older version",
    "claims of a version not served",
)


@dataclass
class Verdict:
    """Counts of each check, with a few lines of evidence per check."""

    runs: int = 0
    accepted: int = 0
    terminal: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    acts: int = 0
    sleeps: int = 0
    """Durable sleep calls in the sessions (each must wake once)."""
    approvals: int = 0
    sagas: dict[str, int] = field(default_factory=dict)
    reports: int = 0
    """Report job calls in the sessions (each answered by one job result)."""
    drift_parks: int = 0
    """Runs parked for drift as designed (a dropped approval tool, nothing acted; a
    rekeyed charge, charged at most once), with the runs paused on their invocations."""
    """Sagas by their final status."""
    """Approval calls in the sessions (each must be answered once, before any effect)."""
    ticks: int = 0
    """Schedule ticks recorded (each must start one run)."""
    versions: dict[str, int] = field(default_factory=dict)
    """Runs by the app version they were recorded under."""
    across_versions: int = 0
    """Drives of a run by a worker of a newer version (continued across a deploy)."""
    findings: dict[str, list[str]] = field(
        default_factory=lambda: {name: [] for name in VIOLATIONS}
    )
    fenced: list[str] = field(default_factory=list)
    """Requests the services refused as fenced off (information, not a violation)."""
    evidence: list[str] = field(default_factory=list)
    """With violations, what the records hold of the sessions they name (:func:`traces`)."""

    def count(self, name: str) -> int:
        """How many violations of one check were found."""
        return len(self.findings[name])

    @property
    def violations(self) -> int:
        """The total over every check."""
        return sum(len(found) for found in self.findings.values())


def claim_times(claims: Iterable[Claim]) -> dict[str, dict[int, float]]:
    """For each run, when each of its epochs was first seen (claimed)."""
    times: dict[str, dict[int, float]] = defaultdict(dict)
    for claim in claims:
        times[claim.run_id].setdefault(claim.epoch, claim.at)
    return times


def calls_after_takeover(requests: Iterable[Request], claims: Iterable[Claim]) -> list[str]:
    """Requests of an epoch received after a later epoch of the run was claimed.

    A request the service refused as fenced off is not one: it did nothing.
    """
    times = claim_times(claims)
    found = []
    for request in requests:
        if request.run_id is None or request.epoch is None or request.refused:
            continue
        later = [at for epoch, at in times.get(request.run_id, {}).items() if epoch > request.epoch]
        if later and request.at > min(later):
            found.append(
                f"{request.service} {request.method} {request.key} from {request.worker} "
                f"(run {request.run_id} epoch {request.epoch}) "
                f"{request.at - min(later):.3f}s after the takeover"
            )
    return found


def business_key(key: str) -> str:
    """An effect's business identity: ``charge:<order>`` for ``charge:<order>:v2`` too.

    A rekeyed deploy journals the same charge under another key; the
    services deduplicate by key, so only the order tells two charges apart.
    The schedule's order is charged by every tick under the key of the code
    that fires it (a new invocation each time, not a re-drive): its keys stay
    as they are.
    """
    prefix, sep, rest = key.partition(":")
    order = rest.split(":", 1)[0]
    if sep and prefix + sep in EFFECT_PREFIXES and order != TICK_ORDER:
        return prefix + sep + order
    return key


def doubled_effects(requests: Iterable[Request]) -> list[str]:
    """Business keys that more than one act asked for (refused as fenced: not an act)."""
    acts: dict[tuple[str, str], list[Request]] = defaultdict(list)
    for request in requests:
        # A compensation is retried under its own key until it is recorded:
        # the service applies it once (the saga check counts what it applied).
        if request.acted and request.key is not None and not request.key.endswith(UNDO_SUFFIX):
            acts[(request.service, business_key(request.key))].append(request)
    return [
        f"{service} {key}: {len(tries)} acts, from "
        + ", ".join(f"{r.worker}@{r.epoch}" for r in tries)
        for (service, key), tries in sorted(acts.items())
        if len(tries) > 1
    ]


def double_drives(requests: Iterable[Request], events: Iterable[EventRow]) -> list[str]:
    """Two epochs of one run active at once: at the services, or in the session log."""
    found = []
    by_run: dict[str, list[Request]] = defaultdict(list)
    for request in requests:
        if request.run_id is not None and request.epoch is not None and not request.refused:
            by_run[request.run_id].append(request)
    for run_id, tagged in sorted(by_run.items()):
        newest = -1
        for request in sorted(tagged, key=lambda r: r.at):
            assert request.epoch is not None
            if request.epoch < newest:
                found.append(
                    f"run {run_id}: {request.service} {request.key} by epoch {request.epoch} "
                    f"({request.worker}) after a call by epoch {newest}"
                )
            newest = max(newest, request.epoch)
    newest_in_log: dict[str, tuple[int, int]] = {}
    for event in events:
        stamped, epoch = event.stamp
        if stamped is None or epoch is None:
            continue
        seen = newest_in_log.get(stamped)
        if seen is not None and epoch < seen[0]:
            found.append(
                f"run {stamped}: event {event.seq} of session {event.session_id} stamped "
                f"epoch {epoch} after event {seen[1]} of epoch {seen[0]}"
            )
        if seen is None or epoch >= seen[0]:
            newest_in_log[stamped] = (epoch, event.seq)
    return found


def submits_recorded_twice(events: Sequence[EventRow]) -> list[str]:
    """Orders whose message started more than one invocation (the schedule's excepted)."""
    started: dict[str, dict[str, str]] = defaultdict(dict)
    for event in events:
        if event.author != "user":
            continue
        for order in ORDER_WORD.findall(asked_text(event)):
            if order != TICK_ORDER:
                started[order].setdefault(event.invocation_id, event.session_id)
    return [
        f"session {sorted(set(invocations.values()))[0]}: {order} started "
        f"{len(invocations)} invocations"
        for order, invocations in sorted(started.items())
        if len(invocations) > 1
    ]


def order_violations(events: Sequence[EventRow], runs: Sequence[RunRow]) -> list[str]:
    """Gaps, interleaved or reordered runs, and responses before their calls, per session."""
    found = []
    position = {run.invocation_id: index for index, run in enumerate(runs)}
    sessions: dict[tuple[str, str], list[EventRow]] = defaultdict(list)
    for event in events:
        sessions[(event.user_id, event.session_id)].append(event)
    for (_, session_id), log in sorted(sessions.items()):
        blocks: list[str] = []
        seqs = [event.seq for event in log]
        if seqs != list(range(1, len(seqs) + 1)):
            found.append(f"session {session_id}: sequence numbers {seqs[:20]} have a gap")
        for event in log:
            if not blocks or blocks[-1] != event.invocation_id:
                blocks.append(event.invocation_id)
        if len(blocks) != len(set(blocks)):
            found.append(f"session {session_id}: the events of its runs interleave: {blocks}")
        known = [position[b] for b in dict.fromkeys(blocks) if b in position]
        if known != sorted(known):
            found.append(f"session {session_id}: runs stored out of submission order")
        calls: set[str] = set()
        for event in log:
            for part in event.parts():
                if part.get("function_call"):
                    calls.add(str(part["function_call"].get("id")))
                answer = part.get("function_response")
                if answer and str(answer.get("id")) not in calls:
                    found.append(
                        f"session {session_id}: event {event.seq} answers call "
                        f"{answer.get('id')} before it was made"
                    )
    return found


def unwoken_sleeps(events: Sequence[EventRow]) -> list[str]:
    """Sleep calls not woken exactly once, and nap messages whose turn never slept."""
    found = []
    sessions: dict[tuple[str, str], list[EventRow]] = defaultdict(list)
    for event in events:
        sessions[(event.user_id, event.session_id)].append(event)
    for (_, session_id), log in sorted(sessions.items()):
        calls: list[str] = []
        woke: dict[str, int] = defaultdict(int)
        naps = 0
        for event in sorted(log, key=lambda e: e.seq):
            for part in event.parts():
                call = part.get("function_call") or {}
                answer = part.get("function_response") or {}
                if event.author == "user" and " nap " in f" {part.get('text') or ''} ":
                    naps += 1
                if call.get("name") == SLEEP_TOOL:
                    calls.append(str(call.get("id")))
                if (
                    event.author == "user"
                    and answer.get("name") == SLEEP_TOOL
                    and (answer.get("response") or {}).get("status") == "woke"
                ):
                    woke[str(answer.get("id"))] += 1
        for call_id in calls:
            if woke[call_id] != 1:
                found.append(f"session {session_id}: sleep {call_id} woke {woke[call_id]} times")
        if naps > len(calls):
            found.append(f"session {session_id}: {naps} nap(s) asked, {len(calls)} sleep call(s)")
    return found


@dataclass(frozen=True)
class Pause:
    """A kind of pause the chaos app makes: asked by a phrase, a call, an answer that ends it."""

    label: str
    ask: str
    tool: str
    key: str
    value: object


APPROVAL = Pause("approval", APPROVAL_ASK, APPROVAL_TOOL, "approved", True)
REPORT = Pause("report", REPORT_ASK, REPORT_TOOL, "status", "succeeded")


def not_answered_once(
    pause: Pause,
    events: Sequence[EventRow],
    requests: Sequence[Request],
    unasked: Mapping[str, bool] | None = None,
    parked: frozenset[str] = frozenset(),
) -> list[str]:
    """Pause calls not answered exactly once, asks never made, effects sent before the answer.

    In the session, the order's first effect call must come after the answer
    (sequence numbers). At the services, no effect of the order may be
    received before the answer's event was made (its ``timestamp``, the same
    machine's clock, never later than when it was stored): an effect's request
    is matched to its order by the business key (``charge:<order>``).
    ``unasked`` names the invocations recorded under a version whose app
    lacks the pause's tool (their asks go ahead with no call); ``parked`` the
    invocations whose answer was parked for drift (it never reached the
    session, by design).
    """
    found = []
    first_act: dict[str, float] = {}
    for request in requests:
        if request.acted and request.key is not None and ":" in request.key:
            order = business_key(request.key).split(":", 1)[1]
            first_act[order] = min(first_act.get(order, request.at), request.at)
    sessions: dict[tuple[str, str], list[EventRow]] = defaultdict(list)
    for event in events:
        sessions[(event.user_id, event.session_id)].append(event)
    for (_, session_id), log in sorted(sessions.items()):
        calls: dict[str, str] = {}
        invocation_of: dict[str, str] = {}
        answered: dict[str, list[tuple[int, float]]] = defaultdict(list)
        effect_calls: dict[str, int] = {}
        asks = 0
        for event in sorted(log, key=lambda e: e.seq):
            for part in event.parts():
                call = part.get("function_call") or {}
                answer = part.get("function_response") or {}
                if (
                    event.author == "user"
                    and pause.ask in str(part.get("text") or "")
                    and not (unasked or {}).get(event.invocation_id)
                ):
                    asks += 1
                if call.get("name") == pause.tool:
                    calls[str(call.get("id"))] = str((call.get("args") or {}).get("order_id"))
                    invocation_of[str(call.get("id"))] = event.invocation_id
                elif call.get("name") in ("charge", "notify"):
                    order = str((call.get("args") or {}).get("order_id"))
                    effect_calls.setdefault(order, event.seq)
                if (
                    event.author == "user"
                    and answer.get("name") == pause.tool
                    and (answer.get("response") or {}).get(pause.key) == pause.value
                ):
                    made = float(event.data.get("timestamp") or 0.0)
                    answered[str(answer.get("id"))].append((event.seq, made))
        for call_id, order in calls.items():
            answers = answered.get(call_id, [])
            if not answers and invocation_of[call_id] in parked:
                continue
            if len(answers) != 1:
                found.append(
                    f"session {session_id}: {pause.label} {call_id} answered {len(answers)}x"
                )
                continue
            seq, made = answers[0]
            if effect_calls.get(order, seq + 1) < seq:
                found.append(
                    f"session {session_id}: {order} called an effect before its {pause.label}"
                )
            if order in first_act and first_act[order] < made:
                found.append(
                    f"session {session_id}: {order} acted on {made - first_act[order]:.3f}s "
                    f"before its {pause.label} was made"
                )
        if asks > len(calls):
            found.append(
                f"session {session_id}: {asks} {pause.label}(s) asked, {len(calls)} call(s)"
            )
    return found


def asked_text(event: EventRow) -> str:
    """The text of an event's parts."""
    return " ".join(str(part.get("text") or "") for part in event.parts())


def sagas_not_finished_once(
    sagas: Sequence[SagaRow], events: Sequence[EventRow], requests: Sequence[Request]
) -> list[str]:
    """Saga orders without a saga, sagas left unfinished, and acts that disagree with the end."""
    found = []
    outcomes: dict[str, list[str]] = defaultdict(list)
    for request in requests:
        if request.key is not None and request.key.startswith("saga:"):
            outcomes[request.key].append(request.outcome or "unanswered")
    by_invocation = {saga.invocation_id: saga for saga in sagas}
    asked: dict[str, bool] = {}
    for event in events:
        text = asked_text(event).lower()
        if event.author == "user" and SAGA_ASK in text:
            asked[event.invocation_id] = OUT_OF_STOCK in text
    for invocation, out_of_stock in sorted(asked.items()):
        saga = by_invocation.get(invocation)
        if saga is None:
            found.append(f"invocation {invocation}: a saga was asked for, none was recorded")
            continue
        charge = f"saga:{saga.saga_id}:take_payment"
        charged = outcomes[charge].count("created")
        refunded = outcomes[charge + UNDO_SUFFIX].count("applied")
        confirmed = outcomes[f"saga:{saga.saga_id}:confirm"].count("created")
        acts = f"charged {charged}, refunded {refunded}, confirmed {confirmed}"
        expected = "COMPENSATED" if out_of_stock else "COMMITTED"
        if saga.status != expected:
            found.append(f"saga {saga.saga_id} ended {saga.status}, not {expected} ({acts})")
        elif saga.status == "COMMITTED" and (charged, refunded, confirmed) != (1, 0, 1):
            found.append(f"saga {saga.saga_id} COMMITTED but {acts}")
        elif saga.status == "COMPENSATED" and (confirmed != 0 or refunded != charged):
            found.append(f"saga {saga.saga_id} COMPENSATED but {acts}")
    return found


def ticks_not_fired_once(
    ticks: Sequence[TickRow], runs: Sequence[RunRow], every: float | None
) -> list[str]:
    """Ticks without exactly their one run, and gaps between the ticks' times."""
    found = []
    by_id = {run.run_id: run for run in runs}
    runs_of_session: dict[str, list[str]] = defaultdict(list)
    for run in runs:
        runs_of_session[run.session_id].append(run.run_id)
    for tick in ticks:
        name = f"tick {tick.schedule_name} {tick.tick_key}"
        if tick.state != "SUBMITTED":
            found.append(f"{name} left {tick.state}")
        elif tick.run_id not in by_id:
            found.append(f"{name}: its run {tick.run_id} is not on the ledger")
        others = [r for r in runs_of_session.get(tick.session_id, []) if r != tick.run_id]
        if others:
            found.append(f"{name}: its session {tick.session_id} also holds runs {others[:3]}")
    if every:
        by_schedule: dict[str, list[float]] = defaultdict(list)
        for tick in ticks:
            if tick.kind == "tick":
                by_schedule[tick.schedule_name].append(tick.tick_at)
        for name, times in sorted(by_schedule.items()):
            ordered = sorted(times)
            for before, after in itertools.pairwise(ordered):
                if abs((after - before) - every) > 1e-3:
                    found.append(
                        f"schedule {name}: {after - before:.3f}s between the ticks at "
                        f"{before:.3f} and {after:.3f} (every {every:g}s): ticks lost or doubled"
                    )
    return found


def _drives(
    claims: Iterable[Claim], runs: Sequence[RunRow], workers: Mapping[str, T]
) -> Iterator[tuple[Claim, str, T]]:
    """Each drive of a versioned run by a known worker, once per (run, epoch).

    A drive is a claim that made the run RUNNING at a new epoch (started,
    took over or continued it). The owner of a QUEUED row at epoch 0 only
    submitted it: an old worker may queue an answer to a newer run (its
    resumer does, for a worker of the run's version to drive). Yields the
    claim, the run's version and what ``workers`` says of the claim's owner.
    """
    run_version = {run.run_id: run.app_version for run in runs if run.app_version}
    seen: set[tuple[str, int]] = set()
    for claim in claims:
        wanted = run_version.get(claim.run_id)
        mine = workers.get(claim.owner or "")
        if claim.status != "RUNNING" or claim.epoch < 1 or wanted is None or mine is None:
            continue
        if (claim.run_id, claim.epoch) not in seen:
            seen.add((claim.run_id, claim.epoch))
            yield claim, wanted, mine


def claims_by_older_versions(
    claims: Iterable[Claim], runs: Sequence[RunRow], versions: Mapping[str, str]
) -> list[str]:
    """Drives of a run by a worker whose app version is older than the run's."""
    return [
        f"worker {claim.owner} ({mine}) claimed run {claim.run_id} of {wanted} "
        f"(epoch {claim.epoch}, {claim.status})"
        for claim, wanted, mine in _drives(claims, runs, versions)
        if _version_key(mine) < _version_key(wanted)
    ]


def claims_not_served(
    claims: Iterable[Claim], runs: Sequence[RunRow], serves: Mapping[str, frozenset[str]]
) -> list[str]:
    """Drives of a run by a worker that does not serve the run's version (pinned or not)."""
    return [
        f"worker {claim.owner} (serves {', '.join(sorted(served))}) claimed run "
        f"{claim.run_id} of {wanted} (epoch {claim.epoch})"
        for claim, wanted, served in _drives(claims, runs, serves)
        if wanted not in served
    ]


def drives_by_newer_versions(
    claims: Iterable[Claim], runs: Sequence[RunRow], versions: Mapping[str, str]
) -> set[tuple[str, int]]:
    """(run, epoch) of each drive by a worker of a newer version than the run's (information)."""
    return {
        (claim.run_id, claim.epoch)
        for claim, wanted, mine in _drives(claims, runs, versions)
        if _version_key(mine) > _version_key(wanted)
    }


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def order_of_run(run: RunRow, events: Iterable[EventRow]) -> str | None:
    """The order a run was about: the ``ORD-...`` of its first user event."""
    for event in events:
        if event.invocation_id == run.invocation_id and event.author == "user":
            for part in event.parts():
                text = str(part.get("text") or "")
                for word in text.split():
                    if word.startswith("ORD-"):
                        return word
    return None


def drift_park(
    run: RunRow, events: Sequence[EventRow], acted: set[str], charges: Counter[str] | None = None
) -> bool:
    """Whether a PARKED run is a designed drift park: of an approval the driving code
    dropped (nothing of its order acted), or of a charge a rekeyed version keys anew
    (charged at most once); or a run paused on the invocation of one.

    ``acted`` holds the business keys acted on; ``charges`` counts the charge acts
    of each order.
    """
    reason = run.last_error or ""
    if reason.startswith(CONTINUATION_PARKED):
        reason = reason[reason.find("drift:") :] if "drift:" in reason else ""
    if not reason.startswith("drift:"):
        return False
    order = order_of_run(run, events)
    if order is None:
        return False
    if f"tool '{APPROVAL_TOOL}'" in reason:
        return not any(p + order in acted for p in EFFECT_PREFIXES)
    if f"journaled tool '{REKEYED_TOOL}'" in reason:
        return order == TICK_ORDER or (charges or Counter())[order] <= 1
    return False


def _acted(effect: str, acted: set[str]) -> bool:
    """Whether ``effect`` (``charge:<order>``) acted. The schedule's order keeps each
    code's key (:func:`business_key`): a tick run by a rekeyed version acts under
    ``charge:ORD-tick:v2``, and that is its charge."""
    if effect in acted:
        return True
    return effect.endswith(":" + TICK_ORDER) and any(k.startswith(effect + ":") for k in acted)


def unexpected_endings(
    runs: Sequence[RunRow],
    events: Sequence[EventRow],
    requests: Sequence[Request],
    drift_parks: list[str] | None = None,
) -> list[str]:
    """FAILED or PARKED runs, and DONE runs without both effects or their final answer.

    The designed drift parks (:func:`drift_park`) are appended to
    ``drift_parks`` instead.
    """
    found = []
    acted = {business_key(r.key) for r in requests if r.acted and r.key is not None}
    charges = Counter(
        business_key(r.key).split(":", 1)[1]
        for r in requests
        if r.acted and r.key is not None and r.key.startswith("charge:")
    )
    by_invocation: dict[str, list[EventRow]] = defaultdict(list)
    for event in events:
        by_invocation[event.invocation_id].append(event)
    for run in runs:
        if (
            run.status == "PARKED"
            and drift_parks is not None
            and drift_park(run, by_invocation.get(run.invocation_id, []), acted, charges)
        ):
            drift_parks.append(run.run_id)
            continue
        if run.status in ("FAILED", "PARKED"):
            found.append(f"run {run.run_id} {run.status}: {(run.last_error or '')[:160]}")
            continue
        if run.status != "DONE":
            continue
        mine = by_invocation.get(run.invocation_id, [])
        order = order_of_run(run, mine)
        if order is None:
            found.append(f"run {run.run_id} DONE without its user message in the session")
            continue
        if any(SAGA_ASK in asked_text(e).lower() for e in mine if e.author == "user"):
            continue  # the saga's own check judges its acts
        missing = [p + order for p in EFFECT_PREFIXES if not _acted(p + order, acted)]
        said = " ".join(str(p.get("text") or "") for e in mine for p in e.parts())
        if missing:
            found.append(f"run {run.run_id} DONE but never acted: {missing}")
        elif f"Order {order} charged and confirmed." not in said:
            found.append(f"run {run.run_id} DONE without its final answer")
    return found


def fenced_refusals(requests: Iterable[Request], claims: Iterable[Claim]) -> list[str]:
    """Requests the services refused as fenced off, each with how late it came (information)."""
    times = claim_times(claims)
    found = []
    for request in requests:
        if not request.refused:
            continue
        later = [
            at
            for epoch, at in times.get(request.run_id or "", {}).items()
            if request.epoch is not None and epoch > request.epoch
        ]
        when = (
            f"{request.at - min(later):.3f}s after the takeover"
            if later and request.at > min(later)
            else "before any takeover"
        )
        found.append(
            f"{request.service} {request.method} {request.key} from {request.worker} "
            f"(run {request.run_id} epoch {request.epoch}) refused ({request.reason}), {when}"
        )
    return found


def lost_runs(runs: Sequence[RunRow], accepted: Iterable[str]) -> list[str]:
    """Accepted runs that are not terminal, or that the ledger does not know."""
    known = {run.run_id for run in runs}
    found = [
        f"run {run.run_id} still {run.status} (owner {run.owner}, epoch {run.epoch})"
        for run in runs
        if run.status not in TERMINAL
    ]
    found.extend(
        f"run {rid} was accepted but is not on the ledger" for rid in accepted if rid not in known
    )
    return found


def calls_of(tool: str, events: Iterable[EventRow]) -> int:
    """How many calls of ``tool`` the sessions hold."""
    return sum(
        1
        for event in events
        for part in event.parts()
        if (part.get("function_call") or {}).get("name") == tool
    )


def judge(
    *,
    runs: Sequence[RunRow],
    accepted: Sequence[str],
    claims: Sequence[Claim],
    events: Sequence[EventRow],
    requests: Sequence[Request],
    ticks: Sequence[TickRow] = (),
    tick_every: float | None = None,
    versions: Mapping[str, str] | None = None,
    serves: Mapping[str, frozenset[str]] | None = None,
    sagas: Sequence[SagaRow] = (),
    without_approvals: frozenset[str] = frozenset(),
) -> Verdict:
    """Every check over the soak's records.

    ``tick_every`` is the schedule's interval, if any; ``versions`` the app
    version each worker id ran (``1.0``, ``1.1``: dotted integers);
    ``serves`` the versions whose runs each worker id takes;
    ``without_approvals`` the versions whose app has no approval tool.
    """
    verdict = Verdict(runs=len(runs), accepted=len(set(accepted)))
    for run in runs:
        verdict.by_status[run.status] = verdict.by_status.get(run.status, 0) + 1
    verdict.terminal = sum(1 for run in runs if run.status in TERMINAL)
    verdict.acts = sum(1 for r in requests if r.acted)
    verdict.sleeps = calls_of(SLEEP_TOOL, events)
    verdict.fenced = fenced_refusals(requests, claims)
    verdict.findings["lost"] = lost_runs(runs, accepted)
    parks: list[str] = []
    verdict.findings["unexpected endings"] = unexpected_endings(runs, events, requests, parks)
    verdict.drift_parks = len(parks)
    parked = frozenset(run.invocation_id for run in runs if run.run_id in set(parks))
    verdict.findings["doubled effects"] = doubled_effects(requests)
    verdict.findings["calls after takeover"] = calls_after_takeover(requests, claims)
    verdict.findings["submits recorded twice"] = submits_recorded_twice(events)
    verdict.findings["double drives"] = double_drives(requests, events)
    verdict.findings["order violations"] = order_violations(events, runs)
    verdict.findings["sleeps not woken once"] = unwoken_sleeps(events)
    verdict.approvals = calls_of(APPROVAL_TOOL, events)
    unasked = {run.invocation_id: run.app_version in without_approvals for run in runs}
    verdict.findings["approvals not answered once"] = not_answered_once(
        APPROVAL, events, requests, unasked, parked
    )
    verdict.reports = calls_of(REPORT_TOOL, events)
    verdict.findings["reports not resumed once"] = not_answered_once(REPORT, events, requests)
    verdict.sagas = dict(sorted(Counter(saga.status for saga in sagas).items()))
    verdict.findings["sagas not finished once"] = sagas_not_finished_once(sagas, events, requests)
    verdict.ticks = len(ticks)
    verdict.findings["ticks not fired once"] = ticks_not_fired_once(ticks, runs, tick_every)
    verdict.findings["ticks of an old definition"] = ticks_of_old_definitions(ticks, events)
    for run in runs:
        label = run.app_version or "none"
        verdict.versions[label] = verdict.versions.get(label, 0) + 1
    verdict.findings["claims by an older version"] = claims_by_older_versions(
        claims, runs, versions or {}
    )
    verdict.findings["claims of a version not served"] = claims_not_served(
        claims, runs, serves or {}
    )
    verdict.across_versions = len(drives_by_newer_versions(claims, runs, versions or {}))
    if verdict.violations:
        verdict.evidence = traces(verdict.findings, runs, claims, events, requests)
    return verdict


TICK_OF_RE = re.compile(r"\bTick schedule of (\d+)\.(\d+)\.")


def ticks_of_old_definitions(ticks: Sequence[TickRow], events: Sequence[EventRow]) -> list[str]:
    """Ticks fired with an older version's definition after a newer one's fired.

    The chaos app's ``tick`` message names the version whose code declared
    it. Versions only move forward in the soak, so once a tick fired with
    version ``1.k``'s definition, a later tick carrying an earlier version's
    means an old worker rewrote the newer version's schedule.
    """
    first_text: dict[str, str] = {}
    for event in sorted(events, key=lambda e: (e.session_id, e.seq)):
        if event.author == "user" and event.session_id not in first_text:
            texts = [str(p["text"]) for p in event.parts() if p.get("text")]
            if texts:
                first_text[event.session_id] = texts[0]
    found: list[str] = []
    newest: tuple[tuple[int, int], str] | None = None
    for tick in sorted(ticks, key=lambda t: t.tick_at):
        match = TICK_OF_RE.search(first_text.get(tick.session_id, ""))
        if tick.kind != "tick" or match is None:
            continue
        version = (int(match.group(1)), int(match.group(2)))
        if newest is not None and version < newest[0]:
            found.append(
                f"tick {tick.tick_key} fired with the definition of {version[0]}.{version[1]} "
                f"after tick {newest[1]} fired a newer one's"
            )
        elif newest is None or version > newest[0]:
            newest = (version, tick.tick_key)
    return found


def event_row(row: Mapping[str, Any]) -> EventRow:
    """An :class:`EventRow` from a ``chaos_events`` row."""
    return EventRow(
        user_id=str(row["user_id"]),
        session_id=str(row["session_id"]),
        seq=int(row["seq"]),
        invocation_id=str(row["invocation_id"]),
        author=str(row["author"]),
        data=json.loads(row["data"]),
    )


SESSION_RE = re.compile(r"\bsession (\S+?):")
EVIDENCE_SESSIONS = 3
"""How many sessions a failing verdict traces (the first named by its findings)."""


def traced_sessions(findings: Mapping[str, Sequence[str]]) -> list[str]:
    """The sessions a failing verdict traces: the first the findings name, in their order."""
    named: list[str] = []
    for lines in findings.values():
        for line in lines:
            found = SESSION_RE.search(line)
            if found and found.group(1) not in named:
                named.append(found.group(1))
    return named[:EVIDENCE_SESSIONS]


def _part_summary(part: Mapping[str, Any]) -> str:
    call = part.get("function_call")
    answer = part.get("function_response")
    if call:
        return f"call {call.get('name')}#{str(call.get('id'))[-8:]}({call.get('args')})"
    if answer:
        return f"answer {answer.get('name')}#{str(answer.get('id'))[-8:]}={answer.get('response')}"
    return repr(str(part.get("text") or "")[:70])


def traces(
    findings: Mapping[str, Sequence[str]],
    runs: Sequence[RunRow],
    claims: Sequence[Claim],
    events: Sequence[EventRow],
    requests: Sequence[Request],
) -> list[str]:
    """What the records hold of the first sessions the findings name: a failure's evidence.

    For each session: its events in log order (sequence number, time, author,
    the run and epoch stamped on it, what each part says), its runs as the
    ledger ends them, each change of their epoch, owner or status, and the
    services' requests of the session's order. Times are seconds after the
    session's first event.
    """
    out: list[str] = []
    for session_id in traced_sessions(findings):
        log = sorted((e for e in events if e.session_id == session_id), key=lambda e: e.seq)
        start = min((float(e.data.get("timestamp") or 0.0) for e in log), default=0.0)
        out.append(f"session {session_id}: {len(log)} events")
        orders: set[str] = set()
        for event in log:
            run_id, epoch = event.stamp
            at = float(event.data.get("timestamp") or 0.0) - start
            parts = "; ".join(_part_summary(p) for p in event.parts()) or "(no content)"
            orders.update(ORDER_WORD.findall(parts))
            out.append(
                f"  #{event.seq} {at:+.3f}s {event.author} inv {event.invocation_id[-8:]} "
                f"run {str(run_id)[-8:]}@{epoch}: {parts}"
            )
        mine = [run for run in runs if run.session_id == session_id]
        for run in mine:
            out.append(
                f"  run {run.run_id[-8:]} {run.status} epoch {run.epoch} by {run.owner} "
                f"v{run.app_version} attempts {run.attempts} "
                f"({run.classification}; {str(run.last_error)[:120]})"
            )
        ids = {run.run_id for run in mine}
        for claim in claims:
            if claim.run_id in ids:
                out.append(
                    f"  claim {claim.run_id[-8:]} epoch {claim.epoch} {claim.status} by "
                    f"{claim.owner} at {claim.at - start:+.3f}s"
                )
        for request in requests:
            if request.key and any(order in request.key for order in orders):
                out.append(
                    f"  {request.service} {request.method} {request.key} from {request.worker} "
                    f"run {str(request.run_id)[-8:]}@{request.epoch} at "
                    f"{request.at - start:+.3f}s: {request.outcome}"
                )
    return out
