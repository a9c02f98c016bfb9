"""Local embedder benchmark (not a test): chunks/s at 256 tokens.

Embeds real text chunks cut from the Python standard library, each long
enough to be truncated at 256 tokens, with ``LocalEmbedder`` (its default
backend, onnxruntime; ``--backend numpy`` for the numpy pass) and, in the
same run, with sentence-transformers on torch CPU from the same model
directory. The two are timed in alternating rounds so that load from other
processes falls on both; the median round is reported. Prints both
throughputs, their ratio and the cosine between the two outputs, and writes
a JSON result to bench/results/. Without torch it reports only ours.

    python bench/embedder.py [--chunks 512] [--batch 32] [--rounds 3] [--backend onnx|numpy]

Run it with an interpreter that has torch and sentence-transformers to get
the comparison (they are not project requirements).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import sysconfig
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the reference loads from a local path only
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from corpus.providers.local import BACKENDS, LocalEmbedder, default_model_dir  # noqa: E402

CHUNK_CHARS = 2400
MIN_TOKENS = 300


def stdlib_chunks(count: int, model_dir: Path) -> list[str]:
    """``count`` chunks of stdlib source, each over ``MIN_TOKENS`` tokens untruncated."""
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    chunks: list[str] = []
    for path in sorted(stdlib.rglob("*.py")):
        if "site-packages" in path.parts:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for start in range(0, len(text) - CHUNK_CHARS, CHUNK_CHARS):
            chunk = text[start : start + CHUNK_CHARS]
            if len(tokenizer.encode(chunk).ids) >= MIN_TOKENS:
                chunks.append(chunk)
            if len(chunks) == count:
                return chunks
    raise SystemExit(f"only {len(chunks)} chunks of {MIN_TOKENS}+ tokens found under {stdlib}")


def timed(fn) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def load_reference(model_dir: Path):
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        print(f"torch / sentence-transformers not importable ({exc}): reporting the local embedder only")
        return None, {}
    model = SentenceTransformer(str(model_dir), device="cpu")
    return model, {"torch": torch.__version__, "torch_threads": torch.get_num_threads()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--chunks", type=int, default=512, help="Chunks to embed per round.")
    parser.add_argument("--batch", type=int, default=32, help="Texts per forward pass, both sides.")
    parser.add_argument("--rounds", type=int, default=3, help="Alternating timed rounds (median reported).")
    parser.add_argument("--backend", choices=BACKENDS, help="LocalEmbedder backend (default: its default).")
    args = parser.parse_args()

    model_dir = default_model_dir()
    chunks = stdlib_chunks(args.chunks, model_dir)
    ours = LocalEmbedder(max_batch=args.batch, backend=args.backend)
    load_s, _ = timed(ours.load)
    reference, versions = load_reference(model_dir)
    ours.embed(chunks[: args.batch], kind="text")  # warm-up
    if reference is not None:
        reference.encode(chunks[: args.batch], batch_size=args.batch)

    ours_times, ref_times = [], []
    ours_out = ref_out = None
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        seconds, ours_out = timed(lambda: ours.embed(chunks, kind="text"))
        ours_times.append(seconds)
        if reference is not None:
            seconds, ref_out = timed(lambda: reference.encode(chunks, batch_size=args.batch))
            ref_times.append(seconds)
    load_after = os.getloadavg()

    result = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "numpy": np.__version__,
        **versions,
        "chunks": len(chunks),
        "tokens_per_chunk": 256,
        "batch": args.batch,
        "local_backend": ours.backend,
        "local_threads": ours.threads,
        "load_avg_before_after": [load_before[0], load_after[0]],
        "local_load_s": round(load_s, 3),
        "local_round_s": [round(s, 3) for s in ours_times],
        "local_chunks_per_s": round(len(chunks) / statistics.median(ours_times), 2),
        "local_best_chunks_per_s": round(len(chunks) / min(ours_times), 2),
    }
    if reference is not None:
        cosines = np.sum(ours_out * ref_out, axis=1) / np.linalg.norm(ref_out, axis=1)
        result |= {
            "torch_round_s": [round(s, 3) for s in ref_times],
            "torch_chunks_per_s": round(len(chunks) / statistics.median(ref_times), 2),
            "torch_best_chunks_per_s": round(len(chunks) / min(ref_times), 2),
            "cosine_min": float(cosines.min()),
            "cosine_mean": float(cosines.mean()),
            "max_abs_diff": float(np.abs(ours_out - ref_out).max()),
        }
        result["ratio"] = round(result["local_chunks_per_s"] / result["torch_chunks_per_s"], 3)
        result["ratio_best"] = round(result["local_best_chunks_per_s"] / result["torch_best_chunks_per_s"], 3)

    out_dir = REPO / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    out_path = out_dir / f"embedder-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"written to {out_path}")


if __name__ == "__main__":
    main()
