"""Section-aware prose units: Markdown and RST headings, plain-text paragraphs, exact line spans."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corpus.ingest.chunking import LINES, ChunkDraft, chunk_prose
from corpus.ingest.extract import html_to_text
from corpus.ingest.sections import chunk_sections
from tests import support

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "naïve", "café", "東京", "x"]


def assert_spans(text: str, drafts: list[ChunkDraft], *, exact: bool = True) -> None:
    """The citation invariant: each draft's text lies in (and, if ``exact``, is) its stripped lines."""
    lines = text.split("\n")
    assert [draft.ordinal for draft in drafts] == list(range(len(drafts)))
    for draft in drafts:
        assert draft.span_kind == LINES
        assert 1 <= draft.start <= draft.end <= len(lines)
        assert draft.text and draft.text == draft.text.strip()
        cited = "\n".join(lines[draft.start - 1 : draft.end])
        assert draft.text in cited
        assert draft.text.split("\n")[0] in lines[draft.start - 1]
        assert draft.text.split("\n")[-1] in lines[draft.end - 1]
        if exact:
            assert draft.text == cited.strip()


def chunk(text: str, fmt: str = "md", **kwargs) -> list[ChunkDraft]:
    drafts = chunk_sections(text, fmt=fmt, **kwargs)
    assert_spans(text, drafts, exact=kwargs.get("max_chars", 2500) >= len(text))
    return drafts


def summary(drafts: list[ChunkDraft]) -> list[tuple[int, int, str]]:
    return [(draft.start, draft.end, draft.context) for draft in drafts]


def sentences(count: int, *, seed: int = 3) -> str:
    rng = random.Random(seed)
    return "\n".join(" ".join(rng.choices(WORDS, k=12)) + "." for _ in range(count))


# --- Markdown --------------------------------------------------------------------

GUIDE = """\
Some words before any heading.

# Guide

The guide's introduction.

## Install

How to install.

### From source

Build it yourself.

## Usage

Use it.

# Reference

All the details.
"""


def test_markdown_atx_headings_cut_sections_with_nested_heading_paths() -> None:
    drafts = chunk(GUIDE, path="docs/guide.md", min_chars=0)
    assert summary(drafts) == [
        (1, 1, "docs/guide.md"),
        (3, 5, "docs/guide.md › Guide"),
        (7, 9, "docs/guide.md › Guide › Install"),
        (11, 13, "docs/guide.md › Guide › Install › From source"),
        (15, 17, "docs/guide.md › Guide › Usage"),
        (19, 21, "docs/guide.md › Reference"),
    ]
    assert drafts[3].text == "### From source\n\nBuild it yourself."


def test_context_without_a_path_is_the_heading_path_alone() -> None:
    drafts = chunk(GUIDE, min_chars=0)
    assert [draft.context for draft in drafts[:3]] == ["", "Guide", "Guide › Install"]


def test_markdown_setext_headings_are_levels_one_and_two() -> None:
    text = "Title\n=====\n\nIntro.\n\nPart\n----\n\nBody.\n\nOther\n===\nEnd.\n"
    drafts = chunk(text, min_chars=0)
    assert summary(drafts) == [(1, 4, "Title"), (6, 9, "Title › Part"), (11, 13, "Other")]
    assert drafts[1].text == "Part\n----\n\nBody."


def test_markdown_setext_needs_a_one_line_paragraph_above() -> None:
    text = "# Top\n\nfirst line of a paragraph\nsecond line\n---\n\nafter\n\n---\n\nend\n"
    assert summary(chunk(text, min_chars=0)) == [(1, 11, "Top")]


def test_markdown_lists_quotes_and_indented_code_are_not_setext_headings() -> None:
    text = "# A\n\n- item\n---\n\n> quote\n===\n\n    code\n---\n\n\tcode\n---\n\n1. one\n---\n"
    assert summary(chunk(text, min_chars=0)) == [(1, 16, "A")]


