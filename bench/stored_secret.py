"""CPU of judging documents' stored text whole against the secret rules
(``corpus.screen.SecretBearing``, session 30) in ``search`` and
``list_files``.

    python bench/stored_secret.py [--files 2000] [--rounds 15]

Builds ``--files`` text files of about 3 KB, each holding the query's words,
indexes them (embeddings off), then times, in the same run (CPU seconds, p50
of ``--rounds``, ``lexical.forget`` between searches):

* the reference: hits and listed files judged by the path rules alone;
* cold: with the stored-text screen, a fresh verdict cache each round (every
  judged file's texts read and screened, in batches: ``SecretBearing.prime``);
* warm: with one cache kept across rounds (verdicts within ``CHECK_SECONDS``
  served from it, later ones checked against the representations' ids).
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

QUERY = "walrus floe"
TEXT = "The walrus hauled out on the floe near the station. " * 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        root, state_dir = Path(work) / "root", Path(work) / "state"
        (root / "notes").mkdir(parents=True)
        for n in range(args.files):
            (root / "notes" / f"n{n:05}.txt").write_text(f"Note {n}. {TEXT}\n")
        setup_django(root, state_dir)
        print(json.dumps(run(root, state_dir, args.files, args.rounds)))


def run(root: Path, state_dir: Path, count: int, rounds: int) -> dict:
    from corpus import files
    from corpus.index import lexical
    from corpus.ingest.indexing import index_directory
    from corpus.retrieval import Searcher
    from corpus.screen import SecretBearing
    from corpus.security import ExclusionEngine
    from corpus.store import open_store
    from kernel.config import build_config
    from kernel.state import StateDir

    state = StateDir(state_dir)
    open_store(state)
    config = build_config({"embed": {"provider": "none"}, "chat": {"provider": "none"}}, {}, {})
    index_directory(root, state=state, config=config)
    out: dict = {"files": count, "rounds": rounds, "load_average": [os.getloadavg()[0]]}
    engine = ExclusionEngine.from_config(root, config, state_dir=state.path)
    warm = SecretBearing(engine.find_secret)

    def readable(rel: str) -> bool:  # the screen the round set, as the server's context judges
        return engine.listed_reason(rel) is None

    for name in ("reference", "cold", "warm"):
        search_cpu, list_cpu = [], []
        for _ in range(rounds):
            bearing = {"reference": None, "cold": SecretBearing(engine.find_secret), "warm": warm}[name]
            engine.stored_secret = None if bearing is None else bearing.holds
            prime = engine.stored_prime = None if bearing is None else bearing.prime
            searcher = Searcher(state, config, None, readable=readable, pinned=engine.pinned, prime=prime)
            lexical.forget()
            started = time.process_time()
            searcher.search(QUERY, k=10)
            search_cpu.append(time.process_time() - started)
            if name == "cold":
                bearing = SecretBearing(engine.find_secret)
                engine.stored_secret, engine.stored_prime = bearing.holds, bearing.prime
            started = time.process_time()
            files.list_files(path_prefix="notes", limit=200, engine=engine)
            list_cpu.append(time.process_time() - started)
        out[name] = {
            "search_cpu_ms_p50": round(1000 * statistics.median(search_cpu), 2),
            "list_files_cpu_ms_p50": round(1000 * statistics.median(list_cpu), 2),
        }
    out["load_average"].append(os.getloadavg()[0])
    for name in ("cold", "warm"):
        for what in ("search_cpu_ms_p50", "list_files_cpu_ms_p50"):
            out[f"ratio {name} {what}"] = round(out[name][what] / out["reference"][what], 2)
    return out


if __name__ == "__main__":
    main()
