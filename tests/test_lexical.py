"""The lexical index: identifier-aware tokens, BM25 search, and agreement with chunks."""

from __future__ import annotations

import contextlib
import importlib
import itertools
import random
import struct
from collections import Counter

import pytest
from django.apps import apps
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from hypothesis import given, settings
from hypothesis import strategies as st

from corpus import slices
from corpus.index import lexical, words
from corpus.models import Chunk, Document, Representation, Span
from corpus.store import wipe_index
from kernel.config import build_config

pytestmark = pytest.mark.django_db

PREFIX_FILTER = "d.rel_path LIKE %s ESCAPE '\\'"


def paths(hits: list[tuple[int, float]]) -> list[str]:
    by_id = dict(Chunk.objects.values_list("chunk_id", "representation__document__rel_path"))
    return [by_id[chunk_id] for chunk_id, _ in hits]


def top_paths(query: str, limit: int = 10, **kwargs) -> list[str]:
    return paths(lexical.search(query, limit=limit, **kwargs))


@contextlib.contextmanager
def refused_inserts(table: str):
    """The database itself refuses any row inserted into ``table`` (a
    trigger), however the row is sent (INSERT or COPY)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'disk full'; END $$"
            )
            cursor.execute(
                f"CREATE TRIGGER refuse BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION refuse()"
            )
        else:
            cursor.execute(
                f"CREATE TRIGGER refuse BEFORE INSERT ON {table} BEGIN SELECT RAISE(ABORT, 'disk full'); END"
            )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute(f"DROP TRIGGER refuse ON {table}")
                cursor.execute("DROP FUNCTION refuse()")
            else:
                cursor.execute("DROP TRIGGER refuse")


def fts_ids() -> set[int]:
    return lexical.indexed_ids()


def assert_in_sync() -> None:
    live = set(Chunk.objects.filter(deleted=False).values_list("chunk_id", flat=True))
    assert fts_ids() == live
    assert lexical.live_count() == len(live)


# -- the splitter ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("parseConfigFile", ["parseconfigfile", "parse", "config", "file"], id="camel"),
        pytest.param("snake_case_name", ["snakecasename", "snake", "case", "name"], id="snake"),
        pytest.param("kebab-case-name", ["kebabcasename", "kebab", "case", "name"], id="kebab"),
        pytest.param("os.path.join", ["ospathjoin", "os", "path", "join"], id="dotted"),
        pytest.param(
            "corpus/ingest/pipeline.py",
            ["corpusingestpipelinepy", "corpus", "ingest", "pipeline", "py"],
            id="path",
        ),
        pytest.param("HTTPServer", ["httpserver", "http", "server"], id="acronym-then-word"),
        pytest.param("XMLHttpRequest", ["xmlhttprequest", "xml", "http", "request"], id="acronym-camel"),
        pytest.param("URLs", ["urls"], id="plural-acronym-stays-whole"),
        pytest.param("utf8Decoder", ["utf8decoder", "utf", "8", "decoder"], id="digits"),
        pytest.param("std::vec::Vec", ["stdvecvec", "std", "vec", "vec"], id="double-colon"),
        pytest.param("Plain words, here.", ["plain", "words", "here"], id="prose"),
        pytest.param("1.2.3", ["1", "2", "3"], id="version-has-no-joined-form"),
        pytest.param("Straße café", ["straße", "café"], id="unicode"),
        pytest.param("__init__", ["init"], id="dunder"),
        pytest.param("", [], id="empty"),
    ],
)
def test_tokens_split_identifiers(text, expected):
    assert words.tokens(text) == expected


def test_the_ascii_splitter_cuts_where_the_rule_does():
    """Every string of up to 7 characters over two letters of each case and
    two digits (335,922 of them), then longer random ones: the one-pass
    expression and the character rule give the same sub-words."""
    checked = 0
    for length in range(1, 8):
        for chars in itertools.product("aBZz09", repeat=length):
            piece = "".join(chars)
            assert words._ASCII_SUBWORDS.findall(piece) == words._split_by_rule(piece), piece
            checked += 1
    rng = random.Random(7)
    for _ in range(20_000):
        piece = "".join(rng.choice("abxyzABXYZ0189") for _ in range(rng.randint(8, 40)))
        assert words._ASCII_SUBWORDS.findall(piece) == words._split_by_rule(piece), piece
    assert checked == sum(6**n for n in range(1, 8))


@pytest.mark.parametrize(
    ("compound", "expected"),
    [("plain", ("", ["plain"])), ("é2ü", ("", ["é2ü"])), ("a_b", ("ab", ["a", "b"])), ("__x__", ("", ["x"]))],
)
def test_parts(compound, expected):
    assert words.parts(compound) == expected


def read_tsvector(body: bytes) -> dict[str, int]:
    """A binary tsvector (tsvectorsend's format) as {lexeme: positions}."""
    (count,) = struct.unpack_from(">i", body)
    at, lexemes = 4, {}
    for _ in range(count):
        end = body.index(b"\0", at)
        word = body[at:end].decode()
        (npos,) = struct.unpack_from(">H", body, end + 1)
        positions = struct.unpack_from(f">{npos}H", body, end + 3)
        assert list(positions) == list(range(1, npos + 1))
        lexemes[word] = npos
        at = end + 3 + 2 * npos
    assert at == len(body) and list(lexemes) == sorted(lexemes, key=str.encode)
    return lexemes


IDENTIFIERS = st.text(alphabet="aZb_Yc.-/:9éß ", max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.lists(IDENTIFIERS, max_size=6))
def test_a_postgres_row_counts_each_stemmed_token_of_the_splitter(texts):
    """The tsvector built from memoised pieces holds, for each text, exactly
    the stemmed tokens of ``words.tokens`` with their counts; the caches
    warmed by earlier texts change nothing."""
    from corpus.index.lexical_pg import MAX_POSITIONS, document, stem

    for text in [*texts, *texts]:
        expected = Counter(word for word in map(stem, words.tokens(text)) if word)
        assert read_tsvector(document(text)) == {w: min(n, MAX_POSITIONS) for w, n in expected.items()}


def test_postgres_rows_stay_right_when_the_caches_are_emptied_under_threads(monkeypatch):
    """Past CACHE_LIMIT the learnt entries are dropped for fresh dicts while
    other threads may be reading the old ones: every row still reads back
    as its stemmed tokens, and the caches stay bounded."""
    from concurrent.futures import ThreadPoolExecutor

    from corpus.index import lexical_pg

    monkeypatch.setattr(lexical_pg, "CACHE_LIMIT", 40)
    texts = [f"fooBar{i} self.attr{i % 7} parse_config_{i % 13} HTTPServer{i} words" for i in range(400)]

    def row(text: str) -> tuple[dict[str, int], Counter]:
        expected = Counter(filter(None, map(lexical_pg.stem, words.tokens(text))))
        return read_tsvector(lexical_pg.document(text)), expected

    with ThreadPoolExecutor(4) as pool:
        rows = list(pool.map(row, texts * 3))
    assert all(got == dict(expected) for got, expected in rows)
    assert len(lexical_pg._compounds) < 40 + 20 and len(lexical_pg._pieces) < 40 + 40


def test_index_text_keeps_the_text_and_appends_only_new_tokens():
    assert lexical.index_text("call parseConfigFile now") == "call parseConfigFile now\nparse config file"
    assert lexical.index_text("os.path.join") == "os.path.join\nospathjoin"
    assert lexical.index_text("plain words only") == "plain words only"


# -- identifier-aware search --------------------------------------------------------

IDENTIFIER_CORPUS = {
    "src/loader.py": "def parseConfigFile(path):\n    return load(path)\n",
    "src/names.py": "snake_case_name = 1\n",
    "src/paths.py": "import os\nfull = os.path.join(base, leaf)\n",
    "docs/layout.md": "The walker lives in corpus/ingest/pipeline.py and friends.\n",
    "src/server.py": "class HTTPServer(socketserver.TCPServer):\n    allow_reuse_address = True\n",
    "notes/food.md": "A café au lait, please.\n",
    "notes/other.md": "Nothing relevant in this note at all.\n",
}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        pytest.param("parse config file", "src/loader.py", id="camel-by-words"),
        pytest.param("parseConfigFile", "src/loader.py", id="camel-exact"),
        pytest.param("parse_config_file", "src/loader.py", id="snake-query-finds-camel"),
        pytest.param("snake case name", "src/names.py", id="snake-by-words"),
        pytest.param("path join", "src/paths.py", id="dotted-by-words"),
        pytest.param("os.path.join", "src/paths.py", id="dotted-exact"),
        pytest.param("ingest pipeline", "docs/layout.md", id="path-by-words"),
        pytest.param("http server", "src/server.py", id="acronym-by-words"),
        pytest.param("TCPServer", "src/server.py", id="acronym-exact"),
        pytest.param("reuse address", "src/server.py", id="snake-attribute"),
        pytest.param("CAFE", "notes/food.md", id="case-and-diacritics-folded"),
    ],
)
def test_identifier_queries_find_their_chunk_first(index, query, expected):
    index(IDENTIFIER_CORPUS)

    assert top_paths(query)[:1] == [expected]


