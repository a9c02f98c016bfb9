"""The project's modules form layers: no import cycles, no import from a
higher package, no borrowed private names, no reach into another module's
private attributes.

The graph is read from the source, not from ``sys.modules``: every ``import``
and ``from ... import`` statement counts, at module level or inside a function,
because a function-level import is still a dependency, only a hidden one.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kernel", "corpus", "mcp_gateway", "payments", "dir2mcp_site")
#: What each package must not import: the kernel (errors, configuration,
#: state directory, secrets, metrics hooks, output, the admin base) is the
#: bottom and imports no app; corpus sits on it; the gateway and payments
#: side by side above corpus; the site is the top (DESIGN.md). No import
#: against this direction is allowed, so there is no allowlist.
ABOVE = {
    "kernel": frozenset({"corpus", "mcp_gateway", "payments", "dir2mcp_site"}),
    "corpus": frozenset({"mcp_gateway", "payments", "dir2mcp_site"}),
    "mcp_gateway": frozenset({"dir2mcp_site"}),
    "payments": frozenset({"dir2mcp_site"}),
    "dir2mcp_site": frozenset(),
}


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    line: int
    names: tuple[str, ...]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            modules[_module_name(path)] = path
    return modules


def _absolute(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The project module that ``name`` (a dotted import target) lives in."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_edges(modules: dict[str, Path]) -> list[Edge]:
    edges = []
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = _owner(alias.name, modules)
                    if target and target != module:
                        edges.append(Edge(module, target, node.lineno, ()))
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(module, is_package, node)
                for alias in node.names:
                    # ``from pkg import submodule`` depends on the submodule.
                    target = _owner(f"{base}.{alias.name}", modules)
                    names = ()
                    if target != f"{base}.{alias.name}":
                        target = _owner(base, modules)
                        names = (alias.name,)
                    if target and target != module:
                        edges.append(Edge(module, target, node.lineno, names))
    return edges


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def shortest_cycle(graph: dict[str, set[str]], members: list[str]) -> list[str]:
    """One shortest cycle through the component, for a readable failure message."""
    inside = set(members)
    best: list[str] = []
    for start in members:
        paths = {start: [start]}
        frontier = [start]
        while frontier and not best:
            step = []
            for node in frontier:
                for child in sorted(graph[node] & inside):
                    if child == start and not best:
                        best = paths[node] + [start]
                    elif child not in paths:
                        paths[child] = paths[node] + [child]
                        step.append(child)
            frontier = step
        if best and len(best) == 3:
            break
    return best


def _describe(cycle: list[str], edges: list[Edge]) -> str:
    lines = []
    for importer, imported in zip(cycle, cycle[1:], strict=False):
        where = min(e.line for e in edges if (e.importer, e.imported) == (importer, imported))
        lines.append(f"    {importer} (line {where}) -> {imported}")
    return "\n".join(lines)


def _graph(modules: dict[str, Path], edges: list[Edge]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for edge in edges:
        graph[edge.importer].add(edge.imported)
    return graph


def test_project_modules_import_without_cycles():
    modules = project_modules()
    edges = import_edges(modules)
    graph = _graph(modules, edges)
    problems = [
        f"cycle among {len(component)} modules {component}, e.g.:\n"
        + _describe(shortest_cycle(graph, component), edges)
        for component in strongly_connected(graph)
    ]
    assert not problems, "import cycles:\n" + "\n".join(problems)


def upward(edges: list[Edge]) -> list[Edge]:
    """The edges from a package to one above it."""
    return [e for e in edges if e.imported.partition(".")[0] in ABOVE[e.importer.partition(".")[0]]]


def test_packages_import_only_downwards():
    found = upward(import_edges(project_modules()))
    assert not found, "imports from a higher layer:\n" + "\n".join(
        f"    {e.importer}:{e.line} -> {e.imported}" for e in found
    )


LAYER_CASES = [
    pytest.param("kernel.state", "corpus.models", True, id="kernel-to-corpus"),
    pytest.param("kernel.config", "payments.gate", True, id="kernel-to-payments"),
    pytest.param("kernel.errors", "mcp_gateway.server", True, id="kernel-to-gateway"),
    pytest.param("kernel.observe", "dir2mcp_site.ops.metrics", True, id="kernel-to-site"),
    pytest.param("corpus.config", "payments.config", True, id="corpus-to-payments"),
    pytest.param("payments.gate", "kernel.errors", False, id="payments-to-kernel"),
    pytest.param("corpus.store", "kernel.state", False, id="corpus-to-kernel"),
    pytest.param("kernel.secrets", "kernel.config", False, id="within-the-kernel"),
]


@pytest.mark.parametrize(("importer", "imported", "refused"), LAYER_CASES)
def test_an_import_from_a_higher_layer_is_refused(importer, imported, refused):
    assert bool(upward([Edge(importer, imported, 1, ())])) is refused


def test_no_module_imports_another_modules_private_names():
    modules = project_modules()
    borrowed = [
        f"{e.importer}:{e.line} imports {name} from {e.imported}"
        for e in import_edges(modules)
        for name in e.names
        if name.startswith("_") and not name.startswith("__")
    ]
    assert not borrowed, "private names used across modules:\n" + "\n".join(borrowed)


#: Underscored attributes that are a library's documented interface, not a
#: private member, each with its reason.
LIBRARY_ATTRIBUTES: dict[str, str] = {
    "_meta": "Django's documented Model _meta API (field and table names)",
    "_state": "Django's documented Model._state (adding, db), set by bulk inserts that skip save()",
    "_default_manager": "Django's documented Model._default_manager, the manager bulk writes use",
    "_exit": "os._exit, the documented way to leave a process without unwinding its threads",
}
#: Reaches into another module's private attribute that stay, by (module,
#: attribute), each with its reason.
PRIVATE_ACCESS_ALLOWED: dict[tuple[str, str], str] = {
    ("corpus.management.base", "_out"): (
        "Django's OutputWrapper keeps no public handle on the stream it wraps, and the Reporter "
        "needs it raw: its TTY progress line is rewritten in place, without the newline "
        "OutputWrapper.write appends"
    ),
    ("corpus.management.commands.config", "_out"): "as corpus.management.base",
}


def _defined_here(tree: ast.AST) -> set[str]:
    """The names a module defines: functions, classes, assigned names, and
    attributes it sets on ``self`` or ``cls``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _on_self(node):
            names.add(node.attr)
    return names


