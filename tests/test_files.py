"""open_file, list_files and find on real indexed corpora."""

from __future__ import annotations

import base64
import gc
import io
import json
import os
import signal
import threading
import time
import warnings
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from corpus import files, patterns
from corpus.ingest.indexing import index_directory
from corpus.models import Chunk, Document, Representation
from corpus.security import ExclusionEngine, ExclusionPolicy
from kernel import errors
from kernel.config import build_config
from tests.factories import ChunkFactory, DocumentFactory, RepresentationFactory, SpanFactory
from tests.samples import make_pdf

pytestmark = pytest.mark.django_db

SECRET = "AKIAABCDEFGHIJKLMNOP"
OPEN_KEYS = {"rel_path", "doc_type", "span", "content", "truncated"}


@pytest.fixture
def config():
    return build_config({}, {}, {})


@pytest.fixture
def engine(corpus_dir, state, config) -> ExclusionEngine:
    return ExclusionEngine.from_config(corpus_dir, config, state_dir=state.path)


@pytest.fixture
def index(corpus_dir, state, config, monkeypatch):
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    return lambda: index_directory(corpus_dir, state=state, config=config)


def write(root: Path, rel: str, data: str | bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_bytes(data.encode("utf-8"))
    else:
        path.write_bytes(data)
    return path


def code_file(lines: int) -> str:
    return "".join(f"def function_{i}(value):\n    return value + {i}\n" for i in range(lines // 2))


def raises(code: str, call, *args, **kwargs) -> errors.Dir2mcpError:
    with pytest.raises(errors.Dir2mcpError) as info:
        call(*args, **kwargs)
    assert info.value.code == code, info.value.message
    return info.value


def live_chunks(rel_path: str) -> list[Chunk]:
    chunks = Chunk.objects.filter(representation__document__rel_path=rel_path, deleted=False)
    return list(chunks.prefetch_related("spans").order_by("ordinal"))


def add_transcript(corpus_dir: Path, rel_path: str = "talk.mp3", segments=None) -> Document:
    """An audio document with a timed transcript, as an STT run would store it (no offline STT exists)."""
    write(corpus_dir, rel_path, b"ID3\x03\x00\x00\x00" + bytes(range(256)) * 4)
    segments = segments or [
        (0, 30000, "Welcome to the quarterly review. Revenue grew."),
        (25000, 55000, "Revenue grew. Costs fell in the second quarter."),
        (50000, 80000, "Costs fell in the second quarter. Questions followed."),
    ]
    text = (
        "Welcome to the quarterly review. Revenue grew. Costs fell in the second quarter. Questions followed."
    )
    doc = DocumentFactory(rel_path=rel_path, doc_type="audio")
    rep = RepresentationFactory(
        document=doc, rep_type="transcript", text=text, meta_json={"timestamps": True}
    )
    for ordinal, (start, end, piece) in enumerate(segments):
        assert piece in text
        chunk = ChunkFactory(representation=rep, ordinal=ordinal, text=piece)
        SpanFactory(chunk=chunk, span_kind="time", start=start, end=end)
    return doc


# -- open_file: lines ------------------------------------------------------------


def test_default_open_returns_the_beginning_of_a_text_file(corpus_dir, engine, index):
    write(corpus_dir, "notes/readme.md", "# Title\n\nFirst line.\nSecond line.\n")
    index()
    result = files.open_file(engine, rel_path="notes/readme.md")
    assert set(result) == OPEN_KEYS
    assert result == {
        "rel_path": "notes/readme.md",
        "doc_type": "md",
        "span": {"kind": "lines", "start_line": 1, "end_line": 4},
        "content": "# Title\n\nFirst line.\nSecond line.",
        "truncated": False,
    }


def test_line_ranges_return_exactly_what_code_chunks_cite(corpus_dir, engine, index):
    write(corpus_dir, "src/app.py", code_file(450))
    index()
    chunks = live_chunks("src/app.py")
    assert len(chunks) == 225  # a unit per function
    for chunk in chunks:
        span = chunk.spans.get()
        result = files.open_file(engine, rel_path="src/app.py", start_line=span.start, end_line=span.end)
        assert result["content"] == chunk.text
        assert result["span"] == {"kind": "lines", "start_line": span.start, "end_line": span.end}
        assert result["truncated"] is False


def test_line_ranges_contain_prose_chunks_including_crlf_files(corpus_dir, engine, index):
    text = "\r\n".join(f"Paragraph {i} talks about topic {i} at some length." for i in range(200)) + "\r\n"
    write(corpus_dir, "docs/long.txt", text)
    index()
    chunks = live_chunks("docs/long.txt")
    assert len(chunks) > 1
    for chunk in chunks:
        span = chunk.spans.get()
        result = files.open_file(engine, rel_path="docs/long.txt", start_line=span.start, end_line=span.end)
        assert chunk.text in result["content"]
        assert "\r" not in result["content"]


def test_html_lines_are_lines_of_the_stored_text_that_search_cites(corpus_dir, engine, index):
    body = "".join(f"<h2>Section {i}</h2><p>Body text of section {i} goes here.</p>\n" for i in range(120))
    write(corpus_dir, "site/index.html", f"<html><head><title>x</title></head><body>{body}</body></html>")
    index()
    chunks = live_chunks("site/index.html")
    assert len(chunks) > 1
    for chunk in chunks:
        span = chunk.spans.get()
        result = files.open_file(engine, rel_path="site/index.html", start_line=span.start, end_line=span.end)
        assert chunk.text in result["content"]
        assert "<p>" not in result["content"] and result["doc_type"] == "html"


def test_unindexed_text_is_read_from_disk_and_html_is_converted(corpus_dir, engine):
    write(corpus_dir, "fresh.txt", "one\ntwo\nthree\n")
    write(corpus_dir, "fresh.html", "<p>Hello <b>there</b></p>")
    assert files.open_file(engine, rel_path="fresh.txt", start_line=2)["content"] == "two\nthree"
    html = files.open_file(engine, rel_path="fresh.html")
    assert html["doc_type"] == "html" and "Hello **there**" in html["content"]


def test_end_line_past_eof_is_clipped_and_start_past_eof_is_an_error(corpus_dir, engine):
    write(corpus_dir, "a.txt", "one\ntwo\nthree")
    result = files.open_file(engine, rel_path="a.txt", start_line=2, end_line=99)
    assert result["content"] == "two\nthree" and result["span"]["end_line"] == 3
    assert result["truncated"] is False
    raises(errors.INVALID_RANGE, files.open_file, engine, rel_path="a.txt", start_line=4)
    raises(errors.INVALID_RANGE, files.open_file, engine, rel_path="a.txt", start_line=3, end_line=2)


def test_empty_file_opens_as_empty_content_without_span(corpus_dir, engine):
    write(corpus_dir, "empty.txt", "")
    assert files.open_file(engine, rel_path="empty.txt") == {
        "rel_path": "empty.txt",
        "doc_type": "text",
        "content": "",
        "truncated": False,
    }


def test_truncation_stops_at_the_last_full_line_and_says_so(corpus_dir, engine):
    lines = [f"line number {i:03d} with some padding text" for i in range(100)]
    write(corpus_dir, "big.txt", "\n".join(lines) + "\n")
    result = files.open_file(engine, rel_path="big.txt", start_line=10, max_chars=200)
    assert result["truncated"] is True
    returned = result["content"].split("\n")
    assert len(result["content"]) <= 200
    assert returned == lines[9 : 9 + len(returned)]
    assert result["span"] == {"kind": "lines", "start_line": 10, "end_line": 9 + len(returned)}
    exact = files.open_file(
        engine, rel_path="big.txt", start_line=10, end_line=9 + len(returned), max_chars=200
    )
    assert exact["truncated"] is False and exact["content"] == result["content"]


def test_a_single_huge_line_is_streamed_and_cut(corpus_dir, engine):
    write(corpus_dir, "minified.js", "x" * 3_000_000 + "\nsecond line\n")
    result = files.open_file(engine, rel_path="minified.js", max_chars=500)
    assert result["content"] == "x" * 500 and result["truncated"] is True
    assert result["span"] == {"kind": "lines", "start_line": 1, "end_line": 1}
    assert files.open_file(engine, rel_path="minified.js", start_line=2)["content"] == "second line"


def test_legacy_encodings_decode_as_ingestion_did(corpus_dir, engine, index):
    write(corpus_dir, "latin.txt", "caf\xe9 cr\xe8me br\xfbl\xe9e\nna\xefve r\xe9sum\xe9\n".encode("cp1252"))
    index()
    assert files.open_file(engine, rel_path="latin.txt")["content"] == "café crème brûlée\nnaïve résumé"


def test_archive_members_open_from_their_stored_text(corpus_dir, engine, index):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("inner/readme.txt", "hello\nworld\n")
    write(corpus_dir, "bundle.zip", buffer.getvalue())
    index()
    member = "bundle.zip!/inner/readme.txt"
    assert Document.objects.filter(rel_path=member, status="ok").exists()
    assert files.open_file(engine, rel_path=member, start_line=2)["content"] == "world"
    (match,) = files.find(engine, content="world")["matches"]
    assert (match["rel_path"], match["span"]) == (member, {"kind": "lines", "start_line": 2, "end_line": 2})
    raises(errors.FILE_NOT_FOUND, files.open_file, engine, rel_path="bundle.zip!/inner/missing.txt")
    raises(errors.PATH_OUTSIDE_ROOT, files.open_file, engine, rel_path="bundle.zip!/../escape.txt")
    raises(errors.DOC_TYPE_UNSUPPORTED, files.open_file, engine, rel_path="bundle.zip")


# -- open_file: errors ------------------------------------------------------------


@pytest.mark.parametrize(
    ("rel_path", "code"),
    [
        ("../outside.txt", errors.PATH_OUTSIDE_ROOT),
        ("/etc/passwd", errors.PATH_OUTSIDE_ROOT),
        ("docs/%2e%2e/%2e%2e/x", errors.PATH_OUTSIDE_ROOT),
        (".env", errors.FORBIDDEN),
        ("keys/server.pem", errors.FORBIDDEN),
        ("missing.txt", errors.FILE_NOT_FOUND),
        ("docs", errors.FILE_NOT_FOUND),
        ("", errors.MISSING_FIELD),
        (None, errors.MISSING_FIELD),
        (7, errors.INVALID_FIELD),
    ],
)
def test_paths_are_resolved_by_the_exclusion_engine(corpus_dir, engine, rel_path, code):
    write(corpus_dir, ".env", "PASSWORD=hunter2\n")
    write(corpus_dir, "keys/server.pem", "-----BEGIN-----\n")
    write(corpus_dir, "docs/a.txt", "text\n")
    raises(code, files.open_file, engine, rel_path=rel_path)


def test_symlinks_are_not_followed(corpus_dir, engine, tmp_path):
    write(tmp_path, "elsewhere.txt", "private\n")
    os.symlink(tmp_path / "elsewhere.txt", corpus_dir / "link.txt")
    raises(errors.FORBIDDEN, files.open_file, engine, rel_path="link.txt")


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"start_line": 0}, errors.INVALID_RANGE),
        ({"end_line": -1}, errors.INVALID_RANGE),
        ({"start_line": "3"}, errors.INVALID_FIELD),
        ({"start_line": True}, errors.INVALID_FIELD),
        ({"max_chars": 199}, errors.INVALID_RANGE),
        ({"max_chars": 50001}, errors.INVALID_RANGE),
        ({"max_chars": 2.5}, errors.INVALID_FIELD),
        ({"start_ms": -5}, errors.INVALID_RANGE),
        ({"page": 0}, errors.INVALID_RANGE),
        ({"page": 1}, errors.DOC_TYPE_UNSUPPORTED),
        ({"start_ms": 0, "end_ms": 10}, errors.DOC_TYPE_UNSUPPORTED),
    ],
)
def test_bad_arguments(corpus_dir, engine, kwargs, code):
    write(corpus_dir, "a.txt", "one\ntwo\n")
    raises(code, files.open_file, engine, rel_path="a.txt", **kwargs)


