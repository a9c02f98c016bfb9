"""Time to dense (not a test): how long the local model takes to embed every
chunk of the indexing benchmark's tree, against the previous implementation.

The tree is the one bench/indexing.py indexes (the interpreter's standard
library, site-packages and __pycache__ excluded). It is indexed once with
embeddings off into ``--work`` (kept for the next run), and the texts are
read back exactly as ``corpus.index.dense.embedding`` hands them to the embedder
(pending chunks by kind in id order, ``corpus.index.dense.views.embedding_text``).

Sample mode (the default) embeds a seeded sample of those texts with each
variant in alternating rounds, every round in a fresh child process (so the
peak RSS is that variant's own and background load falls on all of them),
and reports chunks/s, tokens, the ratio to the first variant, the cosine to
the first variant's vectors and the time the whole tree would take at that
rate. A variant is ``BACKEND[-PRECISION][+sig][~CUT][@STEPxTOKENSxTEXTS]:CALL[:THREADS[:PROCESSES]]``:
the embedder backend (onnx, numpy), its precision (``embed.precision``:
fp32, the default, int8, bf16 or bf16-int8), whether each code call also embeds its units'
signature views as corpus.index.dense.embedding does when ``embed.signature_weight`` is
above 0 (``+sig``; the cosines compare the units' own vectors), the word pieces
of a text the model reads where that is not its 256 (``~CUT``, ``embed.max_tokens``:
``onnx-bf16~128:256``; under ``--full`` recorded with the index as a real run does), how its
forward passes are cut where that is not the precision's default (``@``: padded
lengths rounded up to a multiple of STEP, at most TOKENS tokens, padding
counted, and TEXTS texts a pass; ``onnx-bf16@1x512x32`` is bf16 before
2026-11-29, session 21), how many
texts one ``embed`` call gets (what corpus.index.dense.embedding fetches at a time), its
worker threads (default: one per core) and how many processes share the
calls between them (default 1; their peak RSS is summed). ``numpy:32:2`` is
the implementation before 2026-11-25.

``--full VARIANT`` instead runs the real ``corpus.index.dense.embedding.embed_pending``
over every pending chunk of a copy of the indexed state, database writes and
index saves included: the time to dense itself. There ``+sig`` records
the configured ``embed.signature_weight`` (0.3) with the index, as a real
run does; without it the code vectors are the units' alone (weight 0, what
the runs before 2026-11-29 measured). Since 2026-11-29, session 24, a run
embeds every unit alone first and the signature views after (views later,
corpus/index/dense/embedding.py): ``units_seconds`` and ``units_cpu_s`` are
the wall and CPU seconds from the start of ``embed_pending`` until the last
chunk's own vector was stored, when every unit is found by dense search
(``embed_cpu_s``: the same to its end; ``cpu_s`` counts the process's
start and the model's load too). Since 2026-11-30, session 27, it also
reports the index saves of the run (``saves``, ``save_s``: their count and
wall seconds) and the CPU seconds of the busiest live threads
(``threads_cpu_s``: the model's own threads against ``main``, which reads,
stores, inserts into the index and saves it).

Either mode also counts the embedded texts that repeat one before them
(``repeated_unit_texts``, ``repeated_views``): what a queue embedding each
distinct text once would save (issue #36: 34 of 65,761 units and 1,115 of
63,017 views in the standard library, 2026-11-30, session 26).

    python bench/time_to_dense.py [--sample 2000] [--rounds 3]
        [--variants numpy:32:2,onnx:256,onnx-int8+sig:256] [--work DIR] [--full onnx+sig:256]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import corpora  # noqa: E402  (bench/corpora.py: the standard library's copy)

from corpus.providers.local import (  # noqa: E402
    MAX_TOKENS,
    LocalEmbedder,
    default_model_dir,
    pack_batches,
    padded_length,
)

CONFIG = (
    "embed:\n  provider: none\n"
    "security:\n  path_excludes: ['**/.git/**', '**/node_modules/**', '**/.dir2mcp/**', '**/.env',"
    " '**/*.pem', '**/*.key', '**/id_rsa', 'site-packages/']\n"
)

# Run in a child with Django set up on the indexed state: the texts as
# corpus.index.dense.embedding would hand them to the embedder.
EXPORT_SNIPPET = """
import json, sys
from dir2mcp_site import bootstrap
bootstrap.prepare(["--dir", sys.argv[1], "--state-dir", sys.argv[2]])
import django; django.setup()
from corpus.index.dense.views import embedding_text, signature_text
from corpus.index.dense.embedding import _pending
from corpus.index.dense.vectors import KINDS
from corpus import slices
window = int(sys.argv[4])
rows = []
for kind in KINDS:
    pending = _pending(kind).order_by("chunk_id").values_list("chunk_id", "context", *slices.FIELDS)
    for cid, context, text in slices.texts(pending, 2):
        view = signature_text(context, text) if kind == "code" else ""
        rows.append([kind, cid, embedding_text(context, text, kind, window), view])
