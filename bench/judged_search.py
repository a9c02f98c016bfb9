"""CPU of a lexical search as the server runs it: ``Searcher.search`` with
``readable`` and ``pinned`` from the root's exclusion rules (each ranking cut
to the units the rules let through, ``match`` judged over them), on an index
already built (``dir2mcp reindex``, embeddings off).

    python bench/judged_search.py --dir TREE [--rounds 5] [--symbols NAME ...]

Short queries (up to ``search.all_terms_first_max`` terms: all-terms tier
first) and long ones (more terms: BM25 alone, the units holding every term
read apart), each searched ``--rounds`` times with nothing kept between
searches (``lexical.forget``): CPU seconds a search (``time.process_time``),
p50 and mean of each kind. With ``--symbols``, each name's
``names.find_symbols`` in a pinned block of the rules (as the ``symbols``
tool calls it) instead, 7 calls a name, p50. Run it from two checkouts in
turn to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SHORT = [
    "search", "exclusion rules", "list files", "parse config", "cursor offset", "deadline",
    "subscribe", "token", "symbol table", "lexical index", "embedding provider", "watcher",
]  # fmt: skip
LONG = [
    "how does the server judge a file the rules exclude now",
    "the units holding every query term of a long question",
    "where is the rate limit counted in redis",
    "which method refuses a resource read while open_file is priced",
    "a cursor that resumes past the last file of the page",
    "the walk that a change of the gitignore starts",
    "embed the query once per model shared by the indices",
    "the fan out group joined by a subscription listen",
    "count the documents and chunks of the last walk",
    "a symlink out of the root is never followed",
    "the stop event of a cancelled call on stdio",
    "units whose declared name is made of the query words",
]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--symbols", nargs="*", default=[])
    args = parser.parse_args()
    root = args.dir.resolve()
    from dir2mcp_site import bootstrap

    bootstrap.prepare(["--dir", str(root)])
    import django

    django.setup()
    from corpus.index import lexical
    from corpus.retrieval import Searcher
    from corpus.security import ExclusionEngine
    from corpus.store import open_store
    from kernel.config import build_config
    from kernel.state import StateDir

    state = StateDir(root / ".dir2mcp")
    open_store(state)
    config = build_config({"embed": {"provider": "none"}}, {}, {})
    engine = ExclusionEngine.from_config(root, config, state_dir=state.path)
    searcher = Searcher(
        state,
        config,
        None,
        readable=lambda rel_path: engine.excluded_reason(rel_path) is None,
        pinned=engine.pinned,
    )
    if args.symbols:
        print(json.dumps(symbols_cpu(engine, args.symbols)))
        return
    cpu: dict[str, list[float]] = {"short": [], "long": []}
    load = [os.getloadavg()[0]]
    for _ in range(args.rounds):
        for kind, queries in (("short", SHORT), ("long", LONG)):
            for query in queries:
                lexical.forget()
                started = time.process_time()
                searcher.search(query, k=10)
                cpu[kind].append(time.process_time() - started)
        load.append(os.getloadavg()[0])
    print(
        json.dumps(
            {
                "rows": lexical.live_count(),
                "rounds": args.rounds,
                "load_average": [round(value, 2) for value in load],
                **{
                    kind: {
                        "cpu_ms_p50": round(1000 * statistics.median(values), 2),
                        "cpu_ms_mean": round(1000 * statistics.fmean(values), 2),
                    }
                    for kind, values in cpu.items()
                },
            }
        )
    )


def symbols_cpu(engine, names_asked: list[str]) -> dict:
    from corpus.navigation import names

    out: dict = {"load_average": os.getloadavg()[0]}
    for name in names_asked:
        cpu = []
        for _ in range(7):
            with engine.pinned():
                started = time.process_time()
                found = names.find_symbols(
                    name, readable=lambda rel_path: engine.excluded_reason(rel_path) is None
                )
                cpu.append(time.process_time() - started)
        out[name] = {
            "count": found["count"],
            "truncated": found["truncated"],
            "cpu_ms_p50": round(1000 * statistics.median(cpu), 2),
        }
    return out


if __name__ == "__main__":
    main()