def test_chunk_with_all_terms_outranks_one_repeating_a_single_term(index):
    index(
        {
            "all.md": "alpha beta gamma appear together in this one note about things.\n",
            "one.md": "alpha " * 40 + "\n",
            **{f"filler{i}.md": f"unrelated filler text number {i}\n" for i in range(10)},
        }
    )

    assert top_paths("alpha beta gamma")[:2] == ["all.md", "one.md"]


def test_exact_identifier_ranks_above_loose_mentions_of_its_words(index):
    index(
        {
            "loose.md": "parse the config file. " * 20 + "\n",
            "exact.py": "def parseConfigFile(path):\n    pass\n",
            "words.py": "def parse_config(file):\n    pass\n",
        }
    )

    ranked = top_paths("parseConfigFile")

    assert ranked[0] == "exact.py"
    assert set(ranked) == {"exact.py", "loose.md", "words.py"}


def test_scores_are_negated_bm25_best_first_within_the_all_terms_tier(index):
    index({f"n{i}.md": "needle haystack " + "needle " * i + "\n" for i in range(1, 6)})

    hits = lexical.search("needle haystack", limit=10)

    scores = [score for _, score in hits]
    assert len(hits) == 5
    assert scores == sorted(scores, reverse=True) and all(score > 0 for score in scores)


