"""Live sync: re-index changed files and tombstone deleted ones.

Uses watchfiles (inotify/FSEvents, with a polling fallback). Changes are
debounced into batches; each batch re-indexes just the touched paths. A
change to a ``.gitignore`` changes what is excluded, so it triggers an
incremental walk of the whole tree instead.

Alongside the batches, documents whose provider failed for a passing reason
(an outage, a timeout, a rate limit: their error ends with ``RETRYABLE_NOTE``)
are re-indexed by a retry pass with exponential backoff, so a provider that
recovers needs no file change and no restart. The pass goes through the
indexer's own change detection, which always re-processes a document in
``error``; what such a document had indexed before stays until the retry
succeeds.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import watchfiles
from django.db import connection

from corpus import store_faults
from corpus.events import Reporter
from corpus.index.dense.embedding import check_models
from corpus.ingest import watch_limits
from corpus.ingest.indexing import walking_indexer
from corpus.ingest.lock import IndexLock
from corpus.ingest.pending import PendingChanges
from corpus.ingest.pipeline import Indexer
from corpus.ingest.prepare import RETRYABLE_NOTE
from corpus.models import Document
from corpus.providers.base import Embedder
from corpus.security import (
    DEFAULT_IGNORED_DIRS,
    OUTPUT_DIR_NAMES,
    ExclusionEngine,
    is_within,
    relative_within,
)
from kernel import errors
from kernel.config import Config
from kernel.state import StateDir

log = logging.getLogger(__name__)

DEBOUNCE_MS = 400
#: A batch of at least this many paths starts a burst (a branch switch, an
#: unpacked archive): the batches that follow within SETTLE_SECONDS of each
#: other, up to SETTLE_MAX_SECONDS in all, join it in one pass (issue #37).
SETTLE_FROM = 50
SETTLE_SECONDS = 1.0
SETTLE_MAX_SECONDS = 20.0
#: The first retry of a retryable failure comes this long after it (seconds;
#: env DIR2MCP_RETRY_SECONDS), the next ones twice as long each, up to
#: RETRY_MAX_SECONDS while documents keep failing.
RETRY_SECONDS = 30.0
RETRY_MAX_SECONDS = 900.0
#: After the OS watch fails (watchfiles gives up for good on a file name that
#: is not valid UTF-8), it is set up again this long after (seconds), twice
#: as long after each failure in a row, up to WATCH_RESTART_MAX_SECONDS.
WATCH_RESTART_SECONDS = 1.0
WATCH_RESTART_MAX_SECONDS = 60.0
#: A batch meaning "changes may have been missed": the whole tree is walked.
RESCAN = "rescan"
#: What the watch hands on: watchfiles' changes, or RESCAN.
_Batch = set[tuple[watchfiles.Change, str]] | str


def _relative(root: Path, path: str) -> str | None:
    """The changed path below the root, or ``None`` for the root itself or a path outside it."""
    return relative_within(path, root) or None


class WatchFilter(watchfiles.DefaultFilter):
    """Drop events inside the state directory and default-ignored dirs (but
    ``build`` and ``dist``, which hold source when git tracks files in them:
    the exclusion engine decides those).

    The OS watch follows symlinked directories present when it starts, so a
    link in the root to the state directory (``st -> .dir2mcp``) named the
    index's own writes under the link's path: each pass's writes were a
    change, which started another pass, forever (session 30, "Hunt"). An
    event whose directory is the state directory or below it, by its real
    path, is dropped too."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__(ignore_dirs=tuple(DEFAULT_IGNORED_DIRS - OUTPUT_DIR_NAMES))
        self.state_dir = str(Path(state_dir).resolve())  # events name real paths: see _Feed

    def __call__(self, change: watchfiles.Change, path: str) -> bool:
        if is_within(path, self.state_dir):
            return False
        if is_within(os.path.realpath(os.path.dirname(path)), self.state_dir):
            return False  # through a symlinked directory
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
    """Hold the index lock, index once, then follow changes until ``stop``,
    retrying the documents a provider failed on for a passing reason."""
    stop = stop or threading.Event()
    # The OS watch goes in place before the first pass, so a file changed
    # while that pass embeds is re-read and embedded ahead of the rest
    # (issue #17) instead of waiting for the pass to end.
    engine = ExclusionEngine.from_config(root, config, state_dir=state.path)
    feed = _Feed(root, state, stop, engine, reporter=reporter, watch_limit=watch_limits.configured_limit())

    def retry_indexer(mode: str = "incremental") -> Indexer:
        return Indexer(root, state, config, reporter=reporter, stop=stop, embedder=embedder, mode=mode)

    def walking(changes: Callable[[], set[str]] | None = None) -> Indexer:
        return walking_indexer(
            root, state, config, reporter=reporter, stop=stop, embedder=embedder, changes=changes
        )

    unwritten = Unwritten(reporter)
    outer = OuterRules(engine)  # read before the first pass: a change during it walks again
    with IndexLock(state) as lock:
        if embedder is not None:
            check_models(
                embedder,
                state,
                signature_weight=config.embed.signature_weight,
                vector_store=config.rag.vector_store,
                records_store=True,
                shard_vectors=config.rag.shard_vectors,
            )
        feed.start()
        try:
            if initial:
                try:
                    walking(changes=feed.take_paths).run()
                    feed.handed_written()
                except Exception as exc:  # a full disk: the pass is walked again once it can be written
                    if not unwritten.keep(exc, set(), walk=True):
                        raise
            _follow(
                root,
                feed,
                stop,
                walking,
                retry_indexer,
                ready=ready,
                reporter=reporter,
                unwritten=unwritten,
                lock=lock,
                outer=outer,
            )
        finally:
            feed.close()


