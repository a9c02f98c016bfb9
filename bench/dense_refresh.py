"""How the server's dense index takes vectors another process stored
(issue #17; a benchmark, not a test).

The indexing child stores vectors in the database; the server must add
them to its in-memory hnswlib index. Two ways, measured on the same
vectors: **incremental** (add the new vectors, what DenseRefresher does, in
slices of ``--slice`` per hold of the index's lock; the server's is
mcp_gateway.indexer_process.REFRESH_SLICE, 4) and **reload** (read the whole
index file the child saved). Reported per index size: the time to take one
batch of 32 new vectors each way, and the longest a search waits behind
one incremental slice.

    python bench/dense_refresh.py --sizes 10000,50000 --rounds 10 --slice 4
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus.index.dense.vectors import VectorIndex  # noqa: E402

DIM = 384


def unit_vectors(count: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((count, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,50000")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--slice", type=int, default=4)
    args = parser.parse_args()
    print(f"# {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(
        f"| vectors | incremental: 32 new (ms, median) | slice of {args.slice} (ms, max) "
        "| reload (ms, median) | ratio |"
    )
    print("|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        for size in (int(s) for s in args.sizes.split(",")):
            path = Path(folder) / f"v{size}.hnsw"
            writer = VectorIndex(path, DIM, "bench")
            base = unit_vectors(size, 1)
            writer.add(np.arange(1, size + 1), base)
            writer.save()
            reader = VectorIndex(path, DIM, "bench")
            reader.load()
            extra = unit_vectors(32 * args.rounds, 2)
            incremental, slices, reloads = [], [], []
            next_id = size + 1
            for r in range(args.rounds):
                batch = extra[r * 32 : (r + 1) * 32]
                ids = np.arange(next_id, next_id + 32)
                next_id += 32
                began = time.perf_counter()
                for at in range(0, 32, args.slice):
                    t0 = time.perf_counter()
                    reader.add(ids[at : at + args.slice], batch[at : at + args.slice])
                    slices.append(time.perf_counter() - t0)
                incremental.append(time.perf_counter() - began)
                writer.add(ids, batch)
                writer.save()
                fresh = VectorIndex(path, DIM, "bench")
                began = time.perf_counter()
                assert fresh.load()
                reloads.append(time.perf_counter() - began)
            inc, rel = statistics.median(incremental) * 1000, statistics.median(reloads) * 1000
            print(
                f"| {size:,} | {inc:.1f} | {max(slices) * 1000:.1f} | {rel:.0f} | {rel / inc:.0f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()
