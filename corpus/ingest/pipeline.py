"""The indexing pass: walk, detect change, read and prepare, write,
tombstone, embed.

:class:`Indexer` coordinates one pass's collaborators, each owning its
state: :class:`~corpus.ingest.known.KnownFiles` (what the store holds and
what the walk has seen: change detection, spec §7.6),
:class:`~corpus.ingest.reading.FileReader` (a walked file read and
prepared, archives and gzip files through
:class:`~corpus.ingest.unpack.ArchiveReader`),
:class:`~corpus.ingest.batch.BatchWriter` (batches written one transaction
each, tombstones, the reporter told what changed) and the job's
:class:`~corpus.counters.Counters`, one object they all count into.

What differs between writing here, handing files to Celery workers and
being one of them is the indexer's :class:`WriteStep`: :class:`LocalWrite`
here, the others in corpus/ingest/distributed.py. A step reaches the
collaborators through the indexer's public attributes and methods.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol, TypedDict

from corpus.counters import Counters
from corpus.events import Reporter
from corpus.index.dense.embedding import embed_first, embed_pending, views_to_come
from corpus.ingest import collect, coverage, writer
from corpus.ingest.batch import BatchWriter
from corpus.ingest.discover import FileEntry, WalkProblem, walk
from corpus.ingest.exclusions import ExclusionTally
from corpus.ingest.known import KnownFiles
from corpus.ingest.media import MediaProviders, media_providers
from corpus.ingest.prepare import Capabilities, Preparer, capabilities_for
from corpus.ingest.prepare_pool import AUTO_AFTER_FILES, PoolSetup, processes_for
from corpus.ingest.reading import FileReader, stored_name
from corpus.models import Chunk, Document, EmbeddingStatus, IndexJob
from corpus.providers.base import Embedder
from corpus.security import ExclusionEngine
from corpus.status import models_in_use, record_models, write_corpus_json
from kernel import errors
from kernel.config import Config
from kernel.secrets import resolve_secret
from kernel.state import StateDir

log = logging.getLogger(__name__)

FLUSH_SECONDS = 0.5
#: The share of a running pass's time that rewriting ``corpus.json`` may
#: take: its counts read every document (about 0.1 s at the kernel's 86,000),
#: so on a large tree it is written less often than the job's counters; at
#: the end of a pass it is always written.
CORPUS_JSON_SHARE = 0.02


class WriteStep(Protocol):
    """The part of a pass that differs between writing here, handing files
    to Celery workers, and being one of them. An indexer has one, for one job."""

    def begin(self, indexer: Indexer) -> None:
        """The job's row exists: record with it what this step needs."""

    def take(self, indexer: Indexer, entry: FileEntry) -> bool:
        """A file changed by size, mtime or policy: True when the step takes
        it whole, so that this process does not read it."""

    def tick(self, indexer: Indexer) -> None:
        """After each file: write (or send) what is due."""

    def save_counters(self, indexer: Indexer, *, force: bool) -> None:
        """Put the counters in the job's row (at most every FLUSH_SECONDS unless forced)."""

    def end_walk(self, indexer: Indexer) -> bool:
        """The walk is through: write the rest, tombstone what was not seen,
        embed. True when the job is complete."""


class LocalWrite:
    """Read, prepare and write every changed file in this process."""

    def __init__(self) -> None:
        #: when corpus.json is next rewritten during the pass (CORPUS_JSON_SHARE)
        self._summary_due = 0.0

    def begin(self, indexer: Indexer) -> None:
        pass

    def take(self, indexer: Indexer, entry: FileEntry) -> bool:
        return False

    def tick(self, indexer: Indexer) -> None:
        if indexer.batch.due():
            indexer.batch.write_due()

    def save_counters(self, indexer: Indexer, *, force: bool) -> None:
        job = indexer.job
        assert job is not None
        for name, value in indexer.counters.as_dict().items():
            setattr(job, name, value)
        job.updated_unix = time.time()
        job.save()
        now = time.monotonic()
        if force or now >= self._summary_due:
            write_corpus_json(indexer.root, indexer.state, indexer.config, job, models=indexer.models)
            self._summary_due = now + (time.monotonic() - now) / CORPUS_JSON_SHARE
        if not force:  # forced flushes start or end a job; _finish prints the final line
            indexer.reporter.progress(indexer.progress_counts())

    def end_walk(self, indexer: Indexer) -> bool:
        # The walk can end well before the files it handed to worker
        # processes are prepared: a stop meanwhile cancels what no worker
        # holds yet (read again by the next pass), and the job is not complete.
        cancelled = False
        while indexer.batch.queued():
            if indexer.stop.is_set() and not cancelled:
                indexer.reader.stop_preparing()
                cancelled = True
            indexer.batch.write_batch()
        indexer.reader.done_preparing()
        indexer.batch.tombstone(indexer.known.unseen())
        if indexer.stop.is_set():
            return False
        indexer.embed_walked()
        return True