with open(sys.argv[3], "w") as out:
    json.dump(rows, out)
"""

FULL_SNIPPET = """
import json, sys, time
from dir2mcp_site import bootstrap
bootstrap.prepare(["--dir", sys.argv[1], "--state-dir", sys.argv[2]])
import django; django.setup()
from pathlib import Path
from kernel.config import EmbedConfig
from corpus.index.dense.embedding import check_models, dense_store, embed_pending
from corpus.models import Chunk, EmbeddingStatus
from kernel.state import StateDir
sys.path.insert(0, "bench")
from time_to_dense import parse_variant, peak_rss_mb, thread_cpu_s
variant = parse_variant(sys.argv[3])
embedder = variant.embedder()
embedder.texts_per_call = variant.call
weight = EmbedConfig().signature_weight if variant.signature else 0.0
check_models(embedder, StateDir(Path(sys.argv[2])), signature_weight=weight)
start = time.perf_counter()
embedder.load()
load_s = time.perf_counter() - start
total = Chunk.objects.filter(deleted=False, embedding_status=EmbeddingStatus.PENDING).count()
units = {"stored": 0}
start, start_cpu = time.perf_counter(), time.process_time()
def progress(count):
    # when the last chunk's own vector is stored: every unit is found by dense search from then
    units["stored"] += count
    if units["stored"] >= total and "seconds" not in units:
        units.update(seconds=time.perf_counter() - start, cpu_s=time.process_time() - start_cpu)
done = embed_pending(embedder, StateDir(Path(sys.argv[2])), progress=progress)
seconds = time.perf_counter() - start
left = Chunk.objects.filter(deleted=False, embedding_status=EmbeddingStatus.PENDING).count()
cpu_s = time.process_time()
store = dense_store(StateDir(Path(sys.argv[2])))
print(json.dumps({"embedded": done, "left_pending": left, "seconds": seconds, "load_s": load_s,
                  "cpu_s": cpu_s, "embed_cpu_s": cpu_s - start_cpu,
                  "units_seconds": units.get("seconds"), "units_cpu_s": units.get("cpu_s"),
                  "saves": store.saves, "save_s": store.save_seconds, "threads_cpu_s": thread_cpu_s(),
                  "signature_weight": weight, "peak_rss_mb": peak_rss_mb()}))
"""


def peak_rss_mb() -> float:
    """This process's peak RSS since its exec (ru_maxrss would count the
    forking parent's pages too)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def thread_cpu_s(top: int = 6) -> list[list]:
    """The CPU seconds of this process's busiest live threads, as [thread
    id, seconds], busiest first (Linux): the model's own threads (OpenVINO's
    streams) against the one storing, inserting and saving. Threads that
    ended are not listed (a call's forward-pass pool)."""
    ticks = os.sysconf("SC_CLK_TCK")
    found = []
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found.append([int(task.name), round((int(fields[11]) + int(fields[12])) / ticks, 1)])
    main = threading.get_native_id()
    return sorted(([("main" if tid == main else tid), s] for tid, s in found), key=lambda row: -row[1])[:top]


@dataclass(frozen=True)
class Variant:
    backend: str
    precision: str
    signature: bool
    call: int
    threads: int
    processes: int
    #: (length step, tokens a pass, texts a pass) when not the precision's default
    passes: tuple[int, int, int] | None = None
    #: the word pieces of a text the model reads (``embed.max_tokens``)
    max_tokens: int = MAX_TOKENS

    def embedder(self) -> LocalEmbedder:
        embedder = LocalEmbedder(
            backend=self.backend,
            threads=self.threads or None,
            precision=self.precision,
            max_tokens=self.max_tokens,
        )
        if self.passes is not None:
            embedder.length_step, embedder.tokens_per_pass, embedder.max_batch = self.passes
        return embedder


