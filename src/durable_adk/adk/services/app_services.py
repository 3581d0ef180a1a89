"""The services an app's tools use besides sessions, taken from one place for every entry point.

An app whose tools call ``tool_context.save_artifact``/``load_artifact``,
``search_memory`` or ``load_credential`` needs an artifact, memory or
credential service on every process that drives its runs, recovered ones
included: a run recovered without them fails ("Memory service is not
available"). The app names them once, in its own module::

    # my_agents/app.py, next to `app` or `root_agent`
    def durable_adk_services() -> AppServices:
        return AppServices(memory_service=..., credential_service=...)

(a mapping with the same keys works too), or on the command line with
``--services MODULE:FUNCTION``. :func:`load_services` is the one loader:
``durable-adk serve``, ``durable-adk recover`` and the api_server plugin's
recovery (:class:`~durable_adk.adk.servers.plugin.ServerRuns`) all call it, and
:meth:`AppServices.runner_kwargs` hands the result to
:class:`~durable_adk.adk.runner.DurableRunner`. What it guarantees: a
factory that is missing, not callable, raising, async, or returning anything
but these three services is refused with
:class:`~durable_adk.errors.InvalidArgument` naming it, before anything is
opened or written.

The app's schedules come from the same module, the same way for every entry
point: ``durable_adk_schedules``, a list of
:class:`~durable_adk.schedules.Schedule` (or a function returning one), is
read by :func:`load_services` into :attr:`AppServices.schedules`, which
:meth:`AppServices.runner_kwargs` hands to DurableRunner; anything else, or
a bad schedule, is refused the same way (docs/time.md).

So is the app's version (docs/deploying.md): ``durable_adk_version`` (a
PEP 440 string) and, optionally, ``durable_adk_compatible_versions`` (the
earlier versions its code continues) in the same module are read into
:attr:`AppServices.version` and :attr:`AppServices.compatible_versions`, so
``durable-adk recover`` and the api_server plugin claim and record runs as
``durable-adk serve --app-version`` does. A command line's ``--app-version``
replaces the module's whole declaration.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from google.adk.artifacts.base_artifact_service import BaseArtifactService
from google.adk.auth.credential_service.base_credential_service import BaseCredentialService
from google.adk.memory.base_memory_service import BaseMemoryService

from durable_adk import errors
from durable_adk.schedules import Schedule, declared
from durable_adk.versions import Serving

SERVICES_FACTORY = "durable_adk_services"
"""The function an app's module may define to name its services (no arguments)."""

VERSION_NAME = "durable_adk_version"
"""What an app's module may define to declare its version (a PEP 440 string)."""

COMPATIBLE_NAME = "durable_adk_compatible_versions"
"""The earlier versions whose runs the module's code continues (a list of strings)."""

SCHEDULES_NAME = "durable_adk_schedules"
"""What an app's module may define to declare its schedules: a list of
:class:`~durable_adk.schedules.Schedule`, or a function without arguments returning one."""

_KINDS: dict[str, type] = {
    "artifact_service": BaseArtifactService,
    "memory_service": BaseMemoryService,
    "credential_service": BaseCredentialService,
}


