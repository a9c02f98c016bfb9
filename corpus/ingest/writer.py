"""Writing prepared documents into the store, and tombstoning.

Callers wrap each call in a transaction. Nothing is deleted in place:
representations and chunks that no longer apply are marked ``deleted`` so
ANN labels stay valid (spec §6.3), and dated (``Chunk.deleted_unix``) so
that tombstone collection (corpus/ingest/collect.py) removes the oldest once
they pass the configured bound. The lexical index follows every chunk
created, tombstoned or revived here, in the same transaction.

A unit that comes back (a branch switched back, a file restored, an edit
undone) revives its tombstoned chunk of the same representation and text
hash rather than making a new one: the chunk keeps its id, its vector and
its ANN label, so nothing is embedded again and the database does not grow
with each switch (issue #37). A tombstone another process collected since
it was looked up is not revived: its unit is created anew. Vectors follow the recorded model: a model
change forgets every stored vector, tombstoned ones too
(corpus.index.dense.embedding.forget_vectors), so a revived chunk never brings back a
vector of another model.

A server started with ``--read-only`` refuses every write here that is not
the indexer keeping the index in step with the directory (:func:`indexing`):
a tool that would store something (``annotate``'s result, ``transcribe``'s
transcript, any tool added later) gets ``FORBIDDEN`` instead.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import connection
from django.db.backends.utils import CursorWrapper

from corpus import bulk, slices
from corpus.index import lexical
from corpus.index.tables import batches, marks
from corpus.ingest.chunking import ChunkDraft
from corpus.ingest.extracted import Extracted
from corpus.ingest.prepare import Ahead, Prepared, sha256_hex
from corpus.models import (
    Chunk,
    Document,
    EmbeddingStatus,
    Reference,
    ReferenceName,
    Representation,
    Span,
    SpanKind,
    Symbol,
    pack_lines,
)
from corpus.packed import Packed, column_value, stored_form, unpack

# Re-exported (as X): pipeline calls writer.indexing(), and the writers' callers their guards.
from corpus.write_guard import check_writable as check_writable
from corpus.write_guard import indexing as indexing
from corpus.write_guard import refuse_writes as refuse_writes
from kernel.jsontypes import JsonObject

#: Text hashes looked up at once among a representation's tombstoned chunks.
REVIVE_PART = 500
#: a symbol row's values, in :func:`_create_navigation`'s order
SYMBOL_COLUMNS = tuple("document_id name name_lower qualified kind line start end enclosing".split())
#: a new chunk row's values, in :func:`_new_chunk`'s order (every column but its id)
CHUNK_COLUMNS = tuple(
    "representation_id ordinal stored_text text_start text_end context tokens_est index_kind "
    "embedding_status embedding_error embed_seq embedding deleted deleted_unix".split()
)
SPAN_COLUMNS = ("chunk_id", "span_kind", "start", "end", "extra_json")
#: a new chunk's values (:data:`CHUNK_COLUMNS`): rows, not model objects, on the writer's hot path
ChunkRow = tuple[int, int, str, int | None, int | None, str, int, str, str, None, None, None, bool, None]
#: where a unit's text lies in its representation's text; None: not there (the chunk holds it)
Place = tuple[int, int] | None


@dataclass
class Delta:
    doc_id: int | None = None
    representations: int = 0
    chunks_added: int = 0
    chunks_removed: int = 0
    embedded_removed: int = 0
    #: of ``chunks_added``, tombstoned chunks brought back, and how many of those hold a vector
    chunks_revived: int = 0
    embedded_revived: int = 0


def touch(doc_id: int, size: int, mtime_ns: int) -> None:
    """Record a new mtime for a document whose content did not change."""
    check_writable("updating a document")
    Document.objects.filter(doc_id=doc_id).update(
        size_bytes=size, mtime_ns=mtime_ns, mtime_unix=mtime_ns // 1_000_000_000
    )


def write_document(prepared: Prepared, doc_id: int | None) -> Delta:
    """Make the store hold ``prepared``; returns what changed."""
    check_writable(f"storing {prepared.rel_path}")
    doc = _upsert_document(prepared, doc_id)
    is_new = doc_id is None
    if not prepared.has_text:
        retire = not is_new and not prepared.keep_existing
        delta = _retire_representations(doc, keep=None) if retire else Delta()
        if retire:
            _drop_navigation([doc.doc_id])
        delta.doc_id = doc.doc_id
        return delta
    extracted = prepared.extracted
    assert extracted is not None
    ahead = _ahead(prepared)
    rep_hash = ahead.rep_hash if ahead else _rep_hash(prepared)
    # A brand-new document has no rows to compare with: skip the look-ups.
    delta = Delta() if is_new else _retire_representations(doc, keep=extracted.rep_type)
    delta.doc_id = doc.doc_id
    rep = None if is_new else Representation.objects.filter(document=doc, rep_type=extracted.rep_type).first()
    if rep is not None and rep.rep_hash == rep_hash and not rep.deleted:
        return delta
    # The text the representation's chunks may hold offsets into (corpus/slices.py).
    old_text = None if rep is None else rep.text
    if rep is None:
        rep = Representation(document=doc, rep_type=extracted.rep_type)
    rep.rep_hash = rep_hash
    rep.text = _rep_text(extracted, ahead)
    rep.meta_json = extracted.meta
    rep.created_unix = int(time.time())
    rep.deleted = False
    rep.save()
    delta.representations += 1
    _sync_chunks(rep, prepared, delta, fresh=is_new, old_text=old_text, ahead=ahead)
    if not is_new:
        _drop_navigation([doc.doc_id])
    _create_navigation([(doc.doc_id, prepared)])
    return delta


def write_new_documents(batch: list[Prepared]) -> list[Delta]:
    """Write documents the store has never held: one INSERT per table for
    the whole batch, where :func:`write_document` spends several round
    trips on each document. Returns a delta per document, in order.

    A failure leaves the caller's transaction to roll back; callers fall
    back to :func:`write_document` per document to isolate the bad one.
    """
    check_writable(f"storing {len(batch)} documents")
    docs = bulk.create(
        Document, [Document(rel_path=prepared.rel_path, **_document_fields(prepared)) for prepared in batch]
    )
    deltas = [Delta(doc_id=doc.doc_id) for doc in docs]
    with_text = [(i, prepared, prepared.extracted) for i, prepared in enumerate(batch) if prepared.has_text]
    now = int(time.time())
    reps = bulk.create(
        Representation,
        [
            Representation(
                document=docs[i],
                rep_type=extracted.rep_type,
                rep_hash=ahead.rep_hash if (ahead := _ahead(prepared)) else _rep_hash(prepared),
                text=_rep_text(extracted, ahead),
                meta_json=extracted.meta,
                created_unix=now,
            )
            for i, prepared, extracted in with_text
            if extracted is not None  # has_text says so
        ],
    )
    new_chunks: list[tuple[ChunkRow, ChunkDraft]] = []
    tails: list[lexical.Tails | None] = []
    for rep, (i, prepared, _) in zip(reps, with_text, strict=True):
        deltas[i].representations = 1
        deltas[i].chunks_added = len(prepared.drafts)
        places, found_tails = _places_and_tails(rep, prepared, _ahead(prepared))
        new_chunks.extend(
            (_new_chunk(rep, prepared, draft, place), draft)
            for draft, place in zip(prepared.drafts, places, strict=True)
        )
        tails.extend(found_tails)
    _create_chunks(new_chunks, tails)
    _create_navigation([(doc.doc_id, prepared) for doc, prepared in zip(docs, batch, strict=True)])
    return deltas


def precompute(prepared: Prepared) -> Prepared:
    """Work out what writing ``prepared`` as a new representation needs and
    no database does (:class:`~corpus.ingest.prepare.Ahead`): the preparing
    workers call this, and the serial path too, so that both write the same
    rows and the writing process only writes. Call it last: a document
    changed afterwards must drop ``ahead``."""
    extracted = prepared.extracted
    if not prepared.has_text or extracted is None:
        return prepared
    locator = slices.Locator(extracted.text)
    prepared.ahead = Ahead(
        rep_hash=_rep_hash(prepared),
        places=[_locate(locator, draft) for draft in prepared.drafts],
        tails=lexical.row_tails((d.context, d.text, prepared.index_kind) for d in prepared.drafts),
        stored_text=stored_form(extracted.text, connection),
    )
    return prepared


def _rep_text(extracted: Extracted, ahead: Ahead | None) -> str:
    """The representation's text, with its stored form when that was worked out ahead."""
    if ahead is None or ahead.stored_text is None:
        return extracted.text
    return Packed(extracted.text, ahead.stored_text)


