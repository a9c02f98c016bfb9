"""Re-indexing chosen documents from the admin (``DocumentAdmin``), in the background.

The work is the CLI's: the pipeline's ``run_paths`` under the index lock,
``mode="full"`` to re-read files even when unchanged (``reindex``), or
incremental to retry what failed (errored files are always re-read). The
lock is taken before the request returns, so the admin can say at once
when another process is indexing.

Under ``up`` the indexing child process holds the lock for the life of the
server: the request goes to it (``IndexerSupervisor.request_reindex``) and
runs there beside its live sync. With ``server.indexer: thread`` the
server's own live-sync thread holds the lock; then the work runs beside it
here, serialised with other admin runs by :data:`_admin_lock` (SQLite
transactions serialise the writes).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import connections

from corpus.ingest.lock import IndexLock
from corpus.ingest.pipeline import Indexer
from kernel import errors
from kernel.state import StateDir
from mcp_gateway import current
from mcp_gateway.context import Context

log = logging.getLogger(__name__)

_admin_lock = threading.Lock()


@dataclass(frozen=True)
class Started:
    paths: tuple[str, ...]
    #: the thread doing it here, or None when the indexing child does it
    thread: threading.Thread | None


def files_of(rel_paths: Iterable[str]) -> tuple[str, ...]:
    """The files to re-read: an archive member is re-read with its archive."""
    files = {path.rsplit("!/", 1)[0] if "!/" in path else path for path in rel_paths}
    return tuple(sorted(files))


def start(rel_paths: Iterable[str], *, full: bool, ctx: Context | None = None) -> Started:
    """Re-index ``rel_paths`` in a background thread; raises ``INDEX_LOCKED``
    when another process indexes."""
    ctx = ctx or current.get()
    paths = files_of(rel_paths)
    supervisor = getattr(ctx, "indexer", None)
    if supervisor is not None and supervisor.request_reindex(list(paths), full=full):
        return Started(paths, None)
    lock = _claim(ctx.state)
    thread = threading.Thread(
        target=_run, args=(ctx, paths, full, lock), name="dir2mcp-admin-reindex", daemon=True
    )
    thread.start()
    return Started(paths, thread)


def _claim(state: StateDir) -> IndexLock | None:
    """The index lock, or ``None`` when this process already holds it (its
    live sync, or an earlier admin run); ``INDEX_LOCKED`` for another process."""
    lock = IndexLock(state)
    try:
        lock.acquire()
    except errors.Dir2mcpError as exc:
        if exc.code != errors.INDEX_LOCKED or _holder(lock) != os.getpid():
            raise
        return None
    return lock


def _holder(lock: IndexLock) -> int:
    try:
        return int(lock.path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def _run(ctx: Context, paths: tuple[str, ...], full: bool, lock: IndexLock | None) -> None:
    try:
        with _admin_lock:
            if lock is None:  # an earlier admin run may have let go of it meanwhile
                lock = _claim(ctx.state)
            mode = "full" if full else "incremental"
            Indexer(ctx.root, ctx.state, ctx.config, mode=mode, embedder=ctx.embedder).run_paths(paths)
    except errors.Dir2mcpError as exc:
        log.warning("admin re-index of %d files not run: %s", len(paths), exc)
    except Exception:  # a background thread has nobody to raise to
        log.exception("admin re-index of %d files failed", len(paths))
    finally:
        if lock is not None:
            lock.release()
        connections.close_all()