def test_markdown_atx_closing_hashes_and_non_headings() -> None:
    text = (
        "# Title ##\n\nx\n\n## C#\n\ny\n\n#hashtag is text\n\n####### seven is text\n\n    # indented code\n"
    )
    drafts = chunk(text, min_chars=0)
    assert summary(drafts) == [(1, 3, "Title"), (5, 13, "Title › C#")]


@pytest.mark.parametrize("fence", ["```", "~~~", "````"])
def test_markdown_fenced_code_is_never_cut(fence: str) -> None:
    text = (
        "# Script\n\nRun this:\n\n"
        f"{fence}bash\n# install the package\npip install thing\n\nSetup\n=====\n{fence}\n\n"
        "## Next\n\nDone.\n"
    )
    drafts = chunk(text, min_chars=0)
    assert summary(drafts) == [(1, 11, "Script"), (13, 15, "Script › Next")]
    assert "# install the package" in drafts[0].text


def test_markdown_fence_closes_only_with_its_own_marker() -> None:
    text = "# A\n\n````\n```\n# not a heading\n~~~\n````\n\n# B\n\nb\n"
    assert summary(chunk(text, min_chars=0)) == [(1, 7, "A"), (9, 11, "B")]


def test_markdown_inline_code_at_line_start_is_not_a_fence() -> None:
    text = "# A\n\n```x``` is inline code\n\n# B\n\nb\n"
    assert summary(chunk(text, min_chars=0)) == [(1, 3, "A"), (5, 7, "B")]


def test_markdown_unclosed_fence_runs_to_the_end() -> None:
    text = "# A\n\n```\n# inside\n\n# still inside\n"
    assert summary(chunk(text, min_chars=0)) == [(1, 6, "A")]


@pytest.mark.parametrize(
    ("opener", "closer"),
    [pytest.param("---", "---", id="yaml"), pytest.param("---", "...", id="yaml-dots"), ("+++", "+++")],
)
def test_markdown_front_matter_is_not_a_heading(opener: str, closer: str) -> None:
    text = f"{opener}\ntitle: Guide\ntags: [a]\n{closer}\n\n# Guide\n\nBody.\n"
    drafts = chunk(text, path="g.md", min_chars=0)
    assert summary(drafts) == [(1, 4, "g.md"), (6, 8, "g.md › Guide")]
    assert drafts[0].text.startswith(opener) and drafts[0].text.endswith(closer)


@pytest.mark.parametrize(
    "block",
    [
        pytest.param("<pre>\n# not a heading\nNor\n===\n</pre>", id="pre"),
        pytest.param("<PRE class='x'>\n# not a heading\n</PRE>", id="pre-upper"),
        pytest.param("<!--\n# commented out\n-->", id="comment"),
        pytest.param("<script>\n# x\n</script>", id="script"),
    ],
)
def test_markdown_raw_html_blocks_hold_no_headings(block: str) -> None:
    text = f"# A\n\n{block}\n\n# B\n\nb\n"
    assert [draft.context for draft in chunk(text, min_chars=0)] == ["A", "B"]


def test_markdown_html_comment_on_one_line_hides_nothing_after_it() -> None:
    text = "# A\n\n<!-- note -->\n\n# B\n\nb\n"
    assert summary(chunk(text, min_chars=0)) == [(1, 3, "A"), (5, 7, "B")]


def test_markdown_setext_heading_after_a_rule() -> None:
    text = "intro\n\n-----\nLicense\n-----\n\n***\nTerms\n=====\nbody\n"
    assert summary(chunk(text, min_chars=0)) == [(1, 3, ""), (4, 7, "License"), (8, 10, "Terms")]


def test_markdown_front_matter_then_setext_heading() -> None:
    text = "---\ntitle: x\n---\nHeading\n=======\nbody\n"
    assert summary(chunk(text, min_chars=0)) == [(1, 3, ""), (4, 6, "Heading")]