def _follow(
    root: Path,
    feed: _Feed,
    stop: threading.Event,
    walking: Callable[[], Indexer],
    retry_indexer: Callable[..., Indexer],
    *,
    ready: threading.Event | None,
    reporter: Reporter | None,
    unwritten: Unwritten,
    lock: IndexLock,
    outer: OuterRules | None = None,
) -> None:
    """Apply the watcher's batches until ``stop``, beside the retry pass;
    what a full disk kept from being written is applied again meanwhile.
    Each batch is written only while the index lock is still this
    process's (``INDEX_LOCKED`` once it was lost and another took it). A
    change to the rules from outside the root (``outer``) is a walk, one
    to what git tracks those paths."""
    retrier = _Retrier(_retry_seconds(), retry_indexer, stop)
    retrier.start()
    try:
        # The OS watch is in place: a file written from now on is seen.
        if feed.wait_in_place(stop):
            if ready is not None:
                ready.set()
            if reporter is not None:
                reporter.event("watch_ready", {"root": str(root)})
        while not stop.is_set():
            feed.pending.publish()  # what the last batch wrote, here: the watch may not yield for a while
            batch = feed.next(timeout=0.5)
            rescan = batch == RESCAN  # the watch was set up again: walk for what it missed
            changed = batch if isinstance(batch, set) else ()
            rel_paths = {rel for _, path in changed if (rel := _relative(feed.root, path))}
            if len(rel_paths) >= SETTLE_FROM:
                more, again = feed.settle()
                rel_paths |= more
                rescan = rescan or again
            if outer is not None:
                walk_rules, retracked = outer.changes()
                rescan = rescan or walk_rules
                rel_paths |= retracked
            if not (rel_paths or rescan) and not unwritten.due():
                continue
            lock.confirm()
            earlier, walk_again = unwritten.take()
            walk = walk_again or rescan or _walks(rel_paths | earlier)
            with retrier.lock:
                landed = _apply(
                    rel_paths | earlier,
                    walking=walking,
                    one_by_one=retry_indexer,
                    unwritten=unwritten,
                    walk=walk,
                )
            if landed:
                feed.pending.written(None if walk else rel_paths | earlier)
    finally:
        retrier.close()


