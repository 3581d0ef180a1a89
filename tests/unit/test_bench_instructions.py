"""The instruction-count bench (bench/instructions.py): what it reads from callgrind's dumps,
the steps it counts, and how it refuses to run without valgrind."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from bench import instructions
from bench.runner import BOUNDS_STEPS, _is_step, open_bounds_steps


def _dump(folder: Path, number: int, trigger: str, totals: int) -> None:
    (folder / f"cg.out.{number}").write_text(
        "version: 1\ncreator: callgrind-3.19.0\n"
        f"part: {number}\ndesc: Trigger: {trigger}\n"
        "events: Ir\nsummary: 18446744073131393334\n"  # callgrind's summary can wrap: unused
        "fn=(1) main\n0 5\n"
        f"totals: {totals}\n"
    )


def test_blocks_are_read_by_contender_and_round_and_other_dumps_are_left_out(
    tmp_path: Path,
) -> None:
    _dump(tmp_path, 1, "dump step0-round0", 600)
    _dump(tmp_path, 2, "dump step1-round0", 900)
    _dump(tmp_path, 3, "dump step0-round1", 300)
    _dump(tmp_path, 4, "dump step1-round1", 450)
    _dump(tmp_path, 5, "dump step0-round2", 330)
    _dump(tmp_path, 6, "dump step1-round2", 480)
    _dump(tmp_path, 7, "Program termination", 10**9)
    counts = instructions.read_dumps(tmp_path)
    assert counts == {
        (0, 0): 600,
        (1, 0): 900,
        (0, 1): 300,
        (1, 1): 450,
        (0, 2): 330,
        (1, 2): 480,
    }
    # The first round is dropped; the rest give the median per run (3 runs a block).
    assert instructions.per_run(counts, 2, 3) == [pytest.approx(105), pytest.approx(155)]


def test_a_contender_with_fewer_than_two_rounds_is_an_error_not_a_figure(tmp_path: Path) -> None:
    _dump(tmp_path, 1, "dump step0-round0", 600)
    _dump(tmp_path, 2, "dump step0-round1", 300)
    _dump(tmp_path, 3, "dump step1-round0", 900)
    with pytest.raises(RuntimeError, match="contender 1: 1 block"):
        instructions.per_run(instructions.read_dumps(tmp_path), 2, 3)


def test_the_table_puts_each_step_against_the_bound_and_the_step_before() -> None:
    names = ["adk", "bound", "rows", "units", "ours"]
    text = instructions.table(names, [19e6, 20e6, 21e6, 21.5e6, 24e6], runs=30, rounds=4)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "contender" not in line]
    assert [r.split("|")[1].strip() for r in rows] == names
    assert "| 1.20x" in rows[-1] and "+2.50 M" in rows[-1]
    assert "| 1.00x" in rows[1] and "| 0.95x" in rows[0]
    assert "3 x 30 runs" in text


def test_without_valgrind_it_says_what_is_missing_and_runs_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shutil, "which", lambda tool: None)
    ran: list[object] = []
    monkeypatch.setattr(instructions, "count", lambda *a: ran.append(a) or "")
    with pytest.raises(SystemExit, match="valgrind, callgrind_control"):
        instructions.main([])
    with pytest.raises(SystemExit, match="unknown argument"):
        instructions.main(["--fast"])
    assert ran == []


async def test_the_steps_are_the_bounds_steps_in_order(tmp_path: Path) -> None:
    async with open_bounds_steps(tmp_path) as contenders:
        adk, *steps = contenders
        assert adk.name == "ADK Runner + InMemorySessionService"
        assert [type(c) for c in steps] == [kind for kind, _ in BOUNDS_STEPS]
        assert all(_is_step(c, kind) for c, (kind, _) in zip(steps, BOUNDS_STEPS, strict=True))
        for c in contenders:
            c.prepare(1)
            await c.run_once()


def test_code_is_put_in_its_layer() -> None:
    site = "/x/.venv/lib/python3.11/site-packages"
    assert instructions.layer_of("/r/src/durable_adk/adk/services/sessions.py") == (
        "durable_adk.adk.services"
    )
    assert instructions.layer_of("/r/src/durable_adk/adk/runner.py") == "durable_adk.adk.runner"
    assert instructions.layer_of("/r/src/durable_adk/store/sqlite.py") == "durable_adk.store"
    assert instructions.layer_of("/r/src/durable_adk/limits.py") == "durable_adk.limits"
    assert instructions.layer_of(f"{site}/google/adk/runners.py") == "google.adk"
    assert instructions.layer_of("/usr/lib/python3.11/asyncio/tasks.py") == "asyncio"
    assert instructions.layer_of(f"{site}/pydantic/main.py") == "pydantic"
    assert instructions.layer_of("/usr/lib/python3.11/json/encoder.py").startswith("other")


async def test_layers_count_what_a_durable_run_adds_over_adks() -> None:
    text = await instructions.layers(runs=2)
    rows = {
        line.split("|")[1].strip(): line.split("|")[4].strip()
        for line in text.splitlines()
        if line.startswith("| ") and "layer" not in line
    }
    # The session service and the store run only in a durable run; ADK runs in both.
    assert int(rows["durable_adk.adk.services"].replace(",", "")) > 0
    assert int(rows["durable_adk.store"].replace(",", "")) > 0
    assert int(rows["all"].replace(",", "")) > 0
