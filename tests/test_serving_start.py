"""What `up` does before its first answer (issue #37: `initialize` in about
a second at any size). Structural checks only: what is imported on the way
to serving, and a large index's integrity check left until after it."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys

import httpx
import pytest

from corpus.store import SERVING_CHECK_BYTES
from tests.test_cli import REPO, base_env
from tests.test_damaged_state import indexed_tree, overwrite_pages

#: Imported by indexing, extraction, embedding or a remote provider, never by
#: serving `initialize`.
NOT_BEFORE_SERVING = (
    "httpx",
    "tree_sitter",
    "onnxruntime",
    "tokenizers",
    "PIL",
    "celery",
    "watchfiles",
    "corpus.ingest.prepare",
    "corpus.ingest.watch",
    "corpus.ingest.pipeline",
    "corpus.navigation.symbols",
)

SERVING_PATH = """
import json, sys
from dir2mcp_site import bootstrap
bootstrap.prepare(["up", "--dir", sys.argv[1]])
import django
django.setup()
import daphne.server, dir2mcp_site.asgi, mcp_gateway.management.commands.up, mcp_gateway.server
print(json.dumps(sorted(sys.modules)))
"""


def test_serving_imports_no_indexing_extraction_or_model_library(tmp_path):
    loaded = subprocess.run(
        [sys.executable, "-c", SERVING_PATH, str(tmp_path)],
        cwd=REPO,
        env=base_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    modules = set(json.loads(loaded.stdout))

    assert "mcp_gateway.server" in modules
    assert sorted(modules.intersection(NOT_BEFORE_SERVING)) == []


@pytest.mark.slow
def test_a_large_damaged_index_is_served_then_stops_with_store_corrupt(corpus_dir, running):
    db = indexed_tree(corpus_dir)
    with contextlib.closing(sqlite3.connect(db)) as conn:  # past the size checked before serving
        conn.execute("CREATE TABLE filler (b BLOB)")
        megabytes = SERVING_CHECK_BYTES // 2**20
        conn.executemany("INSERT INTO filler VALUES (zeroblob(?))", [(2**20,)] * megabytes)
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert db.stat().st_size > SERVING_CHECK_BYTES
    overwrite_pages(db, ("chunks", "representations", "chunks_fts_content"))

    up = running("--dir", str(corpus_dir), "--auth", "none", "--json")
    url = up.url()
    with contextlib.suppress(httpx.HTTPError):  # answered, or refused as the server stops
        httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=30)
    code = up.proc.wait(120)

    assert code == 5, up.stdout + up.stderr
    assert '"code": "STORE_CORRUPT"' in up.stdout
    assert "Traceback" not in up.stderr
