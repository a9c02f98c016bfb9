"""The official MCP TypeScript SDK v2 client (``@modelcontextprotocol/client``
2.4.0) in each of its version-negotiation modes: pinned to ``2026-07-28``
(stateless; it asks ``server/discover`` at connect and falls back to
nothing), ``auto`` (probes ``server/discover``: stateless here) and ``legacy``
(``initialize`` and a session), against one daphne-served ``up`` with live
sync and against ``mcp_stdio``. Each run lists the tools, searches, opens and
reads the hit, then hears a file it watches change: through
``subscriptions/listen`` on 2026-07-28, ``resources/subscribe`` in a session.
Over HTTP every exchange is checked too (stateless: one POST per request, no
session, no GET stream).

The client is a Node script (tests/ts_client/client.mjs) whose dependencies
tests/ts_client/package-lock.json pins; ``npm ci`` installs them into
tests/ts_client/node_modules (gitignored) here when they are missing. Node 20
or newer is needed; where the machine's is older, node 22 comes from the npm
registry into .ci/.node, as .ci/conformance does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.mcp_http import REPO, base_env, index
from tests.test_notifications import serving, write_files

CLIENT_DIR = REPO / "tests" / "ts_client"
PINNED = "2.4.0"
NODE_DIR = REPO / ".ci" / ".node"


def node_major(node: str) -> int:
    done = subprocess.run([node, "--version"], capture_output=True, text=True)
    found = re.match(r"v(\d+)", done.stdout.strip())
    return int(found.group(1)) if done.returncode == 0 and found else 0


@pytest.fixture(scope="module")
def node_env() -> dict:
    """An environment whose PATH has node >= 20 and the pinned client installed."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: the TypeScript client cannot be fetched")
    env = dict(os.environ)
    node = shutil.which("node")
    if node is None or node_major(node) < 20:
        local = NODE_DIR / "node_modules" / ".bin"
        if not (local / "node").exists() or node_major(str(local / "node")) < 20:
            npm = ["npm", "install", "--silent", "--no-save", "--no-audit", "--no-fund"]
            subprocess.run([*npm, "--prefix", str(NODE_DIR), "node@22"], check=True, timeout=600)
        env["PATH"] = f"{local}{os.pathsep}{env['PATH']}"
    installed = CLIENT_DIR / "node_modules" / "@modelcontextprotocol" / "client" / "package.json"
    if not installed.exists() or json.loads(installed.read_text())["version"] != PINNED:
        npm_ci = ["npm", "ci", "--silent", "--no-audit", "--no-fund"]
        subprocess.run(npm_ci, cwd=CLIENT_DIR, env=env, check=True, timeout=600)
    return env


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("ts_corpus")) as server:
        yield server


def run_client(env: dict, *args: str) -> dict:
    """``client.mjs ARGS``: the JSON object it prints."""
    done = subprocess.run(
        ["node", str(CLIENT_DIR / "client.mjs"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=CLIENT_DIR,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("mode", "watched", "version", "era"),
    [
        ("2026-07-28", "watched/updated.txt", "2026-07-28", "modern"),
        ("auto", "watched/sliced.txt", "2026-07-28", "modern"),
        ("legacy", "watched/replayed.txt", "2025-11-25", "legacy"),
    ],
)
def test_ts_client_over_http_in_every_mode(node_env, served, mode, watched, version, era):
    seen = run_client(node_env, mode, "http", served.url, served.token, str(served.root), watched)
    check_walk(seen, mode, watched, version, era, served.root)
    # Stateless: no MCP-Session-Id was handed out; a legacy session has one.
    assert (seen["session_id"] is None) == (era == "modern")
    check_http(seen["http"], era)


@pytest.fixture(scope="module")
def stdio_root(tmp_path_factory):
    """An indexed corpus for ``mcp_stdio`` (which indexes and watches it live as it serves)."""
    root = tmp_path_factory.mktemp("ts_stdio")
    write_files(root)
    index(root, base_env())
    return root


@pytest.mark.parametrize(
    ("mode", "watched", "version", "era"),
    [
        ("2026-07-28", "watched/updated.txt", "2026-07-28", "modern"),
        # The client probes server/discover on a sibling mcp_stdio process it then stops.
        ("auto", "watched/sliced.txt", "2026-07-28", "modern"),
        ("legacy", "watched/replayed.txt", "2025-11-25", "legacy"),
    ],
)
def test_ts_client_over_stdio(node_env, stdio_root, mode, watched, version, era):
    env = base_env(PATH=node_env["PATH"])
    seen = run_client(env, mode, "stdio", sys.executable, str(REPO / "manage.py"), str(stdio_root), watched)
    check_walk(seen, mode, watched, version, era, stdio_root)
    assert seen["session_id"] is None and seen["http"] == []


def check_walk(seen: dict, mode: str, watched: str, version: str, era: str, root) -> None:
    assert seen["era"] == era and seen["protocol_version"] == version
    assert seen["server"] == "dir2mcp"
    # A tool whose schema or x-mcp-header the client found invalid would be left out of the list.
    assert {"dir2mcp.search", "dir2mcp.open_file", "dir2mcp.open_files"} <= set(seen["tools"])
    assert len(seen["tools"]) >= 17
    assert not seen["search_is_error"] and seen["hit"] == "src/loader.py"
    assert not seen["open_file_is_error"] and "parse_config_file" in seen["open_file_content"]
    assert "parse_config_file" in seen["resource_text"]
    assert seen["updated_uri"] == f"dir2mcp:///{watched}"
    if era == "modern":
        honored = {"resourcesListChanged": True, "resourceSubscriptions": [f"dir2mcp:///{watched}"]}
        assert seen["listen_honored"] == honored
        assert seen["listen_closed"] == "local"
    assert (root / watched).read_text().startswith(f"changed by the {mode} TypeScript client at ")


def check_http(exchanges: list, era: str) -> None:
    """What went over the wire: each exchange ``[method, Mcp-Method, Mcp-Param-Path, status]``."""
    if era == "modern":
        # Statelessly: one POST per request, each naming its method (open_file its path), no
        # session stream (GET) and nothing to DELETE; closing the listen is notifications/cancelled.
        assert exchanges == [
            ["POST", "server/discover", None, 200],
            ["POST", "tools/list", None, 200],
            ["POST", "tools/call", None, 200],
            ["POST", "tools/call", "src/loader.py", 200],
            ["POST", "resources/read", None, 200],
            ["POST", "subscriptions/listen", None, 200],
            ["POST", None, None, 202],
        ]
    else:
        # initialize, notifications/initialized, the session's GET stream (where the update came;
        # its answer may come after the next POST's), tools/list, two calls, resources/read,
        # resources/subscribe, and DELETE.
        wire = sorted([method, status] for method, _, _, status in exchanges)
        assert wire == sorted(
            [["POST", 200], ["POST", 202], ["GET", 200], *[["POST", 200]] * 5, ["DELETE", 204]]
        )
        assert all(mcp_method is None and path is None for _, mcp_method, path, _ in exchanges)
