"""Live sync: re-index changed files and tombstone deleted ones.

Uses watchfiles (inotify/FSEvents, with a polling fallback). Changes are
debounced into batches; each batch re-indexes just the touched paths. A
change to a ``.gitignore`` changes what is excluded, so it triggers an
incremental walk of the whole tree instead.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import watchfiles

from corpus.config import Config
from corpus.embedding import check_models
from corpus.events import Reporter
from corpus.ingest.pipeline import Indexer
from corpus.providers.base import Embedder
from corpus.security import DEFAULT_IGNORED_DIRS
from corpus.state import IndexLock, StateDir

log = logging.getLogger(__name__)

DEBOUNCE_MS = 400


def _relative(root: Path, path: str) -> str | None:
    try:
        rel = Path(path).relative_to(root).as_posix()
    except ValueError:
        return None
    return None if rel in ("", ".") else rel


class _Filter(watchfiles.DefaultFilter):
    """Drop events inside the state directory and default-ignored dirs."""

    def __init__(self, state_dir: Path):
        super().__init__(ignore_dirs=tuple(DEFAULT_IGNORED_DIRS))
        self.state_dir = str(state_dir)

    def __call__(self, change: watchfiles.Change, path: str) -> bool:
        if path == self.state_dir or path.startswith(self.state_dir + os.sep):
            return False
        return super().__call__(change, path)


def watch_directory(
    root: Path,
    *,
    state: StateDir,
    config: Config,
    reporter: Reporter | None = None,
    stop: threading.Event | None = None,
    initial: bool = True,
    ready: threading.Event | None = None,
    embedder: Embedder | None = None,
) -> None:
    """Hold the index lock, index once, then follow changes until ``stop``."""
    stop = stop or threading.Event()
    with IndexLock(state):
        if embedder is not None:
            check_models(embedder, state)
        if initial:
            Indexer(root, state, config, reporter=reporter, stop=stop, embedder=embedder).run()
        changes = watchfiles.watch(
            root,
            watch_filter=_Filter(state.path),
            debounce=DEBOUNCE_MS,
            step=50,
            stop_event=stop,
            rust_timeout=500,
            yield_on_timeout=True,
            force_polling=os.environ.get("DIR2MCP_WATCH_POLLING") == "1" or None,
        )
        for batch in changes:
            # The first (possibly empty) batch means the OS watch is in place.
            if ready is not None:
                ready.set()
            if stop.is_set():
                break
            if batch:
                _apply(Indexer(root, state, config, reporter=reporter, stop=stop, embedder=embedder), batch)


def _apply(indexer: Indexer, batch) -> None:
    rel_paths = {rel for _, path in batch if (rel := _relative(indexer.root, path))}
    if not rel_paths:
        return
    try:
        if any(Path(p).name == ".gitignore" for p in rel_paths):
            indexer.run()
        else:
            indexer.run_paths(rel_paths)
    except Exception:  # the watcher must outlive one failed batch
        log.exception("live sync failed for %d paths", len(rel_paths))
