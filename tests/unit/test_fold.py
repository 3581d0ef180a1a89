"""The fold and the snapshot rule, without a database (Hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from durable_adk.adk.services.fold import (
    fold,
    is_snapshot_seq,
    merged_view,
    snapshots_of,
    split_delta,
)

values = st.one_of(
    st.none(), st.integers(), st.text(max_size=4), st.lists(st.integers(), max_size=3)
)
deltas = st.dictionaries(st.sampled_from(list("abcde")), values, max_size=4)


@given(
    initial=deltas,
    log=st.lists(deltas, max_size=40),
    every=st.integers(1, 9),
    cut=st.integers(0, 40),
)
def test_snapshot_plus_tail_equals_full_fold(
    initial: dict[str, Any], log: list[dict[str, Any]], every: int, cut: int
) -> None:
    numbered = list(enumerate(log, start=1))
    snaps = dict(snapshots_of(initial, numbered, every))
    assert set(snaps) == {s for s, _ in numbered if is_snapshot_seq(s, every)}
    whole = fold(initial, log)
    for seq, state in snaps.items():
        assert fold(state, log[seq:]) == whole
        assert state == fold(initial, log[:seq])
    cut = min(cut, len(log))
    assert fold(fold(initial, log[:cut]), log[cut:]) == whole


@given(initial=deltas, log=st.lists(deltas, max_size=10))
def test_fold_never_mutates_its_inputs(initial: dict[str, Any], log: list[dict[str, Any]]) -> None:
    before = (repr(initial), repr(log))
    state = fold(initial, log)
    if isinstance(state.get("a"), list):
        state["a"].append("mutated")
    assert (repr(initial), repr(log)) == before


def test_split_delta_routes_prefixes_and_drops_temp() -> None:
    session, app, user = split_delta({"a": 1, "app:b": 2, "user:c": 3, "temp:d": 4})
    assert (session, app, user) == ({"a": 1}, {"b": 2}, {"c": 3})
    assert merged_view(session, app, user) == {"a": 1, "app:b": 2, "user:c": 3}


def test_snapshot_rule_edges() -> None:
    assert not is_snapshot_seq(0, 5)
    assert is_snapshot_seq(10, 5)
    assert not is_snapshot_seq(10, 0)
