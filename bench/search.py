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

    python bench/search.py tree --dir TREE [--state TREE/.dir2mcp] [--rounds 3]

tree: an index already built (``up`` or ``reindex``, embeddings off or not)
of a big tree, e.g. the kernel's ``drivers/`` (issue #37): each query of
``TREE_QUERIES`` (identifiers, questions, common words) searched in-process
(``Searcher.search``, k=10, lexical only) with any-term queries read pruned
(today's code) and with every row holding a term ranked (the reference,
``lexical.PRUNE_ROWS`` out of reach), in turn, nothing kept between searches
(``lexical.forget``): CPU seconds a search (``time.process_time``), p50/p99
over every query and round, and whether both gave the same hits.

    python bench/search.py pruned-corpora --language python --seed 5

pruned-corpora: one corpus of bench/retrieval.py (bench/corpora.py, its
default size and 300 queries), indexed lexically (units, embeddings off),
then each query's lexical candidates (``Searcher._lexical`` at the default
depth, what the fusion gets) and ``search`` hits (k=50) with any-term
queries read pruned at every size (``lexical.PRUNE_ROWS`` 0) and with every
row ranked: identical lists mean identical retrieval figures, dense or not.

Each run runs in a fresh temp state directory; results go to bench/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
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


# -- a big tree ----------------------------------------------------------------

TREE_QUERIES = [
    # identifiers
    "spin_lock_irqsave", "copy_from_user", "kmalloc", "devm_kzalloc", "platform_get_irq",
    "dma_alloc_coherent", "pci_enable_device", "netif_napi_add", "usb_submit_urb", "i2c_transfer",
    "mutex_lock", "request_threaded_irq", "of_property_read_u32", "regmap_update_bits",
    "pm_runtime_get_sync", "skb_put", "list_for_each_entry", "dev_err", "ioremap", "clk_prepare_enable",
    # questions
    "schedule a task on another cpu run queue", "tcp retransmit timer",
    "page fault handler for anonymous memory", "kmalloc slab cache allocation",
    "usb device enumeration descriptor", "inode cache eviction", "pci config space read",
    "how does the driver reset the device after a timeout", "where is the interrupt handler registered",
    "allocate a DMA buffer for the ring", "read the temperature sensor over i2c",
    "power management suspend and resume callbacks", "parse the device tree node for the clock",
    "free the receive buffers when the interface goes down", "firmware loading failed error path",
    "set the link speed and duplex", "queue a work item to handle the event",
    "wait for the hardware to become ready", "register a new network device",
    "handle a hot unplug of the device", "map PCI BAR memory",
    "validate the ioctl argument from user space", "GPU memory eviction under pressure",
    "display mode setting atomic commit", "bluetooth HCI command timeout",
    # common words
    "lock", "page", "buffer", "device", "error", "the device", "memory", "read write", "init", "data",
]  # fmt: skip


def run_tree(root: Path, state_dir: Path, rounds: int) -> dict:
    setup_django(root, state_dir)
    from corpus.index import lexical
    from corpus.retrieval import Searcher
    from corpus.store import open_store
    from kernel.config import build_config
    from kernel.state import StateDir

    state = StateDir(state_dir)
    open_store(state)
    searcher = Searcher(state, build_config({"embed": {"provider": "none"}}, {}, {}), None)
    pruned_rows = lexical.PRUNE_ROWS
    variants = {"pruned": pruned_rows, "every row ranked (reference)": 10**15}
    cpu: dict[str, list[float]] = {label: [] for label in variants}
    per_query: dict[str, dict[str, list[float]]] = {
        q: {label: [] for label in variants} for q in TREE_QUERIES
    }
    hits: dict[str, dict[str, list[int]]] = {q: {} for q in TREE_QUERIES}
    load = [os.getloadavg()[0]]
    for n in range(rounds):
        for i, query in enumerate(TREE_QUERIES):
            labels = list(variants)
            for label in labels[(n + i) % 2 :] + labels[: (n + i) % 2]:  # alternate which goes first
                lexical.PRUNE_ROWS = variants[label]
                lexical.forget()
                started = time.process_time()
                result = searcher.search(query, k=10)
                spent = time.process_time() - started
                cpu[label].append(spent)
                per_query[query][label].append(spent)
                hits[query][label] = [hit.chunk_id for hit in result.hits]
        load.append(os.getloadavg()[0])
    lexical.PRUNE_ROWS = pruned_rows
    reference = "every row ranked (reference)"
    results: dict = {
        "rows": lexical.live_count(),
        "queries": len(TREE_QUERIES),
        "rounds": rounds,
        "load_average": [round(value, 2) for value in load],
        "same_hits": sum(len(set(map(tuple, h.values()))) == 1 for h in hits.values()),
    }
    for label, values in cpu.items():
        results[label] = {
            "cpu_s_p50": round(percentile(values, 50), 4),
            "cpu_s_p99": round(percentile(values, 99), 4),
            "cpu_s_mean": round(sum(values) / len(values), 4),
        }
    for key in ("cpu_s_p50", "cpu_s_p99", "cpu_s_mean"):
        results[f"ratio_{key}"] = round(results["pruned"][key] / results[reference][key], 3)
    results["per_query_median_cpu_s"] = {
        query: {label: round(statistics.median(values), 4) for label, values in by.items()}
        for query, by in per_query.items()
    }
    results["differing"] = [query for query, h in hits.items() if len(set(map(tuple, h.values()))) > 1]
    results["hits"] = {query: h[reference] for query, h in hits.items()}  # to compare runs of other code
    return results


