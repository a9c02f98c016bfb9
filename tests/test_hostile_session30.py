"""Hostile round of 2026-11-30, session 30: what session 29 left open; see
docs/security.md, "Hostile round, 2026-11-30 (session 30)". Each test shows
a probe that answered otherwise before its fix: cursors a client could read
and write, a query whose variables grew with ``search.candidates``, a name
glob with no time budget, a directory told from a missing name.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
from pathlib import Path

import httpx
import pytest
from django.db import connection

from corpus import files
from corpus.ingest.indexing import index_directory
from corpus.models import Chunk
from kernel.config import DEFAULT_SECRET_PATTERNS, build_config
from kernel.state import StateDir
from mcp_gateway import context, dispatch
from mcp_gateway.context import Context
from tests.mcp_http import Server, write_corpus
from tests.test_cli import cli
from tests.test_dispatch import call, request, session
from tests.test_hostile_clients import WAIT, token_of
from tests.test_hostile_session27 import rpc
from tests.test_stdio import Raw, command

CONFIG = {"embed": {"provider": "none"}, "chat": {"provider": "none"}}


def built(corpus_dir: Path, state: StateDir, tree: dict[str, str], **sections: object) -> Context:
    """``tree`` written and indexed, served under ``CONFIG`` and ``sections``."""
    for rel, text in tree.items():
        (corpus_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (corpus_dir / rel).write_text(text)
    config = build_config({**CONFIG, **sections}, {}, {})
    index_directory(corpus_dir, state=state, config=config)
    return context.build(root=corpus_dir, state=state, config=config, auth_spec="none")


def structured(result: dict) -> dict:
    return result["structuredContent"]


def b64json(cursor: str) -> object:
    """What a cursor said to a client that decoded it (base64url JSON until session 30)."""
    try:
        return json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except ValueError:
        return None


def forged_references_cursor(name: str, doc_id: int) -> str:
    """The cursor ``references`` gave until session 30, written by hand:
    resume at document ``doc_id`` (its key: a digest of the name and prefix)."""
    key = hashlib.sha256(f"2\0{name}\0".encode()).hexdigest()[:16]
    raw = json.dumps({"q": key, "r": doc_id, "k": 0}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def tampered(cursor: str) -> str:
    return cursor[:-2] + ("AA" if not cursor.endswith("AA") else "BB")


# -- 1. cursors ---------------------------------------------------------------------------------

USES = {f"src/u{n}.py": "from lib import connect\n\nconnect(1)\n" for n in range(4)}


@pytest.mark.django_db
def test_a_references_cursor_holds_no_document_id_and_cannot_be_forged(
    corpus_dir: Path, state: StateDir
) -> None:
    """``references``' cursor was base64 JSON holding a document id (``r``):
    the gaps between ids counted the files indexed between two readable
    ones, excluded ones among them, and a client could write a cursor
    resuming anywhere. It is sealed now: noise to the client, and a cursor
    written or changed by hand is ``invalid cursor``."""
    ctx = built(corpus_dir, state, USES)
    first = structured(call(ctx, "dir2mcp.references", {"name": "connect", "limit": 1}))
    cursor = first["next_cursor"]
    assert b64json(cursor) is None, b64json(cursor)  # before: {"q": ..., "r": <a document id>, "k": ...}
    following = structured(call(ctx, "dir2mcp.references", {"name": "connect", "limit": 1, "cursor": cursor}))
    assert following["count"] == 1 and following["references"] != first["references"]
    last_id = max(Chunk.objects.values_list("representation__document_id", flat=True))
    for bad in (forged_references_cursor("connect", last_id), tampered(cursor), "x" * 200):
        answer = call(ctx, "dir2mcp.references", {"name": "connect", "cursor": bad})
        assert answer.get("isError"), answer  # before: the forged one resumed at the last file
        assert "invalid cursor" in json.dumps(answer), answer


@pytest.mark.django_db
def test_find_and_list_cursors_name_no_path(corpus_dir: Path, state: StateDir) -> None:
    """``find``'s and ``list_files``' cursors held the path they resume at,
    and ``resources/list``'s too; each is sealed now, and the sealed cursor
    of one kind is not another's."""
    ctx = built(corpus_dir, state, USES)
    found = structured(call(ctx, "dir2mcp.find", {"name_glob": "src/*.py", "limit": 1}))
    listed = structured(call(ctx, "dir2mcp.list_files", {"path_prefix": "src", "limit": 1}))
    for cursor in (found["next_cursor"], listed["next_cursor"]):
        assert "src/" not in json.dumps(b64json(cursor)), b64json(cursor)  # before: the path
    answer = call(ctx, "dir2mcp.references", {"name": "connect", "cursor": found["next_cursor"]})
    assert answer.get("isError") and "invalid cursor" in json.dumps(answer)