def test_binary_files_are_refused(corpus_dir, engine, index):
    write(corpus_dir, "blob.bin", bytes(range(256)) * 8)
    write(corpus_dir, "fake.txt", b"\x00\x01\x02binary" * 100)
    index()
    for rel_path in ("blob.bin", "fake.txt"):
        error = raises(errors.DOC_TYPE_UNSUPPORTED, files.open_file, engine, rel_path=rel_path)
        assert "binary" in error.message


def test_secret_content_is_forbidden_and_never_echoed(corpus_dir, engine, index):
    write(corpus_dir, "conf/settings.txt", f"name = demo\naws_key = {SECRET}\n")
    index()
    assert Document.objects.get(rel_path="conf/settings.txt").status == "skipped"
    for kwargs in ({}, {"start_line": 1, "end_line": 1}, {"start_line": 2}):
        error = raises(errors.FORBIDDEN, files.open_file, engine, rel_path="conf/settings.txt", **kwargs)
        assert SECRET not in error.message and SECRET[4:] not in error.message


def test_a_secret_cut_in_half_by_truncation_is_still_forbidden(corpus_dir, engine):
    # Not indexed yet, so only the read-time screen stands between the caller and the key.
    write(corpus_dir, "late.txt", "x" * 190 + " " + SECRET + "\n")
    raises(errors.FORBIDDEN, files.open_file, engine, rel_path="late.txt", max_chars=200)
    write(corpus_dir, "late2.txt", "harmless\n" + "y" * 185 + SECRET[:10] + "\n")
    assert files.open_file(engine, rel_path="late2.txt", max_chars=200)["truncated"] is True


