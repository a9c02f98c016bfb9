"""The write-ahead log's peak and the indexing CPU while searches read
(issue #37; a benchmark, not a test).

Indexes ``--tree`` with ``manage.py reindex`` (``embed.provider: none``) in
a fresh state directory, once with each checkout of ``--code`` (a checkout
without corpus/wal.py is the before), while ``--searchers`` processes run
lexical searches over the same state in a loop (``bench/storage.py``'s
queries, in-process ``Searcher``, as a server answers them). It samples the
size of ``meta.sqlite-wal`` every 50 ms and reports its peak and end size,
the indexing process's CPU (user + sys, from ``wait4``), its wall time, the
searches answered and their CPU per search (p50), and the load average.

    python bench/wal.py --tree ~/linux/fs --code /tmp/base --code . [--searchers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SEARCHER = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, sys.argv[1])
    sys.path.insert(0, sys.argv[4])
    from pathlib import Path
    from dir2mcp_site import bootstrap
    bootstrap.prepare(["--dir", sys.argv[2], "--state-dir", sys.argv[3]])
    import django
    django.setup()
    from corpus.retrieval import Searcher
    from kernel.config import build_config
    from kernel.state import StateDir
    from storage import QUERIES
    config = build_config({"embed": {"provider": "none"}}, {}, {})
    searcher = Searcher(StateDir(Path(sys.argv[3])), config, None)
    stop = Path(sys.argv[3]) / "stop-searching"
    cpu = []
    while not stop.exists():
        for query in QUERIES:
            c = time.process_time()
            try:
                searcher.search(query, k=10)
            except Exception:
                time.sleep(0.2)
                continue
            cpu.append((time.process_time() - c) * 1000)
            if stop.exists():
                break
    cpu.sort()
    print(json.dumps({"searches": len(cpu), "cpu_p50_ms": round(cpu[len(cpu) // 2], 1) if cpu else None}))
    """
)


def run(code: Path, tree: Path, searchers: int, wal_mib: int | None) -> dict:
    state = Path(tempfile.mkdtemp(prefix="wal-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIR2MCP_", "MISTRAL", "DJANGO_"))}
    env.update(DIR2MCP_EMBED__PROVIDER="none", DIR2MCP_SERVER__INDEXER_NICE="0", PYTHONPATH=str(code))
    if wal_mib is not None:
        env["DIR2MCP_SQLITE_WAL_MIB"] = str(wal_mib)
    wal = state / "meta.sqlite-wal"
    load = [os.getloadavg()[0]]
    started = time.perf_counter()
    child = subprocess.Popen(
        [
            sys.executable,
            str(code / "manage.py"),
            "reindex",
            "--dir",
            str(tree),
            "--state-dir",
            str(state),
            "--quiet",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    peak, procs = 0, []
    done = threading.Event()
    rusage: list = []

    def reap() -> None:
        _, status, usage = os.wait4(child.pid, 0)
        rusage.append((status, usage))
        done.set()

    threading.Thread(target=reap, daemon=True).start()
    while not done.is_set():
        if (
            not procs
            and (state / "meta.sqlite").is_file()
            and wal.is_file()
            and time.perf_counter() - started > 3
        ):
            procs = [
                subprocess.Popen(
                    [sys.executable, "-c", SEARCHER, str(code), str(tree), str(state), str(REPO / "bench")],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
                for _ in range(searchers)
            ]
        try:
            peak = max(peak, wal.stat().st_size)
        except FileNotFoundError:
            pass
        if int(time.perf_counter() - started) % 10 == 0:
            load.append(os.getloadavg()[0])
        done.wait(0.05)
    wall = time.perf_counter() - started
    (state / "stop-searching").touch()
    answers = [json.loads(proc.communicate()[0] or "{}") for proc in procs]
    status, usage = rusage[0]
    end = wal.stat().st_size if wal.exists() else 0
    db = (state / "meta.sqlite").stat().st_size
    shutil.rmtree(state)
    return {
        "code": str(code),
        "wal_mib": wal_mib,
        "exit": os.waitstatus_to_exitcode(status),
        "wal_peak_mib": round(peak / 2**20, 1),
        "wal_end_mib": round(end / 2**20, 1),
        "db_mib": round(db / 2**20, 1),
        "index_cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "index_wall_s": round(wall, 1),
        "searches": [a.get("searches") for a in answers],
        "search_cpu_p50_ms": [a.get("cpu_p50_ms") for a in answers],
        "load": [round(min(load), 1), round(max(load), 1)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tree", type=Path, required=True)
    parser.add_argument("--code", type=Path, action="append", required=True, help="a checkout (repeatable)")
    parser.add_argument("--searchers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1, help="each checkout this many times, alternating")
    parser.add_argument(
        "--wal-mib", type=int, help="DIR2MCP_SQLITE_WAL_MIB for the indexing (default: its own)"
    )
    args = parser.parse_args()
    for _ in range(args.rounds):
        for code in args.code:
            print(
                json.dumps(run(code.resolve(), args.tree.resolve(), args.searchers, args.wal_mib)), flush=True
            )


if __name__ == "__main__":
    main()
