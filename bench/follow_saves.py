"""The server's refresher CPU while its indexing child embeds a tree, units
then signature views (issue #36 item 3; a benchmark, not a test).

A generated tree of Python modules (``--files`` x ``--defs`` functions) is
indexed once with embeddings off. Each round copies that state and runs, in
a fresh process, what ``up`` runs: a DenseRefresher following the store
(``mcp_gateway.indexer_process``), woken every ``--every`` seconds, while a
child process embeds every chunk with ``embed_pending`` (as the indexing
child does), with a hashing embedder of 384 dimensions (the model's cost is
not what is measured: ``--pace`` seconds of sleep a text stand in for it)
and the signature views later (``embed.signature_weight`` 0.3). The round
ends when the server's code index holds every stored vector with no
replacement deferred. Modes alternate between rounds:

- ``replay``: ``follow_saves=None``: the server builds its code index
  again itself half-way through the views pass and at its end (main before
  session 28, and a server on another machine now);
- ``load``: ``follow_saves=120`` (what ``up`` sets): at the pass's end it
  loads the file the child saved after its own build.

Reported per round: the refresher thread's CPU seconds (``/proc``), the
server process's, the child's, and the server's builds and loads; and
memory (issue #37), sampled every 0.2 s from ``/proc/PID/status``: the
peak of the server's RSS plus the child's at the same instant, each one's
peak, and the server's RSS at the end split into anonymous memory (its own)
and file pages (a memory-mapped index file: the page cache's, shared).
``--early N``: once a fifth of the units are stored, the child is asked to
embed the first N files first (``embed_first``, as a search's hits are):
their units stored alone already, their views are embedded early and the
child defers those replacements until its views pass ends (issue #37,
session 31). ``--view-at`` and ``--view-every`` set the server's
``DenseStore.view_at`` / ``view_every`` (its own vectors before it maps
the child's newer file; 20,000 and 60 s by default), so a small tree
shows what the kernel's does; the server's own vectors beside the mapped
file (``viewed``) are sampled with its memory.
``--store`` sets ``rag.vector_store`` (both processes record it);
``--shard-vectors`` the child's ``rag.shard_vectors`` (0: one file), each
value given a run of its own in each round.

    nice -n 10 python bench/follow_saves.py --work W --rounds 2
    nice -n 10 python bench/follow_saves.py --work W --rounds 1 --modes load --store hnswlib
    nice -n 10 python bench/follow_saves.py --work W --rounds 1 --modes load --shard-vectors 0 12500
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CONFIG = "embed:\n  provider: none\n"
DIM = 384
WEIGHT = 0.3


def make_tree(root: Path, files: int, defs: int) -> None:
    root.mkdir(parents=True)
    for f in range(files):
        body = []
        for d in range(defs):
            body.append(
                f"def handle_{f}_{d}(request, limit={d}):\n"
                f'    """Handle request {d} of module {f}."""\n'
                f"    total = sum(range(limit)) + {f * d}\n"
                f"    return request.respond(total, module={f})\n"
            )
        (root / f"mod_{f:04d}.py").write_text("\n\n".join(body))


def index_tree(work: Path, files: int, defs: int) -> tuple[Path, Path]:
    tree, state = work / "tree", work / "state"
    if (state / "meta.sqlite").exists():
        return tree, state
    make_tree(tree, files, defs)
    config = work / "bench.yaml"
    config.write_text(CONFIG)
    subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "reindex", "--dir", str(tree), "--state-dir", str(state)]
        + ["--config", str(config), "--quiet"],
        check=True,
    )
    return tree, state


def thread_cpu(native_id: int) -> float:
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of ``pid`` in bytes (empty once it ended)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    fields = {line.split(":")[0]: line.split()[1:] for line in lines}
    return {key: int(fields[key][0]) * 1024 for key in ("VmRSS", "RssAnon", "RssFile") if key in fields}


def mib(value: int) -> float:
    return round(value / (1 << 20), 1)


def setup_django(tree: Path, state: Path) -> None:
    from dir2mcp_site import bootstrap

    bootstrap.prepare(["--dir", str(tree), "--state-dir", str(state)])
    import django

    django.setup()


def hashing_embedder(pace: float):  # noqa: ANN201  (the class needs Django set up first)
    from corpus.providers.base import Embedder, ModelInfo

    class Hashed(Embedder):
        provider = "bench"
        texts_per_call = 64

        def model_info(self, kind: str) -> ModelInfo:
            return ModelInfo(self.provider, "hashed", DIM)

        def embed(self, texts: Sequence[str], *, kind: str) -> np.ndarray:
            time.sleep(pace * len(texts))
            out = np.empty((len(texts), DIM), dtype=np.float32)
            for i, text in enumerate(texts):
                seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
                row = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
                out[i] = row / np.linalg.norm(row)
            return out

    return Hashed()


def child(args: argparse.Namespace) -> None:
    """The indexing child's embedding: every pending chunk, then the views."""
    setup_django(args.tree, args.state)
    from corpus.index.dense.embedding import check_models, dense_store, embed_pending
    from kernel.state import StateDir

    state = StateDir(args.state)
    embedder = hashing_embedder(args.pace)
    check_models(
        embedder,
        state,
        signature_weight=WEIGHT,
        vector_store=args.store,
        records_store=True,
        shard_vectors=args.shard,
    )
    from corpus.index.dense.embedding import embed_first
    from corpus.models import Chunk

    units = Chunk.objects.filter(index_kind="code").count()
    asked = [f"mod_{f:04d}.py" for f in range(args.early)]
    stored = [0]

    def progress(count: int) -> None:
        stored[0] += count
        if asked and stored[0] >= units // 5:
            embed_first.add(asked)  # a search's hit files
            asked.clear()

    start = time.process_time()
    done = embed_pending(embedder, state, progress=progress)
    store = dense_store(state)
    print(json.dumps({"embedded": done, "cpu_s": time.process_time() - start, "rebuilds": store.rebuilds}))