@dataclass(frozen=True, slots=True)
class AppServices:
    """An app's ADK services besides sessions; ``None`` where the app needs none.

    Attributes:
        artifact_service: ADK's artifact service for the app's tools (None:
            the runner's default, a ``DurableArtifactService`` on the store).
        memory_service: ADK's memory service (``search_memory``), if any.
        credential_service: ADK's credential service, if any.
        schedules: The app's schedules (from ``durable_adk_schedules`` in its
            module), fired by the background loops of every entry point; None
            when the module declares none (not even an empty list).
        version: The app's version (``durable_adk_version``), None: unversioned.
        compatible_versions: The earlier versions it continues
            (``durable_adk_compatible_versions``).

    Raises:
        InvalidArgument: A value is not an instance of its ADK base class.
    """

    artifact_service: BaseArtifactService | None = None
    memory_service: BaseMemoryService | None = None
    credential_service: BaseCredentialService | None = None
    schedules: tuple[Schedule, ...] | None = None
    version: str | None = None
    compatible_versions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        Serving.declare(self.version, compatible=self.compatible_versions)  # InvalidVersion
        for name, kind in _KINDS.items():
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                raise errors.InvalidArgument(
                    f"{name} must be an ADK {kind.__name__} (or None), not {type(value).__name__}"
                )

    def declared_as(self, version: str | None, compatible: Iterable[str] = ()) -> AppServices:
        """These services with a command line's version declaration, if it makes one.

        ``--app-version`` (with its ``--compatible-version``) replaces the
        module's whole declaration; without either, the module's stands.

        Raises:
            InvalidVersion: The declaration is not a valid one.
        """
        listed = tuple(compatible)
        if version is None and not listed:
            return self
        return replace(self, version=version, compatible_versions=listed)

    def runner_kwargs(self) -> dict[str, Any]:
        """The services given, as ``DurableRunner`` keyword arguments (a version with its
        compatible versions, both or neither)."""
        given = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.version is None:
            del given["compatible_versions"]  # () without a version: __post_init__ refuses more
        return {name: value for name, value in given.items() if value is not None}

    @classmethod
    def of(cls, value: object, *, source: str) -> AppServices:
        """Checks what a services factory returned.

        Args:
            value: An :class:`AppServices`, or a mapping whose keys are among
                ``artifact_service``, ``memory_service``, ``credential_service``.
            source: Where it came from, for the error message.

        Raises:
            InvalidArgument: Anything else, an unknown key, or a value of the
                wrong type.
        """
        if isinstance(value, AppServices):
            return value
        if not isinstance(value, Mapping):
            raise errors.InvalidArgument(
                f"{source} returned {type(value).__name__}: expected AppServices or a "
                f"mapping with {', '.join(_KINDS)}"
            )
        unknown = sorted(str(k) for k in value if k not in _KINDS)
        if unknown:
            raise errors.InvalidArgument(
                f"{source} returned unknown service(s) {', '.join(map(repr, unknown))}: "
                f"expected {', '.join(_KINDS)}"
            )
        try:
            return cls(**value)
        except errors.InvalidArgument as exc:
            raise errors.InvalidArgument(f"{source}: {exc}") from None


def load_services(
    spec: str | None = None,
    *,
    modules: Iterable[str | ModuleType] = (),
    search: Path | None = None,
) -> AppServices:
    """The app's services: from ``spec`` if given, else from its module's factory, else none.

    Args:
        spec: ``MODULE:FUNCTION`` (``--services``): a function without
            arguments returning :class:`AppServices` or a mapping of them.
        modules: The app's module(s), by name or object: the first that
            defines ``durable_adk_services`` gives the services when there is
            no ``spec``.
        search: A folder put first on ``sys.path`` (default: the working
            directory, as ``MODULE:APP`` is loaded).

    Returns:
        The services; empty when neither names any.

    Raises:
        InvalidArgument: The spec is malformed, its module cannot be imported
            or lacks the function, or the factory is not callable, raises,
            is async, or returns something else.
    """
    if spec is not None:
        module_name, _, attribute = spec.partition(":")
        if not module_name or not attribute:
            raise errors.InvalidArgument(
                f"--services {spec!r}: expected MODULE:FUNCTION, e.g. my_agents.app:services"
            )
        module = _import(module_name, search)
        found: object = module
        for part in attribute.split("."):
            if not hasattr(found, part):
                raise errors.InvalidArgument(f"{module_name!r} has no function {attribute!r}")
            found = getattr(found, part)
        return replace(
            _call(found, f"{module_name}:{attribute}"),
            schedules=_schedules(modules, search),
            **_versions(modules, search),
        )
    schedules = _schedules(modules, search)
    versions = _versions(modules, search)
    for candidate in modules:
        module = _import(candidate, search) if isinstance(candidate, str) else candidate
        factory = getattr(module, SERVICES_FACTORY, None)
        if factory is not None:
            found_services = _call(factory, f"{module.__name__}:{SERVICES_FACTORY}")
            return replace(found_services, schedules=schedules, **versions)
    return AppServices(schedules=schedules, **versions)