def run_pruned_corpora(language: str, seed: int) -> dict:
    sys.path.insert(0, str(REPO / "bench"))
    import corpora
    from retrieval import DEFAULT_MAX_LINES

    work = Path(tempfile.mkdtemp(prefix="dir2mcp-pruned-"))
    corpus = corpora.build(
        language, work / "root", max_lines=DEFAULT_MAX_LINES[language], queries=300, seed=seed
    )
    setup_django(work / "root", work / "state")
    from corpus.index import lexical
    from corpus.ingest.indexing import index_directory
    from corpus.retrieval import Filters, Searcher
    from corpus.store import open_store
    from kernel.config import build_config
    from kernel.state import StateDir

    state = StateDir(work / "state")
    open_store(state)
    config = build_config({"embed": {"provider": "none"}}, {}, {})
    index_directory(work / "root", state=state, config=config)
    searcher = Searcher(state, config, None)
    depth = config.search.candidates
    queries = [label["query"] for label in corpus.labels]
    answers: dict[str, list] = {}
    cpu: dict[str, float] = {}
    for label, rows in (("pruned", 0), ("every row ranked", 10**15)):
        lexical.PRUNE_ROWS = rows
        started = time.process_time()
        out = []
        for query in queries:
            lexical.forget()
            candidates = [cid for cid, _ in searcher._lexical(query, depth, Filters(), ())[0]]
            out.append((candidates, [hit.chunk_id for hit in searcher.search(query, k=50).hits]))
        cpu[label] = round(time.process_time() - started, 2)
        answers[label] = out
    lexical.PRUNE_ROWS = 0
    backend = lexical.SQLiteFTS5()
    read_pruned = 0
    for query in queries:  # as lexical._tiers reads the any-term tier
        terms = lexical.query_terms(query)
        if len(terms) > config.search.all_terms_first_max:
            terms = [term for term in terms if term not in lexical.STOP_WORDS] or terms
        read_pruned += len(terms) > 1 and backend._pruned(terms, depth, "", ()) is not None
    pruned, whole = answers["pruned"], answers["every row ranked"]
    return {
        "language": language,
        "seed": seed,
        "rows": lexical.live_count(),
        "queries": len(queries),
        "same_candidates": sum(a[0] == b[0] for a, b in zip(pruned, whole, strict=True)),
        "same_hits": sum(a[1] == b[1] for a, b in zip(pruned, whole, strict=True)),
        "any_term_tier_read_pruned": read_pruned,
        "cpu_s": cpu,
    }


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
    tree = sub.add_parser("tree")
    tree.add_argument("--dir", type=Path, required=True, help="the indexed tree")
    tree.add_argument("--state", type=Path, help="its state directory (default: DIR/.dir2mcp)")
    tree.add_argument("--rounds", type=int, default=3)
    check = sub.add_parser("pruned-corpora")
    check.add_argument("--language", required=True)
    check.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    if args.what == "pruned-corpora":
        result = run_pruned_corpora(args.language, args.seed)
    elif args.what == "tree":
        result = run_tree(args.dir, args.state or args.dir / ".dir2mcp", args.rounds)
    else:
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
