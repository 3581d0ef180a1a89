"""An A2A task round trip: durable-adk's ``to_a2a`` on SQLite against ADK's own ``to_a2a``.

Run from the repository root::

    .venv/bin/python -m bench.a2a            # full run (~1 minute)
    .venv/bin/python -m bench.a2a --quick    # smaller run (~20 s)
    .venv/bin/python -m bench.a2a --write    # also rewrite its BENCHMARKS.md section

One round trip = the A2A SDK's client sends a message on a new context
(``SendMessage``, blocking), the agent's scripted model calls one Python tool,
the tool answers, the model answers with text, and the client gets the
completed task back. Three contenders serve the same agent (a fresh agent per
app, the same tool and script) in this one process, each a Starlette app with
its lifespan running, reached through the same client code over httpx's ASGI
transport:

* ADK's ``to_a2a(agent)``: its A2aAgentExecutor, Runner, in-memory session
  service, task store and push config store (nothing outlives the process);
* durable-adk's ``to_a2a(agent, db="sqlite:///...")``: the durable executor,
  DurableRunner on SQLite, the versioned task store, the push config store
  and message ids on the same database, with its background loops (recovery,
  resumer, task sync, push delivery) running in the same event loop;
* the bound: ADK's ``to_a2a`` again, whose in-memory session service makes one
  bare SQLite commit (``BEGIN IMMEDIATE``, one INSERT, ``COMMIT``, WAL,
  ``synchronous=FULL``, as ``bench/sessions.py``'s raw baseline) for every
  unit of work that writes in durable-adk's round trip, at the point of the
  round trip where durable-adk makes it (after as many of the invocation's
  events appended; units before the first event go with it, units after ADK's
  last event, the final answer, go with it). A server whose only cost over
  ADK's is its commits.

Target: durable-adk at most 1.3x ADK's round trip (ratio of medians). The
contenders run interleaved in blocks, the order rotated every block; the
ratio is the median over rounds of the ratio of round medians.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.client.client import Client
from a2a.types import (
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskState,
)
from google.adk.a2a.utils.agent_to_a2a import to_a2a as adk_to_a2a
from google.adk.agents import LlmAgent
from google.adk.models.llm_request import LlmRequest
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from starlette.applications import Starlette

from bench.common import (
    PlacedUnits,
    bench_main,
    fmt_ms,
    fmt_ratio,
    machine_note,
    md_table,
    median,
    quiet,
    record_store_calls_at,
    rotate,
    verdict,
)
from bench.sessions import RawSqliteAppender, conversation_event
from durable_adk.a2a.server import DurableA2aServer
from durable_adk.a2a.server import to_a2a as durable_to_a2a
from durable_adk.demo.service_app import EveryTurn
from durable_adk.store.queries import load_queries
from durable_adk.testing.scripted_model import Call, Say, ScriptedModel, Turn

AGENT = "order_desk"
TARGET = 1.3
"""durable-adk's round trip at most this many times ADK's."""
WRITE_QUERIES = frozenset(name for name, q in load_queries("sqlite").items() if q.writes)
_ANSWER = (
    "Your order A1042 (blue trail runners, size 43) has shipped: it left the Lyon "
    "warehouse yesterday and should arrive in 2 working days."
)


@dataclass(frozen=True)
class Params:
    """How much to measure."""

    rounds: int
    per_round: int
    block: int
    warmup: int

    @classmethod
    def for_mode(cls, quick: bool) -> Params:
        if quick:
            return cls(rounds=3, per_round=20, block=5, warmup=5)
        return cls(rounds=5, per_round=40, block=10, warmup=10)


def lookup_order(order_id: str) -> dict[str, Any]:
    """Looks up an order by id."""
    return {"order_id": order_id, "status": "shipped", "eta_days": 2}


def _step(request: LlmRequest) -> Turn:
    last = request.contents[-1] if request.contents else None
    if last is not None and any(p.function_response for p in last.parts or ()):
        return Say(_ANSWER)
    return Call("lookup_order", {"order_id": "A1042"})


def make_agent() -> LlmAgent:
    """The agent every contender serves: one tool call, then the answer."""
    return LlmAgent(
        name=AGENT,
        model=ScriptedModel({AGENT: EveryTurn(_step)}),
        instruction="You answer questions about orders.",
        tools=[lookup_order],
    )


class BareCommitsAtTheirPoints(InMemorySessionService):
    """ADK's in-memory session service making one bare commit per durable unit, at its point."""

    def __init__(self, raw: RawSqliteAppender, units: PlacedUnits) -> None:
        super().__init__()
        self.raw = raw
        self.payload = raw.prepare(conversation_event(1))
        self.at = [at for _query, _params, at in units]
        self.last = max(self.at, default=0)
        self._appended: dict[str, int] = {}
        self.made = 0

    async def _commit_at(self, appended: int, *, last: bool = False) -> None:
        for at in self.at:
            if at == appended or (last and at > appended):
                await self.raw.append(self.payload)
                self.made += 1

    async def append_event(self, session: Any, event: Any) -> Any:
        if event.partial:
            return await super().append_event(session, event)
        invocation = event.invocation_id
        if invocation not in self._appended:
            self._appended[invocation] = 0
            await self._commit_at(0)
        out = await super().append_event(session, event)
        appended = self._appended[invocation] + 1
        self._appended[invocation] = appended
        if appended <= self.last:
            await self._commit_at(
                appended, last=event.author != "user" and event.is_final_response()
            )
        return out


