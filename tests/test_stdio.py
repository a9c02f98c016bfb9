"""``mcp_stdio`` as an MCP client runs it: a real subprocess on real pipes.

The official MCP Python SDK drives one session (it validates every
``structuredContent`` against the tool's ``outputSchema``); raw pipes check
the stream rules the SDK would never break on purpose: garbage, batches,
oversized lines, requests before ``initialize``, cancellation, shutdown.
"""

from __future__ import annotations

import itertools
import json
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from mcp_gateway import contract
from tests.mcp_http import REPO, base_env, index, wait_for_index, write_corpus
from tests.support import wait_until

pytestmark = pytest.mark.slow

DIR2MCP = Path(sys.executable).with_name("dir2mcp")
MAX_LINE = 4 * 1024 * 1024
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test_stdio", "version": "1"},
    },
}


def command(root: Path, *extra: str) -> list[str]:
    return [sys.executable, str(REPO / "manage.py"), "mcp_stdio", "--dir", str(root), *extra]


def check_jsonrpc_line(line: bytes) -> dict:
    """One stdout line: a whole JSON-RPC response or notification, nothing else."""
    assert line.endswith(b"\n") and line.count(b"\n") == 1, line[:200]
    msg = json.loads(line)
    assert isinstance(msg, dict) and msg.get("jsonrpc") == "2.0", line[:200]
    if "method" in msg:  # we only ever send notifications
        assert "id" not in msg and isinstance(msg["method"], str)
        assert msg["method"] in (
            "notifications/progress",
            "notifications/message",
            "notifications/resources/updated",  # mcp_gateway/notify.py: the indexer's changes
            "notifications/resources/list_changed",
            "notifications/subscriptions/acknowledged",  # subscriptions/listen (2026-07-28)
        ), msg
    else:
        assert "id" in msg and ("result" in msg) != ("error" in msg), msg
        if "error" in msg:
            assert isinstance(msg["error"]["code"], int) and isinstance(msg["error"]["message"], str)
    return msg


