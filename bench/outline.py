"""dir2mcp.outline against a reference parser, on trees nobody here wrote (issue #32).

For each file, the definitions the outline lists are compared with a
reference list of (name, the line the definition is named on):

- Python: the standard library, against :mod:`ast` (every ``def``,
  ``async def`` and ``class``, nested ones included);
- Java (the JDK's ``src.zip``), TypeScript (``lib.*.d.ts`` of the
  ``typescript`` npm package), JavaScript (lodash's modules) and C (this
  machine's ``/usr/include``): against the grammar's own ``tags.scm``
  definitions (``@definition.class|function|method|interface``), shipped in
  each ``tree-sitter-*`` wheel (TypeScript's with JavaScript's, which it
  extends);
- rxjs's TypeScript sources (``rxjs``) and Go's standard library (``go``):
  the same, Go's tags being ``@definition.function|method|type``; and Go
  again against a line scan that uses no parser at all (``go-scan``:
  ``func``/``type`` at the start of a line and the specs of ``type (``
  blocks; see ``bench/corpora.go_definitions``).

It prints, per language: files, reference definitions, the share the outline
lists at the exact line (coverage, goal >= 0.98), the outline's entries that
the reference does not have, and the outline's size against the file's
(the JSON an agent receives, and its ``content[0]`` text; runs of C
``#define`` lines and enumerators folded as ``dir2mcp.outline`` folds them, and
the JSON unfolded as the reference).

    .venv/bin/python bench/outline.py [--files 400] [--languages python,java,ts,js,c,rxjs,go,go-scan]
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
import re
import sys
import sysconfig
import tarfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import tree_sitter

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.corpora import (  # noqa: E402
    LODASH_VERSION,
    TS_VERSION,
    Definition,
    go_definitions,
    jdk_src_zip,
    nav_tree,
    npm_package,
)

TAG_KINDS = {"class", "function", "method", "interface"}
GO_TAG_KINDS = {"function", "method", "type"}  # Go's tags.scm names no class or interface
GRAMMARS = {  # language -> (module, loader name, extension for the outline, tags.scm of these modules)
    "java": ("tree_sitter_java", "language", "java", ("tree_sitter_java",)),
    # TypeScript's tags.scm holds only what it adds to JavaScript's (as its grammar does)
    "ts": (
        "tree_sitter_typescript",
        "language_typescript",
        "ts",
        ("tree_sitter_javascript", "tree_sitter_typescript"),
    ),
    "js": ("tree_sitter_javascript", "language", "js", ("tree_sitter_javascript",)),
    "c": ("tree_sitter_c", "language", "h", ("tree_sitter_c",)),
    "go": ("tree_sitter_go", "language", "go", ("tree_sitter_go",)),
}
GRAMMARS["rxjs"] = GRAMMARS["ts"]


def setup_django() -> None:
    import os

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dir2mcp_site.settings")
    django.setup()


# -- sources -------------------------------------------------------------------------------


def python_sources(limit: int) -> Iterator[tuple[str, str]]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    paths = sorted(
        p for p in stdlib.rglob("*.py") if "site-packages" not in p.parts and "test" not in p.parts
    )
    for path in paths[:limit]:
        yield str(path.relative_to(stdlib)), path.read_text(errors="replace")


def java_sources(limit: int) -> Iterator[tuple[str, str]]:
    path = jdk_src_zip()
    if path is None:
        return
    archive = zipfile.ZipFile(path)
    wanted = re.compile(r"java\.base/java/(util|io|lang)/\w+\.java")
    names = sorted(n for n in archive.namelist() if wanted.fullmatch(n))
    for name in names[:limit]:
        yield name, archive.read(name).decode(errors="replace")


def _tarball(spec: str, keep) -> Iterator[tuple[str, str]]:
    with tarfile.open(npm_package(spec)) as archive:
        for member in sorted(archive.getmembers(), key=lambda m: m.name):
            name = member.name.removeprefix("package/")
            if member.isfile() and keep(name):
                yield name, archive.extractfile(member).read().decode(errors="replace")


def ts_sources(limit: int) -> Iterator[tuple[str, str]]:
    keep = lambda name: re.fullmatch(r"lib/lib\..*\.d\.ts", name) is not None  # noqa: E731
    yield from list(_tarball(f"typescript@{TS_VERSION}", keep))[:limit]


def js_sources(limit: int) -> Iterator[tuple[str, str]]:
    keep = lambda name: "/" not in name and name.endswith(".js") and not name.endswith(".min.js")  # noqa: E731
    yield from list(_tarball(f"lodash@{LODASH_VERSION}", keep))[:limit]


def c_sources(limit: int) -> Iterator[tuple[str, str]]:
    for path in sorted(glob.glob("/usr/include/**/*.h", recursive=True))[:limit]:
        yield path.removeprefix("/usr/include/"), Path(path).read_text(errors="replace")


def rxjs_sources(limit: int) -> Iterator[tuple[str, str]]:
    yield from list(nav_tree("ts")[0].items())[:limit]


def go_sources(limit: int) -> Iterator[tuple[str, str]]:
    yield from list(nav_tree("go")[0].items())[:limit]


SOURCES = {
    "python": python_sources,
    "java": java_sources,
    "ts": ts_sources,
    "js": js_sources,
    "c": c_sources,
    "rxjs": rxjs_sources,
    "go": go_sources,
    "go-scan": go_sources,
}


# -- references ------------------------------------------------------------------------------


def python_reference(text: str) -> set[tuple[str, int]] | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {(node.name, node.lineno) for node in ast.walk(tree) if isinstance(node, kinds)}


class Tags:
    """The grammar's own definitions, from its ``queries/tags.scm``."""

    def __init__(self, language: str):
        module_name, loader, _, scms = GRAMMARS[language]
        module = __import__(module_name)
        self.language = tree_sitter.Language(getattr(module, loader)())
        scm = "\n".join(
            (Path(__import__(name).__file__).parent / "queries" / "tags.scm").read_text() for name in scms
        )
        self.query = tree_sitter.Query(self.language, scm)
        self.parser = tree_sitter.Parser(self.language)
        self.kinds = GO_TAG_KINDS if language == "go" else TAG_KINDS

    def reference(self, text: str) -> set[tuple[str, int]]:
        return {(d.name, d.line) for d in self.definitions(text)}

    def definitions(self, text: str) -> list[Definition]:
        """Each definition the tags query captures, with the span of its node."""
        tree = self.parser.parse(text.encode("utf-8", "surrogatepass"))
        found = {}
        for _, captures in tree_sitter.QueryCursor(self.query).matches(tree.root_node):
            names = captures.get("name", [])
            for key, nodes in captures.items():
                kind = key.removeprefix("definition.")
                if key.startswith("definition.") and kind in self.kinds and names:
                    name = names[0].text.decode("utf-8", "replace")
                    line = names[0].start_point.row + 1
                    start, end = nodes[0].start_point.row + 1, nodes[0].end_point.row + 1
                    found[(name, line)] = Definition(name, line, start, end)
        return list(found.values())


