"""The agent of the chaos soak: two journaled effects per run, every outside call tagged.

``durable-adk serve durable_adk.chaos.app:app`` serves it. Each user
message names an order (``order ORD-17``); the scripted model then, on every
turn of any session, takes the first step whose answer the turn lacks:

1. calls ``charge(order_id)``: a charge at the fake ``payments`` service,
   journaled under ``charge:<order>`` with a lookup by key;
2. then ``notify(order_id)``: a message at the fake ``notifications``
   service, journaled under ``notify:<order>`` with a lookup by key;
3. says ``Order <order> charged and confirmed.``

A message that also says ``nap <seconds>`` first puts the run to sleep:
the model calls ``durable_sleep(seconds=...)`` (a durable timer, no worker
holding the run, which ends ``PAUSED`` after the model says
``Order <order> waits <seconds> s.``), and once any worker's waker has
answered the call with the wake-up, the turn goes on with step 1.

A message that says ``with approval`` first waits for a person: the model
calls ``approve_order(order_id=...)``, a long-running tool (it says
``Order <order> waits for approval.`` and the run ends ``PAUSED``, the call
in the interrupts inbox); once someone answers the call with
``{"approved": true}`` (the soak does, through ``POST /v1/interrupts/...``
of any worker), the turn goes on with step 1. No effect is sent before that
answer is in the session.

A message that says ``with a report`` first has a report built: the model
calls ``build_report(order_id=...)``, a long-running tool on the job table
(job ``report:<order>``; it says ``Order <order> waits for its report.`` and
the run ends ``PAUSED``); once the job is completed (the soak does, through
``POST /v1/jobs/{job_id}/complete`` of any worker, twice, as a retrying
webhook would) a worker's resumer answers the call with the result, and the
turn goes on with step 1.

A message that says ``as a saga`` hands the order to the ``order_saga``
sub-agent (the model calls ``transfer_to_agent``), a
:class:`~durable_adk.adk.tools.saga_agent.SagaSequence` of four stages: ``intake``
(puts the order in the session state), ``take_payment`` (a charge at
``payments`` under the saga's own key, with a lookup; undone by a refund),
``check_stock`` (fails when the message also says ``out of stock``: the saga
then refunds the charge) and ``confirm`` (a message at ``notifications``,
the pivot: it cannot be undone). The saga ends COMMITTED (charged and
confirmed once) or COMPENSATED (charged and refunded once, never confirmed).

With ``DURABLE_ADK_CHAOS_TICK_EVERY`` set (seconds), the app also declares a
schedule, ``tick`` (:func:`durable_adk_schedules`): every that many seconds
each tick starts one run, in a session of its own, with the message for order
``ORD-tick`` (overlap ``allow``, catch-up ``all``, a second of jitter). Its
effects are journaled under the same keys every tick, so only the first tick
acts; the soak checks that each tick started exactly one run and that no tick
was left out.

Every request a tool sends (the effect and the journal's lookup) carries who
sends it: ``X-Caller-Worker`` (the worker process), ``X-Caller-Run`` and
``X-Caller-Epoch`` (the run and the fencing epoch its drive holds, read from
the run stamp ADK passes in ``run_config.custom_metadata``). The fake services
log every request with those headers before handling it, so the soak can tell
which epoch of which run called out, and when.

Every request also carries the drive's fence (``Durable-Fence-Run``,
``Durable-Fence-Epoch``, ``Durable-Fence-Valid-Until``, from
:func:`durable_adk.fencing.fence.fence_headers`, which refuses to send once the lease
is not trusted), and the services refuse a request whose valid-until has
passed or whose epoch is older than one they have seen for the run (412): the
tool then raises :class:`durable_adk.errors.FenceRefused`, which the journal
takes as "did not act".

Environment (set by the soak for each worker it starts):

* ``DURABLE_ADK_CHAOS_PAYMENTS``, ``DURABLE_ADK_CHAOS_NOTIFY``: the services' URLs;
* ``DURABLE_ADK_CHAOS_WORKER``: the worker's name, sent as ``X-Caller-Worker``;
* ``DURABLE_ADK_CHAOS_TOOL_SECONDS``: how long each tool works before its
  outside call (default 0.2), so that faults land inside tools;
* ``DURABLE_ADK_CHAOS_TICK_EVERY``: if set, the ``tick`` schedule's interval;
* ``DURABLE_ADK_CHAOS_TICK_OF``: the app version whose code this is; the
  ``tick`` schedule's message names it (``Tick schedule of 1.2.``), so the
  soak sees which version's definition fired each tick;
* ``DURABLE_ADK_CHAOS_NEWER``: if set, the agent has one more tool (``audit``,
  never called), so its definition, and the fingerprint a worker records and
  compares, differs from the plain app's: the soak's deploys start newer
  versions with it, and every run continued across the deploy goes through
  the drift check (which must find nothing missing);
* ``DURABLE_ADK_CHAOS_DROP``: if set, the app has no ``approve_order`` tool
  and orders go ahead without approval: a deploy that drops what older runs
  refer to. An older run paused on an approval that such a worker continues
  is parked by the drift check, before anything acts;
* ``DURABLE_ADK_CHAOS_REKEY``: if set, ``charge`` is journaled under
  ``charge:{order_id}:v2`` instead of ``charge:{order_id}``: a redeploy that
  changed a journaled key template. An older run whose charge is in the
  journal under the old key and not answered in its log (a worker killed
  mid-charge) that such a worker continues is parked by the drift check
  before anything acts; charging it again under the new key would be a
  second charge of the order, which the verdict counts at the payments
  service whatever the key;
* ``DURABLE_ADK_CHAOS_MARKER_DIR``: if set, each tool announces itself there
  (a file ``<run>.<epoch>.<tool>``) as it starts its work, so a test can freeze
  a worker exactly while one of its tools is mid-way;
* ``DURABLE_ADK_CHAOS_GATE``: if set (with the marker dir), each tool, after
  its work, waits until a file ``<marker>.go`` exists before it calls out, so
  a test can cut a worker's network first and have it send into the cut.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, overload

from google.adk.agents import BaseAgent, LlmAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.models.llm_request import LlmRequest
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from typing_extensions import override

from durable_adk import errors
from durable_adk.adk.loops.sleep import SLEEP_TOOL_NAME, sleep_tool
from durable_adk.adk.services.sessions import RUN_METADATA_KEY
from durable_adk.adk.tools.journaling import journaled
from durable_adk.adk.tools.long_running import long_running_tool
from durable_adk.adk.tools.saga_agent import SagaSequence, SagaStage
from durable_adk.fencing.fence import FENCE_REFUSED_STATUS, current_fence, fence_headers
from durable_adk.schedules import Schedule
from durable_adk.testing.scripted_model import Call, Say, ScriptedModel, Step, Turn

APP_NAME = "chaos"
PAYMENTS_ENV = "DURABLE_ADK_CHAOS_PAYMENTS"
NOTIFY_ENV = "DURABLE_ADK_CHAOS_NOTIFY"
WORKER_ENV = "DURABLE_ADK_CHAOS_WORKER"
TOOL_SECONDS_ENV = "DURABLE_ADK_CHAOS_TOOL_SECONDS"
MARKER_DIR_ENV = "DURABLE_ADK_CHAOS_MARKER_DIR"
GATE_ENV = "DURABLE_ADK_CHAOS_GATE"
TICK_EVERY_ENV = "DURABLE_ADK_CHAOS_TICK_EVERY"
NEWER_ENV = "DURABLE_ADK_CHAOS_NEWER"
DROP_ENV = "DURABLE_ADK_CHAOS_DROP"
REKEY_ENV = "DURABLE_ADK_CHAOS_REKEY"
TICK_SCHEDULE = "tick"
TICK_ORDER = "ORD-tick"
TICK_OF_ENV = "DURABLE_ADK_CHAOS_TICK_OF"

CALLER_WORKER = "X-Caller-Worker"
CALLER_RUN = "X-Caller-Run"
CALLER_EPOCH = "X-Caller-Epoch"

CHARGES = "charges"
NOTIFICATIONS = "notifications"
ORDER_RE = re.compile(r"\bORD-[A-Za-z0-9-]{1,60}\b")
NAP_RE = re.compile(r"\bnap (\d{1,4}(?:\.\d{1,3})?)\b")
APPROVAL_RE = re.compile(r"\bwith approval\b")
APPROVAL_TOOL = "approve_order"
SAGA_RE = re.compile(r"\bas a saga\b", re.IGNORECASE)
REPORT_RE = re.compile(r"\bwith a report\b")
REPORT_TOOL = "build_report"
REPORT_PREFIX = "report:"
SAGA_NAME = "order_saga"
OUT_OF_STOCK = "out of stock"

# Who calls out: set for each tool call by the agent's before-tool callback, in
# the tool's own task, so the journal's lookup (which gets only the key) sends
# the same tags as the effect.
_caller: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "durable_adk_chaos_caller", default=None
)
# The tool's marker file (when markers are on), for the gate.
_marker: contextvars.ContextVar[Path | None] = contextvars.ContextVar(
    "durable_adk_chaos_marker", default=None
)


class OutsideCallFailed(RuntimeError):
    """A fake service gave no answer or an unexpected one."""


def caller_headers(tool_context: ToolContext) -> dict[str, str]:
    """The ``X-Caller-*`` headers of a tool call: worker, run and epoch."""
    invocation = tool_context.get_invocation_context()
    metadata = (invocation.run_config.custom_metadata or {}) if invocation.run_config else {}
    stamp = metadata.get(RUN_METADATA_KEY)
    stamp = stamp if isinstance(stamp, dict) else {}
    return _tags(stamp.get("run_id", ""), stamp.get("epoch", ""))


def _tags(run_id: object, epoch: object) -> dict[str, str]:
    """The ``X-Caller-*`` headers: this worker, and the run and epoch that call out."""
    return {
        CALLER_WORKER: os.environ.get(WORKER_ENV, "unknown"),
        CALLER_RUN: str(run_id),
        CALLER_EPOCH: str(epoch),
    }


def _tag_call(tool: BaseTool, args: dict[str, Any], tool_context: ToolContext) -> None:
    _caller.set(caller_headers(tool_context))
    marker_dir = os.environ.get(MARKER_DIR_ENV)
    if marker_dir:
        tags = _caller.get() or {}
        name = f"{tags[CALLER_RUN]}.{tags[CALLER_EPOCH]}.{tool.name}"
        marker = Path(marker_dir, name)
        marker.write_text(str(os.getpid()), encoding="utf-8")
        _marker.set(marker)


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy


def _request_timeout() -> float:
    """Seconds a request may wait for its connection and answer.

    Long enough for a connection the soak's partition holds to be delivered
    when it heals (the services refuse it then, if its fence is stale). A
    gated tool's request is held on purpose until a takeover and the
    rescuer's own charge are over, which can take longer than the SYN
    retransmit at 15 s on a loaded machine: the next ones go at 31 and 63 s,
    so the gated request waits for those rather than giving up at 30 s.
    """
    return 120.0 if os.environ.get(GATE_ENV) else 30.0


def _request(
    method: str, url: str, *, payload: dict[str, Any] | None = None, key: str | None = None
) -> tuple[int, Any]:
    # The last moment before the request leaves: a worker frozen past its
    # lease while the tool prepared refuses here, on waking, whatever ran first;
    # otherwise the fence goes with the request, for the service to check.
    headers = {"Accept": "application/json", **(_caller.get() or {}), **fence_headers()}
    data = None
    if payload is not None:
        data = json.dumps(payload).encode("utf-8")
        headers["Content-Type"] = "application/json"
    if key is not None:
        headers["Idempotency-Key"] = key
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with _OPENER.open(request, timeout=_request_timeout()) as answer:
            return int(answer.status), json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as err:
        with err:
            body = err.read().decode("utf-8", errors="replace")
        if err.code == FENCE_REFUSED_STATUS:
            raise errors.FenceRefused(f"{method} {url} refused as fenced off: {body:.200}") from err
        return err.code, body
    except (OSError, ValueError) as err:
        raise OutsideCallFailed(f"{method} {url}: no answer ({err})") from err


def _base(env: str) -> str:
    url = os.environ.get(env)
    if not url:
        raise errors.InvalidArgument(f"the chaos app needs {env} (a fake service's URL)")
    return url.rstrip("/")


def _create(env: str, collection: str, payload: dict[str, Any], key: str) -> dict[str, Any]:
    status, body = _request("POST", f"{_base(env)}/{collection}", payload=payload, key=key)
    if status not in (200, 201) or not isinstance(body, dict):
        raise OutsideCallFailed(f"POST /{collection} answered {status}: {body!r:.200}")
    return body


def _find(env: str, collection: str, key: str) -> dict[str, Any] | None:
    quoted = urllib.parse.quote(key, safe="")
    status, body = _request("GET", f"{_base(env)}/{collection}/by-key/{quoted}")
    if status == 404:
        return None
    if status == 200 and isinstance(body, dict):
        return body
    if status == 501:
        raise errors.LookupUnavailable(f"{collection} offers no lookup")
    raise OutsideCallFailed(f"GET /{collection}/by-key answered {status}: {body!r:.200}")


async def _work() -> None:
    await asyncio.sleep(float(os.environ.get(TOOL_SECONDS_ENV, "0.2")))
    marker = _marker.get()
    if marker is not None and os.environ.get(GATE_ENV):
        gate = marker.with_name(marker.name + ".go")
        while not gate.exists():  # noqa: ASYNC110 - a file another process makes
            await asyncio.sleep(0.02)  # cancelled with the drive if the lease is lost meanwhile


def amount_of(order_id: str) -> float:
    """The amount charged for an order (a pure function of its id)."""
    return float(10 + sum(map(ord, order_id)) % 90)


def _find_charge(idempotency_key: str) -> dict[str, Any] | None:
    return _find(PAYMENTS_ENV, CHARGES, idempotency_key)


def _find_notification(idempotency_key: str) -> dict[str, Any] | None:
    return _find(NOTIFY_ENV, NOTIFICATIONS, idempotency_key)


async def _charge(order_id: str, idempotency_key: str) -> dict[str, Any]:
    """Charges the customer for the order (once, whatever happens)."""
    await _work()
    payload = {"order_id": order_id, "customer": "chaos", "amount": amount_of(order_id)}
    return await asyncio.to_thread(_create, PAYMENTS_ENV, CHARGES, payload, idempotency_key)


CHARGE_KEY = "charge:{order_id}"
"""The charge's key template; a rekeyed deploy (``DURABLE_ADK_CHAOS_REKEY``) adds ``:v2``."""

