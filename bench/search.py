"""Search benchmarks (not tests): latency and memory. Retrieval quality is
measured by bench/retrieval.py.

    python bench/search.py latency [--size 10000] [--queries 200] [--depths 50 100 200 400]

latency: builds a state directory of N code chunks of real text (lines of
the Python standard library) with random unit vectors as embeddings, then
times `Searcher.search` (k=10) on the code index in-process (lexical, hybrid
with one dense round, and the default hybrid, whose code index is searched a
second time from the first fusion's leaders; the query embedded by the
local model), reporting p50/p99 and the process's peak RSS. The same run
times the earlier per-request candidate pool (``search.candidates: 0``) and,
with ``--depths``, each candidate depth, every query through every variant
in turn. The reference
in the same run is a bare FTS5 MATCH on the same table.

Each run runs in a fresh temp state directory; results go to bench/results/.
"""

from __future__ import annotations

import argparse
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

    from corpus.index import lexical
    from corpus.index.dense.embedding import to_bytes
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
                        index_kind="code",
                        embedding=to_bytes(vec),
                        embedding_status="ok",
                    )
                )
            chunks = Chunk.objects.bulk_create(chunks)
            Span.objects.bulk_create(Span(chunk=c, span_kind="lines", start=1, end=40) for c in chunks)
            lexical.index_chunks((c.chunk_id, "", c.text, c.index_kind) for c in chunks)
    set_setting("embed_provider", "local")
    for kind in ("text", "code"):
        set_setting(f"embed_{kind}_model", "all-MiniLM-L6-v2")
        set_setting(f"embed_{kind}_dim", str(dim))


def variants(depths: list[int]) -> list[tuple[str, dict, bool]]:
    """(label, config data, dense?) of each timed searcher: lexical and
    hybrid at the default candidate depth, hybrid with one dense round, the
    earlier per-request pool (``search.candidates: 0``: k × 5 candidates
    with dense, k without), and hybrid at each of ``depths``."""
    local = {"embed": {"provider": "local"}}
    out = [
        ("lexical", local, False),
        ("hybrid, one dense round", {**local, "search": {"feedback_units": 0}}, True),
        ("hybrid", local, True),
        ("lexical, k-sized pool (before)", {**local, "search": {"candidates": 0}}, False),
        ("hybrid, k × 5 pool (before)", {**local, "search": {"candidates": 0}}, True),
    ]
    out += [(f"hybrid, {d} candidates", {**local, "search": {"candidates": d}}, True) for d in depths]
    out += [(f"lexical, {d} candidates", {**local, "search": {"candidates": d}}, False) for d in depths]
    return out


def run_latency(size: int, queries: int, depths: list[int]) -> dict:
    work = Path(tempfile.mkdtemp(prefix="dir2mcp-search-"))
    root, state_dir = work / "root", work / "state"
    root.mkdir()
    setup_django(root, state_dir)
    from django.db import connection

    from corpus.index import lexical
    from corpus.index.dense.embedding import dense_store
    from corpus.providers.local import LocalEmbedder
    from corpus.retrieval import Searcher
    from corpus.store import open_store
    from kernel.config import build_config
    from kernel.state import StateDir

    state = StateDir(state_dir)
    open_store(state)
    started = time.perf_counter()
    build_synthetic(size, 384)
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    dense_store(state).sync("code")
    ann_build_s = time.perf_counter() - started
    embedder = LocalEmbedder()
    embedder.embed(["warm up"], kind="code")
    words = [w for line in stdlib_lines()[:20000] for w in line.split() if w.isidentifier() and len(w) > 3]
    rng = random.Random(11)
    qs = [" ".join(rng.sample(words, 3)) for _ in range(queries)]
    results: dict = {"chunks": size, "build_rows_s": round(build_s, 1), "build_ann_s": round(ann_build_s, 1)}
    searchers = [
        (label, Searcher(state, build_config(data, {}, {}), embedder if dense else None))
        for label, data, dense in variants(depths)
    ]
    times: dict[str, list[float]] = {label: [] for label, _ in searchers}
    for n, q in enumerate(qs):
        # each query through every variant, from a rotating start, so that
        # the machine's load falls on all of them alike
        for label, searcher in searchers[n % len(searchers) :] + searchers[: n % len(searchers)]:
            t = time.perf_counter()
            searcher.search(q, k=10, index="code")
            times[label].append((time.perf_counter() - t) * 1000)
    for label, values in times.items():
        results[label] = {
            "p50_ms": round(percentile(values, 50), 2),
            "p99_ms": round(percentile(values, 99), 2),
        }
    times = []
    for q in qs:
        t = time.perf_counter()
        embedder.embed([q], kind="code")
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    lat = sub.add_parser("latency")
    lat.add_argument("--size", type=int, default=10000)
    lat.add_argument("--queries", type=int, default=200)
    lat.add_argument(
        "--depths",
        type=int,
        nargs="*",
        default=[],
        help="also time search.candidates at each of these depths (hybrid and lexical), e.g. 50 100 200 400",
    )
    args = parser.parse_args()
    result = run_latency(args.size, args.queries, args.depths)
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