def parse_variant(text: str) -> Variant:
    """``BACKEND[-PRECISION][+sig][~CUT][@STEPxTOKENSxTEXTS]:CALL[:THREADS[:PROCESSES]]``
    (threads 0: one per core)."""
    name, call, *rest = text.split(":")
    name, at, shape = name.partition("@")
    parts = [int(part) for part in shape.split("x")] if at else []
    if at and len(parts) != 3:
        raise SystemExit(f"{text}: @ wants STEPxTOKENSxTEXTS")
    passes = (parts[0], parts[1], parts[2]) if parts else None
    name, tilde, cut = name.partition("~")
    name, plus, _ = name.partition("+sig")
    backend, _, precision = name.partition("-")
    threads = int(rest[0]) if rest else 0
    processes = int(rest[1]) if len(rest) > 1 else 1
    max_tokens = int(cut) if tilde else MAX_TOKENS
    return Variant(
        backend, precision or "fp32", bool(plus), int(call), threads, processes, passes, max_tokens
    )


def index_tree(tree: Path, work: Path) -> Path:
    state = work / "state"
    if (state / "meta.sqlite").exists():
        return state
    config = work / "bench.yaml"
    config.write_text(CONFIG)
    print(f"indexing {tree} (embeddings off) into {state} ...", flush=True)
    subprocess.run(
        [
            sys.executable,
            str(REPO / "manage.py"),
            "reindex",
            "--dir",
            str(tree),
            "--state-dir",
            str(state),
            "--config",
            str(config),
            "--quiet",
        ],
        check=True,
    )
    return state


def export_texts(tree: Path, state: Path, work: Path) -> list[list]:
    path = work / "texts.json"
    if not path.exists():
        subprocess.run(
            [
                sys.executable,
                "-c",
                EXPORT_SNIPPET,
                str(tree),
                str(state),
                str(path),
                str(LocalEmbedder.window_chars),
            ],
            check=True,
            cwd=REPO,
        )
    return json.loads(path.read_text())


def repeats(texts: list[str]) -> int:
    """How many of ``texts`` repeat one before them: the embeddings a queue
    embedding each distinct text once would save."""
    return len(texts) - len(set(texts))


def token_counts(texts: list[str]) -> list[int]:
    """Tokens the model reads of each text (truncated as it truncates)."""
    embedder = LocalEmbedder(backend="numpy")
    embedder.load()
    return [
        len(encoding.ids)
        for at in range(0, len(texts), 4096)
        for encoding in embedder._tokenizer.encode_batch(texts[at : at + 4096])
    ]


def cut_tokens(lengths: list[int], variant: Variant) -> int:
    """The tokens of texts of ``lengths`` (at the model's 256) the variant's cut reads."""
    return sum(min(n, variant.max_tokens) for n in lengths)


def computed_tokens(groups: list[list[int]], variant: Variant) -> int:
    """Tokens the forward passes of the units' own texts compute, padding
    included (onnx pads, to a multiple of the variant's length step)."""
    embedder = variant.embedder()
    step, per_pass, texts = embedder.length_step, embedder.tokens_per_pass, embedder.max_batch
    total = 0
    for lengths in groups:
        for at in range(0, len(lengths), variant.call):
            part = [min(n, variant.max_tokens) for n in lengths[at : at + variant.call]]
            if variant.backend != "onnx":
                total += sum(part)
                continue
            for batch in pack_batches(part, max_texts=texts, max_tokens=per_pass, padded=True, step=step):
                total += len(batch) * padded_length(max(part[i] for i in batch), step)
    return total


def child_embed(args: argparse.Namespace) -> None:
    """One timed round in this process: embed the sample, report, save the vectors."""
    rows = json.loads(Path(args.texts).read_text())
    variant = parse_variant(args.variant)
    call = variant.call
    embedder = variant.embedder()
    start = time.perf_counter()
    embedder.load()
    load_s = time.perf_counter() - start
    by_kind: dict[str, list[int]] = {}
    for row, (kind, *_) in enumerate(rows):
        by_kind.setdefault(kind, []).append(row)
    # every call of the sample in order; a process of ``--parts`` takes every parts-th
    calls = [
        (kind, rows_of[at : at + call])
        for kind, rows_of in by_kind.items()
        for at in range(0, len(rows_of), call)
    ]
    mine = calls[args.part :: args.parts]
    embedder.embed(["warm up"], kind="text")
    vectors = []
    start, cpu_start = time.perf_counter(), time.process_time()
    for kind, part in mine:
        views = [rows[row][3] for row in part if rows[row][3]] if variant.signature else []
        vectors.append(embedder.embed([rows[row][2] for row in part] + views, kind=kind)[: len(part)])
    seconds, cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
    np.savez(args.out, rows=np.array([row for _, part in mine for row in part]), vectors=np.vstack(vectors))
    print(json.dumps({"seconds": seconds, "cpu_s": cpu_s, "load_s": load_s, "peak_rss_mb": peak_rss_mb()}))


