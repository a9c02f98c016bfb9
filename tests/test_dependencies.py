"""The declared dependencies are the imported ones, and the pins are what they need.

pyproject.toml names every third-party distribution the code imports
(runtime code: ``dependencies`` and the ``scale`` extra; tests and bench also
the ``dev`` extra) and nothing that nothing imports. requirements.txt pins
the runtime's dependencies and everything they require, requirements-dev.txt
the rest of the dev extra's: read from the installed packages' metadata.
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
RUNTIME_CODE = ("kernel", "corpus", "mcp_gateway", "payments", "dir2mcp_site", "manage.py")
DEV_CODE = ("tests", "bench")
# bench/embedder.py compares against these in the side venv `make equivalence-env` builds.
SIDE_VENV_ONLY = {"torch", "sentence_transformers", "httpx2"}  # httpx2: the mcp 2.3 client's venv
# Declared, and used without an import statement.
NOT_IMPORTED = {
    "ruff": "run as a command: make lint",
    "mypy": "run as a command: make typecheck",
    "django-stubs": "read by mypy (make typecheck)",
    "celery-types": "read by mypy (make typecheck)",
    "types-jsonschema": "read by mypy (make typecheck)",
    "types-openpyxl": "read by mypy (make typecheck)",
    "types-pyyaml": "read by mypy (make typecheck)",
    "types-regex": "read by mypy (make typecheck)",
    "pytest-django": "a pytest plugin",
    "pytest-timeout": "a pytest plugin",
    "pytest-xdist": "a pytest plugin: make test's -n 2",
    "channels-redis": "loaded by name from settings.CHANNEL_LAYERS",
}
SUPPORTED_PYTHONS = ("3.11", "3.12", "3.13", "3.14")


def python_files(*names: str) -> list[Path]:
    files: list[Path] = []
    for name in names:
        path = REPO / name
        files.extend([path] if path.is_file() else sorted(path.rglob("*.py")))
    return files


def is_local(module: str, importer: Path) -> bool:
    """Our own packages, or a script's sibling module (bench/ runs its files as scripts)."""
    return any(
        (folder / module).with_suffix(".py").exists() or (folder / module).is_dir()
        for folder in (REPO, importer.parent)
    )


