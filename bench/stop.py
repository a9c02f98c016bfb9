"""How long Ctrl-C takes while `up` embeds (issue #17; a benchmark, not a test).

Generates a tree of small Python modules (bench/serving.py's), then per
round starts `up` on a fresh state directory with the local embedder, waits
until the indexing child has stored its first vectors, waits a random 0-3 s
more (so the signal lands at different points of a 256-text embedding
call), sends SIGINT and times how long until the server and its child have
both exited. The reference, timed in the same run, is the same signal sent
to `up --no-index` serving the same tree's finished index: a server with
nothing to stop but itself. Reported: each round's seconds, the medians and
the ratio (mid-embedding / idle).

    python bench/stop.py --files 3000 --rounds 6
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.serving import Server, make_tree  # noqa: E402  (the repository root goes on sys.path first)


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state == "Z"


def stop_seconds(server: Server) -> float:
    """SIGINT now; seconds until the server and every child it had are gone."""
    pids = server.pids()
    start = time.perf_counter()
    server.proc.send_signal(signal.SIGINT)
    server.proc.wait(300)
    while not all(gone(pid) for pid in pids):
        time.sleep(0.01)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="dir2mcp-stop-"))
    tree = work / "tree"
    make_tree(tree, args.files)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIR2MCP_")}
    env["DIR2MCP_EMBED__PROVIDER"] = "local"
    busy, idle = [], []
    try:
        # The reference's index: the first round's tree, indexed to the end.
        finished = Server(tree, work / "finished", env)
        finished.wait(lambda s: any(e["event"] == "watch_ready" for e in s.events), timeout=3600)
        finished.stop()
        for _ in range(args.rounds):
            state = work / "state"
            shutil.rmtree(state, ignore_errors=True)
            server = Server(tree, state, env)
            server.wait(lambda s: s.embedded() > 0)
            time.sleep(rng.uniform(0.0, 3.0))
            busy.append(round(stop_seconds(server), 3))
            reference = Server(tree, work / "finished", env, "--no-index")
            reference.wait(lambda s: bool(s.url))
            idle.append(round(stop_seconds(reference), 3))
            print(f"mid-embedding {busy[-1]:.2f} s, idle {idle[-1]:.2f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "files": args.files,
        "mid_embedding_s": busy,
        "idle_s": idle,
        "median_mid_embedding_s": statistics.median(busy),
        "max_mid_embedding_s": max(busy),
        "median_idle_s": statistics.median(idle),
        "ratio": round(statistics.median(busy) / statistics.median(idle), 2),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
