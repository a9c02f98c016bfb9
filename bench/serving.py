"""Search latency while `up` indexes (issue #17; a benchmark, not a test).

Generates a tree of small Python modules, starts `up` on it with the local
embedder, and once the first vectors are stored, starts a second
`up --no-index` on the same index: the reference, a server that does
nothing but serve. Then, for ``--window`` seconds, the same searches go to
both over HTTP (REST mirror, k=10), interleaved, alternating which goes
first, so both see the same moment and the same load. Reported per server:
p50 and p99, their ratio (indexing server / reference; the goal is <= 1.5),
and the peak RSS of every process (the server, its indexing child, the
reference). ``--modes`` compares where the indexer runs
(``server.indexer``: ``thread`` is the arrangement before issue #17).

    python bench/serving.py --files 20000 --window 60 --modes thread,process
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
TOPICS = [
    ("invoice", "total", "tax"),
    ("parser", "token", "grammar"),
    ("socket", "packet", "timeout"),
    ("matrix", "row", "column"),
    ("calendar", "month", "weekday"),
    ("archive", "member", "header"),
    ("cache", "entry", "expiry"),
    ("queue", "job", "priority"),
]
QUERIES = [
    "sum the tax of each invoice",
    "grammar token limit",
    "socket_packet_timeout",
    "how are matrix rows added up",
    "weekday of a calendar month",
    "archive member header size",
    "cache entry expiry",
    "priority of queued jobs",
]


def make_tree(root: Path, files: int) -> None:
    for i in range(files):
        a, b, c = TOPICS[i % len(TOPICS)]
        folder = root / f"pkg_{i // 200}"
        folder.mkdir(parents=True, exist_ok=True)
        body = "\n\n".join(
            f"def {a}_{b}_{i}_{j}(items, limit={j}):\n"
            f'    """Sum the {b} of each {a} below the {c} limit."""\n'
            f"    found = [x.{b} for x in items if x.{c} < limit]\n"
            f"    return sum(found) + {i * 7 + j}\n"
            for j in range(2)
        )
        (folder / f"{a}_{i}.py").write_text(body + "\n")


class Server:
    def __init__(self, root: Path, state: Path, env: dict, *extra: str):
        self.proc = subprocess.Popen(
            [sys.executable, str(REPO / "manage.py"), "up", "--dir", str(root), "--state-dir", str(state)]
            + ["--json", "--auth", "none", *extra],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.events: list[dict] = []
        self.url = ""
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            self.events.append(record)
            if record["event"] == "connection":
                self.url = record["data"]["url"].removesuffix("/mcp")
                self._ready.set()

    def wait(self, predicate, timeout: float = 600) -> None:
        end = time.monotonic() + timeout
        while not predicate(self):
            if time.monotonic() > end or self.proc.poll() is not None:
                raise SystemExit("the server stopped or timed out before it was ready")
            time.sleep(0.2)

    def embedded(self) -> int:
        found = [e["data"]["embedded_ok"] for e in self.events if e["event"] == "embed_progress"]
        return max(found, default=0)

    def pids(self) -> list[int]:
        """This process and its children."""
        found = [self.proc.pid]
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(") ", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == self.proc.pid:
                found.append(int(stat.parent.name))
        return found

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def peak_rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def run_mode(mode: str, tree: Path, work: Path, window: float) -> dict:
    state = work / f"state-{mode}"
    shutil.rmtree(state, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIR2MCP_", "MISTRAL"))}
    env.update({"DIR2MCP_EMBED__PROVIDER": "local", "DIR2MCP_SERVER__INDEXER": mode})
    indexing = Server(tree, state, env)
    try:
        indexing.wait(lambda s: s.embedded() > 0)
        reference = Server(tree, state, env, "--no-index")
        try:
            reference.wait(lambda s: bool(s.url))
            return measure(mode, indexing, reference, window)
        finally:
            reference.stop()
    finally:
        indexing.stop()


def measure(mode: str, indexing: Server, reference: Server, window: float) -> dict:
    times: dict[str, list[float]] = {"indexing": [], "reference": []}
    peaks: dict[str, float] = {}
    start_embedded = indexing.embedded()
    with httpx.Client(timeout=60) as client:
        end = time.monotonic() + window
        i = 0
        while time.monotonic() < end:
            order = [("indexing", indexing), ("reference", reference)]
            if i % 2:
                order.reverse()
            for name, server in order:
                began = time.perf_counter()
                response = client.post(
                    server.url + "/api/v1/search", json={"query": QUERIES[i % len(QUERIES)], "k": 10}
                )
                times[name].append((time.perf_counter() - began) * 1000)
                response.raise_for_status()
            i += 1
            if i % 10 == 0:
                for label, pid in labelled_pids(indexing, reference):
                    peaks[label] = max(peaks.get(label, 0.0), peak_rss_mib(pid))
    for label, pid in labelled_pids(indexing, reference):
        peaks[label] = max(peaks.get(label, 0.0), peak_rss_mib(pid))
    rate = (indexing.embedded() - start_embedded) / window
    result = {"mode": mode, "searches": i, "embedded_per_second": round(rate, 1), "peak_rss_mib": peaks}
    for name, values in times.items():
        result[name] = {"p50": round(statistics.median(values), 1), "p99": round(percentile(values, 0.99), 1)}
    result["ratio"] = {q: round(result["indexing"][q] / result["reference"][q], 2) for q in ("p50", "p99")}
    return result


def labelled_pids(indexing: Server, reference: Server) -> list[tuple[str, int]]:
    pids = indexing.pids()
    found = [("server", pids[0])] + [(f"indexing child {n}", pid) for n, pid in enumerate(pids[1:], 1)]
    return found + [("reference", reference.proc.pid)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--window", type=float, default=60.0, help="Seconds of searches per mode.")
    parser.add_argument("--modes", default="thread,process")
    parser.add_argument("--work", help="Folder for the tree and state (default: a temp folder).")
    args = parser.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="dir2mcp-serving-"))
    tree = work / f"tree-{args.files}"
    if not tree.exists():
        make_tree(tree, args.files)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"# {machine}, {args.files} files")
    for mode in args.modes.split(","):
        print(json.dumps(run_mode(mode, tree, work, args.window)), flush=True)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