def test_markdown_leading_rule_is_not_front_matter() -> None:
    text = "---\n\n# A\n\na\n\n---\n\n# B\n\nb\n"
    assert summary(chunk(text, min_chars=0)) == [(1, 1, ""), (3, 7, "A"), (9, 11, "B")]


def test_long_section_is_windowed_with_its_context_and_exact_spans() -> None:
    body = sentences(120)
    text = f"# Intro\n\nshort\n\n## Long part\n\n{body}\n\n## After\n\nend\n"
    drafts = chunk_sections(text, fmt="md", path="a.md", max_chars=1000, overlap_chars=100, min_chars=0)
    assert_spans(text, drafts)
    long = [draft for draft in drafts if draft.context == "a.md › Intro › Long part"]
    assert len(long) >= len(body) // 1000
    assert long[0].start == 5 and long[0].text.startswith("## Long part")
    assert long[-1].end == 6 + 120
    assert all(len(draft.text) <= 1000 for draft in long)
    assert [draft.start for draft in long] == sorted(draft.start for draft in long)
    assert summary(drafts)[-1] == (128, 130, "a.md › Intro › After")


def test_windows_of_a_long_section_match_chunk_prose_shifted() -> None:
    body = sentences(80)
    text = f"intro\n\n# Big\n{body}\n"
    drafts = chunk_sections(text, fmt="md", max_chars=700, overlap_chars=70, min_chars=50)
    expected = chunk_prose(f"# Big\n{body}\n", max_chars=700, overlap_chars=70, min_chars=50, line_offset=2)
    assert [(d.text, d.start, d.end) for d in drafts[1:]] == [(d.text, d.start, d.end) for d in expected]
    assert {draft.context for draft in drafts[1:]} == {"Big"}


def test_tiny_sections_merge_with_their_subsections_and_siblings() -> None:
    api = "# API\n\n## get\n\nFetch one.\n\n## put\n\nStore one.\n\n### options\n\nOverwrite.\n\n"
    text = api + "# Changelog\n\n" + sentences(3) + "\n"
    assert len(api) < 250 < len(text)
    drafts = chunk_sections(text, fmt="md", path="api.md", max_chars=250, min_chars=200)
    assert_spans(text, drafts)
    assert summary(drafts) == [(1, 13, "api.md › API"), (15, 19, "api.md › Changelog")]
    assert drafts[0].text.startswith("# API") and drafts[0].text.endswith("Overwrite.")
    siblings = chunk(text, path="api.md", min_chars=200)
    assert summary(siblings) == [(1, 19, "api.md › API")]


def test_merging_stops_at_a_shallower_heading() -> None:
    text = "## a1\n\ntiny\n\n### deep\n\ntiny\n\n## a2\n\ntiny\n\n# B\n\ntiny\n"
    drafts = chunk(text, min_chars=200)
    assert summary(drafts) == [(1, 11, "a1"), (13, 15, "B")]
    starting_deeper = chunk(text[text.index("## a2") :], min_chars=200)
    assert summary(starting_deeper) == [(1, 3, "a2"), (5, 7, "B")]


def test_merging_stays_within_max_chars() -> None:
    text = "".join(f"## Part {number}\n\n{'word ' * 20}\n\n" for number in range(30))
    drafts = chunk(text, min_chars=200, max_chars=600)
    assert 1 < len(drafts) < 30
    assert all(len(draft.text) <= 600 for draft in drafts)
    assert [draft.context for draft in drafts] == [f"Part {number}" for number in range(0, 30, 5)]


def test_sections_with_enough_body_are_not_merged() -> None:
    body = sentences(4)
    text = f"## One\n\n{body}\n\n## Two\n\n{body}\n"
    assert len(body) >= 200
    assert summary(chunk(text, min_chars=200)) == [(1, 6, "One"), (8, 13, "Two")]