# -- open_file: pages and time ------------------------------------------------------


def test_pdf_pages(corpus_dir, engine, index):
    write(corpus_dir, "paper.pdf", make_pdf(["Alpha page one", None, "Gamma page three"]))
    index()
    first = files.open_file(engine, rel_path="paper.pdf")
    assert set(first) == OPEN_KEYS
    assert first["span"] == {"kind": "page", "page": 1} and first["doc_type"] == "pdf"
    assert "Alpha page one" in first["content"]
    third = files.open_file(engine, rel_path="paper.pdf", page=3)
    assert "Gamma page three" in third["content"] and third["span"] == {"kind": "page", "page": 3}
    assert files.open_file(engine, rel_path="paper.pdf", page=2)["content"] == ""
    raises(errors.INVALID_RANGE, files.open_file, engine, rel_path="paper.pdf", page=4)
    raises(errors.DOC_TYPE_UNSUPPORTED, files.open_file, engine, rel_path="paper.pdf", start_line=1)
    raises(errors.DOC_TYPE_UNSUPPORTED, files.open_file, engine, rel_path="paper.pdf", start_ms=0)


def test_pdf_page_truncation(corpus_dir, engine, index):
    long_page = "\n".join(f"Sentence {i} of a very long page." for i in range(60))
    write(corpus_dir, "long.pdf", make_pdf([long_page]))
    index()
    result = files.open_file(engine, rel_path="long.pdf", page=1, max_chars=200)
    assert result["truncated"] is True and len(result["content"]) == 200


def test_transcript_time_ranges(corpus_dir, engine):
    add_transcript(corpus_dir)
    middle = files.open_file(engine, rel_path="talk.mp3", start_ms=30000, end_ms=45000)
    assert middle == {
        "rel_path": "talk.mp3",
        "doc_type": "audio",
        "span": {"kind": "time", "start_ms": 25000, "end_ms": 55000},
        "content": "Revenue grew. Costs fell in the second quarter.",
        "truncated": False,
    }
    # Overlapping windows are merged from the stored text, not repeated.
    both = files.open_file(engine, rel_path="talk.mp3", start_ms=31000, end_ms=60000)
    assert both["content"] == "Revenue grew. Costs fell in the second quarter. Questions followed."
    assert both["span"] == {"kind": "time", "start_ms": 25000, "end_ms": 80000}
    start = files.open_file(engine, rel_path="talk.mp3")
    assert start["content"].startswith("Welcome") and start["span"]["start_ms"] == 0
    assert start["truncated"] is False
    raises(errors.INVALID_RANGE, files.open_file, engine, rel_path="talk.mp3", start_ms=50, end_ms=10)
    raises(errors.INVALID_RANGE, files.open_file, engine, rel_path="talk.mp3", start_ms=90000)
    raises(errors.DOC_TYPE_UNSUPPORTED, files.open_file, engine, rel_path="talk.mp3", page=1)
    raises(errors.DOC_TYPE_UNSUPPORTED, files.open_file, engine, rel_path="talk.mp3", start_line=1)


