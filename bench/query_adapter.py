"""Train the query-side adapter (issue #36): a square matrix applied to a
query's vector before the code index is searched (corpus/adapter.py).

    python bench/query_adapter.py pairs --node-modules DIR [DIR ...]   # mine and embed pairs
    python bench/query_adapter.py train                                # fit, write corpus/data/

Pairs are taken mechanically from public packages installed on this machine,
never from a standard library or from the corpora of bench/retrieval.py:

- Python: every third-party package in this interpreter's ``site-packages``
  (not the standard library, not this project); a docstring's first
  paragraph → the unit holding its definition, docstrings blanked;
- JavaScript/TypeScript: the packages under each ``--node-modules`` folder
  (``.js``/``.mjs``/``.d.ts``; not ``typescript`` or ``lodash``, which the
  benchmark reads); a JSDoc description → the unit holding the declaration
  it documents, doc comments blanked.

Each side is embedded as search and the index embed it, with the local
model: the query by ``embed_query``; the target as the index stores a code
unit (``corpus.ingest.units.code_units`` with its context, leaning
``embed.signature_weight`` towards its signature view). The labels come
from bench/corpora.py's own rules (``label_python``, ``label_doc_comments``,
``query_text``), so a pair is what a benchmark query is, on other code.

Training is contrastive: in-batch negatives, softmax at temperature
``--temperature`` over the cosines of the adapted, unit-length query with
every target of its batch, plain numpy gradient steps from the identity. A
tenth of the packages (chosen by the seed) is held out: top-1 among the
held-out targets before and after is reported. The matrix goes to
``corpus/data/query_adapter.npy`` (float16), its provenance (sources and
counts, seed, date, model, settings, held-out figures, digest) to
``corpus/data/query_adapter.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import corpora  # noqa: E402

CACHE = corpora.CACHE / "query-adapter"
DATA = REPO / "corpus" / "data"
#: benchmark corpora and this project: never a source of pairs
EXCLUDED = {"typescript", "lodash", "dir2mcp", "corpus", "mcp_gateway", "payments", "dir2mcp_site"}
#: pairs kept per package and per file, so that no package's style dominates
PER_PACKAGE = 400
PER_FILE = 12
MAX_FILE_BYTES = 300_000
JS_SUFFIXES = (".d.ts", ".js", ".mjs", ".cjs")


# -- mining pairs -------------------------------------------------------------------


def python_files() -> list[tuple[str, str, Path]]:
    """(package, path relative to site-packages, file) of every third-party module."""
    site = Path(sysconfig.get_paths()["purelib"])
    out = []
    for path in sorted(site.rglob("*.py")):
        rel = path.relative_to(site)
        top = rel.parts[0]
        if top.endswith((".dist-info", ".egg-info")) or top.startswith("_") or len(rel.parts) < 2:
            continue
        if top in EXCLUDED or "tests" in rel.parts or "test" in rel.parts:
            continue
        out.append((top, rel.as_posix(), path))
    return out


def js_files(roots: list[Path]) -> list[tuple[str, str, Path]]:
    """(package, path relative to node_modules, file) of every JS/TS source under ``roots``."""
    out = []
    for root in roots:
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if not path.name.endswith(JS_SUFFIXES) or path.name.endswith(".min.js") or not path.is_file():
                continue
            parts = rel.parts
            if "node_modules" in parts[1:-1] or len(parts) < 2:
                continue  # nested copies are found under their own folder
            package = "/".join(parts[:2]) if parts[0].startswith("@") else parts[0]
            if package in EXCLUDED or package.split("/")[-1] in EXCLUDED:
                continue
            out.append((package, f"{package}/{rel.relative_to(package).as_posix()}", path))
    return out


def file_pairs(rel_path: str, source: str) -> list[dict]:
    """The (query, context, text) pairs of one file: each labelled definition's unit."""
    # function-level: corpus.ingest.units needs Django's app registry (set up in main)
    from corpus.ingest.units import code_units

    if rel_path.endswith(".py"):
        found = corpora.label_python(rel_path, source)
    else:
        language = "ts" if rel_path.endswith(".ts") else "js"
        found = corpora.label_doc_comments(language, rel_path, source)
    if not found or not found[1]:
        return []
    blanked, labels = found
    drafts = code_units(blanked, rel_path) or []
    pairs = []
    for label in labels:
        unit = next((d for d in drafts if d.start <= label["start"] <= d.end), None)
        if unit is not None and unit.text.strip():
            pairs.append({"query": label["query"], "context": unit.context, "text": unit.text})
    return pairs