class _Feed:
    """The OS watch, in a thread of its own from before the first pass:
    events in the state directory (filtered out) can keep the change
    iterator from ever yielding, and the first pass must not wait for it."""

    def __init__(
        self,
        root: Path,
        state: StateDir,
        stop: threading.Event,
        engine: ExclusionEngine,
        *,
        reporter: Reporter | None = None,
        watch_limit: int | None = None,
    ) -> None:
        # The real path is watched, so events name real paths, which the
        # containment rule compares exactly (FSEvents reports them anyway).
        self.root = Path(root).resolve()
        self.stop = stop
        self.reporter = reporter
        self.watch_limit = watch_limit
        #: how the tree is watched: by the OS, or polled (decided in the watch's thread)
        self.plan = watch_limits.WatchPlan(polling=False)
        self._closed = threading.Event()
        self._state_dir = state.path
        #: (batch number, batch) in the order seen; the number is :attr:`pending`'s
        self._batches: queue.Queue[tuple[int, _Batch]] = queue.Queue()
        #: what live sync has not yet written (of what the policy indexes), recorded for every process
        self.pending = PendingChanges(engine)
        #: the paths :meth:`take_paths` last handed to a pass under way
        self._handed: set[str] = set()
        self._in_place = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dir2mcp-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def is_set(self) -> bool:
        """watchfiles' stop event: the caller's stop, or this feed closed."""
        return self.stop.is_set() or self._closed.is_set()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=5)

    def _watch(self) -> Iterator[set[tuple[watchfiles.Change, str]]]:
        return watchfiles.watch(
            self.root,
            watch_filter=WatchFilter(self._state_dir),
            debounce=DEBOUNCE_MS,
            step=50,
            stop_event=self,
            rust_timeout=500,
            yield_on_timeout=True,
            force_polling=self.plan.polling or None,
            poll_delay_ms=self.plan.poll_ms,
        )

    def _poll(self, plan: watch_limits.WatchPlan) -> None:
        """Watch by polling from now on, and say why."""
        self.plan = plan
        if plan.reason.startswith("DIR2MCP_WATCH_POLLING"):
            return  # asked for: nothing to warn about
        log.warning("%s", plan.reason)
        if self.reporter is not None:
            self.reporter.warn(plan.reason, kind="watch_polling")

    def _run(self) -> None:
        """Follow the OS watch until closed. A watch that fails is set up
        again, after a pause that doubles while it keeps failing within
        WATCH_RESTART_MAX_SECONDS of starting, and a :data:`RESCAN` batch
        walks the tree for what it missed: watchfiles stops for good at the
        first event naming a file whose name is not valid UTF-8, which would
        otherwise end live sync for every file. The count of pending changes
        is recorded here as each batch arrives (and by the indexing thread as
        each is written: events in the state directory, filtered out, can
        keep the watch from yielding for long)."""
        pause, missed = WATCH_RESTART_SECONDS, False
        forced = os.environ.get("DIR2MCP_WATCH_POLLING") == "1"
        try:
            first = watch_limits.plan(self.root, limit=self.watch_limit, forced=forced)
            if first.polling:
                self._poll(first)
            while not self.is_set():
                started = time.monotonic()
                try:
                    for batch in self._watch():
                        # The first (possibly empty) batch means the OS watch is in place.
                        self._in_place.set()
                        if missed:  # walked once the new watch is in place: nothing falls between
                            self._batches.put((self.pending.saw(()), RESCAN))
                            missed = False
                        if batch:
                            paths = {rel for _, path in batch if (rel := _relative(self.root, path))}
                            self._batches.put((self.pending.saw(paths), batch))
                        self.pending.publish()
                    return  # closed
                except Exception as exc:  # a watch that cannot go on must not take the server with it
                    self._in_place.set()
                    if not self.plan.polling and watch_limits.is_limit_error(exc):
                        self._poll(watch_limits.after_failure(exc, self.root))
                        pause, missed = WATCH_RESTART_SECONDS, True
                        continue  # polled at once: what the failed watch missed is walked
                    log.warning("the file watch stopped (%s); setting it up again in %g s", exc, pause)
                if time.monotonic() - started > WATCH_RESTART_MAX_SECONDS:
                    pause = WATCH_RESTART_SECONDS  # it had been well for a while
                if self._closed.wait(pause) or self.stop.is_set():
                    return
                pause, missed = min(pause * 2, WATCH_RESTART_MAX_SECONDS), True
        finally:
            self._in_place.set()
            self.pending.publish()
            connection.close()

    def wait_in_place(self, stop: threading.Event) -> bool:
        while not self._in_place.wait(0.2):
            if stop.is_set():
                return False
        return not stop.is_set()

    def next(self, timeout: float) -> _Batch | None:
        try:
            number, batch = self._batches.get(timeout=timeout)
        except queue.Empty:
            return None
        self.pending.taken(number)
        return batch

    def settle(
        self, quiet: float = SETTLE_SECONDS, most: float = SETTLE_MAX_SECONDS
    ) -> tuple[set[str], bool]:
        """The paths of the batches that follow one another within ``quiet``
        seconds (``most`` in all), and whether one was a :data:`RESCAN`: a
        burst of changes becomes one pass, not one per batch."""
        paths: set[str] = set()
        rescan = False
        end = time.monotonic() + most
        while (left := end - time.monotonic()) > 0:
            batch = self.next(timeout=min(quiet, left))
            if batch is None:
                break
            if isinstance(batch, str):  # RESCAN
                rescan = True
            else:
                paths |= {rel for _, path in batch if (rel := _relative(self.root, path))}
        return paths, rescan

    def handed_written(self) -> None:
        """What :meth:`take_paths` handed the pass is in the index now."""
        self.pending.written(self._handed)
        self._handed = set()

    def take_paths(self) -> set[str]:
        """What changed since last asked, for a pass under way: the paths of
        every batch waiting, except a batch touching a ``.gitignore`` (what
        is excluded changed: a walk's job, left for after the pass). What it
        handed last time is written by now: the pass refreshed it at once."""
        self.handed_written()
        taken: set[str] = set()
        later: list[tuple[int, _Batch]] = []
        while True:
            try:
                number, batch = self._batches.get_nowait()
            except queue.Empty:
                break
            if isinstance(batch, str):  # RESCAN
                later.append((number, batch))
                continue
            paths = {rel for _, path in batch if (rel := _relative(self.root, path))}
            if _walks(paths):
                later.append((number, batch))
            else:
                taken |= paths
                self.pending.taken(number)
        for item in later:
            self._batches.put(item)
        self._handed = taken
        return taken


