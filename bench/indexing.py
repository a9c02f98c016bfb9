"""Indexing benchmarks (not tests): cold index and no-op re-index.

Indexes the Python standard library that ships with this interpreter
(site-packages and __pycache__ excluded), with the state directory in a
temp folder so nothing is written into the interpreter's tree. In the same
run it times `find <tree> -type f | xargs stat` over the same files as the
reference, and prints the ratios. Record the figures in docs/benchmarks.md.

    python bench/indexing.py [--tree PATH] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import corpora  # noqa: E402  (bench/corpora.py: the standard library's copy)

NOOP_SNIPPET = """
import sys, time, json
from dir2mcp_site import bootstrap
bootstrap.prepare(sys.argv[1:5])
import django; django.setup()
from pathlib import Path
from kernel.config import load_config
from corpus.ingest.pipeline import Indexer
from kernel.state import StateDir
from dir2mcp_site.settings import DIR2MCP_ROOT, DIR2MCP_STATE_DIR
config = load_config(Path(sys.argv[6]))
times = []
for _ in range(int(sys.argv[5])):
    start = time.perf_counter()
    counters = Indexer(Path(DIR2MCP_ROOT), StateDir(Path(DIR2MCP_STATE_DIR)), config).run()
    times.append(time.perf_counter() - start)
    assert counters.indexed == 0 and counters.representations == 0, counters
print(json.dumps({"times": times, "scanned": counters.scanned}))
"""


def timed(cmd: list[str] | str, *, shell: bool = False) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run(cmd, shell=shell, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, out.stdout


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--tree", help="Directory to index (default: bench/corpora.stdlib_copy, the standard library)."
    )
    parser.add_argument("--repeat", type=int, default=5, help="Runs of each timed step (median reported).")
    args = parser.parse_args()
    tree = Path(args.tree).resolve() if args.tree else corpora.stdlib_copy()
    work = Path(tempfile.mkdtemp(prefix="dir2mcp-bench-"))
    config = work / "bench.yaml"
    # Ingestion alone: embeddings have their own benchmark (bench/embedder.py).
    config.write_text(
        "embed:\n  provider: none\n"
        "security:\n  path_excludes: ['**/.git/**', '**/node_modules/**', '**/.dir2mcp/**', '**/.env',"
        " '**/*.pem', '**/*.key', '**/id_rsa', 'site-packages/']\n"
    )
    manage = [sys.executable, str(REPO / "manage.py")]
    where = ["--dir", str(tree), "--state-dir", str(work / "state"), "--config", str(config)]

    cold_s, cold_out = timed([*manage, "reindex", *where, "--quiet"])
    counts = dict(re.findall(r"(\w+)=(\d+)", cold_out))
    files = int(counts["scanned"])

    stat_cmd = (
        f"find '{tree}' -path '*/site-packages' -prune -o -path '*/__pycache__' -prune"
        " -o -type f -print0 | xargs -0 stat > /dev/null"
    )
    stat_s = statistics.median(timed(stat_cmd, shell=True)[0] for _ in range(args.repeat))
    cli_s = statistics.median(
        timed([*manage, "reindex", "--incremental", *where, "--quiet"])[0] for _ in range(args.repeat)
    )
    _, noop_out = timed([sys.executable, "-c", NOOP_SNIPPET, *where[:4], str(args.repeat), str(config)])
    noop = json.loads(noop_out)
    noop_s = statistics.median(noop["times"])
    startup_s = statistics.median(timed([*manage, "version"])[0] for _ in range(args.repeat))

    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "tree": str(tree),
        "files_scanned": files,
        "counters": counts,
        "cold_index_s": round(cold_s, 3),
        "cold_files_per_s": round(files / cold_s, 1),
        "stat_walk_s": round(stat_s, 4),
        "noop_inprocess_s": round(noop_s, 4),
        "noop_inprocess_ratio": round(noop_s / stat_s, 2),
        "noop_command_s": round(cli_s, 3),
        "noop_command_ratio": round(cli_s / stat_s, 2),
        "process_startup_s": round(startup_s, 3),
    }
    out_dir = REPO / "bench" / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / f"indexing-{time.strftime('%Y%m%dT%H%M%S')}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
