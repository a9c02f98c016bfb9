"""Listing by prefix, resources paging and completions cost what they return,
not the size of the tree (issue #37 item 6): the SQL each one runs is read
back with SQLite's EXPLAIN QUERY PLAN, which must search the path index, never
scan the documents table or its whole index."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from corpus import files, uris
from corpus.documents import live_page
from corpus.index import lexical
from corpus.models import Chunk, Document
from corpus.retrieval import Filters, Searcher
from corpus.security import ExclusionEngine
from kernel.config import build_config
from mcp_gateway import completion
from mcp_gateway.context import AuthSetup, Context
from tests.factories import DocumentFactory

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "sqlite", reason="reads SQLite's query plans"),
]

DIRS = ("arch", "drivers", "fs", "kernel", "src")


@pytest.fixture
def tree(corpus_dir: Path) -> Path:
    """300 documents in five directories, 60 each."""
    for name in DIRS:
        for index in range(60):
            DocumentFactory(rel_path=f"{name}/f{index:03}.c", doc_type="code")
    return corpus_dir


def plans(queries: list[dict]) -> list[str]:
    """What SQLite does for each captured query that reads ``documents``."""
    details = []
    with connection.cursor() as cursor:
        for query in queries:
            if '"documents"' not in query["sql"] or not query["sql"].startswith("SELECT"):
                continue
            cursor.execute("EXPLAIN QUERY PLAN " + query["sql"])
            details += [row[-1] for row in cursor.fetchall()]
    return details


def full_scans(details: list[str]) -> list[str]:
    # "SCAN documents USING INDEX ..." reads the whole index: as much a full scan.
    return [d for d in details if d.startswith("SCAN documents") or d == "SCAN d"]


def test_list_files_by_prefix_reads_only_the_matching_range(tree) -> None:
    with CaptureQueriesContext(connection) as captured:
        result = files.list_files(path_prefix="kernel/", limit=10)

    assert result["total"] == 60 and result["files"][0]["rel_path"] == "kernel/f000.c"
    details = plans(captured.captured_queries)
    assert details and not full_scans(details), details
    assert any("rel_path>? AND rel_path<?" in d for d in details), details


def test_list_files_by_cursor_reads_the_index_after_the_cursor(tree, state) -> None:
    """Keyset paging (session 27): the page a cursor leads to searches the
    path index from the cursor's path, whatever page it is."""
    engine = ExclusionEngine.from_config(tree, build_config({}, {}, {}), state_dir=state.path)
    first = files.list_files(limit=150, engine=engine)
    with CaptureQueriesContext(connection) as captured:
        deep = files.list_files(limit=10, cursor=first["next_cursor"], engine=engine)

    assert [f["rel_path"] for f in deep["files"]][:1] == ["fs/f030.c"] and deep["has_more"]
    details = plans(captured.captured_queries)
    assert details and not full_scans(details), details
    assert any("rel_path>?" in d for d in details), details


def test_a_prefix_is_case_sensitive_as_paths_are(tree) -> None:
    DocumentFactory(rel_path="Kernel/upper.c", doc_type="code")

    listed = files.list_files(path_prefix="Kernel/", limit=100)

    assert [f["rel_path"] for f in listed["files"]] == ["Kernel/upper.c"]


def context(root: Path, state) -> Context:
    return Context(root=root, state=state, config=build_config({}, {}, {}), auth=AuthSetup(None, "none"))


def test_resources_pages_are_keyed_by_path_in_the_index(tree, state) -> None:
    with CaptureQueriesContext(connection) as captured:
        page, more = live_page(context(tree, state).engine, after="fs/f059.c", limit=20)

    assert [p.rel_path for p in page][:1] == ["kernel/f000.c"] and more
    details = plans(captured.captured_queries)
    assert details and not full_scans(details), details


def test_a_completion_answers_from_its_table_without_reading_the_store(tree, state) -> None:
    ctx = context(tree, state)
    params = {
        "ref": {"type": "ref/resource", "uri": uris.FILE_TEMPLATE},
        "argument": {"name": "path", "value": "k"},
    }
    completion.complete(ctx, params)  # builds the table (once per change of the index)

    with CaptureQueriesContext(connection) as captured:
        completion.complete(ctx, params)

    assert [q["sql"] for q in captured.captured_queries if '"documents"' in q["sql"]] == []