def type_checking_nodes(tree: ast.AST) -> set[int]:
    """The ids of the nodes inside ``if TYPE_CHECKING:`` blocks: imports the
    type checker reads (make typecheck) and the program never runs."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            inside.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    return inside


def third_party_imports(*names: str, type_checking: bool = False) -> dict[str, set[str]]:
    """Top-level module name -> the files (relative) that import it: the
    imports the program runs, or (``type_checking``) those only the type
    checker reads."""
    found: dict[str, set[str]] = {}
    for path in python_files(*names):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        checker_only = type_checking_nodes(tree)
        for node in ast.walk(tree):
            if (id(node) in checker_only) != type_checking:
                continue
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for top in {module.split(".")[0] for module in modules}:
                if top not in sys.stdlib_module_names and not is_local(top, path):
                    found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


@cache
def distribution_of(module: str) -> str | None:
    """The distribution an import name comes from; when several install files
    under it (``twisted/plugins``), the one named like the module."""
    names = {canonicalize_name(d) for d in _packages_distributions().get(module, [])}
    if canonicalize_name(module) in names:
        return canonicalize_name(module)
    return min(names) if len(names) == 1 else None


@cache
def _packages_distributions() -> dict[str, list[str]]:
    return metadata.packages_distributions()


@cache
def pyproject_groups() -> dict[str, list[Requirement]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    groups = {"dependencies": project["dependencies"], **project["optional-dependencies"]}
    return {group: [Requirement(line) for line in lines] for group, lines in groups.items()}


def requirement_lines(name: str) -> list[str]:
    lines = (line.split("#")[0].strip() for line in (REPO / name).read_text().splitlines())
    return [line for line in lines if line]


def pinned(name: str) -> set[str]:
    return {canonicalize_name(Requirement(line).name) for line in requirement_lines(name) if line[0] != "-"}


def declared(*groups: str) -> set[str]:
    names = {canonicalize_name(req.name) for group in groups for req in pyproject_groups()[group]}
    return names | pinned("requirements-models.txt")  # the model weights, installed with --no-deps


def closure(requirements: list[Requirement], *, any_python: bool) -> set[str]:
    """The distributions ``requirements`` need, through the installed metadata.
    ``any_python``: also what only another supported Python would need."""
    pythons = SUPPORTED_PYTHONS if any_python else (None,)
    needed: set[str] = set()
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = list(requirements)
    while todo:
        req = todo.pop()
        name, extras = canonicalize_name(req.name), frozenset(req.extras)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        needed.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # needed only elsewhere (another Python): then it is not pinned either
        for line in requires:
            sub = Requirement(line)
            environments = [
                {"extra": extra}
                | ({"python_version": python, "python_full_version": f"{python}.0"} if python else {})
                for extra in extras or {""}
                for python in pythons
            ]
            if sub.marker is None or any(sub.marker.evaluate(env) for env in environments):
                todo.append(sub)
    return needed


@pytest.mark.parametrize(
    ("code", "groups", "type_checking"),
    [
        pytest.param(RUNTIME_CODE, ("dependencies", "scale"), False, id="runtime"),
        pytest.param(RUNTIME_CODE, ("dependencies", "scale", "dev"), True, id="type-checking"),
        pytest.param(DEV_CODE, ("dependencies", "scale", "dev"), False, id="tests-and-bench"),
    ],
)
def test_every_third_party_import_is_declared(code, groups, type_checking):
    allowed = declared(*groups)

    undeclared = {
        module: (distribution_of(module) or "not installed", sorted(files)[:3])
        for module, files in third_party_imports(*code, type_checking=type_checking).items()
        if module not in SIDE_VENV_ONLY and distribution_of(module) not in allowed
    }

    assert undeclared == {}, f"import -> (distribution, importers); declare it in pyproject.toml {groups}"


def test_every_declared_dependency_is_imported_or_run():
    code = (*RUNTIME_CODE, *DEV_CODE)
    modules = {*third_party_imports(*code), *third_party_imports(*code, type_checking=True)}
    imported = {distribution_of(module) for module in modules}
    everything = declared(*pyproject_groups())

    unused = everything - imported - set(NOT_IMPORTED)

    assert unused == set(), "declared in pyproject.toml but never imported"
    assert set(NOT_IMPORTED) <= everything, "NOT_IMPORTED names something no longer declared"


def test_requirements_pin_exactly_what_the_declared_dependencies_need():
    groups = pyproject_groups()
    runtime = groups["dependencies"] + groups["scale"]
    dev = groups["dev"]
    runtime_pins, dev_pins = pinned("requirements.txt"), pinned("requirements-dev.txt")

    assert "-r requirements.txt" in requirement_lines("requirements-dev.txt")
    assert closure(runtime, any_python=False) - runtime_pins == set(), "needed at run time, not pinned"
    assert runtime_pins - closure(runtime, any_python=True) == set(), "pinned, needed by nothing at run time"
    assert closure(runtime + dev, any_python=False) - runtime_pins - dev_pins == set(), "needed, not pinned"
    assert dev_pins - closure(dev, any_python=True) == set(), "pinned for dev, needed by nothing"
    assert dev_pins & runtime_pins == set(), "pinned twice"


def test_requirement_files_pin_exact_versions():
    loose = [
        line
        for name in ("requirements.txt", "requirements-dev.txt", "requirements-models.txt")
        for line in requirement_lines(name)
        if line[0] != "-" and not re.fullmatch(r"[^=<>!~ ]+==[^=<>!~ ]+", line)
    ]

    assert loose == []