charge = journaled(key=CHARGE_KEY, lookup=_find_charge, name="charge")(_charge)


def charge_tool() -> Any:
    """``charge``, keyed as this worker's code keys it (see ``DURABLE_ADK_CHAOS_REKEY``)."""
    if not os.environ.get(REKEY_ENV):
        return charge
    return journaled(key=CHARGE_KEY + ":v2", lookup=_find_charge, name="charge")(_charge)


@journaled(key="notify:{order_id}", lookup=_find_notification)
async def notify(order_id: str, idempotency_key: str) -> dict[str, Any]:
    """Tells the customer the order is charged (once, whatever happens)."""
    await _work()
    payload = {"to": f"{order_id.lower()}@chaos.example", "message": f"{order_id} is charged."}
    return await asyncio.to_thread(_create, NOTIFY_ENV, NOTIFICATIONS, payload, idempotency_key)


def _this_turn(request: LlmRequest) -> list[Any]:
    """The contents since the last user message that names an order."""
    contents = list(request.contents)
    for index in range(len(contents) - 1, -1, -1):
        content = contents[index]
        if content.role == "user" and any(
            part.text and ORDER_RE.search(part.text) for part in content.parts or ()
        ):
            return contents[index:]
    return contents


def order_of(request: LlmRequest) -> str:
    """The order named by the last user message of the request."""
    for content in _this_turn(request)[:1]:
        for part in content.parts or ():
            if part.text and (found := ORDER_RE.search(part.text)):
                return found.group(0)
    return "ORD-unknown"


