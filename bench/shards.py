"""A dense index in shards against one index (issue #37; a benchmark, not a
test): what the indexing child's memory and a search's time become when the
code index is built as shards of at most ``--shard-vectors`` vectors, each
saved and dropped from memory once full, and searched by mapping every
saved shard (usearch's view) and merging each one's top k.

Vectors: ``--vectors`` unit vectors of 384 dimensions drawn around 2,000
random centres (a stand-in for a model's: clustered, so a search has near
neighbours to find), made a block of 10,000 at a time from a seed, so no
process holds them all. Queries: ``--queries`` more from the same draw.
``rag.vector_store`` is ``--store`` (usearch-bf16, the default).

Each step runs in a fresh process:

- build: ``VectorIndex.add`` (every core) block by block, with
  ``shard_vectors`` 0 (one index) or ``--shard-vectors`` (a full shard
  saved and memory-mapped as the indexing process does), then saved; the
  process's peak RSS (``ru_maxrss``) and the build's vectors a second;
- search: the saved index memory-mapped (``VectorIndex.load(view=True)``,
  as ``up``'s server does: every shard the sidecar lists), each query
  searched with k ``--k`` (a sharded index merges each shard's k nearest);
  RSS after the queries split into anonymous memory and file pages (the
  files' pages, the page cache's), and the hits kept;
- alternate: every layout mapped in one process, each query searched in
  each layout in turn (the order flipped every query), after 20 queries
  each to bring the pages in: a query's p50 and p90 per layout, the
  machine's load falling on each alike;
- exact: the true top k of each query by numpy, a block at a time.

Reported: recall@k of each layout against the exact top k, the overlap of
the sharded search's top k with the single index's (ids), and the peaks.

    nice -n 10 python bench/shards.py --vectors 200000 --shard-vectors 50000

Removed labels (``--removed-shares 0,0.3,0.5``, session 31): one shard of
the first ``--shard-vectors`` vectors mapped with each share of its labels
removed (passed over by its searches) against a shard of its live vectors
alone, alternating: what a merge gains a search, for
``vectors.COMPACT_BELOW``.

Churn (``--churn ROUNDS``, session 31): what branch switches leave. The
index of ``--vectors`` built in shards of the first ``--shard-vectors``,
then ROUNDS times ``--churn-share`` of its live labels removed and as many
new ones added (they fill the open shard and new ones: the old shards turn
sparse), saved after each round; then 100 of the first shard's vectors
replaced and saved. Reported for each save: bytes written (``wchar``) and
CPU; then, on a copy of the files, the sparse shards merged
(``VectorIndex.compact``) and saved (its CPU and bytes); and the searches
of the churned files, of the merged ones and of one index of the live
vectors, alternating query by query. ``--before DIR``: a checkout of the
code before (``git archive REV | tar -x -C DIR``) whose churn is measured
too, and searched in the same alternation (its shards, written again at
each save, hold no removed labels).

    nice -n 10 python bench/shards.py --vectors 40000 --shard-vectors 10000 --churn 3 --before DIR
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from corpus.index.dense.vectors import VectorIndex  # noqa: E402

DIM = 384
BLOCK = 10_000
CENTRES = 2_000
MODEL = "bench-clustered"


def centres() -> np.ndarray:
    rng = np.random.default_rng(0)
    found = rng.standard_normal((CENTRES, DIM)).astype(np.float32)
    return found / np.linalg.norm(found, axis=1, keepdims=True)


def block(seed: int, size: int, around: np.ndarray) -> np.ndarray:
    """``size`` unit vectors near random centres, the same for the same seed."""
    rng = np.random.default_rng(1_000 + seed)
    picked = around[rng.integers(0, len(around), size)]
    noisy = picked + 0.35 * rng.standard_normal((size, DIM)).astype(np.float32) / np.sqrt(DIM)
    return (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)


def query_vectors(count: int, around: np.ndarray) -> np.ndarray:
    return block(-1, count, around)


def memory() -> dict[str, float]:
    """This process's peak RSS, RSS, and its anonymous and file pages (MiB)."""
    found = {}
    with open("/proc/self/status") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                found[key] = int(value.split()[0]) / 1024
    found["peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {key: round(value, 1) for key, value in found.items()}


def index_file(folder: Path) -> Path:
    return folder / "vectors_code.hnsw"


def build(folder: Path, vectors: int, shard: int, store: str) -> dict:
    """The index built as the indexing process builds it (``rag.shard_vectors`` ``shard``), saved."""
    around = centres()
    index = VectorIndex(index_file(folder), DIM, MODEL, store, shard_vectors=shard)
    started = time.perf_counter()
    for seed, start in enumerate(range(0, vectors, BLOCK)):
        size = min(BLOCK, vectors - start)
        ids = np.arange(start, start + size, dtype=np.int64)
        index.add(ids, block(seed, size, around), threads=os.cpu_count() or 1)
    index.save()
    took = time.perf_counter() - started
    return {"files": index.shards, "vectors_per_s": round(vectors / took), **memory()}


def search(folder: Path, queries: int, k: int, store: str) -> dict:
    """Every query searched in the index ``folder`` holds (its sidecar lists its shards), mapped."""
    asked = query_vectors(queries, centres())
    index = VectorIndex(index_file(folder), DIM, MODEL, store)
    assert index.load(view=True), folder
    times, found = [], []
    for query in asked:
        started = time.perf_counter()
        hits = index.search(query, k)
        times.append(time.perf_counter() - started)
        found.append([hit.chunk_id for hit in hits])
    np.save(folder / "found.npy", np.array(found, dtype=np.int64))
    times.sort()
    return {
        "shards": index.shards,
        "query_p50_ms": round(statistics.median(times) * 1000, 2),
        "query_p90_ms": round(times[int(len(times) * 0.9)] * 1000, 2),
        **memory(),
    }


def alternate(folders: list[Path], queries: int, k: int, store: str) -> dict:
    """The layouts' searches in one process, query by query in turn (the
    machine's load falls on each alike): each one's p50 and p90 in ms."""
    asked = query_vectors(queries, centres())
    indices = []
    for folder in folders:
        index = VectorIndex(index_file(folder), DIM, MODEL, store)
        assert index.load(view=True), folder
        indices.append(index)
    for index in indices:  # the pages in, as a server's after its first searches
        for query in asked[:20]:
            index.search(query, k)
    times: list[list[float]] = [[] for _ in indices]
    cpu: list[list[float]] = [[] for _ in indices]
    for row, query in enumerate(asked):
        order = range(len(indices)) if row % 2 == 0 else reversed(range(len(indices)))
        for at in order:
            started, used = time.perf_counter(), time.thread_time()
            indices[at].search(query, k)
            times[at].append(time.perf_counter() - started)
            cpu[at].append(time.thread_time() - used)
    out = {}
    for folder, index, taken, spent in zip(folders, indices, times, cpu, strict=True):
        taken.sort()
        out[folder.name] = {
            "shards": index.shards,
            "p50_ms": round(statistics.median(taken) * 1000, 2),
            "p90_ms": round(taken[int(len(taken) * 0.9)] * 1000, 2),
            # a search runs in this thread (threads=1): its CPU, which other processes' load leaves alone
            "cpu_p50_ms": round(statistics.median(spent) * 1000, 2),
        }
    return out


def exact(folder: Path, vectors: int, queries: int, k: int) -> None:
    around = centres()
    asked = query_vectors(queries, around)
    best_ids = np.empty((queries, 0), dtype=np.int64)
    best_scores = np.empty((queries, 0), dtype=np.float32)
    for seed, start in enumerate(range(0, vectors, BLOCK)):
        size = min(BLOCK, vectors - start)
        scores = asked @ block(seed, size, around).T
        ids = np.broadcast_to(np.arange(start, start + size, dtype=np.int64), scores.shape)
        both_scores = np.concatenate([best_scores, scores], axis=1)
        both_ids = np.concatenate([best_ids, ids], axis=1)
        keep = np.argsort(-both_scores, axis=1)[:, :k]
        best_scores = np.take_along_axis(both_scores, keep, axis=1)
        best_ids = np.take_along_axis(both_ids, keep, axis=1)
    np.save(folder / "exact.npy", best_ids)


def written() -> int:
    """This process's bytes written through write() so far (/proc/self/io wchar)."""
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("wchar:"))


