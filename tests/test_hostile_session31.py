"""Hostile round of 2026-11-30, session 31: what session 30 left open; see
docs/security.md, "Hostile round, 2026-11-30 (session 31)". Each test shows
a probe that answered otherwise before its fix: a cursor of one index
opened by a server of another, a glob listing with no time budget, queries
whose variables grew with the candidate pool, listings screening secrets a
file a query, two calls of one session under one id.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.db import connection

from corpus import files
from corpus.index import chunks
from corpus.index.dense import stored
from corpus.models import Chunk
from kernel.config import build_config
from kernel.state import StateDir
from mcp_gateway import context, dispatch
from mcp_gateway.context import Context
from tests.mcp_http import PROTOCOL, Server
from tests.support import TLS
from tests.test_cli import cli
from tests.test_dispatch import call, request, session
from tests.test_hostile_clients import WAIT, token_of
from tests.test_hostile_session30 import (
    CONFIG,
    SPLIT_KEY,
    WITHOUT_PEM,
    b64json,
    built,
    structured,
    tampered,
)
from tests.test_http import ask_body, cancel, slow_chat_server  # noqa: F401 (a fixture)

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


# -- 2. a glob listing keeps find's time budget -------------------------------------------------


def pages(ctx: Context, arguments: dict) -> list[dict]:
    """Every page of a ``list_files`` call, following its cursors."""
    found = [structured(call(ctx, "dir2mcp.list_files", arguments))]
    while "next_cursor" in found[-1]:
        cursor = found[-1]["next_cursor"]
        found.append(
            structured(call(ctx, "dir2mcp.list_files", {**arguments, "offset": 0, "cursor": cursor}))
        )
        assert len(found) < 400
    return found


def forged_cursor(path: str) -> str:
    """A cursor as a client would write one: base64 JSON resuming at ``path``."""
    key = hashlib.sha256(json.dumps(["list_files", "", "**/wanted.txt"]).encode()).hexdigest()[:24]
    raw = json.dumps({"q": key, "p": path, "k": 0}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.django_db
def test_a_glob_listing_stops_at_its_time_budget(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``list_files`` with a glob judged every row under its prefix in one
    call, however long that took (``find`` by name got a budget in session
    30). The rows the glob judges count against the same budget now: under
    a budget of nothing a page judges one row, answers ``timed_out`` with a
    cursor at the next, and following the cursors lists what one call does
    (an offset carried in the cursor), never a gitignored file, and its
    cursor tells no path."""
    tree = {f"gen/f{n:03}.txt": "x\n" for n in range(60)}
    tree |= {"keys/k.secret": "k\n", "zz/wanted.txt": "y\n", "zz/also.txt": "z\n", "zz/more.txt": "w\n"}
    ctx = built(corpus_dir, state, tree)
    (corpus_dir / ".gitignore").write_text("*.secret\n")
    whole = {"glob": "**/[akmw]*.*", "limit": 1, "offset": 1}  # k.secret and the three zz/ files
    expected = [
        f["rel_path"] for f in structured(call(ctx, "dir2mcp.list_files", {**whole, "limit": 50}))["files"]
    ]
    assert expected == ["zz/more.txt", "zz/wanted.txt"], expected
    monkeypatch.setattr(files, "FIND_BUDGET_SECONDS", 0.0)
    first = structured(call(ctx, "dir2mcp.list_files", {"glob": "**/wanted.txt"}))
    assert first["timed_out"] is True and first["files"] == [], first  # before: the file, not timed out
    assert "gen/" not in json.dumps(b64json(first["next_cursor"]))
    followed = pages(ctx, {"glob": "**/wanted.txt"})
    assert [f["rel_path"] for page in followed for f in page["files"]] == ["zz/wanted.txt"]
    assert [f["rel_path"] for page in pages(ctx, whole) for f in page["files"]] == expected
    for bad in (tampered(first["next_cursor"]), forged_cursor("keys/k.secret")):  # a client's own position
        answer = call(ctx, "dir2mcp.list_files", {"glob": "**/wanted.txt", "cursor": bad})
        assert answer.get("isError") and "invalid cursor" in json.dumps(answer)


# -- 3. id lists bound as one parameter -----------------------------------------------------------

#: SQLite's variable limit in the test below: under the pool of 50 candidates
LOW_LIMIT = 30


@contextlib.contextmanager
def few_variables(limit: int = LOW_LIMIT) -> Iterator[None]:
    """SQLite allows ``limit`` bound variables a statement meanwhile."""
    connection.ensure_connection()
    raw = connection.connection
    assert isinstance(raw, sqlite3.Connection)
    before = raw.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, limit)
    try:
        yield
    finally:
        raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, before)


CODE = {
    f"src/m{n:02}.py": f"def connect_{n}(x):\n    '''Open walrus colony {n}.'''\n    return walrus(x, {n})\n"
    for n in range(80)
}


