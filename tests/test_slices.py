"""Chunks stored as slices of their representation's text (corpus/slices.py,
migration 0016): every reader sees each chunk's own text, through edits that
move, keep and tombstone units, and an index built before migrates to
slices and answers the same."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.db import connection
from django.test.utils import CaptureQueriesContext

from corpus.index import lexical
from corpus.ingest.indexing import index_directory
from corpus.ingest.units import code_units
from corpus.models import Chunk, Representation
from corpus.navigation import names
from corpus.retrieval import Searcher
from corpus.slices import Locator
from kernel.config import build_config

pytestmark = pytest.mark.django_db

CONFIG = build_config({}, {}, {})


def module(numbers, *, changed: int | None = None) -> str:
    return "".join(
        f"def handler_{n}(request):\n"
        f'    """Answer {"quillfeather" if n == changed else "marmot"} number {n}."""\n'
        f"    return request.value + {n}\n\n"
        for n in numbers
    )


class Editor:
    """A migration's schema editor, as much as RunPython uses."""

    def __init__(self):
        self.connection = connection


def live_texts() -> dict[int, str]:
    return {c.chunk_id: c.text for c in Chunk.objects.filter(deleted=False).select_related("representation")}


def all_texts() -> dict[int, str]:
    return {c.chunk_id: c.text for c in Chunk.objects.select_related("representation")}


def search(state, query: str) -> list[tuple[str, str]]:
    return [(hit.rel_path, hit.text) for hit in Searcher(state, CONFIG, None).search(query, k=10).hits]


def answered(state) -> tuple:
    return search(state, "marmot number 7"), search(state, "marmot habits"), names.find_symbols("handler_3")


def test_the_locator_finds_a_piece_at_its_line_elsewhere_or_not_at_all():
    locator = Locator("alpha\nbeta\ngamma\nbeta\n")
    assert locator.find("beta", 4) == (17, 21)
    assert locator.find("beta", 2) == (6, 10)
    assert locator.find("gamma", 1) == (11, 16)  # a wrong line: found after it
    assert locator.find("alpha", 3) == (0, 5)  # and before it
    assert locator.find("delta", 1) is None and locator.find("", 1) is None


def test_units_are_slices_and_an_edit_keeps_every_text_right(corpus_dir, state):
    path = corpus_dir / "app.py"
    path.write_text(module(range(40)))
    index_directory(corpus_dir, state=state, config=CONFIG, mode="full")
    before = all_texts()
    assert Chunk.objects.filter(text_start__isnull=True).count() == 0
    assert all(text.startswith("def handler_") for text in before.values())

    # a new function first (every unit moves), one changed, one gone
    path.write_text(module([99, *range(40)], changed=5).replace(module([10]), ""))
    index_directory(corpus_dir, state=state, config=CONFIG)

    lines = path.read_text().split("\n")
    live = Chunk.objects.filter(deleted=False).select_related("representation").prefetch_related("spans")
    for chunk in live:
        span = chunk.spans.get()
        assert chunk.text == "\n".join(lines[span.start - 1 : span.end]), chunk.chunk_id
    kept = {cid for cid, text in live_texts().items() if before.get(cid) == text}
    assert len(kept) == 38  # the other 38 units kept their ids (and vectors)
    gone = Chunk.objects.filter(deleted=True)
    assert gone.count() == 2 and all(c.text == before[c.chunk_id] for c in gone)  # their own text
    assert search(state, "quillfeather")[0][1].startswith("def handler_5(")
    assert not any(text.startswith("def handler_10(") for _, text in search(state, "handler_10"))
    assert lexical.live_count() == len(live)

    # the file as it was: the units come back as new chunks; the tombstones still read theirs
    path.write_text(module(range(40)))
    index_directory(corpus_dir, state=state, config=CONFIG)
    assert sorted(live_texts().values()) == sorted(before.values())
    assert all(c.text == before[c.chunk_id] for c in Chunk.objects.filter(chunk_id__in=before, deleted=True))
    assert lexical.search("quillfeather", limit=5) == []
    assert search(state, "handler_10")[0][1].startswith("def handler_10(")


