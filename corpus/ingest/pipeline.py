"""The indexing service: walk, detect change, prepare, write, tombstone.

Change detection runs in three levels (spec §7.6). A file whose size,
mtime and policy are unchanged is skipped without being read; one whose
``content_hash`` is unchanged only has its mtime refreshed; a representation
whose ``rep_hash`` is unchanged keeps its chunks; and a chunk whose
``text_hash`` survives keeps its row, its ``chunk_id`` and its embedding.

Documents are written in batches, one transaction each, so a crash leaves
every document either as it was or fully updated. Documents new to the store
go in together, one INSERT per table; the others each get a savepoint, as
do new ones again if writing them together failed, so one bad document is
all a batch loses.

What differs between writing here, handing files to Celery workers and
being one of them is the indexer's :class:`WriteStep`: :class:`LocalWrite`
here, the others in corpus/ingest/distributed.py.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from django.db import transaction

from corpus import errors, store_faults
from corpus.config import Config
from corpus.counters import Counters
from corpus.embedding import embed_first, embed_pending
from corpus.events import Reporter
from corpus.ingest import coverage, writer
from corpus.ingest.archives import ArchiveLimits, ArchiveMember, MemberProblem, archive_format, iter_members
from corpus.ingest.classify import TEXTUAL_TYPES, classify, gzip_inner_name
from corpus.ingest.discover import FileEntry, WalkProblem, walk
from corpus.ingest.exclusions import ExclusionTally
from corpus.ingest.extract import gunzip_bounded
from corpus.ingest.media import MediaProviders, media_providers
from corpus.ingest.prepare import HEAD_BYTES, Capabilities, Prepared, Preparer, capabilities_for, sha256_hex
from corpus.models import Chunk, Document, EmbeddingStatus, IndexJob
from corpus.providers.base import Embedder
from corpus.secrets import resolve_secret
from corpus.security import ExclusionEngine
from corpus.state import StateDir
from corpus.status import models_in_use, record_models, write_corpus_json

log = logging.getLogger(__name__)

BATCH_DOCS = 64
BATCH_SECONDS = 0.5
FLUSH_SECONDS = 0.5
#: Bump when how this module reads archives changes, so every archive is
#: read again on the next pass. 2: a plain ``.gz`` is the text it holds, and
#: an archive that cannot be read (or holds a member that cannot) is an error.
#: 3: an archive over an archive-wide limit has no member indexed.
ARCHIVE_READER_VERSION = "3"
#: The most member bytes of one archive held while it is checked against its limits.
HELD_MEMBER_BYTES = 64 * 2**20
#: A plain gzip file's doc_type until it is decompressed (never stored).
GZIP = "gzip"


@dataclass(frozen=True)
class Known:
    """What the store already holds for a document (loaded once per run)."""

    doc_id: int
    doc_type: str
    size: int
    mtime_ns: int
    content_hash: str
    policy_hash: str
    status: str
    deleted: bool
    error_code: str = ""


def _at_or_under(path: str, rel_path: str) -> bool:
    """``path`` is ``rel_path``, inside it (a directory) or a member of it (an archive)."""
    return path == rel_path or path.startswith((rel_path + "/", rel_path + "!/"))


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

    def begin(self, indexer: Indexer) -> None:
        pass

    def take(self, indexer: Indexer, entry: FileEntry) -> bool:
        return False

    def tick(self, indexer: Indexer) -> None:
        if len(indexer._batch) >= BATCH_DOCS or (
            indexer._batch and time.monotonic() - indexer._batch_started >= BATCH_SECONDS
        ):
            indexer._flush_batch()

    def save_counters(self, indexer: Indexer, *, force: bool) -> None:
        job = indexer.job
        assert job is not None
        for name, value in indexer.counters.as_dict().items():
            setattr(job, name, value)
        job.updated_unix = time.time()
        job.save()
        write_corpus_json(indexer.root, indexer.state, indexer.config, job, models=indexer.models)
        if not force:  # forced flushes start or end a job; _finish prints the final line
            indexer.reporter.progress(indexer.counters.as_dict())

    def end_walk(self, indexer: Indexer) -> bool:
        indexer._flush_batch()
        indexer._tombstone(indexer._unseen())
        indexer._embed_walked()
        return True


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
    ):
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
        self.limits = ArchiveLimits.from_config(config)
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
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self.embedder = embedder
        self.embed_error: errors.Dir2mcpError | None = None
        self.counters = Counters()
        #: what the walk left out, by reason (issue #37)
        self.tally = ExclusionTally()
        self.known: dict[str, Known] = {}
        #: doc_ids of archives holding a member in error: read again, like a file in error
        self._failed_containers: set[int] = set()
        #: archives (and nested ones) being read now, by rel_path: what their problems mark
        self._open_archives: dict[str, Prepared] = {}
        self.seen: set[str] = set()
        #: documents written or tombstoned since the reporter was last told, and whether the set changed
        self._changed: list[str] = []
        self._listing = False
        self._batch: list[Prepared | Future] = []
        self._batch_started = 0.0
        self._last_flush = 0.0
        self.job: IndexJob | None = None
        #: the models in use, for corpus.json (set when the job starts)
        self.models: dict[str, str] | None = None

    # -- public entry points -------------------------------------------------

    def run(self) -> Counters:
        """Walk the whole root; tombstone what disappeared if the walk finished."""
        with writer.indexing():
            return self._run()

    def _run(self) -> Counters:
        self._start()
        outcome = "interrupted"
        try:
            for item in walk(self.engine, tally=self.tally):
                if self.stop.is_set():
                    break
                self._consume(item)
            else:
                if self.step.end_walk(self):
                    outcome = "complete"
        finally:
            self._finish(outcome)
        return self.counters

    def _embed_walked(self) -> None:
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
        self._start()
        outcome = "interrupted"
        try:
            for rel_path in sorted(set(rel_paths)):
                if self.stop.is_set():
                    break
                self._refresh_path(rel_path)
            else:
                self._flush_batch()
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
            self._flush_counters()
            self._take_changes()

        try:
            embed_pending(
                self.embedder,
                self.state,
                stop=self.stop,
                progress=progress,
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
            self.seen = {p for p in self.seen if not _at_or_under(p, rel_path)}
            self._refresh_path(rel_path)
        self._flush_batch()
        embed_first.add(paths)

    # -- job bookkeeping -----------------------------------------------------

    def _load_known(self, documents=None) -> None:
        """What the store holds for ``documents`` (default: all of them)."""
        rows = (Document.objects.all() if documents is None else documents).values_list(
            "rel_path",
            "doc_id",
            "doc_type",
            "size_bytes",
            "mtime_ns",
            "content_hash",
            "policy_hash",
            "status",
            "deleted",
            "error_code",
        )
        self.known = {row[0]: Known(*row[1:]) for row in rows.iterator(chunk_size=5000)}
        self._sorted_paths = sorted(self.known)
        self._failed_containers = set()
        for rel_path, known in self.known.items():
            if known.status != "error" or known.deleted or "!/" not in rel_path:
                continue
            parts = rel_path.split("!/")
            for depth in range(1, len(parts)):
                container = self.known.get("!/".join(parts[:depth]))
                if container is not None:
                    self._failed_containers.add(container.doc_id)

    def _start(self) -> None:
        self._load_known()
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

    def _close_resources(self) -> None:
        """Stop the provider pools and close the clients this indexer made."""
        for pool in self._pools.values():
            pool.shutdown(wait=True, cancel_futures=True)
        self._pools.clear()
        if self._owned_providers is not None:
            self._owned_providers.close()
            self._owned_providers = None

    def _finish(self, outcome: str) -> None:
        self._flush_batch()
        self._close_resources()
        assert self.job is not None
        self.job.running = False
        self.job.outcome = outcome
        self.job.finished_unix = time.time()
        self._flush_counters(force=True)
        self.reporter.progress(self.counters.as_dict(), final=True)

    def _flush_counters(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_flush < FLUSH_SECONDS:
            return
        self._last_flush = now
        self.step.save_counters(self, force=force)

    # -- walking -------------------------------------------------------------

    def _consume(self, item: FileEntry | WalkProblem) -> None:
        if isinstance(item, WalkProblem):
            self.counters.errors += 1
            self.reporter.file_error(stored_name(item.rel_path), item.code, item.message)
            return
        if item.rel_path in self.seen:
            return
        self.counters.scanned += 1
        if not _storable(item.rel_path):
            self._undecodable_name(item.rel_path, "file", item.size, item.mtime_ns)
            self._maybe_flush()
            return
        self.seen.add(item.rel_path)
        try:
            self._consume_file(item)
        except OSError as exc:
            self._queue(self._read_error(item, exc))
        except errors.Dir2mcpError as exc:  # refused at open: swapped for a link, a FIFO, ...
            self._queue(self._read_error(item, exc))
        self._maybe_flush()

    def _consume_file(self, entry: FileEntry) -> None:
        known = self.known.get(entry.rel_path)
        if known and self._stat_unchanged(known, entry.size, entry.mtime_ns):
            self._unchanged(entry.rel_path, known)
            return
        if self.step.take(self, entry):
            return
        # Opened through the engine (corpus/security.py): a regular file
        # beneath the root, whatever the path has become since the walk.
        with self.engine.open(entry.rel_path, judged=True) as handle:
            head = handle.read(HEAD_BYTES)
            base = self._base(entry.rel_path, "file", head, entry.size, entry.mtime_ns)
            data, limit = head, self.config.max_bytes_for(base.doc_type)
            too_large = self.preparer.too_large(base.doc_type, entry.size)
            if not too_large:
                data = head + handle.read(limit + 1 - len(head))
            if too_large or len(data) > limit:
                self._queue(self._too_large(base, screen=(handle.read, data)))
                return
        base.content_hash = sha256_hex(data)
        gzipped = base.doc_type == GZIP
        if gzipped:
            data = self._gunzip(base, data)
            if data is None:
                return
        if known and self._content_unchanged(known, base):
            self._unchanged(entry.rel_path, known, touch=base)
            return
        if base.doc_type == "archive":
            self._consume_archive(base, data)
            return
        self._queue(_from_gzip(self.preparer.prepare(base, data)) if gzipped else self._prepare(base, data))

    def _gunzip(self, base: Prepared, data: bytes) -> bytes | None:
        """The text a plain gzip file holds, with ``base`` made the document of
        its type; None when it cannot be read within the limits (the document
        is then queued as an error, or as skipped when simply too large)."""
        archives = self.config.ingest.archives
        try:
            inner = gunzip_bounded(
                data, max_bytes=int(self.config.ingest.max_file_mb * 2**20), max_ratio=archives.max_ratio
            )
        except errors.Dir2mcpError as exc:
            # Recorded as the compressed file it is, so an unchanged one stays as it is.
            base.doc_type, base.policy_hash = "archive", self._policy_hash("archive")
            if exc.code == errors.FILE_TOO_LARGE:
                self._queue(self.preparer.skipped(base, exc.code, exc.message))
            else:
                self._queue(base.fail("error", exc.code, exc.message))
            return None
        name = gzip_inner_name(base.rel_path, data[:HEAD_BYTES]) or base.rel_path
        base.doc_type = classify(name, inner[:HEAD_BYTES])
        base.policy_hash = self._policy_hash(base.doc_type)
        if base.doc_type == "archive":
            self._queue(self.preparer.skipped(
                base, errors.DOC_TYPE_UNSUPPORTED,
                "a compressed archive not named .tar.gz or .tgz; rename it to index its members",
            ))  # fmt: skip
            return None
        if len(inner) > self.config.max_bytes_for(base.doc_type):
            self._queue(self.preparer.skipped(
                base, errors.FILE_TOO_LARGE,
                f"{len(inner)} bytes once decompressed exceeds the {base.doc_type} limit of "
                f"{self.config.max_bytes_for(base.doc_type)} bytes",
            ))  # fmt: skip
            return None
        return inner

    def _consume_archive(self, base: Prepared, data: bytes) -> None:
        mode = self.config.ingest.archives.mode
        if mode == "off":
            self._queue(self.preparer.skipped(base, "", "disabled by ingest.archives.mode=off"))
            return
        if mode != "deep":
            self._queue(base)
            return
        items = self._within_limits(base, data)
        if items is None:
            return
        self._queue(base)
        self._open_archives = {base.rel_path: base}
        try:
            for member in items:
                if self.stop.is_set():
                    return
                if isinstance(member, MemberProblem):
                    self._member_failed(member)
                    continue
                self._consume_member(member)
        finally:
            self._open_archives = {}

    def _within_limits(self, base: Prepared, data: bytes) -> Iterable[ArchiveMember | MemberProblem] | None:
        """The archive's members and problems, once it is known to be within
        its archive-wide limits (members, total bytes, a compressed tar's
        ratio; nested archives count). One over them has no member indexed:
        it is queued ``skipped`` with the limit's code, like a file over its
        size limit, so it is recorded once and read again only when its
        size, mtime (then its hash) or the limits change; None then, or when
        the run stops meanwhile. Members are held while they total at most
        HELD_MEMBER_BYTES, so a small archive is read once; a larger one is
        read again, as the same bytes read the same way."""

        def read() -> Iterator[ArchiveMember | MemberProblem]:
            return iter_members(data, rel_path=base.rel_path, limits=self.limits, engine=self.engine)

        held: list | None = []
        size = 0
        for item in read():
            if self.stop.is_set():
                return None
            if isinstance(item, MemberProblem) and item.stops_archive:
                member = item.rel_path[len(base.rel_path) + 2 :]
                where = f"member {member!r}: " if member else ""
                reason = f"{where}{item.message}; none of its members is indexed"
                self._queue(self.preparer.skipped(base, item.code, reason))
                return None
            if held is not None:
                size += item.size if isinstance(item, ArchiveMember) else 0
                if size > HELD_MEMBER_BYTES:
                    held = None  # read again below rather than held
                else:
                    held.append(item)
        return held if held is not None else read()

    def _member_failed(self, problem: MemberProblem) -> None:
        """An archive (or a nested one) that cannot be read, or that holds a
        member that cannot, is an error, with the first problem's code: it
        is counted and reported when written (:meth:`_record`), shown by
        ``status``, ``list_files`` and the admin, and read again on every
        pass until it succeeds. Further problems are reported as they come."""
        container = problem.rel_path
        while container not in self._open_archives and "!/" in container:
            container = container.rsplit("!/", 1)[0]
        target = self._open_archives.get(container)
        if target is None or target.status == "error":
            self.counters.errors += 1
            self.reporter.file_error(problem.rel_path, problem.code, problem.message)
            return
        member = problem.rel_path[len(container) + 2 :]
        where = f"member {member!r}: " if member else ""
        target.fail("error", problem.code, f"{where}{problem.message}")

    def _consume_member(self, member: ArchiveMember) -> None:
        if member.rel_path in self.seen:  # inside a nested archive already counted unchanged
            return
        self.counters.scanned += 1
        if not _storable(member.rel_path):
            self._undecodable_name(member.rel_path, "archive_member", member.size, member.mtime_ns)
            return
        self.seen.add(member.rel_path)
        head = member.data[:HEAD_BYTES]
        base = self._base(member.rel_path, "archive_member", head, member.size, member.mtime_ns)
        if self.preparer.too_large(base.doc_type, member.size):
            self._queue(self._too_large(base))
            return
        base.content_hash = sha256_hex(member.data)
        data = member.data
        gzipped = base.doc_type == GZIP
        if gzipped:
            data = self._gunzip(base, data)
            if data is None:
                return
        known = self.known.get(member.rel_path)
        if known and self._content_unchanged(known, base):
            self._unchanged(member.rel_path, known, touch=base)
            return
        if base.doc_type == "archive":
            # Nested members arrive from iter_members itself.
            self._open_archives[base.rel_path] = base
            self._queue(base)
            return
        prepared = self.preparer.prepare(base, data)
        self._queue(_from_gzip(prepared) if gzipped else prepared)

    def _prepare(self, base: Prepared, data: bytes) -> Prepared | Future:
        """Prepare now, or on a worker thread when a provider call may be slow."""
        providers = self.preparer.providers
        if base.doc_type not in ("pdf", "image", "audio") or (
            providers.ocr is None and providers.stt is None
        ):
            return self.preparer.prepare(base, data)
        # One pool per provider, each as wide as its limit, so scans queued
        # first cannot hold the workers that recordings need.
        kind = "stt" if base.doc_type == "audio" else "ocr"
        pool = self._pools.get(kind)
        if pool is None:
            workers = self.config.stt.concurrency if kind == "stt" else self.config.ocr.concurrency
            pool = self._pools[kind] = ThreadPoolExecutor(
                max_workers=workers, thread_name_prefix=f"dir2mcp-{kind}"
            )
        return pool.submit(self._prepare_safely, base, data)

    def _prepare_safely(self, base: Prepared, data: bytes) -> Prepared:
        try:
            return self.preparer.prepare(base, data)
        except Exception as exc:  # one bad document must not stop the run
            log.exception("failed to prepare %s", base.rel_path)
            return base.fail("error", errors.EXTRACT_FAILED, f"{type(exc).__name__}: {exc}")

    def _base(self, rel_path: str, source_type: str, head: bytes, size: int, mtime_ns: int) -> Prepared:
        doc_type = self.preparer.classify(rel_path.rsplit("/", 1)[-1], head)
        if doc_type != "archive" and archive_format(rel_path, head):
            doc_type = "archive"
        elif doc_type == "archive" and gzip_inner_name(rel_path, head):
            doc_type = GZIP  # its own type once decompressed (_gunzip)
        return Prepared(
            rel_path=rel_path,
            source_type=source_type,
            doc_type=doc_type,
            size=size,
            mtime_ns=mtime_ns,
            policy_hash=self._policy_hash(doc_type),
        )

    def _policy_hash(self, doc_type: str) -> str:
        """The preparer's policy, and for archives how this module reads them."""
        policy = self.preparer.policy_hash(doc_type)
        return sha256_hex(f"{policy}:{ARCHIVE_READER_VERSION}")[:32] if doc_type == "archive" else policy

    def _stat_unchanged(self, known: Known, size: int, mtime_ns: int) -> bool:
        return (
            self.mode != "full"
            and not known.deleted
            and known.status != "error"
            and known.doc_id not in self._failed_containers
            and known.size == size
            and known.mtime_ns == mtime_ns
            and self._policy_current(known, self._policy_hash(known.doc_type))
        )

    def _content_unchanged(self, known: Known, base: Prepared) -> bool:
        return (
            self.mode != "full"
            and not known.deleted
            and known.status != "error"
            and known.doc_id not in self._failed_containers
            and known.doc_type == base.doc_type
            and self._policy_current(known, base.policy_hash)
            and known.content_hash == base.content_hash
        )

    def _policy_current(self, known: Known, policy_hash: str) -> bool:
        """Whether ``known`` was made under today's policy: ``policy_hash``,
        or for a document that holds a credential the same policy with
        today's ``security.secret_mode`` (:meth:`Preparer.policy_hash`). One
        kept out for a credential under the plain policy (before the mode
        was part of it) is read again, once."""
        if known.policy_hash == policy_hash:
            return known.error_code != errors.SECRET_DETECTED
        return known.policy_hash == self.preparer.policy_hash(known.doc_type, secret=True)

    def _unchanged(self, rel_path: str, known: Known, *, touch: Prepared | None = None) -> None:
        self.counters.unchanged += 1
        if known.doc_type == "archive":
            for path in self._known_under(rel_path + "!/"):
                if path not in self.seen:
                    self.seen.add(path)
                    self.counters.scanned += 1
                    self.counters.unchanged += 1
        if touch is not None:
            writer.touch(known.doc_id, touch.size, touch.mtime_ns)

    def _undecodable_name(self, rel_path: str, source_type: str, size: int, mtime_ns: int) -> None:
        """A file whose name is not valid UTF-8 is recorded, in error, by
        :func:`stored_name` (its undecodable bytes written ``\\xNN``), so
        ``status``, ``stats``, ``list_files`` and the admin count and list it
        like any file in error; it is never read."""
        shown = stored_name(rel_path)
        if shown in self.seen:  # a valid name spelled like this escape was met first
            self.counters.errors += 1
            self.reporter.file_error(
                shown, errors.EXTRACT_FAILED, "file name is not valid UTF-8; not indexed"
            )
            return
        self.seen.add(shown)
        base = Prepared(
            rel_path=shown, source_type=source_type, doc_type="unknown", size=size, mtime_ns=mtime_ns
        )
        self._queue(base.fail("error", errors.EXTRACT_FAILED, "file name is not valid UTF-8; not indexed"))

    def _too_large(self, base: Prepared, *, screen=None) -> Prepared:
        """Skipped as too large to index. A text file (``screen``: its
        ``read`` and what was read of it) is screened in full first, block by
        block: open_file serves slices of it, so one holding a credential is
        recorded as secret-bearing, refused and listed nowhere (issue #34),
        in redact mode too: a file too large to index is too large to redact."""
        if screen is not None and base.doc_type in TEXTUAL_TYPES:
            rule = self.engine.find_secret_in_stream(*screen)
            if rule:
                base.policy_hash = self.preparer.policy_hash(base.doc_type, secret=True)
                return self.preparer.skipped(base, errors.SECRET_DETECTED, f"content matches {rule}")
        limit = self.config.max_bytes_for(base.doc_type)
        return self.preparer.skipped(
            base,
            errors.FILE_TOO_LARGE,
            f"{base.size} bytes exceeds the {base.doc_type} limit of {limit} bytes",
        )

    def _read_error(self, entry: FileEntry, exc: OSError | errors.Dir2mcpError) -> Prepared:
        base = Prepared(
            rel_path=entry.rel_path,
            source_type="file",
            doc_type="unknown",
            size=entry.size,
            mtime_ns=entry.mtime_ns,
        )
        if isinstance(exc, errors.Dir2mcpError):
            return base.fail("error", exc.code, exc.message)
        return base.fail("error", errors.EXTRACT_FAILED, f"cannot read: {exc.strerror or exc}")

    # -- targeted refresh (watcher) -----------------------------------------

    def _refresh_path(self, rel_path: str) -> None:
        self.commit(self.read_path(rel_path))

    def read_path(self, rel_path: str) -> list[str]:
        """Read ``rel_path`` (and what is beneath it) into the batch, which
        the step may write as it goes; the known paths there now gone."""
        path = self.root / rel_path
        if self.engine.excluded_reason(rel_path, is_dir=path.is_dir()) is None and path.exists():
            for item in walk(self.engine, start=rel_path):
                self._consume(item)
        rel_path = stored_name(rel_path)  # an undecodable name is known by its escaped form
        candidates = [rel_path, *self._known_under(rel_path + "/"), *self._known_under(rel_path + "!/")]
        return [p for p in candidates if p in self.known and not self.known[p].deleted and p not in self.seen]

    def commit(self, gone: list[str]) -> None:
        """Write the batch, then tombstone ``gone``."""
        self._flush_batch()
        self._tombstone(gone)

    def _known_under(self, prefix: str) -> Iterator[str]:
        """Live known paths starting with ``prefix``: a range of the sorted
        list, so a large tree is not scanned once per archive or change."""
        paths = self._sorted_paths
        for i in range(bisect.bisect_left(paths, prefix), len(paths)):
            path = paths[i]
            if not path.startswith(prefix):
                return
            if not self.known[path].deleted:
                yield path

    # -- writing -------------------------------------------------------------

    def _queue(self, prepared: Prepared | Future) -> None:
        if not self._batch:
            self._batch_started = time.monotonic()
        self._batch.append(prepared)

    def _maybe_flush(self) -> None:
        self.step.tick(self)
        self._flush_counters()

    def _flush_batch(self) -> None:
        if not self._batch:
            return
        batch = [item.result() if isinstance(item, Future) else item for item in self._batch]
        self._batch = []
        with transaction.atomic():
            fresh = [prepared for prepared in batch if prepared.rel_path not in self.known]
            written = self._write_fresh(fresh) if len(fresh) > 1 else set()
            for prepared in batch:
                if prepared.rel_path not in written:
                    self._write_one(prepared)
        self._announce_changes()
        self._flush_counters()

    def _announce_changes(self) -> None:
        """Tell the reporter which documents changed, once they are committed
        (a server turns this into MCP resource notifications)."""
        if not (self._changed or self._listing):
            return
        paths, listing = self._changed, self._listing
        self._changed, self._listing = [], False
        transaction.on_commit(lambda: self.reporter.documents_changed(paths, listing=listing))

    def _write_fresh(self, batch: list[Prepared]) -> set[str]:
        """Write documents new to the store together (a cold index is all
        new ones); the paths written, or none if any of them failed, so that
        each is written again on its own and only the bad one is lost."""
        try:
            with transaction.atomic():
                deltas = writer.write_new_documents(batch)
        except Exception as exc:
            _raise_store_fault(exc)
            log.info("writing %d new documents together failed; writing them one by one", len(batch))
            return set()
        for prepared, delta in zip(batch, deltas, strict=True):
            self._record(prepared, delta)
        return {prepared.rel_path for prepared in batch}

    def _write_one(self, prepared: Prepared) -> None:
        known = self.known.get(prepared.rel_path)
        try:
            with transaction.atomic():
                delta = writer.write_document(prepared, known.doc_id if known else None)
        except Exception as exc:  # one bad document must not stop the run
            _raise_store_fault(exc)
            log.exception("failed to store %s", prepared.rel_path)
            prepared.fail("error", errors.EXTRACT_FAILED, f"{type(exc).__name__}: {exc}")
            prepared.extracted, prepared.drafts = None, []
            with transaction.atomic():
                delta = writer.write_document(prepared, known.doc_id if known else None)
        self._record(prepared, delta)

    def _record(self, prepared: Prepared, delta: writer.Delta) -> None:
        """Count a written document and remember what the store now holds."""
        before = self.known.get(prepared.rel_path)
        self._listing = self._listing or before is None or before.deleted
        self._changed.append(prepared.rel_path)
        self.known[prepared.rel_path] = Known(
            delta.doc_id,
            prepared.doc_type,
            prepared.size,
            prepared.mtime_ns,
            prepared.content_hash,
            prepared.policy_hash,
            prepared.status,
            False,
            prepared.error_code,
        )
        self.counters.chunks_total += delta.chunks_added - delta.chunks_removed
        self.counters.embedded_ok -= delta.embedded_removed
        self.counters.representations += delta.representations
        if prepared.status == "ok":
            self.counters.indexed += 1
        elif prepared.status == "skipped":
            self.counters.skipped += 1
        else:
            self.counters.errors += 1
            code = prepared.error_code or errors.EXTRACT_FAILED
            self.reporter.file_error(prepared.rel_path, code, prepared.error_message)

    def _unseen(self) -> list[str]:
        """Live known paths this pass has not seen."""
        return [p for p, k in self.known.items() if not k.deleted and p not in self.seen]

    def _tombstone(self, rel_paths: list[str]) -> None:
        for start in range(0, len(rel_paths), 500):
            part = rel_paths[start : start + 500]
            with transaction.atomic():
                delta = writer.tombstone(part)
            self.counters.deleted += len(part)
            self.counters.chunks_total -= delta.chunks_removed
            self.counters.embedded_ok -= delta.embedded_removed
            self._changed.extend(part)
            self._listing = True
            self._announce_changes()
        self._flush_counters()