# -- the run ---------------------------------------------------------------------------------


def measure(language: str, limit: int) -> dict | None:
    from corpus.navigation import outline as outlines
    from corpus.navigation.symbols import short_name
    from mcp_gateway import summaries

    tags = Tags(language) if language in GRAMMARS else None
    ext = GRAMMARS[language][2] if tags else "go" if language == "go-scan" else "py"
    files = reference_total = covered = extra = 0
    file_bytes = json_bytes = text_bytes = unfolded_bytes = 0
    started = time.perf_counter()
    for rel, text in SOURCES[language](limit):
        if language == "go-scan":  # an independent count: a line scan, no parser
            reference = {(d.name, d.line) for d in go_definitions(text)}
        else:
            reference = python_reference(text) if tags is None else tags.reference(text)
        if reference is None:
            continue
        rel_path = rel if rel.endswith("." + ext) else rel + "." + ext
        unfolded = outlines.code_outline(text, rel_path)
        if unfolded is None:
            continue
        entries = outlines.fold(unfolded)  # what dir2mcp.outline returns
        # By the name a definition binds: ``socket.onopen = …`` and
        # ``A.prototype.m = …`` bind ``onopen`` and ``m`` (the tags query's
        # @name, and what ``symbols`` files them under).
        listed = {(short_name(e.name), e.line or e.start) for e in outlines.walk(entries)}
        files += 1
        reference_total += len(reference)
        covered += len(reference & listed)
        extra += len(listed - reference)
        result = outlines.Outline(rel_path, "code", "definitions", entries, text.count("\n")).as_dict()
        result |= {"count": result["count"], "total": result["count"]}
        file_bytes += len(text.encode())
        json_bytes += len(json.dumps(result).encode())
        text_bytes += len(summaries.outline(result).encode())
        whole = outlines.Outline(rel_path, "code", "definitions", unfolded, text.count("\n")).as_dict()
        unfolded_bytes += len(json.dumps(whole | {"total": whole["count"]}).encode())
    if not files:
        return None
    return {
        "language": language,
        "files": files,
        "reference": reference_total,
        "coverage": round(covered / max(reference_total, 1), 4),
        "outline_only": extra,
        "json_to_file": round(json_bytes / file_bytes, 3),
        "text_to_file": round(text_bytes / file_bytes, 3),
        "unfolded_json_to_file": round(unfolded_bytes / file_bytes, 3),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=400, help="files per language")
    parser.add_argument("--languages", default="python,java,ts,js,c,rxjs,go,go-scan")
    args = parser.parse_args()
    setup_django()
    columns = (
        "files | reference definitions | coverage | outline-only entries | JSON / file | text / file "
        "| JSON unfolded / file"
    )
    print(f"| language | {columns} |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for language in args.languages.split(","):
        row = measure(language, args.files)
        if row is None:
            print(f"| {language} | (no sources on this machine) | | | | | | |")
            continue
        print(
            f"| {row['language']} | {row['files']} | {row['reference']} | {row['coverage']:.4f} | "
            f"{row['outline_only']} | {row['json_to_file']:.3f} | {row['text_to_file']:.3f} | "
            f"{row['unfolded_json_to_file']:.3f} |"
        )


if __name__ == "__main__":
    main()
