"""How an indexing pass's cost per file grows with the index (issue #37; a
benchmark, not a test).

The kernel's lexical pass slowed from 122 to about 35 files/s as the index
grew. A whole pass mixes kinds of file (the walk is sorted: documentation,
then architectures, then drivers), so this indexes ``--files`` files of a
tree in a shuffled order (``--seed``): every window of ``--window`` files is
the same mix, and the CPU each window takes shows how cost grows with what
the store already holds. Files go through the indexer's own per-file path
(:meth:`Indexer.consume`: read, prepare, batches of 64 written one
transaction each, counters saved every 0.5 s), embeddings off.

Per window: CPU seconds (this process: Python and SQLite, which runs in
it), wall seconds, chunks written, ``meta.sqlite`` size. ``--profile A,B``
runs cProfile over windows A and B only and prints the functions whose
cumulative time differs most between them.

    python bench/index_growth.py TREE --state S --files 40000 --window 2000 --profile 0,19
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def tracked(tree: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(tree), "ls-files", "-z"], capture_output=True, check=True).stdout
    return sorted(p for p in out.decode().split("\0") if p)


def cumulative(profile: cProfile.Profile) -> dict[str, tuple[float, int]]:
    """(cumulative seconds, calls) by function, from a profile."""
    stats = pstats.Stats(profile)
    found = {}
    for (filename, line, name), (_, calls, _, cum, _) in stats.stats.items():  # type: ignore[attr-defined]
        short = filename.replace(str(REPO) + "/", "").rsplit("site-packages/", 1)[-1]
        found[f"{short}:{line}({name})"] = (cum, calls)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("tree", type=Path)
    parser.add_argument("--state", type=Path, required=True, help="State directory (emptied first).")
    parser.add_argument("--files", type=int, default=40000)
    parser.add_argument("--window", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--profile", default="", help="Two window numbers to profile and compare, e.g. 0,19.")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()

    tree = args.tree.resolve()
    shutil.rmtree(args.state, ignore_errors=True)
    args.state.mkdir(parents=True)
    config_path = args.state.parent / f"{args.state.name}.yaml"
    config_path.write_text("embed:\n  provider: none\n")
    # The state directory must be chosen before Django reads its settings.
    from dir2mcp_site import bootstrap  # noqa: PLC0415  (settings read the environment it sets)

    bootstrap.prepare(["--dir", str(tree), "--state-dir", str(args.state), "--config", str(config_path)])
    import django  # noqa: PLC0415  (after bootstrap)

    django.setup()
    from corpus.ingest import writer  # noqa: PLC0415  (after django.setup)
    from corpus.ingest.discover import walk  # noqa: PLC0415
    from corpus.ingest.pipeline import Indexer  # noqa: PLC0415
    from corpus.store import open_store  # noqa: PLC0415
    from kernel.config import load_config  # noqa: PLC0415
    from kernel.state import StateDir  # noqa: PLC0415

    state = StateDir(args.state.resolve())
    open_store(state, allow_rebuild=True)
    config = load_config(config_path)
    paths = tracked(tree)
    random.Random(args.seed).shuffle(paths)
    paths = paths[: args.files]
    profiled = [int(w) for w in args.profile.split(",")] if args.profile else []
    profiles: dict[int, cProfile.Profile] = {}

    indexer = Indexer(tree, state, config)
    db = args.state / "meta.sqlite"
    load = os.getloadavg()
    print(json.dumps({"tree": str(tree.name), "files": len(paths), "window": args.window, "load": load[0]}))
    with writer.indexing():
        indexer.start()
        for w, start in enumerate(range(0, len(paths), args.window)):
            profile = cProfile.Profile() if w in profiled else None
            chunks0 = indexer.counters.chunks_total
            cpu0, wall0 = time.process_time(), time.monotonic()
            if profile:
                profile.enable()
            for rel_path in paths[start : start + args.window]:
                for item in walk(indexer.engine, start=rel_path):
                    indexer.consume(item)
            indexer.batch.flush()
            if profile:
                profile.disable()
                profiles[w] = profile
                profile.dump_stats(str(args.state.parent / f"{args.state.name}-window{w}.prof"))
            cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
            size = sum(p.stat().st_size for p in args.state.glob("meta.sqlite*"))
            print(
                json.dumps(
                    {
                        "window": w,
                        "done": start + args.window,
                        "cpu_s": round(cpu, 2),
                        "cpu_ms_per_file": round(1000 * cpu / args.window, 2),
                        "wall_s": round(wall, 2),
                        "chunks": indexer.counters.chunks_total - chunks0,
                        "db_mib": round(size / 2**20, 1),
                        "load": os.getloadavg()[0],
                        "profiled": bool(profile),
                    }
                ),
                flush=True,
            )
        indexer.close()
    print(json.dumps({"documents": len(indexer.known), "db_mib": round(db.stat().st_size / 2**20, 1)}))
    if len(profiles) == 2:
        a, b = (cumulative(profiles[w]) for w in profiled)
        rows = sorted(((b.get(k, (0, 0))[0] - a.get(k, (0, 0))[0], k) for k in set(a) | set(b)), reverse=True)
        print(f"# cumulative seconds, window {profiled[0]} -> window {profiled[1]}, largest growth first")
        for delta, key in rows[: args.top]:
            ca, na = a.get(key, (0, 0))
            cb, nb = b.get(key, (0, 0))
            print(f"{ca:8.2f} {cb:8.2f} {delta:+8.2f}  calls {na:>8} -> {nb:>8}  {key}")


if __name__ == "__main__":
    main()
