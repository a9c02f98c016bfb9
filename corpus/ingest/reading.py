"""Reading one pass's files: each walked file (or archive member) is
skipped when unchanged, or read, prepared and handed to the batch writer.

Change detection is :class:`~corpus.ingest.known.KnownFiles`'; what a gzip
file or an archive holds is :class:`~corpus.ingest.unpack.ArchiveReader`'s.
A file a provider reads (OCR, speech-to-text) is prepared on a thread pool,
one per provider, as wide as its concurrency limit.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import BinaryIO

from corpus.counters import Counters
from corpus.events import Reporter
from corpus.ingest import writer
from corpus.ingest.archives import ArchiveMember, MemberProblem, archive_format
from corpus.ingest.batch import BatchWriter
from corpus.ingest.classify import TEXTUAL_TYPES, gzip_inner_name
from corpus.ingest.discover import FileEntry, WalkProblem
from corpus.ingest.known import Known, KnownFiles
from corpus.ingest.prepare import HEAD_BYTES, Prepared, Preparer, sha256_hex
from corpus.ingest.prepare_pool import PoolSetup, PreparePool
from corpus.ingest.unpack import GZIP, ArchiveReader, from_gzip
from corpus.security import ExclusionEngine
from kernel import errors
from kernel.config import Config

log = logging.getLogger(__name__)


class FileReader:
    """Reads what a walk yields into ``batch``. ``take(entry)`` is the write
    step's: True when it takes a changed file whole, unread (a coordinator
    hands it to a worker)."""

    def __init__(
        self,
        config: Config,
        engine: ExclusionEngine,
        preparer: Preparer,
        *,
        known: KnownFiles,
        batch: BatchWriter,
        counters: Counters,
        reporter: Reporter,
        stop: threading.Event,
        take: Callable[[FileEntry], bool],
    ) -> None:
        self.config = config
        self.engine = engine
        self.preparer = preparer
        self.known = known
        self.batch = batch
        self.counters = counters
        self.reporter = reporter
        self.stop = stop
        self.take = take
        self.archives = ArchiveReader(config, preparer, engine, stop)
        self._pools: dict[str, ThreadPoolExecutor] = {}
        #: worker processes preparing files (a walk's, once it has enough to prepare)
        self.processes: PreparePool | None = None
        self._processes_wanted: tuple[PoolSetup, int] | None = None
        self._inline_left = 0

    def prepare_in(self, setup: PoolSetup, processes: int, *, after: int = 0) -> None:
        """Prepare files in ``processes`` worker processes from now on, once
        ``after`` more files have been prepared here (a pass with a few
        changes never starts a process)."""
        self._processes_wanted = (setup, processes)
        self._inline_left = after

    def stop_preparing(self) -> None:
        """Cancel what the worker processes have not started (the pass stops)."""
        if self.processes is not None:
            self.processes.close()

    def done_preparing(self) -> None:
        """Stop the worker processes: every file of the pass is written.
        Each holds its imports and parsers (150-275 MiB), which the dense
        pass that follows, hours on a big tree, has no use for; the next
        pass starts its own."""
        self._processes_wanted = None
        if self.processes is not None:
            self.processes.close()
            self.processes = None

    def close(self) -> None:
        """Stop the provider pools and the worker processes (what they still
        run is cancelled)."""
        for pool in self._pools.values():
            pool.shutdown(wait=True, cancel_futures=True)
        self._pools.clear()
        if self.processes is not None:
            self.processes.close()
            self.processes = None

    def consume(self, item: FileEntry | WalkProblem) -> bool:
        """Read one walked item; True when it was a file not seen before."""
        if isinstance(item, WalkProblem):
            self.counters.errors += 1
            self.reporter.file_error(stored_name(item.rel_path), item.code, item.message)
            return False
        if item.rel_path in self.known.seen:
            return False
        self.counters.scanned += 1
        if not _storable(item.rel_path):
            self._undecodable_name(item.rel_path, "file", item.size, item.mtime_ns)
            return True
        self.known.seen.add(item.rel_path)
        try:
            self._consume_file(item)
        except OSError as exc:
            self.batch.add(self._read_error(item, exc))
        except errors.Dir2mcpError as exc:  # refused at open: swapped for a link, a FIFO, ...
            self.batch.add(self._read_error(item, exc))
        return True

    def _consume_file(self, entry: FileEntry) -> None:
        known = self.known.get(entry.rel_path)
        if known and self.known.stat_unchanged(known, entry.size, entry.mtime_ns):
            self._unchanged(entry.rel_path, known)
            return
        if self.take(entry):
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
                self.batch.add(self._too_large(base, screen=(past_holes(handle.file), data)))
                return
        base.content_hash = sha256_hex(data)
        gzipped = base.doc_type == GZIP
        if gzipped:
            text = self._gunzip(base, data)
            if text is None:
                return
            data = text
        if known and self.known.content_unchanged(known, base):
            self._unchanged(entry.rel_path, known, touch=base)
            return
        if base.doc_type == "archive":
            self._consume_archive(base, data)
            return
        if gzipped:
            self.batch.add(from_gzip(self.preparer.prepare(base, data)))
        else:
            self.batch.add(self._prepare(base, data), size=len(data))

    def _gunzip(self, base: Prepared, data: bytes) -> bytes | None:
        """A gzip file's text; None when ``base`` is written as it is instead
        (:meth:`ArchiveReader.gunzip`)."""
        inner = self.archives.gunzip(base, data)
        if isinstance(inner, Prepared):
            self.batch.add(inner)
            return None
        return inner

    def _consume_archive(self, base: Prepared, data: bytes) -> None:
        mode = self.config.ingest.archives.mode
        if mode == "off":
            self.batch.add(self.preparer.skipped(base, "", "disabled by ingest.archives.mode=off"))
            return
        if mode != "deep":
            self.batch.add(base)
            return
        items = self.archives.members(base, data)
        if items is None:
            return
        if isinstance(items, Prepared):  # over an archive-wide limit
            self.batch.add(items)
            return
        self.batch.add(base)
        with self.archives.reading(base):
            for member in items:
                if self.stop.is_set():
                    return
                if isinstance(member, MemberProblem):
                    if not self.archives.blame(member):
                        self.counters.errors += 1
                        self.reporter.file_error(member.rel_path, member.code, member.message)
                    continue
                self._consume_member(member)

    def _consume_member(self, member: ArchiveMember) -> None:
        if member.rel_path in self.known.seen:  # inside a nested archive already counted unchanged
            return
        self.counters.scanned += 1
        if not _storable(member.rel_path):
            self._undecodable_name(member.rel_path, "archive_member", member.size, member.mtime_ns)
            return
        self.known.seen.add(member.rel_path)
        head = member.data[:HEAD_BYTES]
        base = self._base(member.rel_path, "archive_member", head, member.size, member.mtime_ns)
        if self.preparer.too_large(base.doc_type, member.size):
            self.batch.add(self._too_large(base))
            return
        base.content_hash = sha256_hex(member.data)
        data = member.data
        gzipped = base.doc_type == GZIP
        if gzipped:
            text = self._gunzip(base, data)
            if text is None:
                return
            data = text
        known = self.known.get(member.rel_path)
        if known and self.known.content_unchanged(known, base):
            self._unchanged(member.rel_path, known, touch=base)
            return
        if base.doc_type == "archive":
            # Nested members arrive from iter_members itself.
            self.archives.opened(base)
            self.batch.add(base)
            return
        prepared = self.preparer.prepare(base, data)
        self.batch.add(from_gzip(prepared) if gzipped else prepared)

    def _prepare(self, base: Prepared, data: bytes) -> Prepared | Future[Prepared]:
        """Prepare now, on a worker thread when a provider call may be slow,
        or in a worker process when the pass has them."""
        providers = self.preparer.providers
        if base.doc_type not in ("pdf", "image", "audio") or (
            providers.ocr is None and providers.stt is None
        ):
            processes = self._processes()
            if processes is not None:
                return processes.submit(base, data)
            return writer.precompute(self.preparer.prepare(base, data))
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

    def _processes(self) -> PreparePool | None:
        """The worker processes, started once the pass has enough files to prepare."""
        if self.processes is None and self._processes_wanted is not None:
            if self._inline_left > 0:
                self._inline_left -= 1
                return None
            setup, count = self._processes_wanted
            self._processes_wanted = None
            self.processes = PreparePool(setup, count)
        return self.processes

    def _prepare_safely(self, base: Prepared, data: bytes) -> Prepared:
        try:
            return writer.precompute(self.preparer.prepare(base, data))
        except Exception as exc:  # one bad document must not stop the run
            log.exception("failed to prepare %s", base.rel_path)
            return base.fail("error", errors.EXTRACT_FAILED, f"{type(exc).__name__}: {exc}")

    def _base(self, rel_path: str, source_type: str, head: bytes, size: int, mtime_ns: int) -> Prepared:
        doc_type = self.preparer.classify(rel_path.rsplit("/", 1)[-1], head)
        if doc_type != "archive" and archive_format(rel_path, head):
            doc_type = "archive"
        elif doc_type == "archive" and gzip_inner_name(rel_path, head):
            doc_type = GZIP  # its own type once decompressed (ArchiveReader.gunzip)
        return Prepared(
            rel_path=rel_path,
            source_type=source_type,
            doc_type=doc_type,
            size=size,
            mtime_ns=mtime_ns,
            policy_hash=self.known.policy_hash(doc_type),
        )

    def _unchanged(self, rel_path: str, known: Known, *, touch: Prepared | None = None) -> None:
        self.counters.unchanged += 1
        if known.doc_type == "archive":
            for path in self.known.under(rel_path + "!/"):
                if path not in self.known.seen:
                    self.known.seen.add(path)
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
        if shown in self.known.seen:  # a valid name spelled like this escape was met first
            self.counters.errors += 1
            self.reporter.file_error(
                shown, errors.EXTRACT_FAILED, "file name is not valid UTF-8; not indexed"
            )
            return
        self.known.seen.add(shown)
        base = Prepared(
            rel_path=shown, source_type=source_type, doc_type="unknown", size=size, mtime_ns=mtime_ns
        )
        self.batch.add(base.fail("error", errors.EXTRACT_FAILED, "file name is not valid UTF-8; not indexed"))

    def _too_large(
        self, base: Prepared, *, screen: tuple[Callable[[int], bytes], bytes] | None = None
    ) -> Prepared:
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


def past_holes(handle: BinaryIO) -> Callable[[int], bytes]:
    """``handle.read`` from where it stands, for the secret screen of a file
    too large to index, passing over a sparse file's holes: what reads as
    NULs without being stored holds no credential. Each hole reads as one
    NUL, so the text on its two sides stays apart. A 1 TiB sparse file
    costs its writer a few bytes of disk; screening its NULs took the
    indexer a quarter of an hour of CPU, each time it changed, while every
    other change waited (until session 23). On a file system that cannot
    tell holes (``SEEK_DATA`` unsupported) everything is read."""
    fd, position = handle.fileno(), handle.tell()

    def read(size: int) -> bytes:
        nonlocal position
        at = position
        try:
            start = os.lseek(fd, at, os.SEEK_DATA)
            end = os.lseek(fd, start, os.SEEK_HOLE)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a hole from here to the end, or the end itself
                return b""
            start, end = at, at + size
        data = os.pread(fd, min(size, end - start), start)
        position = start + len(data)
        return b"\x00" + data if start > at else data

    return read


def stored_name(rel_path: str) -> str:
    """The name ``rel_path`` is recorded and shown by: itself, or for a name
    that is not valid UTF-8 (held in Python as surrogate escapes), the same
    name with each undecodable byte written ``\\xNN``: valid UTF-8, and
    distinct for distinct names (a real name holding that backslash
    spelling is the one clash, and the one met first wins). Human output
    escapes it further (``kernel.output.printable``), as every name."""
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