class Raw:
    """``mcp_stdio`` on raw pipes; stdout is checked line by line as it comes."""

    def __init__(self, argv: list[str], env: dict | None = None):
        self.proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env=base_env(**(env or {})),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: list[bytes] = []
        self._incoming: queue.Queue = queue.Queue()
        self._err: list[bytes] = []
        self._readers = [
            threading.Thread(target=self._pump_out, daemon=True),
            threading.Thread(target=self._pump_err, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _pump_out(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            self._incoming.put(line)
        self._incoming.put(None)

    def _pump_err(self) -> None:
        for line in self.proc.stderr:
            self._err.append(line)

    @property
    def stderr(self) -> str:
        return b"".join(self._err).decode("utf-8", "replace")

    def send(self, message: dict | bytes) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def recv(self, timeout: float = 60) -> dict:
        line = self._incoming.get(timeout=timeout)
        assert line is not None, f"stdout closed; stderr: {self.stderr[-2000:]}"
        return check_jsonrpc_line(line)

    def request(self, msg_id, method: str, params: dict | None = None) -> dict:
        body = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if params is not None:
            body["params"] = params
        self.send(body)
        reply = self.recv()
        while "method" in reply:  # notifications of this request come first
            reply = self.recv()
        assert reply["id"] == msg_id, reply
        return reply

    def notify(self, method: str, params: dict | None = None) -> None:
        body = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            body["params"] = params
        self.send(body)

    def initialize(self) -> dict:
        reply = self.request(INITIALIZE["id"], "initialize", INITIALIZE["params"])
        self.notify("notifications/initialized")
        return reply["result"]

    def call(self, msg_id, name: str, arguments: dict) -> dict:
        reply = self.request(msg_id, "tools/call", {"name": name, "arguments": arguments})
        return reply["result"]

    def wait_for_index(self) -> dict:
        ids = itertools.count()

        def finished() -> dict | None:
            stats = self.call(f"stats-{next(ids)}", "dir2mcp.stats", {})["structuredContent"]
            return stats if stats["indexing"]["job_id"] and not stats["indexing"]["running"] else None

        return wait_until(finished, timeout=240, message="the first indexing job to finish")

    def close(self, timeout: float = 30) -> int:
        """Close stdin (EOF) and wait: the exit code."""
        self.proc.stdin.close()
        return self.wait(timeout)

    def wait(self, timeout: float = 30) -> int:
        """Wait for the exit, then for everything it wrote: the exit code."""
        code = self.proc.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for reader in self._readers:
            reader.join(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass


@pytest.fixture
def raw_server(tmp_path):
    started: list[Raw] = []

    def start(root: Path, *extra: str, argv: list[str] | None = None, env: dict | None = None) -> Raw:
        server = Raw(argv or command(root, *extra), env=env)
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill()


# -- the official SDK client ------------------------------------------------------


async def sdk_walkthrough(root: Path, errlog) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(REPO / "manage.py"), "mcp_stdio", "--dir", str(root)],
        env=base_env(),
        cwd=str(REPO),
    )
    logs: list = []
    stray: list = []

    async def on_log(params) -> None:
        logs.append(params)

    async def on_message(message) -> None:
        if isinstance(message, Exception):  # a stdout line that is not JSON-RPC
            stray.append(message)

    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write, logging_callback=on_log, message_handler=on_message) as session:
            init = await session.initialize()
            assert init.protocolVersion == "2025-11-25"
            assert init.serverInfo.name == "dir2mcp"
            assert init.capabilities.tools is not None and init.capabilities.logging is not None
            await session.send_ping()

            listed = await session.list_tools()
            committed = json.loads(contract.SNAPSHOT.read_text())["tools"]
            assert [t.name for t in listed.tools] == [t["name"] for t in committed]

            stats = await wait_for_index(session)
            assert stats["indexing"]["indexed"] == 3
            assert stats["root"] == str(root)

            progress: list[float] = []

            async def on_progress(value, total, message) -> None:
                progress.append(value)

            search = await session.call_tool(
                "dir2mcp.search", {"query": "parse_config_file"}, progress_callback=on_progress
            )
            assert search.isError is not True, search.content[0].text
            top = search.structuredContent["hits"][0]
            assert top["rel_path"] == "src/loader.py"
            assert len(progress) >= 2 and all(a < b for a, b in zip(progress, progress[1:], strict=False))

            listing = await session.call_tool("dir2mcp.list_files", {})
            assert listing.isError is not True, listing.content[0].text
            paths = sorted(f["rel_path"] for f in listing.structuredContent["files"])
            assert paths == ["docs/guide.md", "notes.txt", "src/loader.py"]

            opened = await session.call_tool(
                "dir2mcp.open_file", {"rel_path": "src/loader.py", "start_line": 1, "end_line": 1}
            )
            assert opened.isError is not True, opened.content[0].text
            assert "parse_config_file" in opened.structuredContent["content"]

            found = await session.call_tool("dir2mcp.find", {"content": "hnsw"})
            assert found.isError is not True, found.content[0].text
            assert [m["rel_path"] for m in found.structuredContent["matches"]] == ["notes.txt"]

            # No log messages until the client asks for them, then at its level.
            ask = {"question": "what reads configuration files?", "mode": "search_only"}
            assert (await session.call_tool("dir2mcp.ask", ask)).isError is not True
            assert logs == []
            await session.set_logging_level("error")
            assert (await session.call_tool("dir2mcp.ask", ask)).isError is not True
            assert logs == []
            await session.set_logging_level("info")
            asked = await session.call_tool("dir2mcp.ask", ask)
            assert asked.isError is not True and asked.structuredContent["citations"]
            assert [entry.level for entry in logs] == ["info"]
            assert "ask" in logs[0].data

            missing = await session.call_tool("dir2mcp.open_file", {"rel_path": "nope.txt"})
            assert missing.isError is True

            await session.send_ping()
    assert stray == []


def test_official_sdk_client_over_stdio(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    write_corpus(root)
    errlog_path = tmp_path / "stderr.log"
    with errlog_path.open("w") as errlog:
        anyio.run(sdk_walkthrough, root, errlog)
    err = errlog_path.read_text()
    assert "Traceback" not in err, err[-2000:]
    assert "serving" in err  # our human lines go to stderr


# -- raw pipes ------------------------------------------------------------------------


def test_every_line_is_answered_and_the_server_keeps_serving(tmp_path, raw_server):
    root = tmp_path / "corpus"
    root.mkdir()
    write_corpus(root)
    server = raw_server(root, argv=[str(DIR2MCP), "mcp_stdio", "--dir", str(root), "--no-index"])

    server.send(b"this is not json")
    reply = server.recv()
    assert reply["id"] is None and reply["error"]["code"] == -32700

    server.send(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"')  # truncated
    assert server.recv()["error"]["code"] == -32700

    server.send(b"\xff\xfe{not utf-8}")
    assert server.recv()["error"]["code"] == -32700

    # A lone surrogate escape is not text: refused before any tool sees it.
    server.send(b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"q": "\\udc80"}}')
    assert server.recv()["error"]["code"] == -32700

    server.send([{"jsonrpc": "2.0", "id": 2, "method": "ping"}])  # batches were removed
    reply = server.recv()
    assert reply["id"] is None and reply["error"]["code"] == -32600

    server.send({"jsonrpc": "2.0", "id": 3, "method": 5})
    reply = server.recv()
    assert reply["id"] == 3 and reply["error"]["code"] == -32600

    server.send({"jsonrpc": "1.0", "id": "four", "method": "ping"})
    reply = server.recv()
    assert reply["id"] == "four" and reply["error"]["code"] == -32600

    server.send({"jsonrpc": "2.0", "id": None, "method": "ping"})
    reply = server.recv()
    assert reply["id"] is None and reply["error"]["code"] == -32600

    server.send(b"42")
    assert server.recv()["error"]["code"] == -32600

    # Before initialize: requests are refused, ping answers, notifications are silent.
    reply = server.request(5, "tools/list")
    assert reply["error"] == {"code": -32600, "message": "send initialize first"}
    reply = server.request(6, "tools/call", {"name": "dir2mcp.stats", "arguments": {}})
    assert reply["error"]["code"] == -32600
    server.notify("notifications/initialized")
    assert server.request(7, "ping") == {"jsonrpc": "2.0", "id": 7, "result": {}}

    # A line over 4 MiB is refused whole, even when it holds a valid message.
    padding = "x" * (MAX_LINE + 100)
    server.send({"jsonrpc": "2.0", "id": 8, "method": "ping", "params": {"pad": padding}})
    reply = server.recv()
    assert reply["id"] is None and reply["error"]["code"] == -32600
    assert "limit" in reply["error"]["message"]
    # ... and one just under the limit is still a message.
    padding = "y" * (MAX_LINE - 200)
    server.send({"jsonrpc": "2.0", "id": 9, "method": "ping", "params": {"pad": padding}})
    assert server.recv() == {"jsonrpc": "2.0", "id": 9, "result": {}}

    result = server.initialize()
    assert result["protocolVersion"] == "2025-11-25"
    assert result["capabilities"]["logging"] == {}

    tools = server.request(10, "tools/list")["result"]["tools"]
    assert "dir2mcp.search" in [t["name"] for t in tools]
    assert server.request(11, "no/such/method")["error"]["code"] == -32601
    assert server.request(12, "logging/setLevel", {"level": "loud"})["error"]["code"] == -32602
    assert server.request(13, "tools/call", {"name": "nope"})["error"]["code"] == -32602
    # Responses from the client and cancellations of unknown ids are ignored.
    server.send({"jsonrpc": "2.0", "id": 99, "result": {}})
    server.notify("notifications/cancelled", {"requestId": 12345})
    server.notify("notifications/cancelled", {"requestId": None})
    server.send(b"")  # a blank line carries nothing
    assert server.request(14, "ping")["result"] == {}

    # Pipelined calls run concurrently: each id is answered exactly once.
    ids = [f"call-{i}" for i in range(12)]
    for msg_id in ids:
        server.send(
            {
                "jsonrpc": "2.0",
                "id": msg_id,
                "method": "tools/call",
                "params": {"name": "dir2mcp.search", "arguments": {"query": "loader"}},
            }
        )
    server.send({"jsonrpc": "2.0", "id": "last-ping", "method": "ping"})
    answered = [server.recv() for _ in range(len(ids) + 1)]
    assert sorted(r["id"] for r in answered) == sorted([*ids, "last-ping"])
    assert all("result" in r for r in answered)

    assert server.close() == 0
    for line in server.lines:
        check_jsonrpc_line(line)
    assert "Traceback" not in server.stderr, server.stderr[-2000:]


def test_stdout_stays_protocol_only_while_indexing_reports_progress(tmp_path, raw_server):
    root = tmp_path / "corpus"
    root.mkdir()
    write_corpus(root)
    for i in range(300):
        (root / "many" / f"m{i:03}.md").parent.mkdir(exist_ok=True)
        (root / "many" / f"m{i:03}.md").write_text(f"# Note {i}\n\nfiller text number {i}\n")
    # --json: the indexer's NDJSON events are the likeliest thing to leak into stdout.
    server = raw_server(root, "--json")
    server.initialize()
    server.request("lvl", "logging/setLevel", {"level": "debug"})
    stats = server.wait_for_index()
    assert stats["indexing"]["indexed"] == 303

    hits = server.call("s", "dir2mcp.search", {"query": "filler text number 42"})["structuredContent"]
    assert hits["hits"]
    assert server.close() == 0

    assert server.lines
    for line in server.lines:
        check_jsonrpc_line(line)
    events = [json.loads(line) for line in server.stderr.splitlines() if line.startswith("{")]
    names = {event["event"] for event in events}
    assert {"server_started", "scan_progress"} <= names, names
    assert "Traceback" not in server.stderr


def test_cancelled_call_gets_no_response_and_ping_answers_meanwhile(tmp_path, raw_server, fake_mistral):
    root = tmp_path / "corpus"
    root.mkdir()
    write_corpus(root)
    env = {
        "MISTRAL_API_KEY": fake_mistral.API_KEY,
        "DIR2MCP_MISTRAL__BASE_URL": fake_mistral.url,
        "DIR2MCP_CHAT__PROVIDER": "mistral",
    }
    server = raw_server(root, env=env)
    server.initialize()
    server.wait_for_index()
    fake_mistral.delay_next(3.0, count=4)

    server.send(
        {
            "jsonrpc": "2.0",
            "id": 21,
            "method": "tools/call",
            "params": {
                "name": "dir2mcp.ask",
                "arguments": {"question": "what reads configuration files?"},
                "_meta": {"progressToken": "tok"},
            },
        }
    )
    first = server.recv()
    assert first["method"] == "notifications/progress" and first["params"]["progressToken"] == "tok"
    server.notify("notifications/cancelled", {"requestId": 21, "reason": "user gave up"})
    assert server.request(22, "ping")["result"] == {}  # answered while the call still runs

    # EOF waits for the call in flight (the chat model answers after 3 s) and
    # exits; its response is dropped.
    assert server.close() == 0
    replies = [json.loads(line) for line in server.lines]
    assert not [r for r in replies if r.get("id") == 21 and "method" not in r]
    # The cancel usually lands before generation starts, so the chat model is
    # never asked at all (ask checks between retrieval and generation).
    assert len(fake_mistral.requests_to("/v1/chat/completions")) <= 1
    assert "Traceback" not in server.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly(tmp_path, raw_server, sig):
    root = tmp_path / "corpus"
    root.mkdir()
    write_corpus(root)
    server = raw_server(root)
    server.initialize()
    server.wait_for_index()  # the watcher is running now
    server.proc.send_signal(sig)
    assert server.wait() == 0
    for line in server.lines:
        check_jsonrpc_line(line)
    assert "Traceback" not in server.stderr


def test_no_index_serves_the_existing_index_only(tmp_path, raw_server):
    root = tmp_path / "corpus"
    root.mkdir()
    write_corpus(root)
    index(root, base_env(DIR2MCP_ROOT=str(root)))
    (root / "later.txt").write_text("written after the reindex\n")
    server = raw_server(root, "--no-index")
    server.initialize()
    stats = server.call(1, "dir2mcp.stats", {})["structuredContent"]
    assert stats["indexing"]["indexed"] == 3 and not stats["indexing"]["running"]
    files = server.call(2, "dir2mcp.list_files", {})["structuredContent"]["files"]
    assert "later.txt" not in [f["rel_path"] for f in files]
    assert server.call(3, "dir2mcp.stats", {})["structuredContent"]["indexing"] == stats["indexing"]
    assert server.close() == 0


def test_unusable_store_exits_with_the_spec_code_and_a_clean_stdout(tmp_path):
    missing = subprocess.run(
        command(tmp_path / "missing"), cwd=REPO, env=base_env(), input=b"", capture_output=True, timeout=60
    )
    assert missing.returncode == 3
    assert missing.stdout == b""
    assert b"ROOT_INACCESSIBLE" in missing.stderr

    root = tmp_path / "corpus"
    root.mkdir()
    write_corpus(root)
    index(root, base_env(DIR2MCP_ROOT=str(root)))
    with sqlite3.connect(root / ".dir2mcp" / "meta.sqlite") as db:
        db.execute("UPDATE settings SET value='999' WHERE key='index_format_version'")
    mismatch = subprocess.run(
        command(root, "--json"), cwd=REPO, env=base_env(), input=b"", capture_output=True, timeout=60
    )
    assert mismatch.returncode == 5
    assert mismatch.stdout == b""  # even the --json fatal event goes to stderr
    fatal = [json.loads(line) for line in mismatch.stderr.splitlines() if line.startswith(b"{")]
    assert fatal and fatal[-1]["event"] == "fatal"
    assert fatal[-1]["data"]["code"] == "INDEX_VERSION_MISMATCH"


def test_stdout_guard_sends_strays_to_stderr():
    script = (
        "import os, subprocess, sys\n"
        "from mcp_gateway.stdout_guard import StdoutGuard\n"
        "with StdoutGuard() as out:\n"
        "    print('stray print')\n"
        "    sys.__stdout__.write('dunder stdout\\n'); sys.__stdout__.flush()\n"
        "    os.write(1, b'raw fd write\\n')\n"
        "    subprocess.run([sys.executable, '-c', 'print(\"child process\")'], check=True)\n"
        '    out.write(b\'{"jsonrpc":"2.0","id":1,"result":{}}\\n\'); out.flush()\n'
        "print('restored')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=base_env(), capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b'{"jsonrpc":"2.0","id":1,"result":{}}\nrestored\n'
    for stray in (b"stray print", b"dunder stdout", b"raw fd write", b"child process"):
        assert stray in done.stderr


def test_symbols_and_references_follow_a_rename_and_a_deletion_under_live_sync(tmp_path, raw_server):
    """Over stdio, with the server's own indexer and watcher: the symbol
    index changes with the file (issue #32 items 2 and 3)."""
    root = tmp_path / "corpus"
    root.mkdir()
    write_corpus(root)
    server = raw_server(root)
    server.initialize()
    server.wait_for_index()
    ids = itertools.count()

    def call(name: str, arguments: dict) -> dict:
        return server.call(f"nav-{next(ids)}", name, arguments)["structuredContent"]

    def uses(name: str) -> list[tuple[str, int]]:
        found = call("dir2mcp.references", {"name": name})["references"]
        return [(hit["rel_path"], hit["span"]["start_line"]) for hit in found]

    definition = call("dir2mcp.symbols", {"name": "parse_config_file"})["symbols"]
    assert [(d["rel_path"], d["kind"], d["line"]) for d in definition] == [("src/loader.py", "function", 1)]
    assert uses("path") == [("src/loader.py", 3)]  # line 1 is the parameter: its definition

    loader = root / "src" / "loader.py"
    loader.write_text(
        "def read_settings(source):\n    return source\n\n\ndef other():\n    return read_settings(1)\n"
    )
    wait_until(lambda: uses("source") == [("src/loader.py", 2)], timeout=60, message="rename")
    assert uses("path") == []
    assert call("dir2mcp.symbols", {"name": "parse_config_file"})["symbols"] == []
    assert uses("read_settings") == [("src/loader.py", 6)]

    loader.unlink()
    wait_until(lambda: uses("read_settings") == [], timeout=60, message="deletion")
    assert call("dir2mcp.symbols", {"name": "read_settings"})["symbols"] == []
    assert server.close() == 0