def _apply(
    rel_paths: set[str],
    *,
    walking: Callable[[], Indexer],
    one_by_one: Callable[[], Indexer],
    unwritten: Unwritten,
    walk: bool = False,
) -> bool:
    """Re-index a batch of changes: the touched paths, or the whole tree when
    a ``.gitignore`` changed (what is excluded changed) or an earlier walk
    could not be written. Only the indexer that runs is made: each owns
    provider clients until its run ends. A batch the store refused (a full
    disk) is kept in ``unwritten``, to be applied again. A :data:`RESCAN`
    batch (the watch was set up again) is a walk. Whether the batch landed
    (False: kept for later, or dropped)."""
    walk = walk or _walks(rel_paths)
    if not (rel_paths or walk):
        return True
    try:
        if walk:
            walking().run()
        else:
            one_by_one().run_paths(rel_paths)
    except Exception as exc:  # the watcher must outlive one failed batch
        if not unwritten.keep(exc, rel_paths, walk=walk):
            log.exception("live sync failed for %d paths", len(rel_paths))
            fault = store_faults.classify(exc)
            if fault is not None and unwritten.reporter is not None:
                unwritten.reporter.warn(f"live sync failed: {fault}", code=fault.code)
        return False
    unwritten.landed()
    return True


class OuterRules:
    """What changed in git's rules for the root from outside it since last
    asked: ``.git/info/exclude``, the global excludes file, a ``.gitignore``
    above the root (a walk), or what git tracks (``git rm --cached``, ``git
    add`` of an ignored file: those paths). The watch sees none of these
    (``.git`` is not watched, the others lie outside the root), while every
    reader applies them at once: until 2026-11-29 a file excluded so stayed
    in the index, and search, references, symbols and list_files served it
    until a ``.gitignore`` changed or ``up`` restarted. A few ``stat`` calls
    each time the watcher looks (every 0.5 s when idle); git's index, which
    ``git status``, ``add`` and ``commit`` rewrite all day, is read again
    only when it changed and costs only the paths whose tracking changed,
    never a walk of the tree."""

    def __init__(self, engine: ExclusionEngine) -> None:
        self._engine = engine
        self._stamp = engine.outer_rules_stamp()
        self._tracked = engine.tracked()

    def changes(self) -> tuple[bool, set[str]]:
        """(whether the rules moved: walk the tree, the paths git started or
        stopped tracking)."""
        now = self._engine.outer_rules_stamp()
        walk, self._stamp = now != self._stamp, now
        tracked = self._engine.tracked()
        if tracked is self._tracked:
            return walk, set()
        changed = set(tracked).symmetric_difference(self._tracked)
        self._tracked = tracked
        return walk, changed


def _walks(rel_paths: set[str]) -> bool:
    """Whether these changes need a walk of the whole tree: a ``.gitignore``
    among them changes what is excluded."""
    return any(Path(p).name == ".gitignore" for p in rel_paths)