def test_transcript_truncation_keeps_whole_windows(corpus_dir, engine):
    text = " ".join(f"Segment {i} " + "words " * 30 for i in range(10))
    pieces = [f"Segment {i} " + "words " * 30 for i in range(10)]
    doc = DocumentFactory(rel_path="long.mp3", doc_type="audio")
    write(corpus_dir, "long.mp3", b"ID3\x03" + b"\x00" * 64)
    rep = RepresentationFactory(document=doc, rep_type="transcript", text=text)
    for i, piece in enumerate(pieces):
        SpanFactory(chunk=ChunkFactory(representation=rep, ordinal=i, text=piece.strip()), span_kind="time",
                    start=i * 30000, end=(i + 1) * 30000)  # fmt: skip
    result = files.open_file(engine, rel_path="long.mp3", max_chars=600)
    assert result["truncated"] is True and len(result["content"]) <= 600
    assert result["span"] == {"kind": "time", "start_ms": 0, "end_ms": 90000}
    assert result["content"].endswith("Segment 2 " + "words " * 29 + "words")


def test_audio_without_transcript_is_unsupported(corpus_dir, engine, index):
    write(corpus_dir, "raw.mp3", b"ID3\x03\x00\x00\x00" + bytes(range(256)) * 4)
    index()
    raises(errors.DOC_TYPE_UNSUPPORTED, files.open_file, engine, rel_path="raw.mp3")
    raises(errors.DOC_TYPE_UNSUPPORTED, files.open_file, engine, rel_path="raw.mp3", start_ms=0)


# -- list_files ---------------------------------------------------------------------


@pytest.fixture
def small_tree(corpus_dir, index):
    write(corpus_dir, "README.md", "# Top\n")
    write(corpus_dir, "docs/guide.md", "# Guide\n")
    write(corpus_dir, "docs/deep/notes.md", "# Notes\n")
    write(corpus_dir, "docs2/other.txt", "other\n")
    write(corpus_dir, "src/main.py", "print('hi')\n")
    write(corpus_dir, "src/blob.bin", bytes(range(256)))
    write(corpus_dir, "gone.txt", "soon deleted\n")
    index()
    (corpus_dir / "gone.txt").unlink()
    index()


def test_list_files_names_the_stored_code_of_a_file_in_error():
    DocumentFactory(
        rel_path="a.zip",
        doc_type="archive",
        status="error",
        error="ARCHIVE_REJECTED: corrupt",
        error_code=errors.ARCHIVE_REJECTED,
    )
    DocumentFactory(rel_path="b.md", status="error", error="odd failure without a code")
    DocumentFactory(rel_path="c.md")
    listed = {f["rel_path"]: f for f in files.list_files()["files"]}
    assert listed["a.zip"]["error_code"] == errors.ARCHIVE_REJECTED
    assert "error_code" not in listed["b.md"] and listed["b.md"]["status"] == "error"
    assert "error_code" not in listed["c.md"]


def test_list_files_pages_live_documents_in_path_order(small_tree):
    result = files.list_files(limit=3, offset=0)
    assert set(result) == {"limit", "offset", "total", "has_more", "next_cursor", "files"}
    assert (result["limit"], result["offset"], result["total"], result["has_more"]) == (3, 0, 6, True)
    assert [f["rel_path"] for f in result["files"]] == ["README.md", "docs/deep/notes.md", "docs/guide.md"]
    first = result["files"][0]
    assert set(first) == {"rel_path", "doc_type", "size_bytes", "mtime_unix", "status", "deleted"}
    assert (first["doc_type"], first["size_bytes"], first["status"], first["deleted"]) == (
        "md",
        6,
        "ok",
        False,
    )
    rest = files.list_files(limit=3, offset=3)
    assert [f["rel_path"] for f in rest["files"]] == ["docs2/other.txt", "src/blob.bin", "src/main.py"]
    assert {f["rel_path"]: f["status"] for f in rest["files"]}["src/blob.bin"] == "skipped"
    assert not rest["has_more"]
    assert files.list_files(offset=10)["files"] == []


def test_list_files_counts_what_the_rules_let_through_now(small_tree, corpus_dir, config, monkeypatch):
    """docs/ excluded after the index was written: neither listed nor
    counted, offset counts the files the rules let through, and past the
    bounds a listing answers has_more without a total, or INDEX_NOT_READY
    when its page cannot be filled."""
    policy = ExclusionPolicy.from_config(config, root=corpus_dir)
    now = ExclusionEngine(corpus_dir, replace(policy, path_excludes=(*policy.path_excludes, "docs/")))

    def listed(**kwargs):
        result = files.list_files(engine=now, **kwargs)
        return [f["rel_path"] for f in result["files"]], result.get("total"), result["has_more"]

    assert listed() == (["README.md", "docs2/other.txt", "src/blob.bin", "src/main.py"], 4, False)
    assert listed(limit=1, offset=1) == (["docs2/other.txt"], 4, True)
    assert listed(glob="docs/*") == listed(glob="nothing/*") == ([], 0, False)
    monkeypatch.setattr(files, "COUNTED_PAST_PAGE", 1)
    assert listed(limit=1) == (["README.md"], None, True)  # four follow: more than one past the page
    assert listed(limit=1, offset=2) == (["src/blob.bin"], 4, True)
    monkeypatch.setattr(files, "PASSED_OVER", 1)  # the two docs/ files sort before docs2/
    assert listed(limit=1) == (["README.md"], None, True)
    raises(errors.INDEX_NOT_READY, files.list_files, engine=now, limit=1, offset=1)


