"""The first k hits of a search are the first k of any larger k (issue #36
item 1): every ranking hands the fusion ``search.candidates`` units whatever
k is asked, so fusion, feedback and definitions first see the same lists.
On a real index of standard-library modules, lexical-only and hybrid with
the local model, and once through ``dir2mcp.search`` over MCP."""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

import pytest

from corpus.ingest.indexing import index_directory
from corpus.providers.local import LocalEmbedder
from corpus.retrieval import Searcher
from kernel.config import build_config
from mcp_gateway import context, dispatch
from mcp_gateway.transport import shape_message

pytestmark = pytest.mark.django_db

KS = (5, 10, 20, 50)
#: real code and prose nobody here wrote, about 3,000 lines: a few hundred units
STDLIB = (
    "textwrap.py",
    "shlex.py",
    "fnmatch.py",
    "glob.py",
    "calendar.py",
    "heapq.py",
    "bisect.py",
    "colorsys.py",
    "string.py",
    "LICENSE.txt",
)
QUERIES = (
    "wrap a paragraph of text to a given width",
    "split a shell command line into words",
    "TextWrapper",
    "leap year",
    "merge several sorted inputs into one sorted output",
    "convert a colour from RGB to HSV",
    "permission to copy and distribute the software",
    "heappush",
    "how are tabs expanded",
    "insert into a sorted list and keep it sorted",
)


def copy_stdlib(root: Path) -> None:
    lib = Path(sysconfig.get_paths()["stdlib"])
    for name in STDLIB:
        shutil.copyfile(lib / name, root / name)


def ranked(hits) -> list[tuple]:
    return [(h.chunk_id, h.rel_path, h.span, h.score) for h in hits]


def by_k(searcher: Searcher, query: str) -> dict[int, list[tuple]]:
    return {k: ranked(searcher.search(query, k=k).hits) for k in KS}


def assert_prefixes(searcher: Searcher, query: str) -> None:
    results = by_k(searcher, query)
    longest = results[max(KS)]
    for k in KS:
        assert results[k] == longest[:k], f"{query!r}: k={k} is not the first {k} of k={max(KS)}"


@pytest.fixture
def stdlib_corpus(corpus_dir):
    copy_stdlib(corpus_dir)
    return corpus_dir


def search_call(ctx, arguments: dict) -> dict:
    """The result of ``dir2mcp.search`` called with ``arguments``, as an agent calls it."""
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "dir2mcp.search", "arguments": arguments},
    }
    return dispatch.respond(shape_message(message), dispatch.SessionState("s", "2025-11-25"), ctx)["result"]


def call_search(ctx, arguments: dict) -> dict:
    result = search_call(ctx, arguments)
    assert not result.get("isError"), result
    return result["structuredContent"]


def test_lexical_first_hits_are_the_first_of_any_larger_k(stdlib_corpus, state):
    config = build_config({"embed": {"provider": "none"}}, {}, {})
    index_directory(stdlib_corpus, state=state, config=config, embedder=None)
    searcher = Searcher(state, config, None)

    for query in QUERIES:
        assert_prefixes(searcher, query)
    # deep enough for the larger k to matter: most queries match more than 20 units
    assert sum(len(searcher.search(q, k=50).hits) > 20 for q in QUERIES) >= len(QUERIES) // 2


