"""A smoke run of bench/inflight.py's worker child: 20 runs in flight on SQLite.

The bench itself is not part of the suite (it takes minutes); this checks that
its child drives runs, counts our statements and reports, so the bench does
not rot between runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from children import run_child

ROOT = Path(__file__).resolve().parents[2]


def _child(contender: str, url: str, size: int, duration: float) -> dict[str, Any]:
    """One bench child's run of ``contender`` at ``size`` in flight: its report."""
    done = run_child(
        [
            sys.executable,
            "-m",
            "bench.inflight",
            "--child",
            contender,
            "--url",
            url,
            "--size",
            str(size),
            "--latency",
            "0.05",
            "--warmup",
            "0.5",
            "--duration",
            str(duration),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def test_the_inflight_bench_child_drives_twenty_runs_and_reports(tmp_path: Path) -> None:
    result = _child("durable-sqlite", f"sqlite:///{tmp_path / 'bench.db'}", 20, 2.5)
    assert result["contender"] == "durable-sqlite" and result["size"] == 20
    assert result["runs"] > 0 and result["events"] > 0, result
    assert result["lost"] == 0 and result["errors"] == {}, result
    # The run's start, its appends, and its finish (with its last events, or alone).
    names = set(result["by_name"])
    assert "run_start" in names and names & {"append_event", "append_events"}, names
    assert names & {"run_finish", "append_events_finish"}, names
    # Every run starts, appends its events and finishes: a handful of statements each.
    assert 3 <= result["statements"] / result["runs"] <= 20
    # The bound's units: one run's store calls, replayed (each written, not refused).
    assert result["units"] == ["run_start", "append_events", "append_event", "append_events_finish"]
    assert 0 < result["units_cpu"] < result["cpu"] / result["runs"], result


def test_a_ratio_between_contenders_is_taken_within_each_repeat_and_the_median_reported() -> None:
    from bench.inflight import over_repeats, parse, ratio_over_repeats, runs_per_s

    def result(contender: str, repeat: int, runs: int) -> dict[str, object]:
        return {"contender": contender, "size": 1000, "repeat": repeat, "runs": runs, "wall": 10}

    # The machine drifts between repeats: ours is 0.8x, 0.5x, 0.9x of ADK's, each time.
    results = [
        result(contender, repeat, runs)
        for repeat, (memory, ours) in enumerate([(100, 80), (60, 30), (90, 81)])
        for contender, runs in (("adk-memory", memory), ("durable-sqlite", ours))
    ]
    results.append(result("durable-sqlite", 3, 500))  # a repeat without its bound: left out
    value, each = ratio_over_repeats(results, 1000, "durable-sqlite", "adk-memory", runs_per_s)
    assert [round(v, 2) for v in each] == [0.8, 0.5, 0.9] and round(value, 2) == 0.8
    assert over_repeats((value, each)) == "0.80x (median of 3: 0.80x, 0.50x, 0.90x)"
    assert ratio_over_repeats(results, 100, "durable-sqlite", "adk-memory", runs_per_s)[1] == []
    with pytest.raises(SystemExit):
        parse(["--repeats", "0"])


def test_the_bound_adds_our_units_cpu_to_adks_run_within_each_repeat() -> None:
    from bench.inflight import cpu_bound, over_pairs, rate_bound

    def result(
        contender: str, repeat: int, cpu: float, units_cpu: float = 0.0
    ) -> dict[str, object]:
        # 100 runs in 10 s: 10 runs/s, whatever the CPU.
        return {
            "contender": contender,
            "size": 1000,
            "repeat": repeat,
            "runs": 100,
            "wall": 10.0,
            "cpu": cpu,
            "units_cpu": units_cpu,
        }

    results = [
        result("adk-memory", 0, cpu=0.8),  # 8 ms per run
        result("durable-sqlite", 0, cpu=1.2, units_cpu=0.002),  # units: 2 ms per run
        result("adk-memory", 1, cpu=0.5),  # 5 ms per run
        result("durable-sqlite", 1, cpu=0.9, units_cpu=0.001),
        result("durable-sqlite", 2, cpu=0.9, units_cpu=0.001),  # no ADK run to set it against
    ]
    value, each = over_pairs(results, 1000, "durable-sqlite", "adk-memory", cpu_bound)
    assert [round(v, 3) for v in each] == [1.25, 1.2] and round(value, 3) == 1.225
    # One loop thread: 1 s / (8 + 2) ms = 100 runs/s at most; ADK made only 10: no bound.
    assert over_pairs(results, 1000, "durable-sqlite", "adk-memory", rate_bound)[1] == [1.0, 1.0]
    saturated = [
        {**results[0], "runs": 1000, "cpu": 10.0},  # 100 runs/s on a whole core: 10 ms each
        {**results[1], "runs": 1000},
    ]
    rate = over_pairs(saturated, 1000, "durable-sqlite", "adk-memory", rate_bound)
    assert [round(v, 3) for v in rate[1]] == [0.833]  # 1 s / (10 + 2) ms = 83.3 runs/s


def test_heartbeats_are_at_most_one_per_renewal_interval_whatever_the_windows_phase() -> None:
    from bench.inflight import heartbeats_ok, heartbeats_seen

    # A 30 s lease renews every 10 s: a 20.4 s window holds two renewals, or
    # three when one falls at each of its ends; four would be one too many.
    assert heartbeats_ok({"heartbeats": 2, "wall": 20.4}, 30.0)
    assert heartbeats_ok({"heartbeats": 3, "wall": 20.4}, 30.0)
    assert not heartbeats_ok({"heartbeats": 4, "wall": 20.4}, 30.0)
    assert heartbeats_seen({"heartbeats": 3, "wall": 20.4}, 30.0) == (
        "3 in 20.4 s (at most 3, one per 10 s)"
    )


def test_the_essentials_reference_drives_runs_to_their_end_with_our_units(tmp_path: Path) -> None:
    """ADK's run with our units inline and a durable run's essential work: every run
    ends ACTUALLY_DONE by the classifier (an error is counted otherwise)."""
    result = _child("essentials-sqlite", f"sqlite:///{tmp_path / 'bench.db'}", 10, 1.5)
    assert result["contender"] == "essentials-sqlite"
    assert result["runs"] > 0 and result["errors"] == {}, result
    # Our run's units, sent at their points: a handful of statements a run.
    assert 3 <= result["statements"] / result["runs"] <= 20, result
