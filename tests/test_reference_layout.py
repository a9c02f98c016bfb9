"""An index whose symbol references are in the layout before 0023 (a row
per file and name holding the name's text and its lines in decimal, a rowid
and two indexes) is converted when a process opens it: the names interned,
the rows keyed by (document, name id) ``WITHOUT ROWID``, the lines packed;
``dir2mcp.references`` answers the same. A conversion that fails partway
leaves the old layout whole (one transaction), with a message naming the
cause, and the next open converts it. In real processes on a real state
directory, as a user's index is at the first start of a new version."""

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

#: Opens the store of argv[1] (the root) as every command does, then runs
#: the step named by argv[2], printing a JSON line.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from dir2mcp_site import bootstrap
    root = sys.argv[1]
    bootstrap.prepare(["--dir", root])
    import django
    django.setup()
    from django.core.management import call_command
    from corpus.navigation import names
    from corpus.store import MIGRATIONS_KEY, open_store, set_setting
    from kernel.state import StateDir
    open_store(StateDir(Path(root) / ".dir2mcp"))

    def uses(wanted):
        # every use of each name, through the tool's own paging (2 a page)
        found = {}
        for name in wanted:
            hits, cursor = [], None
            while True:
                page = names.find_references(name, limit=2, cursor=cursor)
                for h in page["references"]:
                    hits.append([h["rel_path"], h["span"]["start_line"], h.get("enclosing", "")])
                cursor = page.get("next_cursor")
                if not cursor:
                    break
            found[name] = hits
        return found

    wanted = json.loads(sys.argv[3])
    if sys.argv[2] == "make-old":
        before = uses(wanted)
        call_command("migrate", "corpus", "0022_chunk_deleted_unix", verbosity=0)
        set_setting(MIGRATIONS_KEY, "older migration files")
        print(json.dumps({"uses": before}))
    else:
        print(json.dumps({"uses": uses(wanted)}))
    """
)

CODE = {
    "src/io.c": (
        "#include <stdio.h>\n"
        "static int read_block(int fd) { return fd; }\n"
        "int copy_file(int fd) {\n"
        "    int n = read_block(fd);\n"
        "    n += read_block(fd);\n"
        "    return n;\n"
        "}\n"
    ),
    "src/net.c": (
        "int read_block(int fd);\n"
        "int send_packet(int fd) {\n"
        "    return read_block(fd) + read_block(fd + 1);\n"
        "}\n"
        "int recv_packet(int fd) { return read_block(fd); }\n"
    ),
    "tools/run.py": (
        "from lib import read_block\n\n"
        "def main(path):\n"
        "    data = read_block(path)\n"
        "    return send_packet(data)\n"
    ),
}
NAMES = ["read_block", "send_packet", "fd"]


def run(root: Path, step: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(root), step, json.dumps(NAMES)],
        cwd=REPO,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def answer(root: Path, step: str) -> dict:
    done = run(root, step)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def layout(db: Path) -> dict:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        master = "SELECT {} FROM sqlite_master WHERE name = ?"
        return {
            "columns": [row[1] for row in conn.execute("PRAGMA table_info(symbol_references)")],
            "sql": conn.execute(master.format("sql"), ["symbol_references"]).fetchone()[0],
            "rows": sorted(conn.execute("SELECT * FROM symbol_references").fetchall()),
            "names": conn.execute(master.format("count(*)"), ["symbol_names"]).fetchone()[0],
            "applied": [
                name for (name,) in conn.execute("SELECT name FROM django_migrations WHERE app = 'corpus'")
            ],
        }


def indexed(root: Path) -> Path:
    for rel, text in CODE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    done = cli("reindex", "--dir", str(root), timeout=300)
    assert done.returncode == 0, done.stderr
    return root / ".dir2mcp" / "meta.sqlite"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX state directory")
def test_references_of_the_old_layout_are_converted_when_a_process_opens_the_index(corpus_dir):
    db = indexed(corpus_dir)
    old = answer(corpus_dir, "make-old")
    before = layout(db)

    opened = answer(corpus_dir, "read")
    after = layout(db)

    assert before["columns"] == ["id", "name", "lines", "document_id"] and before["names"] == 0
    assert ("read_block", "4 5") in {(name, lines) for _, name, lines, _ in before["rows"]}
    assert after["columns"] == ["document_id", "name_id", "lines"] and after["names"] == 1
    assert "WITHOUT ROWID" in after["sql"] and len(after["rows"]) == len(before["rows"])
    assert "0023_interned_references" in after["applied"]
    # every use, in the same order, paged the same
    assert opened["uses"] == old["uses"]
    assert len(old["uses"]["read_block"]) == 6 and old["uses"]["fd"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX state directory")
def test_a_conversion_that_fails_partway_leaves_the_old_layout_whole(corpus_dir):
    db = indexed(corpus_dir)
    old = answer(corpus_dir, "make-old")
    before = layout(db)
    # Something already holds the name of the index the conversion makes
    # last: it fails after the rows were copied and the old table dropped.
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE reference_name_doc (x)")
        conn.commit()

    failed = run(corpus_dir, "read")
    kept = layout(db)

    assert failed.returncode != 0
    assert "cannot be read (there is already a table named reference_name_doc)" in failed.stderr
    assert kept == before  # the old table, its rows, no names table, 0023 not recorded

    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("DROP TABLE reference_name_doc")
        conn.commit()
    assert answer(corpus_dir, "read")["uses"] == old["uses"]
    assert layout(db)["columns"] == ["document_id", "name_id", "lines"]