def test_hybrid_first_hits_are_the_first_of_any_larger_k(stdlib_corpus, state):
    config = build_config({"embed": {"provider": "local"}}, {}, {})
    embedder = LocalEmbedder()
    index_directory(stdlib_corpus, state=state, config=config, embedder=embedder)
    searcher = Searcher(state, config, embedder)

    for query in QUERIES:
        assert_prefixes(searcher, query)
        assert searcher.search(query, k=50).dense["status"] == "ok"

    # The earlier per-request pool (k × 5) is what made the first hits
    # depend on k: on this corpus it does for some of these queries.
    before = build_config({"embed": {"provider": "local"}, "search": {"candidates": 0}}, {}, {})
    old = Searcher(state, before, embedder)
    differ = [q for q in QUERIES if (r := by_k(old, q))[10] != r[50][:10]]
    assert differ

    # the same through dir2mcp.search, as an agent calls it
    ctx = context.build(root=stdlib_corpus, state=state, config=config, auth_spec="none")
    for query in QUERIES[:3]:
        hits = {k: call_search(ctx, {"query": query, "k": k})["hits"] for k in KS}
        assert len(hits[50]) == 50
        for k in KS:
            assert hits[k] == hits[50][:k]


def call_error(ctx, arguments: dict) -> dict:
    result = search_call(ctx, arguments)
    assert result.get("isError"), result
    return result["structuredContent"]["error"]


def test_the_pages_of_a_search_are_the_hits_of_a_larger_k_and_end_with_the_ranking(stdlib_corpus, state):
    # 50 hits of one-line units cite a few dozen lines: an agent reading on
    # (found@1000) pages through the same ranking with next_cursor
    config = build_config({"embed": {"provider": "none"}}, {}, {})
    index_directory(stdlib_corpus, state=state, config=config, embedder=None)
    ctx = context.build(root=stdlib_corpus, state=state, config=config, auth_spec="none")
    query = "return the list of strings for each line"
    whole = call_search(ctx, {"query": query, "k": 50})["hits"]
    assert len(whole) == 50

    pages, arguments = [], {"query": query, "k": 10}
    while True:
        page = call_search(ctx, arguments)
        pages.append(page["hits"])
        if "next_cursor" not in page:
            break
        arguments = {"query": query, "k": 10, "cursor": page["next_cursor"]}
    read = [hit for page in pages for hit in page]
    assert read[:50] == whole
    assert len(read) > 50  # the ranking goes on past the largest k
    assert len({(hit["rel_path"], str(hit["span"])) for hit in read}) == len(read)  # no hit twice
    assert pages[-1] and len(pages[-1]) <= 10

    # a cursor belongs to its call: another query's, or one we did not give, is refused
    cursor = call_search(ctx, {"query": query, "k": 10})["next_cursor"]
    other = call_error(ctx, {"query": QUERIES[1], "k": 10, "cursor": cursor})
    assert other["code"] == "INVALID_FIELD" and "other arguments" in other["message"]
    forged = call_error(ctx, {"query": query, "k": 10, "cursor": "eyJwIjogLTF9"})
    assert forged["code"] == "INVALID_FIELD"


def test_a_unit_of_imports_and_exports_comes_after_the_code_it_names(corpus_dir, state):
    (corpus_dir / "parse_config.js").write_text(
        "var readFile = require('./read_file');\n\n"
        "function parseConfig(text) {\n"
        "  var settings = JSON.parse(text);\n"
        "  settings.loaded = true;\n"
        "  return settings;\n"
        "}\n\n"
        "module.exports = parseConfig;\n"
    )
    query = "where is the parse config function exported from"

    def paths_and_lines(searcher: Searcher) -> list[tuple[str, int | None]]:
        return [(h.rel_path, h.span.start) for h in searcher.search(query, k=10).hits]

    # name_match_weight 0: the order of the words alone, and of fragments last
    alone = {"name_match_weight": 0}
    config = build_config({"embed": {"provider": "none"}, "search": alone}, {}, {})
    index_directory(corpus_dir, state=state, config=config, embedder=None)
    before = build_config({"embed": {"provider": "none"}, "search": {**alone, "fragment_share": 1}}, {}, {})
    # by its words alone the one-line export outranks the function
    assert paths_and_lines(Searcher(state, before, None))[0] == ("parse_config.js", 9)
    hits = paths_and_lines(Searcher(state, config, None))
    assert hits[0] == ("parse_config.js", 3)
    assert hits[-1] == ("parse_config.js", 9)
