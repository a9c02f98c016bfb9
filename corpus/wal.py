"""SQLite's write-ahead log kept bounded while a pass writes (issue #37).

Every page a transaction commits is appended to ``meta.sqlite-wal``.
SQLite's automatic checkpoint (after a commit that leaves 1,000 pages in
the log) copies them back into the database, but it is PASSIVE: it stops
at the oldest snapshot a reader still holds, and the log starts again from
its beginning only once every frame has been copied and no reader uses
any. A server answering searches through a pass nearly always has one
reader whose snapshot is older than the last commit, so the log never
restarted and grew with all the pass wrote (231 MiB on the kernel against
32 MiB for an index nobody searched: docs/benchmarks.md).

So the writer, between two transactions, looks at the log's size
(:func:`bound`); past ``settings.SQLITE_WAL_LIMIT_BYTES``
(``DIR2MCP_SQLITE_WAL_MIB``) it runs a RESTART checkpoint: every frame is
copied, waiting up to :data:`CHECKPOINT_WAIT_MS` for the readers of older
snapshots to finish their request (new readers go on meanwhile), so that
the next commit writes the log from its start, and ``journal_size_limit``
(set on every connection, dir2mcp_site/settings.py) truncates the file back
to the limit. The log then stays within the limit and one transaction's
pages. A reader that holds its snapshot past that wait only delays it: the
next batch tries again. (Readers that overlap without a gap can keep one of
SQLite's read marks locked through the whole wait; each checkpoint, done or
refused, is logged at INFO.)
"""

from __future__ import annotations

import logging
from pathlib import Path

from django.conf import settings
from django.db import connection

log = logging.getLogger(__name__)

#: How long a checkpoint waits for the readers of older snapshots: those
#: begun before it and those begun while it copied, two requests at most (a
#: search under load takes a few seconds); past it the writer goes on and
#: tries again after its next transaction.
CHECKPOINT_WAIT_MS = 10_000


def log_path() -> Path | None:
    """The write-ahead log of this connection's SQLite database, or None
    (another database, or one in memory)."""
    if connection.vendor != "sqlite":
        return None
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA database_list")
        rows = cursor.fetchall()
    main = next((file for _, name, file in rows if name == "main"), "")
    return Path(f"{main}-wal") if main else None


def bound() -> bool:
    """Checkpoint the log in full when it has outgrown the limit (outside a
    transaction only); whether a checkpoint ran to the end."""
    if connection.in_atomic_block:
        return False
    path = log_path()
    try:
        size = path.stat().st_size if path is not None else 0
    except FileNotFoundError:
        return False
    if size <= settings.SQLITE_WAL_LIMIT_BYTES:
        return False
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout")
        (before,) = cursor.fetchone()
        cursor.execute(f"PRAGMA busy_timeout = {CHECKPOINT_WAIT_MS}")
        try:
            cursor.execute("PRAGMA wal_checkpoint(RESTART)")
            busy, frames, copied = cursor.fetchone()
        finally:
            cursor.execute(f"PRAGMA busy_timeout = {int(before)}")
    if busy:
        log.info(
            "write-ahead log at %d bytes: a reader held it (%d of %d frames copied)", size, copied, frames
        )
    else:
        log.info("write-ahead log at %d bytes: checkpointed, the next commit writes it from its start", size)
    return not busy
