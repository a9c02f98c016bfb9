"""Every tool argument that names a path (and the glob and regex ones) against
one table of hostile inputs, over MCP and the REST mirror of one real ``up``.

Each row is refused with its documented code (docs/security.md) or
answered; the canary planted outside the root never appears in any answer,
and the server answers the next request (a FIFO in the root, for one, must
not take a thread). The corpus holds what the rows aim at: a FIFO, links
out of the root (a file, a directory, ``/dev/zero``), a hard link to the
canary, and an archive.
"""

from __future__ import annotations

import json
import os

import httpx
import pytest

from kernel import errors
from tests.mcp_http import PROTOCOL
from tests.support import TLS, holds, zip_bytes
from tests.up_process import Up

pytestmark = pytest.mark.slow

CANARY = "CANARY-HOSTILE-TABLE-3c9d2a"
OUT = errors.PATH_OUTSIDE_ROOT
FORBIDDEN = errors.FORBIDDEN
MISSING = errors.FILE_NOT_FOUND
INVALID = errors.INVALID_FIELD
# What a rel_path may otherwise meet past the path check (no provider key, not indexed, not text).
LATER = {errors.CONFIG_INVALID, errors.INDEX_NOT_READY, errors.DOC_TYPE_UNSUPPORTED, errors.INVALID_RANGE}

# (id, value, code for a rel_path, code for a path_prefix); None: answered; a set: any of them.
# "{outside}" becomes the canary's absolute path.
ROWS = [
    ("dotdot", "..", OUT, OUT),
    ("dotdot-first", "../outside/canary.txt", OUT, OUT),
    ("dotdot-middle", "docs/../../outside/canary.txt", OUT, OUT),
    ("dotdot-last", "docs/..", OUT, OUT),
    ("dotdot-deep", "docs/a/b/../../../../outside/canary.txt", OUT, OUT),
    ("absolute", "{outside}", OUT, OUT),
    ("absolute-etc", "/etc/passwd", OUT, OUT),
    ("url-dots", "%2e%2e/outside/canary.txt", OUT, OUT),
    ("url-slash", "..%2foutside%2fcanary.txt", OUT, OUT),
    ("url-upper", "%2E%2E%2Foutside", OUT, OUT),
    ("double-encoded", "%252e%252e%252foutside%252fcanary.txt", OUT, OUT),
    ("url-separator", "docs%2fguide.md", OUT, OUT),
    ("url-nul", "docs/guide.md%00", OUT, OUT),
    ("backslash", "..\\outside\\canary.txt", OUT, OUT),
    ("backslash-sep", "docs\\guide.md", OUT, OUT),
    ("drive", "C:/Windows/win.ini", OUT, OUT),
    ("nul", "docs/guide.md\x00.txt", OUT, OUT),
    ("overlong-name", "a" * 300, MISSING, None),
    ("overlong-path", "a/" * 2100, {INVALID, MISSING}, INVALID),  # over open_file's 4,096 or no such file
    # Unicode look-alikes are ordinary characters in a POSIX name: no such file.
    ("fullwidth-solidus", "\uff0e\uff0e\uff0foutside\uff0fcanary.txt", MISSING, None),
    ("division-slash", "..\u2215outside\u2215canary.txt", MISSING, None),
    ("one-dot-leader", "\u2024\u2024/outside/canary.txt", MISSING, None),
    ("overlong-utf8-dots", "%c0%ae%c0%ae/outside/canary.txt", MISSING, None),
    ("link-out", "out-link.txt", FORBIDDEN, None),
    ("link-out-dir", "out-dir/canary.txt", FORBIDDEN, None),
    ("link-dev-zero", "zero", FORBIDDEN, None),
    ("hard-link-out", "hard.txt", FORBIDDEN, None),
    ("fifo", "pipe.txt", MISSING, None),
    # A directory is never read: open_file says so; the others stop at the key or the index.
    ("directory", "docs", {MISSING, errors.CONFIG_INVALID, errors.INDEX_NOT_READY}, None),
    ("archive-traversal", "bundle.zip!/../../outside/canary.txt", OUT, OUT),
    ("archive-encoded", "bundle.zip!/%2e%2e/%2e%2e/x", OUT, OUT),
    ("archive-absolute", "bundle.zip!//etc/passwd", "any", "any"),
    ("archive-member", "bundle.zip!/inner.txt", "any", None),
    # One name per path (issue #34): another spelling is refused, naming the canonical one.
    ("dot-first", "./docs/guide.md", INVALID, INVALID),
    ("dot-middle", "docs/./guide.md", INVALID, INVALID),
    ("double-slash", "docs//guide.md", INVALID, INVALID),
    ("trailing-slash", "docs/guide.md/", INVALID, None),  # a prefix may end in one slash
    ("too-many-segments", "a/" * 300 + "x", INVALID, INVALID),  # 256 segments at most
    ("plain", "docs/guide.md", None, None),
]

