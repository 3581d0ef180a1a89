"""Where sync tools run, by throughput: ADK's tool thread pool (our default) or the loop.

Run from the repository root::

    .venv/bin/python -m bench.sync_tools            # 4 rounds of 4 s per contender and wait
    .venv/bin/python -m bench.sync_tools --quick    # 2 rounds of 2 s

``DurableRunner(sync_tools="pool")`` runs a synchronous tool on ADK's tool
thread pool (four threads); ``sync_tools="loop"`` on the event loop, as ADK's
own Runner does by default. ``bench/runner.py`` times one run alone, where
the loop saves the thread hop. This bench times what a worker sees: 50 runs
in flight on one SQLite store, each calling one sync tool that waits on
"the network" (``time.sleep``) for 0, 5 or 50 ms. The contenders alternate
in rounds, their order swapped every round. Reported: runs/s of each and the
ratio pool / loop (the faster one is the default: issue 45, item 5).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from google.adk.agents import LlmAgent

from bench.common import bench_main, fmt_ratio, md_table, median, quiet, rotate
from durable_adk import DurableRunner
from durable_adk.store import open_store
from durable_adk.testing import Call, Say, ScriptedModel

IN_FLIGHT = 50
WAITS = (0.0, 0.005, 0.05)
PLACES = ("pool", "loop")


@dataclass(frozen=True)
class Params:
    rounds: int
    seconds: float

    @classmethod
    def for_mode(cls, quick: bool) -> Params:
        return cls(rounds=2, seconds=2.0) if quick else cls(rounds=4, seconds=4.0)


def make_agent(wait: float) -> LlmAgent:
    def lookup_order(order_id: str) -> dict[str, str]:
        """Looks an order up with a blocking client (it waits on the network)."""
        time.sleep(wait)
        return {"order_id": order_id, "status": "shipped"}

    script = ScriptedModel([Call("lookup_order", {"order_id": "A1042"}), Say("It has shipped.")])
    return LlmAgent(name="clerk", model=script, tools=[lookup_order])


async def runs_per_second(url: str, place: str, wait: float, seconds: float) -> float:
    """Runs/s of one worker keeping ``IN_FLIGHT`` runs going for ``seconds``."""
    async with open_store(url) as store:
        runner = DurableRunner(
            app=make_agent(wait),
            app_name="sync_tools",
            store=store,
            sync_tools=place,  # type: ignore[arg-type]
        )

        async def one() -> None:
            session = uuid.uuid4().hex
            async for _ in runner.run(user_id="u", session_id=session, message="my order?"):
                pass

        await asyncio.gather(*(one() for _ in range(IN_FLIGHT)))  # warm-up
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            await asyncio.gather(*(one() for _ in range(IN_FLIGHT)))
            done += IN_FLIGHT
        return done / (time.perf_counter() - started)


async def run(p: Params) -> str:
    rows = []
    with tempfile.TemporaryDirectory(prefix="dadk-bench-sync-tools-") as tmp:
        for wait in WAITS:
            rates: dict[str, list[float]] = {place: [] for place in PLACES}
            for rnd in range(p.rounds):
                for place in rotate(PLACES, rnd):
                    url = f"sqlite:///{Path(tmp) / f'{place}-{wait}-{rnd}.db'}"
                    rates[place].append(await runs_per_second(url, place, wait, p.seconds))
            ratio = median([a / b for a, b in zip(rates["pool"], rates["loop"], strict=True)])
            rows.append(
                [
                    f"{wait * 1000:.0f} ms",
                    f"{median(rates['pool']):.0f}",
                    f"{median(rates['loop']):.0f}",
                    fmt_ratio(ratio),
                ]
            )
            print(rows[-1], flush=True)
    table = md_table(
        ["the tool waits", "pool: runs/s", "loop: runs/s", "pool / loop (median of rounds)"],
        rows,
    )
    print(table)
    return (
        f"## Sync tools: pool or loop ({IN_FLIGHT} runs in flight, SQLite)\n\n"
        f"{p.rounds} rounds of {p.seconds:.0f} s per contender and wait.\n\n{table}\n"
    )


def collect(quick: bool) -> str:
    with quiet():
        return asyncio.run(run(Params.for_mode(quick)))


def main(argv: Sequence[str] | None = None) -> None:
    bench_main("sync_tools", collect, argv)


if __name__ == "__main__":
    main()