def test_preamble_is_its_own_unit_even_when_tiny() -> None:
    text = "badge\n\n# Title\n\nshort\n"
    assert summary(chunk(text, path="r.md", min_chars=200)) == [(1, 1, "r.md"), (3, 5, "r.md › Title")]


def test_very_long_heading_is_cut_in_the_context() -> None:
    text = "# " + "t" * 1000 + "\n\nbody\n"
    (draft,) = chunk(text)
    assert draft.context == "t" * 200
    assert draft.text == text.strip()


# --- HTML (as html2text Markdown) -------------------------------------------------


def test_html_converted_to_markdown_is_cut_at_its_headings() -> None:
    html = (
        "<html><head><title>t</title></head><body><p>Lead paragraph.</p>"
        "<h1>Manual</h1><p>Intro text.</p><h2>Setup</h2><p>Install it.</p>"
        "<pre># a shell comment\nmake</pre><h2>Use</h2><p>Run it.</p></body></html>"
    )
    text = html_to_text(html)
    drafts = chunk(text, fmt="html", path="m.html", min_chars=0)
    assert [draft.context for draft in drafts] == [
        "m.html",
        "m.html › Manual",
        "m.html › Manual › Setup",
        "m.html › Manual › Use",
    ]
    assert "# a shell comment" in drafts[2].text


# --- reStructuredText --------------------------------------------------------------

RST = """\
==========
 Project
==========

Welcome.

Install
=======

Pip.

From source
-----------

Make.

Details
~~~~~~~

Fine print.

Usage
=====

Run.

==========
 Appendix
==========

Extra.
"""


def test_rst_titles_get_levels_in_order_of_first_appearance() -> None:
    drafts = chunk(RST, fmt="rst", path="index.rst", min_chars=0)
    assert summary(drafts) == [
        (1, 5, "index.rst › Project"),
        (7, 10, "index.rst › Project › Install"),
        (12, 15, "index.rst › Project › Install › From source"),
        (17, 20, "index.rst › Project › Install › From source › Details"),
        (22, 25, "index.rst › Project › Usage"),
        (27, 31, "index.rst › Appendix"),
    ]
    assert drafts[0].text.startswith("==========\n Project")


def test_rst_same_character_with_and_without_overline_are_different_levels() -> None:
    text = "=====\nTop\n=====\n\nA\n=\n\nx\n\nB\n=\n\ny\n\n=====\nNext\n=====\n\nz\n"
    drafts = chunk(text, fmt="rst", min_chars=0)
    assert [draft.context for draft in drafts] == ["Top", "Top › A", "Top › B", "Next"]


def test_rst_literal_blocks_transitions_and_directives_are_not_titles() -> None:
    text = (
        "Title\n=====\n\nAn example::\n\n    Not a title\n    ===========\n\n"
        "Text.\n\n----------\n\nMore text.\n\n::\n\n    x\n\n"
        ".. note::\n==========\n\n- bullet\n--------\n\nEnd.\n"
    )
    drafts = chunk(text, fmt="rst", path="a.rst", min_chars=0)
    assert summary(drafts) == [(1, 25, "a.rst › Title")]


def test_rst_short_underline_is_a_title_only_from_four_characters() -> None:
    text = "Title\n=====\n\nA long line of text\n===\n\n``a_long_name``\n~~~~~~~~~~\n\nbody\n"
    assert summary(chunk(text, fmt="rst", min_chars=0)) == [
        (1, 5, "Title"),
        (7, 10, "Title › ``a_long_name``"),
    ]


def test_rst_title_must_start_a_block() -> None:
    text = "Title\n=====\n\nfirst line\nsecond\n------\n\nSub\n---\nbody\n"
    assert summary(chunk(text, fmt="rst", min_chars=0)) == [(1, 6, "Title"), (8, 10, "Title › Sub")]


def test_rst_underline_of_an_overlined_title_is_not_read_again() -> None:
    text = "=====\nTop\n=====\nNext\n=====\n\nx\n"
    assert summary(chunk(text, fmt="rst", min_chars=0)) == [(1, 3, "Top"), (4, 7, "Top › Next")]


