"""corpus.bulk.create: new rows, by bulk_create or (PostgreSQL) binary COPY,
read back exactly as bulk_create would have written them. `.ci/postgres`
runs this file on PostgreSQL too."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from corpus import bulk
from corpus.models import Chunk, Document, Representation, Span

pytestmark = pytest.mark.django_db

AWKWARD = "quote ' double \" backslash \\ tab \t newline \n brace { } comma , NUL-free ünïcödé 🚀"


def test_rows_read_back_as_written_with_their_ids_set():
    docs = bulk.create(
        Document, [Document(rel_path=f"d{i}.md", doc_type="markdown", size_bytes=i) for i in range(3)]
    )
    assert all(doc.pk for doc in docs) and len({doc.pk for doc in docs}) == 3
    assert [doc.pk for doc in docs] == sorted(doc.pk for doc in docs)
    reps = bulk.create(
        Representation,
        [
            Representation(document=docs[0], rep_type="raw_text", rep_hash="h0", text=AWKWARD, meta_json={}),
            Representation(
                document=docs[1],
                rep_type="ocr_markdown",
                rep_hash="h1",
                text="",
                meta_json={"pages": [1, 2], "q": "'\""},
            ),
        ],
    )
    chunks = bulk.create(
        Chunk,
        [
            Chunk(
                representation=reps[0],
                ordinal=0,
                text=AWKWARD,
                tokens_est=7,
                index_kind="text",
            ),
            Chunk(
                representation=reps[1],
                ordinal=3,
                text="b",
                embedding=b"\x00\x01\xff",
                deleted=True,
            ),
        ],
    )
    bulk.create(
        Span,
        [
            Span(chunk=chunks[0], span_kind="lines", start=1, end=2**40, extra_json=None),
            Span(chunk=chunks[1], span_kind="page", start=3, end=3, extra_json={"k": ["v", None]}),
        ],
    )

    assert [d.rel_path for d in Document.objects.order_by("pk")] == ["d0.md", "d1.md", "d2.md"]
    stored = {r.pk: r for r in Representation.objects.all()}
    assert stored[reps[0].pk].text == AWKWARD and stored[reps[0].pk].document_id == docs[0].pk
    assert stored[reps[1].pk].meta_json == {"pages": [1, 2], "q": "'\""}
    first, second = (Chunk.objects.get(pk=c.pk) for c in chunks)
    assert (first.text, first.ordinal, first.tokens_est, first.deleted) == (AWKWARD, 0, 7, False)
    assert first.embedding_status == "pending" and first.embedding is None and first.embed_seq is None
    assert (bytes(second.embedding), second.deleted, second.representation_id) == (
        b"\x00\x01\xff",
        True,
        reps[1].pk,
    )
    spans = {s.chunk_id: s for s in Span.objects.all()}
    assert (spans[chunks[0].pk].end, spans[chunks[0].pk].extra_json) == (2**40, None)
    assert spans[chunks[1].pk].extra_json == {"k": ["v", None]}
    # Objects come back usable, as bulk_create leaves them.
    assert not chunks[0]._state.adding and chunks[0].spans.count() == 1


def test_later_rows_take_later_ids_and_none_is_an_empty_insert():
    first = bulk.create(Document, [Document(rel_path="a", doc_type="text")])
    assert bulk.create(Document, []) == []
    second = bulk.create(Document, [Document(rel_path="b", doc_type="text")])
    assert second[0].pk > first[0].pk


def test_a_refused_row_is_django_integrity_error_and_writes_nothing():
    bulk.create(Document, [Document(rel_path="taken", doc_type="text")])
    with pytest.raises(IntegrityError), transaction.atomic():
        bulk.create(
            Document, [Document(rel_path="new", doc_type="text"), Document(rel_path="taken", doc_type="text")]
        )
    assert sorted(Document.objects.values_list("rel_path", flat=True)) == ["taken"]
    # Objects not inserted keep no primary key, as after a failed bulk_create.
    refused = [Document(rel_path="taken", doc_type="text")]
    with pytest.raises(IntegrityError), transaction.atomic():
        bulk.create(Document, refused)
    assert refused[0].pk is None and refused[0]._state.adding
    # The connection is usable afterwards.
    assert bulk.create(Document, [Document(rel_path="after", doc_type="text")])[0].pk


def test_postgres_sends_rows_by_copy_not_insert():
    if connection.vendor != "postgresql":
        pytest.skip("the COPY path is PostgreSQL's")
    seen: list[str] = []

    def record(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        bulk.create(Document, [Document(rel_path=f"p{i}", doc_type="text") for i in range(50)])
    assert Document.objects.count() == 50
    assert not [sql for sql in seen if "INSERT" in sql.upper()], seen
