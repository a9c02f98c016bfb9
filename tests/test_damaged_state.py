"""Damaged or full state, as a user meets it (issue #34, "Seen 5" and "Seen 6"):
a database with pages overwritten, a full file system under the state
directory. Real `manage.py` and `up` processes, a real tmpfs for the full disk."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.mcp_http import Server
from tests.support import TLS, read_only, wait_until
from tests.test_cli import cli, make_tree

pytestmark = pytest.mark.slow

PAGE = 4096


def indexed_tree(root: Path, files: int = 40) -> Path:
    """A tree of ``files`` modules, indexed by `reindex`; returns the database."""
    make_tree(root, files=files)
    for i in range(files):
        body = "\n".join(f"line {j} of module {i}: alpha beta gamma delta" for j in range(40))
        (root / "src" / f"mod{i}.py").write_text(f"def handler_{i}():\n    '''{body}'''\n    return {i}\n")
    built = cli("reindex", "--dir", str(root), "--quiet")
    assert built.returncode == 0, built.stderr
    db = root / ".dir2mcp" / "meta.sqlite"
    with contextlib.closing(sqlite3.connect(db)) as conn:  # fold the log in, so the file holds every page
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db


def overwrite_pages(db: Path, tables: tuple[str, ...]) -> int:
    """Write random bytes over every leaf page of ``tables``; page 1 (the
    header and the schema) and every table's root page stay intact."""
    with read_only(db) as conn:
        marks = ",".join("?" * len(tables))
        pages = [
            row[0]
            for row in conn.execute(
                f"SELECT pageno FROM dbstat WHERE name IN ({marks}) AND pagetype = 'leaf'", tables
            )
        ]
    assert pages, "no leaf pages to damage"
    with db.open("r+b") as handle:
        for page in pages:
            handle.seek((page - 1) * PAGE)
            handle.write(os.urandom(PAGE))
    return len(pages)


def assert_named(result, code: str, exit_code: int) -> None:
    assert result.returncode == exit_code, result.stdout + result.stderr
    assert f"ERROR: {code}:" in result.stderr
    assert "Traceback" not in result.stderr


# -- a damaged database ---------------------------------------------------------


def test_overwritten_pages_stop_every_command_with_store_corrupt_and_reindex_rebuilds(corpus_dir, running):
    db = indexed_tree(corpus_dir)
    with read_only(db) as conn:
        assert conn.execute("PRAGMA page_size").fetchone()[0] == PAGE
    assert overwrite_pages(db, ("chunks", "representations", "chunks_fts_content")) > 3

    status = cli("status", "--dir", str(corpus_dir))
    incremental = cli("reindex", "--incremental", "--dir", str(corpus_dir))
    up = running("--dir", str(corpus_dir), "--auth", "none")
    up_code = up.proc.wait(120)
    rebuilt = cli("reindex", "--dir", str(corpus_dir))
    after = cli("status", "--dir", str(corpus_dir))

    assert_named(status, "STORE_CORRUPT", 5)
    assert "Indexing:" not in status.stdout
    assert_named(incremental, "STORE_CORRUPT", 5)
    assert up_code == 5 and "ERROR: STORE_CORRUPT:" in up.stderr and "Traceback" not in up.stderr
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "moved it aside as meta.sqlite.corrupt-" in rebuilt.stdout + rebuilt.stderr
    assert len(list(db.parent.glob("meta.sqlite.corrupt-*"))) == 1
    assert after.returncode == 0 and "Documents: 42" in after.stdout, after.stdout + after.stderr


