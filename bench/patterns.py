"""Hostile patterns benchmark (issue #23; not a test): the regex budget's
overshoot, and what a hostile call costs another client.

    python bench/patterns.py [--rounds 5] [--probes 40]

Starts a real `dir2mcp up` on a small generated corpus (one 5,000-character
line that ``(a+)+$`` backtracks on, one 240-character file name), then:

* **budget:** ``dir2mcp.find`` with ``(a+)+$`` and with a nested repetition
  (``(?:(?:…a{9}){9}…){9}``, 9**7 states to compile), one at a time: wall
  time of each call against ``FIND_BUDGET_SECONDS`` (the overshoot);
* **another client:** ``/healthz/live`` and a ``dir2mcp.search`` from a
  second session, idle and then while twelve catastrophic finds run at once
  (each client thread sends its next as soon as one answers): p50/p95
  latency and the ratio hostile/idle;
* **globs and queries:** ``list_files`` with ``*?`` x 12 + ``Z`` over the long
  name, and a search with a 1,000-character query of one letter (before:
  10 s and 23 s frozen).

Results go to bench/results/patterns-<date>.json.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CATASTROPHIC = "(a+)+$"
NESTED = "(?:(?:(?:(?:(?:(?:a{9}){9}){9}){9}){9}){9}){9}"
ACCEPT = "application/json, text/event-stream"


def build(root: Path) -> None:
    (root / "docs").mkdir(parents=True)
    (root / "notes.txt").write_text("hnsw index notes\nsecond line\n")
    (root / "bad.txt").write_text("a" * 5000 + "b\n")
    (root / "docs" / ("a" * 240 + ".txt")).write_text("a long name\n")
    for i in range(50):
        (root / "docs" / f"page{i}.md").write_text(f"# Page {i}\n\nThe loader reads configuration {i}.\n")


class Client:
    def __init__(self, url: str, token: str):
        self.url, self.base = url, url.rsplit("/", 1)[0]
        self.headers = {"Accept": ACCEPT, "Authorization": f"Bearer {token}"}
        self.http = httpx.Client(timeout=300, trust_env=False)
        body = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "b", "version": "1"},
            },
        }
        response = self.http.post(url, json=body, headers=self.headers)
        self.headers |= {
            "MCP-Session-Id": response.headers["MCP-Session-Id"],
            "MCP-Protocol-Version": "2025-11-25",
        }
        self.http.post(
            url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers
        )

    def call(self, name: str, arguments: dict) -> dict:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        return self.http.post(self.url, json=body, headers=self.headers).json()["result"]


def find_budget() -> float:
    """``FIND_BUDGET_SECONDS`` from corpus/files.py (importing it needs Django set up)."""
    tree = ast.parse((REPO / "corpus" / "files.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "FIND_BUDGET_SECONDS":
            return ast.literal_eval(node.value)
    raise SystemExit("FIND_BUDGET_SECONDS not found in corpus/files.py")


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def probe_latencies(client: Client, count: int) -> dict:
    live, search = [], []
    for _ in range(count):
        live.append(timed(lambda: client.http.get(f"{client.base}/healthz/live").raise_for_status()))
        search.append(timed(lambda: client.call("dir2mcp.search", {"query": "hnsw index notes", "k": 3})))
    return {name: summary(values) for name, values in (("healthz_live", live), ("search", search))}


def quietly(fn, *args) -> None:
    try:
        fn(*args)
    except httpx.HTTPError:  # the server stopped under it: what is being measured
        pass


def summary(values: list[float]) -> dict:
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--probes", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        build(root)
        budget = find_budget()
        out: dict = {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
            "budget_seconds": budget,
        }
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DIR2MCP_", "DJANGO_"))}
        env["DIR2MCP_EMBED__PROVIDER"] = "none"
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "manage.py"), "up", "--dir", str(root), "--json"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            url = None
            for line in proc.stdout:
                event = json.loads(line) if line.startswith("{") else {}
                if event.get("event") == "connection":
                    url = event["data"]["url"]
                if event.get("event") == "scan_progress" and event["data"].get("running") is False and url:
                    break
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            token = (root / ".dir2mcp" / "secret.token").read_text().strip()
            hostile, other = Client(url, token), Client(url, token)

            for pattern, name in ((CATASTROPHIC, "backtracking"), (NESTED, "nested_repetition")):
                walls = []
                for _ in range(args.rounds):
                    args_ = {"content": pattern, "regex": True}
                    walls.append(timed(lambda a=args_: hostile.call("dir2mcp.find", a)))
                worst = max(walls)
                out[f"find_{name}"] = {
                    "wall_s": [round(w, 3) for w in walls],
                    "max_overshoot_pct": round((worst / budget - 1) * 100, 1),
                }

            out["idle"] = probe_latencies(other, args.probes)
            stop = threading.Event()
            answered = []

            def flood() -> None:
                client = Client(url, token)
                while not stop.is_set():
                    client.call("dir2mcp.find", {"content": CATASTROPHIC, "regex": True})
                    answered.append(1)

            threads = [threading.Thread(target=flood, daemon=True) for _ in range(12)]
            for thread in threads:
                thread.start()
            time.sleep(0.5)
            out["during_12_catastrophic_finds"] = probe_latencies(other, args.probes)
            stop.set()
            for thread in threads:
                thread.join(60)
            out["hostile_finds_answered"] = len(answered)
            out["ratio_during_over_idle_p50"] = {
                key: round(out["during_12_catastrophic_finds"][key]["p50_ms"] / out["idle"][key]["p50_ms"], 2)
                for key in ("healthz_live", "search")
            }
            stars = {"glob": "*?" * 12 + "Z"}
            out["list_files_star_glob_ms"] = round(
                timed(lambda: hostile.call("dir2mcp.list_files", stars)) * 1000, 1
            )
            query = {"query": "a" * 1000}
            out["search_1000_char_query_ms"] = round(
                timed(lambda: hostile.call("dir2mcp.search", query)) * 1000, 1
            )
            # SIGTERM while a nested repetition compiles (before: it ignored SIGTERM for 54 minutes)
            nested = {"content": NESTED, "regex": True}
            threading.Thread(target=quietly, args=(hostile.call, "dir2mcp.find", nested), daemon=True).start()
            time.sleep(0.5)
            started = time.perf_counter()
            proc.terminate()
            proc.wait(120)
            out["sigterm_during_hostile_find_to_exit_s"] = round(time.perf_counter() - started, 2)
        finally:
            if proc.poll() is None:
                proc.kill()
    print(json.dumps(out, indent=2))
    results = REPO / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / f"patterns-{datetime.date.today().isoformat()}.json").write_text(
        json.dumps(out, indent=2) + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