def test_list_files_prefix_and_glob(small_tree):
    def paths(**kwargs):
        return [f["rel_path"] for f in files.list_files(**kwargs)["files"]]

    assert paths(path_prefix="docs/") == ["docs/deep/notes.md", "docs/guide.md"]
    assert paths(path_prefix="docs") == ["docs/deep/notes.md", "docs/guide.md", "docs2/other.txt"]
    assert paths(path_prefix="docs/deep/") == ["docs/deep/notes.md"]
    assert paths(path_prefix="./") == paths(path_prefix=".") == paths()
    assert paths(glob="*.md") == ["README.md", "docs/deep/notes.md", "docs/guide.md"]
    assert paths(glob="docs/*.md") == ["docs/guide.md"]
    assert paths(glob="*.md", path_prefix="docs/", limit=1, offset=1) == ["docs/guide.md"]
    assert files.list_files(glob="*.md", limit=1)["total"] == 3


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"path_prefix": "../"}, errors.PATH_OUTSIDE_ROOT),
        ({"path_prefix": "/etc"}, errors.PATH_OUTSIDE_ROOT),
        ({"limit": 0}, errors.INVALID_RANGE),
        ({"limit": 5001}, errors.INVALID_RANGE),
        ({"offset": -1}, errors.INVALID_RANGE),
        ({"limit": "10"}, errors.INVALID_FIELD),
        ({"glob": 3}, errors.INVALID_FIELD),
    ],
)
def test_list_files_validation(kwargs, code):
    raises(code, files.list_files, **kwargs)


# -- find -----------------------------------------------------------------------------


@pytest.fixture
def find_tree(corpus_dir, index):
    write(corpus_dir, "src/app.py", code_file(40) + "# TODO: handle a.b here\n")
    write(corpus_dir, "src/util.py", "def helper():\n    return 'axb TODO later'\n")
    write(corpus_dir, "docs/guide.md", "# Guide\n\nNothing to do.\ntodo in lower case\n")
    write(corpus_dir, "site/page.html", "<h1>Intro</h1><p>A TODO inside html.</p>")
    write(corpus_dir, "paper.pdf", make_pdf(["Alpha page one", "Beta TODO page two"]))
    index()


def all_pages(engine, **kwargs) -> tuple[list[dict], int]:
    matches, cursor, pages = [], None, 0
    while True:
        page = files.find(engine, cursor=cursor, **kwargs)
        assert page["timed_out"] is False
        matches += page["matches"]
        pages += 1
        cursor = page.get("next_cursor")
        if cursor is None:
            return matches, pages


def test_find_by_name_glob_returns_one_match_per_file(find_tree, engine):
    result = files.find(engine, name_glob="*.py")
    assert set(result) == {"matches", "files_scanned", "timed_out"}
    assert [m["rel_path"] for m in result["matches"]] == ["src/app.py", "src/util.py"]
    assert set(result["matches"][0]) == {"rel_path", "doc_type", "mtime_unix", "size_bytes"}
    assert [m["rel_path"] for m in files.find(engine, doc_types=["pdf", "html"])["matches"]] == [
        "paper.pdf",
        "site/page.html",
    ]
    assert [m["rel_path"] for m in files.find(engine, path_prefix="docs/")["matches"]] == ["docs/guide.md"]


def test_find_literal_content_with_spans_open_file_agrees_with(find_tree, engine):
    result = files.find(engine, content="todo")
    by_path = {m["rel_path"]: m for m in result["matches"]}
    assert set(by_path) == {"src/app.py", "src/util.py", "docs/guide.md", "site/page.html", "paper.pdf"}
    assert by_path["paper.pdf"]["span"] == {"kind": "page", "page": 2}
    assert by_path["paper.pdf"]["rep_type"] == "raw_text"
    for match in result["matches"]:
        span = match["span"]
        assert "todo" in match["snippet"].lower() and len(match["snippet"]) <= 240
        if span["kind"] == "lines":
            opened = files.open_file(
                engine, rel_path=match["rel_path"], start_line=span["start_line"], end_line=span["end_line"]
            )
        else:
            opened = files.open_file(engine, rel_path=match["rel_path"], page=span["page"])
        assert "todo" in opened["content"].lower()
        assert match["snippet"].strip("…") in opened["content"]
    sensitive = files.find(engine, content="TODO", case_sensitive=True)
    assert "docs/guide.md" not in {m["rel_path"] for m in sensitive["matches"]}


def test_literal_content_is_not_a_regex(find_tree, engine):
    literal = files.find(engine, content="a.b")
    assert [m["rel_path"] for m in literal["matches"]] == ["src/app.py"]
    pattern = files.find(engine, content=r"a.b\b", regex=True, name_glob="util.py")
    assert [m["snippet"] for m in pattern["matches"]] == ["return 'axb TODO later'"]
    assert pattern["matches"][0]["span"] == {"kind": "lines", "start_line": 2, "end_line": 2}


