"""corpus.bulk.create: new rows, by bulk_create or (PostgreSQL) binary COPY,
read back exactly as bulk_create would have written them. `.ci/postgres`
runs this file on PostgreSQL too."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from corpus import bulk
from corpus.ingest.writer import name_ids
from corpus.models import (
    Chunk,
    Document,
    Reference,
    ReferenceName,
    Representation,
    Span,
    Symbol,
    pack_lines,
)
from corpus.packed import Packed, stored_form

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


def _write_everything(insert) -> dict[str, list[tuple]]:
    """Rows of every table the indexer fills, written by ``insert(model, objs)``
    inside a transaction that is rolled back (so the next call takes the
    same ids), read back raw: the bytes SQLite holds, not what the ORM makes of them."""
    # (references are written by bulk.insert alone: _navigation_rows)
    tables = ["documents", "representations", "chunks", "spans", "symbols"]
    with transaction.atomic():
        docs = insert(
            Document, [Document(rel_path=f"src/m{i}.py", doc_type="code", size_bytes=i) for i in range(2)]
        )
        reps = insert(
            Representation,
            [
                Representation(
                    document=docs[0], rep_type="raw_text", rep_hash="h", text=AWKWARD * 9, meta_json={"a": 1}
                ),
                Representation(
                    document=docs[1], rep_type="raw_text", rep_hash="g", text="short", meta_json={}
                ),
            ],
        )
        chunks = insert(
            Chunk,
            [
                Chunk(representation=reps[0], ordinal=0, text=AWKWARD * 5, context="m0.py"),
                Chunk(representation=reps[1], ordinal=1, text="tiny", deleted=True),
            ],
        )
        insert(
            Span,
            [
                Span(chunk=chunks[0], span_kind="lines", start=1, end=9, extra_json=None),
                Span(chunk=chunks[1], span_kind="lines", start=2, end=3, extra_json={"k": [1, "v"]}),
            ],
        )
        insert(
            Symbol,
            [
                Symbol(
                    document=docs[0],
                    name="Parse",
                    name_lower="parse",
                    kind="function",
                    line=1,
                    start=1,
                    end=9,
                )
            ],
        )
        with connection.cursor() as cursor:
            found = {}
            for table in tables:
                cursor.execute(f"SELECT * FROM {table} ORDER BY 1")
                found[table] = cursor.fetchall()
        transaction.set_rollback(True)
    return found


def test_rows_are_the_bytes_bulk_create_writes():
    if connection.vendor != "sqlite":
        pytest.skip("the executemany path is SQLite's (PostgreSQL's ids are not rolled back either)")
    # The SQLite path binds values itself; what it stores must be what Django's
    # bulk_create stores, column for column (compressed texts, JSON, booleans, keys).
    ours = _write_everything(bulk.create)
    django = _write_everything(lambda model, objs: model._default_manager.bulk_create(objs))
    assert all(ours.values()) and ours == django


def _navigation_rows(write) -> list[tuple]:
    with transaction.atomic():
        doc = Document.objects.create(rel_path="m.c", doc_type="code")
        write(doc.pk)
        with connection.cursor() as cursor:
            cursor.execute("SELECT * FROM symbols ORDER BY 1")
            found = cursor.fetchall()
            cursor.execute("SELECT * FROM symbol_names ORDER BY 1")
            found += cursor.fetchall()
            cursor.execute("SELECT * FROM symbol_references ORDER BY 1, 2")
            found += cursor.fetchall()
        transaction.set_rollback(True)
    return found


def test_rows_inserted_as_tuples_are_the_rows_bulk_create_writes():
    if connection.vendor != "sqlite":
        pytest.skip("the executemany path is SQLite's (PostgreSQL's ids are not rolled back either)")
    symbol = ("Parse", "parse", "A::Parse", "method", 3, 2, 9, "A")
    symbol_columns = ("name", "name_lower", "qualified", "kind", "line", "start", "end", "enclosing")
    uses = [("Parse", pack_lines([1, 4, 9])), (AWKWARD, pack_lines([2]))]

    def as_tuples(doc_id: int) -> None:
        bulk.insert(Symbol, ("document_id", *symbol_columns), [(doc_id, *symbol)])
        ids = name_ids(name for name, _ in uses)
        bulk.insert(
            Reference, ("document_id", "name_id", "lines"), [(doc_id, ids[n], lines) for n, lines in uses]
        )

    def by_django(doc_id: int) -> None:
        Symbol.objects.bulk_create(
            [Symbol(document_id=doc_id, **dict(zip(symbol_columns, symbol, strict=True)))]
        )
        names = ReferenceName.objects.bulk_create([ReferenceName(name=n) for n, _ in uses])
        Reference.objects.bulk_create(
            [
                Reference(document_id=doc_id, name=name, lines=lines)
                for name, (_, lines) in zip(names, uses, strict=True)
            ]
        )

    ours = _navigation_rows(as_tuples)
    assert len(ours) == 5 and ours == _navigation_rows(by_django)


def test_rows_given_as_values_are_the_rows_bulk_create_writes():
    if connection.vendor != "sqlite":
        pytest.skip("the executemany path is SQLite's (PostgreSQL's ids are not rolled back either)")
    # The writer inserts new chunks as tuples of values, with no model object
    # (corpus.ingest.writer._create_chunks), and needs their ids back.

    def as_values(model, objs):
        fields = [field for field in model._meta.concrete_fields if field is not model._meta.pk]
        names = [field.attname for field in fields]
        ids = bulk.insert_returning_ids(model, names, [tuple(getattr(o, n) for n in names) for o in objs])
        for obj, pk in zip(objs, ids, strict=True):
            obj.pk = pk
        return objs

    ours = _write_everything(as_values)
    assert all(ours.values()) and ours == _write_everything(
        lambda model, objs: model._default_manager.bulk_create(objs)
    )


def test_a_text_packed_ahead_is_stored_as_its_column_would_store_it():
    if connection.vendor != "sqlite":
        pytest.skip("texts are packed on SQLite only")
    text = AWKWARD * 9
    ahead = Packed(text, stored_form(text, connection))
    rows = []
    for value in (text, ahead):
        with transaction.atomic():
            doc = Document.objects.create(rel_path="m.py", doc_type="code")
            Representation.objects.create(document=doc, rep_type="raw_text", rep_hash="h", text=value)
            with connection.cursor() as cursor:
                cursor.execute("SELECT text FROM representations")
                rows.append(cursor.fetchall())
            transaction.set_rollback(True)
    assert rows[0] == rows[1] and isinstance(rows[0][0][0], bytes)