def test_the_search_prefix_filter_is_a_range_too(tree) -> None:
    where, params = Filters(path_prefix="src/").sql()
    sql = f"SELECT d.doc_id FROM documents d WHERE {where}"

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql.replace("%s", "?"), params)
        details = [row[-1] for row in cursor.fetchall()]
        cursor.execute(sql.replace("%s", "?"), params)
        found = len(cursor.fetchall())

    assert found == Document.objects.filter(rel_path__startswith="src/").count() == 60
    assert not full_scans(details), details


def chunk_reads(queries: list[dict]) -> list[str]:
    """What SQLite does on ``chunks`` for each captured SELECT that reads it."""
    details = []
    with connection.cursor() as cursor:
        for query in queries:
            if '"chunks"' not in query["sql"] and "chunks c" not in query["sql"]:
                continue
            if not query["sql"].startswith("SELECT"):
                continue
            cursor.execute("EXPLAIN QUERY PLAN " + query["sql"])
            details += [row[-1] for row in cursor.fetchall() if "chunks" in row[-1] or " c " in row[-1] + " "]
    return details


def test_a_search_reads_its_candidate_chunks_by_id_never_every_live_chunk(index, state) -> None:
    """The liveness check of the lexical hits asks for up to a few hundred
    chunks by id and whether they are tombstones: from five ids on, SQLite
    read ``c.deleted = FALSE`` through the index beginning with ``deleted``
    instead, every live chunk of the tree for each (0.1 s a call on the
    kernel's drivers/, 940,000 chunks, two to five calls a search; session 22)."""
    users = "".join(f"def use_{n}():\n    return parse_config('{n}')\n\n\n" for n in range(12))
    index({"src/config.py": "def parse_config(path):\n    return path\n", "src/use.py": users})
    searcher = Searcher(state, build_config({}, {}, {}), None)

    with CaptureQueriesContext(connection) as captured:
        hits = searcher.search("parse_config", k=5).hits

    assert hits
    details = chunk_reads(captured.captured_queries)
    assert details
    assert not [d for d in details if "(deleted=?" in d or d.startswith("SCAN c")], details


def test_a_search_in_a_small_folder_of_a_big_index_is_joined_at_once(index, state) -> None:
    """A filter that lets through a sliver of the index (a folder of a big
    tree) goes straight to the join of the filter into the MATCH: before,
    four growing windows of every matching row were ranked, checked against
    it and thrown away first, at every tier of a search (1.3 CPU-s for one
    search in ``drivers/net/ipa/data/`` of the kernel's ``drivers/net``,
    0.2 after; session 23). The hits are the filter's best, as FTS5 ranks
    every matching row; the filter is counted from the documents down."""
    bulk = "".join(f"def handler_{n}(request):\n    return request.value + {n}\n\n\n" for n in range(220))
    files = {f"big/mod_{m:02}.py": bulk for m in range(20)}
    files["small/one.py"] = "def handler_value(request):\n    return request.value\n"
    files["small/two.py"] = "def other(request):\n    return request.value * 2\n"
    index(files)
    assert lexical.live_count() > lexical.FILTER_WINDOW
    where, params = Filters(path_prefix="small/").sql()
    every = lexical.search("handler request value", limit=10_000)
    small = {
        c.chunk_id for c in Chunk.objects.filter(representation__document__rel_path__startswith="small/")
    }
    expected = [hit for hit in every if hit[0] in small][:5]
    lexical.forget()

    with CaptureQueriesContext(connection) as captured:
        hits = lexical.search("handler request value", limit=5, chunk_filter_sql=where, params=params)

    assert hits == expected and len(hits) == 2
    sql = [query["sql"] for query in captured.captured_queries]
    assert not [q for q in sql if "rank MATCH" in q], sql  # no window of the whole index was ranked
    details = chunk_reads(captured.captured_queries)
    assert not [d for d in details if "(deleted=?" in d or d.split(" ")[:2] == ["SCAN", "c"]], details
