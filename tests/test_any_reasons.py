"""``Any`` in the application packages only where a library forces it, each
use with its reason: a ``# Any: <why>`` comment on the same line or in the
comment lines directly above it. Our own values get precise types (the JSON
aliases of :mod:`kernel.jsontypes`, Protocols, Callables, TypeVars), so an
``Any`` without a reason is one that nobody has argued for.

A ``# type: ignore`` names the error it silences (mypy's
``ignore-without-code`` checks the same; this test says it without mypy).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kernel", "corpus", "mcp_gateway", "payments", "dir2mcp_site")
REASON = re.compile(r"#\s*Any: \S")
BARE_IGNORE = re.compile(r"#\s*type:\s*ignore(?!\[)")


def _comments(source: str) -> dict[int, str]:
    """Each line's comment, by line number."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {token.start[0]: token.string for token in tokens if token.type == tokenize.COMMENT}


def _explained(line: int, comments: dict[int, str], lines: list[str]) -> bool:
    """A reason on ``line`` or in the comment lines directly above it."""
    if REASON.search(comments.get(line, "")):
        return True
    above = line - 1
    while above >= 1 and lines[above - 1].lstrip().startswith("#"):
        if REASON.match(lines[above - 1].lstrip()):
            return True
        above -= 1
    return False


def _expressions(node: ast.AST) -> Iterator[ast.AST]:
    """``node`` and what it holds, short of the statements nested in it."""
    yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, ast.stmt):
            yield from _expressions(child)


def _any_uses(tree: ast.AST) -> set[tuple[int, int]]:
    """Each ``Any`` (or ``typing.Any``) named: (its line, its statement's first line)."""
    found = set()
    for statement in ast.walk(tree):
        if not isinstance(statement, ast.stmt):
            continue
        for child in ast.iter_child_nodes(statement):
            if isinstance(child, ast.stmt):
                continue
            for node in _expressions(child):
                if (isinstance(node, ast.Name) and node.id == "Any") or (
                    isinstance(node, ast.Attribute) and node.attr == "Any"
                ):
                    found.add((node.lineno, statement.lineno))
    return found


def problems(source: str) -> list[str]:
    """What a module's source lacks: an ``Any`` without its reason (on its
    line or its statement's first line, or in the comment lines directly above
    either), a ``# type: ignore`` without its error code; each as ``line: what``."""
    comments, lines = _comments(source), source.splitlines()
    unexplained = {
        line
        for line, first in _any_uses(ast.parse(source))
        if not (_explained(line, comments, lines) or _explained(first, comments, lines))
    }
    found = [f"{line}: Any without a '# Any: <why>' reason" for line in sorted(unexplained)]
    found += [
        f"{line}: type: ignore without an error code"
        for line, text in comments.items()
        if BARE_IGNORE.search(text)
    ]
    return sorted(found, key=lambda text: int(text.split(":")[0]))


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param("x: Any = 1\n", ["1: Any without a '# Any: <why>' reason"], id="bare"),
        pytest.param("x: Any = 1  # Any: the library's type\n", [], id="reason-on-the-line"),
        pytest.param("# Any: the library's type\nx: Any = 1\n", [], id="reason-above"),
        pytest.param(
            "# Any: the library's type,\n# over two lines\nx: Any = 1\n", [], id="reason-in-block-above"
        ),
        pytest.param(
            "# Any: the library's type\n\nx: Any = 1\n",
            ["3: Any without a '# Any: <why>' reason"],
            id="blank-line-between",
        ),
        pytest.param(
            "# Any: one line\nx: Any = 1\ny: Any = 2\n",
            ["3: Any without a '# Any: <why>' reason"],
            id="one-reason-one-line",
        ),
        pytest.param("x: Any = 1  # Any:\n", ["1: Any without a '# Any: <why>' reason"], id="empty-reason"),
        pytest.param(
            "x: Any = 1  # any type\n", ["1: Any without a '# Any: <why>' reason"], id="not-the-form"
        ),
        pytest.param(
            "import typing\nx: typing.Any = 1\n", ["2: Any without a '# Any: <why>' reason"], id="qualified"
        ),
        pytest.param("y = cast(Any, x)\n", ["1: Any without a '# Any: <why>' reason"], id="cast"),
        pytest.param(
            "def f(*args: Any) -> None:\n    pass\n",
            ["1: Any without a '# Any: <why>' reason"],
            id="signature",
        ),
        pytest.param(
            "# Any: the library's signature\ndef f(\n    a: Any,\n    b: int,\n) -> Any:\n    pass\n",
            [],
            id="reason-above-the-statement",
        ),
        pytest.param(
            "def f(\n    a: Any,\n) -> None:\n    # Any: in the body, not above the statement\n    pass\n",
            ["2: Any without a '# Any: <why>' reason"],
            id="reason-in-the-body",
        ),
        pytest.param(
            "# Any: covers the def, not its body\ndef f(a: Any) -> None:\n    x: Any = a\n",
            ["3: Any without a '# Any: <why>' reason"],
            id="statement-reason-not-for-its-body",
        ),
        pytest.param('"""Any text."""\nfrom typing import Any\n', [], id="docstring-and-import"),
        pytest.param(
            "x = f()  # type: ignore\n", ["1: type: ignore without an error code"], id="bare-ignore"
        ),
        pytest.param("x = f()  # type: ignore[no-untyped-call]\n", [], id="ignore-with-code"),
    ],
)
def test_problems_finds_unexplained_any_and_bare_ignores(source: str, expected: list[str]) -> None:
    assert problems(source) == expected


def test_every_any_in_the_application_says_why() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            found += [
                f"{path.relative_to(ROOT)}:{problem}"
                for problem in problems(path.read_text(encoding="utf-8"))
            ]
    assert found == []