def mine(files: list[tuple[str, str, Path]], seed: int, want: int) -> tuple[list[dict], Counter]:
    """About ``want`` pairs (all there are with 0) from ``files`` read in an
    order shuffled by ``seed``: at most ``PER_FILE`` a file and
    ``PER_PACKAGE`` a package; a query text found twice is dropped."""
    rng = random.Random(seed)
    order = list(files)
    rng.shuffle(order)
    pairs: list[dict] = []
    per_package: Counter = Counter()
    for package, rel, path in order:
        if per_package[package] >= PER_PACKAGE:
            continue
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            found = file_pairs(rel, path.read_text())
        except (UnicodeDecodeError, ValueError, RecursionError, OSError):
            continue
        rng.shuffle(found)
        found = found[: min(PER_FILE, PER_PACKAGE - per_package[package])]
        pairs.extend({**pair, "package": package} for pair in found)
        per_package[package] += len(found)
        if want and len(pairs) >= want:
            break
    counts = Counter(same_text(p["query"]) for p in pairs)
    kept = [p for p in pairs if counts[same_text(p["query"])] == 1]
    return kept, Counter(p["package"] for p in kept)


def same_text(text: str) -> str:
    return " ".join(text.lower().split())


def embed_pairs(pairs: list[dict], signature_weight: float) -> tuple[np.ndarray, np.ndarray]:
    """(query vectors, target vectors as the index stores them)."""
    from corpus.index.dense.views import embedding_text, signature_text
    from corpus.providers.local import LocalEmbedder

    embedder = LocalEmbedder()
    window = embedder.window_chars
    queries = np.asarray(embedder.embed([p["query"] for p in pairs], kind="code"), dtype=np.float32)
    texts = [embedding_text(p["context"], p["text"], "code", window) for p in pairs]
    views = [signature_text(p["context"], p["text"]) for p in pairs]
    targets = np.asarray(embedder.embed(texts, kind="code"), dtype=np.float32)
    if signature_weight > 0:
        signature = np.asarray(embedder.embed(views, kind="code"), dtype=np.float32)
        targets = (targets + np.float32(signature_weight) * signature) / np.float32(1 + signature_weight)
    return queries, targets


def sources(per_package: Counter, node_modules: list[Path]) -> dict[str, dict]:
    """Where each package's pairs came from: its distribution (Python) or
    npm package, and version, with the number of pairs."""
    from importlib import metadata

    python = metadata.packages_distributions()
    out = {}
    for package, count in sorted(per_package.items()):
        entry: dict = {"pairs": count}
        if package in python:
            name = python[package][0]
            entry.update(registry="PyPI", name=name, version=metadata.version(name))
        else:
            for root in node_modules:
                manifest = root / package / "package.json"
                if manifest.is_file():
                    found = json.loads(manifest.read_text())
                    entry.update(registry="npm", name=found.get("name"), version=found.get("version"))
                    break
        out[package] = entry
    return out


def run_pairs(args: argparse.Namespace) -> None:
    from dir2mcp_site import bootstrap

    scratch = Path(tempfile.mkdtemp(prefix="query-adapter-"))
    bootstrap.prepare(["--dir", str(scratch), "--state-dir", str(scratch / "state")])
    import django

    django.setup()
    from kernel.config import EmbedConfig

    started = time.process_time()
    files = python_files() + js_files(args.node_modules)
    pairs, per_package = mine(files, args.seed, args.limit)
    mined_s = time.process_time() - started
    print(f"{len(pairs)} pairs from {len(per_package)} packages ({mined_s:.0f} CPU-s)", flush=True)
    weight = EmbedConfig().signature_weight
    queries, targets = embed_pairs(pairs, weight)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.savez(CACHE / "pairs.npz", queries=queries, targets=targets)
    languages = Counter("python" if p["context"].split("\n")[0].endswith(".py") else "js/ts" for p in pairs)
    meta = {
        "seed": args.seed,
        "signature_weight": weight,
        "packages": [p["package"] for p in pairs],
        "sources": sources(per_package, args.node_modules),
        "languages": dict(languages),
        "node_modules": [str(p) for p in args.node_modules],
        "embed_cpu_s": round(time.process_time() - started - mined_s, 1),
        "date": time.strftime("%Y-%m-%d"),
    }
    (CACHE / "pairs.json").write_text(json.dumps(meta, indent=1))
    print(f"embedded in {meta['embed_cpu_s']} CPU-s; {dict(languages)}")


# -- training -------------------------------------------------------------------------


def unit_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12), norms


def top1(matrix: np.ndarray, queries: np.ndarray, targets: np.ndarray, block: int = 1000) -> float:
    """Share of queries whose own target is the nearest of all ``targets``."""
    adapted, _ = unit_rows(queries @ matrix.T)
    right = 0
    for at in range(0, len(adapted), block):
        scores = adapted[at : at + block] @ targets.T
        right += int((scores.argmax(axis=1) == np.arange(at, at + len(scores))).sum())
    return right / max(len(queries), 1)