@dataclass
class Contender:
    """One served app and the client that reaches it."""

    name: str
    app: Starlette
    client: Client | None = None
    times: list[list[float]] = field(default_factory=list)

    async def round_trip(self) -> Task:
        assert self.client is not None
        request = SendMessageRequest(
            message=Message(
                message_id=uuid.uuid4().hex,
                role=Role.ROLE_USER,
                context_id=uuid.uuid4().hex,
                parts=[Part(text="Where is my order A1042?")],
            ),
            configuration=SendMessageConfiguration(return_immediately=False),
        )
        found: Task | None = None
        async for response in self.client.send_message(request):
            if response.HasField("task"):
                found = response.task
        assert found is not None and found.status.state == TaskState.TASK_STATE_COMPLETED, found
        return found


@contextlib.asynccontextmanager
async def serving(contender: Contender, base: str) -> AsyncIterator[Contender]:
    """Runs the app's lifespan and opens the SDK's client on it (ASGI transport)."""
    async with contender.app.router.lifespan_context(contender.app):
        transport = httpx.ASGITransport(app=contender.app)
        async with httpx.AsyncClient(transport=transport, base_url=base, timeout=60) as http:
            card = await A2ACardResolver(http, base).get_agent_card()
            for interface in card.supported_interfaces:
                interface.url = base + "/"
            config = ClientConfig(httpx_client=http, streaming=False)
            contender.client = ClientFactory(config).create(card)
            yield contender


async def _record_units(durable: Contender) -> PlacedUnits:
    """The write units of one durable round trip, each placed by the events appended before it.

    The background loops' own statements (recorded while the app idles as
    long as a round trip) are left out: they run whether or not a task does.
    """
    server: DurableA2aServer = durable.app.state.durable_a2a
    runner = server.runner
    idle = await record_store_calls_at(runner.store, lambda: asyncio.sleep(2.5))
    loops = {q for q, _p, _at in idle}
    placed = await record_store_calls_at(runner.store, durable.round_trip, runner.sessions)
    return [(q, p, at) for q, p, at in placed if q in WRITE_QUERIES and q not in loops]