def nap_of(request: LlmRequest) -> float | None:
    """The seconds the last user message naming an order asks the run to sleep first, if any."""
    for content in _this_turn(request)[:1]:
        for part in content.parts or ():
            if part.text and (found := NAP_RE.search(part.text)):
                return float(found.group(1))
    return None


def _asks(request: LlmRequest, pattern: re.Pattern[str]) -> bool:
    """Whether the last user message naming an order matches ``pattern``."""
    return any(
        bool(part.text and pattern.search(part.text))
        for content in _this_turn(request)[:1]
        for part in content.parts or ()
    )


def wants_approval(request: LlmRequest) -> bool:
    """Whether the last user message naming an order asks for a person's approval first."""
    return _asks(request, APPROVAL_RE)


def wants_report(request: LlmRequest) -> bool:
    """Whether the last user message naming an order asks for a report first."""
    return _asks(request, REPORT_RE)


def _pause(
    turn: Sequence[types.Part],
    tool: str,
    answer: tuple[str, object],
    args: dict[str, Any],
    waiting: str,
) -> Turn | None:
    """The step of a pause: call ``tool``, then say ``waiting``; None once it is answered.

    Answered: a response of ``tool`` in the turn whose ``answer[0]`` is ``answer[1]``.
    """
    key, value = answer
    if any(
        part.function_response is not None
        and part.function_response.name == tool
        and (part.function_response.response or {}).get(key) == value
        for part in turn
    ):
        return None
    called = any(
        part.function_call is not None and part.function_call.name == tool for part in turn
    )
    return Say(waiting) if called else Call(tool, args)


