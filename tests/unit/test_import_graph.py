"""The package's import graph: no circle, imports only go down, each room in its bounds.

Read from the source with :mod:`ast` (nothing is imported): every ``import``
and ``from ... import`` of a ``durable_adk`` module counts, at module level,
inside a function or under ``if TYPE_CHECKING:`` (a circle of type imports is
still a circle a reader has to untangle). Checked: no circle between modules;
no circle between packages (a top-level module counts as a package of its
own); the layer rule (the core never imports the ADK layer, the service, the
CLI or the kits; only the ADK layer imports ``google.adk``); every room's floor
(docs/architecture.md), each importing only its floor or below; and no folder
past the size a reader takes in at once.
"""

from __future__ import annotations

import ast
from pathlib import Path

import durable_adk

ROOT = Path(durable_adk.__file__).parent

# The demos and the chaos soak are built on the testing kit (a scripted model,
# fake services, a throwaway PostgreSQL) by design; everything else is
# production code.
NOT_PRODUCTION = ("durable_adk.testing", "durable_adk.demo", "durable_adk.chaos")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    tree = ast.parse(path.read_text())
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import mod`` imports the module ``pkg.mod`` when there is one.
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        found.update(n for n in names if n in modules and n != me)
    return found


def _graph() -> dict[str, set[str]]:
    paths = sorted(ROOT.rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    return {_module_name(p): _imports(p, modules) for p in paths}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _is_package_init(name: str) -> bool:
    return (ROOT.parent / name.replace(".", "/") / "__init__.py").exists()


def test_the_package_has_no_import_circle() -> None:
    graph = _graph()
    # A package's __init__ that re-exports its children is not a circle of design:
    # the edges from a package to its own submodules are left out.
    trimmed = {
        m: {d for d in deps if not (_is_package_init(m) and d.startswith(m + "."))}
        for m, deps in graph.items()
    }
    assert _cycles(trimmed) == []


def _room(module: str) -> str:
    """The package a module lives in; a module at the top of durable_adk is a room of its own."""
    if _is_package_init(module):
        return module
    parent = module.rpartition(".")[0]
    return module if parent == "durable_adk" else parent


def _rooms(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import arrows between rooms (a package's __init__ re-exporting its children left out)."""
    rooms: dict[str, set[str]] = {}
    for module, deps in graph.items():
        here = rooms.setdefault(_room(module), set())
        for dep in deps:
            if _is_package_init(module) and dep.startswith(module + "."):
                continue
            if _room(dep) != _room(module):
                here.add(_room(dep))
    return rooms


def test_no_circle_between_packages() -> None:
    assert _cycles(_rooms(_graph())) == []


# The floors of docs/architecture.md, bottom first: a room imports rooms of its
# own floor or below, never above. A new package must be given its floor here.
FLOORS: list[set[str]] = [
    {  # the ground floor; the public API's names load lazily, by string
        "durable_adk",
        "durable_adk._moved",
        "durable_adk.errors",
        "durable_adk.faults",
        "durable_adk.limits",
        "durable_adk.ids",
        "durable_adk.metrics",
        "durable_adk.runlog",
        "durable_adk.cron",
        "durable_adk.versions",
    },
    {"durable_adk.store", "durable_adk.store.sealing"},
    {"durable_adk.schedules"},
    {"durable_adk.tables", "durable_adk.effect_tables", "durable_adk.a2a_tables"},
    {"durable_adk.lifecycle"},
    {"durable_adk.fencing", "durable_adk.webhooks"},
    {"durable_adk.adk.shapes", "durable_adk.adk.eventlog"},
    {"durable_adk.adk.commits"},
    {"durable_adk.adk.services"},
    {"durable_adk.adk.tools"},
    {"durable_adk.adk.runs"},
    {"durable_adk.adk.loops"},
    {"durable_adk.adk"},  # runner.py: DurableRunner, the facade
    {
        "durable_adk.adk.servers",
        "durable_adk.a2a",
        "durable_adk.service",
        "durable_adk.testing",
        "durable_adk.testing.fakes",
    },
    {"durable_adk.demo", "durable_adk.chaos"},
    {"durable_adk.cli"},
]


def _floor(room: str) -> int:
    return next(i for i, rooms in enumerate(FLOORS) if room in rooms)


def test_every_room_has_its_floor_and_imports_only_down() -> None:
    rooms = _rooms(_graph())
    assert set(rooms) == set().union(*FLOORS)
    upward = sorted(
        f"{room} imports {dep}"
        for room, deps in rooms.items()
        for dep in deps
        if _floor(dep) > _floor(room)
    )
    assert upward == []


# Everything above the core: the core imports none of it.
ABOVE_THE_CORE = (
    "durable_adk.adk",
    "durable_adk.a2a",
    "durable_adk.service",
    "durable_adk.cli",
    "durable_adk.testing",
    "durable_adk.chaos",
    "durable_adk.demo",
)


def _imports_google_adk(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(
            a.name.startswith("google.adk") for a in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("google.adk"):
            return True
    return False


def test_the_core_imports_neither_adk_nor_anything_above_it() -> None:
    core = [
        p
        for p in sorted(ROOT.rglob("*.py"))
        if _module_name(p) != "durable_adk" and not _module_name(p).startswith(ABOVE_THE_CORE)
    ]
    assert any(_module_name(p) == "durable_adk.tables.ledger" for p in core)
    graph = _graph()
    offenders = sorted(
        f"{_module_name(p)} imports {dep}"
        for p in core
        for dep in graph[_module_name(p)]
        if dep.startswith(ABOVE_THE_CORE)
    )
    offenders += sorted(
        f"{_module_name(p)} imports google.adk" for p in core if _imports_google_adk(p)
    )
    assert offenders == []


def test_no_folder_is_past_what_a_reader_takes_in_at_once() -> None:
    # "About a dozen modules or 4,000 lines" (STYLE.md), with a little slack.
    too_big = []
    for folder in sorted({p.parent for p in ROOT.rglob("*.py")}):
        modules = [p for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
        lines = sum(len(p.read_text().splitlines()) for p in modules)
        if len(modules) > 13 or lines > 4400:
            too_big.append(
                f"{folder.relative_to(ROOT.parent)}: {len(modules)} modules, {lines} lines"
            )
    assert too_big == []


def test_every_package_says_what_it_holds() -> None:
    silent = sorted(
        _module_name(init)
        for init in ROOT.rglob("__init__.py")
        if not (ast.get_docstring(ast.parse(init.read_text())) or "").strip()
    )
    assert silent == []


def test_no_production_module_imports_the_testing_kit() -> None:
    offenders = sorted(
        f"{module} imports {dep}"
        for module, deps in _graph().items()
        if not module.startswith(NOT_PRODUCTION)
        for dep in deps
        if dep.startswith("durable_adk.testing")
    )
    assert offenders == []


def test_the_reader_sees_a_known_circle_and_a_known_import() -> None:
    # The checks above must be able to fail: the reader finds real edges.
    graph = _graph()
    assert "durable_adk.faults" in graph["durable_adk.effect_tables.journal"]
    # an import under ``if TYPE_CHECKING:`` counts too
    assert "durable_adk.adk.services.app_services" in graph["durable_adk.service.settings"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    # the floors tell an upward arrow from a downward one
    assert _floor("durable_adk.tables") < _floor("durable_adk.adk.runs") < _floor("durable_adk.cli")


def test_every_module_of_the_test_kit_is_for_users() -> None:
    # durable_adk.testing ships in the wheel as the kit users test their apps
    # with: each module is named in the docs or used by a shipped module (the
    # project's own test helpers live under tests/).
    documented = "".join(p.read_text() for p in (ROOT.parent.parent / "docs").glob("*.md"))
    graph = _graph()
    users: dict[str, set[str]] = {}
    for module, deps in graph.items():
        for dep in deps:
            users.setdefault(dep, set()).add(module)
    unused = sorted(
        m
        for m in graph
        if m.startswith("durable_adk.testing.")
        and m not in documented
        and not (users.get(m, set()) - {"durable_adk.testing"})
    )
    assert unused == []