def run_variant(variant: str, texts_path: Path, out: Path, size: int) -> dict:
    """One round of ``variant`` in fresh child processes (all of them at once
    when it has several); its vectors are saved in sample order to ``out``."""
    processes = parse_variant(variant).processes
    parts = [out.with_name(f"{out.stem}-part{i}.npz") for i in range(processes)]
    children = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "_embed",
                "--variant",
                variant,
                "--texts",
                str(texts_path),
                "--out",
                str(part),
                "--part",
                str(i),
                "--parts",
                str(processes),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i, part in enumerate(parts)
    ]
    reports = []
    for child in children:
        stdout, _ = child.communicate()
        if child.returncode:
            raise SystemExit(f"{variant}: a child failed ({child.returncode})")
        reports.append(json.loads(stdout.strip().splitlines()[-1]))
    vectors = np.zeros((size, 384), np.float32)
    for part in parts:
        saved = np.load(part)
        vectors[saved["rows"]] = saved["vectors"]
    np.save(out, vectors)
    return {
        "seconds": max(r["seconds"] for r in reports),  # they run at once: the last one to finish
        "cpu_s": sum(r["cpu_s"] for r in reports),
        "load_s": max(r["load_s"] for r in reports),
        "peak_rss_mb": sum(r["peak_rss_mb"] for r in reports),
    }


def sample_mode(args, rows: list[list], work: Path, result: dict) -> None:
    variants = args.variants.split(",")
    rng = random.Random(args.seed)
    picked = sorted(rng.sample(range(len(rows)), min(args.sample, len(rows))))
    sample = [rows[i] for i in picked]
    sample_path = work / f"sample-{args.seed}-{len(sample)}.json"
    sample_path.write_text(json.dumps(sample))
    lengths = token_counts([row[2] for row in sample])
    groups: dict[str, list[int]] = {}
    for (kind, *_), n in zip(sample, lengths, strict=True):
        groups.setdefault(kind, []).append(n)
    views = [row[3] for row in sample if row[3]]
    view_lengths = token_counts(views) if views else []
    rounds: dict[str, list[dict]] = {v: [] for v in variants}
    load_before = os.getloadavg()[0]
    for number in range(args.rounds):
        order = variants if number % 2 == 0 else variants[::-1]
        for variant in order:
            out = work / f"vectors-{variant.replace(':', '_')}.npy"
            rounds[variant].append(run_variant(variant, sample_path, out, len(sample)))
            print(f"round {number + 1} {variant}: {rounds[variant][-1]['seconds']:.1f} s", flush=True)
    load_after = os.getloadavg()[0]
    reference = np.load(work / f"vectors-{variants[0].replace(':', '_')}.npy")
    base = statistics.median(r["seconds"] for r in rounds[variants[0]])
    base_cpu = statistics.median(r["cpu_s"] for r in rounds[variants[0]])
    table = []
    for variant in variants:
        vectors = np.load(work / f"vectors-{variant.replace(':', '_')}.npy")
        cosines = np.sum(vectors * reference, axis=1)
        seconds = statistics.median(r["seconds"] for r in rounds[variant])
        cpu_s = statistics.median(r["cpu_s"] for r in rounds[variant])
        parsed = parse_variant(variant)
        table.append(
            {
                "variant": variant,
                "round_s": [round(r["seconds"], 2) for r in rounds[variant]],
                "round_cpu_s": [round(r["cpu_s"], 2) for r in rounds[variant]],
                "chunks_per_s": round(len(sample) / seconds, 1),
                "ratio": round(base / seconds, 3),
                # CPU seconds (all threads) per round: steadier than wall time on a shared machine
                "cpu_s": round(cpu_s, 1),
                "cpu_ratio": round(base_cpu / cpu_s, 3),
                "tokens_real": cut_tokens(lengths, parsed)
                + (cut_tokens(view_lengths, parsed) if parsed.signature else 0),
                "tokens_computed": computed_tokens(list(groups.values()), parsed),
                "cosine_min": float(cosines.min()),
                "load_s": round(statistics.median(r["load_s"] for r in rounds[variant]), 2),
                "peak_rss_mb": round(max(r["peak_rss_mb"] for r in rounds[variant])),
                "whole_tree_estimate_s": round(len(rows) * seconds / len(sample)),
            }
        )
    result |= {
        "sample": len(sample),
        "rounds": args.rounds,
        "load_avg_before_after": [load_before, load_after],
    }
    result["variants"] = table
    print(
        f"{'variant':14} {'chunks/s':>9} {'ratio':>6} {'CPU ratio':>9} {'tokens (computed)':>20} "
        f"{'cos min':>10} {'RSS MB':>7} {'tree est.':>10}"
    )
    for row in table:
        print(
            f"{row['variant']:14} {row['chunks_per_s']:9.1f} {row['ratio']:6.2f} {row['cpu_ratio']:9.2f} "
            f"{row['tokens_real']:>9} ({row['tokens_computed']:>8}) {row['cosine_min']:10.7f} "
            f"{row['peak_rss_mb']:7d} {row['whole_tree_estimate_s'] / 60:8.1f} min"
        )


