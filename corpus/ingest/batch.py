"""Writing a pass's documents in batches, one transaction each, so a crash
leaves every document either as it was or fully updated; tombstoning what
is gone; and telling the reporter what changed once it is committed.

Documents new to the store go in together, one INSERT per table; the
others each get a savepoint, as do new ones again if writing them together
failed, so one bad document is all a batch loses.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import CancelledError, Future

from django.db import connection, transaction

from corpus import store_faults, wal
from corpus.counters import Counters
from corpus.events import Reporter
from corpus.ingest import writer
from corpus.ingest.known import Known, KnownFiles
from corpus.ingest.prepare import Prepared
from kernel import errors

log = logging.getLogger(__name__)

BATCH_DOCS = 64
BATCH_SECONDS = 0.5
#: The most documents and file bytes a batch holds unwritten: with files
#: prepared in other processes (corpus/ingest/prepare_pool.py) the reader
#: reads ahead of the writer up to here, which bounds the memory of a pass.
WINDOW_DOCS = 4 * BATCH_DOCS
WINDOW_BYTES = 64 * 2**20
#: Paths tombstoned in one transaction.
TOMBSTONE_PART = 500
#: SQLite's page cache for the connection that writes batches, in KiB (its
#: default is 2 MiB). The name indexes of symbols and references take rows
#: in no order, so once they outgrow the cache nearly every row inserted
#: reads a page back from the file: on the kernel, millions of rows.
WRITE_CACHE_KIB = 65536


class BatchWriter:
    """The pending batch of one pass and the documents changed since the
    reporter was last told. Each write is counted in ``counters``, kept in
    ``known``, and followed by ``written()`` (the pass saves its counters)."""

    def __init__(
        self, known: KnownFiles, counters: Counters, reporter: Reporter, *, written: Callable[[], None]
    ) -> None:
        self.known = known
        self.counters = counters
        self.reporter = reporter
        self._written = written
        self._batch: list[tuple[Prepared | Future[Prepared], int]] = []
        self._bytes = 0
        self._started = 0.0
        #: documents written or tombstoned since the reporter was last told, and whether the set changed
        self._changed: list[str] = []
        self._listing = False

    def add(self, prepared: Prepared | Future[Prepared], *, size: int = 0) -> None:
        """Queue a document, or a future one (prepared on a provider's pool
        or in a worker process) of a file of ``size`` bytes."""
        if not self._batch:
            self._started = time.monotonic()
        size = prepared.size if isinstance(prepared, Prepared) else size
        self._batch.append((prepared, size))
        self._bytes += size

    def due(self) -> bool:
        """Documents are ready to write: a batch's worth at the head of the
        queue (in the walk's order), or a first one that has waited long
        enough; or the queue is at its window and must make room."""
        if len(self._batch) >= WINDOW_DOCS or self._bytes >= WINDOW_BYTES:
            return True
        ready = self._ready()
        return ready >= BATCH_DOCS or bool(ready and time.monotonic() - self._started >= BATCH_SECONDS)

    def write_due(self) -> None:
        """Write the documents ready at the head of the queue, a batch at
        most (waiting for the first one when none is)."""
        if self._batch:
            self._write(max(self._ready(), 1))

    def queued(self) -> int:
        """How many documents wait to be written (prepared or not)."""
        return len(self._batch)

    def write_batch(self) -> None:
        """Write the next batch of queued documents (waiting for them to be
        prepared) in one transaction, and announce them."""
        self._write(BATCH_DOCS)

    def flush(self) -> None:
        """Write every queued document, a batch per transaction, and announce them."""
        while self._batch:
            self.write_batch()

    def _ready(self) -> int:
        """How many documents at the head of the queue are prepared (at most a batch)."""
        count = 0
        for item, _ in self._batch[:BATCH_DOCS]:
            if isinstance(item, Future) and not item.done():
                break
            count += 1
        return count

    def _write(self, count: int) -> None:
        """Write the first ``count`` queued documents in one transaction and announce them."""
        head, self._batch = self._batch[:count], self._batch[count:]
        self._bytes -= sum(size for _, size in head)
        self._started = time.monotonic()
        batch = [prepared for prepared in map(_resolved, head) if prepared is not None]
        widen_cache()
        with transaction.atomic():
            fresh = [prepared for prepared in batch if prepared.rel_path not in self.known]
            done = self._write_fresh(fresh) if len(fresh) > 1 else set()
            for prepared in batch:
                if prepared.rel_path not in done:
                    self._write_one(prepared)
        self.announce()
        self._written()
        wal.bound()

    def tombstone(self, rel_paths: list[str]) -> None:
        """Mark these documents (and their chunks) deleted, a part at a time."""
        for start in range(0, len(rel_paths), TOMBSTONE_PART):
            part = rel_paths[start : start + TOMBSTONE_PART]
            with transaction.atomic():
                delta = writer.tombstone(part)
            self.counters.deleted += len(part)
            self.counters.chunks_total -= delta.chunks_removed
            self.counters.embedded_ok -= delta.embedded_removed
            self._changed.extend(part)
            self._listing = True
            self.announce()
            wal.bound()
        self._written()

    def announce(self, elsewhere: Iterable[str] = (), *, listing: bool = False) -> None:
        """Tell the reporter which documents changed, once they are committed
        (a server turns this into MCP resource notifications); ``elsewhere``:
        documents another process wrote (a Celery worker has no server to
        tell), ``listing`` when that added or removed one."""
        self._changed.extend(elsewhere)
        self._listing = self._listing or listing
        if not (self._changed or self._listing):
            return
        paths, listed = self._changed, self._listing
        self._changed, self._listing = [], False
        transaction.on_commit(lambda: self.reporter.documents_changed(paths, listing=listed))

    def _write_fresh(self, batch: list[Prepared]) -> set[str]:
        """Write documents new to the store together (a cold index is all
        new ones); the paths written, or none if any of them failed, so that
        each is written again on its own and only the bad one is lost."""
        try:
            with transaction.atomic():
                deltas = writer.write_new_documents(batch)
        except Exception as exc:
            raise_store_fault(exc)
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
            raise_store_fault(exc)
            log.exception("failed to store %s", prepared.rel_path)
            prepared.fail("error", errors.EXTRACT_FAILED, f"{type(exc).__name__}: {exc}")
            prepared.extracted, prepared.drafts, prepared.ahead = None, [], None
            with transaction.atomic():
                delta = writer.write_document(prepared, known.doc_id if known else None)
        self._record(prepared, delta)

    def _record(self, prepared: Prepared, delta: writer.Delta) -> None:
        """Count a written document and remember what the store now holds."""
        assert delta.doc_id is not None  # write_document names the document it wrote
        before = self.known.record(
            prepared.rel_path,
            Known(
                delta.doc_id,
                prepared.doc_type,
                prepared.size,
                prepared.mtime_ns,
                prepared.content_hash,
                prepared.policy_hash,
                prepared.status,
                False,
                prepared.error_code,
            ),
        )
        self._listing = self._listing or before is None or before.deleted
        self._changed.append(prepared.rel_path)
        self.counters.chunks_total += delta.chunks_added - delta.chunks_removed
        self.counters.embedded_ok += delta.embedded_revived - delta.embedded_removed
        self.counters.representations += delta.representations
        if prepared.status == "ok":
            self.counters.indexed += 1
        elif prepared.status == "skipped":
            self.counters.skipped += 1
        else:
            self.counters.errors += 1
            code = prepared.error_code or errors.EXTRACT_FAILED
            self.reporter.file_error(prepared.rel_path, code, prepared.error_message)


def _resolved(item: tuple[Prepared | Future[Prepared], int]) -> Prepared | None:
    """A queued document, once prepared; None for one cancelled unprepared
    (its pass stopped: it is read again by the next)."""
    prepared = item[0]
    if not isinstance(prepared, Future):
        return prepared
    try:
        return prepared.result()
    except CancelledError:
        return None


def widen_cache() -> None:
    """Give this connection :data:`WRITE_CACHE_KIB` of page cache (SQLite
    only; a connection Django opened again starts from the default, so each
    batch says it again: it costs a statement)."""
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA cache_size = -{WRITE_CACHE_KIB}")


def raise_store_fault(exc: Exception) -> None:
    """A write that failed because of the store (a damaged database, a full
    or read-only disk) is no document's fault: it stops the run, with its
    code (STORE_CORRUPT, STATE_NOT_WRITABLE), and the batch is rolled back
    whole, to be written again by the next pass (live sync retries it)."""
    fault = store_faults.classify(exc)
    if fault is not None:
        raise fault from exc
