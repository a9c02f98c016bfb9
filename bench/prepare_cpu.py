"""The CPU a preparing worker spends on a file (issue #37; a benchmark, not a test).

Takes a seeded sample of a tree's files (by default the whole tree, or
only under ``--under`` paths) and does in this one process what the
indexer does to each outside its writer: classify its head and hash it (the
writing process), then prepare it and work out what the writer needs
(:meth:`~corpus.ingest.prepare.Preparer.prepare` and
:func:`~corpus.ingest.writer.precompute`, a worker), and pickle and unpickle
the result (the pipe between them). Reports CPU-seconds (``process_time``)
per file, each stage apart, ``--repeat`` times, with the load average.

``--profile FILE`` runs the preparing under cProfile and prints the top
functions; ``--dump FILE`` writes one line per file with a digest of
everything prepared (document fields, each draft, the symbol index's
definitions and uses, what the writer is handed ahead), and ``--compare
FILE`` checks a run against such a dump: a change meant to be faster only
must leave every line the same.

    .venv/bin/python bench/prepare_cpu.py TREE --files 3000 --repeat 3
    .venv/bin/python bench/prepare_cpu.py TREE --files 3000 --dump before.jsonl
    .venv/bin/python bench/prepare_cpu.py TREE --files 3000 --compare before.jsonl
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import json
import os
import pickle
import pstats
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def sample(tree: Path, under: list[str], files: int, seed: int) -> list[str]:
    """``files`` paths of regular files below ``under`` (relative, sorted walk, seeded pick)."""
    found = []
    for top in under or ["."]:
        for folder, dirs, names in os.walk(tree / top):
            dirs[:] = sorted(d for d in dirs if d != ".git")
            for name in sorted(names):
                path = Path(folder, name)
                if path.is_file() and not path.is_symlink():
                    found.append(path.relative_to(tree).as_posix())
    random.Random(seed).shuffle(found)
    return sorted(found[:files])


def digest(value: object) -> str:
    return hashlib.sha256(repr(value).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def fingerprint(prepared) -> dict:  # noqa: ANN001  (corpus.ingest.prepare.Prepared, imported after setup)
    """What the index would hold of one prepared file, as digests."""
    extracted = prepared.extracted
    nav = prepared.navigation
    ahead = prepared.ahead
    return {
        "path": prepared.rel_path,
        "doc": digest(
            (
                prepared.doc_type,
                prepared.status,
                prepared.error,
                prepared.index_kind,
                prepared.policy_hash,
                prepared.content_hash,
            )
        ),
        "extracted": digest((extracted.rep_type, extracted.text, extracted.meta)) if extracted else "",
        "chunks": len(prepared.drafts),
        "drafts": digest(prepared.drafts),
        "definitions": digest(nav.definitions) if nav else "",
        "uses": digest(nav.uses) if nav else "",
        "ahead": digest((ahead.rep_hash, ahead.places, ahead.tails, ahead.stored_text)) if ahead else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("tree", type=Path)
    parser.add_argument("--under", nargs="*", default=[], help="Paths of the tree to sample from.")
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--profile", type=Path, help="Write a cProfile of the preparing here.")
    parser.add_argument("--top", type=int, default=45)
    parser.add_argument(
        "--freeze", action="store_true", help="gc.freeze() after setting up, as a worker does."
    )
    parser.add_argument("--dump", type=Path, help="Write each file's digests here (JSON lines).")
    parser.add_argument("--compare", type=Path, help="Check each file's digests against a dump.")
    args = parser.parse_args()

    tree = args.tree.resolve()
    work = Path(tempfile.mkdtemp(prefix="prepare-cpu-"))
    config_path = work / "config.yaml"
    config_path.write_text("embed:\n  provider: none\n")
    # The state directory must be chosen before Django reads its settings.
    from dir2mcp_site import bootstrap  # noqa: PLC0415  (settings read the environment it sets)

    bootstrap.prepare(["--dir", str(tree), "--state-dir", str(work / "state"), "--config", str(config_path)])
    import django  # noqa: PLC0415  (after bootstrap)

    django.setup()
    from corpus.ingest import writer  # noqa: PLC0415  (after django.setup)
    from corpus.ingest.prepare import HEAD_BYTES, Capabilities, Prepared, Preparer, sha256_hex  # noqa: PLC0415
    from corpus.security import ExclusionEngine  # noqa: PLC0415
    from kernel.config import load_config  # noqa: PLC0415

    config = load_config(config_path)
    preparer = Preparer(config, ExclusionEngine.from_config(tree, config), Capabilities())
    paths = sample(tree, args.under, args.files, args.seed)
    blobs = [(rel, (tree / rel).read_bytes()) for rel in paths]
    print(
        json.dumps(
            {
                "tree": tree.name,
                "under": args.under,
                "files": len(blobs),
                "seed": args.seed,
                "mib": round(sum(len(b) for _, b in blobs) / 2**20, 1),
            }
        ),
        flush=True,
    )

    def base(rel: str, data: bytes) -> Prepared:
        doc_type = preparer.classify(rel.rsplit("/", 1)[-1], data[:HEAD_BYTES])
        found = Prepared(rel, "file", doc_type, len(data), 0, policy_hash=preparer.policy_hash(doc_type))
        found.content_hash = sha256_hex(data)
        return found

    collecting = {"since": 0.0, "cpu": 0.0, "runs": [0, 0, 0]}

    def collected(phase: str, info: dict) -> None:
        if phase == "start":
            collecting["since"] = time.process_time()
        else:
            collecting["cpu"] += time.process_time() - collecting["since"]
            collecting["runs"][info["generation"]] += 1

    gc.callbacks.append(collected)

    def one_pass(profile: cProfile.Profile | None = None) -> tuple[dict, list]:
        cpu = {"classify_hash": 0.0, "prepare": 0.0, "pickle": 0.0}
        collecting.update(cpu=0.0, runs=[0, 0, 0])
        out = []
        for rel, data in blobs:
            t0 = time.process_time()
            found = base(rel, data)
            if found.size > config.max_bytes_for(found.doc_type):
                continue
            t1 = time.process_time()
            if profile:
                profile.enable()
            try:
                prepared = writer.precompute(preparer.prepare(found, data))
            except Exception as exc:  # as the worker does
                prepared = found.fail("error", "EXTRACT_FAILED", f"{type(exc).__name__}: {exc}")
            if profile:
                profile.disable()
            t2 = time.process_time()
            prepared = pickle.loads(pickle.dumps(prepared, protocol=pickle.DEFAULT_PROTOCOL))
            t3 = time.process_time()
            cpu["classify_hash"] += t1 - t0
            cpu["prepare"] += t2 - t1
            cpu["pickle"] += t3 - t2
            out.append(fingerprint(prepared))  # as a worker, which keeps nothing of a file it sent
        return cpu, out

    if args.freeze:
        gc.freeze()  # as a preparing worker does after its setup (corpus/ingest/prepare_pool.py)
    if args.repeat or args.profile:
        one_pass()  # warm: grammars, compiled queries, regexes
    for round_ in range(args.repeat):
        load = os.getloadavg()[0]
        cpu, _ = one_pass()
        total = sum(cpu.values())
        row = {
            "round": round_,
            "load": load,
            "cpu_s": round(total, 2),
            "ms_per_file": round(1000 * total / len(blobs), 3),
        }
        row |= {f"{k}_ms": round(1000 * v / len(blobs), 3) for k, v in cpu.items()}
        row |= {"gc_ms": round(1000 * collecting["cpu"] / len(blobs), 3), "gc_runs": collecting["runs"]}
        print(json.dumps(row), flush=True)
    if args.profile:
        profile = cProfile.Profile()
        _, prints = one_pass(profile)
        profile.dump_stats(str(args.profile))
        stats = pstats.Stats(profile)
        stats.sort_stats("tottime").print_stats(args.top)
        stats.sort_stats("cumulative").print_stats(args.top)
    elif args.dump or args.compare:
        _, prints = one_pass()
    if args.dump:
        args.dump.write_text("".join(json.dumps(p) + "\n" for p in prints))
    if args.compare:
        expected = [json.loads(line) for line in args.compare.read_text().splitlines()]
        differ = [(a, b) for a, b in zip(expected, prints, strict=True) if a != b]
        print(json.dumps({"compared": len(prints), "differ": len(differ)}))
        for a, b in differ[:20]:
            print("  ", a["path"], {k: (a[k], b[k]) for k in a if a[k] != b[k]})
        if differ:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
