"""An index written in an older lexical format is rebuilt when a process
opens it (migration 0019_lexical_head: one column -> head and body), in real
processes on a real state directory, as a user's index is at the first start
of a new version; a process already reading the index goes on searching the
old table while the rebuild runs (SQLite's WAL: the rebuild neither waits
for it nor changes what it reads until its transaction ends)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.mcp_http import REPO, base_env
from tests.test_cli import cli
from tests.test_lexical import CONSOLE

#: Opens the store of argv[1] (the root) as every command does, then runs
#: the step named by argv[2], printing a JSON line.
SCRIPT = textwrap.dedent(
    """
    import importlib, json, sys
    from pathlib import Path
    from dir2mcp_site import bootstrap
    root = sys.argv[1]
    bootstrap.prepare(["--dir", root])
    import django
    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from corpus import slices
    from corpus.index import lexical
    from corpus.models import Chunk, with_context
    from corpus.store import MIGRATIONS_KEY, open_store, set_setting
    from kernel.state import StateDir
    open_store(StateDir(Path(root) / ".dir2mcp"))

    def columns():
        with connection.cursor() as cursor:
            cursor.execute("SELECT name FROM pragma_table_info('chunks_fts')")
            return [row[0] for row in cursor.fetchall()]

    def head_hits():
        # the documented functions of settings.ts whose name the head column holds
        with connection.cursor() as cursor:
            names = 'head : ("loadsettings" OR "savesettings")'
            cursor.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH %s", [names])
            return len(cursor.fetchall())

    def first_lines(hits):
        ids = [cid for cid, _ in hits]
        rows = Chunk.objects.filter(chunk_id__in=ids).values_list("chunk_id", *slices.FIELDS)
        texts = dict(slices.texts(rows, 1))
        return [texts[cid].strip().split("(")[0] for cid in ids]

    if sys.argv[2] == "make-old":
        # The table as 0014 left it (one column), holding every live chunk,
        # and the database recording no 0019.
        old = importlib.import_module("corpus.migrations.0014_contentless_fts")
        rows = Chunk.objects.filter(deleted=False).values_list("chunk_id", "context", *slices.FIELDS)
        live = slices.texts(rows, 2)
        # back to before 0019: the later migrations are unapplied too, as on a database that old
        call_command("migrate", "corpus", "0018_drop_symbol_name_index", verbosity=0)
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE chunks_fts")
            cursor.execute(old.CREATE_SQL)
            cursor.executemany(
                "INSERT INTO chunks_fts_contentless(rowid, body) VALUES (%s, %s)",
                [(cid, lexical.index_text(with_context(context, text))) for cid, context, text in live],
            )
            cursor.execute("ALTER TABLE chunks_fts_contentless RENAME TO chunks_fts")
            match = '"syntax" OR "error"'
            cursor.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH %s ORDER BY rank", [match])
            old_hits = [(row[0], 0.0) for row in cursor.fetchall()]
        set_setting(MIGRATIONS_KEY, "older migration files")
        print(json.dumps({"columns": columns(), "old": first_lines(old_hits)}))
    elif sys.argv[2] == "make-v2":
        # The table as 0019 left it: a code chunk's head its first line that
        # is neither blank nor a decorator, a comment's first line included.
        def v2_columns(context, text, kind):
            if kind != "code":
                return "", lexical.index_text(f"{context}\\n{text}" if context else text)
            lines = text.split("\\n")
            first = 0
            while first < len(lines) - 1 and lines[first].lstrip()[:1] in ("", "@"):
                first += 1
            head = "\\n".join(lines[: first + 1])
            head = f"{context}\\n{head}" if context else head
            return lexical.index_text(head), lexical.index_text("\\n".join(lines[first + 1 :]))
        live = Chunk.objects.filter(deleted=False)
        rows = slices.texts(live.values_list("chunk_id", "context", "index_kind", *slices.FIELDS), 3)
        call_command("migrate", "corpus", "0019_lexical_head", verbosity=0)  # 0020 and later unapplied
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE chunks_fts")
            cursor.execute(lexical.create_sql())
            cursor.executemany(
                "INSERT INTO chunks_fts(rowid, head, body) VALUES (%s, %s, %s)",
                [(cid, *v2_columns(ctx, text, kind)) for cid, ctx, kind, text in rows],
            )
        set_setting(MIGRATIONS_KEY, "older migration files")
        print(json.dumps({"heads": head_hits()}))
    elif sys.argv[2] == "heads":
        print(json.dumps({"heads": head_hits(), "rows": lexical.live_count()}))
    else:
        hits = lexical.search("Display the syntax error that just occurred.", limit=3)
        live = Chunk.objects.filter(deleted=False).count()
        found = {"first": first_lines(hits), "rows": lexical.live_count(), "live": live}
        print(json.dumps({"columns": columns(), **found}))
    """
)


def reindex(root: Path) -> None:
    indexed = cli("reindex", "--dir", str(root), timeout=300)
    assert indexed.returncode == 0, indexed.stderr


def run(root: Path, step: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(root), step],
        cwd=REPO,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX state directory")
def test_an_index_of_the_one_column_format_is_rebuilt_when_a_process_opens_it(corpus_dir):
    (corpus_dir / "console.py").write_text(CONSOLE)
    reindex(corpus_dir)

    old = run(corpus_dir, "make-old")
    # A process already serving the index reads it while another rebuilds
    # it: its read transaction keeps the old table until it ends.
    db = corpus_dir / ".dir2mcp" / "meta.sqlite"
    match = "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH '\"syntax\"' ORDER BY rank"
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as reader:
        reader.execute("BEGIN")
        before = reader.execute(match).fetchall()
        opened = run(corpus_dir, "search")
        during = reader.execute(match).fetchall()
        reader.execute("COMMIT")
        after = reader.execute("SELECT name FROM pragma_table_info('chunks_fts')").fetchall()

    assert old["columns"] == ["body"] and "def run_source" in old["old"]
    assert before == during and len(before) >= 2
    assert [name for (name,) in after] == ["head", "body"]
    assert opened["columns"] == ["head", "body"]
    assert opened["rows"] == opened["live"] > 20
    assert opened["first"] == ["def show_syntax_error", "def run_source", "def run_code"]


SETTINGS_TS = """\
/**
 * Reads the configuration file the user chose.
 */
export function loadSettings(path: string): string {
  return path.trim();
}

// Writes them back where they came from.
// Keeps a copy beside them first.
export function saveSettings(path: string, text: string): number {
  return path.length + text.length;
}
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX state directory")
def test_an_index_whose_heads_are_doc_comments_is_rebuilt_when_a_process_opens_it(corpus_dir):
    """Before 0020 a documented unit's head (weighed 3 times its body) was
    the comment's first line, ``/**``, not the line naming the function."""
    (corpus_dir / "settings.ts").write_text(SETTINGS_TS)
    reindex(corpus_dir)

    old = run(corpus_dir, "make-v2")
    opened = run(corpus_dir, "heads")

    assert old["heads"] == 0
    assert opened["heads"] == 2 and opened["rows"] >= 2
