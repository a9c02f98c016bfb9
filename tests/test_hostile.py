"""A hostile corpus served end to end: one case per threat, each outcome asserted.

The tree is generated in the test: links out of the root, archives with
escaping members, a zip bomb and nested archives, file names with newlines
and invalid UTF-8, a huge single-line file. It is indexed, served by daphne,
and attacked through every tool argument that takes a path. A secret marker
lives outside the root: no answer may ever contain it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sqlite3
import zipfile
from pathlib import Path

import pytest

from tests.mcp_http import base_env, start_daphne, stop
from tests.support import CHUNK_TEXT, chunk_text, holds, read_only
from tests.test_cli import cli

pytestmark = pytest.mark.slow

MARKER = "OUTSIDE-SECRET-7f3a9c"
# The reasons a PATH_OUTSIDE_ROOT message gives (corpus/security.py).
DOTS = "must not contain '..'"
ABSOLUTE = "must be relative to the root"
ENCODED = "percent-encoded traversal"
NUL = "NUL byte"
WINDOWS = "Windows separators or a drive letter"
# Each traversal with its reason; "{outside}" becomes the absolute path of
# the secret outside the root.
TRAVERSALS = [
    ("..", DOTS),
    ("../outside/secret.txt", DOTS),
    ("docs/../../outside/secret.txt", DOTS),
    ("/etc/passwd", ABSOLUTE),
    ("{outside}", ABSOLUTE),
    ("%2e%2e/outside/secret.txt", ENCODED),
    ("..%2foutside%2fsecret.txt", ENCODED),
    ("%2e%2e%2foutside%2fsecret.txt", ENCODED),
    ("docs%2f..%2f..%2foutside%2fsecret.txt", ENCODED),
    ("%252e%252e%252foutside", ENCODED),  # encoded twice
    ("%00", ENCODED),
    ("docs%2fguide.md", "percent-encoded separator"),
    ("docs/\x00/../../outside", NUL),
    ("docs/guide.md\x00.txt", NUL),
    ("..\\outside\\secret.txt", WINDOWS),
    ("docs\\guide.md", WINDOWS),
    ("C:\\Windows\\win.ini", WINDOWS),
    ("C:/Windows/win.ini", WINDOWS),
    ("\\\\server\\share\\x", WINDOWS),
]
# Every argument that names a path, with the other arguments its tool needs.
PATH_ARGUMENTS = [
    ("dir2mcp.open_file", "rel_path", {}),
    ("dir2mcp.outline", "rel_path", {}),
    ("dir2mcp.checksum", "rel_path", {}),
    ("dir2mcp.read_bytes", "rel_path", {}),
    ("dir2mcp.diff", "rel_path_a", {"rel_path_b": "docs/guide.md"}),
    ("dir2mcp.diff", "rel_path_b", {"rel_path_a": "docs/guide.md"}),
    ("dir2mcp.transcribe", "rel_path", {}),
    ("dir2mcp.transcribe_and_ask", "rel_path", {"question": "what is said?"}),
    ("dir2mcp.annotate", "rel_path", {"schema_json": {"type": "object"}}),
    ("dir2mcp.list_files", "path_prefix", {}),
    ("dir2mcp.find", "path_prefix", {"content": "secret"}),
    ("dir2mcp.symbols", "path_prefix", {"name": "secret"}),
    ("dir2mcp.references", "path_prefix", {"name": "secret"}),
    ("dir2mcp.search", "path_prefix", {"query": "secret never serve"}),
    ("dir2mcp.ask", "path_prefix", {"question": "what is the secret?", "mode": "search_only"}),
]
# Globs are patterns over the indexed relative paths, not paths: a traversal
# in one matches nothing. With each, the list its result holds.
GLOB_ARGUMENTS = [
    ("dir2mcp.list_files", "glob", {}, "files"),
    ("dir2mcp.find", "name_glob", {}, "matches"),
    ("dir2mcp.search", "file_glob", {"query": "loader plain configuration"}, "hits"),
    ("dir2mcp.ask", "file_glob", {"question": "loader plain configuration", "mode": "search_only"}, "hits"),
]


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(zipfile.ZipInfo(name), data, compress_type=zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


def build(base: Path) -> Path:
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(f"{MARKER} never serve this\n")
    root = base / "root"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "guide.md").write_text("# Guide\n\nThe loader reads plain configuration files.\n")
    # Links out of the root.
    os.symlink(outside / "secret.txt", root / "docs" / "link-to-secret.txt")
    os.symlink(outside, root / "linked-dir")
    # Archive members that try to escape, a bomb, and nesting.
    (root / "escape.zip").write_bytes(
        zip_bytes(
            {
                "../escaped.txt": f"{MARKER} from a member\n".encode(),
                "/abs/escaped.txt": f"{MARKER} absolute\n".encode(),
                "fine/inside.txt": b"an honest archive member about loaders\n",
            }
        )
    )
    (root / "bomb.zip").write_bytes(zip_bytes({"zeros.txt": b"0" * (300 * 2**20)}))
    inner = zip_bytes({"deep.txt": b"deep member text\n"})
    nested = inner
    for level in range(6):
        nested = zip_bytes({f"level{level}.zip": nested})
    (root / "nested.zip").write_bytes(nested)
    # Awkward names.
    (root / "line\nbreak.txt").write_text("a name with a newline\n")
    (root / os.fsdecode(b"bad-\xff-utf8.txt")).write_text("a name that is not UTF-8\n")
    # One huge line (8 MiB, no newline).
    (root / "huge-line.txt").write_text("word " * (8 * 2**20 // 5))
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = build(tmp_path_factory.mktemp("hostile"))
    indexed = cli("reindex", "--dir", str(root), "--json", env=base_env())
    assert indexed.returncode == 0, indexed.stderr
    assert MARKER not in indexed.stdout + indexed.stderr
    srv = start_daphne(root)
    srv.session = srv.initialize()
    srv.outside = root.parent / "outside" / "secret.txt"
    srv.file_errors = {
        event["data"]["rel_path"]: event["data"]
        for event in map(json.loads, indexed.stdout.splitlines())
        if event["event"] == "file_error"
    }
    yield srv
    err = stop(srv)
    assert "Traceback" not in err, err[-3000:]
    assert MARKER not in err


def document(server, rel_path: str) -> tuple[str, str]:
    """(status, error) of a document in the server's index."""
    with contextlib.closing(sqlite3.connect(server.root / ".dir2mcp" / "meta.sqlite")) as conn:
        status, error = conn.execute(
            "SELECT status, error FROM documents WHERE rel_path = ?", [rel_path]
        ).fetchone()
    return status, error or ""