@pytest.mark.django_db
def test_a_search_past_the_variable_limit_binds_its_ids_as_one_parameter(
    corpus_dir: Path, state: StateDir
) -> None:
    """A search's readability check (``chunk_paths``), its glob filter, the
    definitions it puts first and the code units' lengths each bound a
    variable an id of the candidate pool (up to 80,000 at the largest):
    with SQLite allowing 30, a search of a pool of 50 failed ("too many SQL
    variables") before. Each binds one JSON parameter now."""
    ctx = built(corpus_dir, state, CODE, search={"candidates": 50})
    (corpus_dir / ".gitignore").write_text("src/m0*.py\n")
    with few_variables():
        hits = [
            structured(call(ctx, "dir2mcp.search", {"query": query, "k": 20, **where}))["hits"]
            for query, where in [
                ("walrus colony", {}),
                ("connect_42 walrus", {"file_glob": "src/m[1-7]*.py"}),
            ]
        ]
    paths = {hit["rel_path"] for found in hits for hit in found}
    assert paths and not any(path.startswith("src/m0") for path in paths), paths
    assert hits[1][0]["rel_path"] == "src/m42.py", hits[1][:2]


@pytest.mark.django_db
def test_the_dense_reads_bind_their_ids_as_one_parameter(corpus_dir: Path, state: StateDir) -> None:
    """The dense side's reads of the ids a vector search found (their
    liveness, their stored vectors) bound a variable an id too."""
    built(corpus_dir, state, CODE)
    ids = list(Chunk.objects.values_list("chunk_id", flat=True))
    assert len(ids) > LOW_LIMIT
    with few_variables():
        assert stored.live_embedded(ids, "code") == set()  # before: too many SQL variables
        assert stored.stored_vectors(ids) == {}
        assert len(chunks.chunk_paths(ids)) == len(ids)


# -- 5. one id, one call in flight a session ------------------------------------------------------


@pytest.mark.slow
def test_a_second_call_under_an_id_in_flight_is_refused_over_http(slow_chat_server) -> None:  # noqa: F811
    """Two requests of one session under one id in flight shared one entry
    of the in-flight table: the second ran, the first of the two to end
    removed the entry, and a ``notifications/cancelled`` naming the id then
    stopped nothing. MCP forbids reusing an id within a session; the
    second is refused now (-32600, as stdio refuses it), and the cancel
    stops the first: its stream ends with no response."""
    server = slow_chat_server  # its chat model takes 6 s: the first call stays in flight
    session = server.initialize()
    headers = server.headers(**{"MCP-Session-Id": session, "MCP-Protocol-Version": PROTOCOL})
    events, second = [], {}
    first = ask_body(21, progressToken="p")
    with httpx.stream("POST", server.url, headers=headers, json=first, timeout=30, verify=TLS) as stream:
        for line in stream.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if len(events) == 1:  # the first is running: its progress arrived
                    second = server.post(ask_body(21), session=session).json()
                    cancel(server, session, 21)
    assert second.get("error", {}).get("code") == -32600, second  # before: a second ask, answered
    assert "already in use" in second["error"]["message"]
    assert not [e for e in events if e.get("id") == 21], events  # before: the first answered too
    assert server.post(ask_body(22), session=session).status_code == 200


# -- 4. listings screen stored secrets a batch a query ----------------------------------------------

#: forty readable files beside the key split across two units (tests.test_hostile_session30)
MANY = {f"ops/n{n:02}.txt": f"zebrafinch note {n}\n" for n in range(40)}
ASKED = [
    ("tools/call", {"name": "dir2mcp.find", "arguments": {"name_glob": "ops/*", "limit": 50}}),
    (
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "explain"}, "argument": {"name": "path", "value": "ops/"}},
    ),
    ("prompts/get", {"name": "changes", "arguments": {"since": "2000-01-01"}}),
]


@pytest.mark.django_db
def test_find_completions_and_changes_name_no_stored_secret_judged_in_batches(
    corpus_dir: Path, state: StateDir
) -> None:
    """``find`` by name, path completions and the ``changes`` prompt judged
    each file's stored text with a query or two of its own (listings had a
    batch since session 30); they prime a batch now. What they name is
    unchanged: never the file whose stored text holds a key under the
    rules now, each of the readable ones."""
    built(corpus_dir, state, {**MANY, "ops/deploy.txt": SPLIT_KEY}, security={"secret_patterns": WITHOUT_PEM})
    answers = []
    for method, params in ASKED:
        now = context.build(
            root=corpus_dir, state=state, config=build_config(CONFIG, {}, {}), auth_spec="none"
        )
        answers.append(json.dumps(dispatch.respond(request(method, params), session(), now)))
    assert ["deploy.txt" in text for text in answers] == [False] * 3, answers
    assert all(all(f"ops/n{n:02}.txt" in text for n in range(40)) for text in answers), answers