def test_an_index_built_before_migrates_to_slices_and_answers_the_same(corpus_dir, state):
    (corpus_dir / "app.py").write_text(module(range(30)))
    (corpus_dir / "notes.md").write_text("# Notes\n\n" + "A paragraph on marmot habits.\n\n" * 20)
    index_directory(corpus_dir, state=state, config=CONFIG, mode="full")
    texts = all_texts()
    with connection.cursor() as cursor:  # each chunk holding its text, as before 0016
        cursor.executemany(
            "UPDATE chunks SET text = %s, text_start = NULL, text_end = NULL WHERE chunk_id = %s",
            [(text, cid) for cid, text in texts.items()],
        )
    answers = answered(state)

    importlib.import_module("corpus.migrations.0016_chunk_slices").slice_rows(apps, Editor())

    assert Chunk.objects.filter(text_start__isnull=True).count() == 0
    assert set(Chunk.objects.values_list("stored_text", flat=True)) == {""}
    assert all_texts() == texts
    assert answered(state) == answers
    assert answers[0] and answers[1]
    assert Representation.objects.count() == 2


def rust_module(types: int) -> str:
    """A module whose last lines, under its own context, read as the whole
    module does at the top level once its type items are gone."""
    items = "".join(f"    type Size{i} = usize;\n" for i in range(types)) + ("\n" if types else "")
    return "mod raw {\n" + items + '    pub use super::helpers::*;\n    include!("generated.rs");\n}\n'


def test_an_edit_leaves_every_unit_with_the_context_a_clean_build_gives_it(corpus_dir, state):
    # 20 type items open the module: its tail is a unit under "mod raw {".
    # Without them the module is one unit at the top level, whose context
    # and text joined read as the tail's did: it was matched to the tail's
    # chunk and kept that chunk's context (the kernel's rust/bindings/lib.rs
    # after a switch from 6.12 to 6.1 differed from a clean build so).
    path = corpus_dir / "src" / "lib.rs"
    path.parent.mkdir()
    path.write_text(rust_module(20))
    index_directory(corpus_dir, state=state, config=CONFIG, mode="full")
    assert Chunk.objects.filter(deleted=False, context="src/lib.rs\nmod raw {").count() > 20

    path.write_text(rust_module(0))
    index_directory(corpus_dir, state=state, config=CONFIG)
    live = Chunk.objects.filter(deleted=False).select_related("representation").order_by("ordinal")
    clean = code_units(path.read_text(), "src/lib.rs", unit_max_lines=CONFIG.chunking.code.unit_max_lines)
    assert clean is not None
    assert [(c.context, c.text) for c in live] == [(d.context, d.text) for d in clean]


def statements_to_shift(corpus_dir, state, name: str, units: int) -> int:
    """SQL statements of the pass that writes ``name`` again with a new
    function first (every one of its ``units`` units moves by four lines)."""
    path = corpus_dir / name
    path.write_text(module(range(units)))
    index_directory(corpus_dir, state=state, config=CONFIG)
    path.write_text(module([999, *range(units)]))
    with CaptureQueriesContext(connection) as captured:
        index_directory(corpus_dir, state=state, config=CONFIG)
    live = Chunk.objects.filter(deleted=False, representation__document__rel_path=name)
    lines = path.read_text().split("\n")
    assert live.count() == units + 1
    for chunk in live.select_related("representation").prefetch_related("spans"):
        span = chunk.spans.get()
        assert chunk.text == "\n".join(lines[span.start - 1 : span.end]), chunk.chunk_id
    return len(captured.captured_queries)


def test_units_that_move_are_written_together_not_one_by_one(corpus_dir, state):
    # A switched branch's changed files mostly shift their units by some
    # lines: each moved chunk's new place and span went in a statement or
    # three of its own (the kernel's switch wrote hundreds of thousands).
    few = statements_to_shift(corpus_dir, state, "few.py", 10)
    many = statements_to_shift(corpus_dir, state, "many.py", 150)
    assert many - few < 20, (few, many)