def _ahead(prepared: Prepared) -> Ahead | None:
    """What :func:`precompute` worked out for ``prepared``, if it did (for these drafts)."""
    ahead = prepared.ahead
    if ahead is None or len(ahead.places) != len(prepared.drafts):
        return None
    if ahead.tails is not None and len(ahead.tails) != len(prepared.drafts):
        return None
    return ahead


def _places_and_tails(
    rep: Representation, prepared: Prepared, ahead: Ahead | None
) -> tuple[list[tuple[int, int] | None], list[lexical.Tails | None]]:
    """Where each draft of a new representation lies in its text, and its
    lexical row's tail: worked out ahead, else here."""
    if ahead is not None:
        tails: list[lexical.Tails | None] = (
            list(ahead.tails) if ahead.tails is not None else [None] * len(ahead.places)
        )
        return ahead.places, tails
    locator = slices.Locator(rep.text)
    return [_locate(locator, draft) for draft in prepared.drafts], [None] * len(prepared.drafts)


def _rep_hash(prepared: Prepared) -> str:
    """What the representation's chunks depend on: its text, and the policy
    that cut it (a new unit format re-cuts; surviving chunks keep their ids)."""
    extracted = prepared.extracted
    assert extracted is not None
    return sha256_hex(
        "\0".join(
            [
                extracted.rep_type,
                prepared.index_kind,
                prepared.policy_hash,
                json.dumps(extracted.meta, sort_keys=True),
                extracted.text,
            ]
        )
    )