class Unwritten:
    """Changes whose write the store refused because it could not be
    written (``STATE_NOT_WRITABLE``: a full disk, a read-only file system):
    kept, and applied again after 1 s, then twice as long each time up to
    :data:`MAX_SECONDS`, until they land. A ``store_write_failed`` event
    (how many paths wait, and the file system's words) goes out at each
    failure and a ``store_write_landed`` event once they are written, so
    the server's ``stats`` and ``status`` count them while they wait.

    Any other failure is logged, and its batch dropped, as before: a bug or
    a damaged database (STORE_CORRUPT) does not go away by itself."""

    FIRST_SECONDS = 1.0
    MAX_SECONDS = 30.0

    def __init__(self, reporter: Reporter | None) -> None:
        self.reporter = reporter
        self.paths: set[str] = set()
        self.walk = False
        self.delay = self.FIRST_SECONDS
        self.next_try = 0.0
        self.failing = False

    def keep(self, exc: Exception, rel_paths: set[str], *, walk: bool) -> bool:
        """Keep these changes when ``exc`` is the store refusing writes;
        whether it was (anything else is the caller's to report)."""
        fault = store_faults.classify(exc)
        if fault is None or fault.code != errors.STATE_NOT_WRITABLE:
            return False
        self.paths |= rel_paths
        self.walk = self.walk or walk
        self.failing = True
        self.next_try = time.monotonic() + self.delay
        log.warning(
            "%d changed path(s) not written, retried in %.0f s: %s", len(self.paths), self.delay, fault
        )
        self.delay = min(self.delay * 2, self.MAX_SECONDS)
        if self.reporter is not None:
            self.reporter.event(
                "store_write_failed",
                {"paths": len(self.paths), "walk": self.walk, "code": fault.code, "message": fault.message},
                level="error",
            )
        return True

    def due(self) -> bool:
        return (bool(self.paths) or self.walk) and time.monotonic() >= self.next_try

    def take(self) -> tuple[set[str], bool]:
        """What waits, handed to the next attempt (kept again if it fails)."""
        paths, walk = self.paths, self.walk
        self.paths, self.walk = set(), False
        return paths, walk

    def landed(self) -> None:
        if self.failing and not (self.paths or self.walk):
            self.failing = False
            self.delay = self.FIRST_SECONDS
            log.info("the changes kept from a failed write are written")
            if self.reporter is not None:
                self.reporter.event("store_write_landed", {"paths": 0})


def _retry_seconds() -> float:
    try:
        seconds = float(os.environ.get("DIR2MCP_RETRY_SECONDS") or RETRY_SECONDS)
    except ValueError:
        seconds = RETRY_SECONDS
    return max(0.1, seconds)


def retryable_paths() -> tuple[list[str], list[str]]:
    """Files, and archives holding members, whose last failure is retryable."""
    failed = Document.objects.filter(deleted=False, status="error", error__endswith=RETRYABLE_NOTE)
    files, archives = set(), set()
    for rel_path in failed.values_list("rel_path", flat=True):
        if "!/" in rel_path:
            archives.add(rel_path.split("!/", 1)[0])
        else:
            files.add(rel_path)
    return sorted(files - archives), sorted(archives)


class _Retrier:
    """The retry pass, in a thread of its own: the first ``first`` seconds after
    it starts, the next ones twice as long apart while failures remain, back
    to ``first`` once none do. ``lock`` keeps it and a watch batch from
    indexing at the same time."""

    def __init__(self, first: float, indexer: Callable[..., Indexer], stop: threading.Event) -> None:
        self.first = self.delay = first
        self.indexer = indexer
        self.stop = stop
        self.lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dir2mcp-retry", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._done.set()
        self._thread.join()

    def _loop(self) -> None:
        try:
            while not self._done.wait(self.delay) and not self.stop.is_set():
                with self.lock:
                    remaining = self.run_once()
                self.delay = (
                    min(self.delay * 2, max(self.first, RETRY_MAX_SECONDS)) if remaining else self.first
                )
        finally:
            connection.close()

    def run_once(self) -> bool:
        """Re-index what failed for a passing reason; whether any still fails."""
        try:
            files, archives = retryable_paths()
            if files:
                self.indexer("incremental").run_paths(files)
            if archives:
                # An unchanged archive's members count as unchanged: read it
                # whole again (the provider caches spare the members that worked).
                self.indexer("full").run_paths(archives)
            return bool(files or archives) and any(retryable_paths())
        except Exception:  # the watcher must outlive one failed pass
            log.exception("retry pass failed")
            return True
