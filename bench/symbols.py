"""dir2mcp.symbols and dir2mcp.references on trees nobody here wrote (issue #32).

One run indexes a copy of a tree (``--language``: ``python``, the standard
library's modules, ``test`` directories and ``site-packages`` left out;
``ts``, rxjs's TypeScript sources; ``go``, Go's standard library, see
``bench/corpora.nav_tree``) twice, each in its own process
and state directory: with the symbol index as shipped, and without it (the
definitions and uses are not extracted: the parse still runs, for the
units). It reports both index times and database sizes, then, on the index
with symbols:

- ``symbols``: for each name that :mod:`ast` finds defined exactly once
  (``def``, ``async def``, ``class``; nested ones too), whether the first
  hit is that definition (file and line). Goal >= 0.95.
- ``references``: per file, the (name, line) pairs stored against those of
  :mod:`ast`, two ways: ``strict``, the ids of ``Name`` and ``Attribute``
  nodes only; ``identifiers``, every identifier the syntax has that is not
  a definition's name (keyword arguments, imported names, ``global`` names,
  ``except … as`` names too; not parameters, which define a local): what
  the index means to store. Both filtered by the same rule
  the index applies (at least two characters, not ``self``/``cls``). Goal:
  precision and recall >= 0.9.

  For TypeScript and Go the reference definitions are the grammar's own
  ``tags.scm`` ones (TypeScript) and a line scan of ``func``/``type``
  declarations (Go, no parser: ``bench/corpora.go_definitions``); the
  reference uses are the identifier tokens of a scan outside comments,
  strings and regular expressions, keywords left out, less the reference
  definitions' names (``lexical``; ``bench/corpora.lexical_uses``): it
  holds parameters, which the index leaves out by design. The fair one
  (``syntax``; ``bench/syntax_uses.py``) is every identifier-shaped leaf of
  the syntax tree less the names being declared: definitions' names,
  members' (TypeScript's property signatures and fields, Go's struct fields
  and interface methods) and parameters' (type parameters, Go's receivers
  and named results too).
- ``references`` latency: p50 and p95 of a first page (50 hits) for names
  drawn at random from those used.

    .venv/bin/python bench/symbols.py [--language python|ts|go] [--tree PATH] [--names 2000]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench.corpora import go_definitions, lexical_uses, nav_tree, write_tree  # noqa: E402
from bench.syntax_uses import syntax_uses  # noqa: E402

EXTENSIONS = {"python": ".py", "ts": ".ts", "go": ".go"}


def copy_tree(source: Path, target: Path) -> int:
    """The ``.py`` modules of ``source`` under ``target``; how many."""
    count = 0
    for path in sorted(source.rglob("*.py")):
        rel = path.relative_to(source)
        if "site-packages" in rel.parts or "test" in rel.parts or "tests" in rel.parts:
            continue
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target / rel)
        count += 1
    return count


def _django(tree: Path, state: Path) -> None:
    from dir2mcp_site import bootstrap

    bootstrap.prepare(["--dir", str(tree), "--state-dir", str(state)])
    import django

    django.setup()


def phase_index(tree: Path, state: Path, config_path: Path, without: bool) -> dict:
    """Index ``tree`` into ``state`` (a child process: one database per process)."""
    _django(tree, state)
    from corpus.ingest.pipeline import Indexer
    from corpus.navigation import symbols
    from corpus.store import migrate
    from kernel.config import load_config
    from kernel.state import StateDir

    state_dir = StateDir(state)
    state_dir.ensure()
    migrate(state_dir)
    if without:
        # The index as it was before the symbol tables: nothing extracted, no rows written.
        symbols.extract = lambda parsed: None
    config = load_config(config_path)
    start = time.perf_counter()
    counters = Indexer(tree, state_dir, config).run()
    seconds = time.perf_counter() - start
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        cursor.execute("SELECT COUNT(*) FROM symbols")
        symbol_rows = cursor.fetchone()[0]
        cursor.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(lines) - LENGTH(REPLACE(lines, ' ', '')) + 1), 0) "
            "FROM symbol_references"
        )
        reference_rows, uses = cursor.fetchone()
        tables = {}
        try:
            cursor.execute(
                "SELECT name, SUM(pgsize) FROM dbstat WHERE name IN ('symbols', 'symbol_references') "
                "OR name LIKE 'symbol%' OR name LIKE 'reference%' GROUP BY name"
            )
            tables = dict(cursor.fetchall())
        except Exception as exc:  # dbstat is a compile-time option of SQLite
            tables = {"error": str(exc)}
    db = state / "meta.sqlite"
    return {
        "index_s": round(seconds, 2),
        "indexed": counters.indexed,
        "db_bytes": db.stat().st_size,
        "symbol_rows": symbol_rows,
        "reference_rows": reference_rows,
        "uses": uses,
        "table_bytes": tables,
    }


# -- the reference ----------------------------------------------------------------------------


def ast_definitions(text: str) -> list[tuple[str, int]] | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [(node.name, node.lineno) for node in ast.walk(tree) if isinstance(node, kinds)]


def ast_uses(text: str, *, strict: bool) -> set[tuple[str, int]] | None:
    from corpus.navigation.symbols import plausible

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    found: set[tuple[str, int]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add((node.id, node.lineno))
        elif isinstance(node, ast.Attribute):
            found.add((node.attr, node.end_lineno))
        elif strict:
            continue
        elif isinstance(node, ast.keyword) and node.arg:
            found.add((node.arg, node.lineno))
        elif isinstance(node, ast.alias):
            found.update((part, node.lineno) for part in node.name.split("."))
            if node.asname:
                found.add((node.asname, node.lineno))
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update((part, node.lineno) for part in node.module.split("."))
        elif isinstance(node, ast.Global | ast.Nonlocal):
            found.update((name, node.lineno) for name in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            found.add((node.name, node.lineno))
        elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            found.add((node.name, node.lineno))
    return {(name, line) for name, line in found if plausible(name)}


def reference_definitions(language: str):
    """``text -> [(name, line)]`` of ``language``'s reference (None: unparsable)."""
    if language == "python":
        return ast_definitions
    if language == "go":
        return lambda text: [(d.name, d.line) for d in go_definitions(text)]
    from bench.outline import Tags  # tree-sitter's tags queries: only the TypeScript run needs them

    tags = Tags(language)
    return lambda text: sorted(tags.reference(text))


