"""Another client's latency while subscriptions to many spellings of one file
are told of its changes (docs/security.md, session 29; a benchmark, not a test).

One change of a file is one ``notifications/resources/updated`` for each URI
naming it that a subscription honours (``dir2mcp:///f.txt?lines=1-1``,
``?lines=1-2``, ...), each JSON-encoded and written on the event loop.
``--streams`` subscriptions (``subscriptions/listen``, read as they come)
each ask for ``--spellings`` spellings of one file; then, for ``--window``
seconds each, another client times ``tools/list`` (p50, p99) with no change
(the reference, same run) and while the file changes every ``--every``
seconds. Reported: both, their ratio, and the updates received per change.

    nice -n 10 python bench/spellings.py --streams 16 --spellings 1000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

REPO = Path(__file__).resolve().parent.parent
VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
}
HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": VERSION,
}


def request(method: str, params: dict, msg_id: int) -> tuple[bytes, dict[str, str]]:
    body = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": {**params, "_meta": META}}
    return json.dumps(body).encode(), {**HEADERS, "Mcp-Method": method}


class Listen:
    """A subscription whose stream is read as it comes, counting its updates."""

    def __init__(self, url: str, uris: list[str], msg_id: int) -> None:
        parts = urlsplit(url)
        body, headers = request(
            "subscriptions/listen", {"notifications": {"resourceSubscriptions": uris}}, msg_id
        )
        head = "".join(f"{k}: {v}\r\n" for k, v in {**headers, "Content-Length": str(len(body))}.items())
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=120)
        self.sock.sendall(f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n{head}\r\n".encode() + body)
        self.updates = 0
        self.acknowledged = threading.Event()
        self.refused = ""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        seen = b""
        try:
            while chunk := self.sock.recv(1 << 16):
                seen = seen[-100:] + chunk
                self.updates += chunk.count(b"notifications/resources/updated")
                if b"acknowledged" in seen:
                    self.acknowledged.set()
                elif b'"error"' in seen and not self.acknowledged.is_set():
                    self.refused = seen.decode(errors="replace")
                    self.acknowledged.set()
        except OSError:
            pass


def timed_lists(client: httpx.Client, url: str, window: float) -> list[float]:
    body, headers = request("tools/list", {}, 1)
    times = []
    end = time.monotonic() + window
    while time.monotonic() < end:
        began = time.perf_counter()
        answer = client.post(url, headers={**headers, "Content-Type": "application/json"}, content=body)
        times.append(time.perf_counter() - began)
        answer.raise_for_status()
        time.sleep(0.05)
    return times


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * (len(ordered) - 1)))] * 1000, 1),
        "n": len(ordered),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--spellings", type=int, default=1000)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--every", type=float, default=1.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="spellings-"))
    root = work / "tree"
    root.mkdir()
    watched = root / "watched.txt"
    watched.write_text("first line\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIR2MCP_", "MISTRAL"))}
    env["DIR2MCP_EMBED__PROVIDER"] = "none"
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), "up", "--dir", str(root), "--json", "--auth", "none"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        url, scanned = "", False
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                record = json.loads(line)
                if record["event"] == "connection":
                    url = record["data"]["url"]
                if record["event"] == "scan_progress" and record["data"].get("running") is False:
                    scanned = True
            if url and scanned:
                break
        threading.Thread(target=lambda: [None for _ in proc.stdout or ()], daemon=True).start()
        uris = [f"dir2mcp:///watched.txt?lines=1-{n}" for n in range(1, args.spellings + 1)]
        listens = [Listen(url, uris, n + 1) for n in range(args.streams)]
        for listen in listens:
            listen.acknowledged.wait(120)
        refused = [listen.refused for listen in listens if listen.refused]
        with httpx.Client(timeout=120) as client:
            reference = timed_lists(client, url, args.window)
            changes = 0
            stop = threading.Event()

            def change() -> None:
                nonlocal changes
                while not stop.wait(args.every):
                    changes += 1
                    with open(watched, "a") as file:
                        file.write(f"change {changes}\n")

            changer = threading.Thread(target=change, daemon=True)
            changer.start()
            changing = timed_lists(client, url, args.window)
            stop.set()
            changer.join()
        time.sleep(2 * args.every)
        result = {
            "machine": platform.processor() or platform.machine(),
            "streams": args.streams,
            "spellings": args.spellings,
            "refused_listens": len(refused),
            "refusal": refused[0][-300:] if refused else None,
            "changes": changes,
            "updates_per_change": round(sum(listen.updates for listen in listens) / max(changes, 1), 1),
            "reference": summary(reference),
            "changing": summary(changing),
        }
        result["ratio_p50"] = round(result["changing"]["p50_ms"] / result["reference"]["p50_ms"], 2)
        result["ratio_p99"] = round(result["changing"]["p99_ms"] / result["reference"]["p99_ms"], 2)
        print(json.dumps(result, indent=2))
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