def _versions(modules: Iterable[str | ModuleType], search: Path | None) -> dict[str, Any]:
    """The version the first of ``modules`` declaring ``durable_adk_version`` declares."""
    for candidate in modules:
        module = _import(candidate, search) if isinstance(candidate, str) else candidate
        version = getattr(module, VERSION_NAME, None)
        compatible = getattr(module, COMPATIBLE_NAME, ())
        if version is None:
            if compatible:
                raise errors.InvalidVersion(
                    f"{module.__name__}:{COMPATIBLE_NAME} needs {VERSION_NAME} beside it"
                )
            continue
        source = f"{module.__name__}:{VERSION_NAME}"
        if isinstance(compatible, str) or not isinstance(compatible, list | tuple):
            raise errors.InvalidVersion(
                f"{module.__name__}:{COMPATIBLE_NAME} must be a list of version strings"
            )
        try:
            Serving.declare(version, compatible=compatible)
        except errors.InvalidVersion as exc:
            raise errors.InvalidVersion(f"{source}: {exc}") from None
        return {"version": version, "compatible_versions": tuple(compatible)}
    return {}


def _schedules(
    modules: Iterable[str | ModuleType], search: Path | None
) -> tuple[Schedule, ...] | None:
    """The schedules the first of ``modules`` declaring ``durable_adk_schedules`` declares."""
    for candidate in modules:
        module = _import(candidate, search) if isinstance(candidate, str) else candidate
        value = getattr(module, SCHEDULES_NAME, None)
        if value is None:
            continue
        source = f"{module.__name__}:{SCHEDULES_NAME}"
        if callable(value):
            if inspect.iscoroutinefunction(value):
                raise errors.InvalidArgument(f"{source} is async: make it a plain function")
            try:
                value = value()
            except errors.InvalidArgument as exc:
                raise errors.InvalidArgument(f"{source}(): {exc}") from exc
            except Exception as exc:  # the app's own code: bad input, with its cause
                raise errors.InvalidArgument(
                    f"{source}() raised {type(exc).__name__}: {exc}"
                ) from exc
        return declared(value, source=source)
    return None


def _import(name: str, search: Path | None) -> ModuleType:
    return import_app_module(name, search=search)


def import_app_module(name: str, *, search: Path | None = None) -> ModuleType:
    """Imports an app's module, ``search`` (default: the working directory) first on the path.

    A module that cannot be found, or whose own code refuses a declaration
    while it is imported (a schedule with a bad cron expression, a bad
    version...), is bad input: the error names the module and the file and
    line of its code that raised.

    Raises:
        InvalidArgument: The module cannot be imported.
    """
    folder = str(search or Path.cwd())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise errors.InvalidArgument(f"cannot import {name!r}: {exc}") from exc
    except errors.InvalidArgument as exc:
        raise errors.InvalidArgument(f"module {name!r}{_where(exc)}: {exc}") from exc


def _where(exc: BaseException) -> str:
    """`` (path/to/file.py, line N)``: the app's own frame that raised, deepest first."""
    library = str(Path(errors.__file__).resolve().parent)
    place = ""
    trace = exc.__traceback__
    while trace is not None:
        filename = trace.tb_frame.f_code.co_filename
        if not filename.startswith(("<", library)):
            place = f" ({filename}, line {trace.tb_lineno})"
        trace = trace.tb_next
    return place


def _call(factory: object, source: str) -> AppServices:
    if not callable(factory):
        raise errors.InvalidArgument(
            f"{source} is a {type(factory).__name__}, not a function returning the services"
        )
    if inspect.iscoroutinefunction(factory):
        raise errors.InvalidArgument(f"{source} is async: make it a plain function")
    try:
        made = factory()
    except Exception as exc:  # the app's own code: report it as bad input, with its cause
        raise errors.InvalidArgument(f"{source}() raised {type(exc).__name__}: {exc}") from exc
    if inspect.isawaitable(made):
        if inspect.iscoroutine(made):
            made.close()  # never awaited: no "was never awaited" warning
        raise errors.InvalidArgument(f"{source}() returned an awaitable: make it a plain function")
    return AppServices.of(made, source=f"{source}()")
