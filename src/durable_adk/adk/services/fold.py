"""State as a fold over an event log, and the snapshot rule.

Session-scoped state is never stored as the truth: it is what you get by
applying every event's state delta, in append order, to the state the session
was created with. A delta is applied as ``dict.update`` (a key set to ``None``
keeps the key with the value ``None``, as ADK's own services do). Snapshots
cache the fold at sequence numbers that are multiples of ``every``; the fold
from a snapshot plus the deltas after it equals the fold of the whole log.

App-scoped (``app:``) and user-scoped (``user:``) keys are shared between
sessions and kept materialized by the store; ``temp:`` keys are never stored.
This module has no ADK import.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

APP_PREFIX = "app:"
USER_PREFIX = "user:"
TEMP_PREFIX = "temp:"


def fold(initial: Mapping[str, Any], deltas: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Applies deltas in order to a copy of ``initial``.

    Args:
        initial: The state to start from (not modified).
        deltas: Session-scoped deltas, oldest first.

    Returns:
        A new dict: the folded state.
    """
    state = dict(initial)
    for delta in deltas:
        state.update(delta)
    # One copy at the end detaches every value from the inputs.
    return copy.deepcopy(state)


def split_delta(
    delta: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Splits a delta into (session, app, user) parts, dropping ``temp:`` keys.

    App and user keys lose their prefix, as the shared tables store them.
    """
    session: dict[str, Any] = {}
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    for key, value in (delta or {}).items():
        if key.startswith(APP_PREFIX):
            app[key.removeprefix(APP_PREFIX)] = value
        elif key.startswith(USER_PREFIX):
            user[key.removeprefix(USER_PREFIX)] = value
        elif not key.startswith(TEMP_PREFIX):
            session[key] = value
    return session, app, user


def merged_view(
    session: Mapping[str, Any], app: Mapping[str, Any], user: Mapping[str, Any]
) -> dict[str, Any]:
    """The state a caller sees: session keys plus prefixed app and user keys."""
    view = copy.deepcopy(dict(session))
    for key, value in app.items():
        view[APP_PREFIX + key] = copy.deepcopy(value)
    for key, value in user.items():
        view[USER_PREFIX + key] = copy.deepcopy(value)
    return view


def is_snapshot_seq(seq: int, every: int) -> bool:
    """Whether the fold at ``seq`` is cached as a snapshot."""
    return every > 0 and seq > 0 and seq % every == 0


def snapshots_of(
    initial: Mapping[str, Any], deltas: Iterable[tuple[int, Mapping[str, Any] | None]], every: int
) -> list[tuple[int, dict[str, Any]]]:
    """Computes every snapshot of a log from scratch (the rebuild).

    Args:
        initial: The state the session was created with.
        deltas: ``(seq, session_delta_or_None)`` for every event, in order,
            with no gaps in ``seq``.
        every: The snapshot interval.

    Returns:
        ``(seq, state)`` for each snapshot sequence number in the log.
    """
    state = copy.deepcopy(dict(initial))
    out: list[tuple[int, dict[str, Any]]] = []
    for seq, delta in deltas:
        if delta:
            state.update(copy.deepcopy(dict(delta)))
        if is_snapshot_seq(seq, every):
            out.append((seq, copy.deepcopy(state)))
    return out
