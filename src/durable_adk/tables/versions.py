"""An app's versions: runs by version and status, who serves each, and draining.

:class:`VersionTable` reads what ``durable-adk versions`` (the CLI), ``GET
/v1/versions`` (the API) and the dashboard show, and makes the two operator
actions on a version, each audited in the same unit of work as the change:

* **drain** a version: no new run starts on it (a worker of that version
  refuses new invocations with :class:`~durable_adk.errors.Draining`, so a
  load balancer sends them to a worker of another version); its runs go on
  and finish on the workers that serve it (answers, resumes, recovery);
* **undrain** it: it takes new runs again;
* **move** a retired version's open runs to a newer version whose code can
  continue them (its workers then claim them; drift is still checked against
  the code they were recorded under), one audit line naming how many;
* **abandon** them: each open run is cancelled as an operator's cancel
  (its invocation's jobs, timers and interrupts too), each audited.

A version's line (:class:`VersionInfo`) says how many runs it has in each
status, which live workers run it as their own version and which continue it
(declared compatible), and how many of its runs are **waiting for their
version**: QUEUED, or RUNNING with an expired lease, while no live worker
serves it. Those are never parked for it: they wait until a worker of their
version (or one declaring it compatible) runs again.

Live workers are the processes serving the app now: they run its
background loops, beat every few seconds and have not said goodbye
(:func:`durable_adk.tables.sweeps.record_beat`); a killed one drops out after
one missed beat, a one-off ``durable-adk recover`` pass is never one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from durable_adk import errors
from durable_adk.ids import check_id
from durable_adk.store import Store
from durable_adk.tables.sweeps import SERVING_WINDOW
from durable_adk.versions import is_newer, parse_version

NO_VERSION = "(none)"
"""How runs recorded without a version are listed."""


@dataclass(frozen=True, slots=True)
class VersionInfo:
    """One version of an app as the store holds it.

    Attributes:
        version: The version string (:data:`NO_VERSION` for runs without one).
        runs: Runs by status.
        own_workers: Live workers whose own version this is.
        continued_by: Live workers of a newer version that declare it compatible.
        waiting: Its runs QUEUED or RUNNING past their lease while no live
            worker serves it (waiting for their version).
        drained_at: When an operator drained it (database clock), or None.
        drained_by: Who drained it.
        reason: Why.
    """

    version: str
    runs: dict[str, int] = field(default_factory=dict)
    own_workers: tuple[str, ...] = ()
    continued_by: tuple[str, ...] = ()
    waiting: int = 0
    drained_at: float | None = None
    drained_by: str | None = None
    reason: str | None = None

    @property
    def served(self) -> bool:
        """Whether a live worker serves it."""
        return bool(self.own_workers or self.continued_by)

    def describe(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "version": self.version,
            "runs": dict(self.runs),
            "total": sum(self.runs.values()),
            "own_workers": list(self.own_workers),
            "continued_by": list(self.continued_by),
            "waiting": self.waiting,
            "drained_at": self.drained_at,
            "drained_by": self.drained_by,
            "reason": self.reason,
        }


class VersionTable:
    """An app's versions on one store (both backends)."""

    def __init__(self, store: Store, app_name: str) -> None:
        """Reads and changes the versions of ``app_name``."""
        check_id("app_name", app_name)
        self.store = store
        self.app_name = app_name

    async def report(self) -> list[VersionInfo]:
        """Every version with runs, a live worker or a drain, newest first (none last)."""
        where = {"app_name": self.app_name}
        runs = await self.store.fetch("versions_runs", where)
        workers = await self.store.fetch("versions_workers", {**where, "window": SERVING_WINDOW})
        drained = await self.store.fetch("versions_drained", where)
        counts: dict[str, dict[str, int]] = {}
        unheld: dict[str, int] = {}
        for row in runs:
            version = row["app_version"] or NO_VERSION
            counts.setdefault(version, {})[str(row["status"])] = int(row["n"])
            unheld[version] = unheld.get(version, 0) + int(row["unheld"] or 0)
        own: dict[str, list[str]] = {}
        continued: dict[str, list[str]] = {}
        unversioned_workers: list[str] = []
        for row in workers:
            worker, mine = str(row["worker_id"]), row["app_version"]
            if mine is None:
                unversioned_workers.append(worker)
                continue
            own.setdefault(mine, []).append(worker)
            for other in json.loads(row["serves"] or "[]"):
                if other != mine:
                    continued.setdefault(other, []).append(worker)
        marks = {str(row["app_version"]): row for row in drained}
        names = set(counts) | set(own) | set(continued) | set(marks)
        infos = []
        for name in names:
            mark = marks.get(name)
            own_workers = tuple(own.get(name, ()))
            continued_by = tuple(continued.get(name, ()))
            # Runs without a version are claimed by every worker.
            served = bool(own_workers or continued_by) or (name == NO_VERSION and bool(workers))
            infos.append(
                VersionInfo(
                    version=name,
                    runs=counts.get(name, {}),
                    own_workers=own_workers if name != NO_VERSION else tuple(unversioned_workers),
                    continued_by=continued_by,
                    waiting=0 if served else unheld.get(name, 0),
                    drained_at=None if mark is None else float(mark["drained_at"]),
                    drained_by=None if mark is None else mark["drained_by"],
                    reason=None if mark is None else mark["reason"],
                )
            )
        return sorted(infos, key=_newest_first)

    async def get(self, version: str) -> VersionInfo:
        """One version's line.

        Raises:
            InvalidVersion: Not a version string (nothing read).
            NotFound: The app has no run, worker or drain of that version.
        """
        parse_version(version)
        for info in await self.report():
            if info.version == version:
                return info
        raise errors.NotFound(f"app {self.app_name!r} has no version {version!r}")

    async def is_drained(self, version: str) -> bool:
        """Whether an operator drained ``version`` (one indexed read)."""
        row = await self.store.fetchrow(
            "version_is_drained", {"app_name": self.app_name, "app_version": version}
        )
        return row is not None

    async def drain(self, version: str, *, by: str, reason: str | None = None) -> bool:
        """Drains a version: no new run starts on it; its runs finish. Audited; True if changed.

        Raises:
            InvalidVersion: Not a version string (nothing written).
            InvalidArgument: A bad ``by`` (nothing written).
        """
        return await self._set(version, "version_drain", by=by, reason=reason)

    async def undrain(self, version: str, *, by: str, reason: str | None = None) -> bool:
        """Lets a drained version take new runs again. Audited; True if changed."""
        return await self._set(version, "version_undrain", by=by, reason=reason)

    async def move(self, version: str, to: str, *, by: str, reason: str | None = None) -> int:
        """Moves ``version``'s open runs to the newer version ``to``; returns how many.

        Audited in the same unit (one line, ``version_move``, with the count).
        Runs already ended stay as they were recorded.

        Raises:
            InvalidVersion: Either is not a version string (nothing written).
            InvalidArgument: ``to`` is not newer than ``version`` (a worker
                never continues a newer version's runs, so a run is never moved
                back), or a bad ``by`` (nothing written).
        """
        parse_version(version)
        parse_version(to)
        check_id("by", by)
        if not is_newer(to, version):
            raise errors.InvalidArgument(
                f"runs of {version} can only move to a newer version, not {to!r} (nothing moved)"
            )
        row = await self.store.fetchrow(
            "version_move",
            {
                "app_name": self.app_name,
                "app_version": version,
                "to_version": to,
                "actor": by,
                "reason": reason,
            },
        )
        return int(row["moved"] or 0) if row else 0

    async def open_runs(self, version: str) -> list[str]:
        """The ids of ``version``'s runs that have not ended (what abandoning it cancels).

        Raises:
            InvalidVersion: Not a version string.
        """
        parse_version(version)
        rows = await self.store.fetch(
            "version_open_runs", {"app_name": self.app_name, "app_version": version}
        )
        return [str(row["run_id"]) for row in rows]

    async def _set(self, version: str, query: str, *, by: str, reason: str | None) -> bool:
        parse_version(version)
        check_id("by", by)
        row = await self.store.fetchrow(
            query,
            {"app_name": self.app_name, "app_version": version, "actor": by, "reason": reason},
        )
        return bool(row and int(row["changed"]))


def _newest_first(info: VersionInfo) -> tuple[int, Any]:
    if info.version == NO_VERSION:
        return (1, 0)
    try:
        return (0, _Reversed(parse_version(info.version)))
    except errors.InvalidVersion:
        return (1, 0)


class _Reversed:
    """Sorts its value in reverse order."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __lt__(self, other: _Reversed) -> bool:
        return bool(self.value > other.value)
