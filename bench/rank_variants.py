"""Ranking variants on indexes kept by ``bench/retrieval.py --keep``, all in
one process per index, with the union bound beside them (issue #36 item 2).

    python bench/rank_variants.py DIR [DIR ...] [--labels DIR=FILE ...]
        [--try search.key=value ...] [--json OUT] [--misses N]

Each DIR is a language directory of a kept run (``WORK/python``: ``root``,
``state-units``, ``labels.json``). ``--labels DIR=FILE`` measures DIR's
index on another seed's labels drawn from the same files (JavaScript and
TypeScript take every file at the default sizes, so their second seed is
other queries on the same index; the line counts are checked).

Per index and query set, the rows are:

- ``bm25s units``, ``dense units`` (the index's own vectors) and their
  union, as ``bench/retrieval.py --no-plain-dense`` computes them (the
  bound for fusion: either side alone finds it);
- ``default`` and each ``--try``: ``Searcher.ranked`` (what ``search``
  cuts to ``k``) with that configuration, measured two ways: over the first
  50 hits (``k: 50``, the tool's maximum: found@200 / found@1000 /
  recall@10 / MRR@10, what ``bench/retrieval.py`` reports), and over the
  whole ranking (every candidate, ``search.candidates`` per list), read
  until the budget is spent (``deep found@200 / found@1000``): what an
  agent would find if it could read past the 50th hit.

Queries are embedded once per process (every variant reads the same
vector). ``--misses N`` prints, for the first N queries the default misses
within 200 lines but bm25s or dense alone finds, the hits ahead of the target.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import retrieval as rb  # noqa: E402  (bench/retrieval.py: the measure, Django set-up)

LIMIT = rb.DEEP


class MemoEmbedder:
    """The embedder with each query's vector kept: variants re-rank the same
    queries, and the vector does not depend on the configuration."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.seen: dict = {}

    def embed_query(self, query: str, *, kind: str):
        key = (query, self.inner.model_info(kind))
        if key not in self.seen:
            self.seen[key] = self.inner.embed_query(query, kind=kind)
        return self.seen[key]

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def deep_summary(ranked: list[list[list]], labels: list[dict], file_lines: dict) -> dict:
    found = dict.fromkeys(rb.BUDGETS, 0)
    for hits, label in zip(ranked, labels, strict=True):
        cost, _ = rb.score(hits, label, file_lines)
        for budget in rb.BUDGETS:
            found[budget] += cost is not None and cost <= budget
    return {f"deep_found@{b}": round(found[b] / len(labels), 3) for b in rb.BUDGETS}


