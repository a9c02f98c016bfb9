"""From a vector stored to a search that finds it (issue #17; a benchmark, not a test).

With the indexer in a child process (``server.indexer: process``, the
default) a vector reaches the server's search only when the server's
``DenseRefresher`` sees the store's version move and adds it (woken by the
child's progress reports, and every 0.5 s besides). With ``thread`` the
indexer adds it to the serving process's own index as it stores it: the reference, measured in the same run.

Both servers run at once, each on its own copy of a small tree (fully
indexed first). Each round writes one new file into each tree in turn,
then polls every 10 ms: the state's SQLite for the moment the file's
chunks are stored with a vector (``embedding_status = 'ok'``, a read-only
connection), and the server's search (REST mirror, ``k`` above the number
of rounds) for the moment the file is among the hits. The query shares no
word with the file, so only its vector can find it. Reported per mode:
stored -> found (median, p90, max) and written -> found, and the ratio of
the written -> found medians (process / thread). A search takes about
10 ms here, so figures are good to about 20 ms; with the thread, stored ->
found is within that (it can come out negative).

    python bench/store_to_search.py --rounds 20
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.serving import Server, make_tree, percentile  # noqa: E402  (the repository root goes on sys.path first)
from corpus.index.words import index_text, tokens  # noqa: E402

QUERY = "what is the price to mail a package"
BODY = (
    "def compute_shipping_cost_{n}(weight_kg, distance_km):\n"
    "    # freight charge by courier\n"
    "    return 4.5 + weight_kg * 0.8 + distance_km * 0.05\n"
)
POLL = 0.01


def stored(db: Path, rel_path: str) -> bool:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
        row = conn.execute(
            "SELECT count(*) FROM chunks c JOIN representations r ON r.rep_id = c.representation_id "
            "JOIN documents d ON d.doc_id = r.document_id "
            "WHERE d.rel_path = ? AND c.deleted = 0 AND c.embedding_status = 'ok'",
            (rel_path,),
        ).fetchone()
    return row[0] > 0


def found(client: httpx.Client, server: Server, rel_path: str, k: int) -> bool:
    response = client.post(server.url + "/api/v1/search", json={"query": QUERY, "k": k, "index": "code"})
    return any(hit["rel_path"] == rel_path for hit in response.json()["hits"])


def one_round(client: httpx.Client, server: Server, root: Path, state: Path, n: int, k: int) -> tuple:
    rel_path = f"shipping_{n}.py"
    written = time.perf_counter()
    (root / rel_path).write_text(BODY.format(n=n))
    at_store = at_found = None
    end = written + 120
    while at_found is None or at_store is None:
        now = time.perf_counter()
        if now > end:
            raise SystemExit(f"{rel_path} not found within 120 s")
        if at_store is None and stored(state / "meta.sqlite", rel_path):
            at_store = time.perf_counter()
        if at_found is None and found(client, server, rel_path, k):
            at_found = time.perf_counter()
        time.sleep(POLL)
    return at_found - at_store, at_found - written


def summary(values: list[float]) -> dict:
    return {
        "median": round(statistics.median(values), 3),
        "p90": round(percentile(values, 0.9), 3),
        "max": round(max(values), 3),
        "min": round(min(values), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    # Only the file's vector can find it: no word of the query is in it.
    assert not set(tokens(QUERY)) & set(tokens(index_text(BODY.format(n=0)))), "the query shares a word"
    work = Path(tempfile.mkdtemp(prefix="dir2mcp-store-search-"))
    base = {k: v for k, v in os.environ.items() if not k.startswith("DIR2MCP_")}
    base["DIR2MCP_EMBED__PROVIDER"] = "local"
    modes = ("process", "thread")
    servers, roots = {}, {}
    try:
        for mode in modes:
            roots[mode] = work / mode / "root"
            make_tree(roots[mode], args.files)
            env = {**base, "DIR2MCP_SERVER__INDEXER": mode}
            servers[mode] = Server(roots[mode], work / mode / "state", env)
        for mode in modes:
            servers[mode].wait(lambda s: any(e["event"] == "watch_ready" for e in s.events), timeout=1800)
        lags: dict[str, list[float]] = {mode: [] for mode in modes}
        totals: dict[str, list[float]] = {mode: [] for mode in modes}
        k = args.rounds + 10
        with httpx.Client(timeout=30) as client:
            for n in range(args.rounds):
                for mode in modes if n % 2 == 0 else modes[::-1]:
                    lag, total = one_round(client, servers[mode], roots[mode], work / mode / "state", n, k)
                    lags[mode].append(lag)
                    totals[mode].append(total)
                    print(f"{mode:8} round {n:2}: stored->found {lag:.3f} s, written->found {total:.3f} s")
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "rounds": args.rounds,
        "poll_seconds": POLL,
        **{
            mode: {"stored_to_found": summary(lags[mode]), "written_to_found": summary(totals[mode])}
            for mode in modes
        },
    }
    # In the thread the vector is searchable as it is stored (stored -> found
    # is within the poll), so the ratio is taken end to end.
    process, thread = (statistics.median(totals[m]) for m in modes)
    result["ratio_median_written_to_found"] = round(process / thread, 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