def fit(
    queries: np.ndarray,
    targets: np.ndarray,
    *,
    epochs: int,
    batch: int,
    rate: float,
    temperature: float,
    decay: float,
    seed: int,
) -> np.ndarray:
    """The matrix ``W`` (from the identity) minimising the in-batch softmax loss
    of ``unit(W q) · t / temperature`` over each batch's targets, plus
    ``decay · |W - I|²`` (it keeps the adapter near the model it adapts)."""
    dim = queries.shape[1]
    identity = np.eye(dim, dtype=np.float64)
    matrix = identity.copy()
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        order = rng.permutation(len(queries))
        for at in range(0, len(order) - batch + 1, batch):
            pick = order[at : at + batch]
            q, t = queries[pick].astype(np.float64), targets[pick].astype(np.float64)
            adapted = q @ matrix.T
            unit, norms = unit_rows(adapted)
            logits = unit @ t.T / temperature
            logits -= logits.max(axis=1, keepdims=True)
            probs = np.exp(logits)
            probs /= probs.sum(axis=1, keepdims=True)
            probs[np.arange(len(pick)), np.arange(len(pick))] -= 1.0
            grad_unit = probs @ t / (temperature * len(pick))
            grad_adapted = (grad_unit - (grad_unit * unit).sum(axis=1, keepdims=True) * unit) / norms
            grad = grad_adapted.T @ q + 2 * decay * (matrix - identity)
            matrix -= rate * grad
    return matrix.astype(np.float32)


def held_out_split(packages: list[str], seed: int, share: float = 0.1) -> np.ndarray:
    """A mask of the pairs whose package is held out (``share`` of the packages)."""
    names = sorted(set(packages))
    random.Random(seed).shuffle(names)
    held = set(names[: max(1, round(len(names) * share))])
    return np.array([p in held for p in packages])


def run_train(args: argparse.Namespace) -> None:
    # function-level: corpus.providers.local pulls in the model loader only when training
    from corpus.providers.local import MODEL_NAME

    data = np.load(CACHE / "pairs.npz")
    meta = json.loads((CACHE / "pairs.json").read_text())
    queries, targets = data["queries"], data["targets"]
    if "sources" not in meta:  # pairs embedded before the sources were listed
        meta["sources"] = sources(Counter(meta["per_package"]), [Path(p) for p in meta["node_modules"]])
    held = held_out_split(meta["packages"], args.seed)
    settings = {
        "epochs": args.epochs,
        "batch": args.batch,
        "rate": args.rate,
        "temperature": args.temperature,
        "decay": args.decay,
        "seed": args.seed,
    }
    started = time.process_time()
    matrix = fit(queries[~held], targets[~held], **settings)
    identity = np.eye(queries.shape[1], dtype=np.float32)
    shipped = matrix.astype(np.float16)
    used = shipped.astype(np.float32)
    figures = {
        "train_pairs": int((~held).sum()),
        "held_out_pairs": int(held.sum()),
        "held_out_packages": sorted({p for p, h in zip(meta["packages"], held, strict=True) if h}),
        "held_out_top1_identity": round(top1(identity, queries[held], targets[held]), 4),
        "held_out_top1_adapter": round(top1(used, queries[held], targets[held]), 4),
        "train_top1_identity": round(top1(identity, queries[~held], targets[~held]), 4),
        "train_top1_adapter": round(top1(used, queries[~held], targets[~held]), 4),
        "fit_cpu_s": round(time.process_time() - started, 1),
    }
    print(json.dumps(figures, indent=1))
    if args.dry_run:
        return
    DATA.mkdir(exist_ok=True)
    np.save(DATA / "query_adapter.npy", shipped)
    digest = hashlib.sha256((DATA / "query_adapter.npy").read_bytes()).hexdigest()
    provenance = {
        "what": "query-side linear adapter for the local model's code index (corpus/adapter.py)",
        "model": MODEL_NAME,
        "sha256": digest,
        "dtype": "float16",
        "shape": list(shipped.shape),
        "trained": time.strftime("%Y-%m-%d"),
        "script": "bench/query_adapter.py",
        "settings": settings,
        "pairs": {
            "date": meta["date"],
            "seed": meta["seed"],
            "signature_weight": meta["signature_weight"],
            "languages": meta["languages"],
            "sources": meta["sources"],
            "excluded": sorted(EXCLUDED) + ["the Python standard library"],
        },
        **figures,
    }
    (DATA / "query_adapter.json").write_text(json.dumps(provenance, indent=1) + "\n")
    print(f"wrote {DATA / 'query_adapter.npy'} ({digest[:12]})")