class IndexerOptions(TypedDict, total=False):
    """:class:`Indexer`'s keywords but its ``step``, as a caller that picks the step passes them on."""

    reporter: Reporter | None
    mode: str
    stop: threading.Event | None
    capabilities: Capabilities | None
    embedder: Embedder | None
    providers: MediaProviders | None
    changes: Callable[[], set[str]] | None


class Indexer:
    """One indexing job over one root and state directory; ``step`` writes
    what changed (default :class:`LocalWrite`)."""

    def __init__(
        self,
        root: Path,
        state: StateDir,
        config: Config,
        *,
        reporter: Reporter | None = None,
        mode: str = "incremental",
        stop: threading.Event | None = None,
        capabilities: Capabilities | None = None,
        embedder: Embedder | None = None,
        providers: MediaProviders | None = None,
        changes: Callable[[], set[str]] | None = None,
        step: WriteStep | None = None,
    ) -> None:
        self.root = root
        self.step = step or LocalWrite()
        #: the watcher's files changed since last asked (issue #17): re-read and
        #: embedded first between two embedding batches of a long pass
        self.changes = changes
        self.state = state
        self.config = config
        self.reporter = reporter or Reporter.silent()
        self.mode = mode
        self.stop = stop or threading.Event()
        self.engine = ExclusionEngine.from_config(root, config, state_dir=state.path)
        self._owned_providers = None

        def secret(name: str) -> str | None:
            return resolve_secret(name, config, state, root=root).value

        self.secret = secret
        if capabilities is None:
            capabilities = capabilities_for(config, secret)
            if providers is None:
                providers = self._owned_providers = media_providers(
                    config, state, capabilities, secret, holds_secret=self.engine.find_secret
                )
        self.preparer = Preparer(config, self.engine, capabilities, providers)
        self.embedder = embedder
        self.embed_error: errors.Dir2mcpError | None = None
        #: the job's counts: the reader, the batch writer and the step count into this one object
        self.counters = Counters()
        #: what the walk left out, by reason (issue #37)
        self.tally = ExclusionTally()
        self.known = KnownFiles(self.preparer, mode=mode)
        self.batch = BatchWriter(self.known, self.counters, self.reporter, written=self.flush_counters)
        self.reader = FileReader(
            config,
            self.engine,
            self.preparer,
            known=self.known,
            batch=self.batch,
            counters=self.counters,
            reporter=self.reporter,
            stop=self.stop,
            take=lambda entry: self.step.take(self, entry),
        )
        self._last_flush = 0.0
        self.job: IndexJob | None = None
        #: the models in use, for corpus.json (set when the job starts)
        self.models: dict[str, str] | None = None
        #: this pass walks the whole root (not only some paths)
        self.walked = False
        #: signature views stored by this job, and those still to come (views
        #: later: not job counters, but reported with them for the ETA in ``stats``)
        self.views_embedded = 0
        self.views_waiting = 0

    def progress_counts(self) -> dict[str, int]:
        """What a progress report carries: the job's counters and its views."""
        return {
            **self.counters.as_dict(),
            "views_embedded": self.views_embedded,
            "views_waiting": self.views_waiting,
        }

    # -- public entry points -------------------------------------------------

    def run(self) -> Counters:
        """Walk the whole root; tombstone what disappeared if the walk finished."""
        with writer.indexing():
            return self._run()

    def _run(self) -> Counters:
        self.walked = True
        self.start()
        processes = processes_for(self.config.ingest.prepare_processes)
        if processes:
            setup = PoolSetup(self.root, self.state.path, self.config, self.preparer.capabilities)
            after = AUTO_AFTER_FILES if self.config.ingest.prepare_processes == "auto" else 0
            self.reader.prepare_in(setup, processes, after=after)
        outcome = "interrupted"
        try:
            for item in walk(self.engine, tally=self.tally):
                if self.stop.is_set():
                    break
                self.consume(item)
            else:
                if self.step.end_walk(self):
                    outcome = "complete"
        finally:
            self._finish(outcome)
        return self.counters

    def embed_walked(self) -> None:
        """Once every file of the walk is written: say the lexical half is
        complete, embed what is pending, and say the dense half is complete
        when that ran to the end (whichever step wrote the files)."""
        self._announce_complete("lexical")
        self._report_coverage()
        self._embed()
        if self.embedder is not None and self.embed_error is None and not self.stop.is_set():
            self._announce_complete("dense")

    def _report_coverage(self) -> None:
        """Record what the whole walk covered and left out, and say loudly
        when it covers nothing or far more than git tracks (issue #37)."""
        found = coverage.record(self.root, self.tally, walked=self.counters.scanned)
        self.reporter.event("coverage", found)
        self.reporter.say(coverage.describe(found))
        if found["warning"]:
            self.reporter.warn(found["warning"], kind="coverage")

    def _announce_complete(self, half: str) -> None:
        """Say that a whole pass's half of the index is complete (issue #24):
        ``lexical`` once every file is read, chunked and searchable by
        keyword; ``dense`` once every live chunk has its vector."""
        live = Chunk.objects.filter(deleted=False)
        data = {"documents": Document.objects.filter(deleted=False).count(), "chunks": live.count()}
        if half == "dense":
            pending = live.filter(embedding_status=EmbeddingStatus.PENDING).count()
            if pending:
                return  # another process's chunks, or ones that failed: not complete
            data["embedded"] = live.filter(embedding_status=EmbeddingStatus.OK).count()
            self.reporter.say(f"Dense index complete: {data['embedded']} chunks embedded.")
        else:
            self.reporter.say(
                f"Lexical index complete: {data['documents']} documents, {data['chunks']} chunks "
                "searchable by keyword."
            )
        self.reporter.event(f"{half}_index_complete", data)

    def run_paths(self, rel_paths: Iterable[str]) -> Counters:
        """Re-index just these paths (the watcher's entry point)."""
        with writer.indexing():
            return self._run_paths(rel_paths)

    def _run_paths(self, rel_paths: Iterable[str]) -> Counters:
        self.start()
        outcome = "interrupted"
        try:
            for rel_path in sorted(set(rel_paths)):
                if self.stop.is_set():
                    break
                self._refresh_path(rel_path)
            else:
                self.batch.flush()
                self._embed()
                outcome = "complete"
        finally:
            self._finish(outcome)
        return self.counters

    # -- embedding -----------------------------------------------------------

    def _embed(self) -> None:
        """Embed what the walk left pending; a provider failure is reported,
        and the chunks stay pending for the next run."""
        if self.embedder is None:
            return

        def progress(count: int) -> None:
            self.counters.embedded_ok += count
            self.flush_counters()
            self._take_changes()

        def views_progress(count: int) -> None:
            self.views_embedded += count
            self.views_waiting = max(0, self.views_waiting - count)
            self.flush_counters()
            self._take_changes()

        # counted once a pass, then counted down (a count per batch reads
        # the whole queue's index: a million rows on the kernel)
        self.views_waiting = views_to_come()
        try:
            embed_pending(
                self.embedder,
                self.state,
                stop=self.stop,
                progress=progress,
                views_progress=views_progress,
                batch_size=self.config.embed.batch_size,
            )
        except errors.Dir2mcpError as exc:
            self.embed_error = exc
            self.reporter.warn(f"embedding stopped, chunks stay pending: {exc}", code=exc.code)

    def _take_changes(self) -> None:
        """Files changed on disk while this pass embeds: re-read now, and
        their chunks embedded before the rest of the pass's (issue #17)."""
        paths = self.changes() if self.changes is not None else set()
        if not paths:
            return
        for rel_path in sorted(paths):
            if self.stop.is_set():
                return
            # The walk saw it: forget that, or a file deleted since would stay live.
            self.known.forget_seen(rel_path)
            self._refresh_path(rel_path)
        self.batch.flush()
        embed_first.add(paths)

    # -- job bookkeeping -----------------------------------------------------

    def start(self) -> None:
        """Load what the store holds and open the job's row."""
        self.known.load()
        live = Chunk.objects.filter(deleted=False)
        self.counters.chunks_total = live.count()
        self.counters.embedded_ok = live.filter(embedding_status=EmbeddingStatus.OK).count()
        # The models this job works with, as corpus.json and `settings` record them (spec §4.4, §5.5).
        self.models = models_in_use(self.config, embedder=self.embedder, secret=self.secret)
        record_models(self.models, self.config)
        now = time.time()
        self.job = IndexJob.objects.create(
            job_id=f"job_{uuid.uuid4().hex[:16]}",
            mode=self.mode,
            pid=os.getpid(),
            started_unix=now,
            updated_unix=now,
        )
        self.reporter.event("index_loaded", {"state_dir": str(self.state.path), "documents": len(self.known)})
        self._last_flush = time.monotonic()
        self.step.begin(self)

    def close(self) -> None:
        """Stop the provider pools and close the clients this indexer made."""
        self.reader.close()
        if self._owned_providers is not None:
            self._owned_providers.close()
            self._owned_providers = None

    def _finish(self, outcome: str) -> None:
        if self.stop.is_set():
            self.reader.stop_preparing()  # what no worker holds yet is read again by the next pass
        try:
            self.batch.flush()
            # Every walk (the age bound), else a pass that wrote or deleted
            # something: a watcher's pass that changed nothing skips the counts.
            if outcome == "complete" and (self.walked or self.counters.indexed or self.counters.deleted):
                self._collect()
        finally:
            self.close()
        assert self.job is not None
        self.job.running = False
        self.job.outcome = outcome
        self.job.finished_unix = time.time()
        self.flush_counters(force=True)
        self.reporter.progress(self.progress_counts(), final=True)

    def _collect(self) -> None:
        """Remove the oldest tombstones past the configured bound (issue #37
        item 5), a batch per transaction; a stop ends it between two."""
        ingest = self.config.ingest
        began, cpu = time.monotonic(), time.process_time()
        found = collect.collect(self.state, ingest.tombstone_share, ingest.tombstone_days, stop=self.stop)
        if found or found.lexical_merges > 1:
            data = dataclasses.asdict(found) | {
                "seconds": round(time.monotonic() - began, 3),
                "cpu_seconds": round(time.process_time() - cpu, 3),
            }
            self.reporter.event("tombstones_collected", data)

    def flush_counters(self, *, force: bool = False) -> None:
        """Have the step save the counters, at most every FLUSH_SECONDS unless ``force``."""
        now = time.monotonic()
        if not force and now - self._last_flush < FLUSH_SECONDS:
            return
        self._last_flush = now
        self.step.save_counters(self, force=force)

    # -- reading -------------------------------------------------------------

    def consume(self, item: FileEntry | WalkProblem) -> None:
        """Read one walked item into the batch; the step writes what is due."""
        if self.reader.consume(item):
            self.step.tick(self)
            self.flush_counters()

    def _refresh_path(self, rel_path: str) -> None:
        self.commit(self.read_path(rel_path))

    def read_path(self, rel_path: str) -> list[str]:
        """Read ``rel_path`` (and what is beneath it) into the batch, which
        the step may write as it goes; the known paths there now gone."""
        path = self.root / rel_path
        if self.engine.excluded_reason(rel_path, is_dir=path.is_dir()) is None and path.exists():
            for item in walk(self.engine, start=rel_path):
                self.consume(item)
        # An undecodable name is known by its escaped form.
        return self.known.unseen_at(stored_name(rel_path))

    def commit(self, gone: list[str]) -> None:
        """Write the batch, then tombstone ``gone``."""
        self.batch.flush()
        self.batch.tombstone(gone)
