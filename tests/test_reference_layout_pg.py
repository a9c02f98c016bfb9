"""The reference layout of migration 0023 on PostgreSQL, with an index
holding references: converted back to the layout before it (``migrate
corpus 0022``) and forward again when a process opens it, the
``dir2mcp.references`` answers the same each way. Real processes on a
real database, as tests/test_reference_layout.py does on SQLite."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.mcp_http import REPO, base_env
from tests.test_cli import cli
from tests.test_reference_layout import CODE, NAMES, SCRIPT

pytestmark = pytest.mark.slow


def step(root: Path, name: str, url: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(root), name, json.dumps(NAMES)],
        cwd=REPO,
        env=base_env(DATABASE_URL=url),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def columns(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'symbol_references' ORDER BY ordinal_position"
        ).fetchall()
    return [name for (name,) in rows]


def test_references_on_postgresql_survive_the_conversion_both_ways(corpus_dir, pg_database):
    for rel, text in CODE.items():
        (corpus_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (corpus_dir / rel).write_text(text)
    done = cli("reindex", "--dir", str(corpus_dir), env={"DATABASE_URL": pg_database}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert columns(pg_database) == ["document_id", "name_id", "lines"]

    new = step(corpus_dir, "make-old", pg_database)  # reads, then migrates back to 0022
    assert columns(pg_database) == ["id", "name", "lines", "document_id"]
    opened = step(corpus_dir, "read", pg_database)  # the open converts it again
    assert columns(pg_database) == ["document_id", "name_id", "lines"]

    assert len(new["uses"]["read_block"]) == 6 and new["uses"]["fd"]
    assert opened["uses"] == new["uses"]

    # the writer adds to the converted table: a changed file's rows replaced
    (corpus_dir / "src/net.c").write_text(CODE["src/net.c"] + "int more(int fd) { return read_block(fd); }\n")
    done = cli("reindex", "--dir", str(corpus_dir), env={"DATABASE_URL": pg_database}, timeout=300)
    assert done.returncode == 0, done.stderr
    after = step(corpus_dir, "read", pg_database)["uses"]
    assert len(after["read_block"]) == 7 and after["fd"] != new["uses"]["fd"]
