"""Runs every benchmark and rewrites its section of BENCHMARKS.md.

Run from the repository root (``make bench`` does the same)::

    .venv/bin/python -m bench.run_all            # full (about 12 minutes)
    .venv/bin/python -m bench.run_all --quick    # smaller (about 4 minutes)

Each bench module has ``collect(quick) -> str`` returning its Markdown section;
sections sit between ``<!-- bench:NAME:begin/end -->`` markers, so text outside
them is kept as it is.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Sequence

from bench.common import machine_note, write_section

MODULES = ["sessions", "driver_choice", "runner", "recovery"]

INTRO = """# Benchmarks

How to reproduce (from the repository root, after `make install`; PostgreSQL server
binaries must be installed, e.g. Debian's `postgresql` package: each bench starts its
own private cluster with `durable_adk.testing.pg_cluster.TempPostgres`, also as root):

```sh
.venv/bin/python -m bench.run_all              # every bench, full run; rewrites this file
.venv/bin/python -m bench.run_all --quick      # smaller run (about 4 minutes)
.venv/bin/python -m bench.sessions [--quick] [--write]  # one bench; --write: its section
.venv/bin/python -m bench.driver_choice [--quick] [--write]
.venv/bin/python -m bench.runner [--quick] [--write]
.venv/bin/python -m bench.runner --growth [--quick]    # CPU per run: first, last turns
.venv/bin/python -m bench.runner --bounds [--quick]    # a run's CPU over its bound, step by step
.venv/bin/python -m bench.instructions [--quick]      # the same steps in instructions (valgrind)
.venv/bin/python -m bench.instructions --layers       # bytecodes a run adds over ADK's, by layer
.venv/bin/python -m bench.unit_cost --rounds 8         # a run's units against the same rows bare
.venv/bin/python -m bench.sync_tools [--quick]         # sync tools: ADK's pool or the loop
.venv/bin/python -m bench.inflight --sizes 1000 --no-workers  # runs in flight, one worker
.venv/bin/python -m bench.recovery [--quick] [--write]  # starts bench.recovery_worker processes
.venv/bin/python -m bench.timers [--quick] [--write]    # durable sleep: wake cost per poll
.venv/bin/python -m bench.schedules [--quick] [--write] # schedules: poll cost, ticks fired
.venv/bin/python -m bench.crypto [--quick] [--write]    # encryption at rest, with and without keys
```

`--quick` measures less: 100 appends per contender per round instead of 300, no
10,000-event read, 100 Runner turns instead of 200 (so its growth compares turns
81-100 with turns 1-20), 3 driver rounds instead of 8, 3 x 30 DurableRunner runs per
contender instead of 5 x 60, and 2 recovery rounds of 500 orphans (one worker, then
two) instead of 4 rounds of 1,000.

Machine: {machine}. The machine is shared with other work and noisy: absolute times
move by tens of percent from one minute to the next. So every comparison here is a
**ratio of medians measured side by side in the same run**: contenders are interleaved
in small blocks with their order rotated, and targets are reported as PASS / MISS
against those ratios, never asserted as absolute times (no unit test checks them).
Absolute figures are shown only to give the ratios a scale."""


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a != "--quick" for a in args):
        raise SystemExit("usage: python -m bench.run_all [--quick]")
    quick = "--quick" in args
    started = time.perf_counter()
    write_section("intro", INTRO.format(machine=machine_note()))
    for name in MODULES:
        print(f"===== bench.{name}", flush=True)
        module = importlib.import_module(f"bench.{name}")
        write_section(name, module.collect(quick))
        print(f"BENCHMARKS.md: section {name!r} rewritten", flush=True)
    print(f"all benches done in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