def build_report(order_id: str) -> dict[str, Any]:
    """Builds the order's report: a long-running job, answered when the job is completed."""
    if not ORDER_RE.fullmatch(order_id):
        raise errors.InvalidArgument(f"not an order id: {order_id!r:.80}")
    return {"message": f"Building the report of {order_id}."}


def report_text(order_id: str) -> str:
    """What the agent says while its run waits for the order's report."""
    return f"Order {order_id} waits for its report."


def approval_text(order_id: str) -> str:
    """What the agent says when its run waits for a person's approval."""
    return f"Order {order_id} waits for approval."


def nap_text(order_id: str, seconds: float) -> str:
    """What the agent says when its run goes to sleep."""
    return f"Order {order_id} waits {seconds:g} s."


def final_text(order_id: str) -> str:
    """What the agent says once both effects are done."""
    return f"Order {order_id} charged and confirmed."


def _order_text(events: Sequence[Event]) -> str:
    """The text of the last user message naming an order."""
    for event in reversed(events):
        if event.author == "user" and event.content is not None:
            text = " ".join(part.text or "" for part in event.content.parts or ())
            if ORDER_RE.search(text):
                return text
    return ""


class _Intake(BaseAgent):
    """The saga's first stage: the order (and whether it is out of stock) into the state."""

    @override
    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        text = _order_text(ctx.session.events)
        found = ORDER_RE.search(text)
        yield Event(
            invocation_id=ctx.invocation_id,
            author=self.name,
            branch=ctx.branch,
            actions=EventActions(
                state_delta={
                    "order_id": found.group(0) if found else "ORD-unknown",
                    "out_of_stock": OUT_OF_STOCK in text,
                }
            ),
        )


