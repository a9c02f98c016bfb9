"""Completion benchmark (not a test): ``completion/complete`` latency at 100k paths.

    python bench/completion.py [--files 100000] [--queries 2000]

Builds a state directory of N live documents on a nested tree (20 top
folders, 10 below each, 5 below those, files in each, plus one flat folder
of 5,000 files and mixed-case names) with one code unit each, then times, in
process and in the same run:

* ``completion.complete`` for the file template's ``path`` (the whole method:
  validation, the in-memory table, the exclusion engine's screening of the
  values), on prefixes cut from random paths at random points, case flipped;
* the reference: a plain SQL prefix scan of the same prefixes
  (``rel_path LIKE 'p%'``, case-insensitive in SQLite, the first 101 rows
  by path and a ``COUNT(*)`` for the total);
* building the tables (paths and symbols) and the stamp query a refresh
  runs once a second, and the symbol lookup.

Results go to bench/results/ and stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from search import percentile, setup_django  # noqa: E402  (bench/search.py's, not written again)

WORDS = (
    "alpha beta gamma delta parser loader config index search vector render model view "
    "client server cache queue worker store token stream event report"
).split()


def tree_paths(files: int) -> list[str]:
    """``files`` paths: a nested tree and one flat folder of 5,000."""
    rng = random.Random(5)
    flat = [f"vendor/flat/Item_{n:05d}.json" for n in range(min(5000, files // 20))]
    nested = []
    leaves = [
        f"{WORDS[a].title() if a % 3 == 0 else WORDS[a]}_{a}/{WORDS[b]}_{b}/{WORDS[c]}"
        for a in range(20)
        for b in range(10)
        for c in range(5)
    ]
    for n in range(files - len(flat)):
        leaf = leaves[n % len(leaves)]
        nested.append(f"{leaf}/{rng.choice(WORDS)}_{n}.py")
    return sorted(flat + nested)


def build(paths: list[str]) -> None:
    from django.db import transaction

    from corpus.models import Chunk, Document, Representation

    for start in range(0, len(paths), 5000):
        batch = paths[start : start + 5000]
        with transaction.atomic():
            docs = Document.objects.bulk_create(
                Document(rel_path=p, doc_type="code", mtime_unix=1_700_000_000, indexed_unix=1) for p in batch
            )
            reps = Representation.objects.bulk_create(
                Representation(document=d, rep_type="raw_text", rep_hash=str(d.doc_id)) for d in docs
            )
            Chunk.objects.bulk_create(
                Chunk(
                    representation=r,
                    ordinal=0,
                    text=f"def {WORDS[i % len(WORDS)]}_handler_{start + i}(event):\n    return event\n",
                    context=d.rel_path,
                    index_kind="code",
                )
                for i, (d, r) in enumerate(zip(docs, reps, strict=True))
            )


def prefixes(paths: list[str], count: int) -> list[str]:
    """Prefixes of random paths, cut anywhere, in random case."""
    rng = random.Random(9)
    out = []
    for _ in range(count):
        path = rng.choice(paths)
        cut = path[: rng.randint(0, len(path))]
        out.append("".join(ch.upper() if rng.random() < 0.3 else ch for ch in cut))
    return out


def timed(fn, inputs) -> dict:
    times = []
    for value in inputs:
        started = time.perf_counter()
        fn(value)
        times.append((time.perf_counter() - started) * 1000)
    return {"p50_ms": round(percentile(times, 50), 3), "p99_ms": round(percentile(times, 99), 3)}


def once(fn) -> float:
    started = time.perf_counter()
    fn()
    return round(time.perf_counter() - started, 3)


def sql_prefix(typed: str) -> None:
    from django.db import connection

    like = typed.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    where = "FROM documents WHERE deleted = 0 AND rel_path LIKE %s ESCAPE '\\'"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT rel_path {where} ORDER BY rel_path LIMIT 101", [like])
        cursor.fetchall()
        cursor.execute(f"SELECT COUNT(*) {where}", [like])
        cursor.fetchone()


def run(files: int, queries: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="dir2mcp-completion-"))
    root, state_dir = work / "root", work / "state"
    root.mkdir()
    setup_django(root, state_dir)
    from corpus import uris
    from corpus.store import open_store
    from kernel.state import StateDir
    from mcp_gateway import completion, context

    open_store(StateDir(state_dir))
    paths = tree_paths(files)
    build_s = once(lambda: build(paths))
    ctx = context.build(auth_spec="none")
    typed = prefixes(paths, queries)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    path_table_s = once(completion.PATHS.get)  # the first request builds the table
    table_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    symbol_table_s = once(completion.SYMBOLS.get)

    def ours(value: str) -> None:
        ref = {"type": "ref/resource", "uri": uris.FILE_TEMPLATE}
        completion.complete(ctx, {"ref": ref, "argument": {"name": "path", "value": value}})

    def symbol(value: str) -> None:
        ref = {"type": "ref/prompt", "name": "explain"}
        completion.complete(ctx, {"ref": ref, "argument": {"name": "symbol", "value": value}})

    rng = random.Random(3)
    symbol_typed = [rng.choice(WORDS)[: rng.randint(1, 6)] for _ in range(queries)]
    sample = list(completion.PATHS.get().matching("alpha_0/"))
    return {
        "files": files,
        "queries": queries,
        "build_rows_s": build_s,
        "completion_path": timed(ours, typed),
        "path_table_lookup_only": timed(lambda value: list(completion.PATHS.get().matching(value)), typed),
        "reference_sql_like": timed(sql_prefix, typed),
        "completion_symbol": timed(symbol, symbol_typed),
        "path_table_build_s": path_table_s,
        "path_table_rss_mb": round(table_mb, 1),
        "symbol_table_build_s": symbol_table_s,
        "stamp_query": timed(lambda _v: completion.stamp(), range(50)),
        "example": {"typed": "alpha_0/", "values": sample[:5], "entries": len(sample)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=100_000, help="live documents to index")
    parser.add_argument("--queries", type=int, default=2000, help="completion requests to time")
    args = parser.parse_args()
    result = run(args.files, args.queries)
    result.update(
        date=time.strftime("%Y-%m-%d"),
        machine=f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        python=platform.python_version(),
    )
    out = REPO / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / f"completion-{time.strftime('%Y%m%dT%H%M%S')}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
