"""Import paths of modules that moved, kept working for one release with a warning.

After 0.1.0 each concept got a package of its own (docs/architecture.md):
``durable_adk.ledger`` is now :mod:`durable_adk.tables.ledger`,
``durable_adk.adk.session_service`` is :mod:`durable_adk.adk.services.sessions`,
and so on (the table below). An import of an old path still works and gives
the very module of the new path (the same objects, not copies), with a
:class:`DeprecationWarning` naming the new path; ``python -m`` on an old path
runs the new module. The old paths work through release 0.2 and go in 0.3. The public API
(``from durable_adk import ...``) did not move.

One finder at the end of :data:`sys.meta_path`, installed when
:mod:`durable_adk` is imported, instead of a file per old path: the packages
stay the picture of the architecture, with no stand-ins among their modules.
``durable_adk.adk.tools``, now a package, keeps its old names by itself.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import CodeType, ModuleType

MOVED: dict[str, str] = {
    "durable_adk.ledger": "durable_adk.tables.ledger",
    "durable_adk.journal": "durable_adk.effect_tables.journal",
    "durable_adk.tables.journal": "durable_adk.effect_tables.journal",
    "durable_adk.jobs": "durable_adk.effect_tables.jobs",
    "durable_adk.tables.jobs": "durable_adk.effect_tables.jobs",
    "durable_adk.sagas": "durable_adk.effect_tables.sagas",
    "durable_adk.tables.sagas": "durable_adk.effect_tables.sagas",
    "durable_adk.interrupts": "durable_adk.tables.interrupts",
    "durable_adk.schedule_table": "durable_adk.tables.schedules",
    "durable_adk.version_table": "durable_adk.tables.versions",
    "durable_adk.sweeps": "durable_adk.tables.sweeps",
    "durable_adk.leases": "durable_adk.fencing.leases",
    "durable_adk.fence": "durable_adk.fencing.fence",
    "durable_adk.fold": "durable_adk.adk.services.fold",
    "durable_adk.loops": "durable_adk.adk.loops.every",
    "durable_adk.admission": "durable_adk.adk.runs.admission",
    "durable_adk.cli_recover": "durable_adk.cli.recover",
    "durable_adk.cli_schedules": "durable_adk.cli.schedules",
    "durable_adk.cli_versions": "durable_adk.cli.versions",
    "durable_adk.service.client": "durable_adk.cli.client",
    "durable_adk.adk.agent_tree": "durable_adk.adk.shapes.agent_tree",
    "durable_adk.adk.marks": "durable_adk.adk.shapes.marks",
    "durable_adk.adk.optional_imports": "durable_adk.adk.shapes.optional_imports",
    "durable_adk.adk.events": "durable_adk.adk.eventlog.events",
    "durable_adk.adk.classify": "durable_adk.adk.eventlog.classify",
    "durable_adk.adk.stored_events": "durable_adk.adk.eventlog.stored",
    "durable_adk.adk.live": "durable_adk.adk.eventlog.live",
    "durable_adk.adk.barrier": "durable_adk.adk.commits.barrier",
    "durable_adk.adk.drive": "durable_adk.adk.commits.drive",
    "durable_adk.adk.session_service": "durable_adk.adk.services.sessions",
    "durable_adk.adk.artifact_service": "durable_adk.adk.services.artifacts",
    "durable_adk.adk.app_services": "durable_adk.adk.services.app_services",
    "durable_adk.adk.long_running": "durable_adk.adk.tools.long_running",
    "durable_adk.adk.saga_agent": "durable_adk.adk.tools.saga_agent",
    "durable_adk.adk.workflow_nodes": "durable_adk.adk.tools.workflow_nodes",
    "durable_adk.adk.agent_tools": "durable_adk.adk.tools.agent_tools",
    "durable_adk.adk.runpath": "durable_adk.adk.runs.path",
    "durable_adk.adk.driver": "durable_adk.adk.runs.driver",
    "durable_adk.adk.ending": "durable_adk.adk.runs.ending",
    "durable_adk.adk.drift": "durable_adk.adk.runs.drift",
    "durable_adk.adk.fingerprint": "durable_adk.adk.runs.fingerprint",
    "durable_adk.adk.policy": "durable_adk.adk.runs.policy",
    "durable_adk.adk.inbox": "durable_adk.adk.runs.inbox",
    "durable_adk.adk.operators": "durable_adk.adk.runs.operators",
    "durable_adk.adk.background": "durable_adk.adk.loops.background",
    "durable_adk.adk.recovery": "durable_adk.adk.loops.recovery",
    "durable_adk.adk.resume": "durable_adk.adk.loops.resume",
    "durable_adk.adk.scheduler": "durable_adk.adk.loops.scheduler",
    "durable_adk.adk.sleep": "durable_adk.adk.loops.sleep",
    "durable_adk.adk.server": "durable_adk.adk.servers.plugin",
    "durable_adk.adk.service_uri": "durable_adk.adk.servers.uri",
    "durable_adk.testing.chaos": "durable_adk.chaos.soak",
    "durable_adk.testing.chaos_app": "durable_adk.chaos.app",
    "durable_adk.testing.chaos_check": "durable_adk.chaos.check",
    "durable_adk.testing.chaos_net": "durable_adk.chaos.net",
}
"""Old module path -> new module path."""


def moved_note(old: str, new: str) -> str:
    """The deprecation warning's text for a name or module that moved."""
    return f"{old} moved to {new}; the old path goes in durable-adk 0.3"


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module of its new path."""

    def __init__(self, new: str) -> None:
        self.new = new
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(moved_note(spec.name, self.new), DeprecationWarning, stacklevel=2)
        module = importlib.import_module(self.new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system set the old path's spec on the module it was
        # given (the new path's, already run): give it back its own.
        module.__spec__ = self._spec

    def get_code(self, fullname: str) -> CodeType:
        """What ``python -m OLD_PATH`` runs: the new module as ``__main__``."""
        source = (
            "import runpy, warnings\n"
            f"warnings.warn({moved_note(fullname, self.new)!r}, DeprecationWarning)\n"
            f"runpy.run_module({self.new!r}, run_name='__main__', alter_sys=True)\n"
        )
        return compile(source, f"<moved to {self.new}>", "exec")


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of :data:`MOVED`, and nothing else."""

    def find_spec(
        self,
        fullname: str,
        path: object = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    """Puts the finder at the end of :data:`sys.meta_path` (once per interpreter)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