async def _measure(contenders: Sequence[Contender], p: Params) -> None:
    for c in contenders:
        for _ in range(p.warmup):
            await c.round_trip()
    for r in range(p.rounds):
        for c in contenders:
            c.times.append([])
        for b in range(p.per_round // p.block):
            for c in rotate(contenders, r + b):
                for _ in range(p.block):
                    t0 = time.perf_counter()
                    await c.round_trip()
                    c.times[-1].append(time.perf_counter() - t0)


def _ratio(a: Contender, b: Contender) -> float:
    return median([median(x) / median(y) for x, y in zip(a.times, b.times, strict=True)])


async def run(quick: bool = False) -> str:
    """Runs the bench; prints and returns its BENCHMARKS.md section."""
    p = Params.for_mode(quick)
    with tempfile.TemporaryDirectory() as tmp, quiet():
        ours = Contender(
            "durable-adk to_a2a (SQLite)",
            durable_to_a2a(make_agent(), db=f"sqlite:///{Path(tmp) / 'a2a.db'}"),
        )
        adk = Contender("ADK to_a2a (in memory)", adk_to_a2a(make_agent()))
        raw = RawSqliteAppender(str(Path(tmp) / "bound.db"))
        bare: BareCommitsAtTheirPoints | None = None
        await raw.open()
        try:
            async with contextlib.AsyncExitStack() as stack:
                await stack.enter_async_context(serving(ours, "http://ours"))
                await stack.enter_async_context(serving(adk, "http://adk"))
                for _ in range(3):
                    await ours.round_trip()
                units = await _record_units(ours)
                agent = make_agent()
                bare = BareCommitsAtTheirPoints(raw, units)
                bound = Contender(
                    f"bound: ADK to_a2a + {len(units)} bare commits at their points",
                    adk_to_a2a(
                        agent,
                        runner=Runner(
                            app_name=AGENT,
                            agent=agent,
                            session_service=bare,
                        ),
                    ),
                )
                await stack.enter_async_context(serving(bound, "http://bound"))
                contenders = [ours, adk, bound]
                await bound.round_trip()
                made, bare.made = bare.made, 0
                if made != len(units):
                    raise RuntimeError(f"the bound made {made} commits, not {len(units)}")
                await _measure(contenders, p)
        finally:
            await raw.close()
    ratio = _ratio(ours, adk)
    bound_ratio = _ratio(bound, adk)
    rows = [
        [c.name, fmt_ms(median([t for r in c.times for t in r])), fmt_ratio(_ratio(c, adk))]
        for c in contenders
    ]
    counted = Counter(q for q, _p, _at in units)
    units_named = ", ".join(f"{q} x{n}" if n > 1 else q for q, n in sorted(counted.items()))
    body = "\n".join(
        [
            "## A2A task round trip: durable-adk's to_a2a against ADK's",
            "",
            f"Run: {'--quick' if quick else 'full'}, {p.rounds} rounds x {p.per_round} round "
            f"trips per contender, interleaved in blocks of {p.block}. {machine_note()}",
            "",
            "One round trip: the A2A SDK's client sends a message on a new context "
            "(SendMessage, blocking), the scripted model calls one tool and answers, the "
            "client gets the completed task. All in one process over httpx's ASGI transport "
            "(`python -m bench.a2a`).",
            "",
            md_table(["contender", "median round trip", "vs ADK's to_a2a"], rows),
            "",
            md_table(
                ["target", "ratio", "bound", "verdict"],
                [
                    [
                        f"durable-adk to_a2a on SQLite <= {TARGET}x ADK's to_a2a",
                        fmt_ratio(ratio),
                        fmt_ratio(bound_ratio),
                        verdict(ratio, TARGET, at_least=False),
                    ]
                ],
            ),
            "",
            f"The bound: ADK's to_a2a whose session service makes one bare SQLite commit "
            f"for each of the {len(units)} units that write in durable-adk's round trip "
            f"({units_named}), at their points.",
        ]
    )
    print(body)
    return body


def collect(quick: bool) -> str:
    """The section for BENCHMARKS.md."""
    return asyncio.run(run(quick))


def main(argv: Sequence[str] | None = None) -> None:
    bench_main("a2a", collect, argv)


if __name__ == "__main__":
    main()