def _raise_store_fault(exc: Exception) -> None:
    """A write that failed because of the store (a damaged database, a full
    or read-only disk) is no document's fault: it stops the run, with its
    code (STORE_CORRUPT, STATE_NOT_WRITABLE), and the batch is rolled back
    whole, to be written again by the next pass (live sync retries it)."""
    fault = store_faults.classify(exc)
    if fault is not None:
        raise fault from exc


def _from_gzip(prepared: Prepared) -> Prepared:
    """Mark the text of a plain gzip file as converted, so ``open_file`` reads
    it from the store (corpus/files.py), not the compressed bytes on disk."""
    if prepared.extracted is not None:
        prepared.extracted.meta["converted_from"] = "gzip"
    return prepared


def stored_name(rel_path: str) -> str:
    """The name ``rel_path`` is recorded and shown by: itself, or for a name
    that is not valid UTF-8 (held in Python as surrogate escapes), the same
    name with each undecodable byte written ``\\xNN``: valid UTF-8, and
    distinct for distinct names (a real name holding that backslash
    spelling is the one clash, and the one met first wins). Human output
    escapes it further (``corpus.events.printable``), as every name."""
    if _storable(rel_path):
        return rel_path
    try:
        raw = rel_path.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no file system decoding makes
        return rel_path.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def _storable(rel_path: str) -> bool:
    """Names that are not valid UTF-8 (surrogate escapes) cannot be stored."""
    try:
        rel_path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