def test_rst_indented_text_is_never_an_underlined_title() -> None:
    text = "Title\n=====\n\n  quoted text\n-------------\n\nx\n"
    assert summary(chunk(text, fmt="rst", min_chars=0)) == [(1, 7, "Title")]


def test_rst_consecutive_titles_and_mismatched_overline() -> None:
    text = "Doc\n===\nPart\n----\nbody\n\n-----\nOdd\n=====\n\ntext\n"
    drafts = chunk(text, fmt="rst", min_chars=0)
    assert summary(drafts) == [(1, 2, "Doc"), (3, 11, "Doc › Part")]


# --- plain text ----------------------------------------------------------------------


def test_plain_text_groups_whole_paragraphs() -> None:
    paragraphs = [sentences(3, seed=seed) for seed in range(12)]
    text = "\n\n".join(paragraphs) + "\n"
    drafts = chunk(text, fmt="text", path="notes.txt", max_chars=1000)
    assert len(drafts) > 1
    assert {draft.context for draft in drafts} == {"notes.txt"}
    assert all(len(draft.text) <= 1000 for draft in drafts)
    assert "\n\n".join(draft.text for draft in drafts) == text.strip()
    assert all(draft.text.startswith(tuple(p.split("\n")[0] for p in paragraphs)) for draft in drafts)


def test_plain_text_long_paragraph_is_windowed() -> None:
    long = sentences(60)
    text = f"first\n\n{long}\n\n\n  \nlast\n"
    drafts = chunk_sections(text, fmt="text", max_chars=800, overlap_chars=0, min_chars=0)
    assert_spans(text, drafts)
    assert drafts[0].text == "first" and (drafts[0].start, drafts[0].end) == (1, 1)
    assert drafts[-1].text == "last" and drafts[-1].start == 66
    middle = drafts[1:-1]
    assert len(middle) >= len(long) // 800 and middle[0].start == 3 and middle[-1].end == 62
    assert "\n".join(draft.text for draft in middle) == long


def test_plain_text_ignores_markdown_syntax() -> None:
    text = "# not a heading\n\nTitle\n=====\n"
    drafts = chunk(text, fmt="text", path="t.txt")
    assert summary(drafts) == [(1, 4, "t.txt")]


# --- edges ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["md", "rst", "html", "text"])
@pytest.mark.parametrize("text", ["", "\n", "  \n\t\n \n"])
def test_empty_input_has_no_units(fmt: str, text: str) -> None:
    assert chunk_sections(text, fmt=fmt, path="x") == []


def test_unknown_format_is_an_error() -> None:
    with pytest.raises(ValueError, match="pdf"):
        chunk_sections("text", fmt="pdf")


@pytest.mark.parametrize("fmt", ["md", "rst", "text"])
def test_leading_blank_lines_keep_line_numbers(fmt: str) -> None:
    text = "\n\n  Title\n=====\n\n\n"
    drafts = chunk(text, fmt=fmt)
    assert [(draft.text, draft.start, draft.end) for draft in drafts] == [("Title\n=====", 3, 4)]


# --- scale -----------------------------------------------------------------------------