@pytest.mark.parametrize("pattern", ["(?R)", "a(?1)?(b)", "(?+1)(x)", "(?P<n>a)(?&n)", "(?P<n>a)(?P>n)"])
def test_recursive_regexes_are_refused_before_they_run(find_tree, engine, pattern):
    with pytest.raises(errors.Dir2mcpError) as caught:
        files.find(engine, content=pattern, regex=True)
    assert caught.value.code == errors.INVALID_FIELD


def test_find_stops_between_documents_when_asked(find_tree, engine):
    everything = files.find(engine, content="TODO")
    assert len(everything["matches"]) >= 3
    stopped = files.find(engine, content="TODO", stop=lambda: True)
    assert stopped["matches"] == [] and stopped["next_cursor"]
    resumed = files.find(engine, content="TODO", cursor=stopped["next_cursor"])
    assert resumed["matches"] == everything["matches"]


def test_find_caps_matches_per_file_and_snippets(corpus_dir, engine, index):
    write(corpus_dir, "many.txt", "".join(f"needle {i} " + "pad " * 200 + "\n" for i in range(20)))
    index()
    result = files.find(engine, content="needle", max_matches_per_file=3)
    assert [m["span"]["start_line"] for m in result["matches"]] == [1, 2, 3]
    assert all(len(m["snippet"]) <= 240 for m in result["matches"])
    assert result["files_scanned"] == 1


def test_find_searches_transcripts_with_time_spans(corpus_dir, engine):
    add_transcript(corpus_dir)
    (match,) = files.find(engine, content="questions")["matches"]
    assert match["rep_type"] == "transcript"
    assert match["span"] == {"kind": "time", "start_ms": 50000, "end_ms": 80000}
    opened = files.open_file(
        engine, rel_path="talk.mp3", **{k: match["span"][k] for k in ("start_ms", "end_ms")}
    )
    assert "Questions" in opened["content"]


def test_paging_with_cursors_equals_the_unpaged_result(corpus_dir, engine, index):
    for i in range(7):
        write(corpus_dir, f"f{i}.txt", "".join(f"hit {j}\nmiss\n" for j in range(i % 4)))
    index()
    full = files.find(engine, content="hit", limit=200)
    assert "next_cursor" not in full and len(full["matches"]) == 9
    for limit in (1, 2, 3, 4):
        paged, pages = all_pages(engine, content="hit", limit=limit)
        assert paged == full["matches"], limit
        assert pages >= len(full["matches"]) // limit
    names, _ = all_pages(engine, name_glob="*.txt", limit=2)
    assert names == files.find(engine, name_glob="*.txt", limit=200)["matches"]


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage!",
        "",
        base64.urlsafe_b64encode(b"[1,2]").decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    ],
)
def test_bad_cursors_are_invalid(find_tree, engine, cursor):
    error = raises(errors.INVALID_FIELD, files.find, engine, content="todo", cursor=cursor)
    assert error.message == "invalid cursor"


def test_a_cursor_from_another_query_is_invalid(find_tree, engine):
    cursor = files.find(engine, content="todo", limit=1)["next_cursor"]
    assert files.find(engine, content="todo", limit=2, cursor=cursor)["matches"]  # limit may change
    raises(errors.INVALID_FIELD, files.find, engine, content="TODO", limit=1, cursor=cursor)
    raises(errors.INVALID_FIELD, files.find, engine, name_glob="*.py", cursor=cursor)
    bad = cursor[:-1] + ("A" if cursor[-1] != "A" else "B")  # sealed: a changed character is invalid
    raises(errors.INVALID_FIELD, files.find, engine, content="todo", limit=1, cursor=bad)


@pytest.mark.parametrize(
    ("kwargs", "code", "fragment"),
    [
        ({"content": "(", "regex": True}, errors.INVALID_FIELD, "missing )"),
        ({"content": "a" * 1001}, errors.INVALID_FIELD, "1000"),
        ({"modified_after": "last tuesday"}, errors.INVALID_FIELD, "modified_after"),
        ({"modified_after": 1.5}, errors.INVALID_FIELD, "modified_after"),
        ({"limit": 201}, errors.INVALID_RANGE, "limit"),
        ({"limit": 0}, errors.INVALID_RANGE, "limit"),
        ({"max_matches_per_file": 0}, errors.INVALID_RANGE, "max_matches_per_file"),
        ({"doc_types": "pdf"}, errors.INVALID_FIELD, "doc_types"),
        ({"regex": "yes"}, errors.INVALID_FIELD, "boolean"),
        ({"path_prefix": "../x"}, errors.PATH_OUTSIDE_ROOT, ""),
        ({"cursor": 5}, errors.INVALID_FIELD, "cursor"),
    ],
)
def test_find_validation(engine, kwargs, code, fragment):
    error = raises(code, files.find, engine, **kwargs)
    assert fragment in error.message


def test_find_modified_after(corpus_dir, engine, index):
    old = write(corpus_dir, "old.txt", "x\n")
    write(corpus_dir, "new.txt", "x\n")
    os.utime(old, (1_600_000_000, 1_600_000_000))
    index()

    def paths(value):
        return [m["rel_path"] for m in files.find(engine, modified_after=value)["matches"]]

    assert paths("2021-01-01") == ["new.txt"]
    assert paths("2020-09-13T12:26:40Z") == ["new.txt"]  # strictly after 1_600_000_000
    assert paths("2020-09-13T12:26:39") == ["new.txt", "old.txt"]
    assert paths(1_599_999_999) == ["new.txt", "old.txt"]
    assert paths("1599999999") == ["new.txt", "old.txt"]


