"""A one-tool run's instructions over its physical bound, step by step (issue 45).

Run from the repository root::

    .venv/bin/python -m bench.instructions            # 4 x 30 runs of each (~4 minutes)
    .venv/bin/python -m bench.instructions --quick    # 3 x 15 runs of each (~2 minutes)
    .venv/bin/python -m bench.instructions --layers   # bytecodes a run adds, by layer (~20 s)

The contenders of ``bench.runner --bounds`` (SQLite): ADK's in-memory run;
with one bare commit at each point where DurableRunner makes a unit (the
bound); with the same rows bare there; with our own units there, through our
store; DurableRunner. Each runs in one process under valgrind's callgrind,
which counts the instructions it executes per run: every thread of the
process in user space (the interpreter, SQLite, pydantic's core), not the
kernel's work (fsync, epoll, waking a thread).

Why a count beside CPU time: on this shared machine a process's CPU time per
run moves by tens of percent between minutes, and it is not only the work
done. The bound's four bare commits add about 0.13 M instructions to ADK's
run (under 1 %) but about 1 ms of CPU time (25-30 %): after each fsync the
process runs on cold caches, on a core another tenant used meanwhile. A count
is the same to within about 0.5 % between processes, so it tells how much
work each step adds, and what a change to the run path saves.

``--layers`` says where DurableRunner's instructions over ADK's run come
from: it counts the Python bytecodes each run executes (``sys.settrace`` with
opcode events: exact, and no valgrind needed), by the layer of the code that
runs them, for ADK's in-memory run (its tool on ADK's thread pool, as ours)
and DurableRunner, and prints what each layer adds. C code (SQLite, pydantic's
core, ``json``) is not in it: the counted table has it.

Needs valgrind (Debian's ``valgrind`` package, which ships ``callgrind_control``).
The bench runs itself again under callgrind (``--child``); that process turns
counting on only around each block of timed runs, and dumps the count after
it. Blocks are interleaved with the order rotated each round, the first round
is dropped (it warms what the interpreter specializes), and each figure is the
median of the rest.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from bench.common import ROOT, fmt_ratio, md_table, median, quiet, rotate

CHILD = "--child"
WARMUP = 20
"""Runs of each contender before any is counted."""
FULL = (30, 4)
QUICK = (15, 3)
"""(runs a block, rounds): a block of each contender per round."""
TOOLS = ("valgrind", "callgrind_control")

_DUMP = re.compile(r"^desc: Trigger: dump step(\d+)-round(\d+)\s*$", re.M)
_TOTALS = re.compile(r"^totals: (\d+)\s*$", re.M)


def read_dumps(folder: Path) -> dict[tuple[int, int], int]:
    """The instructions of each dumped block, by (contender's index, round).

    A dump that callgrind wrote for any other reason (the program's end) is
    not a block and is left out.
    """
    counts: dict[tuple[int, int], int] = {}
    for path in folder.glob("cg.out.*"):
        text = path.read_text()
        block, totals = _DUMP.search(text), _TOTALS.search(text)
        if block is None or totals is None:
            continue
        counts[(int(block.group(1)), int(block.group(2)))] = int(totals.group(1))
    return counts


def per_run(counts: dict[tuple[int, int], int], contenders: int, runs: int) -> list[float]:
    """Each contender's instructions per run: the median over its rounds but the first."""
    out = []
    for i in range(contenders):
        rounds = sorted((r, n) for (c, r), n in counts.items() if c == i)
        if len(rounds) < 2:
            raise RuntimeError(f"contender {i}: {len(rounds)} block(s) counted, need 2 or more")
        out.append(median([n / runs for _r, n in rounds[1:]]))
    return out


def table(names: Sequence[str], instructions: Sequence[float], runs: int, rounds: int) -> str:
    """The markdown table: each contender against the bound (the second), and each step's
    addition over the one before it."""
    from bench.runner import BOUNDS_STEPS

    adds = ["", *(what for _kind, what in BOUNDS_STEPS)]
    bound = instructions[1]
    lines = [
        [
            name,
            f"{instructions[i] / 1e6:.2f} M",
            fmt_ratio(instructions[i] / bound),
            f"{adds[i]}: {(instructions[i] - instructions[i - 1]) / 1e6:+.2f} M" if adds[i] else "",
        ]
        for i, name in enumerate(names)
    ]
    text = md_table(
        ["contender (SQLite)", "instructions per run", "/ bound", "instructions added by"], lines
    )
    return (
        f"{text}\n\n{rounds - 1} x {runs} runs of each counted (a first round dropped), "
        "interleaved; medians. User-space instructions of the whole process under "
        "callgrind (`bench.instructions`).\n"
    )


def count(runs: int, rounds: int) -> str:
    """Runs the contenders under callgrind; returns the table."""
    with tempfile.TemporaryDirectory(prefix="dadk-bench-instructions-") as tmp:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={Path(tmp) / 'cg.out'}",
            sys.executable,
            "-m",
            "bench.instructions",
            CHILD,
            str(runs),
            str(rounds),
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join(done.stderr.splitlines()[-20:])
            raise SystemExit(f"bench.instructions: the counted process failed:\n{tail}")
        names = json.loads(done.stdout.strip().splitlines()[-1])
        counts = read_dumps(Path(tmp))
    return table(names, per_run(counts, len(names), runs), runs, rounds)


def _control(*args: str) -> None:
    """Tells callgrind, which runs this process, to count, stop or dump."""
    subprocess.run(["callgrind_control", *args, str(os.getpid())], check=True, capture_output=True)


async def _child(runs: int, rounds: int) -> None:
    from bench.runner import open_bounds_steps

    with tempfile.TemporaryDirectory(prefix="dadk-bench-instructions-run-") as tmp:
        async with open_bounds_steps(Path(tmp)) as contenders:
            for c in contenders:
                for _ in range(WARMUP):
                    await c.run_once()
            for r in range(rounds):
                for i, c in rotate(list(enumerate(contenders)), r):
                    c.prepare(runs)  # the bench's own work: fresh ids, not counted
                    gc.collect()  # each block starts with nothing for the collector
                    _control("-i", "on")
                    for _ in range(runs):
                        await c.run_once()
                    _control("-d", f"step{i}-round{r}")
                    _control("-i", "off")
            names = [c.name for c in contenders]
    print(json.dumps(names))


def layer_of(filename: str) -> str:
    """The layer a code object's file belongs to, for ``--layers``."""
    path = filename.replace("\\", "/")
    if "/durable_adk/" in path:
        parts = path.rsplit("/durable_adk/", 1)[1].split("/")
        if parts[0] == "adk" and len(parts) > 1:
            return f"durable_adk.adk.{parts[1].removesuffix('.py')}"
        return "durable_adk." + parts[0].removesuffix(".py")
    if "/asyncio/" in path:
        return "asyncio"
    for marker, name in (("/google/adk/", "google.adk"), ("/pydantic", "pydantic")):
        if marker in path:
            return name
    if "/google/genai/" in path:
        return "google.genai"
    if "/opentelemetry/" in path:
        return "opentelemetry"
    return "other (contextlib, json, dataclasses' methods, threading, ...)"


class Bytecodes:
    """Counts the bytecodes executed in each layer while it is on (every thread)."""

    def __init__(self) -> None:
        self.by_layer: Counter[str] = Counter()
        self._layers: dict[str, str] = {}

    def _trace(self, frame: FrameType, event: str, arg: object) -> Any:
        if event != "call":
            return None
        frame.f_trace_opcodes = True
        filename = frame.f_code.co_filename
        layer = self._layers.get(filename)
        if layer is None:
            layer = self._layers[filename] = layer_of(filename)
        by_layer = self.by_layer

        def local(frame: FrameType, event: str, arg: object) -> Any:
            if event == "opcode":
                by_layer[layer] += 1
            return local

        return local

    def __enter__(self) -> Bytecodes:
        self._before = (sys.gettrace(), threading.gettrace())  # a coverage tracer, say
        threading.settrace(self._trace)
        sys.settrace(self._trace)
        return self

    def __exit__(self, *exc: object) -> None:
        here, threads = self._before
        sys.settrace(here)
        threading.settrace(threads)  # type: ignore[arg-type]


async def layers(runs: int = 50) -> str:
    """Bytecodes per run by layer, ADK's in-memory run and DurableRunner, SQLite."""
    from google.adk.agents.run_config import RunConfig, ToolThreadPoolConfig
    from google.adk.sessions import InMemorySessionService

    from bench.runner import IN_MEMORY_POOL, AdkContender, DurableContender
    from durable_adk.store import open_store

    counted: dict[str, Counter[str]] = {}
    with tempfile.TemporaryDirectory(prefix="dadk-bench-layers-") as tmp:
        async with open_store(f"sqlite:///{Path(tmp) / 'ours.db'}") as store:
            contenders = [
                AdkContender(
                    IN_MEMORY_POOL,
                    "memory",
                    InMemorySessionService(),
                    RunConfig(tool_thread_pool_config=ToolThreadPoolConfig()),
                ),
                DurableContender("sqlite", store, "barrier"),
            ]
            for c in contenders:
                for _ in range(WARMUP):
                    await c.run_once()
                with Bytecodes() as count:
                    for _ in range(runs):
                        await c.run_once()
                counted[c.name] = count.by_layer
    adk, ours = (counted[c.name] for c in contenders)
    added = {name: (ours[name] - adk[name]) / runs for name in set(adk) | set(ours)}
    rows = [
        [name, f"{adk[name] / runs:,.0f}", f"{ours[name] / runs:,.0f}", f"{delta:+,.0f}"]
        for name, delta in sorted(added.items(), key=lambda item: -item[1])
        if abs(delta) >= 50 or name.startswith("durable_adk")
    ]
    total_adk, total_ours = sum(adk.values()) / runs, sum(ours.values()) / runs
    rows.append(
        ["all", f"{total_adk:,.0f}", f"{total_ours:,.0f}", f"{total_ours - total_adk:+,.0f}"]
    )
    text = md_table(
        ["layer", "ADK's run (pool)", "DurableRunner (sqlite)", "DurableRunner adds"], rows
    )
    return f"{text}\n\nPython bytecodes per run, {runs} runs of each after {WARMUP}.\n"


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == [CHILD]:
        with quiet():
            asyncio.run(_child(int(args[1]), int(args[2])))
        return
    unknown = [a for a in args if a not in ("--quick", "--layers")]
    if unknown:
        raise SystemExit(
            f"bench.instructions: unknown argument(s) {unknown}; usage: [--quick] [--layers]"
        )
    if "--layers" in args:
        with quiet():
            print(asyncio.run(layers()))
        return
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise SystemExit(
            f"bench.instructions needs valgrind's callgrind; not found: {', '.join(missing)} "
            "(Debian: apt-get install valgrind)"
        )
    runs, rounds = QUICK if "--quick" in args else FULL
    print(count(runs, rounds))


if __name__ == "__main__":
    main()