def measure_dir(directory: Path, label_files: list[Path], tries: list[str], misses: int) -> list[dict]:
    root, state_dir = directory / "root", directory / "state-units"
    file_lines = rb.file_line_counts(root)
    rb.setup_django(root, state_dir)
    from corpus.providers.local import LocalEmbedder
    from corpus.providers.precision import resolve_precision
    from corpus.retrieval import Searcher
    from kernel.config import build_config
    from kernel.state import StateDir

    state = StateDir(state_dir)
    config = build_config(rb.config_data("units"), {}, {})
    embedder = MemoEmbedder(LocalEmbedder(precision=resolve_precision(config.embed.precision)))
    chunks = rb.live_chunks()
    kind = next(iter(chunks.values()))["kind"]
    docs = [(rb.hit_of(c), rb.embedded_text(c)) for c in chunks.values()]
    searchers = {"default": Searcher(state, config, embedder)}
    for text in tries:
        searchers[text] = Searcher(state, build_config(rb.config_data("units", [text]), {}, {}), embedder)
    out = []
    for label_file in label_files:
        labels = json.loads(label_file.read_text())
        if label_file.parent != directory and (label_file.parent / "root").is_dir():
            if rb.file_line_counts(label_file.parent / "root") != file_lines:
                sys.exit(f"{label_file}: its corpus is not the files of {root}")
        queries = [label["query"] for label in labels]
        started = time.process_time()
        lexical = rb.bm25s_rankings(docs, queries, False)
        dense = rb.dense_rankings(searchers["default"], embedder, kind, queries, chunks)
        rows = {
            "bm25s units": rb.summarise(lexical, labels, file_lines),
            "dense units": rb.summarise(dense, labels, file_lines),
            "bm25s ∪ dense": rb.union_found(lexical, dense, labels, file_lines),
        }
        whole: dict[str, list[list[list]]] = {}
        for name, searcher in searchers.items():
            whole[name] = [
                [rb.hit_of(chunks[cid]) for cid, _ in searcher.ranked(q, k=LIMIT).fused if cid in chunks]
                for q in queries
            ]
            rows[name] = {
                **rb.summarise([hits[:LIMIT] for hits in whole[name]], labels, file_lines),
                **deep_summary(whole[name], labels, file_lines),
            }
        entry = {
            "dir": directory.name,
            "labels": str(label_file.parent.parent.name),
            "n": len(labels),
            "cpu_s": round(time.process_time() - started, 1),
            "rows": rows,
            "per_query": [
                {
                    "query": label["query"],
                    "target": [label["file"], label["start"], label["end"]],
                    "bm25s": rb.score(lexical[i], label, file_lines),
                    "dense": rb.score(dense[i], label, file_lines),
                    **{name: rb.score(whole[name][i][:LIMIT], label, file_lines) for name in whole},
                }
                for i, label in enumerate(labels)
            ],
        }
        out.append(entry)
        print_entry(entry)
        if misses:
            print_misses(entry, whole["default"], chunks, file_lines, misses)
    return out


def print_entry(entry: dict) -> None:
    print(f"\n{entry['dir']} ({entry['labels']}), {entry['n']} queries, {entry['cpu_s']} CPU-s", flush=True)
    for name, row in entry["rows"].items():
        deep = (
            f"   deep {row['deep_found@200']:.3f} / {row['deep_found@1000']:.3f}"
            if "deep_found@200" in row
            else ""
        )
        print(
            f"  {name:58s} {row['found@200']:.3f} / {row['found@1000']:.3f} / "
            f"{row['recall@10']:.3f} / {row['mrr@10']:.3f}{deep}",
            flush=True,
        )


def print_misses(entry: dict, ranked: list[list[list]], chunks: dict, file_lines: dict, limit: int) -> None:
    by_place = {tuple(rb.hit_of(c)): c for c in chunks.values()}
    shown = 0
    for query, hits in zip(entry["per_query"], ranked, strict=True):
        cost = query["default"][0]
        sides = [query[side][0] for side in ("bm25s", "dense")]
        if (cost is not None and cost <= 200) or not any(c is not None and c <= 200 for c in sides):
            continue
        shown += 1
        if shown > limit:
            return
        print(
            f"\n## {query['query'][:140]!r}\n   target {query['target']} default {query['default']} "
            f"bm25s {query['bm25s']} dense {query['dense']}"
        )
        spent = 0
        for r, hit in enumerate(hits[: min(query["default"][1] or 12, 25)], start=1):
            spent += rb.hit_cost(hit, file_lines)
            text = by_place.get(tuple(hit), {}).get("text", "")
            first = next((line.strip() for line in text.splitlines() if line.strip()), "")[:90]
            print(f"   {r:2d} {rb.hit_cost(hit, file_lines):4d}L (Σ{spent:5d}) {hit[0]}:{hit[1]} {first}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dir", type=Path)
    parser.add_argument("--labels", type=Path, action="append", default=[], help="another seed's labels.json")
    parser.add_argument("--try", dest="tries", action="append", default=[])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--misses", type=int, default=0)
    args = parser.parse_args(argv)
    label_files = [args.dir / "labels.json", *args.labels]
    out = measure_dir(args.dir, label_files, args.tries, args.misses)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
