"""The SQLite write-ahead log stays bounded while searches read through a
pass (issue #37: 231 MiB on the kernel, corpus/wal.py).

``reindex`` runs in its own process, as the indexing child does, with the
limit set to 1 MiB (``DIR2MCP_SQLITE_WAL_MIB``), while two connections in
this process read as a busy server does: each holds a read transaction
until the writer has committed once since it began (or a bounded number of
polls, one request's worth), and the next begins before it ends, so some
reader always holds a snapshot older than the last commit. SQLite's own
checkpoint can then never restart the log; the writer's must.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from pathlib import Path

import pytest

from tests.test_cli import cli

pytestmark = pytest.mark.timeout(600)

LIMIT_MIB = 1
FILES = 1400
#: polls of 5 ms a read transaction waits for a commit at most: one slow request
POLLS = 200


def module(i: int) -> str:
    body = "\n".join(
        f"def handler_{i}_{j}(request_{j}, payload_{i}):\n"
        f'    """Handle request {j} of module {i}: parse, validate and store the payload."""\n'
        f"    value = parse_payload_{j}(payload_{i}) + {i * j}\n"
        f"    return store_result_{i}(request_{j}, value)\n"
        for j in range(5)
    )
    return f'"""Module {i} of the generated tree."""\n\n{body}'


def stamp(db: Path) -> tuple[int, int]:
    """What changes when the writer commits: the log."""
    log = Path(f"{db}-wal").stat()
    return log.st_mtime_ns, log.st_size


class Readers:
    """Two connections taking turns at holding a read transaction, overlapping."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.stop = threading.Event()
        self.turn = [threading.Event(), threading.Event()]
        self.transactions = 0
        self.peak = 0

    def run(self, me: int) -> None:
        other = 1 - me
        with contextlib.closing(sqlite3.connect(self.db, isolation_level=None, timeout=30)) as conn:
            while not self.stop.is_set():
                if not self.turn[me].wait(0.05):
                    continue
                self.turn[me].clear()
                conn.execute("BEGIN")
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the snapshot is taken here
                began = stamp(self.db)
                self.turn[other].set()  # the other reader begins while this one holds its snapshot
                for _ in range(POLLS):
                    if stamp(self.db) != began or self.stop.is_set():
                        break
                    self.stop.wait(0.005)
                self.peak = max(self.peak, Path(f"{self.db}-wal").stat().st_size)
                conn.execute("COMMIT")
                self.transactions += 1


def test_log_stays_bounded_while_readers_hold_snapshots(tmp_path: Path) -> None:
    root, state = tmp_path / "tree", tmp_path / "state"
    db = state / "meta.sqlite"
    # the writer's checkpoints, done or refused, are logged at INFO (corpus/wal.py)
    env = {"DIR2MCP_SQLITE_WAL_MIB": str(LIMIT_MIB), "DIR2MCP_LOG_LEVEL": "INFO"}
    root.mkdir()
    (root / "first.py").write_text(module(FILES))
    # a first pass of one file makes the database and its log, for the readers to open
    first = cli("reindex", "--dir", str(root), "--state-dir", str(state), env=env)
    assert first.returncode == 0, first.stderr
    for i in range(FILES):
        path = root / f"pkg{i % 10}" / f"mod_{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(module(i))
    readers = Readers(db)
    threads = [threading.Thread(target=readers.run, args=(me,)) for me in (0, 1)]
    for thread in threads:
        thread.start()
    readers.turn[0].set()
    try:
        done = cli(
            "reindex", "--incremental", "--dir", str(root), "--state-dir", str(state), env=env, timeout=500
        )
    finally:
        readers.stop.set()
        for thread in threads:
            thread.join()
    assert done.returncode == 0, done.stderr
    limit = LIMIT_MIB * 2**20
    assert readers.transactions > FILES // 64, readers.transactions  # readers held snapshots all along
    checkpoints = [line for line in done.stderr.splitlines() if "corpus.wal write-ahead log at" in line]
    done_ones = sum("checkpointed" in line for line in checkpoints)
    assert done_ones >= 1, checkpoints  # the log restarted, readers or not
    # The readers overlap, so one of SQLite's read marks can stay locked
    # through a checkpoint's whole wait: it is refused, and the next batch
    # tries again. Between two checkpoints that ran, the log grows by a
    # batch per check (one that took it past the limit and one per refusal);
    # a batch of this tree writes under half the limit, so the log stays
    # under the limit and one more for each check in the longest run of
    # refusals, and one to spare. Without the checkpoints it grows with the
    # pass: about 10 MiB here.
    refusals = longest = 0
    for line in checkpoints:
        refusals = 0 if "checkpointed" in line else refusals + 1
        longest = max(longest, refusals)
    bound = (3 + longest) * limit
    assert db.stat().st_size > 4 * limit  # the pass wrote more than a bound of a few refusals
    assert readers.peak <= bound, (readers.peak, bound, checkpoints)
    log = Path(f"{db}-wal")  # gone once the last connection closed
    assert not log.exists() or log.stat().st_size <= bound