def scramble_lexical_index(db: Path) -> None:
    """Random bytes in the full-text index's segments: every page stays a
    well-formed b-tree page (``PRAGMA quick_check`` says ok), the index's
    own data is garbage (SQLite answers "database disk image is malformed")."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("UPDATE chunks_fts_data SET block = randomblob(length(block)) WHERE id > 10")
        conn.commit()
        assert conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]


def test_damage_met_by_a_query_is_store_corrupt_on_every_surface_and_healthz_is_not_ok(corpus_dir, running):
    db = indexed_tree(corpus_dir)
    up = running("--dir", str(corpus_dir), "--auth", "none", "--no-index")
    server = Server(corpus_dir, up.url(), None, up.proc)
    base = server.base
    assert httpx.get(base + "/healthz", timeout=30, verify=TLS).status_code == 200
    scramble_lexical_index(db)

    rest = httpx.post(base + "/api/v1/search", json={"query": "alpha beta", "k": 5}, timeout=30, verify=TLS)
    session = server.initialize()
    tool = server.call(session, "dir2mcp.search", {"query": "gamma delta", "k": 5})
    health = httpx.get(base + "/healthz", timeout=30, verify=TLS)

    assert rest.status_code == 503, rest.text
    assert rest.json()["error"]["code"] == "STORE_CORRUPT"
    assert tool["isError"] and tool["structuredContent"]["error"]["code"] == "STORE_CORRUPT"
    assert "malformed" in tool["structuredContent"]["error"]["message"]
    assert health.status_code == 503
    assert health.json()["checks"]["database"]["code"] == "STORE_CORRUPT"
    assert "INTERNAL_ERROR" not in rest.text + str(tool)


# -- a full disk ------------------------------------------------------------------


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str):
    """A tmpfs of ``size`` at ``path`` (root only), unmounted afterwards."""
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path) -> Path:
    """Write one file until the file system is full; returns it."""
    filler = path / "filler"
    chunk = b"\0" * 65536
    with filler.open("wb") as handle:
        while True:
            try:
                handle.write(chunk)
                handle.flush()
            except OSError:
                break
        with contextlib.suppress(OSError):
            handle.flush()
    # what the buffer still held is lost with the full disk: the file is closed either way
    return filler


def big_tree(root: Path, files: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        lines = "\n".join(f"word{i}x{j} alpha{j} beta{i + j} gamma{j * i}" for j in range(80))
        (root / f"doc{i}.md").write_text(f"# Document {i}\n\n{lines}\n")


def test_full_disk_reindex_exits_6_in_the_file_system_s_words(tmp_path):
    big_tree(tmp_path / "root", 300)
    with small_tmpfs(tmp_path / "state", "2m") as state:
        result = cli("reindex", "--dir", str(tmp_path / "root"), "--state-dir", str(state), "--quiet")

    assert_named(result, "STATE_NOT_WRITABLE", 6)
    assert "database or disk is full" in result.stderr or "No space left on device" in result.stderr
    assert "TransactionManagementError" not in result.stderr


def documents_in(db: Path) -> int:
    with read_only(db) as conn:
        return conn.execute("SELECT count(*) FROM documents WHERE deleted = 0").fetchone()[0]


def test_live_sync_keeps_what_a_full_disk_refused_counts_it_and_writes_it_when_space_returns(
    tmp_path, running
):
    root = tmp_path / "root"
    big_tree(root, 3)
    with small_tmpfs(tmp_path / "state", "8m") as state:
        up = running("--dir", str(root), "--state-dir", str(state), "--json", "--auth", "none")
        up.event("watch_ready")
        filler = fill(state)
        big_tree(root / "added", 68)

        failed = up.event("store_write_failed")
        waiting = wait_until(
            lambda: up.rest("/api/v1/stats").json()["indexer"]["unwritten"], message="stats counting it"
        )
        assert documents_in(state / "meta.sqlite") == 3
        status = wait_until(
            lambda: (
                (found := cli("status", "--dir", str(root), "--state-dir", str(state))).returncode == 0
                and "not yet written" in found.stdout
                and found
            ),
            message="status counting what waits",
        )
        filler.unlink()
        up.event("store_write_landed", timeout=120)
        wait_until(lambda: documents_in(state / "meta.sqlite") == 3 + 68, message="every added file stored")
        after = up.rest("/api/v1/stats").json()["indexer"]["unwritten"]
        assert up.stop() == 0, up.stderr
        reserve_left = (state / "locks" / "reserve").exists()

    assert failed["code"] == "STATE_NOT_WRITABLE"
    assert "database or disk is full" in failed["message"] or "No space left" in failed["message"]
    assert waiting is not None and waiting["paths"] >= 1 and waiting["code"] == "STATE_NOT_WRITABLE"
    assert "retried until they land (STATE_NOT_WRITABLE: " in status.stdout
    assert after is None
    assert not reserve_left


# -- a read-only state directory ---------------------------------------------------


def test_status_and_up_no_index_serve_a_read_only_state_directory_and_write_nothing(
    corpus_dir, tmp_path, running
):
    make_tree(corpus_dir, files=2)
    with small_tmpfs(tmp_path / "state", "8m") as state:
        built = cli("reindex", "--dir", str(corpus_dir), "--state-dir", str(state), "--quiet")
        assert built.returncode == 0, built.stderr
        token = (state / "secret.token").read_text().strip()
        remounted = subprocess.run(["mount", "-o", "remount,ro", str(state)], capture_output=True)
        assert remounted.returncode == 0, remounted.stderr
        before = sorted((path.name, path.stat().st_mtime_ns) for path in state.iterdir())

        status = cli("status", "--dir", str(corpus_dir), "--state-dir", str(state))
        up = running("--dir", str(corpus_dir), "--state-dir", str(state), "--no-index")
        server = Server(corpus_dir, up.url(), token, up.proc)
        session = server.initialize()
        found = server.call(session, "dir2mcp.search", {"query": "handler_1", "k": 3})
        code = up.stop()
        after = sorted((path.name, path.stat().st_mtime_ns) for path in state.iterdir())

    assert status.returncode == 0, status.stderr
    assert "Documents: 4" in status.stdout and "STATE_NOT_WRITABLE" not in status.stderr
    assert not found.get("isError"), found
    assert any(hit["rel_path"] == "src/mod1.py" for hit in found["structuredContent"]["hits"])
    assert "is read-only: serving a private copy of its index" in up.stdout + up.stderr
    assert code == 0, up.stderr
    assert after == before


def test_up_no_index_on_a_read_only_state_directory_maps_its_dense_shards(corpus_dir, tmp_path, running):
    """The private copy of a read-only state directory links the dense
    index's full shards (rag.shard_vectors) as it links the index's file:
    without them the saved index was refused and built again in memory."""
    make_tree(corpus_dir, files=6)
    env = {"DIR2MCP_EMBED__PROVIDER": "local", "DIR2MCP_RAG__SHARD_VECTORS": "2"}
    with small_tmpfs(tmp_path / "state", "64m") as state:
        built = cli("reindex", "--dir", str(corpus_dir), "--state-dir", str(state), "--quiet", env=env)
        assert built.returncode == 0, built.stderr
        shards = sorted(path.name for path in state.glob("vectors_code.hnsw.[0-9]*"))
        token = (state / "secret.token").read_text().strip()
        remounted = subprocess.run(["mount", "-o", "remount,ro", str(state)], capture_output=True)
        assert remounted.returncode == 0, remounted.stderr
        up = running("--dir", str(corpus_dir), "--state-dir", str(state), "--no-index", env=env)
        server = Server(corpus_dir, up.url(), token, up.proc)
        session = server.initialize()
        found = server.call(session, "dir2mcp.search", {"query": "handler_1", "k": 3})
        code = up.stop()

    assert len(shards) >= 2, shards
    assert not found.get("isError"), found
    assert found["structuredContent"]["dense"]["status"] == "ok", found["structuredContent"]["dense"]
    assert "is read-only: serving a private copy of its index" in up.stdout + up.stderr
    assert "rebuilding vectors_code.hnsw" not in up.stdout + up.stderr
    assert code == 0, up.stderr
