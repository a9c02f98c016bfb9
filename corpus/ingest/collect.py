"""Tombstone collection: storage stays bounded as a tree keeps moving (issue #37 item 5).

The writer (corpus/ingest/writer.py) deletes nothing in place: the chunks of
a changed or deleted file are tombstoned, so that a unit that comes back (a
branch switched back, an edit undone) revives with its id and its vector.
Left alone, every version a file ever had stays in the database. Here the
tombstones are removed, the oldest tombstoned first, once

- they outnumber ``ingest.tombstone_share`` of the live chunks (1.0: a
  switch that changes up to half the tree, and back, still revives all of
  it), down to that share; and
- whatever their number, once tombstoned ``ingest.tombstone_days`` ago
  (0: never by age).

A collected chunk goes with its spans, its lexical row (already removed
when it was tombstoned) and its stored vector; a tombstoned representation
left without chunks goes with its text, and a tombstoned document left
without representations with its navigation rows (dropped when it was
tombstoned; a tombstoned document that never had one, a skipped file's,
goes whenever a collection removes chunks). Its ANN label is marked deleted in this process's hnswlib
indices and, through the ``collected`` setting, in every other process's
(corpus.index.dense.embedding.DenseStore.sync), and hnswlib reuses the
slot for the next vector added, so the ``.hnsw`` files stay bounded too.
Chunk ids are never reused (SQLite's AUTOINCREMENT, PostgreSQL's
sequences), so a label marked deleted never names another chunk.

Batches of :data:`BATCH` chunks, each its own transaction: on SQLite the
write lock is held for one batch at a time and searches (readers under WAL)
never wait. Nothing assumes one process: each batch takes only the rows
still tombstoned, locking them on PostgreSQL (``FOR UPDATE``) so a worker
reviving one waits and then finds it gone and creates the unit anew
(writer.py), and a representation or document is removed only while still
tombstoned and empty, in the same statement.

Then the lexical index's segments are merged where two share a level
(corpus.index.lexical.compact), which drops the delete markers every
tombstone, revival and edit leaves in a contentless FTS5 table. SQLite
reuses the pages freed for new rows: the file stops growing; it does not
shrink (no VACUUM).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from django.db import connection, transaction

from corpus.index import lexical
from corpus.index.dense.embedding import COLLECTED_KEY, dense_store
from corpus.index.dense.vectors import KINDS
from corpus.index.tables import marks
from corpus.models import Chunk
from corpus.store import set_setting
from kernel.state import StateDir

logger = logging.getLogger(__name__)

#: tombstoned chunks removed in one transaction
BATCH = 2000
DAY = 86_400


@dataclass
class Collected:
    """What one collection removed."""

    chunks: int = 0
    representations: int = 0
    documents: int = 0
    #: steps of merging the lexical index's segments (lexical.compact)
    lexical_merges: int = 0
    #: names no file uses any more (``symbol_names``, once documents went)
    names: int = 0

    def __bool__(self) -> bool:
        return bool(self.chunks or self.representations or self.documents)


def due(share: float, days: float, *, now: float | None = None) -> list[int]:
    """The tombstoned chunks to collect, oldest tombstoned first: those past
    ``share`` of the live chunks, and those tombstoned more than ``days``
    ago (a chunk tombstoned before tombstones were dated counts as the
    oldest). Two counts when nothing is due."""
    now = time.time() if now is None else now
    tombstoned = Chunk.objects.filter(deleted=True)
    count = tombstoned.count()
    if not count:
        return []
    allowed = int(share * Chunk.objects.filter(deleted=False).count())
    cutoff = int(now - days * DAY) if days > 0 else None
    if count <= allowed and (cutoff is None or not tombstoned.filter(deleted_unix__lt=cutoff).exists()):
        return []
    dated = tombstoned.values_list("deleted_unix", "chunk_id")
    rows = sorted((when or 0, chunk_id) for when, chunk_id in dated)
    take = max(0, len(rows) - allowed)
    if cutoff is not None:
        take = max(take, sum(1 for when, _ in rows if when < cutoff))
    return [chunk_id for _, chunk_id in rows[:take]]


def collect(
    state: StateDir,
    share: float,
    days: float,
    *,
    stop: threading.Event | None = None,
    now: float | None = None,
) -> Collected:
    """Remove the tombstones :func:`due` names, a batch per transaction,
    then merge the lexical index's segments; ``stop`` ends either between
    two transactions."""
    found = Collected()
    ids = due(share, days, now=now)
    for start in range(0, len(ids), BATCH):
        if stop is not None and stop.is_set():
            break
        with transaction.atomic():
            part = _collect_batch(ids[start : start + BATCH])
        found.chunks += part.chunks
        found.representations += part.representations
        found.documents += part.documents
    if found.chunks:
        # Over the bound: tombstoned documents that hold nothing go too (a
        # skipped file's, with no representation ever), however recent.
        with transaction.atomic():
            found.documents += _collect_documents(_empty_tombstoned_documents())
    # On SQLite the index lock makes this process the one writer; on a shared
    # PostgreSQL database another machine's writer may be inserting a
    # reference to a name no committed row holds yet, so names stay there.
    if found.documents and connection.vendor == "sqlite":
        with transaction.atomic():
            found.names = _collect_names()
    found.lexical_merges = lexical.compact(stop)
    if found:
        set_setting(COLLECTED_KEY, str(time.time_ns()))
        _forget_labels(state, stop)
        logger.info(
            "collected %d tombstoned chunks, %d representations, %d documents",
            found.chunks,
            found.representations,
            found.documents,
        )
    return found


def _collect_batch(ids: list[int]) -> Collected:
    """Remove these chunks that are still tombstoned, then their
    representations and documents left tombstoned and empty."""
    rows = list(
        Chunk.objects.select_for_update()
        .filter(chunk_id__in=ids, deleted=True)
        .values_list("chunk_id", "representation_id")
    )
    if not rows:
        return Collected()
    chunk_ids = [chunk_id for chunk_id, _ in rows]
    rep_ids = sorted({rep_id for _, rep_id in rows})
    lexical.remove_chunks(chunk_ids)
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM spans WHERE chunk_id IN ({marks(chunk_ids)})", chunk_ids)
        cursor.execute(f"DELETE FROM chunks WHERE chunk_id IN ({marks(chunk_ids)})", chunk_ids)
        chunks = cursor.rowcount
        emptied = (
            f"FROM representations WHERE rep_id IN ({marks(rep_ids)}) AND deleted = TRUE "
            "AND NOT EXISTS (SELECT 1 FROM chunks c WHERE c.representation_id = representations.rep_id)"
        )
        # (No DELETE ... RETURNING: SQLite has it from 3.35 only.)
        cursor.execute(f"SELECT DISTINCT document_id {emptied}", rep_ids)
        doc_ids = sorted(row[0] for row in cursor.fetchall())
        cursor.execute(f"DELETE {emptied}", rep_ids)
        representations = int(cursor.rowcount)
    return Collected(chunks=chunks, representations=representations, documents=_collect_documents(doc_ids))


def _empty_tombstoned_documents() -> list[int]:
    """Tombstoned documents without a representation (a skipped file, or
    one whose representations went in an earlier collection)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT d.doc_id FROM documents d WHERE d.deleted = TRUE "
            "AND NOT EXISTS (SELECT 1 FROM representations r WHERE r.document_id = d.doc_id)"
        )
        return [row[0] for row in cursor.fetchall()]