# -- tombstones and agreement -----------------------------------------------------


def test_edited_and_deleted_text_never_matches(index):
    index({"a.md": "the quokkaword lives here\n", "b.md": "stable text\n"})
    assert top_paths("quokkaword") == ["a.md"]

    index({"a.md": "the wombatword lives here now\n"})
    assert top_paths("quokkaword") == []
    assert top_paths("wombatword") == ["a.md"]

    index({"a.md": None})
    assert top_paths("wombatword") == []
    assert_in_sync()


def test_tombstoned_chunk_never_matches_even_if_its_row_leaked(index):
    index({"a.md": "the quokkaword lives here\n"})
    chunk_id = Chunk.objects.get().chunk_id
    index({"a.md": None})

    lexical.index_chunks([(chunk_id, "", "the quokkaword lives here", "text")])

    assert lexical.search("quokkaword", limit=10) == []


def regular_table_ranks(match: str) -> list[tuple[int, float]]:
    """What a regular (content-keeping) FTS5 table built afresh from the live
    chunks ranks for ``match``: the contentless table, however it got there
    (inserts, deletes by body, edits), must rank the same."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE VIRTUAL TABLE reference_fts "
            "USING fts5(head, body, tokenize = 'porter unicode61 remove_diacritics 2')"
        )
        try:
            live = slices.texts(
                Chunk.objects.filter(deleted=False).values_list(
                    "chunk_id", "context", *slices.FIELDS, "index_kind"
                ),
                2,
            )
            cursor.executemany(
                "INSERT INTO reference_fts(rowid, head, body) VALUES (%s, %s, %s)",
                [(cid, *lexical.columns(context, text, kind)) for cid, context, text, kind in live],
            )
            cursor.execute(
                "SELECT rowid, rank FROM reference_fts WHERE reference_fts MATCH %s AND rank MATCH %s "
                "ORDER BY rank, rowid",
                [match, lexical.RANK],
            )
            return cursor.fetchall()
        finally:
            cursor.execute("DROP TABLE reference_fts")


def contentless_ranks(match: str) -> list[tuple[int, float]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH %s AND rank MATCH %s "
            "ORDER BY rank, rowid",
            [match, lexical.RANK],
        )
        return cursor.fetchall()


@pytest.mark.skipif("connection.vendor != 'sqlite'", reason="the contentless table is SQLite's")
def test_the_table_keeps_no_copy_of_the_text_and_ranks_as_a_regular_table_after_edits(index):
    steps = [
        {"big.py": code_file(120), "a.md": "first note about value\n", "b.md": "second note\n"},
        {"big.py": code_file(120, "def appendedFunction(value):\n    pass\n")},
        {"a.md": None, "b.md": "second note, edited with value\n"},
        {"big.py": code_file(30), "a.md": "the note is back with value\n"},
    ]
    for step in steps:
        index(step)
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*), count(head), count(body) FROM chunks_fts")
            rows, heads, bodies = cursor.fetchone()
        assert rows == Chunk.objects.filter(deleted=False).count() and heads == bodies == 0
        for match in ('"value"', '"function"', '"note"', '"appended" OR "second"'):
            found, expected = contentless_ranks(match), regular_table_ranks(match)
            assert [rowid for rowid, _ in found] == [rowid for rowid, _ in expected]
            assert [rank for _, rank in found] == pytest.approx([rank for _, rank in expected], rel=1e-9)


def test_the_splitter_is_pinned_because_rows_are_deleted_by_their_body():
    """Contentless rows are deleted by the exact columns written: a change to
    what index_text or columns writes must bump SPLITTER_VERSION and ship a
    migration that rebuilds chunks_fts (as 0020_lexical_head_after_comments does), then
    update this."""
    sample = "class HTTPServer(socketserver.TCPServer):\n    parse_config_file(os.path.join(a, b)) # café"
    unit = "# the parser\n@cache\ndef parse(path):\n    return os.path.join(path)"
    assert (lexical.SPLITTER_VERSION, lexical.index_text(sample), lexical.columns("m.py", unit, "code")) == (
        3,
        sample + "\nhttp server socketservertcpserver tcp server parseconfigfile ospathjoin",
        ("m.py\n@cache\ndef parse(path):\nmpy", "# the parser\n    return os.path.join(path)\nospathjoin"),
    )


@pytest.mark.parametrize(
    ("text", "head", "body"),
    [
        # a JSDoc/Javadoc block: the member's line is the head, the comment the body
        (
            "/**\n * Begins loading the media.\n */\nload(): void;",
            "load(): void;",
            "/**\n * Begins loading the media.\n */",
        ),
        ("// helper\n// more\nfunction f() {\n}", "function f() {", "// helper\n// more\n}"),
        ("/// Adds.\n#[inline]\nfn add() {}", "#[inline]\nfn add() {}", "/// Adds."),
        ("# note\n\n@cache\ndef f():\n    pass", "\n@cache\ndef f():", "# note\n    pass"),
        ("/* a */ int x;\nint y;", "/* a */ int x;", "int y;"),
        ("/*\n * License\n */\nstatic int f(void)\n{", "static int f(void)", "/*\n * License\n */\n{"),
        # C preprocessor lines define: they are heads, not comments
        ("#define FOO 1\n#define BAR 2", "#define FOO 1", "#define BAR 2"),
        ("#  if defined(X)\nint x;", "#  if defined(X)", "int x;"),
        ("def f():\n    # inner\n    return 1", "def f():", "    # inner\n    return 1"),
        ("// only a comment", "// only a comment", ""),
    ],
)
def test_a_code_heads_line_is_the_one_after_the_comments_before_it(text, head, body):
    assert words.head_and_body("", text, "code") == (head, body)
    assert lexical.columns("a.md", "Title\nbody", "text") == ("", "a.md\nTitle\nbody\namd")


def code_file(functions: int, tail: str = "") -> str:
    return "".join(f"def function_{i}(value):\n    return value + {i}\n" for i in range(functions)) + tail


def test_index_rows_equal_live_chunks_through_edits_deletes_and_readds(index):
    steps = [
        {"big.py": code_file(300), "a.md": "first note\n", "b.md": "second note\n"},
        {"big.py": code_file(300, "def appendedFunction():\n    pass\n")},  # early chunks survive
        {"a.md": None},
        {"a.md": "first note is back\n", "b.md": "second note, edited\n"},
        {"b.md": "now it leaks AKIAABCDEFGHIJKLMNOP\n"},  # becomes skipped: representation retired
        {"b.md": "clean again\n", "big.py": code_file(20)},
        {"big.py": None, "a.md": None, "b.md": None},
    ]
    for step in steps:
        index(step)
        assert_in_sync()
    assert lexical.live_count() == 0


def test_chunks_that_survive_an_edit_keep_their_row(index):
    index({"big.py": code_file(300)})
    before = fts_ids()

    index({"big.py": code_file(300, "def appendedFunction():\n    pass\n")})

    kept = before & fts_ids()
    assert kept, "unchanged leading chunks keep their ids and rows"
    assert lexical.search("function_3", limit=1)[0][0] in kept
    assert lexical.search("appended function", limit=1)[0][0] not in before
    assert_in_sync()


def test_failed_document_write_rolls_back_its_index_rows(index):
    index({"a.md": "first version\n"})

    # Spans are written after the new chunks reach the index: the savepoint
    # must undo both when the database refuses the spans.
    with refused_inserts("spans"):
        counters = index({"a.md": "second version with quokkaword\n"})

    assert counters.errors == 1
    assert lexical.search("quokkaword", limit=5) == []
    assert_in_sync()


# -- hostile queries ------------------------------------------------------------------

HOSTILE = [
    '"',
    '""',
    "AND OR NOT",
    "AND",
    "*",
    "foo*",
    "NEAR(",
    "NEAR(a b, 2)",
    "col:",
    "body:quokka",
    "{body}: x",
    "(((",
    ")",
    "a AND",
    "^start",
    "-minus +plus",
    "'",
    "'; DROP TABLE chunks; --",
    "\x00",
    "\\",
    "ünïcödé ΑΒΓ кириллица",
    "漢字かな",
    "🙂🙃",
    "\U00010f70",
    "ab\U00010f70cd quokka",
    "",
    "   \t\n",
    "%s %%s ?",
    "a" * 5000,
    " ".join(f"word{i}" for i in range(500)),
]


@pytest.mark.parametrize("query", HOSTILE, ids=[f"hostile-{i}" for i in range(len(HOSTILE))])
def test_hostile_queries_never_raise(index, query):
    index({"a.md": "the quokka said AND and NOT near body\n"})

    hits = lexical.search(query, limit=5)

    assert isinstance(hits, list)


def test_random_punctuation_soup_never_raises(index):
    index({"a.md": "the quokka said AND and NOT near body\n"})
    rng = random.Random(1234)
    alphabet = "\"*():^-+{}[],.;'\\%?!@#&|~`<>= \tNEARandORnot\u00e9\U0001f642"

    for _ in range(300):
        query = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        lexical.search(query, limit=3)


def test_operator_words_are_searched_as_plain_words(index):
    index({"a.md": "AND NOT near\n", "b.md": "something else entirely\n"})

    assert top_paths("AND NOT NEAR") == ["a.md"]


# -- filters, rebuild, wipe ---------------------------------------------------------------


def test_path_filter_applies_before_the_limit(index):
    files = {f"other/strong{i}.md": "needle needle needle\n" for i in range(100)}
    files["wanted/weak.md"] = "a long note that mentions the needle once among many other words\n"
    index(files)
    assert "wanted/weak.md" not in top_paths("needle", limit=5)

    filtered = top_paths("needle", limit=5, chunk_filter_sql=PREFIX_FILTER, params=["wanted/%"])

    assert filtered == ["wanted/weak.md"]


@pytest.mark.parametrize("window", [lexical.FILTER_WINDOW, 16], ids=["windowed", "join-fallback"])
@pytest.mark.skipif("connection.vendor != 'sqlite'", reason="the windowed top-N read is SQLite's")
def test_filtered_top_n_equals_ranking_the_whole_filtered_set(index, monkeypatch, window):
    """The windowed read (top-N by rank, then the filter) gives exactly what
    ranking every filtered match through a join gives, including when the
    filter is so selective that the window grows past its cap."""
    monkeypatch.setattr(lexical, "FILTER_WINDOW", window)
    files = {f"other/strong{i:03}.md": "needle needle needle haystack\n" for i in range(150)}
    files |= {f"wanted/weak{i}.md": f"a note {'with many words ' * i}that has a needle\n" for i in range(7)}
    index(files)
    backend = lexical.SQLiteFTS5()

    for terms, require_all in ((["needle"], True), (["needle", "haystack"], False)):
        match = (" AND " if require_all else " OR ").join(f'"{t}"' for t in terms)
        joined = backend._joined(match, 5, PREFIX_FILTER, ["wanted/%"])
        got = backend.query(
            terms, require_all=require_all, limit=5, filter_sql=PREFIX_FILTER, params=["wanted/%"]
        )

        assert got == joined
        assert paths(got) == [f"wanted/weak{i}.md" for i in range(5)]


def test_filter_can_use_django_placeholders_and_document_columns(index):
    index({"a.py": "needle = 1\n", "b.md": "needle here\n"})

    assert top_paths("needle", chunk_filter_sql="d.doc_type = %s", params=["code"]) == ["a.py"]


def test_rebuild_restores_results_after_rows_are_lost(index):
    index({"a.md": "the quokkaword\n", "b.py": "def parseConfigFile():\n    pass\n"})
    lexical.clear()
    assert lexical.search("quokkaword", limit=5) == []

    count = lexical.rebuild()

    assert count == Chunk.objects.filter(deleted=False).count() == 2
    assert top_paths("quokkaword") == ["a.md"]
    assert top_paths("parse config file") == ["b.py"]
    assert_in_sync()


def lexical_table() -> str:
    return "chunks_fts" if connection.vendor == "sqlite" else "chunks_lexical"


def create_by_migration() -> None:
    """The migration that fills this database's lexical table from the
    chunks it holds, run again, on the chunks as they were then (each
    holding its text: migration 0016 makes them slices, and runs after)."""
    texts = [(c.text, c.chunk_id) for c in Chunk.objects.select_related("representation")]
    with connection.cursor() as cursor:
        cursor.executemany(
            "UPDATE chunks SET text = %s, text_start = NULL, text_end = NULL WHERE chunk_id = %s", texts
        )
    # The migrations as written (a new database records the squash of 0001-0018 instead).
    before = (
        MigrationLoader(connection, replace_migrations=False)
        .project_state(("corpus", "0015_packed_text"))
        .apps
    )
    if connection.vendor == "sqlite":
        importlib.import_module("corpus.migrations.0003_chunk_fts").create_fts(before, FakeSchemaEditor())
        importlib.import_module("corpus.migrations.0014_contentless_fts").to_contentless(
            before, FakeSchemaEditor()
        )
    else:
        importlib.import_module("corpus.migrations.0008_lexical_postgres_python_stems").reindex(
            before, FakeSchemaEditor()
        )
    importlib.import_module("corpus.migrations.0016_chunk_slices").slice_rows(apps, FakeSchemaEditor())
    assert set(Chunk.objects.filter(deleted=False).values_list("stored_text", flat=True)) == {""}
    importlib.import_module("corpus.migrations.0020_lexical_head_after_comments").rebuild(
        apps, FakeSchemaEditor()
    )


def test_repeated_words_blobs_and_accents_index_and_match(index):
    """What PostgreSQL's tsvector cannot hold (over 256 positions of one
    lexeme, a lexeme over 2 KB) is capped or left out, not an error."""
    index(
        {
            "a.md": "zebraword " * 300 + "q" * 3000 + "\n",
            "b.md": "zebraword once, at the Café Ünïcode\n",
            "c.md": "it's a back\\slash and a 'quoted' word\n",
        }
    )

    assert sorted(set(top_paths("zebraword"))) == ["a.md", "b.md"]
    assert top_paths("cafe unicode") == ["b.md"]
    assert top_paths("quoted slash") == ["c.md"]
    assert_in_sync()


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="the tsvector is PostgreSQL's")
def test_a_chunk_is_stored_as_its_stemmed_tokens_with_one_position_per_occurrence(index):
    """The binary tsvector a COPY sends reads back as the one PostgreSQL
    would hold: folded, stemmed, sorted, positions 1..n (the "s" of "it's",
    which the stemmer empties, is left out); a replaced row too. The chunk's
    context, its path, is indexed with it ("a", "md", "amd"). A code chunk's
    head (context and first line) comes first, of weight A, the rest of its
    text following, of weight D (bare); a prose chunk has no head."""
    index({"a.md": "Café parseConfig parseConfig it's\n"})
    chunk_id = Chunk.objects.get().chunk_id

    def stored() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SELECT body::text FROM chunks_lexical WHERE chunk_id = %s", [chunk_id])
            return cursor.fetchone()[0]

    assert stored() == "'a':1 'amd':1 'cafe':1 'config':1,2 'it':1 'md':1 'pars':1,2 'parseconfig':1,2"
    lexical.index_chunks([(chunk_id, "", "zebra\nzebra zebra", "text")])
    assert stored() == "'zebra':1,2,3"
    lexical.index_chunks([(chunk_id, "z.py", "def zebra():\n    zebra = zebra", "code")])
    assert stored() == "'def':1A 'py':1A 'z':1A 'zebra':1A,2,3 'zpy':1A"


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="the COPY is PostgreSQL's")
def test_a_refused_copy_is_django_integrity_error(index):
    """Callers (the worker's retry, the writer's per-document fallback) catch
    Django's database errors: a COPY's failure must arrive as one."""
    from django.db import IntegrityError, transaction

    from corpus.index.lexical_pg import PostgresFTS

    index({"a.md": "the quokkaword\n"})
    chunk_id = Chunk.objects.get().chunk_id
    with pytest.raises(IntegrityError), transaction.atomic():
        PostgresFTS().insert([(chunk_id, "", "a second row for the same chunk", "text")])
    assert top_paths("quokkaword") == ["a.md"]


def test_rebuild_recreates_a_missing_table(index):
    index({"a.md": "the quokkaword\n"})
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {lexical_table()}")

    assert lexical.rebuild() == 1
    assert top_paths("quokkaword") == ["a.md"]


def test_migration_indexes_chunks_that_already_exist(index):
    index({"a.md": "the quokkaword\n", "b.py": "snake_case_name = 1\n"})
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {lexical_table()}")

    create_by_migration()

    assert_in_sync()
    assert top_paths("snake case name") == ["b.py"]


def test_wipe_index_clears_the_lexical_index(index):
    index({"a.md": "the quokkaword\n"})

    wipe_index()

    assert lexical.live_count() == 0
    assert lexical.search("quokkaword", limit=5) == []


# -- other databases ------------------------------------------------------------------------


def test_other_databases_index_nothing_and_migrate_as_a_no_op(monkeypatch):
    monkeypatch.setattr(connection, "vendor", "mysql")
    editor = FakeSchemaEditor()

    importlib.import_module("corpus.migrations.0003_chunk_fts").create_fts(apps, editor)
    importlib.import_module("corpus.migrations.0004_lexical_postgres").create(apps, editor)
    importlib.import_module("corpus.migrations.0008_lexical_postgres_python_stems").reindex(apps, editor)
    lexical.index_chunks([(1, "", "quokkaword", "text")])

    assert editor.statements == []
    assert lexical.search("quokkaword", limit=5) == []
    assert (lexical.live_count(), lexical.rebuild()) == (0, 0)


class FakeSchemaEditor:
    """Just what the RunPython operation uses, without the SQLite atomic-block guard."""

    def __init__(self):
        self.connection = connection
        self.statements: list[str] = []

    def execute(self, sql: str) -> None:
        self.statements.append(sql)
        with connection.cursor() as cursor:
            cursor.execute(sql)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        pytest.param("upload cap", "limits.md", id="plural-and-past"),
        pytest.param("retrying connections", "net.md", id="gerund-and-plural"),
        pytest.param("parsed configurations", "parse.py", id="stems-of-identifier-parts"),
    ],
)
def test_word_forms_match_through_stemming(index, query, expected):
    index(
        {
            "limits.md": "Uploads are capped at 20 MB.\n",
            "net.md": "The client retries a connection three times.\n",
            "parse.py": "def parse_configuration(path):\n    return path\n",
            "other.md": "Nothing relevant here at all.\n",
        }
    )
    assert top_paths(query)[0] == expected


def test_a_long_question_is_ranked_by_its_content_words(index):
    """Over three terms, BM25 alone ranks (no all-terms tier first) and, with
    the default drop_stop_words, function words are left out: a unit full of
    "the", "of", "to" no longer outranks the one about the question."""
    index(
        {
            "filler.txt": "the of the to the of and the to of the in the of to the\n" * 3,
            "answer.txt": "Multipart bodies are split at each boundary line.\n",
        }
    )
    question = "how is the body of a multipart message split at the boundary"

    long_first, _ = lexical.search_tiers(question, limit=5, all_first_max=3, drop_stop_words=True)
    tiered, _ = lexical.search_tiers(question, limit=5)

    path = dict(Chunk.objects.values_list("chunk_id", "representation__document__rel_path"))
    assert [path[cid] for cid, _ in long_first] == ["answer.txt"]
    assert {path[cid] for cid, _ in tiered} == {"answer.txt", "filler.txt"}


CONSOLE = """class Console:
    def show_syntax_error(self, filename=None):
        kind, value, tb = sys.exc_info()
        lines = traceback.format_exception_only(kind, value)
        self.write(''.join(lines))

    def run_source(self, source, filename='<input>'):
        try:
            code = self.compile(source, filename)
        except SyntaxError as error:
            self.report(error.msg, error.lineno, error.offset)
            return False
        self.run_code(code)
        return False

    def run_code(self, code):
        try:
            exec(code, self.locals)
        except BaseException as error:
            self.report(error)