def test_excluded_paths_and_secret_snippets_never_surface(corpus_dir, engine):
    # Rows left from before a policy change: the store still holds them.
    keys = f"needle {SECRET}\n" + "filler line\n" * 30 + "needle ok"
    for rel_path, text in (("config/.env", "needle=1"), ("notes/keys.txt", keys)):
        write(corpus_dir, rel_path, text)
        rep = RepresentationFactory(document=DocumentFactory(rel_path=rel_path, doc_type="text"), text=text)
        assert rep.rep_type == "raw_text"
    names = [m["rel_path"] for m in files.find(engine, name_glob="*")["matches"]]
    assert names == ["notes/keys.txt"]
    result = files.find(engine, content="needle")
    # A document holding a key gives no match, even one far from it (session 30:
    # a key split across lines, past the window around a match, was quoted).
    assert result["matches"] == []
    assert SECRET not in json.dumps(result)
    assert files.find(engine, content=SECRET)["matches"] == []


def ready_worker(engine, monkeypatch, budget: float) -> None:
    """Wait for the regex worker to be ready, then set the find budget.

    A call whose budget runs out while the worker (a fresh interpreter
    importing ``regex``) starts scans nothing and answers ``timed_out`` where
    it started (``test_a_worker_still_starting_is_a_timeout_not_a_bad_pattern``).
    Each budget killing the worker starts a new one, which on a loaded
    machine takes longer than a test's short budget: the page after it
    then judged no document (seen in CI at load 10). A call with a long
    budget waits for the start; the test's own pages then begin with a
    worker ready, as the pages they prove something about do."""
    monkeypatch.setattr(files, "FIND_BUDGET_SECONDS", 60.0)
    warm = files.find(engine, content="^$warm", regex=True)
    assert warm["timed_out"] is False, warm
    monkeypatch.setattr(files, "FIND_BUDGET_SECONDS", budget)


def test_catastrophic_regex_times_out_and_the_cursor_moves_past_it(corpus_dir, engine, index, monkeypatch):
    write(corpus_dir, "a_bad.txt", "a" * 5000 + "b\n")
    write(corpus_dir, "b_good.txt", "aaa\n")
    index()
    # Unbounded, this pattern backtracks 2**5000 ways on a_bad.txt: returning
    # at all shows the budget stopped it. It stopped inside that one document
    # (scanned, no match), and the cursor skips it.
    ready_worker(engine, monkeypatch, 0.5)
    first = files.find(engine, content="(a+)+$", regex=True)
    assert first["timed_out"] is True and first["matches"] == [] and first["next_cursor"]
    assert first["files_scanned"] == 1
    ready_worker(engine, monkeypatch, 0.5)  # the budget killed the worker
    second = files.find(engine, content="(a+)+$", regex=True, cursor=first["next_cursor"])
    assert second["timed_out"] is False
    assert [m["rel_path"] for m in second["matches"]] == ["b_good.txt"]


def test_a_slow_document_after_others_is_retried_with_a_fresh_budget(corpus_dir, engine, index, monkeypatch):
    write(corpus_dir, "a_good.txt", "aaa\n")
    write(corpus_dir, "b_bad.txt", "a" * 5000 + "b\n")
    index()
    ready_worker(engine, monkeypatch, 0.5)
    first = files.find(engine, content="(a+)+$", regex=True)
    assert first["timed_out"] is True
    assert [m["rel_path"] for m in first["matches"]] == ["a_good.txt"]
    ready_worker(engine, monkeypatch, 0.5)  # the budget killed the worker
    second = files.find(engine, content="(a+)+$", regex=True, cursor=first["next_cursor"])
    assert second["timed_out"] is True and second["matches"] == [] and second["files_scanned"] == 1
    ready_worker(engine, monkeypatch, 0.5)
    third = files.find(engine, content="(a+)+$", regex=True, cursor=second["next_cursor"])
    assert third == {"matches": [], "files_scanned": 0, "timed_out": False}


def test_a_worker_still_starting_is_a_timeout_not_a_bad_pattern(corpus_dir, engine, index, monkeypatch):
    """A fresh regex worker (a new interpreter importing ``regex``: tens of
    milliseconds idle, far more on a busy machine) is not the pattern's
    fault, nor the first document's: before, a call whose budget ran out
    while it started was refused as INVALID_FIELD "takes too long to
    compile" for a plain pattern, and a worker ready just before the
    deadline left the first document a sliver of the budget, whose cut
    skipped it for good. Now the start's time is given back to the call
    (or, when the worker is not ready by the deadline, the call is
    ``timed_out`` where it started). Which of the two happens depends on how
    fast this machine starts the worker; a.txt is found either way. (Before,
    this failed only where the start took most of the budget: CI's run of
    2026-11-30; and a version that excused a short first document instead
    never let a call after a restart skip one that needs a whole budget:
    ``test_a_slow_document_after_others_is_retried_with_a_fresh_budget``.)"""
    write(corpus_dir, "a.txt", "alpha beta\n")
    write(corpus_dir, "b.txt", "a" * 5000 + "b\n")
    index()
    for budget in (0.1, 0.3):  # the least a server allows, and more
        monkeypatch.setattr(files, "FIND_BUDGET_SECONDS", 30.0)
        assert files.find(engine, content="be+ta", regex=True)["matches"][0]["rel_path"] == "a.txt"
        monkeypatch.setattr(files, "FIND_BUDGET_SECONDS", 1.0)
        assert (
            files.find(engine, content="(a+)+$", regex=True)["timed_out"] is True
        )  # its worker killed, a new one started
        monkeypatch.setattr(files, "FIND_BUDGET_SECONDS", budget)
        answer = files.find(engine, content="al+pha", regex=True)
        if not answer["matches"]:
            assert answer["timed_out"] is True
            monkeypatch.setattr(files, "FIND_BUDGET_SECONDS", 5.0)
            answer = files.find(engine, content="al+pha", regex=True, cursor=answer["next_cursor"])
        assert [m["rel_path"] for m in answer["matches"]] == ["a.txt"], budget


