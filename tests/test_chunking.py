"""Chunking: line windows for code, character windows for prose, per-page chunks for PDFs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from corpus.ingest.chunking import ChunkDraft, chunk_code, chunk_pages, chunk_prose
from corpus.ingest.cut import chunk_document
from corpus.ingest.extract import Extracted, Page, decode_text
from kernel.config import ChunkingConfig

STDLIB_MODULE = Path(random.__file__)


def lines_of(text: str, draft: ChunkDraft, line_offset: int = 0) -> str:
    lines = text.split("\n")
    return "\n".join(lines[draft.start - 1 - line_offset : draft.end - line_offset])


def numbered_lines(count: int) -> str:
    return "".join(f"line {number}\n" for number in range(1, count + 1))


def paragraphs(count: int, *, seed: int = 7) -> str:
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "naïve", "café", "東京", "x"]
    out = []
    for _ in range(count):
        lines = [" ".join(rng.choices(words, k=rng.randint(3, 18))) for _ in range(rng.randint(1, 6))]
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def assert_ordinals(drafts: list[ChunkDraft]) -> None:
    assert [draft.ordinal for draft in drafts] == list(range(len(drafts)))


# --- chunk_code ------------------------------------------------------------------


def test_code_windows_have_exact_line_spans_and_overlap() -> None:
    text = numbered_lines(450)
    drafts = chunk_code(text, max_lines=200, overlap_lines=30)
    assert [(d.start, d.end) for d in drafts] == [(1, 200), (171, 370), (341, 450)]
    assert drafts[1].text.split("\n")[0] == "line 171"
    assert all(d.span_kind == "lines" for d in drafts)
    assert_ordinals(drafts)


@pytest.mark.parametrize(
    ("max_lines", "overlap_lines"),
    [
        pytest.param(200, 30, id="defaults"),
        pytest.param(5, 0, id="no-overlap"),
        pytest.param(7, 6, id="overlap-one-less-than-window"),
        pytest.param(10, 50, id="overlap-larger-than-window-is-clamped"),
        pytest.param(1, 0, id="single-line-windows"),
    ],
)
def test_code_window_text_equals_its_lines(max_lines: int, overlap_lines: int) -> None:
    text = STDLIB_MODULE.read_text(encoding="utf-8")
    drafts = chunk_code(text, max_lines=max_lines, overlap_lines=overlap_lines)
    for draft in drafts:
        assert draft.text == lines_of(text, draft)
        assert draft.end - draft.start + 1 <= max_lines
    assert drafts[-1].end == len(text.rstrip("\n").split("\n")) or not drafts[-1].text.strip()
    assert_ordinals(drafts)


def test_code_shorter_than_window_is_one_chunk() -> None:
    drafts = chunk_code("a = 1\nb = 2\n", max_lines=200, overlap_lines=30)
    assert drafts == [ChunkDraft(0, "a = 1\nb = 2", "lines", 1, 2)]


@pytest.mark.parametrize("text", [pytest.param("", id="empty"), pytest.param("\n \n\t\n", id="blank-lines")])
def test_code_without_content_has_no_chunks(text: str) -> None:
    assert chunk_code(text) == []


def test_code_windows_of_only_blank_lines_are_dropped() -> None:
    text = "first\n" + "\n" * 30 + "last\n"
    drafts = chunk_code(text, max_lines=10, overlap_lines=0)
    assert [(d.start, d.end) for d in drafts] == [(1, 10), (31, 32)]
    assert_ordinals(drafts)


# --- chunk_prose -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_chars", "overlap_chars", "min_chars"),
    [
        pytest.param(2500, 250, 200, id="defaults"),
        pytest.param(300, 0, 0, id="small-no-overlap"),
        pytest.param(100, 40, 30, id="tiny-windows"),
        pytest.param(500, 400, 100, id="overlap-near-window"),
    ],
)
def test_prose_chunks_lie_within_their_line_spans(max_chars: int, overlap_chars: int, min_chars: int) -> None:
    text = paragraphs(120)
    drafts = chunk_prose(text, max_chars=max_chars, overlap_chars=overlap_chars, min_chars=min_chars)
    assert len(drafts) > 1
    for draft in drafts:
        assert draft.span_kind == "lines"
        assert draft.text and draft.text == draft.text.strip()
        assert draft.text in lines_of(text, draft)
        assert draft.text.split("\n")[0] in text.split("\n")[draft.start - 1]
        assert len(draft.text) <= max_chars + min_chars
    assert_ordinals(drafts)


def test_prose_covers_every_non_blank_line() -> None:
    text = paragraphs(80)
    drafts = chunk_prose(text, max_chars=400, overlap_chars=50, min_chars=50)
    covered = {line for d in drafts for line in range(d.start, d.end + 1)}
    wanted = {number for number, line in enumerate(text.split("\n"), start=1) if line.strip()}
    assert wanted <= covered


def test_prose_prefers_to_break_at_blank_lines() -> None:
    paragraph = "\n".join(["word " * 19 + "w"] * 4) + " end."
    text = "\n\n".join([paragraph] * 10)
    drafts = chunk_prose(text, max_chars=1000, overlap_chars=0, min_chars=0)
    assert len(drafts) == 5
    assert all(d.text.endswith("end.") and d.text.startswith("word") for d in drafts)


def test_prose_breaks_at_whitespace_when_there_are_no_newlines() -> None:
    text = " ".join(f"w{i:04d}" for i in range(2000))
    drafts = chunk_prose(text, max_chars=500, overlap_chars=0, min_chars=0)
    words = [word for d in drafts for word in d.text.split(" ")]
    assert words == text.split(" ")


def test_prose_overlap_repeats_about_overlap_chars() -> None:
    text = " ".join(f"w{i:04d}" for i in range(3000))
    drafts = chunk_prose(text, max_chars=1000, overlap_chars=200, min_chars=0)
    for previous, current in zip(drafts, drafts[1:], strict=False):
        first_word = current.text.split(" ")[0]
        repeated = previous.text[previous.text.index(first_word) :]
        assert 150 <= len(repeated) <= 250
        assert current.text.startswith(repeated)


def test_prose_without_overlap_does_not_repeat_text() -> None:
    text = paragraphs(60)
    drafts = chunk_prose(text, max_chars=300, overlap_chars=0, min_chars=0)
    assert "".join(d.text for d in drafts).replace("\n", "").replace(" ", "") == "".join(text.split())


def test_prose_merges_a_short_tail_into_the_previous_chunk() -> None:
    text = "a" * 990 + "\n" + "b" * 100
    merged = chunk_prose(text, max_chars=1000, overlap_chars=0, min_chars=200)
    split = chunk_prose(text, max_chars=1000, overlap_chars=0, min_chars=50)
    assert [d.text for d in merged] == [text]
    assert [d.text for d in split] == ["a" * 990, "b" * 100]
    assert [(d.start, d.end) for d in split] == [(1, 1), (2, 2)]


def test_prose_shorter_than_min_chars_is_still_one_chunk() -> None:
    assert chunk_prose("tiny note\n", min_chars=200) == [ChunkDraft(0, "tiny note", "lines", 1, 1)]


@pytest.mark.parametrize("text", [pytest.param("", id="empty"), pytest.param(" \n\n\t \n", id="whitespace")])
def test_prose_without_content_has_no_chunks(text: str) -> None:
    assert chunk_prose(text) == []


def test_prose_drops_whitespace_only_windows() -> None:
    text = "start of file\n" + "\n" * 5000 + "end of file\n"
    drafts = chunk_prose(text, max_chars=1000, overlap_chars=100, min_chars=0)
    assert [(d.text, d.start, d.end) for d in drafts] == [
        ("start of file", 1, 1),
        ("end of file", 5002, 5002),
    ]


def test_prose_line_offset_shifts_spans() -> None:
    text = paragraphs(30)
    plain = chunk_prose(text, max_chars=300)
    shifted = chunk_prose(text, max_chars=300, line_offset=40)
    assert [(d.start + 40, d.end + 40, d.text) for d in plain] == [(d.start, d.end, d.text) for d in shifted]


def test_prose_chunks_one_enormous_line() -> None:
    text = "x" * 5_000_000 + "\n" + "after the giant line\n"
    drafts = chunk_prose(text, max_chars=2500, overlap_chars=250, min_chars=200)
    assert len(drafts) == pytest.approx(5_000_000 / 2250, rel=0.01)
    assert all(len(d.text) <= 2700 for d in drafts)
    assert all(d.start == 1 for d in drafts[:-1])
    assert drafts[-1].text.endswith("after the giant line") and drafts[-1].end == 2


def test_prose_on_windows_line_endings_after_decoding() -> None:
    text, _ = decode_text(b"first line\r\nsecond line\r\n\r\nthird paragraph\r\n")
    drafts = chunk_prose(text, max_chars=20, overlap_chars=0, min_chars=0)
    assert [(d.text, d.start, d.end) for d in drafts] == [
        ("first line", 1, 1),
        ("second line", 2, 2),
        ("third paragraph", 4, 4),
    ]


# --- chunk_pages -----------------------------------------------------------------


def test_pages_are_chunked_separately_with_page_spans() -> None:
    long_page = paragraphs(40)
    pages = [Page(1, "Short first page."), Page(2, ""), Page(3, long_page), Page(4, "  \n ")]
    drafts = chunk_pages(pages, max_chars=500, overlap_chars=50, min_chars=50)
    assert drafts[0] == ChunkDraft(0, "Short first page.", "page", 1, 1)
    assert len(drafts) > 2
    assert {(d.span_kind, d.start, d.end) for d in drafts[1:]} == {("page", 3, 3)}
    assert all(d.text in long_page for d in drafts[1:])
    assert_ordinals(drafts)


def test_no_pages_means_no_chunks() -> None:
    assert chunk_pages([Page(1, ""), Page(2, "")], max_chars=100, overlap_chars=0, min_chars=0) == []


# --- chunk_document --------------------------------------------------------------

CONFIG = ChunkingConfig.model_validate({"max_chars": 500, "overlap_chars": 50, "min_chars": 50})


def test_document_with_pages_gets_page_spans() -> None:
    extracted = Extracted("raw_text", "one\ftwo", pages=(Page(1, "one"), Page(2, "two")), meta={})
    drafts = chunk_document(extracted, kind="text", config=CONFIG)
    assert [(d.text, d.span_kind, d.start) for d in drafts] == [("one", "page", 1), ("two", "page", 2)]


def test_code_document_uses_line_windows_from_config() -> None:
    text = STDLIB_MODULE.read_text(encoding="utf-8")
    config = ChunkingConfig.model_validate({"code": {"max_lines": 50, "overlap_lines": 10}})
    drafts = chunk_document(Extracted("raw_text", text, None, {}), kind="code", config=config)
    assert drafts[0].end == 50 and drafts[1].start == 41
    assert all(d.text == lines_of(text, d) for d in drafts)


def test_text_document_uses_prose_windows_from_config() -> None:
    text = paragraphs(50)
    drafts = chunk_document(Extracted("raw_text", text, None, {}), kind="text", config=CONFIG)
    assert drafts == chunk_prose(text, max_chars=500, overlap_chars=50, min_chars=50)


def test_minified_code_falls_back_to_prose_windows() -> None:
    text = "var a=1;" * 10_000 + "\n"
    drafts = chunk_document(Extracted("raw_text", text, None, {}), kind="code", config=CONFIG)
    assert len(drafts) > 100
    assert all(len(d.text) <= 550 and (d.start, d.end) == (1, 1) for d in drafts)
