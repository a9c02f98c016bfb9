"""The tokens an agent reads to answer "where is X defined" and "who uses X" (issue #32).

Per tree (``bench/corpora.nav_tree``: the Python standard library, rxjs's
TypeScript sources, Go's standard library), one child process indexes a copy
of it (lexical only: ``embed.provider: none``) and answers two kinds of
question with the tools as an agent would call them, in process: each call
goes through ``mcp_gateway.tools.run``, the validation, handler and summary
every surface uses, on a :class:`~mcp_gateway.context.Context` over that
index (no HTTP). A response costs the tokens of what the agent reads,
estimated as the server does (``corpus.navigation.budget.estimate_tokens``,
4 characters a token): the ``content[0]`` text, and, beside it, the
``structuredContent`` JSON as the wire carries it (``json.dumps``,
``ensure_ascii=False``). ``grep`` costs its output lines.

"Where is X defined", for a sample of names defined exactly once in the
tree by the reference (``ast`` for Python, the grammar's ``tags.scm`` for
TypeScript, a line scan of ``func``/``type`` for Go), the definition being
that file and the line its name is on:

- ``symbols``: ``dir2mcp.symbols {name}``, then ``dir2mcp.open_file`` of a
  hit's span, hits in order until the one that is the definition (at most 3
  opens): found when one is;
- ``search+open``: ``dir2mcp.search {query: name}`` (k 10), then
  ``open_file`` of each hit's span in rank order until one holds the
  definition's line: found when one does;
- ``search budget``: ``dir2mcp.search {query: name, max_tokens: 2000}``, one
  call, found when a passage holds the definition's line;
- ``grep``: ``grep -rnwF name`` over the tree, found when a line of its
  output is the definition's, then ``open_file`` of the definition's span
  (the span of the reference, which grep does not give).

"Who uses X", for a sample of names with 20 to 500 uses in the reference
(``ast`` identifiers for Python as in ``bench/symbols.py``; the identifier
tokens of ``bench/corpora.lexical_uses`` for TypeScript and Go, less the
definitions): the share of those (file, line) uses the answer shows:

- ``references``: ``dir2mcp.references {name}`` and every further page by
  ``next_cursor``;
- ``search+open``: ``dir2mcp.search {query: name, k: 50}``, then
  ``open_file`` of every hit's span;
- ``search budget``: ``dir2mcp.search {query: name, k: 50, max_tokens: 8000}``;
- ``grep``: ``grep -rnwF name`` (comments and strings too).

And the budget check: ``dir2mcp.search`` with ``max_tokens`` 500, 2,000 and
8,000 for every sampled name of both kinds: ``budget.used_tokens`` never
over ``max_tokens`` (asserted), with the largest ratio, and the whole
response's estimate against ``max_tokens`` beside it (its text, and its
JSON).

    .venv/bin/python bench/agent_tokens.py [--languages python,ts,go] [--names 200] [--uses 60]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench.corpora import (  # noqa: E402
    Definition,
    go_definitions,
    lexical_uses,
    nav_tree,
    python_definitions,
    write_tree,
)
from bench.search import setup_django  # noqa: E402

BUDGETS = (500, 2000, 8000)
MAX_OPENS = 3  # symbols: hits opened at most before giving up
MIN_USES, MAX_USES = 20, 500
SEARCH_K_USES = 50


def reference_definitions(language: str) -> Callable[[str], list[Definition] | None]:
    if language == "python":
        return python_definitions
    if language == "go":
        return go_definitions
    from bench.outline import Tags  # tree-sitter's tags queries: only the TypeScript run needs them

    return Tags(language).definitions


def reference_uses(language: str, text: str, definitions: list[Definition]) -> set[tuple[str, int]]:
    if language == "python":
        from bench.symbols import ast_uses  # the Python reference of bench/symbols.py

        return ast_uses(text, strict=False) or set()
    return lexical_uses(language, text) - {(d.name, d.line) for d in definitions}


# -- one agent's calls --------------------------------------------------------------------------


class Agent:
    """Tool calls as ``tools.run`` answers them, with what each costs."""

    def __init__(self, ctx, tree: Path):
        from corpus.navigation.budget import estimate_tokens
        from mcp_gateway import tools

        self.ctx, self.tree, self.tools, self.estimate = ctx, tree, tools, estimate_tokens
        self.table = tools.table()
        self.reset()

    def reset(self) -> None:
        self.calls, self.text_tokens, self.json_tokens = 0, 0, 0

    def call(self, name: str, arguments: dict) -> dict:
        result = self.tools.run(self.table[name], arguments, self.tools.Call(self.ctx))
        self.calls += 1
        self.text_tokens += self.estimate(result["content"][0]["text"])
        self.json_tokens += self.estimate(json.dumps(result["structuredContent"], ensure_ascii=False))
        if result.get("isError"):
            raise AssertionError(f"{name} {arguments}: {result['content'][0]['text']}")
        return result["structuredContent"]

    def open(self, rel_path: str, span: dict) -> dict:
        args = {"rel_path": rel_path, "start_line": span["start_line"], "end_line": span["end_line"]}
        return self.call("dir2mcp.open_file", args)

    def grep(self, name: str) -> list[str]:
        out = subprocess.run(
            ["grep", "-rnwF", "--", name, "."], cwd=self.tree, capture_output=True, text=True, check=False
        ).stdout
        self.calls += 1
        self.text_tokens += self.estimate(out)
        self.json_tokens += self.estimate(out)
        return [line.removeprefix("./") for line in out.splitlines()]

    def spent(self, found: float) -> dict:
        cost = {"text": self.text_tokens, "json": self.json_tokens, "calls": self.calls, "found": found}
        self.reset()
        return cost


def _holds(span: dict, line: int) -> bool:
    return span["start_line"] <= line <= span["end_line"]


def where_defined(agent: Agent, name: str, truth: tuple[str, Definition]) -> dict[str, dict]:
    rel, d = truth
    wanted = {"start_line": d.start, "end_line": d.end}
    out = {}

    found = False
    for hit in agent.call("dir2mcp.symbols", {"name": name})["symbols"][:MAX_OPENS]:
        agent.open(hit["rel_path"], hit["span"])
        if (hit["rel_path"], hit["line"]) == (rel, d.line):
            found = True
            break
    out["symbols"] = agent.spent(found)

    found = False
    for hit in agent.call("dir2mcp.search", {"query": name})["hits"]:
        agent.open(hit["rel_path"], hit["span"])
        if hit["rel_path"] == rel and hit["span"]["kind"] == "lines" and _holds(hit["span"], d.line):
            found = True
            break
    out["search+open"] = agent.spent(found)

    hits = agent.call("dir2mcp.search", {"query": name, "max_tokens": 2000})["hits"]
    found = any(
        h["rel_path"] == rel and h["span"]["kind"] == "lines" and _holds(h["span"], d.line) for h in hits
    )
    out["search budget"] = agent.spent(found)

    found = any(line.startswith(f"{rel}:{d.line}:") for line in agent.grep(name))
    if found:
        agent.open(rel, wanted)
    out["grep"] = agent.spent(found)
    return out


def who_uses(agent: Agent, name: str, uses: set[tuple[str, int]]) -> dict[str, dict]:
    out = {}

    shown: set[tuple[str, int]] = set()
    arguments = {"name": name}
    while True:
        page = agent.call("dir2mcp.references", arguments)
        shown.update((hit["rel_path"], hit["span"]["start_line"]) for hit in page["references"])
        if "next_cursor" not in page:
            break
        arguments = {"name": name, "cursor": page["next_cursor"]}
    out["references"] = agent.spent(len(uses & shown) / len(uses))

    spans = []
    for hit in agent.call("dir2mcp.search", {"query": name, "k": SEARCH_K_USES})["hits"]:
        if hit["span"]["kind"] == "lines":
            agent.open(hit["rel_path"], hit["span"])
            spans.append((hit["rel_path"], hit["span"]))
    out["search+open"] = agent.spent(_covered(uses, spans))

    hits = agent.call("dir2mcp.search", {"query": name, "k": SEARCH_K_USES, "max_tokens": 8000})["hits"]
    out["search budget"] = agent.spent(
        _covered(uses, [(h["rel_path"], h["span"]) for h in hits if h["span"]["kind"] == "lines"])
    )

    listed = set()
    for line in agent.grep(name):
        rel, _, rest = line.partition(":")
        number = rest.partition(":")[0]
        if number.isdigit():
            listed.add((rel, int(number)))
    out["grep"] = agent.spent(len(uses & listed) / len(uses))
    return out


def _covered(uses: set[tuple[str, int]], spans: list[tuple[str, dict]]) -> float:
    return sum(1 for rel, line in uses if any(r == rel and _holds(s, line) for r, s in spans)) / len(uses)


def budgets(agent: Agent, queries: list[str]) -> dict:
    """Search under each budget: used_tokens never over it."""
    out = {}
    for limit in BUDGETS:
        used_ratio = text_ratio = json_ratio = 0.0
        truncated = text_over = json_over = 0
        for query in queries:
            before = agent.text_tokens, agent.json_tokens
            result = agent.call("dir2mcp.search", {"query": query, "max_tokens": limit})
            spent = result["budget"]
            assert spent["used_tokens"] <= limit, (query, limit, spent)
            used_ratio = max(used_ratio, spent["used_tokens"] / limit)
            text, whole = agent.text_tokens - before[0], agent.json_tokens - before[1]
            text_ratio, json_ratio = max(text_ratio, text / limit), max(json_ratio, whole / limit)
            text_over, json_over = text_over + (text > limit), json_over + (whole > limit)
            truncated += spent["truncated"]
        agent.reset()
        out[str(limit)] = {
            "queries": len(queries),
            "over_budget": 0,
            "max_used_ratio": round(used_ratio, 3),
            "max_text_ratio": round(text_ratio, 3),
            "max_json_ratio": round(json_ratio, 3),
            "text_over": text_over,
            "json_over": json_over,
            "truncated": truncated,
        }
    return out


# -- one tree ---------------------------------------------------------------------------------


def phase_run(language: str, work: Path, names: int, uses_sample: int) -> dict:
    tree, state = work / "tree", work / "state"
    setup_django(tree, state)
    from corpus.ingest.pipeline import Indexer
    from corpus.models import Document
    from corpus.store import migrate
    from kernel.config import load_config
    from kernel.state import StateDir
    from mcp_gateway import context

    state_dir = StateDir(state)
    state_dir.ensure()
    migrate(state_dir)
    config = load_config(work / "bench.yaml")
    started = time.perf_counter()
    Indexer(tree, state_dir, config).run()
    index_s = time.perf_counter() - started
    indexed = set(Document.objects.filter(deleted=False, status="ok").values_list("rel_path", flat=True))

    definitions_of = reference_definitions(language)
    where: dict[str, list[tuple[str, Definition]]] = {}
    uses: dict[str, set[tuple[str, int]]] = {}
    for path in sorted(p for p in tree.rglob("*") if p.is_file()):
        rel = path.relative_to(tree).as_posix()
        if rel not in indexed:
            continue
        text = path.read_text(errors="replace")
        found = definitions_of(text) or []
        for d in found:
            where.setdefault(d.name, []).append((rel, d))
        for name, line in reference_uses(language, text, found):
            uses.setdefault(name, set()).add((rel, line))
    rng = random.Random(7)
    unique = sorted(name for name, places in where.items() if len(places) == 1 and len(name) >= 2)
    defined = rng.sample(unique, min(names, len(unique)))
    busy = sorted(name for name, found in uses.items() if MIN_USES <= len(found) <= MAX_USES)
    used = rng.sample(busy, min(uses_sample, len(busy)))

    ctx = context.build(root=tree, state=state_dir, config=config, auth_spec="none")
    agent = Agent(ctx, tree)
    agent.call("dir2mcp.search", {"query": "warm up"})
    agent.reset()
    per_definition = {name: where_defined(agent, name, where[name][0]) for name in defined}
    per_use = {name: who_uses(agent, name, uses[name]) for name in used}
    return {
        "language": language,
        "index_s": round(index_s, 1),
        "documents": len(indexed),
        "unique_definitions": len(unique),
        "names_with_20_to_500_uses": len(busy),
        "defined": summarize(per_definition),
        "used": summarize(per_use),
        "budget": budgets(agent, defined + used),
        "misses": {
            way: [name for name, costs in per_definition.items() if not costs[way]["found"]][:10]
            for way in ("symbols", "search+open", "search budget", "grep")
        },
    }


def summarize(per_name: dict[str, dict[str, dict]]) -> dict:
    ways = next(iter(per_name.values()), {})
    out = {}
    for way in ways:
        costs = [per_name[name][way] for name in per_name]
        text = sorted(c["text"] for c in costs)
        out[way] = {
            "n": len(costs),
            "found": round(statistics.mean(float(c["found"]) for c in costs), 4),
            "text_p50": statistics.median(text),
            "text_p90": text[int(0.9 * (len(text) - 1))],
            "json_p50": statistics.median(c["json"] for c in costs),
            "calls": round(statistics.mean(c["calls"] for c in costs), 2),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--languages", default="python,ts,go")
    parser.add_argument("--names", type=int, default=200, help="Uniquely defined names asked about.")
    parser.add_argument("--uses", type=int, default=60, help="Names with 20-500 uses asked about.")
    parser.add_argument("--phase", choices=["run"], help=argparse.SUPPRESS)
    parser.add_argument("--language", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(phase_run(args.language, Path(args.work), args.names, args.uses)))
        return

    results = []
    for language in args.languages.split(","):
        work = Path(tempfile.mkdtemp(prefix=f"dir2mcp-bench-agent-{language}-"))
        texts, source = nav_tree(language)
        write_tree(texts, work / "tree")
        (work / "bench.yaml").write_text("embed:\n  provider: none\n")
        me = [sys.executable, str(Path(__file__).resolve()), "--phase", "run", "--language", language]
        me += ["--work", str(work), "--names", str(args.names), "--uses", str(args.uses)]
        out = subprocess.run(me, capture_output=True, text=True, check=False)
        shutil.rmtree(work, ignore_errors=True)
        if out.returncode:
            sys.exit(f"{language}: {out.stderr[-3000:]}")
        results.append(
            json.loads(out.stdout.strip().splitlines()[-1]) | {"tree": source, "files": len(texts)}
        )
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "results": results,
    }
    print(json.dumps(report, indent=2))
    for result in results:
        print(table(result), file=sys.stderr)


def table(result: dict) -> str:
    rows = [f"\n{result['language']}: {result['tree']}, {result['documents']} documents"]
    for question in ("defined", "used"):
        base = result[question]["grep"]["text_p50"] or 1
        rows.append(f"| {question} | found | tokens p50 | p90 | JSON p50 | calls | p50 / grep's |")
        for way, row in result[question].items():
            rows.append(
                f"| {way} | {row['found']:.3f} | {row['text_p50']:,} | {row['text_p90']:,} | "
                f"{row['json_p50']:,} | {row['calls']} | {row['text_p50'] / base:.2f} |"
            )
    for limit, row in result["budget"].items():
        rows.append(f"budget {limit}: {row}")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