def _on_self(node: ast.Attribute) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")


def private_reaches(source: str) -> list[tuple[int, str, str]]:
    """``x._name`` where ``x`` is not ``self``/``cls`` and this module does not
    define ``_name``: (line, attribute, expression) for each."""
    tree = ast.parse(source)
    here = _defined_here(tree)
    return [
        (node.lineno, node.attr, ast.unparse(node))
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not _on_self(node)
        and node.attr not in here
        and node.attr not in LIBRARY_ATTRIBUTES
    ]


def test_no_module_reaches_into_another_modules_private_attributes():
    found = [
        f"{module}:{line} {expression}"
        for module, path in project_modules().items()
        for line, attribute, expression in private_reaches(path.read_text())
        if (module, attribute) not in PRIVATE_ACCESS_ALLOWED
    ]
    assert not found, "private attributes used across modules:\n" + "\n".join(sorted(found))


def test_allowed_private_reaches_are_still_there():
    present = {
        (module, attribute)
        for module, path in project_modules().items()
        for _, attribute, _ in private_reaches(path.read_text())
    }
    stale = sorted(set(PRIVATE_ACCESS_ALLOWED) - present)
    assert not stale, f"allowlisted private reaches that are gone, remove them: {stale}"


REACHES = [
    pytest.param("def f(indexer):\n    indexer._flush()\n", [(2, "_flush")], id="call-on-another-object"),
    pytest.param("def f(indexer):\n    indexer._listing = True\n", [(2, "_listing")], id="write-to-another"),
    pytest.param("class A:\n    def f(self):\n        self._x = 1\n        return self._x\n", [], id="own"),
    pytest.param("class A:\n    @classmethod\n    def f(cls):\n        return cls._make()\n", [], id="cls"),
    pytest.param(
        "class A:\n    def _g(self):\n        pass\n\ndef f(a):\n    a._g()\n", [], id="same-module"
    ),
    pytest.param("def f(a):\n    return a.__class__, a._meta\n", [], id="dunder-and-library"),
]


@pytest.mark.parametrize(("source", "expected"), REACHES)
def test_private_reaches_are_found(source, expected):
    assert [(line, attribute) for line, attribute, _ in private_reaches(source)] == expected


CASES = [
    pytest.param({"a": {"b"}, "b": {"a"}}, [["a", "b"]], id="two-module-cycle"),
    pytest.param({"a": {"b"}, "b": {"c"}, "c": set()}, [], id="chain"),
    pytest.param({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]], id="triangle"),
]


@pytest.mark.parametrize(("graph", "expected"), CASES)
def test_strongly_connected_finds_cycles(graph, expected):
    assert strongly_connected(graph) == expected


def test_edges_resolve_relative_imports_and_submodules(tmp_path):
    modules = {"pkg": tmp_path / "__init__.py", "pkg.a": tmp_path / "a.py"}
    modules["pkg.b"] = tmp_path / "b.py"
    modules["pkg"].write_text("")
    modules["pkg.a"].write_text("def f():\n    from . import b\n    from .b import _x\n")
    modules["pkg.b"].write_text("from pkg import a\n")
    edges = {(e.importer, e.imported, e.names) for e in import_edges(modules)}
    assert edges == {("pkg.a", "pkg.b", ()), ("pkg.a", "pkg.b", ("_x",)), ("pkg.b", "pkg.a", ())}
