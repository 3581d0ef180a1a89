"""Helpers shared by the benchmarks: statistics, tables, profiles, BENCHMARKS.md.

Rules every bench follows (the machine is 2 shared cores, so absolute times
drift by tens of percent between minutes):

* contenders run interleaved, in small blocks, with the order rotated every
  round, so drift hits all of them alike;
* a figure is reported as measured, and a comparison as a ratio of medians
  taken in the same run;
* targets are reported as PASS / MISS, never asserted.
"""

from __future__ import annotations

import cProfile
import io
import math
import os
import platform
import pstats
import re
import sqlite3
import statistics
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS_MD = ROOT / "BENCHMARKS.md"

T = TypeVar("T")


# ----------------------------------------------------------------- statistics


def median(values: Sequence[float]) -> float:
    """The median (NaN for no values)."""
    return statistics.median(values) if values else math.nan


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile: the smallest value with ``pct`` % of values at or below it."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def rotate(items: Sequence[T], by: int) -> list[T]:
    """``items`` rotated left by ``by`` places (the order of a round)."""
    if not items:
        return []
    k = by % len(items)
    return list(items[k:]) + list(items[:k])


# ------------------------------------------------------------------ formatting


def fmt_ms(seconds: float) -> str:
    """A duration in milliseconds with 3 significant-ish digits."""
    if math.isnan(seconds):
        return "n/a"
    ms = seconds * 1000
    if ms >= 100:
        return f"{ms:.0f} ms"
    if ms >= 10:
        return f"{ms:.1f} ms"
    return f"{ms:.2f} ms"


def fmt_ratio(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"


def verdict(value: float, target: float, *, at_least: bool) -> str:
    """PASS or MISS for a ratio against its target."""
    if math.isnan(value):
        return "MISS (no data)"
    ok = value >= target if at_least else value <= target
    return "PASS" if ok else "MISS"


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table, padded so it also reads well in a terminal."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), sep, *(line(r) for r in cells[1:])])


# ------------------------------------------------------------------- machine


def cpu_model() -> str:
    try:
        for text_line in Path("/proc/cpuinfo").read_text().splitlines():
            if text_line.startswith("model name"):
                return text_line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine_note(extra: str = "") -> str:
    """One line describing where the figures were taken."""
    import google.adk

    note = (
        f"{os.cpu_count()} cores ({cpu_model()}), shared and noisy VM; "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"google-adk {google.adk.__version__}; {platform.system()} {platform.release()}"
    )
    return note + (f"; {extra}" if extra else "")


# ------------------------------------------------------------------- profiles


async def profile_async(
    make: Callable[[], Awaitable[Any]], *, top: int = 14, focus: str = "durable_adk"
) -> str:
    """cProfile of one awaited call: the top functions by own time, then ours by cumulative.

    Only the event-loop thread is profiled: time a SQLite hop spends on the
    database thread shows up as the loop waiting (``select.epoll.poll``).
    """
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        await make()
    finally:
        profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    own = _trim_pstats(out.getvalue(), top)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(focus, top)
    ours = _trim_pstats(out.getvalue(), top)
    return f"By own time (tottime):\n{own}\n\n{focus} by cumulative time:\n{ours}"


_SITE = re.compile(r"\S*/site-packages/")


def _trim_pstats(text: str, top: int) -> str:
    """Keeps the header line and the rows of a pstats listing, with short paths."""
    lines = text.splitlines()
    start = next((i for i, s in enumerate(lines) if s.strip().startswith("ncalls")), None)
    if start is None:
        return text.strip()
    rows = [s for s in lines[start : start + top + 1] if s.strip()]
    prefix = str(ROOT) + "/"
    py_lib = os.path.dirname(os.__file__) + "/"
    return "\n".join(
        _SITE.sub("", s.replace(prefix, "").replace(py_lib, "")).rstrip() for s in rows
    )


# --------------------------------------------------------------- BENCHMARKS.md


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"


def write_section(name: str, body: str, path: Path = BENCHMARKS_MD) -> None:
    """Replaces the section ``name`` of BENCHMARKS.md (appending it if absent)."""
    begin, end = _markers(name)
    block = f"{begin}\n{body.strip()}\n{end}"
    text = path.read_text() if path.exists() else ""
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + block
    path.write_text(text.rstrip() + "\n")


def argv_flags(argv: Sequence[str] | None) -> tuple[bool, bool]:
    """(--quick, --write) from a command line."""
    args = list(sys.argv[1:] if argv is None else argv)
    unknown = [a for a in args if a not in ("--quick", "--write")]
    if unknown:
        raise SystemExit(f"unknown arguments {unknown}; use [--quick] [--write]")
    return "--quick" in args, "--write" in args
