"""Hostile round of 2026-11-30, session 31: what session 30 left open; see
docs/security.md, "Hostile round, 2026-11-30 (session 31)". Each test shows
a probe that answered otherwise before its fix: a cursor of one index
opened by a server of another, a glob listing with no time budget, queries
whose variables grew with the candidate pool, listings screening secrets a
file a query, two calls of one session under one id.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.mcp_http import Server
from tests.test_cli import cli
from tests.test_hostile_clients import WAIT, token_of

# -- 1. a cursor is bound to its index ----------------------------------------------------------

#: one secret for every server: a deployment's ``DJANGO_SECRET_KEY``
SHARED = {"DJANGO_SECRET_KEY": "session-31-one-secret-for-two-indexes-0123456789"}
TREE = {f"src/f{n}.txt": f"file {n}\n" for n in range(4)}


def indexed(root: Path) -> None:
    for rel, text in TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    done = cli("reindex", "--dir", str(root), "--quiet", env=SHARED)
    assert done.returncode == 0, done.stderr


def served(running, root: Path) -> tuple[Server, str]:
    up = running("--dir", str(root), "--json", "--no-index", env=SHARED)
    srv = Server(root, up.url(), token_of(root), up.proc)
    return srv, srv.initialize()


def listed(srv: Server, session: str, cursor: str | None = None) -> dict:
    arguments = {"path_prefix": "src", "limit": 1} | ({"cursor": cursor} if cursor else {})
    return srv.call(session, "dir2mcp.list_files", arguments)


def rest_listed(srv: Server, cursor: str) -> str:
    params = {"path_prefix": "src", "limit": 1, "cursor": cursor}
    auth = {"Authorization": f"Bearer {srv.token}"}
    return httpx.get(srv.base + "/api/v1/files", params=params, headers=auth, timeout=WAIT).text


@pytest.mark.slow
def test_a_cursor_of_one_index_is_invalid_on_a_server_of_another(tmp_path: Path, running) -> None:
    """Two ``up --no-index`` servers sharing ``DJANGO_SECRET_KEY`` but
    serving two directories: a ``list_files`` cursor of the first resumed
    on the second (a page of its files, before). The cursor's key is bound
    to the index's id now: "invalid cursor" on the other server (MCP and
    REST), while the server that gave it, restarted, still opens it."""
    first, second = tmp_path / "first", tmp_path / "second"
    indexed(first)
    indexed(second)
    srv_a, session_a = served(running, first)
    cursor = listed(srv_a, session_a)["structuredContent"]["next_cursor"]
    srv_b, session_b = served(running, second)
    other = listed(srv_b, session_b, cursor)
    assert other.get("isError") and "invalid cursor" in json.dumps(other), other  # before: a page of second/
    assert "invalid cursor" in rest_listed(srv_b, cursor)
    srv_a.proc.kill()
    srv_a.proc.wait(30)
    again, session = served(running, first)  # kept across a restart: the id is the database's
    page = listed(again, session, cursor)["structuredContent"]
    assert [f["rel_path"] for f in page["files"]] == ["src/f1.txt"], page
