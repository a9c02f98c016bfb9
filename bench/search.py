"""Search benchmarks (not tests): latency, memory and retrieval quality.

    python bench/search.py latency [--sizes 10000 100000] [--queries 200]
    python bench/search.py quality [--modules 120] [--queries 300]

latency: builds a state directory of N chunks of real text (lines of the
Python standard library) with random unit vectors as embeddings, then times
`Searcher.search` in-process (lexical, dense and hybrid, the query embedded
by the local model), reporting p50/p99 and the process's peak RSS. The
reference in the same run is a bare FTS5 MATCH on the same table.

quality: indexes a copy of standard-library modules whose docstrings are
blanked out (line numbers kept), then asks each function's docstring summary
as a query. A hit is correct when it is the function's file and its line span
overlaps the function. Reports recall@10 and MRR for lexical only, dense only
and hybrid, with the local embedder.

Each run runs in a fresh temp state directory; results go to bench/results/.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import random
import resource
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def setup_django(root: Path, state: Path) -> None:
    from dir2mcp_site import bootstrap

    bootstrap.prepare(["--dir", str(root), "--state-dir", str(state)])
    import django

    django.setup()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def stdlib_lines() -> list[str]:
    lib = Path(sysconfig.get_paths()["stdlib"])
    lines: list[str] = []
    for path in sorted(lib.glob("*.py")):
        lines.extend(line for line in path.read_text(errors="replace").splitlines() if line.strip())
    return lines


# -- latency -------------------------------------------------------------------


def build_synthetic(size: int, dim: int) -> None:
    """``size`` chunks of 40 stdlib lines each, with random unit vectors."""
    import numpy as np
    from django.db import transaction

    from corpus.embedding import to_bytes
    from corpus.index import lexical
    from corpus.models import Chunk, Document, Representation, Span
    from corpus.store import set_setting

    lines = stdlib_lines()
    rng = np.random.default_rng(7)
    per_doc = 10
    for start in range(0, size, 5000):
        with transaction.atomic():
            docs = Document.objects.bulk_create(
                Document(rel_path=f"synthetic/doc_{i:06d}.py", doc_type="code", content_hash=str(i))
                for i in range(start // per_doc, (start + 5000) // per_doc)
            )
            reps = Representation.objects.bulk_create(
                Representation(document=d, rep_type="raw_text", rep_hash=str(d.doc_id)) for d in docs
            )
            chunks = []
            for n in range(start, min(start + 5000, size)):
                offset = (n * 40) % (len(lines) - 40)
                vec = rng.standard_normal(dim).astype(np.float32)
                vec /= np.linalg.norm(vec)
                chunks.append(
                    Chunk(
                        representation=reps[(n - start) // per_doc],
                        ordinal=n % per_doc,
                        text="\n".join(lines[offset : offset + 40]),
                        text_hash=str(n),
                        index_kind="text",
                        embedding=to_bytes(vec),
                        embedding_status="ok",
                    )
                )
            chunks = Chunk.objects.bulk_create(chunks)
            Span.objects.bulk_create(Span(chunk=c, span_kind="lines", start=1, end=40) for c in chunks)
            lexical.index_chunks((c.chunk_id, c.text) for c in chunks)
    set_setting("embed_provider", "local")
    for kind in ("text", "code"):
        set_setting(f"embed_{kind}_model", "all-MiniLM-L6-v2")
        set_setting(f"embed_{kind}_dim", str(dim))


def run_latency(size: int, queries: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="dir2mcp-search-"))
    root, state_dir = work / "root", work / "state"
    root.mkdir()
    setup_django(root, state_dir)
    from django.db import connection

    from corpus.config import build_config
    from corpus.embedding import dense_store
    from corpus.index import lexical
    from corpus.providers.local import LocalEmbedder
    from corpus.retrieval import Searcher
    from corpus.state import StateDir
    from corpus.store import open_store

    state = StateDir(state_dir)
    open_store(state)
    started = time.perf_counter()
    build_synthetic(size, 384)
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    dense_store(state).sync("text")
    ann_build_s = time.perf_counter() - started
    config = build_config({"embed": {"provider": "local"}}, {}, {})
    embedder = LocalEmbedder()
    embedder.embed(["warm up"], kind="text")
    words = [w for line in stdlib_lines()[:20000] for w in line.split() if w.isidentifier() and len(w) > 3]
    rng = random.Random(11)
    qs = [" ".join(rng.sample(words, 3)) for _ in range(queries)]
    results: dict = {"chunks": size, "build_rows_s": round(build_s, 1), "build_ann_s": round(ann_build_s, 1)}
    for label, searcher, index in (
        ("lexical", Searcher(state, config, None), "text"),
        ("hybrid", Searcher(state, config, embedder), "text"),
    ):
        times = []
        for q in qs:
            t = time.perf_counter()
            searcher.search(q, k=10, index=index)
            times.append((time.perf_counter() - t) * 1000)
        results[label] = {
            "p50_ms": round(percentile(times, 50), 2),
            "p99_ms": round(percentile(times, 99), 2),
        }
    times = []
    for q in qs:
        t = time.perf_counter()
        embedder.embed([q], kind="text")
        times.append((time.perf_counter() - t) * 1000)
    results["query_embedding"] = {
        "p50_ms": round(percentile(times, 50), 2),
        "p99_ms": round(percentile(times, 99), 2),
    }
    times = []
    with connection.cursor() as cursor:
        for q in qs:
            match = " OR ".join(f'"{t}"' for t in lexical.query_terms(q))
            t = time.perf_counter()
            cursor.execute(
                "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH %s ORDER BY rank LIMIT 50", [match]
            )
            cursor.fetchall()
            times.append((time.perf_counter() - t) * 1000)
    results["reference_fts_match"] = {
        "p50_ms": round(percentile(times, 50), 2),
        "p99_ms": round(percentile(times, 99), 2),
    }
    results["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    results["db_mb"] = round(state.meta_db.stat().st_size / 2**20, 1)
    results["hybrid_to_fts_ratio_p50"] = round(
        results["hybrid"]["p50_ms"] / results["reference_fts_match"]["p50_ms"], 1
    )
    return results


# -- quality -------------------------------------------------------------------


def labelled_copy(target: Path, modules: int, queries: int) -> list[dict]:
    """Copy modules with docstrings blanked; return (query, file, lines) labels."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    rng = random.Random(5)
    files = sorted(p for p in lib.glob("*.py") if not p.name.startswith(("_", "test")))
    rng.shuffle(files)
    labels: list[dict] = []
    for path in files[:modules]:
        source = path.read_text(errors="replace")
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        lines = source.split("\n")
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module):
                continue
            doc = ast.get_docstring(node, clean=True)
            if not (node.body and isinstance(node.body[0], ast.Expr) and doc):
                continue
            expr = node.body[0]
            for n in range(expr.lineno - 1, expr.end_lineno):
                lines[n] = ""
            summary = doc.strip().split("\n\n")[0].replace("\n", " ")
            if isinstance(node, ast.Module) or len(summary.split()) < 4:
                continue
            labels.append(
                {"query": summary[:300], "file": path.name, "start": node.lineno, "end": node.end_lineno}
            )
        (target / path.name).write_text("\n".join(lines))
    rng.shuffle(labels)
    return labels[:queries]


