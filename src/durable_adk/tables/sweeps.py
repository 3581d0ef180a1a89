"""Who recovers an app's runs: the sweepers' beats, by the database clock.

Every recovery sweeper (a worker's, an ``async with DurableRunner`` process's,
one under ``adk api_server``, a ``durable-adk recover`` pass) stamps a row
``(app, worker)`` in the ``sweepers`` table when a pass begins, while it goes
on, and when it ends, at most every :data:`BEAT_EVERY` seconds. A runner that
serves runs without a sweeper of its own asks :func:`sweepers_seen` once:
when no sweeper of its app is live anywhere on the database, runs that die
would stay RUNNING for ever, and it says so in the log
(:meth:`~durable_adk.adk.runner.DurableRunner.warn_if_no_sweeper`).

A periodic sweeper counts as live while its last beat is within three of its
intervals (plus :data:`GRACE`); a one-off pass (``interval`` None) counts for
:data:`ONE_OFF_WINDOW`, the cadence a cron job running ``durable-adk recover``
would typically keep.

Who *serves* an app (what ``durable-adk versions`` lists) is stricter: a
process that runs the background loops (a worker, ``async with
DurableRunner``, one under ``adk api_server``) beats in the ``workers`` table
every few seconds (:func:`record_beat`) and says goodbye when it stops
(:func:`record_leave`); it is listed while its last beat is younger than
:data:`SERVING_WINDOW` of its beat periods, so a killed one drops out after
one missed beat. A one-off pass never beats there: it serves nothing.
Framework-agnostic: no ADK import.
"""

from __future__ import annotations

from dataclasses import dataclass

from durable_adk.store.base import Store
from durable_adk.versions import UNVERSIONED, Serving

GRACE = 30.0
"""Seconds a periodic sweeper may be late beyond three of its intervals and still count."""

BEAT_EVERY = 10.0
"""A sweeper stamps its beat at most this often (less than ``GRACE``, so it always counts)."""

ONE_OFF_WINDOW = 900.0
"""Seconds a one-off recovery pass (``durable-adk recover``) counts as a live sweeper."""

SERVING_WINDOW = 2.0
"""A serving process is listed while its last beat is younger than this many of its
beat periods: the beat after the last one is due, and missed, by then."""


@dataclass(frozen=True, slots=True)
class SweepersSeen:
    """What the database knows of an app's sweepers.

    Attributes:
        alive: How many sweepers of the app are live now.
        last_sweep_at: The newest beat of any of them (database clock), or None: never.
        now: The database clock when asked.
    """

    alive: int
    last_sweep_at: float | None
    now: float

    def describe(self) -> str:
        """``never`` or ``N s ago``: when a sweeper of the app last ran."""
        if self.last_sweep_at is None:
            return "never"
        return f"{max(0.0, self.now - self.last_sweep_at):.0f} s ago"


async def record_sweep(
    store: Store,
    *,
    app_name: str,
    worker_id: str,
    interval: float | None,
    serving: Serving = UNVERSIONED,
) -> None:
    """Stamps this sweeper's beat (database clock), with the versions its worker serves.

    Args:
        store: The open store.
        app_name: The app whose runs it recovers.
        worker_id: The sweeper's worker.
        interval: Seconds between its passes; None for a one-off pass.
        serving: The app version its worker runs and those it continues
            (``durable-adk versions`` says which workers serve what).
    """
    await store.execute(
        "sweeper_beat",
        {
            "app_name": app_name,
            "worker_id": worker_id,
            "interval_s": interval,
            **serving.params(),
        },
    )


async def sweepers_seen(store: Store, *, app_name: str) -> SweepersSeen:
    """How many sweepers of ``app_name`` are live, and when one last ran."""
    row = await store.fetchrow(
        "sweeper_seen", {"app_name": app_name, "grace": GRACE, "one_off_window": ONE_OFF_WINDOW}
    )
    assert row is not None  # a SELECT of scalars always returns its row
    last = row["last_sweep_at"]
    return SweepersSeen(
        alive=int(row["alive"]),
        last_sweep_at=None if last is None else float(last),
        now=float(row["now"]),
    )


async def record_beat(
    store: Store, *, app_name: str, worker_id: str, every: float, serving: Serving = UNVERSIONED
) -> None:
    """Stamps a serving process's beat (database clock), with the versions it serves.

    Args:
        store: The open store.
        app_name: The app it serves.
        worker_id: The process.
        every: Seconds until its next beat.
        serving: The app version it runs and those it continues.
    """
    await store.execute(
        "worker_beat",
        {"app_name": app_name, "worker_id": worker_id, "beat_s": every, **serving.params()},
    )


async def record_leave(store: Store, *, app_name: str, worker_id: str) -> None:
    """A serving process's goodbye: it is no longer listed as serving."""
    await store.execute("worker_leave", {"app_name": app_name, "worker_id": worker_id})