class OutOfStock(RuntimeError):
    """The ordered item is out of stock: the saga rolls back."""


class _StockCheck(BaseAgent):
    """Fails when the order is out of stock (after the payment: the saga refunds it)."""

    @override
    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        order = ctx.session.state.get("order_id")
        if ctx.session.state.get("out_of_stock"):
            raise OutOfStock(f"{order} is out of stock")
        yield Event(
            invocation_id=ctx.invocation_id,
            author=self.name,
            branch=ctx.branch,
            content=types.Content(role="model", parts=[types.Part(text=f"{order} in stock.")]),
        )


def _tag_saga_call() -> None:
    """The saga's outside calls carry who sends them, as the tools' do."""
    fence = current_fence()
    _caller.set(_tags(fence.run_id, fence.epoch) if fence is not None else _tags("", ""))


async def _take_payment(state: dict[str, Any], key: str) -> dict[str, Any]:
    _tag_saga_call()
    await _work()
    order = str(state.get("order_id"))
    payload = {"order_id": order, "customer": "chaos-saga", "amount": amount_of(order)}
    return await asyncio.to_thread(_create, PAYMENTS_ENV, CHARGES, payload, key)


async def _refund(record: dict[str, Any], key: str) -> None:
    _tag_saga_call()
    quoted = urllib.parse.quote(str(record["charge_id"]), safe="")
    url = f"{_base(PAYMENTS_ENV)}/{CHARGES}/{quoted}/refund"
    status, body = await asyncio.to_thread(_request, "POST", url, payload={}, key=key)
    if status not in (200, 201, 409):  # 409: refunded already (an earlier attempt's)
        raise OutsideCallFailed(f"refund answered {status}: {body!r:.200}")


async def _confirm(state: dict[str, Any], key: str) -> dict[str, Any]:
    _tag_saga_call()
    await _work()
    order = str(state.get("order_id"))
    payload = {"to": f"{order.lower()}@chaos.example", "message": f"{order} is confirmed."}
    return await asyncio.to_thread(_create, NOTIFY_ENV, NOTIFICATIONS, payload, key)


def _saga_lookup(
    find: Callable[[str], dict[str, Any] | None],
) -> Callable[[str], Awaitable[dict[str, Any] | None]]:
    """A tools' lookup (``_find_charge``...) as a saga stage's: tagged, off the loop."""

    async def lookup(key: str) -> dict[str, Any] | None:
        _tag_saga_call()
        return await asyncio.to_thread(find, key)

    return lookup