def server(args: argparse.Namespace) -> None:
    """`up`'s side: a refresher following the store while the child embeds."""
    setup_django(args.tree, args.state)
    from corpus.index.dense.embedding import check_models, dense_store, from_bytes, views_pending
    from corpus.index.dense.vectors import VectorIndex, index_path
    from corpus.models import Chunk, EmbeddingStatus
    from kernel.state import StateDir
    from mcp_gateway.indexer_process import SAVED_WAIT_SECONDS, DenseRefresher

    state = StateDir(args.state)
    check_models(hashing_embedder(0), state, signature_weight=WEIGHT, vector_store=args.store)  # as `up`
    follow = SAVED_WAIT_SECONDS if args.mode == "load" else None
    stop = threading.Event()
    store = dense_store(state)
    store.view_at, store.view_every = args.view_at, args.view_every
    refresher = DenseRefresher(state, stop, every=args.every, follow_saves=follow).start()
    thread = next(t for t in threading.enumerate() if t.name == "dir2mcp-dense-refresh")
    start, start_cpu = time.perf_counter(), time.process_time()
    proc = subprocess.Popen(
        ["nice", "-n", "5", sys.executable, __file__, "--child", "--tree", str(args.tree)]
        + ["--state", str(args.state), "--pace", str(args.pace), "--store", args.store]
        + ["--shard", str(args.shard), "--early", str(args.early)],
        stdout=subprocess.PIPE,
        text=True,
    )
    # the refresher's CPU when the units pass ends: the last look at the
    # most units stored alone (the views pass brings the count down)
    units_cpu, most = 0.0, 0
    peak = {"sum": 0, "server": 0, "child": 0, "anon": 0, "viewed": 0}
    while proc.poll() is None:
        held = store.index("code")
        peak["viewed"] = max(peak["viewed"], (held.viewed or 0) if held is not None else 0)
        peak["anon"] = max(peak["anon"], memory(os.getpid()).get("RssAnon", 0))
        cpu, waiting = thread_cpu(thread.native_id), views_pending().count()
        if waiting >= most:
            units_cpu, most = cpu, waiting
        ours, theirs = memory(os.getpid()).get("VmRSS", 0), memory(proc.pid).get("VmRSS", 0)
        peak["sum"] = max(peak["sum"], ours + theirs)
        peak["server"], peak["child"] = max(peak["server"], ours), max(peak["child"], theirs)
        time.sleep(0.2)
    assert proc.stdout is not None and proc.returncode == 0
    child_out = json.loads(proc.stdout.read().strip().splitlines()[-1])
    child_s = time.perf_counter() - start
    stored = Chunk.objects.filter(index_kind="code", embedding_status=EmbeddingStatus.OK).count()

    def caught_up() -> bool:
        index = store.index("code")
        return (
            index is not None
            and len(index) == stored
            and not store.deferred("code")
            and not views_pending().exists()
        )

    deadline = time.monotonic() + 600
    while not caught_up() and time.monotonic() < deadline:
        peak["server"] = max(peak["server"], memory(os.getpid()).get("VmRSS", 0))
        time.sleep(0.2)
    at_end = memory(os.getpid())
    held = store.index("code")
    viewed = held.viewed if held is not None else None
    done_s = time.perf_counter() - start
    refresher_cpu = thread_cpu(thread.native_id)
    stop.set()
    refresher.wake()
    refresher.join(30)
    # what one build and one load of this code index cost, on this thread
    # (a build: every stored vector inserted with one thread, as _rebuild does)
    index = store.index("code")
    assert index is not None
    began = time.thread_time()
    loaded = VectorIndex(index_path(state, "code"), index.dim, index.model, index.store)
    assert loaded.load()
    load_cpu = time.thread_time() - began
    rows = Chunk.objects.filter(index_kind="code", embedding_status=EmbeddingStatus.OK)
    pairs = list(rows.order_by("chunk_id").values_list("chunk_id", "embedding"))
    ids = np.array([cid for cid, _ in pairs], dtype=np.int64)
    vectors = np.vstack([from_bytes(blob) for _, blob in pairs])
    began = time.thread_time()
    built = VectorIndex(
        index_path(state, "code").with_name("bench.hnsw"), index.dim, index.model, index.store
    )
    for at in range(0, len(ids), 10_000):
        built.add(ids[at : at + 10_000], vectors[at : at + 10_000])
    build_cpu = time.thread_time() - began
    print(
        json.dumps(
            {
                "mode": args.mode,
                "store": index.store,
                "shard_vectors": args.shard,
                "server_shards": index.shards,
                "code_units": stored,
                "peak_rss_server_plus_child_mib": mib(peak["sum"]),
                "peak_rss_server_mib": mib(peak["server"]),
                "peak_rss_child_mib": mib(peak["child"]),
                "end_server_anon_mib": mib(at_end.get("RssAnon", 0)),
                "end_server_file_mib": mib(at_end.get("RssFile", 0)),
                "end_server_viewed": viewed,
                "peak_server_anon_mib": mib(peak["anon"]),
                "peak_server_viewed": peak["viewed"],
                "early_files": args.early,
                "caught_up": caught_up(),
                "refresher_cpu_s": round(refresher_cpu, 2),
                "refresher_units_pass_cpu_s": round(units_cpu, 2),
                "one_build_cpu_s": round(build_cpu, 2),
                "one_load_cpu_s": round(load_cpu, 2),
                "server_cpu_s": round(time.process_time() - start_cpu, 2),
                "child_cpu_s": round(child_out["cpu_s"], 2),
                "child_wall_s": round(child_s, 1),
                "caught_up_wall_s": round(done_s, 1),
                "server_rebuilds": store.rebuilds,
                "server_loads": store.loads,
                "child_rebuilds": child_out["rebuilds"],
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--defs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pace", type=float, default=0.0005, help="seconds of sleep a text (the model)")
    parser.add_argument("--every", type=float, default=0.2, help="the refresher's wake-up interval")
    parser.add_argument("--store", default="usearch-bf16", help="rag.vector_store (both processes)")
    parser.add_argument("--modes", nargs="+", choices=("replay", "load"), default=["replay", "load"])
    parser.add_argument(
        "--shard-vectors",
        type=int,
        nargs="+",
        default=[0],
        help="rag.shard_vectors of the child (0: one file); each value is a run of its own in each round",
    )
    parser.add_argument("--early", type=int, default=0, help="files asked first once a fifth is stored")
    parser.add_argument("--view-at", type=int, default=20_000, help="the server's DenseStore.view_at")
    parser.add_argument("--view-every", type=float, default=60.0, help="the server's DenseStore.view_every")
    parser.add_argument("--shard", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="replay", help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--state", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    if args.server:
        return server(args)
    if args.work is None:
        parser.error("--work DIR is required")
    args.work.mkdir(parents=True, exist_ok=True)
    tree, base = index_tree(args.work, args.files, args.defs)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"# {machine}, load average {os.getloadavg()[0]:.1f}")
    results: dict[str, list[dict]] = {"replay": [], "load": []}
    for r in range(args.rounds):
        runs = [(mode, shard) for mode in args.modes for shard in args.shard_vectors]
        for mode, shard in runs if r % 2 == 0 else runs[::-1]:
            state = args.work / f"round-{r}-{mode}-{shard}"
            shutil.rmtree(state, ignore_errors=True)
            shutil.copytree(base, state)
            out = subprocess.run(
                [sys.executable, __file__, "--server", "--mode", mode, "--tree", str(tree)]
                + ["--state", str(state), "--pace", str(args.pace), "--every", str(args.every)]
                + ["--store", args.store, "--shard", str(shard), "--early", str(args.early)]
                + ["--view-at", str(args.view_at), "--view-every", str(args.view_every)],
                check=True,
                capture_output=True,
                text=True,
            )
            row = json.loads(out.stdout.strip().splitlines()[-1])
            row["load_avg"] = round(os.getloadavg()[0], 1)
            print(json.dumps(row), flush=True)
            results[mode].append(row)
            shutil.rmtree(state, ignore_errors=True)
    if not results["replay"] or not results["load"]:
        return
    replay = statistics.median(r["refresher_cpu_s"] for r in results["replay"])
    load = statistics.median(r["refresher_cpu_s"] for r in results["load"])
    print(f"refresher CPU s, median: replay {replay:.2f}, load {load:.2f}, load / replay {load / replay:.2f}")


if __name__ == "__main__":
    main()