# -- 2. full matches past excluded files: one variable whatever their number --------------------

WORDS = "walrus tusk blubber floe"


@pytest.mark.django_db
def test_full_matches_past_many_excluded_files_bind_a_fixed_number_of_variables(
    corpus_dir: Path, state: StateDir
) -> None:
    """``_full_past`` asked for units outside every file passed over so far
    with ``NOT IN (%s, …)``, a variable a path: up to ``search.candidates``
    × 9 (45,000 at the largest), past the 32,766 variables a default
    SQLite build allows. Here SQLite allows 300 (``setlimit``) and
    ``candidates`` is 50: the 399 excluded files holding the four words
    are stored first, long (so BM25 ranks the 60 short readable ones
    above them and no other query grows), and the seventh page asks past
    350 paths. Before, the search failed ("too many SQL variables"); the
    paths are bound as one JSON parameter now."""
    filler = " and other words of the ship's log" * 30
    tree = {f"private/p{n:03}.txt": f"Log {n}: {WORDS}{filler}.\n" for n in range(399)}
    tree |= {f"zz/d{n:03}.txt": f"{WORDS}.\n" for n in range(60)}
    ctx = built(corpus_dir, state, tree, search={"candidates": 50})
    (corpus_dir / ".gitignore").write_text("private/\n")
    connection.ensure_connection()
    raw = connection.connection
    assert isinstance(raw, sqlite3.Connection)
    before = raw.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 300)
    try:
        full = ctx.searcher.ranked(WORDS).full_matches  # before: OperationalError, too many SQL variables
    finally:
        raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, before)
    paths = {Chunk.objects.get(chunk_id=cid).representation.document.rel_path for cid in full}
    assert paths and all(path.startswith("zz/") for path in paths), paths


# -- 3. find by name alone keeps the time budget ----------------------------------------------------