def order_saga() -> SagaSequence:
    """The saga an order ``as a saga`` is handed to (see the module doc)."""
    return SagaSequence(
        SAGA_NAME,
        [
            _Intake(name="intake"),
            SagaStage(
                name="take_payment",
                action=_take_payment,
                find=_saga_lookup(_find_charge),
                undo_of=lambda charge: {"charge_id": charge["id"]},
            ),
            _StockCheck(name="check_stock"),
            SagaStage(
                name="confirm",
                action=_confirm,
                find=_saga_lookup(_find_notification),
                uncompensatable=True,
            ),
        ],
        {"take_payment": _refund},
    )


def _approvals() -> bool:
    """Whether this worker's app has the approval tool (``DURABLE_ADK_CHAOS_DROP`` unset)."""
    return not os.environ.get(DROP_ENV)


def _next_step(request: LlmRequest) -> Turn:
    # The step follows from what this turn already holds, not from how many
    # model turns the session has: a turn that recovery re-drove may hold a
    # call more or less than a quiet one, and the next turn must still start
    # with the charge.
    turn = [part for content in _this_turn(request) for part in content.parts or ()]
    answered = {part.function_response.name for part in turn if part.function_response is not None}
    order = order_of(request)
    if any(part.text and SAGA_RE.search(part.text) for part in turn[:1]):
        return Call("transfer_to_agent", {"agent_name": SAGA_NAME})
    nap = nap_of(request)
    by_order = {"order_id": order}
    step = None  # the first pause the message asks for that is not answered yet
    if nap is not None:
        step = _pause(
            turn, SLEEP_TOOL_NAME, ("status", "woke"), {"seconds": nap}, nap_text(order, nap)
        )
    if step is None and _approvals() and wants_approval(request):
        step = _pause(turn, APPROVAL_TOOL, ("approved", True), by_order, approval_text(order))
    if step is None and wants_report(request):
        step = _pause(turn, REPORT_TOOL, ("status", "succeeded"), by_order, report_text(order))
    if step is not None:
        return step
    if "charge" not in answered:
        return Call("charge", {"order_id": order})
    if "notify" not in answered:
        return Call("notify", {"order_id": order})
    return Say(final_text(order))


def approve_order(order_id: str) -> dict[str, Any]:
    """Asks a person to approve the order before it is charged (answered through the inbox)."""
    return {"status": "waiting for a person", "order_id": order_id}


def audit(order_id: str) -> dict[str, Any]:
    """Looks an order up in the audit log (a newer version's tool; the script never calls it)."""
    return {"order_id": order_id, "audited": True}


class _EveryTurn(Sequence[Step]):
    """charge, notify, answer, as the turn's state says, for as many turns as asked."""

    def __len__(self) -> int:
        return 3_000_000

    @overload
    def __getitem__(self, index: int) -> Step: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Step]: ...

    def __getitem__(self, index: int | slice) -> Step | Sequence[Step]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return _next_step


def app() -> LlmAgent:
    """The chaos agent (a fresh agent and model per call)."""
    return LlmAgent(
        name=APP_NAME,
        model=ScriptedModel({APP_NAME: _EveryTurn()}),
        instruction="Charge the order, then tell the customer.",
        tools=[
            charge_tool(),
            notify,
            sleep_tool(),
            *([LongRunningFunctionTool(approve_order)] if _approvals() else []),
            long_running_tool(build_report, job_key=REPORT_PREFIX + "{order_id}", deadline=600),
            *([audit] if os.environ.get(NEWER_ENV) else []),
        ],
        before_tool_callback=_tag_call,
        sub_agents=[order_saga()],
    )


def durable_adk_schedules() -> list[Schedule]:
    """The ``tick`` schedule when ``DURABLE_ADK_CHAOS_TICK_EVERY`` is set; none otherwise."""
    every = os.environ.get(TICK_EVERY_ENV)
    if not every:
        return []
    version = os.environ.get(TICK_OF_ENV)
    of = f" Tick schedule of {version}." if version else ""
    return [
        Schedule(
            name=TICK_SCHEDULE,
            message=f"Please charge order {TICK_ORDER} and tell the customer.{of}",
            user_id="chaos",
            every=timedelta(seconds=float(every)),
            overlap="allow",
            catch_up="all",
            catch_up_limit=1000,
            jitter=timedelta(seconds=1),
        )
    ]