# (tool, argument, kind, other arguments); REST: (path, method) or None.
ARGS = [
    ("dir2mcp.open_file", "rel_path", "path", {}, ("/files/slice", "get")),
    ("dir2mcp.outline", "rel_path", "path", {}, ("/files/outline", "get")),
    ("dir2mcp.checksum", "rel_path", "path", {}, ("/files/checksum", "get")),
    ("dir2mcp.read_bytes", "rel_path", "path", {}, ("/files/bytes", "get")),
    ("dir2mcp.diff", "rel_path_a", "path", {"rel_path_b": "docs/guide.md"}, ("/files/diff", "get")),
    ("dir2mcp.transcribe", "rel_path", "path", {}, None),
    ("dir2mcp.transcribe_and_ask", "rel_path", "path", {"question": "what is said?"}, None),
    ("dir2mcp.annotate", "rel_path", "path", {"schema_json": {"type": "object"}}, None),
    ("dir2mcp.list_files", "path_prefix", "prefix", {}, ("/files", "get")),
    ("dir2mcp.find", "path_prefix", "prefix", {"content": "canary"}, ("/find", "get")),
    ("dir2mcp.search", "path_prefix", "prefix", {"query": "canary guide"}, ("/search", "get")),
    (
        "dir2mcp.ask",
        "path_prefix",
        "prefix",
        {"question": "canary?", "mode": "search_only"},
        ("/ask", "post"),
    ),
    ("dir2mcp.list_files", "glob", "pattern", {}, ("/files", "get")),
    ("dir2mcp.find", "name_glob", "pattern", {}, ("/find", "get")),
    ("dir2mcp.search", "file_glob", "pattern", {"query": "canary guide"}, ("/search", "get")),
    ("dir2mcp.ask", "file_glob", "pattern", {"question": "canary?", "mode": "search_only"}, ("/ask", "post")),
    ("dir2mcp.find", "content", "pattern", {"regex": True}, ("/find", "get")),
]
CASES = [
    pytest.param(row, arg, transport, id=f"{row[0]}-{arg[0].removeprefix('dir2mcp.')}.{arg[1]}-{transport}")
    for row in ROWS
    for arg in ARGS
    for transport in ("mcp", "rest")
    if transport == "mcp" or arg[4] is not None
]


class Served:
    def __init__(self, up: Up, outside: str):
        self.up, self.outside = up, outside
        self.url = up.url()
        self.base = self.url.rsplit("/", 1)[0]
        self.client = httpx.Client(timeout=60, verify=TLS)
        self.headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": PROTOCOL}
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "t"}},
        }
        self.headers["MCP-Session-Id"] = self.client.post(self.url, json=init, headers=self.headers).headers[
            "MCP-Session-Id"
        ]

    def mcp(self, method: str, params: dict) -> httpx.Response:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        return self.client.post(self.url, json=body, headers=self.headers)

    def call(self, name: str, arguments: dict) -> dict:
        response = self.mcp("tools/call", {"name": name, "arguments": arguments})
        assert CANARY not in response.text
        return response.json()["result"]["structuredContent"]

    def rest(self, path: str, method: str, arguments: dict) -> dict:
        if method == "get":
            response = self.client.get(f"{self.base}/api/v1{path}", params=arguments)
        else:
            response = self.client.post(f"{self.base}/api/v1{path}", json=arguments)
        assert CANARY not in response.text
        return response.json()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("table")
    outside = base / "outside"
    outside.mkdir()
    (outside / "canary.txt").write_text(f"{CANARY} must never be served\n")
    root = base / "root"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "guide.md").write_text("# Guide\n\nThe loader reads plain configuration files.\n")
    os.mkfifo(root / "pipe.txt")
    os.symlink(outside / "canary.txt", root / "out-link.txt")
    os.symlink(outside, root / "out-dir")
    os.symlink("/dev/zero", root / "zero")
    os.link(outside / "canary.txt", root / "hard.txt")
    (root / "bundle.zip").write_bytes(zip_bytes({"inner.txt": b"an archive member about loaders\n"}))
    up = Up("--dir", str(root), "--json", "--auth", "none")
    try:
        up.event("watch_ready", timeout=120)  # indexed, the FIFO and all
        server = Served(up, str(outside / "canary.txt"))
        yield server
        # Nothing above took a thread for good: the server is ready, every slot free.
        health = server.client.get(f"{server.base}/healthz")
        assert health.status_code == 200 and health.json()["checks"]["tool_calls"]["ok"], health.text
        server.client.close()
        assert up.stop() == 0, up.stderr
    finally:
        up.close()
    assert CANARY not in up.stdout + up.stderr
    assert "Traceback" not in up.stderr
    assert not holds(root / ".dir2mcp" / "meta.sqlite", CANARY)


def expected_codes(row, kind: str, tool: str) -> set | None:
    """The codes this row may be refused with for this argument; None: it must be answered."""
    _id, _value, for_path, for_prefix = row
    if kind == "pattern":  # patterns over indexed paths or text: answered, or invalid or too long
        return {None, INVALID, errors.INVALID_RANGE}
    expected = for_path if kind == "path" else for_prefix
    if expected == "any":
        return {None, OUT, FORBIDDEN, MISSING, INVALID, *LATER}
    if isinstance(expected, set):
        return expected
    if kind == "path" and tool != "dir2mcp.open_file":
        # The path check comes first; past it, these tools need a key or an index entry.
        return {expected} if expected is not None else {None, *LATER}
    return {expected}


@pytest.mark.parametrize(("row", "arg", "transport"), CASES)
def test_hostile_input_is_refused_or_answered_and_never_reads_outside(served, row, arg, transport):
    tool, field, kind, extra, rest = arg
    value = row[1].replace("{outside}", served.outside)
    arguments = {field: value, **extra}
    if transport == "mcp":
        result = served.call(tool, arguments)
    else:
        result = served.rest(*rest, arguments)
    error = result.get("error") if isinstance(result.get("error"), dict) else None
    code = error["code"] if error else None
    assert CANARY not in json.dumps(result)
    assert code in expected_codes(row, kind, tool), result
    # The server still answers: the next request is served, and a plain read works.
    assert served.mcp("ping", {}).json()["result"] == {}
    plain = served.call("dir2mcp.open_file", {"rel_path": "docs/guide.md"})
    assert "plain configuration" in plain["content"]