def _hash(context: str, text: str) -> str:
    """What a stored unit and a draft are matched by: a unit whose context
    changed (a renamed class) is a new unit. Computed from the texts when
    they are compared (a stored copy took 64 bytes a chunk). The context's
    length comes first: a module's last lines under the context ``mod raw {``
    and the same module whole at the top level read alike joined
    (``corpus.models.with_context``), and before session 23 the second kept the first's
    chunk and its stale context (rust/bindings/lib.rs, switching the kernel
    from 6.12 to 6.1)."""
    return sha256_hex(f"{len(context)}\n{context}\n{text}")


def _new_chunk(
    rep: Representation, prepared: Prepared, draft: ChunkDraft, found: tuple[int, int] | None
) -> ChunkRow:
    """A new chunk of ``rep``: a slice of its text where the draft's text was
    ``found`` in it, else holding the text itself; not embedded, live."""
    return (
        rep.rep_id,
        draft.ordinal,
        "" if found else draft.text,
        found[0] if found else None,
        found[1] if found else None,
        draft.context,
        max(1, len(draft.text) // 4),
        prepared.index_kind,
        EmbeddingStatus.PENDING,
        None,
        None,
        None,
        False,
        None,
    )


def _locate(locator: slices.Locator, draft: ChunkDraft) -> tuple[int, int] | None:
    return locator.find(draft.text, draft.start if draft.span_kind == SpanKind.LINES else None)


def _create_chunks(
    new_chunks: list[tuple[ChunkRow, ChunkDraft]], tails: list[lexical.Tails | None]
) -> Sequence[int]:
    """Insert these chunks, their lexical rows (each with its tails worked
    out ahead, or None) and their spans; returns their ids."""
    created = bulk.insert_returning_ids(Chunk, CHUNK_COLUMNS, [chunk for chunk, _ in new_chunks])
    lexical.index_new_chunks(
        ((chunk_id, draft.context, draft.text, chunk[7]), tail)  # chunk[7]: its index_kind (CHUNK_COLUMNS)
        for chunk_id, (chunk, draft), tail in zip(created, new_chunks, tails, strict=True)
    )
    bulk.insert(
        Span,
        SPAN_COLUMNS,
        [
            (chunk_id, draft.span_kind, draft.start, draft.end, draft.extra)
            for chunk_id, (_, draft) in zip(created, new_chunks, strict=True)
        ],
    )
    return created


def _create_navigation(written: list[tuple[int, Prepared]]) -> None:
    """Insert the symbol and reference rows of these documents (code files
    a grammar read; the others have none), as tuples: a batch of kernel
    sources holds tens of thousands of references. References go in key
    order (document, name id), so their table's pages fill as it grows."""
    defined: list[tuple[object, ...]] = []
    uses: list[tuple[int, str, tuple[int, ...]]] = []
    for doc_id, prepared in written:
        navigation = prepared.navigation
        if navigation is None or not prepared.has_text:
            continue
        defined.extend(
            (doc_id, d.name, d.name.lower(), d.qualified, d.kind, d.line, d.start, d.end, d.enclosing)
            for d in navigation.definitions
        )
        uses.extend((doc_id, u.name, u.lines) for u in navigation.uses)
    bulk.insert(Symbol, SYMBOL_COLUMNS, defined)
    ids = name_ids(name for _, name, _ in uses)
    used = sorted((doc_id, ids[name], pack_lines(lines)) for doc_id, name, lines in uses)
    bulk.insert(Reference, ("document_id", "name_id", "lines"), used)


def name_ids(names: Iterable[str]) -> dict[str, int]:
    """The id in ``symbol_names`` of each of these names, the new ones added
    (in the order given, so that ids follow the files that first used them;
    a name another writer added meanwhile is taken as it is)."""
    wanted = list(dict.fromkeys(names))
    found: dict[str, int] = {}
    with connection.cursor() as cursor:
        _read_name_ids(cursor, wanted, found)
        new = [name for name in wanted if name not in found]
        if not new:
            return found
        if connection.vendor == "sqlite":
            # The one writer (the index lock): the new names take the next ids, read back in order.
            ids = bulk.insert_returning_ids(ReferenceName, ("name",), [(name,) for name in new])
            found.update(zip(new, ids, strict=True))
            return found
        cursor.executemany(
            "INSERT INTO symbol_names (name) VALUES (%s) ON CONFLICT (name) DO NOTHING", [(n,) for n in new]
        )
        _read_name_ids(cursor, new, found)
    return found


def _read_name_ids(cursor: CursorWrapper, names: list[str], into: dict[str, int]) -> None:
    for batch in batches(names):
        cursor.execute(f"SELECT name, id FROM symbol_names WHERE name IN ({marks(batch)})", batch)
        into.update(cursor.fetchall())


def _drop_navigation(doc_ids: list[int]) -> None:
    """Delete the symbol and reference rows of these documents: nothing
    points at them (no ANN label), so they go, not tombstoned."""
    Symbol.objects.filter(document_id__in=doc_ids).delete()
    Reference.objects.filter(document_id__in=doc_ids).delete()


def _document_fields(prepared: Prepared) -> JsonObject:
    return {
        "source_type": prepared.source_type,
        "doc_type": prepared.doc_type,
        "size_bytes": prepared.size,
        "mtime_ns": prepared.mtime_ns,
        "mtime_unix": prepared.mtime_ns // 1_000_000_000,
        "content_hash": prepared.content_hash,
        "policy_hash": prepared.policy_hash,
        "status": prepared.status,
        "error": prepared.error,
        "error_code": prepared.error_code,
        "deleted": False,
        "indexed_unix": int(time.time()),
    }


def _upsert_document(prepared: Prepared, doc_id: int | None) -> Document:
    fields = _document_fields(prepared)
    # A tombstoned document that tombstone collection removed since the caller
    # looked (corpus/ingest/collect.py, another process) updates nothing: made anew.
    if doc_id is not None and Document.objects.filter(doc_id=doc_id).update(**fields):
        return Document(doc_id=doc_id, rel_path=prepared.rel_path, **fields)
    return Document.objects.create(rel_path=prepared.rel_path, **fields)


def _sync_chunks(
    rep: Representation,
    prepared: Prepared,
    delta: Delta,
    *,
    fresh: bool,
    old_text: str | None,
    ahead: Ahead | None = None,
) -> None:
    """Keep chunks whose text survived, tombstone the rest, add the new.
    ``old_text`` is the representation's text before this write (None when
    it had none): the chunks that do not survive get their text written out
    of it before they are tombstoned (corpus/slices.py). ``fresh``: the
    representation has no chunks, so every draft is new (and ``ahead``, when
    given, says where each lies and its lexical row's tail)."""
    if fresh:
        places, tails = _places_and_tails(rep, prepared, ahead)
        fresh_chunks = [
            (_new_chunk(rep, prepared, draft, place), draft)
            for draft, place in zip(prepared.drafts, places, strict=True)
        ]
        if old_text is not None and old_text != rep.text:
            slices.materialize(rep.rep_id, old_text, keep=[])
        delta.chunks_added += len(_create_chunks(fresh_chunks, tails))
        return
    old_by_hash: dict[str, list[Chunk]] = defaultdict(list)
    live = rep.chunks.filter(deleted=False).prefetch_related("spans")
    cut_from = rep.text if old_text is None else old_text
    for chunk in live:
        text = chunk.stored_text if chunk.text_start is None else cut_from[chunk.text_start : chunk.text_end]
        old_by_hash[_hash(chunk.context, text)].append(chunk)
    # Where each draft lies and its lexical row's tail, worked out by the
    # preparing worker when it could (as for a new representation), else here.
    places, tails = _places_and_tails(rep, prepared, ahead)
    moved: list[tuple[Chunk, ChunkDraft, Place]] = []
    new_chunks: list[tuple[ChunkRow, ChunkDraft]] = []
    new_tails: list[lexical.Tails | None] = []
    for draft, place, tail in zip(prepared.drafts, places, tails, strict=True):
        reusable = old_by_hash.get(_hash(draft.context, draft.text))
        if reusable:
            moved.append((reusable.pop(), draft, place))
            continue
        new_chunks.append((_new_chunk(rep, prepared, draft, place), draft))
        new_tails.append(tail)
    if old_text is not None and old_text != rep.text:
        slices.materialize(rep.rep_id, old_text, keep=[chunk.chunk_id for chunk, _, _ in moved])
    _move_chunks(moved)
    stale = [chunk for chunks in old_by_hash.values() for chunk in chunks]
    _tombstone_chunks(stale, delta)
    new_chunks, new_tails = _revive_chunks(rep, new_chunks, new_tails, delta)
    delta.chunks_added += len(_create_chunks(new_chunks, new_tails))


def _revive_chunks(
    rep: Representation,
    wanted: list[tuple[ChunkRow, ChunkDraft]],
    wanted_tails: list[lexical.Tails | None],
    delta: Delta,
) -> tuple[list[tuple[ChunkRow, ChunkDraft]], list[lexical.Tails | None]]:
    """Bring back the representation's tombstoned chunks whose context and
    text a wanted unit has (one each, those holding a vector first, then the
    latest); returns the units still to create, with their lexical tails.
    Candidates are read by the wanted contexts (REVIVE_PART at a time) and
    matched by the hash of their text, which a tombstoned chunk holds itself
    or as offsets into the representation's unchanged text
    (corpus/slices.py). A revived chunk takes the wanted row's place and
    lexical row (its tails as worked out for the new chunk)."""
    if not wanted:
        return wanted, wanted_tails
    contexts = sorted({draft.context for _, draft in wanted})
    found: dict[str, list[tuple[bool, int]]] = defaultdict(list)
    tombstoned = rep.chunks.filter(deleted=True)
    for start in range(0, len(contexts), REVIVE_PART):
        candidates_rows = tombstoned.filter(context__in=contexts[start : start + REVIVE_PART]).values_list(
            "chunk_id", "context", "embedding_status", "stored_text", "text_start", "text_end"
        )
        for chunk_id, context, status, stored, text_start, text_end in candidates_rows:
            text = unpack(stored) if text_start is None else rep.text[text_start:text_end]
            found[_hash(context, text)].append((status != EmbeddingStatus.OK, -chunk_id))
    if not found:
        return wanted, wanted_tails
    candidates = {text_hash: [-key[1] for key in sorted(keys)] for text_hash, keys in found.items()}
    chosen: dict[int, tuple[ChunkRow, ChunkDraft, lexical.Tails | None]] = {}
    rest: list[tuple[ChunkRow, ChunkDraft]] = []
    rest_tails: list[lexical.Tails | None] = []
    for (row, draft), tail in zip(wanted, wanted_tails, strict=True):
        ids = candidates.get(_hash(draft.context, draft.text))
        if ids:
            chosen[ids.pop(0)] = (row, draft, tail)
        else:
            rest.append((row, draft))
            rest_tails.append(tail)
    # Revived first, then read: a chunk that tombstone collection removed
    # since the candidates were read (corpus/ingest/collect.py, another
    # process) is not brought back, and its unit is created anew.
    Chunk.objects.filter(chunk_id__in=list(chosen), deleted=True).update(deleted=False, deleted_unix=None)
    rows = Chunk.objects.filter(chunk_id__in=list(chosen), deleted=False)
    revived = list(rows.defer("embedding").prefetch_related("spans"))
    kept = {chunk.chunk_id for chunk in revived}
    for chunk_id, (row, draft, tail) in chosen.items():
        if chunk_id not in kept:
            rest.append((row, draft))
            rest_tails.append(tail)
    # A vector that failed is tried again, as a new chunk's would be.
    rows.filter(embedding_status=EmbeddingStatus.ERROR).update(
        embedding_status=EmbeddingStatus.PENDING, embedding_error=None
    )
    _move_chunks([(chunk, chosen[chunk.chunk_id][1], _place(chosen[chunk.chunk_id][0])) for chunk in revived])
    lexical.reindex_chunks(
        ((chunk.chunk_id, chunk.context, draft.text, chunk.index_kind), tail)
        for chunk in revived
        for _, draft, tail in [chosen[chunk.chunk_id]]
    )
    delta.chunks_added += len(revived)
    delta.chunks_revived += len(revived)
    delta.embedded_revived += sum(1 for c in revived if c.embedding_status == EmbeddingStatus.OK)
    return rest, rest_tails


def _place(row: ChunkRow) -> Place:
    """Where a new chunk's row says its text lies in its representation's text (None: it holds it)."""
    start, end = row[3], row[4]  # text_start, text_end (CHUNK_COLUMNS)
    return None if start is None or end is None else (start, end)


def _move_chunks(moved: list[tuple[Chunk, ChunkDraft, Place]]) -> None:
    """Surviving chunks keep their ids and embeddings; their places may move,
    in the file and in their representation's text. One UPDATE statement
    for the rows that moved, one DELETE and one INSERT for the spans that
    changed (a switched file's units mostly shift by some lines: the same
    writes a chunk at a time were a query or three each)."""
    updates: list[tuple[int, str | bytes, int | None, int | None, int]] = []
    new_spans: list[tuple[object, ...]] = []
    span_chunks: list[int] = []
    for chunk, draft, found in moved:
        ordinal, stored, start, end = chunk.ordinal, None, chunk.text_start, chunk.text_end
        if found is None and chunk.text_start is not None:
            stored, start, end = column_value(draft.text, connection), None, None
        elif found is not None and found != (chunk.text_start, chunk.text_end):
            stored, start, end = "", found[0], found[1]
        if draft.ordinal != ordinal or stored is not None:
            if stored is None:  # the ordinal alone: the text column as it is
                stored = column_value(chunk.stored_text, connection) if chunk.text_start is None else ""
            updates.append((draft.ordinal, stored, start, end, chunk.chunk_id))
        spans = list(chunk.spans.all())
        if len(spans) == 1 and (spans[0].span_kind, spans[0].start, spans[0].end, spans[0].extra_json) == (
            draft.span_kind,
            draft.start,
            draft.end,
            draft.extra,
        ):
            continue
        new_spans.append((chunk.chunk_id, draft.span_kind, draft.start, draft.end, draft.extra))
        span_chunks.append(chunk.chunk_id)
    with connection.cursor() as cursor:
        if updates:
            cursor.executemany(
                "UPDATE chunks SET ordinal = %s, text = %s, text_start = %s, text_end = %s "
                "WHERE chunk_id = %s",
                updates,
            )
        for part in batches(span_chunks):
            cursor.execute(f"DELETE FROM spans WHERE chunk_id IN ({marks(part)})", part)
    bulk.insert(Span, SPAN_COLUMNS, new_spans)


def _tombstone_chunks(chunks: list[Chunk], delta: Delta) -> None:
    if not chunks:
        return
    ids = [chunk.chunk_id for chunk in chunks]
    Chunk.objects.filter(chunk_id__in=ids).update(deleted=True, deleted_unix=int(time.time()))
    lexical.remove_chunks(ids)
    delta.chunks_removed += len(ids)
    delta.embedded_removed += sum(1 for c in chunks if c.embedding_status == EmbeddingStatus.OK)


def _retire_representations(doc: Document, *, keep: str | None) -> Delta:
    delta = Delta()
    reps = Representation.objects.filter(document=doc, deleted=False)
    if keep is not None:
        reps = reps.exclude(rep_type=keep)
    rep_ids = list(reps.values_list("rep_id", flat=True))
    if not rep_ids:
        return delta
    chunks = Chunk.objects.filter(representation_id__in=rep_ids, deleted=False)
    chunk_ids = list(chunks.values_list("chunk_id", flat=True))
    delta.chunks_removed = len(chunk_ids)
    delta.embedded_removed = chunks.filter(embedding_status=EmbeddingStatus.OK).count()
    chunks.update(deleted=True, deleted_unix=int(time.time()))
    lexical.remove_chunks(chunk_ids)
    Representation.objects.filter(rep_id__in=rep_ids).update(deleted=True)
    return delta


def tombstone(rel_paths: list[str]) -> Delta:
    """Mark documents deleted, with everything derived from them."""
    check_writable("deleting documents")
    delta = Delta()
    docs = list(Document.objects.filter(rel_path__in=rel_paths, deleted=False))
    for doc in docs:
        part = _retire_representations(doc, keep=None)
        delta.chunks_removed += part.chunks_removed
        delta.embedded_removed += part.embedded_removed
    _drop_navigation([d.doc_id for d in docs])
    Document.objects.filter(doc_id__in=[d.doc_id for d in docs]).update(deleted=True)
    return delta


def write_extra_representation(doc_id: int, prepared: Prepared) -> Delta:
    """Add or replace one representation of a stored document, leaving the others alone.

    Used for on-demand work (transcripts, annotations) on a document the
    indexer already wrote; the chunks are in the lexical index when this
    returns, so the next search finds them.
    """
    extracted = prepared.extracted
    assert extracted is not None
    check_writable(f"storing the {extracted.rep_type} of {prepared.rel_path}")
    doc = Document.objects.get(doc_id=doc_id)
    rep_hash = sha256_hex(
        "\0".join([extracted.rep_type, json.dumps(extracted.meta, sort_keys=True), extracted.text])
    )
    rep = Representation.objects.filter(document=doc, rep_type=extracted.rep_type).first()
    delta = Delta(doc_id=doc_id)
    if rep is not None and rep.rep_hash == rep_hash and not rep.deleted:
        return delta
    fresh = rep is None or rep.deleted
    old_text = None if rep is None else rep.text
    if rep is None:
        rep = Representation(document=doc, rep_type=extracted.rep_type)
    elif rep.deleted:
        _tombstone_chunks(list(rep.chunks.filter(deleted=False)), delta)
    rep.rep_hash, rep.text, rep.meta_json = rep_hash, extracted.text, extracted.meta
    rep.created_unix, rep.deleted = int(time.time()), False
    rep.save()
    delta.representations += 1
    _sync_chunks(rep, prepared, delta, fresh=fresh, old_text=old_text)
    return delta
