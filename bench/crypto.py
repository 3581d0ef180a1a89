"""The cost of encryption at rest on a one-tool run (issue 43).

Run from the repository root::

    .venv/bin/python -m bench.crypto            # 20 rounds x 10 runs per contender
    .venv/bin/python -m bench.crypto --quick    # 6 rounds x 10

On each backend (SQLite, and PostgreSQL in a private TempPostgres cluster),
side by side in one run: a DurableRunner run of a one-tool agent (user
message, tool call, tool answer, final text: the units of bench/runner.py)
on a store without keys, and the same run on a store with a keyring (every
payload column sealed with AES-256-GCM). The contenders alternate in blocks
with their order rotated each round, on their own databases; reported: the
median time per run of each and their ratio (target: <= 1.10x, PASS / MISS,
never asserted), and the time to seal and open one event (the codec alone).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App

from bench.common import bench_main, fmt_ms, fmt_ratio, md_table, quiet, rotate, verdict
from durable_adk.adk.runner import DurableRunner
from durable_adk.store import Keyring, Store, open_store
from durable_adk.store.sealing.codec import Codec, column
from durable_adk.testing import Call, Say, ScriptedModel
from durable_adk.testing.pg_cluster import TempPostgres

TARGET = 1.10


def lookup(order_id: str) -> dict[str, Any]:
    """Looks an order up."""
    return {"order_id": order_id, "status": "packed", "items": 3}


def _app(runs: int) -> App:
    script = [Call("lookup", {"order_id": "A-42"}), Say("Order A-42 is packed (3 items).")]
    model = ScriptedModel({"clerk": script * runs})
    return App(name="bench", root_agent=LlmAgent(name="clerk", model=model, tools=[lookup]))


async def _block(runner: DurableRunner, start: int, n: int) -> list[float]:
    times = []
    for i in range(start, start + n):
        t0 = time.perf_counter()
        async for _ in runner.run(user_id="u", session_id=f"s{i}", message="Where is A-42?"):
            pass
        times.append(time.perf_counter() - t0)
    return times


async def _backend(urls: dict[str, str], rounds: int, per: int) -> dict[str, list[float]]:
    ring = Keyring([("k1", os.urandom(32))])
    stores: dict[str, Store] = {}
    try:
        for name, url in urls.items():
            cm = open_store(url, keyring=ring if name == "sealed" else None)
            stores[name] = await cm.__aenter__()
            stores[name].__dict__["_bench_cm"] = cm
        runners = {n: DurableRunner(app=_app(rounds * per + 5), store=s) for n, s in stores.items()}
        for runner in runners.values():  # warm up: first-run imports and caches
            await _block(runner, 10_000, 3)
        times: dict[str, list[float]] = {n: [] for n in runners}
        for r in range(rounds):
            for name in rotate(list(runners), r):
                times[name] += await _block(runners[name], r * per, per)
        return times
    finally:
        for store in stores.values():
            await store.__dict__["_bench_cm"].__aexit__(None, None, None)


def _codec_alone(samples: int = 2000) -> float:
    """Seconds to seal and open one event's JSON (about 1 KB)."""
    codec = Codec(Keyring([("k1", os.urandom(32))]))
    col = column("events", "data")
    text = '{"content":{"parts":[{"text":"' + "x" * 900 + '"}]},"author":"clerk"}'
    t0 = time.perf_counter()
    for i in range(samples):
        codec.open(codec.seal(text, col, (1, i)), col, (1, i))
    return (time.perf_counter() - t0) / samples


async def run(quick: bool = False) -> str:
    rounds, per = (6, 10) if quick else (20, 10)  # small blocks: a burst of load hits both
    results: list[tuple[str, dict[str, list[float]]]] = []
    with TemporaryDirectory() as tmp:
        urls = {n: f"sqlite:///{Path(tmp) / n}.db" for n in ("clear", "sealed")}
        results.append(("sqlite", await _backend(urls, rounds, per)))
    with TempPostgres() as pg:
        urls = {n: pg.create_database(f"bench_crypto_{n}") for n in ("clear", "sealed")}
        results.append(("postgresql", await _backend(urls, rounds, per)))
    rows = []
    for backend, times in results:
        clear, sealed = statistics.median(times["clear"]), statistics.median(times["sealed"])
        ratio = sealed / clear
        rows.append(
            [
                backend,
                fmt_ms(clear),
                fmt_ms(sealed),
                fmt_ratio(ratio),
                verdict(ratio, TARGET, at_least=False),
            ]
        )
    table = md_table(
        ["backend", "run, no keys", "run, keyring", "ratio", f"<= {TARGET:.2f}x"], rows
    )
    mode = "quick (`--quick`)" if quick else "full"
    alone = _codec_alone()
    body = "\n\n".join(
        [
            "## Encryption at rest: a one-tool run with and without keys (bench/crypto.py)",
            f"Mode: {mode}. {rounds} rounds x {per} DurableRunner runs per contender, "
            "alternating with their order rotated, each on its own database; medians. "
            f"The codec alone: {fmt_ms(alone)} to seal and open one 1 KB event; a run seals "
            f"about 8 values, so about {fmt_ms(8 * alone)} of a run's time is the codec's. "
            "Differences of a few milliseconds between the medians are this machine's "
            "run-to-run noise (earlier runs of this bench in blocks of 40 runs: 0.79x-1.69x).",
            table,
        ]
    )
    print(body)
    return body


def collect(quick: bool = False) -> str:
    """Runs the bench (printing its table) and returns its BENCHMARKS.md section."""
    with quiet():
        return asyncio.run(run(quick))


def main(argv: Sequence[str] | None = None) -> None:
    bench_main("crypto", collect, argv)


if __name__ == "__main__":
    main()