def measured(action) -> dict:
    """The bytes ``action`` wrote and its CPU seconds (every thread's)."""
    wrote, cpu = written(), time.process_time()
    action()
    return {"mb_written": round((written() - wrote) / 1e6, 2), "cpu_s": round(time.process_time() - cpu, 3)}


def churn(folder: Path, vectors: int, shard: int, store: str, rounds: int, share: float) -> dict:
    """The index built in shards of ``shard``, then ``rounds`` branch
    switches (``share`` of the live labels removed, as many new added),
    then 100 replacements in the first shard, each saved and measured; and
    one index of the live vectors, built beside it (``one``)."""
    around = centres()
    index = VectorIndex(index_file(folder), DIM, MODEL, store, shard_vectors=shard)
    threads = os.cpu_count() or 1
    for seed, start in enumerate(range(0, vectors, BLOCK)):
        size = min(BLOCK, vectors - start)
        index.add(np.arange(start, start + size, dtype=np.int64), block(seed, size, around), threads=threads)
    index.save()
    rng = np.random.default_rng(7)
    following, saves = vectors, []
    for turn in range(rounds):
        gone = rng.choice(np.array(sorted(index.labels)), size=int(len(index) * share), replace=False)
        index.forget(gone.tolist())
        for at in range(0, len(gone), BLOCK):
            size = min(BLOCK, len(gone) - at)
            fresh = np.arange(following, following + size, dtype=np.int64)
            index.add(fresh, block(100 * (turn + 1) + at // BLOCK, size, around), threads=threads)
            following += size
        saves.append({"shards": index.shards, **measured(index.save)})
    replaced = np.array([label for label in range(shard) if label in index][:100], dtype=np.int64)
    index.add(replaced, block(999, len(replaced), around), replace=True)
    few = measured(index.save)
    one = VectorIndex(index_file(folder.parent / "one"), DIM, MODEL, store)
    one.path.parent.mkdir(exist_ok=True)
    live = np.array(sorted(index.labels), dtype=np.int64)
    for start in range(0, len(live), BLOCK):
        part = live[start : start + BLOCK]
        one.add(part, index.vectors(part.tolist()), threads=threads)
    one.save()
    return {"saves_after_each_round": saves, "save_after_100_replacements": few, "live": len(index)}


def compacted(folder: Path, shard: int, store: str) -> dict:
    """The churned index's sparse shards merged and saved (a copy of its files)."""
    index = VectorIndex(index_file(folder), DIM, MODEL, store, shard_vectors=shard)
    assert index.load(), folder
    before = index.shards
    merged: list[int] = []
    took = measured(lambda: merged.append(index.compact(threads=os.cpu_count() or 1)))
    saved = measured(index.save)
    return {
        "shards_before": before,
        "merged": merged[0],
        "shards_after": index.shards,
        "compact": took,
        "save": saved,
    }


def passed_over(folder: Path, shard: int, store: str, shares: list[float], queries: int, k: int) -> dict:
    """One shard of ``shard`` vectors, saved and mapped once per share in
    ``shares``, that share of its labels removed (passed over by its
    searches, as the sidecar lists them), and a shard of the live vectors
    alone for each (what a merge leaves): each one's p50 of a search's CPU
    in ms (this thread's: other processes' load leaves it alone), alternating."""
    around = centres()
    index = VectorIndex(index_file(folder), DIM, MODEL, store)
    index.add(np.arange(shard, dtype=np.int64), block(0, shard, around), threads=os.cpu_count() or 1)
    index.save()
    rng = np.random.default_rng(9)
    layouts: dict[str, VectorIndex] = {}
    for share in shares:
        viewed = VectorIndex(index.path, DIM, MODEL, store)
        assert viewed.load(view=True)
        gone = rng.choice(shard, size=int(shard * share), replace=False)
        viewed.forget(gone.tolist())
        layouts[f"{share:.0%} removed"] = viewed
        live = np.array(sorted(viewed.labels), dtype=np.int64)
        alone = VectorIndex(index_file(folder / f"live{share}"), DIM, MODEL, store)
        alone.add(live, index.vectors(live.tolist()), threads=os.cpu_count() or 1)
        layouts[f"{share:.0%} removed, merged"] = alone
    asked = query_vectors(queries, around)
    times: dict[str, list[float]] = {name: [] for name in layouts}
    for row, query in enumerate(asked):
        names = list(layouts) if row % 2 == 0 else list(reversed(layouts))
        for name in names:
            started = time.thread_time()
            layouts[name].search(query, k)
            if row >= 20:  # the pages in first
                times[name].append(time.thread_time() - started)
    return {name: round(statistics.median(taken) * 1000, 3) for name, taken in times.items()}


def step(*argv: str, script: Path | None = None) -> dict:
    done = subprocess.run(
        [sys.executable, str(script or __file__), "_step", *argv], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def churn_run(args: argparse.Namespace, base: Path) -> dict:
    """The churn mode (module docstring): each tree's churn, the merge, and the alternating searches."""
    shard = args.shard_vectors[0]
    trees = {"now": Path(__file__)}
    if args.before:
        trees["before"] = Path(args.before) / "bench" / "shards_now.py"
        shutil.copy(__file__, trees["before"])  # this file, importing that checkout's code
    out: dict = {}
    for name, script in trees.items():
        folder = base / f"{name}-churned"
        folder.mkdir()
        argv = [str(args.vectors), str(shard), args.store, str(args.churn), str(args.churn_share)]
        out[name] = step("churn", str(folder), *argv, script=script)
        print(json.dumps({name: out[name]}), flush=True)
    merged = base / "now-merged"
    shutil.copytree(base / "now-churned", merged)
    out["compaction"] = step("compact", str(merged), str(shard), args.store)
    print(json.dumps(out["compaction"]), flush=True)
    folders = [base / f"{name}-churned" for name in trees] + [merged, base / "one"]
    out["alternating"] = step(
        "alternate", ",".join(str(folder) for folder in folders), str(args.queries), str(args.k), args.store
    )
    return out


def overlap(left: np.ndarray, right: np.ndarray) -> float:
    return round(float(np.mean([len(set(a) & set(b)) / len(a) for a, b in zip(left, right, strict=True)])), 4)


def main(argv: list[str]) -> None:
    if argv[:1] == ["_step"]:
        name, folder, *rest = argv[1:]
        if name == "build":
            print(json.dumps(build(Path(folder), int(rest[0]), int(rest[1]), rest[2])))
        elif name == "search":
            print(json.dumps(search(Path(folder), int(rest[0]), int(rest[1]), rest[2])))
        elif name == "churn":
            print(
                json.dumps(
                    churn(Path(folder), int(rest[0]), int(rest[1]), rest[2], int(rest[3]), float(rest[4]))
                )
            )
        elif name == "passed_over":
            shares = [float(share) for share in rest[2].split(",")]
            print(
                json.dumps(
                    passed_over(Path(folder), int(rest[0]), rest[1], shares, int(rest[3]), int(rest[4]))
                )
            )
        elif name == "compact":
            print(json.dumps(compacted(Path(folder), int(rest[0]), rest[1])))
        elif name == "alternate":
            folders = [Path(each) for each in folder.split(",")]
            print(json.dumps(alternate(folders, int(rest[0]), int(rest[1]), rest[2])))
        else:
            exact(Path(folder), int(rest[0]), int(rest[1]), int(rest[2]))
            print("{}")
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--vectors", type=int, default=200_000)
    parser.add_argument("--shard-vectors", type=int, nargs="+", default=[50_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=200)
    parser.add_argument("--store", default="usearch-bf16")
    parser.add_argument("--churn", type=int, default=0, help="branch switches to simulate (churn mode)")
    parser.add_argument(
        "--churn-share", type=float, default=0.3, help="share of live labels each one replaces"
    )
    parser.add_argument("--before", help="a checkout of the code before, measured beside this one")
    parser.add_argument(
        "--removed-shares",
        help="comma-separated shares of one shard removed: each one's search against its merge",
    )
    args = parser.parse_args(argv)
    result: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.platform()}, {platform.machine()}, {os.cpu_count()} cores",
        "load": os.getloadavg(),
        "vectors": args.vectors,
        "k": args.k,
        "store": args.store,
        "layouts": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        if args.removed_shares:
            shard = str(args.shard_vectors[0])
            argv = [shard, args.store, args.removed_shares, str(args.queries), str(args.k)]
            result["passed_over"] = step("passed_over", str(base), *argv)
            print(json.dumps(result["passed_over"]), flush=True)
            return _record(result, "shards-passed-over")
        if args.churn:
            result["churn"] = churn_run(args, base)
            print(json.dumps(result["churn"]["alternating"]), flush=True)
            return _record(result, "shards-churn")
        step("exact", str(base), str(args.vectors), str(args.queries), str(args.k))
        truth = np.load(base / "exact.npy")
        whole_found = None
        for shard in [0, *args.shard_vectors]:
            folder = base / f"s{shard}"
            folder.mkdir()
            built = step("build", str(folder), str(args.vectors), str(shard), args.store)
            searched = step("search", str(folder), str(args.queries), str(args.k), args.store)
            found = np.load(folder / "found.npy")
            row = {"build": built, "search": searched, f"recall@{args.k}": overlap(truth, found)}
            if whole_found is None:
                whole_found = found
            else:
                row["same_as_one_index"] = overlap(whole_found, found)
            result["layouts"]["one index" if not shard else f"shards of {shard}"] = row
            print(json.dumps({shard: row}), flush=True)
        folders = ",".join(str(base / f"s{shard}") for shard in [0, *args.shard_vectors])
        result["alternating"] = step("alternate", folders, str(args.queries), str(args.k), args.store)
        print(json.dumps(result["alternating"]), flush=True)
    _record(result, "shards")


def _record(result: dict, name: str) -> None:
    result["load_after"] = os.getloadavg()
    out = REPO / "bench" / "results"
    out.mkdir(exist_ok=True)
    path = out / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"results: {path.relative_to(REPO)}")


if __name__ == "__main__":
    main(sys.argv[1:])