def _collect_documents(doc_ids: list[int]) -> int:
    """Remove these documents that are still tombstoned and hold no
    representation, with any navigation rows left of them."""
    if not doc_ids:
        return 0
    gone = (
        f"SELECT d.doc_id FROM documents d WHERE d.doc_id IN ({marks(doc_ids)}) AND d.deleted = TRUE "
        "AND NOT EXISTS (SELECT 1 FROM representations r WHERE r.document_id = d.doc_id)"
    )
    with connection.cursor() as cursor:
        for table in ("symbols", "symbol_references"):
            cursor.execute(f"DELETE FROM {table} WHERE document_id IN ({gone})", doc_ids)
        cursor.execute(
            f"DELETE FROM documents WHERE doc_id IN ({marks(doc_ids)}) AND deleted = TRUE "
            "AND NOT EXISTS (SELECT 1 FROM representations r WHERE r.document_id = documents.doc_id)",
            doc_ids,
        )
        return int(cursor.rowcount)


def _collect_names() -> int:
    """Remove the interned names no reference row holds any more: a
    collected file's identifiers do not outlive it (each name is one probe
    of the references' (name, document) index)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM symbol_names WHERE NOT EXISTS "
            "(SELECT 1 FROM symbol_references r WHERE r.name_id = symbol_names.id)"
        )
        return int(cursor.rowcount)


def _forget_labels(state: StateDir, stop: threading.Event | None) -> None:
    """Mark the collected chunks' labels deleted in this process's indices
    (loading them if a model is recorded), merge the shards that left sparse
    (not once ``stop`` is set), and write the files."""
    store = dense_store(state)
    for kind in KINDS:
        store.sync(kind)
    store.compact(stop)
    store.save(force=True)
