"""Concurrent use while indexing: 32 MCP clients against `up` mid-pass.

`up` starts on a large generated tree; at once 32 clients, each with its own
session, call search, ask, open_file and list_files in a loop while another
thread edits, adds and deletes files under the watcher. Then:

- no answer is a 5xx, a JSON-RPC internal error, or a tool error with
  INTERNAL_ERROR or "database is locked";
- every hit returned names a chunk that exists, of the document it names;
- the figures (calls, errors by kind, p50/p99 latency) are printed, and
  recorded in docs/reliability.md. Latency is measured, never asserted.

``DIR2MCP_LOAD_SECONDS`` sets the duration (CI: 20; the long variant: 60).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.up_process import Up

pytestmark = pytest.mark.slow

SECONDS = float(os.environ.get("DIR2MCP_LOAD_SECONDS", "20"))
CLIENTS = 32
FILES = 1500
ACCEPT = "application/json, text/event-stream"
WORDS = "alpha beta gamma delta config loader parser index vector token session cache stream".split()


def write_tree(root: Path) -> None:
    rng = random.Random(3)
    for i in range(FILES):
        folder = root / f"area{i % 20}"
        folder.mkdir(parents=True, exist_ok=True)
        lines = [" ".join(rng.choice(WORDS) for _ in range(10)) for _ in range(rng.randint(3, 40))]
        suffix = (".py", ".md", ".txt")[i % 3]
        (folder / f"file{i}{suffix}").write_text(f"# file {i}\n" + "\n".join(lines) + "\n")


def mutate(root: Path, stop: threading.Event, counts: Counter) -> None:
    """Edit, add and delete files until ``stop``, as a busy user would."""
    rng = random.Random(5)
    while not stop.wait(0.05):
        i = rng.randrange(FILES)
        path = root / f"area{i % 20}" / f"file{i}{('.py', '.md', '.txt')[i % 3]}"
        action = rng.choice(("edit", "edit", "delete", "add"))
        try:
            if action == "edit" and path.exists():
                path.write_text(path.read_text() + f"edited {rng.choice(WORDS)}\n")
            elif action == "delete":
                path.unlink(missing_ok=True)
            else:
                (root / "new").mkdir(exist_ok=True)
                (root / "new" / f"added{rng.randrange(10**6)}.md").write_text("added file alpha beta\n")
            counts[action] += 1
        except OSError:
            counts["os_error"] += 1


class Client:
    def __init__(self, http: httpx.AsyncClient, url: str):
        self.http, self.url, self.session, self.next_id = http, url, None, 0

    async def post(self, method: str, params: dict | None = None, notify: bool = False) -> httpx.Response:
        body: dict = {"jsonrpc": "2.0", "method": method, "params": params or {}}
        if not notify:
            self.next_id += 1
            body["id"] = self.next_id
        headers = {"Accept": ACCEPT, "MCP-Protocol-Version": "2025-11-25"}
        if self.session:
            headers["MCP-Session-Id"] = self.session
        return await self.http.post(self.url, json=body, headers=headers)

    async def open(self) -> None:
        params = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "load", "version": "1"},
        }
        response = await self.post("initialize", params)
        self.session = response.headers["MCP-Session-Id"]
        await self.post("notifications/initialized", notify=True)


def call_for(rng: random.Random, seen_paths: list[str]) -> tuple[str, dict]:
    kind = rng.choice(("search", "search", "ask", "open_file", "list_files"))
    if kind == "search":
        return "dir2mcp.search", {"query": " ".join(rng.sample(WORDS, 2)), "k": 5}
    if kind == "ask":
        return "dir2mcp.ask", {"question": f"what about {rng.choice(WORDS)}?", "k": 3}
    if kind == "open_file" and seen_paths:
        return "dir2mcp.open_file", {"rel_path": rng.choice(seen_paths), "start_line": 1, "end_line": 5}
    return "dir2mcp.list_files", {"path_prefix": f"area{rng.randrange(20)}/", "limit": 20}


async def client_loop(url: str, seed: int, deadline: float, results: dict) -> None:
    rng = random.Random(seed)
    seen_paths: list[str] = []
    async with httpx.AsyncClient(timeout=120, trust_env=False) as http:
        client = Client(http, url)
        await client.open()
        while time.monotonic() < deadline:
            name, arguments = call_for(rng, seen_paths)
            started = time.monotonic()
            response = await client.post("tools/call", {"name": name, "arguments": arguments})
            results["latency"].append(time.monotonic() - started)
            results["status"][response.status_code] += 1
            if response.status_code != 200:
                results["bad"].append((response.status_code, response.text[:300]))
                continue
            message = response.json()
            if "error" in message:
                if message["error"]["code"] == -32001:  # busy: retryable by design
                    results["busy"] += 1
                    await asyncio.sleep(0.1)
                else:
                    results["rpc_errors"].append(message["error"])
                continue
            result = message["result"]
            if result.get("isError"):
                error = result["structuredContent"]["error"] if "structuredContent" in result else {}
                results["tool_errors"][error.get("code", "?")] += 1
                text = json.dumps(result)
                if "INTERNAL_ERROR" in text or "database is locked" in text:
                    results["bad"].append((200, text[:300]))
                continue
            for hit in (result.get("structuredContent") or {}).get("hits", []):
                results["hits"].add((hit["chunk_id"], hit["rel_path"]))
                seen_paths.append(hit["rel_path"])
            for citation in (result.get("structuredContent") or {}).get("citations", []):
                if "chunk_id" in citation:
                    results["hits"].add((citation["chunk_id"], citation["rel_path"]))


def chunk_paths(state: Path, ids: list[int]) -> dict[int, str]:
    db = state / "meta.sqlite"
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as conn:
        found: dict[int, str] = {}
        for start in range(0, len(ids), 500):
            batch = ids[start : start + 500]
            marks = ",".join("?" * len(batch))
            rows = conn.execute(
                "SELECT c.chunk_id, d.rel_path FROM chunks c JOIN representations r ON r.rep_id = "
                "c.representation_id JOIN documents d ON d.doc_id = r.document_id "
                f"WHERE c.chunk_id IN ({marks})",
                batch,
            )
            found.update(rows)
    return found


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def test_32_clients_while_indexing_and_files_change(tmp_path):
    write_tree(tmp_path)
    up = Up("--dir", str(tmp_path), "--json", "--auth", "none")
    stop = threading.Event()
    mutations: Counter = Counter()
    results = {
        "latency": [],
        "status": Counter(),
        "bad": [],
        "rpc_errors": [],
        "busy": 0,
        "tool_errors": Counter(),
        "hits": set(),
    }
    try:
        url = up.url()
        mutator = threading.Thread(target=mutate, args=(tmp_path, stop, mutations), daemon=True)
        mutator.start()
        deadline = time.monotonic() + SECONDS
        indexed_before = [
            e for e in up.events() if e["event"] == "scan_progress" and e["data"].get("running") is False
        ]

        async def everyone():
            await asyncio.gather(*(client_loop(url, seed, deadline, results) for seed in range(CLIENTS)))

        asyncio.run(everyone())
        stop.set()
        mutator.join(10)
        code = up.stop()
    finally:
        stop.set()
        up.close()

    latency = results["latency"]
    figures = {
        "calls": len(latency),
        "status": dict(results["status"]),
        "tool_errors": dict(results["tool_errors"]),
        "rpc_errors": len(results["rpc_errors"]),
        "busy": results["busy"],
        "mutations": dict(mutations),
        "hits_checked": len(results["hits"]),
        "p50_ms": round(percentile(latency, 50) * 1000, 1),
        "p99_ms": round(percentile(latency, 99) * 1000, 1),
    }
    print("load figures:", json.dumps(figures))
    assert code == 0, up.stderr
    assert results["bad"] == [], results["bad"][:5]
    assert results["rpc_errors"] == [], results["rpc_errors"][:5]
    assert set(results["status"]) == {200}
    assert "Traceback" not in up.stderr and "database is locked" not in up.stderr
    assert len(latency) > CLIENTS * 5 and results["hits"] and sum(mutations.values()) > 50
    assert indexed_before == []  # the clients started while the first pass ran

    ids = sorted({chunk_id for chunk_id, _ in results["hits"]})
    paths = chunk_paths(tmp_path / ".dir2mcp", ids)
    dangling = [(cid, path) for cid, path in results["hits"] if paths.get(cid) != path]
    assert dangling == []
