"""CPU of a long query's ``search`` when the units holding every word lie
first in files the rules exclude now (``Searcher._full_past``, session 29).

    python bench/full_past.py [--excluded 3000] [--rounds 15]

Builds a tree of ``--excluded`` files under ``private/``, each one unit
holding the query's four words, and ``zz/zoo.txt`` holding them too, stored
after them; indexes it (embeddings off), then times ``Searcher.search`` of
the query, and a short one (CPU seconds, p50 of ``--rounds``,
``lexical.forget`` between searches) in the same run under three sets of rules:

* the reference: nothing excluded (the first page of full matches holds
  readable units: no page read past it);
* ``private/`` excluded: every page of 200 units lies in new excluded files,
  so all ``FULL_PAGES`` pages are read (with 3,000 files, ``zoo.txt`` is
  past them and not found: the worst case);
* the first 1,500 files of ``private/`` excluded: a readable one is found on
  the eighth page.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from search import setup_django  # noqa: E402  (bench/search.py's)

QUERY = "walrus tusk blubber floe"
#: a short query (all-terms tier first): 3,000 excluded units ranked first
#: make the lexical ranking read deeper (Searcher._lexical, CROWDED_DEPTH)
SHORT = "walrus floe"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--excluded", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        root, state_dir = Path(work) / "root", Path(work) / "state"
        (root / "private").mkdir(parents=True)
        (root / "zz").mkdir()
        for n in range(args.excluded):
            (root / "private" / f"p{n:05}.txt").write_text(f"Log {n}: {QUERY}.\n")
        (root / "zz" / "zoo.txt").write_text(f"Zoo: {QUERY}.\n")
        setup_django(root, state_dir)
        print(json.dumps(run(root, state_dir, args.excluded, args.rounds)))


def run(root: Path, state_dir: Path, excluded: int, rounds: int) -> dict:
    from corpus.index import lexical
    from corpus.ingest.indexing import index_directory
    from corpus.retrieval import Searcher
    from corpus.security import ExclusionEngine
    from corpus.store import open_store
    from kernel.config import build_config
    from kernel.state import StateDir

    state = StateDir(state_dir)
    open_store(state)
    config = build_config({"embed": {"provider": "none"}, "chat": {"provider": "none"}}, {}, {})
    index_directory(root, state=state, config=config)
    # the first 1,500 files (p00000 to p01499) in six patterns: a rule per file costs every verdict
    first = "private/p00*\n" + "".join(f"private/p01{n}*\n" for n in range(5))
    out: dict = {"excluded_files": excluded, "rounds": rounds, "load_average": [os.getloadavg()[0]]}
    for name, rules in (
        ("reference", ""),
        ("all_pages", "private/*\n"),
        ("found_later", first),
    ):
        (root / ".gitignore").write_text(rules)
        engine = ExclusionEngine.from_config(root, config, state_dir=state.path)
        searcher = Searcher(
            state,
            config,
            None,
            readable=lambda rel, engine=engine: engine.excluded_reason(rel) is None,
            pinned=engine.pinned,
        )
        for query in (QUERY, SHORT):
            cpu, hits = [], 0
            for _ in range(rounds):
                lexical.forget()
                started = time.process_time()
                hits = len(searcher.search(query, k=10).hits)
                cpu.append(time.process_time() - started)
            out[f"{name} ({query})"] = {"cpu_ms_p50": round(1000 * statistics.median(cpu), 2), "hits": hits}
    out["load_average"].append(os.getloadavg()[0])
    for query in (QUERY, SHORT):
        reference = out[f"reference ({query})"]["cpu_ms_p50"]
        for name in ("all_pages", "found_later"):
            out[f"ratio {name} ({query})"] = round(out[f"{name} ({query})"]["cpu_ms_p50"] / reference, 2)
    return out


if __name__ == "__main__":
    main()
