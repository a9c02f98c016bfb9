"""The SQLite (FTS5) and PostgreSQL (tsvector) lexical backends agree.

One tree is indexed twice by `reindex`, into the state directory's SQLite
and into a fresh PostgreSQL database. For each query, both backends must
match the same chunks in each tier: every query term, then some. Within a
tier the order is each engine's own (BM25 on SQLite, ts_rank on
PostgreSQL), so sets are compared, not lists. The queries cover code
identifiers in their parts, English stop words that are also code words
(``for``, ``if``, ``is``), stems, accents and digits.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.test_cli import REPO, base_env, cli

pytestmark = pytest.mark.slow

QUERIES = [
    "for",
    "if is",
    "return",
    "parse_config",
    "ParseConfig",
    "config",
    "parsing",
    "uploads",
    "cafe",
    "café menu",
    "http server",
    "HTTPServer",
    "os.path.join",
    "path join",
    "retry 3",
    "v2 api",
    "the cache is invalidated",
    "invalidate caches",
    "token rotation session",
    "nothingmatchesthis",
]

FILES = {
    "src/config.py": (
        "def parse_config(path):\n    for line in open(path):\n        if line is None:\n"
        "            return {}\n    return ParseConfig(path)\n"
    ),
    "src/server.py": (
        "class HTTPServer:\n    def serve(self):\n        return os.path.join(self.root, 'index')\n"
        "\n\ndef retry(times=3):\n    return [attempt for attempt in range(times)]\n"
    ),
    "docs/cache.md": "# Caching\n\nThe cache is invalidated on every write. Invalidating caches is cheap.\n",
    "docs/uploads.md": "# Uploads\n\nEach upload is parsed, then parsing stops. See the v2 API.\n",
    "docs/menu.txt": "Café menu: crème brûlée, cafe au lait.\n",
    "notes/session.txt": "The session token rotation happens every 3 hours; rotating tokens is logged.\n",
    "data/rows.csv": "id,word\n1,for\n2,is\n3,join\n",
}

SNIPPET = """
import json, sys
from dir2mcp_site import bootstrap
bootstrap.prepare(["--dir", sys.argv[1]])
import django
django.setup()
from corpus.index.lexical import _backend, query_terms
from corpus.models import Chunk
backend = _backend()
where = {c.chunk_id: f"{c.representation.document.rel_path}#{c.ordinal}"
         for c in Chunk.objects.filter(deleted=False).select_related("representation__document")}
out = {}
for query in json.loads(sys.argv[2]):
    terms = query_terms(query)
    tiers = []
    for require_all in (True, False):
        hits = backend.query(terms, require_all=require_all, limit=1000, filter_sql="", params=[])
        tiers.append(sorted(where[chunk_id] for chunk_id, _ in hits))
    out[query] = tiers
print(json.dumps({"vendor": type(backend).__name__, "tiers": out}))
"""


def tiers(root, env: dict) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", SNIPPET, str(root), json.dumps(QUERIES)],
        cwd=REPO, env={**base_env(), **env}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def database(pg_database):
    return pg_database


def test_sqlite_and_postgres_match_the_same_chunks_in_each_tier(tmp_path, database):
    sqlite_root = tmp_path / "sqlite"
    for rel, text in FILES.items():
        (sqlite_root / rel).parent.mkdir(parents=True, exist_ok=True)
        (sqlite_root / rel).write_text(text)
    pg_root = tmp_path / "pg"
    shutil.copytree(sqlite_root, pg_root)
    pg = {"DATABASE_URL": database}
    for root, env in ((sqlite_root, {}), (pg_root, pg)):
        done = cli("reindex", "--dir", str(root), env={**env, "DATABASE_URL": env.get("DATABASE_URL", "")})
        assert done.returncode == 0, done.stderr

    on_sqlite = tiers(sqlite_root, {"DATABASE_URL": ""})
    on_postgres = tiers(pg_root, pg)
    assert (on_sqlite["vendor"], on_postgres["vendor"]) == ("SQLiteFTS5", "PostgresFTS")
    assert on_postgres["tiers"] == on_sqlite["tiers"]
    # The comparison has teeth: stop words and stems match, nonsense does not.
    assert on_sqlite["tiers"]["for"][0] and on_sqlite["tiers"]["if is"][0]
    assert "docs/uploads.md#0" in on_sqlite["tiers"]["parsing"][0]
    assert on_sqlite["tiers"]["nothingmatchesthis"] == [[], []]
