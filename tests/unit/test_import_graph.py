"""The package's import graph: no circle, and no production module leans on the test kit.

Read from the source with :mod:`ast` (nothing is imported): every ``import``
and ``from ... import`` of a ``durable_adk`` module counts, at module level or
inside a function, except those under ``if TYPE_CHECKING:`` (they never run).
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


def _under_type_checking(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def _imports(path: Path, modules: set[str]) -> set[str]:
    tree = ast.parse(path.read_text())
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom) or _under_type_checking(node, parents):
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
    assert "durable_adk.faults" in graph["durable_adk.tables.journal"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
