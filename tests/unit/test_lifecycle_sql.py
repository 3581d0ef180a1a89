"""The lifecycle SQL's per-table statements are what scripts/gen_lifecycle_sql.py writes.

The purge's, payload-only retention's and the dry run's statements of
``queries_lifecycle.sql`` are generated from one table of steps for both
dialects; this fails when a statement was edited by hand or the table changed
without running the script, and when the table and the purge's own list of
tables disagree.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from durable_adk.lifecycle.purge import DELETE_STEPS, KEPT_BY_RETENTION, SCRUB_STEPS
from durable_adk.store.queries import load_queries

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gen_lifecycle_sql.py"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_lifecycle_sql", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_the_files_hold_what_the_table_of_steps_generates(dialect: str) -> None:
    gen = generator()
    text = gen.FILES[dialect].read_text()
    assert gen.rewrite(text, gen.statements(dialect)) == text, (
        f"{gen.FILES[dialect]} differs from its table of steps: "
        "run python scripts/gen_lifecycle_sql.py (and edit the table there, not the SQL)"
    )
    loaded = load_queries(dialect)
    for name in gen.statements(dialect):
        assert name in loaded, name


def test_the_table_of_steps_is_the_purges_list_of_tables() -> None:
    gen = generator()
    assert tuple(s.table for s in gen.STEPS) == DELETE_STEPS
    assert tuple(s.table for s in gen.SCRUBS) == SCRUB_STEPS
    assert {s.table for s in gen.STEPS if not s.preview} == KEPT_BY_RETENTION


def test_a_statement_edited_by_hand_or_missing_is_found() -> None:
    gen = generator()
    text = gen.FILES["sqlite"].read_text()
    edited = text.replace("LIMIT :batch)", "LIMIT :batch * 2)", 1)
    assert gen.rewrite(edited, gen.statements("sqlite")) == text  # put back as generated
    gone = text.replace("-- name: scrub_runs\n", "-- name: scrub_runs_old\n")
    with pytest.raises(ValueError, match="scrub_runs"):
        gen.rewrite(gone, gen.statements("sqlite"))