""" + "".join(
    f"\n    def helper_{i}(self, value):\n        total = value + {i}\n        return self.store(total)\n"
    for i in range(20)
)


def test_a_sentence_finds_first_the_unit_whose_name_shares_its_words(index):
    """A doc comment's sentence (bench/retrieval.py's Python query for
    code.py's showsyntaxerror) ranks first the unit whose head, its context
    and first line, holds its words, above one using some of them more often
    in its body. With one column, run_source ranked first (issue #36)."""
    index({"console.py": CONSOLE})

    hits = lexical.search("Display the syntax error that just occurred.", limit=3)

    ids = [chunk_id for chunk_id, _ in hits]
    texts = dict(
        slices.texts(Chunk.objects.filter(chunk_id__in=ids).values_list("chunk_id", *slices.FIELDS), 1)
    )
    assert [texts[chunk_id].strip().split("(")[0] for chunk_id in ids] == [
        "def show_syntax_error",
        "def run_source",
        "def run_code",
    ]


# -- any-term queries whose common terms are not ranked (max-score pruning) ----------


def any_term_ranking(terms: list[str], limit: int, **kwargs) -> list[tuple[int, float]]:
    """The whole any-term query ranked by FTS5, every row holding a term."""
    match = " OR ".join(f'"{term}"' for term in terms)
    return lexical.SQLiteFTS5()._top(match, limit, kwargs.get("filter_sql", ""), kwargs.get("params", ()))


def same_hits(got: list[tuple[int, float]], whole: list[tuple[int, float]]) -> bool:
    """The same rows in the same order with the same scores (summed in another order: to the last bits)."""
    return [cid for cid, _ in got] == [cid for cid, _ in whole] and all(
        a == pytest.approx(b, rel=1e-9) for (_, a), (_, b) in zip(got, whole, strict=True)
    )


@pytest.mark.skipif("connection.vendor != 'sqlite'", reason="the pruned read is SQLite's")
def test_an_any_term_query_leaves_rows_of_only_common_terms_unranked_and_answers_the_same(index, monkeypatch):
    """A kernel tree has hundreds of thousands of rows holding ``lock``: an
    any-term query ranked them all (about 0.7 s a search, issue #37). Rows
    holding only the commonest terms are now left out when their best
    possible score is under the rare terms' own ``limit``-th, and the answer
    is the one ranking every row gives."""
    monkeypatch.setattr(lexical, "PRUNE_ROWS", 50)
    files = {f"common/{i:03}.md": f"take the lock {'and wait ' * (i % 7)}then unlock\n" for i in range(200)}
    files |= {f"paged/{i:02}.md": f"lock the page {'page ' * (i % 3)}{'word ' * (i % 5)}" for i in range(40)}
    files |= {f"rare/{i:02}.md": f"quokka {'lock ' * (i % 3)}{'word ' * i}\n" for i in range(15)}
    files |= {f"other/{i:03}.md": f"nothing here {i}\n" for i in range(250)}
    index(files)
    backend = lexical.SQLiteFTS5()
    terms = ["quokka", "lock", "page"]

    pruned = backend._pruned(terms, 10, "", ())

    assert pruned is not None
    assert same_hits(pruned, any_term_ranking(terms, 10))
    assert same_hits(backend.query(terms, require_all=False, limit=10, filter_sql="", params=()), pruned)
    assert paths(pruned)[0].startswith("rare/")
    filtered = backend._pruned(terms, 3, PREFIX_FILTER, ["rare/1%"])
    assert filtered is not None
    assert same_hits(filtered, any_term_ranking(terms, 3, filter_sql=PREFIX_FILTER, params=["rare/1%"]))
    # too few rows hold quokka: page counts as rare too, and lock is still left out
    assert same_hits(backend._pruned(terms, 20, "", ()), any_term_ranking(terms, 20))
    # fewer rare rows than the answer wants: rows of only common terms are in it, so all are ranked
    assert backend._pruned(["quokka", "lock"], 20, "", ()) is None
    assert same_hits(backend.query(["quokka", "lock"], require_all=False, limit=20, filter_sql="", params=()),
                     any_term_ranking(["quokka", "lock"], 20))  # fmt: skip


@pytest.mark.skipif("connection.vendor != 'sqlite'", reason="the pruned read is SQLite's")
def test_pruned_any_term_queries_equal_ranking_every_row_on_random_text(index, monkeypatch):
    """Random text over a skewed vocabulary (a few words in most rows, most
    words in few), random queries: every answer equals ranking every row,
    and some of them were read pruned."""
    monkeypatch.setattr(lexical, "PRUNE_ROWS", 40)
    rng = random.Random(37)
    vocabulary = [f"w{n}x" for n in range(40)]
    weights = [1 / (n + 1) ** 1.3 for n in range(40)]
    index(
        {f"f{i:03}.md": " ".join(rng.choices(vocabulary, weights, k=rng.randint(3, 30))) for i in range(300)}
    )
    backend = lexical.SQLiteFTS5()
    pruned = 0
    for _ in range(60):
        terms = list(dict.fromkeys(rng.sample(vocabulary[:3], 1) + rng.sample(vocabulary, rng.randint(1, 3))))
        limit = rng.choice([5, 20, 60])
        pruned += backend._pruned(terms, limit, "", ()) is not None

        got = backend.query(terms, require_all=False, limit=limit, filter_sql="", params=())

        assert same_hits(got, any_term_ranking(terms, limit)), terms
    assert pruned >= 10


def test_collected_tombstones_leave_no_row_and_the_index_in_sync(index):
    """With ``ingest.tombstone_share`` 0 every pass removes what it
    tombstoned (corpus/ingest/collect.py): chunks, their spans, emptied
    representations and documents; the lexical index keeps equal to the live
    chunks, and a file deleted, collected and written again is indexed anew."""
    config = build_config({"ingest": {"tombstone_share": 0}}, {}, {})
    steps = [
        {"big.py": code_file(300), "a.md": "first note\n", "b.md": "second note\n"},
        {"big.py": code_file(300, "def appendedFunction():\n    pass\n")},
        {"a.md": None},
        {"a.md": "first note is back\n", "b.md": "second note, edited\n"},
        {"b.md": "now it leaks AKIAABCDEFGHIJKLMNOP\n"},  # becomes skipped: representation retired
        {"b.md": "clean again\n", "big.py": code_file(20)},
        {"big.py": None},
    ]
    for step in steps:
        index(step, config=config)
        assert_in_sync()
        assert not Chunk.objects.filter(deleted=True).exists()
        assert not Span.objects.exclude(chunk__in=Chunk.objects.all()).exists()
        assert not Representation.objects.filter(deleted=True).exists()
        assert not Document.objects.filter(deleted=True).exists()
    assert sorted(Document.objects.values_list("rel_path", flat=True)) == ["a.md", "b.md"]
    assert top_paths("first note back") == ["a.md"]
    assert top_paths("function_3") == []


def fts_blocks() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*), coalesce(sum(length(block)), 0) FROM {lexical.TABLE}_data")
        return cursor.fetchone()[1]


def versioned_file(functions: int, version: int) -> str:
    """Code whose every unit names ``version``: an edit changes them all."""
    return "".join(
        f"def function_{i}(x):\n    return x * {i} + {version}  # edition {version}\n\n\n"
        for i in range(functions)
    )


@pytest.mark.skipif(connection.vendor != "sqlite", reason="FTS5 segments are SQLite's")
def test_the_lexical_index_stays_its_clean_size_through_edits(index):
    """Each edit writes new segments and delete markers into the contentless
    FTS5 table; merged at the end of each pass (lexical.compact), the index
    stays about the size a clean build of the same files gives it."""
    for version in range(8):
        index({f"mod{i}.py": versioned_file(40, version) for i in range(30)})
    edited = fts_blocks()
    assert_in_sync()
    lexical.rebuild()
    assert edited <= 1.25 * fts_blocks()