def full_mode(args, tree: Path, state: Path, result: dict) -> None:
    """Each of ``--full``'s variants over its own copy of the indexed state, one after another."""
    result["full"] = []
    for variant in args.full.split(","):
        copy = Path(tempfile.mkdtemp(prefix="dir2mcp-ttd-")) / "state"
        shutil.copytree(state, copy)
        load_before = os.getloadavg()
        try:
            done = subprocess.run(
                [sys.executable, "-c", FULL_SNIPPET, str(tree), str(copy), variant],
                check=True,
                capture_output=True,
                text=True,
                cwd=REPO,
            )
        finally:
            shutil.rmtree(copy.parent, ignore_errors=True)
        run = json.loads(done.stdout.strip().splitlines()[-1])
        run |= {"chunks_per_s": round(run["embedded"] / run["seconds"], 1)}
        run |= {"load_avg_before_after": [load_before, os.getloadavg()]}
        result["full"].append({"variant": variant, **run})
        print(json.dumps(result["full"][-1], indent=2), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "mode", nargs="?", default="bench", choices=["bench", "_embed"], help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--tree", help="Directory to index (default: bench/corpora.stdlib_copy, the standard library)."
    )
    parser.add_argument(
        "--work", help="Keeps the indexed state and texts between runs (default: a temp dir)."
    )
    parser.add_argument("--sample", type=int, default=2000, help="Chunks per round in sample mode.")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="Alternating rounds (median reported).")
    parser.add_argument("--variants", default="numpy:32:2,onnx:256", help="First is the reference.")
    parser.add_argument(
        "--full", help="Time embed_pending over the whole tree with these variants (comma-separated) instead."
    )
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--texts", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--part", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--parts", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode == "_embed":
        child_embed(args)
        return

    tree = Path(args.tree).resolve() if args.tree else corpora.stdlib_copy()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="dir2mcp-ttd-"))
    work.mkdir(parents=True, exist_ok=True)
    state = index_tree(tree, work)
    rows = export_texts(tree, state, work)
    lengths = token_counts([row[2] for row in rows])
    result = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "model_dir": str(default_model_dir()),
        "tree": str(tree),
        "tree_chunks": len(rows),
        "tree_tokens": sum(lengths),
        "tree_tokens_mean": round(sum(lengths) / len(rows), 1),
        # embedded texts (a unit's with its path, a signature view) that repeat
        # one before them: what embedding identical texts once would save
        "repeated_unit_texts": repeats([row[2] for row in rows]),
        "views": sum(1 for row in rows if row[3]),
        "repeated_views": repeats([row[3] for row in rows if row[3]]),
    }
    print(
        f"tree: {len(rows)} chunks, {sum(lengths)} tokens (mean {sum(lengths) / len(rows):.1f}); "
        f"repeated texts: {result['repeated_unit_texts']} of the units', "
        f"{result['repeated_views']} of {result['views']} signature views",
        flush=True,
    )
    if args.full:
        full_mode(args, tree, state, result)
    else:
        sample_mode(args, rows, work, result)
    out_dir = REPO / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    out_path = out_dir / f"time-to-dense-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {out_path}")


if __name__ == "__main__":
    main()