def test_a_document_retried_on_every_page_is_passed_at_last(corpus_dir, engine, index, monkeypatch):
    """A document cut after the call waited a tenth of its budget for its
    turn at the regex worker is retried on the next page rather than
    skipped. But while another client keeps the worker that busy whenever
    this one comes back, the cursor pointed at the same document for ever:
    5 pages of nothing, never b_good.txt, before the review of session 28.
    A document is now retried at most ``FIND_RETRIES`` pages in a row, then
    passed over as one that took a whole budget."""
    write(corpus_dir, "a_bad.txt", "a" * 5000 + "b\n")
    write(corpus_dir, "b_good.txt", "aaa\n")
    index()
    monkeypatch.setattr(files, "FIND_BUDGET_SECONDS", 1.0)

    def other_client(holding: threading.Event) -> None:
        # Another client's call, holding its turn for 0.4 s of the page's 1 s.
        patterns.CLIENT.set(("10.0.0.2", "other"))
        with patterns.RegexScan("other", 0, time.monotonic() + 30):
            holding.set()
            time.sleep(0.4)

    cursor, seen, pages = None, [], 0
    while pages < 5:
        holding = threading.Event()
        other = threading.Thread(target=other_client, args=(holding,))
        other.start()
        holding.wait(30)
        page = files.find(engine, content="(a+)+$", regex=True, cursor=cursor)
        other.join()
        pages += 1
        seen.extend(m["rel_path"] for m in page["matches"])
        cursor = page.get("next_cursor")
        if cursor is None:
            break
    assert seen == ["b_good.txt"] and cursor is None, (pages, seen)


def test_a_worker_that_ended_is_replaced_without_leaving_its_pipes_open(corpus_dir, engine, index):
    """A worker ended from outside (killed) is replaced by the next call;
    before, its two pipes were left to the garbage collector (a
    ResourceWarning each)."""
    write(corpus_dir, "a.txt", "alpha beta\n")
    index()
    assert files.find(engine, content="al+pha", regex=True)["matches"][0]["rel_path"] == "a.txt"
    pid = patterns.worker_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # as the kernel's OOM killer would
    while Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z":
        time.sleep(0.01)  # dead, not yet reaped
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        assert files.find(engine, content="al+pha", regex=True)["matches"][0]["rel_path"] == "a.txt"
        gc.collect()
    assert patterns.worker_pid() not in (None, pid)
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_find_reads_representations_not_the_disk(corpus_dir, engine, index):
    write(corpus_dir, "a.txt", "original words\n")
    index()
    Representation.objects.filter(document__rel_path="a.txt").update(text="stored words\n")
    assert files.find(engine, content="stored")["matches"][0]["rel_path"] == "a.txt"
    assert files.find(engine, content="original")["matches"] == []


def test_list_files_pages_by_cursor_after_the_last_file_returned(small_tree, corpus_dir, config):
    """A cursor holds the query and the last file a page returned: the
    pages it leads to list every file the rules let through once, in
    order, without ``total`` (what came before it is not judged again);
    another query's cursor, or one with an offset, is refused."""
    policy = ExclusionPolicy.from_config(config, root=corpus_dir)
    now = ExclusionEngine(corpus_dir, replace(policy, path_excludes=(*policy.path_excludes, "docs/")))
    first = files.list_files(engine=now, limit=2)
    assert [f["rel_path"] for f in first["files"]] == ["README.md", "docs2/other.txt"]
    assert first["total"] == 4 and first["has_more"] and first["next_cursor"]
    following = files.list_files(engine=now, limit=2, cursor=first["next_cursor"])
    assert [f["rel_path"] for f in following["files"]] == ["src/blob.bin", "src/main.py"]
    assert not following["has_more"] and "next_cursor" not in following and "total" not in following
    by_cursor, cursor = [], None
    for _ in range(6):
        page = files.list_files(engine=now, limit=1, cursor=cursor)
        by_cursor += [f["rel_path"] for f in page["files"]]
        if not page["has_more"]:
            break
        cursor = page["next_cursor"]
    assert by_cursor == [f["rel_path"] for f in files.list_files(engine=now)["files"]]
    raises(errors.INVALID_FIELD, files.list_files, engine=now, glob="*.md", cursor=first["next_cursor"])
    raises(errors.INVALID_FIELD, files.list_files, engine=now, path_prefix="src", cursor=first["next_cursor"])
    raises(errors.INVALID_FIELD, files.list_files, engine=now, offset=2, cursor=first["next_cursor"])
    raises(errors.INVALID_FIELD, files.list_files, engine=now, cursor="not a cursor")
