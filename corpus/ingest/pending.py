"""What live sync has seen change and not yet written (issue #37 item 4).

The watcher's batches wait in memory, in the process that indexes; an
answer may come from another one (a serving-only ``up --no-index``, a
second server on the same database). So the watcher keeps the waiting paths
here and records their count in the database (the :data:`LIVE_SYNC_KEY`
setting), where :mod:`corpus.freshness` reads it for every answer.

Each path carries the number of the last batch that named it. A path is
written once the indexer has applied a batch at least that new: a file
changed again while its first change is being applied stays pending.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterable

from corpus.security import ExclusionEngine
from corpus.store import get_setting, set_setting
from kernel import errors

log = logging.getLogger(__name__)

#: The setting holding ``{"pending", "pid", "host", "updated_unix"}``.
LIVE_SYNC_KEY = "live_sync"


class PendingChanges:
    """The paths the watcher saw change and the indexer has not yet written.

    The watch thread calls :meth:`saw`, the indexing thread :meth:`taken`
    and :meth:`written`, and both :meth:`publish`. Only a path ``engine``
    would index is counted: the count is in every answer, and an edit to a
    file no tool may read (``.env``, a secret-named file, ``path_excludes``)
    must not show in it.
    """

    def __init__(self, engine: ExclusionEngine) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        #: path -> the number of the last batch that named it
        self._paths: dict[str, int] = {}
        self._batches = 0
        #: the newest batch handed to the indexer
        self._taken = 0
        self._published: int | None = None
        #: one publisher at a time, so the last count written is the latest
        self._publishing = threading.Lock()

    def saw(self, rel_paths: Iterable[str]) -> int:
        """Record a batch of changed paths; its number, for :meth:`taken`."""
        counted = [rel_path for rel_path in rel_paths if self._indexable(rel_path)]
        with self._lock:
            self._batches += 1
            for rel_path in counted:
                self._paths[rel_path] = self._batches
            return self._batches

    def taken(self, batch: int) -> None:
        """The indexer took batch number ``batch`` (and every one before it)."""
        with self._lock:
            self._taken = max(self._taken, batch)

    def written(self, rel_paths: Iterable[str] | None = None) -> None:
        """These paths (None: every path, after a walk of the whole tree)
        are in the index as of the newest batch taken."""
        with self._lock:
            for rel_path in list(self._paths) if rel_paths is None else rel_paths:
                if self._paths.get(rel_path, self._taken + 1) <= self._taken:
                    del self._paths[rel_path]

    def _indexable(self, rel_path: str) -> bool:
        """Whether the policy would index ``rel_path`` (judged by its path,
        as a walk judges it before reading); a path it cannot judge is not counted."""
        try:
            return self._engine.excluded_reason(rel_path) is None
        except (errors.Dir2mcpError, OSError, ValueError):
            return False

    @property
    def count(self) -> int:
        return len(self._paths)

    def publish(self) -> None:
        """Record the count in the database when it changed since last
        recorded; a store that refuses the write is asked again next time."""
        with self._publishing:
            count = self.count
            if count == self._published:
                return
            try:
                record_pending(count)
            except Exception as exc:  # bookkeeping must not stop the watch: a busy or full store
                log.debug("pending changes not recorded: %s", exc)
                return
            self._published = count


def record_pending(count: int) -> None:
    state = {"pending": count, "pid": os.getpid(), "host": socket.gethostname(), "updated_unix": time.time()}
    set_setting(LIVE_SYNC_KEY, json.dumps(state))


def pending_count() -> int:
    """The count live sync last recorded (0 when it never ran here)."""
    raw = get_setting(LIVE_SYNC_KEY)
    try:
        found = json.loads(raw) if raw else {}
        return max(0, int(found.get("pending", 0)))
    except (ValueError, TypeError, AttributeError):
        return 0
