"""Why the fused ranking misses what it misses, on an index kept by
``bench/retrieval.py --keep`` (issue #36 item 2).

    python bench/rank_diagnose.py DIR [--labels FILE] [--queries N] [--misses]
        [--try search.key=value ...] [--json OUT]

DIR is a language directory of a kept run (``WORK/python``: ``root``,
``state-units``, ``labels.json``). ``--labels`` takes the labels of another
seed drawn from the same files (JavaScript, TypeScript and prose take every
file, so their second seed is other queries on the same index; the files
must be identical, which this script checks by line counts).

Per query it replays the searcher's stages with its own functions (the
lexical ranking, each dense ranking, the fusion, the second dense round,
the defining units) and reads where the target is in each, then measures
the default ``search(k=50)`` and each ``--try`` row on the same queries:
found@200 / found@1000 / recall@10 / MRR@10, and the bounds:

- ``union@B``: lexical or dense alone finds it within B lines (ours, not
  bm25s: the lists the fusion actually gets);
- ``pool``: the target is among the candidates the fusion sees at all
  (lexical or any dense list, ``search.candidates`` deep, both rounds).

``--misses`` prints, for each query the default does not find within 200
lines, the hits read before the target (or the first 15): lexical rank,
dense rank, lines, the unit's first line, and the target's own ranks.
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

BUDGETS = rb.BUDGETS


def first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip() and not line.strip().startswith(("@", "#", "//", "/*", "*")):
            return line.strip()[:110]
    return text.strip()[:110]


def rank_of(ids: list[int], chunks: dict, label: dict) -> int | None:
    for rank, cid in enumerate(ids, start=1):
        chunk = chunks.get(cid)
        if chunk is not None and rb.overlaps(rb.hit_of(chunk), label):
            return rank
    return None


def within(ids: list[int], chunks: dict, label: dict, file_lines: dict) -> set[int]:
    hits = [rb.hit_of(chunks[c]) for c in ids if c in chunks][: rb.DEEP]
    cost, _ = rb.score(hits, label, file_lines)
    return {b for b in BUDGETS if cost is not None and cost <= b}


def stages(searcher, query: str) -> dict:
    """The searcher's stages for ``query`` (what ``Searcher.search`` runs)."""
    from corpus import ranking
    from corpus.retrieval import Filters, route

    filters = Filters()
    cfg = searcher.config.search
    used = route(query, "auto", filters)
    pool = searcher._pool(rb.DEEP)
    lexical_hits, _ = searcher._lexical(query, pool, filters, ())
    plan = searcher._dense_plan(query, "auto", used)
    dense_rankings, _, vectors = searcher._dense_rankings(query, plan, pool, filters)
    lexical_ranking = ranking.Weighted(lexical_hits, 1.0, shares=searcher._long_shares(lexical_hits))
    rankings = [lexical_ranking, *dense_rankings]
    first = ranking.fuse(rankings, method=cfg.fusion, rrf_k=cfg.rrf_k)
    again = None
    if dense_rankings and cfg.feedback_units and cfg.feedback_share:
        again = searcher._feedback(first, plan, dense_rankings, vectors, pool, filters)
    return {
        "lexical": [cid for cid, _ in lexical_hits],
        "dense": {
            kind: [cid for cid, _ in r.ranking] for (kind, _), r in zip(plan, dense_rankings, strict=True)
        },
        "again": [[cid for cid, _ in r.ranking] for r in (again or [])],
        "first": [cid for cid, _ in first],
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dir", type=Path)
    parser.add_argument("--labels", type=Path)
    parser.add_argument("--queries", type=int, default=0, help="the first N labels (0: all)")
    parser.add_argument("--misses", action="store_true")
    parser.add_argument("--try", dest="tries", action="append", default=[])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    root, state_dir = args.dir / "root", args.dir / "state-units"
    labels = json.loads((args.labels or args.dir / "labels.json").read_text())
    if args.queries:
        labels = labels[: args.queries]
    file_lines = rb.file_line_counts(root)
    if args.labels is not None and (args.labels.parent / "root").is_dir():
        other = rb.file_line_counts(args.labels.parent / "root")
        if other != file_lines:
            sys.exit(f"{args.labels}: its corpus is not the files of {root}")
    rb.setup_django(root, state_dir)
    from corpus.providers.local import LocalEmbedder
    from corpus.providers.precision import resolve_precision
    from corpus.retrieval import Searcher
    from kernel.config import build_config
    from kernel.state import StateDir

    state = StateDir(state_dir)
    config = build_config(rb.config_data("units"), {}, {})
    embedder = LocalEmbedder(precision=resolve_precision(config.embed.precision))
    searcher = Searcher(state, config, embedder)
    chunks = rb.live_chunks()
    queries = [label["query"] for label in labels]
    rows: dict[str, list] = {}
    started = time.process_time()
    traced = [stages(searcher, q) for q in queries]
    bound = {"union": dict.fromkeys(BUDGETS, 0), "pool": 0, "lexical": dict.fromkeys(BUDGETS, 0)}
    bound["dense"] = dict.fromkeys(BUDGETS, 0)
    for trace, label in zip(traced, labels, strict=True):
        lex = within(trace["lexical"], chunks, label, file_lines)
        dense = set().union(*(within(ids, chunks, label, file_lines) for ids in trace["dense"].values()))
        for b in BUDGETS:
            bound["union"][b] += b in lex or b in dense
            bound["lexical"][b] += b in lex
            bound["dense"][b] += b in dense
        every = [trace["lexical"], *trace["dense"].values(), *trace["again"]]
        bound["pool"] += any(rank_of(ids, chunks, label) for ids in every)
    n = len(labels)
    for variant in ["default", *args.tries]:
        if variant == "default":
            tried = searcher
        else:
            tried = Searcher(state, build_config(rb.config_data("units", [variant]), {}, {}), embedder)
        rows[variant] = [rb.hit_list(tried.search(q, k=rb.DEEP).hits) for q in queries]
    out = {
        "dir": str(args.dir),
        "n": n,
        "cpu_s": round(time.process_time() - started, 1),
        "bounds": {
            **{
                f"{name}@{b}": round(bound[name][b] / n, 3)
                for name in ("lexical", "dense", "union")
                for b in BUDGETS
            },
            "pool": round(bound["pool"] / n, 3),
        },
        "rows": {name: rb.summarise(hits, labels, file_lines) for name, hits in rows.items()},
    }
    print(json.dumps({k: out[k] for k in ("dir", "n", "cpu_s", "bounds")}))
    for name, summary in out["rows"].items():
        print(
            f"{name:60s} {summary['found@200']:.3f} / {summary['found@1000']:.3f} / "
            f"{summary['recall@10']:.3f} / {summary['mrr@10']:.3f}"
        )
    per_query = []
    for i, (trace, label) in enumerate(zip(traced, labels, strict=True)):
        entry = {"query": label["query"], "file": label["file"], "start": label["start"], "end": label["end"]}
        entry["lexical"] = rank_of(trace["lexical"], chunks, label)
        entry["dense"] = {k: rank_of(ids, chunks, label) for k, ids in trace["dense"].items()}
        entry["first"] = rank_of(trace["first"], chunks, label)
        for name, hits in rows.items():
            cost, rank = rb.score(hits[i], label, file_lines)
            entry[name] = {"cost": cost, "rank": rank}
        per_query.append(entry)
    if args.json:
        args.json.write_text(json.dumps({**out, "queries": per_query}, indent=1))
    if args.misses:
        print_misses(labels, traced, rows["default"], chunks, file_lines)


def print_misses(labels, traced, ranked, chunks, file_lines) -> None:
    by_place = {(c["path"], c["start"], c["end"]): cid for cid, c in chunks.items()}
    for trace, label, hits in zip(traced, labels, ranked, strict=True):
        cost, rank = rb.score(hits, label, file_lines)
        if cost is not None and cost <= 200:
            continue
        lex = {cid: r for r, cid in enumerate(trace["lexical"], start=1)}
        dense = {cid: r for ids in trace["dense"].values() for r, cid in enumerate(ids, start=1)}
        t_lex = rank_of(trace["lexical"], chunks, label)
        t_dense = {k: rank_of(ids, chunks, label) for k, ids in trace["dense"].items()}
        print(
            f"\n## {label['query'][:150]!r}\n   target {label['file']}:{label['start']}-{label['end']} "
            f"fused rank {rank} cost {cost}; lexical {t_lex}, dense {t_dense}, first fusion "
            f"{rank_of(trace['first'], chunks, label)}"
        )
        spent = 0
        for r, hit in enumerate(hits[: (rank or 15)], start=1):
            cid = by_place.get(tuple(hit))
            chunk = chunks.get(cid, {})
            spent += rb.hit_cost(hit, file_lines)
            print(
                f"   {r:2d} lex {lex.get(cid, '-')!s:>3} dense {dense.get(cid, '-')!s:>3} "
                f"{rb.hit_cost(hit, file_lines):4d}L (Σ{spent:5d}) {hit[0]}:{hit[1]} "
                f"{first_line(chunk.get('text', ''))}"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