@pytest.mark.django_db
def test_find_by_name_alone_stops_at_its_time_budget(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``find`` with a name glob and no content judged every file of the
    index in one call, however long that took: the budget was checked only
    between documents whose text it scanned. The rows it judges count now:
    under a budget of nothing, each page judges one file and answers
    ``timed_out`` with a cursor, and following the cursors finds the file."""
    tree = {f"gen/f{n:03}.txt": "x\n" for n in range(120)}
    tree["zz/wanted.txt"] = "y\n"
    ctx = built(corpus_dir, state, tree)
    monkeypatch.setattr(files, "FIND_BUDGET_SECONDS", 0.0)
    arguments: dict = {"name_glob": "**/wanted.txt"}
    page = structured(call(ctx, "dir2mcp.find", arguments))
    assert page["timed_out"] is True and page["matches"] == [], page  # before: the match, not timed out
    pages = 1
    while "next_cursor" in page:
        page = structured(call(ctx, "dir2mcp.find", {**arguments, "cursor": page["next_cursor"]}))
        pages += 1
        assert pages < 300
        if page["matches"]:
            break
    assert [m["rel_path"] for m in page["matches"]] == ["zz/wanted.txt"]


# -- 4. a directory reads as a missing name unless it holds something readable ---------------------

DIRS = {
    "keys/a.secret": "alpha\n",
    "keys/b.secret": "beta\n",
    "gen/out.txt": "built\n",
    "docs/one.txt": "one\n",
}


def read_error(ctx: Context, rel_path: str) -> str:
    answer = call(ctx, "dir2mcp.open_file", {"rel_path": rel_path})
    assert answer.get("isError"), answer
    return json.dumps(answer["structuredContent"]).replace(json.dumps(rel_path)[1:-1], "NAME")


@pytest.mark.django_db
def test_a_directory_only_excluded_files_occupy_reads_as_a_missing_name(
    corpus_dir: Path, state: StateDir
) -> None:
    """Every read answered a directory "``keys`` is not a regular file" and a
    name that does not exist "no such file: …", so a client guessing names
    told that ``keys/`` (only excluded files in it) and ``gen/`` (excluded
    as a folder) exist. Both answer as a missing name now; a directory
    holding a file the client may see still says it is one."""
    ctx = built(corpus_dir, state, DIRS)
    (corpus_dir / ".gitignore").write_text("*.secret\ngen/\n")
    missing = read_error(ctx, "nope")
    assert read_error(ctx, "keys") == read_error(ctx, "gen") == missing  # before: "not a regular file"
    assert "is a directory" in read_error(ctx, "docs")


# -- 5. a credential two units hold together -------------------------------------------------------

#: key material: base64 lines no rule names alone
BODY = [base64.b64encode(hashlib.sha256(str(n).encode()).digest() * 2).decode()[:64] for n in range(60)]
#: a PEM key whose header ends the file's first unit and whose body fills the next ones
SPLIT_KEY = (
    "Deployment notes for the walrus colony.\n" * 55
    + "-----BEGIN RSA PRIVATE KEY-----\n"
    + "\n".join(BODY)
    + "\n-----END RSA PRIVATE KEY-----\nzebrafinch closing words\n"
)
#: the rules the index was written under: no private-key rule (one added since)
WITHOUT_PEM = [rule for rule in DEFAULT_SECRET_PATTERNS if "PRIVATE" not in rule]


@pytest.mark.django_db
def test_a_key_split_across_units_is_screened_with_its_document(corpus_dir: Path, state: StateDir) -> None:
    """Search hits, ``find``'s matches and ``open_file``'s reads of the index
    were screened a unit or a window at a time: a PEM key whose header ends
    one unit and whose body fills the next left the body's units clean to
    the rule that anchors at the header, so ``search`` for a word after the
    key quoted its last lines, and ``find`` of a body line quoted it. The
    document's stored text is judged whole now; its file is also left out
    of ``list_files`` and ``find`` by name (item 6)."""
    before = built(
        corpus_dir,
        state,
        {"ops/deploy.txt": SPLIT_KEY, "ops/readme.txt": "zebrafinch\n"},
        security={"secret_patterns": WITHOUT_PEM},
    )
    now = context.build(root=corpus_dir, state=state, config=build_config(CONFIG, {}, {}), auth_spec="none")
    assert now.engine.find_secret(SPLIT_KEY) is not None and now.engine.find_secret("\n".join(BODY)) is None
    asked = [
        ("dir2mcp.search", {"query": "zebrafinch closing"}),
        ("dir2mcp.find", {"content": BODY[-3]}),
        ("dir2mcp.list_files", {"path_prefix": "ops"}),
        ("dir2mcp.find", {"name_glob": "ops/*"}),
    ]
    for name, arguments in asked:  # the control: under the rules it was indexed by
        assert "deploy.txt" in json.dumps(call(before, name, arguments)), name
    answers = [json.dumps(call(now, name, arguments)) for name, arguments in asked]
    assert [BODY[-3] in text for text in answers] == [False] * 4, answers  # before: search and find quoted it
    assert ["deploy.txt" in text for text in answers] == [False] * 4, answers  # before: named by each
    assert "readme.txt" in answers[2]


# -- the same on a real ``up`` (MCP, REST) and ``mcp_stdio`` ------------------------------------


def mcp_error(answer: dict) -> str:
    return json.dumps(answer.get("structuredContent") or answer)


#: a credential of a shape the rules learn only after the file was indexed
CREDENTIAL = "MYCO-KEY-q7w8e9r0t1y2u3i4"
#: what names ``notes/keys.txt`` on each surface: (tool, arguments), and the REST route taking them
NAMING = [
    ("dir2mcp.list_files", {"path_prefix": "notes"}, "/api/v1/files"),
    ("dir2mcp.find", {"name_glob": "notes/*"}, "/api/v1/find"),
]
COMPLETE_PATH = {
    "ref": {"type": "ref/prompt", "name": "explain"},
    "argument": {"name": "path", "value": "notes/"},
}


@pytest.mark.slow
def test_cursors_directories_and_listings_on_every_transport(tmp_path: Path, running) -> None:
    """Under ``up --no-index`` and ``mcp_stdio --no-index``, over an index
    written before ``.gitignore`` and a secret pattern changed: a
    ``references`` cursor written by hand (the layout given until session
    30) resumed where it said; a read of ``keys`` (only gitignored files in
    it) said "not a regular file" where ``nope`` said "no such file"; and
    ``notes/keys.txt``, whose text the new pattern calls a credential, was
    named by ``list_files``, ``find`` by name, ``resources/list`` and a
    path completion (MCP, the REST mirror, stdio) though every read of it
    was refused. Now the cursor is ``invalid cursor``, both reads answer
    alike and no listing names the file."""
    root = tmp_path / "corpus"
    write_corpus(root)
    tree = {**USES, **DIRS, "notes/keys.txt": f"key = {CREDENTIAL}\n", "notes/plain.txt": "plain\n"}
    for rel, text in tree.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    indexed = cli("reindex", "--dir", str(root), "--quiet")
    assert indexed.returncode == 0, indexed.stderr
    (root / ".gitignore").write_text("*.secret\n")
    patterns = [*DEFAULT_SECRET_PATTERNS, "MYCO-KEY-[a-z0-9]{16}"]
    (root / ".dir2mcp.yaml").write_text(json.dumps({"security": {"secret_patterns": patterns}}))
    forged = forged_references_cursor("connect", 10**6)
    asked = {"name": "connect", "cursor": forged}
    up = running("--dir", str(root), "--json", "--no-index")
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()
    auth = {"Authorization": f"Bearer {srv.token}"}

    def rest(route: str, params: dict) -> str:
        return httpx.get(srv.base + route, params=params, headers=auth, timeout=WAIT).text

    answers = [mcp_error(srv.call(session, "dir2mcp.references", asked)), rest("/api/v1/references", asked)]
    reads = {
        name: [mcp_error(srv.call(session, "dir2mcp.open_file", {"rel_path": name}))]
        for name in ("keys", "nope")
    }
    for name in reads:
        reads[name].append(rest("/api/v1/files/slice", {"rel_path": name}))
    listings = [json.dumps(srv.call(session, tool, arguments)) for tool, arguments, _ in NAMING]
    listings += [rest(route, arguments) for _, arguments, route in NAMING]
    listings += [json.dumps(rpc(srv, "resources/list", {})), rest("/api/v1/resources", {})]
    listings.append(json.dumps(rpc(srv, "completion/complete", COMPLETE_PATH)))
    stdio = Raw(command(root, "--no-index"))
    try:
        stdio.initialize()
        answers.append(mcp_error(stdio.call("r", "dir2mcp.references", asked)))
        for name in reads:
            reads[name].append(mcp_error(stdio.call(f"o-{name}", "dir2mcp.open_file", {"rel_path": name})))
        listings += [json.dumps(stdio.call(f"l-{n}", tool, args)) for n, (tool, args, _) in enumerate(NAMING)]
        listings.append(json.dumps(stdio.request("list", "resources/list", {})))
        listings.append(json.dumps(stdio.request("complete", "completion/complete", COMPLETE_PATH)))
        assert stdio.close() == 0
    finally:
        stdio.kill()
    assert all("invalid cursor" in text for text in answers), answers  # before: a page of references
    told = [[text.replace(name, "NAME") for text in texts] for name, texts in reads.items()]
    assert told[0] == told[1], told  # before: "keys is not a regular file" on each transport
    assert all("no such file" in text for text in told[0]), told
    # before: named by each of the eleven listings
    assert ["notes/keys.txt" in text for text in listings] == [False] * 11, listings
    assert all("notes/plain.txt" in text for text in listings), listings  # the control
    assert "Traceback" not in up.stderr, up.stderr


def tool_read(tool: str) -> dict:
    return {"name": f"dir2mcp.{tool}", "arguments": {"rel_path": "NAME"}}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("method", "params"),
    [
        pytest.param("tools/call", tool_read("checksum"), id="checksum"),
        pytest.param("tools/call", tool_read("outline"), id="outline"),
        pytest.param("tools/call", tool_read("read_bytes"), id="bytes"),
        pytest.param("resources/read", {"uri": "dir2mcp:///NAME"}, id="resources/read"),
        pytest.param("prompts/get", {"name": "explain", "arguments": {"path": "NAME"}}, id="explain prompt"),
    ],
)
def test_every_read_tells_a_hidden_directory_from_nothing(
    corpus_dir: Path, state: StateDir, method: str, params: dict
) -> None:
    """Each other way of reading a path (``checksum``, ``outline``,
    ``read_bytes``, ``resources/read``, the ``explain`` prompt) answered
    ``keys`` (only excluded files in it) "not a regular file" and ``nope``
    "no such file" before; they all open through the one reader, and now
    answer both alike."""
    ctx = built(corpus_dir, state, DIRS)
    (corpus_dir / ".gitignore").write_text("*.secret\n")

    def answered(name: str) -> str:
        asked = json.loads(json.dumps(params).replace("NAME", name))
        reply = dispatch.respond(request(method, asked), session(), ctx)
        return json.dumps(reply.get("error") or reply["result"]).replace(name, "NAME")

    assert answered("keys") == answered("nope"), (answered("keys"), answered("nope"))