def call(server, name: str, arguments: dict) -> dict:
    result = server.call(server.session, name, arguments)
    assert MARKER not in json.dumps(result), f"{name} {arguments} leaked the outside secret"
    return result


def error_code(result: dict) -> str | None:
    return result["structuredContent"]["error"]["code"] if result.get("isError") else None


def _ids(cases) -> list[str]:
    return [f"{case[0].removeprefix('dir2mcp.')}.{case[1]}" for case in cases]


def test_every_path_argument_of_every_tool_is_attacked(server):
    """The cases below cover the registry: a new path argument fails here."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    listed = server.post(body, session=server.session).json()["result"]
    assert "nextCursor" not in listed
    found = {
        (tool["name"], name)
        for tool in listed["tools"]
        for name in _arguments(tool["inputSchema"])
        if name.rsplit(".", 1)[-1].startswith("rel_path") or name.endswith(("path_prefix", "glob"))
    }
    assert found == {case[:2] for case in PATH_ARGUMENTS + GLOB_ARGUMENTS + NESTED_PATH_ARGUMENTS}


def _arguments(schema: dict, prefix: str = "") -> list[str]:
    """Every property name of an input schema, nested ones as ``slices[].rel_path``."""
    names = []
    for name, prop in schema.get("properties", {}).items():
        names.append(prefix + name)
        if prop.get("type") == "array" and isinstance(prop.get("items"), dict):
            names += _arguments(prop["items"], f"{prefix}{name}[].")
    return names


# Path arguments inside a list: each item's refusal is in its place in the result.
NESTED_PATH_ARGUMENTS = [("dir2mcp.open_files", "slices[].rel_path")]


@pytest.mark.parametrize(("path", "reason"), TRAVERSALS)
def test_a_traversal_in_one_slice_is_refused_in_its_place(server, path, reason):
    path = path.replace("{outside}", str(server.outside))
    slices = [{"rel_path": "docs/guide.md"}, {"rel_path": path}]
    result = call(server, "dir2mcp.open_files", {"slices": slices})
    first, second = result["structuredContent"]["slices"]
    assert first["result"]["rel_path"] == "docs/guide.md"
    assert (second["error"]["code"], second["error"]["retryable"]) == ("PATH_OUTSIDE_ROOT", False)
    assert reason in second["error"]["message"]


@pytest.mark.parametrize(("path", "reason"), TRAVERSALS)
@pytest.mark.parametrize(("tool", "field", "extra"), PATH_ARGUMENTS, ids=_ids(PATH_ARGUMENTS))
def test_a_traversal_in_a_path_argument_is_path_outside_root(server, tool, field, extra, path, reason):
    path = path.replace("{outside}", str(server.outside))
    result = call(server, tool, {field: path, **extra})
    error = result["structuredContent"]["error"] if result.get("isError") else None
    assert error is not None, result
    assert (error["code"], error["retryable"]) == ("PATH_OUTSIDE_ROOT", False)
    assert reason in error["message"], error


@pytest.mark.parametrize(("tool", "field", "extra"), PATH_ARGUMENTS, ids=_ids(PATH_ARGUMENTS))
def test_a_plain_path_in_the_same_argument_gets_past_the_check(server, tool, field, extra):
    """The refusals above are about the traversal, not the argument: a
    missing file is FILE_NOT_FOUND, a plain prefix is served."""
    if field.startswith("rel_path"):
        assert error_code(call(server, tool, {field: "docs/missing.wav", **extra})) == "FILE_NOT_FOUND"
        assert error_code(call(server, tool, {field: "./", **extra})) == "INVALID_FIELD"  # names no file
    else:
        assert error_code(call(server, tool, {field: "docs/", **extra})) is None


@pytest.mark.parametrize(("path", "_reason"), TRAVERSALS)
@pytest.mark.parametrize(("tool", "field", "extra", "items"), GLOB_ARGUMENTS, ids=_ids(GLOB_ARGUMENTS))
def test_a_traversal_in_a_glob_matches_nothing(server, tool, field, extra, items, path, _reason):
    path = path.replace("{outside}", str(server.outside))
    result = call(server, tool, {field: path, **extra})
    assert error_code(result) is None
    assert result["structuredContent"][items] == []
    # The same argument with a plain glob does select: the empty list is the glob's doing.
    plain = call(server, tool, {field: "docs/*.md", **extra})["structuredContent"][items]
    assert {item["rel_path"] for item in plain} == {"docs/guide.md"}


def test_symlinks_out_of_the_root_are_not_indexed_or_served(server):
    files = {
        f["rel_path"]
        for f in call(server, "dir2mcp.list_files", {"limit": 500})["structuredContent"]["files"]
    }
    assert "docs/guide.md" in files
    assert not any(path.startswith("linked-dir") or path == "docs/link-to-secret.txt" for path in files)
    for rel in ("docs/link-to-secret.txt", "linked-dir/secret.txt"):
        error = call(server, "dir2mcp.open_file", {"rel_path": rel})["structuredContent"]["error"]
        assert (error["code"], error["message"]) == ("FORBIDDEN", "symlinks are not followed")
    assert call(server, "dir2mcp.find", {"content": "never serve"})["structuredContent"]["matches"] == []


def test_escaping_archive_members_are_rejected_and_the_rest_served(server):
    # The first problem marks the archive an error (named with its member);
    # further ones are reported under the member's own path.
    first = server.file_errors["escape.zip"]
    assert first["code"] == "PATH_OUTSIDE_ROOT" and "'../escaped.txt'" in first["message"]
    assert server.file_errors["escape.zip!//abs/escaped.txt"]["code"] == "PATH_OUTSIDE_ROOT"
    assert document(server, "escape.zip")[0] == "error"
    hits = call(server, "dir2mcp.search", {"query": "honest archive member loaders"})["structuredContent"][
        "hits"
    ]
    assert hits[0]["rel_path"] == "escape.zip!/fine/inside.txt"
    assert all("escaped" not in hit["rel_path"] for hit in hits)
    assert not (server.root.parent / "escaped.txt").exists() and not Path("/abs/escaped.txt").exists()


def test_a_zip_bomb_member_is_refused_with_its_reason(server):
    # Its member is refused, and the archive is an error naming why.
    status, error = document(server, "bomb.zip")
    assert status == "error" and error.startswith("FILE_TOO_LARGE: ")
    assert server.file_errors["bomb.zip"]["code"] == "FILE_TOO_LARGE"
    files = call(server, "dir2mcp.list_files", {"limit": 500})["structuredContent"]["files"]
    assert not [f for f in files if f["rel_path"].startswith("bomb.zip!/")]


def test_nesting_stops_at_the_depth_limit(server):
    files = call(server, "dir2mcp.list_files", {"limit": 500})["structuredContent"]["files"]
    nested = [f["rel_path"] for f in files if f["rel_path"].startswith("nested.zip")]
    assert nested and max(path.count(".zip") for path in nested) <= 3
    hits = call(server, "dir2mcp.search", {"query": "deep member text"})["structuredContent"]["hits"]
    assert not [hit for hit in hits if hit["rel_path"].endswith("deep.txt")]


def test_awkward_file_names(server):
    files = call(server, "dir2mcp.list_files", {"limit": 500})["structuredContent"]["files"]
    names = [f["rel_path"] for f in files]
    assert "line\nbreak.txt" in names  # a newline is data in JSON, nothing more
    bad = [data for path, data in server.file_errors.items() if path.endswith("-utf8.txt")]
    assert bad and bad[0]["code"] == "EXTRACT_FAILED" and "UTF-8" in bad[0]["message"]
    # Listed in error by its name with the undecodable byte escaped (issue #34).
    assert [(f["rel_path"], f["status"]) for f in files if f["rel_path"].endswith("-utf8.txt")] == [
        ("bad-\\xff-utf8.txt", "error")
    ]


def test_a_huge_single_line_file_is_bounded(server):
    result = call(server, "dir2mcp.open_file", {"rel_path": "huge-line.txt", "max_chars": 1000})
    body = result["structuredContent"]
    assert body["truncated"] is True and len(body["content"]) <= 1000
    hits = call(server, "dir2mcp.search", {"query": "word word", "k": 5})["structuredContent"]["hits"]
    assert hits and all(len(hit["snippet"]) <= 4000 for hit in hits)


def test_a_file_rewritten_while_it_is_indexed_ends_indexed_as_its_final_content(tmp_path):
    """Rewrites (truncate, then write, so a reader can see any prefix) race
    the first pass and the watcher; once they stop, the index holds exactly
    the file's last content: the next look at a changed mtime repairs any
    torn read."""
    import contextlib
    import hashlib
    import sqlite3
    import threading
    import time

    from tests.up_process import Up

    target = tmp_path / "churn.txt"
    target.write_text("initial\n")
    for i in range(200):
        (tmp_path / f"filler{i}.txt").write_text(f"filler {i}\n" * 50)
    stop = threading.Event()

    def churn():
        n = 0
        while not stop.is_set():
            n += 1
            with open(target, "w") as handle:  # truncate, then write in pieces
                for line in range(n % 300):
                    handle.write(f"version {n} line {line}\n")

    writer = threading.Thread(target=churn, daemon=True)
    up = Up("--dir", str(tmp_path), "--json", "--auth", "none")
    try:
        writer.start()
        up.url()
        up.event("watch_ready", timeout=120)  # the pass is over and the OS watch is in place
        time.sleep(1)  # the behaviour under test: the churn goes on for a second under the watch
        stop.set()
        writer.join(10)
        final = target.read_bytes()
        expected = hashlib.sha256(final).hexdigest()
        db = tmp_path / ".dir2mcp" / "meta.sqlite"

        def indexed_hash(_up):
            with read_only(db) as conn:
                row = conn.execute(
                    "SELECT content_hash FROM documents WHERE rel_path = 'churn.txt' AND deleted = 0"
                ).fetchone()
            return row is not None and row[0] == expected

        up.wait_until(indexed_hash, "the final content to be indexed", timeout=120)
        assert up.stop() == 0, up.stderr
    finally:
        stop.set()
        up.close()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        texts = conn.execute(
            f"SELECT {CHUNK_TEXT} FROM chunks c JOIN representations r ON r.rep_id = c.representation_id "
            "JOIN documents d ON d.doc_id = r.document_id "
            "WHERE d.rel_path = 'churn.txt' AND c.deleted = 0 AND r.deleted = 0 ORDER BY c.ordinal"
        ).fetchall()
    body = final.decode()
    # every live chunk is from the final version (texts stored compressed, decoded)
    assert texts and all(chunk_text(*text) in body for text in texts)
    assert "Traceback" not in up.stderr


def test_hard_links_are_refused_unless_allowed(tmp_path):
    """A hard link's content may be a file outside the root (another name of
    the same inode): refused with its reason, at indexing and by open_file,
    unless follow_hardlinks."""
    outside = tmp_path / "outside.txt"
    outside.write_text(f"{MARKER} behind a hard link\n")
    root = tmp_path / "root"
    root.mkdir()
    (root / "plain.md").write_text("# Plain\n\nNothing to hide.\n")
    os.link(outside, root / "linked.txt")

    refused = cli("reindex", "--dir", str(root), "--json", env=base_env())
    events = [json.loads(line) for line in refused.stdout.splitlines()]
    errors_ = {e["data"]["rel_path"]: e["data"] for e in events if e["event"] == "file_error"}
    assert errors_["linked.txt"]["code"] == "FORBIDDEN" and "hard link" in errors_["linked.txt"]["message"]
    assert not holds(root / ".dir2mcp" / "meta.sqlite", MARKER)
    found = cli("ask", "--dir", str(root), "behind a hard link", "--mode", "search_only", env=base_env())
    assert MARKER not in found.stdout

    srv = start_daphne(root)
    try:
        session = srv.initialize()
        opened = srv.call(session, "dir2mcp.open_file", {"rel_path": "linked.txt"})
        assert MARKER not in json.dumps(opened)
        error = opened["structuredContent"]["error"]
        assert error["code"] == "FORBIDDEN" and "hard link" in error["message"]
        plain = srv.call(session, "dir2mcp.open_file", {"rel_path": "plain.md"})["structuredContent"]
        assert "Nothing to hide." in plain["content"]
    finally:
        assert "Traceback" not in stop(srv)

    allowed_env = {"DIR2MCP_INGEST__FOLLOW_HARDLINKS": "true"}
    allowed = cli("reindex", "--dir", str(root), "--json", env=base_env(**allowed_env))
    assert "file_error" not in allowed.stdout
    assert holds(root / ".dir2mcp" / "meta.sqlite", MARKER)
    srv = start_daphne(root, env=allowed_env)
    try:
        opened = srv.call(srv.initialize(), "dir2mcp.open_file", {"rel_path": "linked.txt"})
        assert opened["structuredContent"]["content"] == f"{MARKER} behind a hard link"
    finally:
        assert "Traceback" not in stop(srv)