def assert_linear(make, size: int, fmt: str) -> list[ChunkDraft]:
    """``make(size)`` costs at most 10x the CPU of ``make(size // 4)``
    (``support.assert_linear``); the drafts of ``make(size)``."""
    small, large, drafts = make(size // 4), make(size), []
    support.assert_linear(
        lambda: chunk_sections(small, fmt=fmt, path="big"),
        lambda: drafts.append(chunk_sections(large, fmt=fmt, path="big")),
    )
    return drafts[-1]


def markdown_parts(megabytes: float) -> str:
    rng = random.Random(5)
    parts, size = [], 0
    while size < megabytes * 1_000_000:
        body = "\n".join(" ".join(rng.choices(WORDS, k=12)) for _ in range(rng.randint(1, 30)))
        parts.append(f"{'#' * rng.randint(1, 4)} Part {len(parts)}\n\n{body}\n\n```py\n# c\nx = 1\n```\n\n")
        size += len(parts[-1])
    return "".join(parts)


def test_five_megabytes_of_markdown_is_linear() -> None:
    drafts = assert_linear(lambda quarters: markdown_parts(quarters * 1.25), 4, "md")
    text = markdown_parts(5)
    assert len(drafts) >= len(text) // 2500
    assert_spans(text, drafts[:200], exact=False)


@pytest.mark.parametrize(
    ("unit", "count", "fmt"),
    [
        pytest.param("###### a\n##### b\n#### c\n### d\n## e\n# f\n", 16_668, "md", id="md-unmergeable"),
        pytest.param("Setext\n------\nline\n\n", 100_000, "md", id="md-setext"),
        pytest.param("Title\n=====\n\nSub\n---\n\n", 50_000, "rst", id="rst"),
        pytest.param("a\n\n", 100_000, "text", id="text"),
    ],
)
def test_a_hundred_thousand_headings_is_linear(unit: str, count: int, fmt: str) -> None:
    drafts = assert_linear(lambda n: unit * n, count, fmt)
    text = unit * count
    assert drafts and drafts[-1].end == len(text.rstrip("\n").split("\n"))


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda n: "# " + " " * n + "x\n", id="spaces-in-heading"),
        pytest.param(lambda n: " " * n + "\nx\n", id="spaces-line"),
        pytest.param(lambda n: "-" * n + "x\n---\n", id="dashes"),
        pytest.param(lambda n: "a\n" * (n // 2), id="one-long-paragraph"),
        pytest.param(lambda n: "* " * (n // 2) + "x\n---\n", id="almost-a-rule"),
    ],
)
@pytest.mark.parametrize("fmt", ["md", "rst", "text"])
def test_hostile_lines_stay_linear(make, fmt: str) -> None:
    drafts = assert_linear(make, 1_000_000, fmt)
    assert_spans(make(1_000_000), drafts, exact=False)


# --- property ------------------------------------------------------------------------

FRAGMENTS = [
    "",
    "",
    "# Title",
    "## Sub # ",
    "###### deep",
    "#",
    "####### no",
    "Setext",
    "===",
    "---",
    "~~~",
    "```",
    "```py",
    "   ```",
    "    # code",
    "- item",
    "> quote",
    "* * *",
    "::",
    ".. note::",
    "   inset",
    "+++",
    "...",
    "text with words",
    "\t tab",
]


@st.composite
def documents(draw: st.DrawFn) -> str:
    pieces = st.one_of(st.sampled_from(FRAGMENTS), st.text(alphabet="ab #=-`~:. \t", max_size=30))
    return "\n".join(draw(st.lists(pieces, max_size=60)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=documents(),
    fmt=st.sampled_from(["md", "rst", "html", "text"]),
    max_chars=st.integers(10, 400),
    overlap=st.integers(0, 60),
    min_chars=st.integers(0, 300),
)
def test_every_unit_cites_its_own_lines(
    text: str, fmt: str, max_chars: int, overlap: int, min_chars: int
) -> None:
    drafts = chunk_sections(
        text, fmt=fmt, path="p.md", max_chars=max_chars, overlap_chars=overlap, min_chars=min_chars
    )
    assert_spans(text, drafts, exact=False)
    for previous, current in zip(drafts, drafts[1:], strict=False):
        assert previous.start <= current.start and previous.end <= current.end
        if previous.context != current.context:
            assert previous.end < current.start
    covered = {line for draft in drafts for line in range(draft.start, draft.end + 1)}
    assert covered >= {number for number, line in enumerate(text.split("\n"), 1) if line.strip()}
    assert all(draft.context == "p.md" or draft.context.startswith("p.md › ") for draft in drafts)