def phase_query(tree: Path, state: Path, sample: int, language: str = "python") -> dict:
    _django(tree, state)
    from corpus.models import Document, Reference, Symbol, unpack_lines
    from corpus.navigation import names
    from corpus.navigation.symbols import plausible

    # The files the index holds: one it skipped (a secret rule matched) has no rows to compare.
    indexed = set(Document.objects.filter(deleted=False, status="ok").values_list("rel_path", flat=True))
    texts = {
        p.relative_to(tree).as_posix(): p.read_text(errors="replace")
        for p in sorted(tree.rglob("*" + EXTENSIONS[language]))
        if p.relative_to(tree).as_posix() in indexed
    }
    definitions_of = reference_definitions(language)

    # symbols: every uniquely defined name
    where: dict[str, list[tuple[str, int]]] = {}
    defined: dict[str, set[tuple[str, int]]] = {}
    for rel, text in texts.items():
        for name, line in definitions_of(text) or ():
            where.setdefault(name, []).append((rel, line))
            defined.setdefault(rel, set()).add((name, line))
    unique = sorted(name for name, places in where.items() if len(places) == 1)
    random.Random(7).shuffle(unique)
    checked = unique[:sample] if sample else unique
    first = 0
    misses = []
    for name in checked:
        hits = names.find_symbols(name, limit=1)["symbols"]
        if hits and (hits[0]["rel_path"], hits[0]["line"]) == where[name][0]:
            first += 1
        elif len(misses) < 10:
            misses.append({"name": name, "expected": where[name][0], "got": hits[:1]})

    # references: stored (name, line) pairs against ast's, per file
    stored: dict[str, set[tuple[str, int]]] = {}
    docs = dict(Document.objects.filter(deleted=False).values_list("doc_id", "rel_path"))
    uses = Reference.objects.values_list("document_id", "name__name", "lines")
    for doc_id, name, lines in uses.iterator(5000):
        stored.setdefault(docs[doc_id], set()).update((name, n) for n in unpack_lines(bytes(lines)))
    signature_lines: dict[str, set[int]] = {}
    for doc_id, line in Symbol.objects.values_list("document_id", "line").iterator(5000):
        signature_lines.setdefault(docs[doc_id], set()).add(line)
    scores = {}
    for mode in ("strict", "identifiers") if language == "python" else ("lexical", "syntax"):
        true = predicted = both = on_signatures = 0
        for rel, text in texts.items():
            if mode == "lexical":
                expected = lexical_uses(language, text) - defined.get(rel, set())
            elif mode == "syntax":
                expected = {(name, line) for name, line in syntax_uses(language, text) if plausible(name)}
            else:
                expected = ast_uses(text, strict=mode == "strict")
            if expected is None:
                continue
            got = stored.get(rel, set())
            true += len(expected)
            predicted += len(got)
            both += len(expected & got)
            lines = signature_lines.get(rel, set())
            on_signatures += sum(1 for _, line in expected - got if line in lines)
        scores[mode] = {
            "reference_uses": true,
            "stored_uses": predicted,
            "precision": round(both / predicted, 4) if predicted else None,
            "recall": round(both / true, 4) if true else None,
            # parameters and the names of members the outline lists are on these lines
            "unstored_on_definition_lines": on_signatures,
        }

    # latency of a first page of references
    used = sorted({name for pairs in stored.values() for name, _ in pairs})
    rng = random.Random(11)
    drawn = [rng.choice(used) for _ in range(300)]
    times = []
    for name in drawn:
        start = time.perf_counter()
        names.find_references(name)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return {
        "files_compared": len(texts),
        "symbols": {
            "unique_names": len(unique),
            "checked": len(checked),
            "first_is_the_definition": round(first / len(checked), 4) if checked else None,
            "misses": misses,
        },
        "references": scores,
        "references_ms": {
            "calls": len(times),
            "p50": round(statistics.median(times), 2),
            "p95": round(times[int(len(times) * 0.95)], 2),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--language", choices=sorted(EXTENSIONS), default="python")
    parser.add_argument("--tree", default=sysconfig.get_paths()["stdlib"], help="Python only.")
    parser.add_argument("--names", type=int, default=2000, help="Unique names checked (0: all).")
    parser.add_argument("--phase", choices=["index", "query"], help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--without", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        work = Path(args.work)
        state = work / ("state-without" if args.without else "state-with")
        if args.phase == "index":
            result = phase_index(work / "tree", state, work / "bench.yaml", args.without)
        else:
            result = phase_query(work / "tree", state, args.names, args.language)
        print(json.dumps(result))
        return

    work = Path(tempfile.mkdtemp(prefix="dir2mcp-bench-symbols-"))
    if args.language == "python":
        files, source = copy_tree(Path(args.tree), work / "tree"), f"{args.tree} (.py)"
    else:
        texts, source = nav_tree(args.language)
        write_tree(texts, work / "tree")
        files = len(texts)
    (work / "bench.yaml").write_text("embed:\n  provider: none\n")
    me = [sys.executable, str(Path(__file__).resolve()), "--work", str(work), "--names", str(args.names)]
    me += ["--language", args.language]

    def run(*extra: str) -> dict:
        out = subprocess.run([*me, *extra], capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    without = run("--phase", "index", "--without")
    with_ = run("--phase", "index")
    queried = run("--phase", "query")
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "tree": source,
        "files": files,
        "without_symbols": without,
        "with_symbols": with_,
        "index_time_ratio": round(with_["index_s"] / without["index_s"], 3),
        "db_size_ratio": round(with_["db_bytes"] / without["db_bytes"], 3),
        **queried,
    }
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