# -- measuring on kept benchmark indices -------------------------------------------------


def measure_one(lang_dir: Path, adapters: list[str]) -> dict:
    """Every row on one corpus kept by ``bench/retrieval.py --keep``, in one
    process on one index: lexical alone (bm25s units), the code index alone
    with and without each adapter, and ``Searcher.search`` with each
    ``search.query_adapter`` (the first of ``adapters`` is usually ``off``)."""
    # function-level: bench/retrieval.py sets sys.path and Django up for its own workers
    import retrieval as bench

    root, state_dir = lang_dir / "root", lang_dir / "state-units"
    labels = json.loads((lang_dir / "labels.json").read_text())
    queries = [label["query"] for label in labels]
    bench.setup_django(root, state_dir)
    from corpus import adapter as query_adapter
    from corpus.providers.local import LocalEmbedder
    from corpus.retrieval import Searcher
    from kernel.config import build_config
    from kernel.state import StateDir

    state = StateDir(state_dir)
    chunks = bench.live_chunks()
    kind = next(iter({c["kind"] for c in chunks.values()}))
    embedder = LocalEmbedder()
    lines = bench.file_line_counts(root)
    docs = [(bench.hit_of(c), bench.embedded_text(c)) for c in chunks.values()]
    rows = {"bm25s units": bench.bm25s_rankings(docs, queries, plain=False)}
    base = build_config(bench.config_data("units", ["search.query_adapter=off"]), {}, {})
    searcher = Searcher(state, base, embedder)
    for name in adapters:
        adapter = query_adapter.load(name)
        if kind == "code" or adapter is None:
            label = "dense" if adapter is None else f"dense + {name}"
            rows[label] = bench.dense_rankings(searcher, embedder, kind, queries, chunks, adapter=adapter)
    for name in adapters:
        config = build_config(
            bench.config_data("units", [f"search.query_adapter={json.dumps(name)}"]), {}, {}
        )
        ranked = [
            bench.hit_list(Searcher(state, config, embedder).search(q, k=bench.DEEP).hits) for q in queries
        ]
        rows[f"default, adapter {name}"] = ranked
    return {name: bench.summarise(ranked, labels, lines) for name, ranked in rows.items()}


def run_measure(args: argparse.Namespace) -> None:
    if args.one:
        out = measure_one(args.one, args.adapter)
        (args.one / "adapter-measure.json").write_text(json.dumps(out))
        return
    for lang_dir in args.dirs:
        # a fresh process per corpus: Django is set up once per process
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "measure",
                "--one",
                str(lang_dir),
                *[f"--adapter={a}" for a in args.adapter],
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            print(f"{lang_dir}: failed\n{done.stderr[-2000:]}")
            continue
        rows = json.loads((lang_dir / "adapter-measure.json").read_text())
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        print(f"\n### {lang_dir.parent.name}/{lang_dir.name} (load average {load})")
        print("| row | found@200 | found@1000 | recall@10 | MRR@10 | n |\n|---|---:|---:|---:|---:|---:|")
        for name, r in rows.items():
            cells = " | ".join(f"{r[key]:.3f}" for key in ("found@200", "found@1000", "recall@10", "mrr@10"))
            print(f"| {name} | {cells} | {r['n']} |")
        sys.stdout.flush()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    pairs = sub.add_parser("pairs", help="mine and embed docstring → unit pairs")
    pairs.add_argument("--node-modules", type=Path, nargs="*", default=[])
    pairs.add_argument("--seed", type=int, default=7)
    pairs.add_argument("--limit", type=int, default=0, help="stop mining at about this many pairs (0: all)")
    train = sub.add_parser("train", help="fit the matrix on the embedded pairs")
    train.add_argument("--epochs", type=int, default=6)
    train.add_argument("--batch", type=int, default=128)
    train.add_argument("--rate", type=float, default=0.5)
    train.add_argument("--temperature", type=float, default=0.05)
    train.add_argument("--decay", type=float, default=0.0)
    train.add_argument("--seed", type=int, default=7)
    train.add_argument("--dry-run", action="store_true", help="report the figures, write nothing")
    measure = sub.add_parser("measure", help="rows with and without adapters on kept benchmark indices")
    measure.add_argument("dirs", type=Path, nargs="*", help="language folders of a --keep'd retrieval run")
    measure.add_argument("--adapter", action="append", default=[], help="off, builtin or a .npy")
    measure.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    {"pairs": run_pairs, "train": run_train, "measure": run_measure}[args.command](args)


if __name__ == "__main__":
    main(sys.argv[1:])
