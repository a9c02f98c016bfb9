"""Chunk and representation texts are stored compressed on SQLite
(corpus/packed.py, migration 0015); everything that reads them sees the text."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.db import NotSupportedError, connection

from corpus import files
from corpus.ingest.indexing import index_directory
from corpus.models import Chunk, Representation
from corpus.packed import MAGIC, pack, unpack
from corpus.retrieval import Searcher
from corpus.security import ExclusionEngine
from kernel.config import build_config
from tests.support import holds, texts_hold

pytestmark = pytest.mark.django_db
sqlite_only = pytest.mark.skipif("connection.vendor != 'sqlite'", reason="PostgreSQL compresses by TOAST")

MARKER = "zebrafinch_quartermaster"
CONFIG = build_config({}, {}, {})


def long_module(functions: int = 40, marker: str = MARKER) -> str:
    return "".join(
        f'def handler_{n}(request):\n    """Answer {marker} number {n}."""\n'
        f"    return request.value + {n}\n\n"
        for n in range(functions)
    )


def storage_types(table: str) -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT typeof(text), count(*) FROM {table} GROUP BY 1")
        return dict(cursor.fetchall())


@pytest.mark.parametrize(
    "text", ["", "short", "x" * 95, "é" * 200, "line\n" * 5000, long_module()], ids=lambda t: f"{len(t)}"
)
def test_pack_round_trips_and_keeps_a_short_text_as_it_is(text):
    stored = pack(text)
    assert unpack(stored) == text
    assert isinstance(stored, str) == (len(text) < 96 or len(stored) >= len(text))
    assert unpack(memoryview(stored)) == text if isinstance(stored, bytes) else True


def test_a_row_written_before_reads_as_it_is():
    assert unpack("plain text of an older row") == "plain text of an older row"
    assert unpack(b"plain bytes") == "plain bytes" and not b"plain bytes".startswith(MAGIC)


@sqlite_only
def test_indexed_texts_are_stored_compressed_and_every_reader_sees_the_text(corpus_dir, state):
    (corpus_dir / "app.py").write_text(long_module())
    index_directory(corpus_dir, state=state, config=CONFIG, mode="full")

    assert storage_types("representations") == {"blob": 1}
    assert storage_types("chunks").get("blob", 0) > 0
    assert MARKER in Representation.objects.get().text
    hits = search(state, f"{MARKER} number 7")
    assert hits and MARKER in hits[0].text and MARKER in hits[0].snippet
    engine = ExclusionEngine.from_config(corpus_dir, CONFIG, state_dir=state.path)
    found = files.find(engine, content=f"{MARKER} number 39")
    assert [m["rel_path"] for m in found["matches"]] == ["app.py"]


@sqlite_only
@pytest.mark.django_db(transaction=True)  # VACUUM INTO runs outside a transaction
def test_a_check_for_a_stored_text_cannot_pass_because_it_is_compressed(corpus_dir, state, tmp_path):
    (corpus_dir / "app.py").write_text(long_module())
    index_directory(corpus_dir, state=state, config=CONFIG, mode="full")
    db = tmp_path / "meta.sqlite"  # the test database, as a file to scan
    with connection.cursor() as cursor:
        cursor.execute("VACUUM INTO %s", [str(db)])

    assert MARKER.encode() not in db.read_bytes()  # a raw scan alone would miss it
    assert holds(db, MARKER) and texts_hold(Chunk, MARKER) and texts_hold(Representation, MARKER)
    assert not holds(db, "never_written_anywhere") and not texts_hold(Chunk, "never_written_anywhere")
    with pytest.raises(NotSupportedError):
        Chunk.objects.filter(text__contains=MARKER).exists()
    with pytest.raises(NotSupportedError):
        Representation.objects.filter(text__icontains=MARKER).exists()


@sqlite_only
def test_the_migration_packs_rows_stored_as_text_and_they_read_the_same(corpus_dir, state):
    (corpus_dir / "app.py").write_text(long_module())
    (corpus_dir / "b.md").write_text("# Notes\n\n" + f"A paragraph on {MARKER}.\n" * 30)
    index_directory(corpus_dir, state=state, config=CONFIG, mode="full")
    expected = sorted(Chunk.objects.values_list("chunk_id", "text"))
    with connection.cursor() as cursor:  # as an index built before 0015 stored them
        for table in ("chunks", "representations"):
            cursor.execute(f"SELECT rowid, text FROM {table}")
            cursor.executemany(
                f"UPDATE {table} SET text = CAST(%s AS TEXT) WHERE rowid = %s",
                [(unpack(text), rowid) for rowid, text in cursor.fetchall()],
            )
    assert set(storage_types("chunks")) == {"text"}

    importlib.import_module("corpus.migrations.0015_packed_text").pack_rows(apps, SchemaEditor())

    assert storage_types("representations") == {"blob": 2}
    assert storage_types("chunks").get("blob", 0) > 0
    assert sorted(Chunk.objects.values_list("chunk_id", "text")) == expected
    (corpus_dir / "app.py").write_text(long_module(marker="edited"))
    index_directory(corpus_dir, state=state, config=CONFIG)
    assert [hit.rel_path for hit in search(state, MARKER)] == ["b.md"]


class SchemaEditor:
    """What the RunPython function uses of a schema editor."""

    connection = connection


def search(state, query: str) -> list:
    return Searcher(state, CONFIG, None).search(query, k=5).hits
