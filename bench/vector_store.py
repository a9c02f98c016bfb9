"""The dense index's stores (``rag.vector_store``) on real vectors: hnswlib
float32 against usearch float32, bfloat16 and int8 (issue #37: the server and
its indexing child each hold the whole index).

The vectors are those a ``bench/retrieval.py`` run stored (``--work W`` of a
run kept with ``--keep``: each language's ``state-units/meta.sqlite``, the
local model's embeddings, code units blended with their signature views as
they are stored), and the queries that run's labels (``labels.json``),
embedded by the local model as a search embeds them. Per corpus, and for
every corpus's vectors in one index (``all``):

- recall@10 and recall@200 of ``VectorIndex.search`` (k 10 and 200: 200 is
  ``search.candidates``, what a dense ranking hands the fusion) against the
  exact inner product of the stored float32 vectors (numpy);
- build: vectors a second inserted (``VectorIndex.add`` with every core);
- query p50 (k 200, one thread, ms);
- bytes a vector in memory (the process's RSS after the build less before
  it, in a fresh process per store and corpus) and in the saved file.

The user-facing measure, found@200 / found@1000 of the default ranking per
corpus with each store, is ``bench/retrieval.py --work W --build
rag.vector_store=STORE`` on the same kept work folder (the index is built
again from the stored vectors, nothing re-embedded).

    nice -n 10 python bench/vector_store.py --work W
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from corpus.index.dense.vectors import STORES, VectorIndex  # noqa: E402

KS = (10, 200)
MODEL = "all-MiniLM-L6-v2"


def rss_bytes() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def stored_vectors(state: Path) -> tuple[np.ndarray, np.ndarray, str]:
    """The live embedded chunks' ids and vectors, and their index kind."""
    with sqlite3.connect(state / "meta.sqlite") as conn:
        rows = conn.execute(
            "SELECT chunk_id, embedding, index_kind FROM chunks "
            "WHERE deleted = 0 AND embedding_status = 'ok' AND embedding IS NOT NULL"
        ).fetchall()
    kinds = {kind for _, _, kind in rows}
    kind = "code" if "code" in kinds else "text"
    rows = [row for row in rows if row[2] == kind]
    ids = np.array([row[0] for row in rows], dtype=np.int64)
    vectors = np.stack([np.frombuffer(row[1], dtype="<f4") for row in rows]).astype(np.float32)
    return ids, vectors, kind


def queries(lang_dir: Path, kind: str) -> np.ndarray:
    from corpus.providers.local import LocalEmbedder
    from corpus.providers.precision import resolve_precision

    texts = [label["query"] for label in json.loads((lang_dir / "labels.json").read_text())]
    embedder = LocalEmbedder(precision=resolve_precision("auto"))  # as bench/retrieval.py's index
    return np.stack([embedder.embed_query(text, kind=kind) for text in texts]).astype(np.float32)


def gather(work: Path, out: Path) -> list[str]:
    """Write each corpus's ids, vectors and queries, and ``all``'s, under ``out``."""
    names = []
    pooled: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    offset = 0
    for lang_dir in sorted(p for p in work.iterdir() if (p / "state-units" / "meta.sqlite").exists()):
        ids, vectors, kind = stored_vectors(lang_dir / "state-units")
        asked = queries(lang_dir, kind)
        np.savez(out / f"{lang_dir.name}.npz", ids=ids, vectors=vectors, queries=asked)
        names.append(lang_dir.name)
        pooled.append((ids + offset, vectors, asked))
        offset += int(ids.max()) + 1
    np.savez(
        out / "all.npz",
        ids=np.concatenate([p[0] for p in pooled]),
        vectors=np.concatenate([p[1] for p in pooled]),
        queries=np.concatenate([p[2] for p in pooled]),
    )
    return [*names, "all"]


def measure(data: Path, store: str) -> dict:
    """One store on one corpus, in this (fresh) process."""
    loaded = np.load(data)
    ids, vectors, asked = loaded["ids"], loaded["vectors"], loaded["queries"]
    exact = np.argsort(-(asked @ vectors.T), axis=1)[:, : max(KS)]
    with tempfile.TemporaryDirectory() as tmp:
        index = VectorIndex(Path(tmp) / "vectors_code.hnsw", vectors.shape[1], MODEL, store)
        before = rss_bytes()
        started = time.perf_counter()
        index.add(ids, vectors, threads=os.cpu_count() or 1)
        build_s = time.perf_counter() - started
        ram = rss_bytes() - before
        found: dict[int, list[float]] = {k: [] for k in KS}
        times = []
        for row, query in enumerate(asked):
            started = time.perf_counter()
            hits = index.search(query, max(KS))
            times.append(time.perf_counter() - started)
            labels = [hit.chunk_id for hit in hits]
            for k in KS:
                wanted = set(ids[exact[row, :k]].tolist())
                found[k].append(len(wanted.intersection(labels[:k])) / k)
        index.save()
        disk = index.path.stat().st_size
    return {
        "vectors": len(ids),
        **{f"recall@{k}": round(statistics.fmean(found[k]), 4) for k in KS},
        "build_vectors_per_s": round(len(ids) / build_s),
        "query_p50_ms": round(statistics.median(times) * 1000, 3),
        "ram_bytes_per_vector": round(ram / len(ids)),
        "disk_bytes_per_vector": round(disk / len(ids)),
    }


def main(argv: list[str]) -> None:
    if argv[:1] == ["_one"]:
        print(json.dumps(measure(Path(argv[1]), argv[2])))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", type=Path, required=True, help="a bench/retrieval.py --keep work folder")
    parser.add_argument("--stores", nargs="+", choices=STORES, default=list(STORES))
    args = parser.parse_args(argv)
    out_dir = REPO / "bench" / "results"
    out_dir.mkdir(exist_ok=True)
    result: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.platform()}, {platform.machine()}, {os.cpu_count()} cores",
        "corpora": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        names = gather(args.work, Path(tmp))
        for name in names:
            rows = {}
            for store in args.stores:
                done = subprocess.run(
                    [sys.executable, __file__, "_one", str(Path(tmp) / f"{name}.npz"), store],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                rows[store] = json.loads(done.stdout.strip().splitlines()[-1])
            result["corpora"][name] = rows
            print(table(name, rows, args.stores[0]), flush=True)
    path = out_dir / f"vector_store-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"results: {path.relative_to(REPO)}")


def table(name: str, rows: dict, reference: str) -> str:
    ref = rows[reference]
    lines = [
        f"### {name}: {ref['vectors']} vectors (ratios to {reference}, same run)",
        "| store | recall@10 | recall@200 | build vectors/s | query p50 ms | RAM B/vector | disk B/vector |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for store, r in rows.items():
        cells = [f"{r['recall@10']:.4f}", f"{r['recall@200']:.4f}"]
        for key in ("build_vectors_per_s", "query_p50_ms", "ram_bytes_per_vector", "disk_bytes_per_vector"):
            cells.append(f"{r[key]} ({r[key] / max(ref[key], 1e-9):.2f}x)")
        lines.append(f"| {store} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main(sys.argv[1:])
