"""The file watch within the kernel's inotify limit, and polling past it (issue #37).

The limit is an input: the kernel's file (``inotify_limit`` reads whichever
file it is pointed at) or ``DIR2MCP_WATCH_MAX_DIRS``; a real ``watch`` process
given a limit below its tree's directories polls, says so, and still syncs.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from corpus.ingest import watch_limits
from tests.support import wait_until
from tests.test_watch import live_docs
from tests.up_process import logged_event

REPO = Path(__file__).resolve().parent.parent


def tree(root: Path, dirs: int) -> Path:
    for index in range(dirs):
        (root / f"d{index}").mkdir(parents=True)
        (root / f"d{index}" / "f.txt").write_text(f"file {index}\n")
    return root


def test_the_limit_is_read_from_the_kernels_file(tmp_path: Path) -> None:
    limit_file = tmp_path / "max_user_watches"
    limit_file.write_text("8192\n")

    assert watch_limits.inotify_limit(limit_file) == 8192
    assert watch_limits.inotify_limit(tmp_path / "absent") is None
    limit_file.write_text("many\n")
    assert watch_limits.inotify_limit(limit_file) is None


def test_dir2mcp_watch_max_dirs_sets_a_lower_cap(tmp_path: Path) -> None:
    limit_file = tmp_path / "max_user_watches"
    limit_file.write_text("65536\n")

    assert watch_limits.configured_limit({"DIR2MCP_WATCH_MAX_DIRS": "40"}, limit_file) == 40
    assert watch_limits.configured_limit({}, limit_file) == 65536
    assert watch_limits.configured_limit({"DIR2MCP_WATCH_MAX_DIRS": "x"}, limit_file) == 65536


def test_counting_stops_one_past_the_limit(tmp_path: Path) -> None:
    root = tree(tmp_path / "t", 50)

    assert watch_limits.count_dirs(root) == 51
    assert watch_limits.count_dirs(root, stop_after=5) == 6


def test_a_tree_over_the_limit_is_polled_and_one_within_it_is_watched(tmp_path: Path) -> None:
    root = tree(tmp_path / "t", 10)

    over = watch_limits.plan(root, limit=4)
    within = watch_limits.plan(root, limit=11)

    assert over.polling and "more than 4 directories" in over.reason
    assert "fs.inotify.max_user_watches" in over.reason and over.poll_ms >= watch_limits.POLL_MS_MIN
    assert not within.polling
    assert not watch_limits.plan(root, limit=None).polling  # no limit known: the OS watch


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        pytest.param(RuntimeError("OS file watch limit reached."), True, id="watchfiles-words"),
        pytest.param(OSError(errno.ENOSPC, "No space left on device"), True, id="enospc"),
        pytest.param(OSError(errno.EACCES, "Permission denied"), False, id="eacces"),
        pytest.param(RuntimeError("invalid utf-8 in a file name"), False, id="other-failure"),
    ],
)
def test_a_failure_on_the_limit_is_told_from_other_failures(exc, expected) -> None:
    assert watch_limits.is_limit_error(exc) is expected


def warnings(log: Path) -> list[dict]:
    lines = log.read_text(errors="replace").splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{") and line.endswith("}")]
    return [record["data"] for record in records if record.get("event") == "warning"]


@pytest.mark.slow
def test_a_watch_past_the_limit_polls_says_so_and_still_syncs(corpus_dir: Path, tmp_path: Path) -> None:
    tree(corpus_dir, 4)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIR2MCP_")}
    env.update(DIR2MCP_EMBED__PROVIDER="none", DIR2MCP_WATCH_MAX_DIRS="2")
    log = tmp_path / "watch.ndjson"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "manage.py"), "watch", "--dir", str(corpus_dir), "--json"],
            env=env,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        wait_until(lambda: logged_event(log, "watch_ready"), timeout=60, message="the watch_ready event")
        (warning,) = [w for w in warnings(log) if w.get("kind") == "watch_polling"]
        assert "more than 2 directories" in warning["message"]

        (corpus_dir / "d1" / "new.txt").write_text("written while polled\n")
        (corpus_dir / "d0" / "f.txt").unlink()

        wait_until(
            lambda: "d1/new.txt" in (d := live_docs(corpus_dir)) and "d0/f.txt" not in d,
            message="the polled watch to sync a new and a deleted file",
        )
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert proc.returncode == 0