def run_quality(modules: int, queries: int, weights: list[float]) -> dict:
    work = Path(tempfile.mkdtemp(prefix="dir2mcp-quality-"))
    root, state_dir = work / "root", work / "state"
    root.mkdir()
    labels = labelled_copy(root, modules, queries)
    setup_django(root, state_dir)
    from corpus.config import build_config
    from corpus.indexing import index_directory
    from corpus.models import Chunk
    from corpus.providers.local import LocalEmbedder
    from corpus.retrieval import Filters, Searcher
    from corpus.state import StateDir
    from corpus.store import open_store

    state = StateDir(state_dir)
    open_store(state)
    config = build_config({"embed": {"provider": "local"}}, {}, {})
    embedder = LocalEmbedder()
    started = time.perf_counter()
    counters = index_directory(root, state=state, config=config, embedder=embedder)
    index_s = time.perf_counter() - started

    def correct(chunk_id: int, label: dict) -> bool:
        chunk = Chunk.objects.select_related("representation__document").get(chunk_id=chunk_id)
        span = chunk.spans.first()
        return (
            chunk.representation.document.rel_path == label["file"]
            and span.start <= label["end"]
            and span.end >= label["start"]
        )

    hybrid = Searcher(state, config, embedder)
    lexical_only = Searcher(state, config, None)

    def fused(weight: float):
        weighted = Searcher(state, build_config({"search": {"dense_weight": weight}}, {}, {}), embedder)
        return lambda q: [h.chunk_id for h in weighted.search(q, k=10, index="code").hits]

    modes = {
        "lexical": lambda q: [h.chunk_id for h in lexical_only.search(q, k=10, index="code").hits],
        "dense": lambda q: hybrid._dense(embedder.embed([q], kind="code")[0], "code", 10, Filters()),
        "hybrid": lambda q: [h.chunk_id for h in hybrid.search(q, k=10, index="code").hits],
        **{f"hybrid_dense_weight_{w}": fused(w) for w in weights},
    }
    scores = {}
    for mode, run in modes.items():
        found, reciprocal = 0, 0.0
        for label in labels:
            ranked = run(label["query"])[:10]
            rank = next((i for i, cid in enumerate(ranked, start=1) if correct(cid, label)), None)
            if rank:
                found += 1
                reciprocal += 1 / rank
        scores[mode] = {"recall@10": round(found / len(labels), 3), "mrr": round(reciprocal / len(labels), 3)}
    return {
        "modules": modules,
        "queries": len(labels),
        "chunks": counters.chunks_total,
        "index_with_embeddings_s": round(index_s, 1),
        "chunks_per_s": round(counters.chunks_total / index_s, 1),
        **scores,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    lat = sub.add_parser("latency")
    lat.add_argument("--size", type=int, default=10000)
    lat.add_argument("--queries", type=int, default=200)
    qual = sub.add_parser("quality")
    qual.add_argument("--modules", type=int, default=120)
    qual.add_argument("--queries", type=int, default=300)
    qual.add_argument(
        "--weights", type=float, nargs="*", default=[0.5, 0.3], help="Extra dense weights to try."
    )
    args = parser.parse_args()
    result = (
        run_latency(args.size, args.queries)
        if args.what == "latency"
        else run_quality(args.modules, args.queries, args.weights)
    )
    result.update(
        date=time.strftime("%Y-%m-%d"),
        machine=f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        python=platform.python_version(),
    )
    out = REPO / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / f"search-{args.what}-{time.strftime('%Y%m%dT%H%M%S')}.json").write_text(
        json.dumps(result, indent=2)
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
