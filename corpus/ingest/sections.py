"""Section-aware prose units: Markdown, reStructuredText and plain text.

Prose is cut where its author cut it. A Markdown or reStructuredText file
becomes one unit per section (the heading line and its body, up to the next
heading of any level), and plain text one unit per run of whole paragraphs.
Every unit is cited by its own lines; its ``context`` holds the file's path
and the heading path (``"docs/guide.md › Install › From source"``), so a
section is indexed and embedded with the headings it sits under.

Sections longer than ``max_chars`` are windowed inside by
:func:`~corpus.ingest.chunking.chunk_prose`, every window keeping the
section's context. Short sections are merged with what follows them (see
:func:`_groups`) so that a document of many one-line sections gives a few
whole units, not one fragment per heading.

Headings are found by one regular-expression pass over candidate lines, so
the work is linear in the size of the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

from corpus.ingest.chunking import LINES, ChunkDraft, chunk_prose

SEPARATOR = " › "
#: a heading longer than this is cut in the context: a title, not a paragraph
TITLE_CHARS = 200
FORMATS = frozenset({"md", "rst", "html", "text"})

# Lines that may be a Markdown heading or fence; everything else is skipped
# in C, which keeps huge files fast.
_MD_CANDIDATE = re.compile(
    r"^ {0,3}(?:#{1,6}(?=[ \t]|$)|`{3,}|~{3,}|(?:=+|-+)[ \t]*$"
    r"|<(?i:pre|script|style|textarea)(?=[\s>]|$)|<!--)",
    re.M,
)
# HTML blocks whose content is raw (CommonMark types 1 and 2) run to these.
_MD_RAW_HTML_END = re.compile(r"</(?:pre|script|style|textarea)>", re.I)
_MD_COMMENT_END = re.compile(r"-->")
_MD_THEMATIC_BREAK = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*")
_MD_FRONT_OPEN = re.compile(r"(---|\+\+\+)[ \t]*\n")
_MD_BLOCK_START = re.compile(r" {0,3}(?:[-+*]|\d{1,9}[.)])(?:[ \t]|$)| {0,3}>")
# One punctuation character repeated, alone on a line: a possible RST
# overline, underline or transition.
_RST_ADORNMENT = re.compile(r"^([!-/:-@\[-`{-~])\1*[ \t]*$", re.M)
# Bullets and explicit markup (directives, comments, targets) start blocks
# that docutils never reads as a title.
_RST_NOT_TITLE = re.compile(r"[-+*•‣⁃](?: |$)|\.\.(?:\s|$)")
_BLANK_LINES = re.compile(r"\n(?:[^\S\n]*\n)+")


class _Heading(NamedTuple):
    """A heading found in the text, by character offsets and its first line."""

    pos: int  # offset of the heading's first line
    line: int  # 0-based line number of that line
    body: int  # offset just after the heading's last line
    level: int
    title: str


class _Section(NamedTuple):
    """A heading and its body up to the next heading; ``level`` 0 is the preamble."""

    pos: int
    end: int
    line: int
    body: int
    level: int
    path: tuple[str, ...]


def chunk_sections(
    text: str,
    *,
    fmt: str,
    path: str = "",
    max_chars: int = 2500,
    overlap_chars: int = 250,
    min_chars: int = 200,
) -> list[ChunkDraft]:
    """Units of ``text`` cut at its headings (``"md"``, ``"html"``, ``"rst"``) or paragraphs (``"text"``).

    ``html`` is HTML already turned into Markdown-like text. A section is
    its heading and the lines up to the next heading of any level; text
    before the first heading is a unit of its own. Each draft's ``context``
    is ``path`` and the heading path joined by :data:`SEPARATOR` (plain text:
    ``path``). Spans are the unit's 1-based lines, and a draft's text is the
    stripped text of them (a window's, for units longer than ``max_chars``).
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown prose format {fmt!r}")
    if not text.strip():
        return []
    if fmt == "text":
        units = [(pos, end, line, path) for pos, end, line in _paragraph_groups(text, max_chars)]
    else:
        headings = _rst_headings(text) if fmt == "rst" else _md_headings(text)
        units = [
            (first.pos, end, first.line, _context(path, first.path))
            for first, end in _groups(_sections(text, headings), text, max_chars, min_chars)
        ]
    return _drafts(text, units, max_chars=max_chars, overlap_chars=overlap_chars, min_chars=min_chars)


def _drafts(text: str, units: list[tuple[int, int, int, str]], **sizes: int) -> list[ChunkDraft]:
    """One draft per unit, or windows of it when it is long, numbered in order."""
    drafts: list[ChunkDraft] = []
    for pos, end, line, context in units:
        unit = text[pos:end]
        pieces = chunk_prose(unit, line_offset=line, **sizes) if len(unit) > sizes["max_chars"] else None
        for body, first, last in _whole(unit, line) if pieces is None else _spans(pieces):
            drafts.append(ChunkDraft(len(drafts), body, LINES, first, last, context=context))
    return drafts


def _whole(unit: str, line: int) -> list[tuple[str, int, int]]:
    """A unit that fits in one chunk: its stripped text and 1-based span (none if blank)."""
    # chunk_prose would give the same for a unit within max_chars, at several
    # times the cost, which matters for files of many small sections.
    body = unit.strip()
    if not body:
        return []
    first = line + 1 + unit.count("\n", 0, len(unit) - len(unit.lstrip()))
    return [(body, first, first + body.count("\n"))]


def _spans(pieces: list[ChunkDraft]) -> list[tuple[str, int, int]]:
    return [(piece.text, piece.start, piece.end) for piece in pieces]


def _context(path: str, headings: tuple[str, ...]) -> str:
    return SEPARATOR.join(part for part in (path, *headings) if part)


def _title(raw: str) -> str:
    return raw.strip()[:TITLE_CHARS]


# --- sections and merging ------------------------------------------------------


def _sections(text: str, headings: list[_Heading]) -> list[_Section]:
    """The preamble (if any) and one section per heading, with its heading path."""
    sections: list[_Section] = []
    first = headings[0].pos if headings else len(text)
    if text[:first].strip():
        sections.append(_Section(0, first, 0, 0, 0, ()))
    if not headings:
        return sections
    stack: list[tuple[int, tuple[str, ...]]] = []  # (level, heading path) of the open headings
    ends = [heading.pos for heading in headings[1:]] + [len(text)]
    for heading, end in zip(headings, ends, strict=True):
        while stack and stack[-1][0] >= heading.level:
            stack.pop()
        path = (*stack[-1][1], heading.title) if stack else (heading.title,)
        stack.append((heading.level, path))
        sections.append(_Section(heading.pos, end, heading.line, heading.body, heading.level, path))
    return sections


def _groups(
    sections: list[_Section], text: str, max_chars: int, min_chars: int
) -> Iterator[tuple[_Section, int]]:
    """Runs of sections to chunk together: each run's first section and end offset.

    A section whose body (the text under its heading) is shorter than
    ``min_chars`` takes in the sections after it while they are at its level
    or deeper (its subsections, its later siblings and theirs) and the lines
    taken stay within ``max_chars``. A shallower heading ends the run: that
    is a different topic. The preamble is never merged. The run is cited by
    all of its lines and carries the first section's heading path.
    """
    index = 0
    while index < len(sections):
        first = sections[index]
        end, index = first.end, index + 1
        if first.level and len(text[first.body : first.end].strip()) < min_chars:
            while (
                index < len(sections)
                and sections[index].level >= first.level
                and sections[index].end - first.pos <= max_chars
            ):
                end, index = sections[index].end, index + 1
        yield first, end


# --- Markdown ------------------------------------------------------------------


class _MarkdownScanner:
    """ATX and setext headings of a Markdown text.

    Fenced code, raw HTML blocks (``<pre>``, ``<script>``, comments, …) and
    front matter hold no headings.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.headings: list[_Heading] = []
        self.fence: tuple[str, int] | None = None  # the open fence's character and length
        self.block_end = -1  # last line of the last heading, fence, HTML block or front matter
        self.skip_to = 0  # the end of a raw HTML block: nothing before it is a heading
        self.line = 0
        self.scanned = 0

    def scan(self) -> list[_Heading]:
        start = self._front_matter_end()
        for match in _MD_CANDIDATE.finditer(self.text, start):
            self.line += self.text.count("\n", self.scanned, match.start())
            self.scanned = match.start()
            if match.start() >= self.skip_to:
                self._candidate(match.start(), _line_end(self.text, match.start()))
        return self.headings

    def _front_matter_end(self) -> int:
        """Where scanning starts: after a YAML (``---``) or TOML (``+++``) block at the top.

        The block must close, and start with content rather than a blank line:
        a file that merely opens with a rule should keep its headings.
        """
        opened = _MD_FRONT_OPEN.match(self.text)
        if not opened or self.text[opened.end() : opened.end() + 1] in ("\n", ""):
            return 0
        closers = r"(?:---|\.\.\.)" if opened.group(1) == "---" else r"\+\+\+"
        closed = re.compile(rf"^{closers}[ \t]*$", re.M).search(self.text, opened.end())
        if not closed:
            return 0
        self.line = self.block_end = self.text.count("\n", 0, closed.start())
        self.scanned = closed.start()
        return closed.end()

    def _candidate(self, pos: int, end: int) -> None:
        line = self.text[pos:end]
        stripped = line.lstrip(" ")
        if self.fence is not None:
            if _closes_fence(stripped, self.fence):
                self.fence, self.block_end = None, self.line
        elif stripped[:3] in ("```", "~~~"):
            self._open_fence(stripped)
        elif stripped.startswith("#"):
            self._atx(pos, end, stripped)
        elif stripped.startswith("<"):
            self._html_block(pos, stripped)
        else:
            self._setext(pos, end, stripped)

    def _open_fence(self, stripped: str) -> None:
        char = stripped[0]
        length = len(stripped) - len(stripped.lstrip(char))
        # A backtick "fence" whose info string holds a backtick is inline code.
        if char == "`" and "`" in stripped[length:]:
            return
        self.fence = (char, length)

    def _html_block(self, pos: int, stripped: str) -> None:
        """Skip to the line that closes the block (unclosed: the end of the text, as CommonMark)."""
        closer = _MD_COMMENT_END if stripped.startswith("<!--") else _MD_RAW_HTML_END
        found = closer.search(self.text, pos + 2)
        self.skip_to = _line_end(self.text, found.end()) if found else len(self.text)
        self.block_end = self.line + self.text.count("\n", pos, self.skip_to)

    def _atx(self, pos: int, end: int, stripped: str) -> None:
        hashes = len(stripped) - len(stripped.lstrip("#"))
        title = stripped[hashes:].strip()
        closing = title.rstrip("#")
        # A closing run of #s counts only after whitespace ("# C#" keeps its #).
        if not closing or closing[-1] in " \t":
            title = closing.rstrip()
        self._add(pos, self.line, end, hashes, title)

    def _setext(self, pos: int, end: int, stripped: str) -> None:
        """An ``===``/``---`` line under a one-line paragraph makes that line a heading.

        The paragraph must be one line (after a blank line, a heading, a
        rule, a fence or the front matter); longer paragraphs keep their lines.
        """
        title_line = self.line - 1
        if title_line <= self.block_end:
            return
        title_pos = _line_start(self.text, pos - 1)
        title = self.text[title_pos : pos - 1]
        if _md_paragraph_line(title) and self._after_block(title_pos, title_line):
            self._add(title_pos, title_line, end, 1 if stripped[0] == "=" else 2, title)

    def _after_block(self, pos: int, line: int) -> bool:
        """Whether the line at ``pos`` starts a paragraph: nothing or the end of a block is above it."""
        if pos == 0 or line - 1 == self.block_end:
            return True
        before = self.text[_line_start(self.text, pos - 1) : pos - 1]
        return not before.strip() or _MD_THEMATIC_BREAK.fullmatch(before) is not None

    def _add(self, pos: int, line: int, end: int, level: int, title: str) -> None:
        self.headings.append(_Heading(pos, line, min(end + 1, len(self.text)), level, _title(title)))
        self.block_end = self.line


class Heading(NamedTuple):
    """A heading as a reader sees it: its 1-based line, level and title."""

    line: int
    level: int
    title: str


def headings(text: str, fmt: str) -> list[Heading]:
    """The headings of Markdown (``"md"``) or reStructuredText (``"rst"``) text,
    by the same scan that cuts its sections."""
    found = _rst_headings(text) if fmt == "rst" else _md_headings(text)
    return [Heading(h.line + 1, h.level, h.title) for h in found]


def _md_headings(text: str) -> list[_Heading]:
    return _MarkdownScanner(text).scan()


def _closes_fence(stripped: str, fence: tuple[str, int]) -> bool:
    char, length = fence
    run = len(stripped) - len(stripped.lstrip(char))
    return run >= length and not stripped[run:].strip()


def _md_paragraph_line(line: str) -> bool:
    """Whether ``line`` can be a setext heading's text: plain paragraph text."""
    if not line.strip() or len(line) - len(line.lstrip(" ")) > 3 or line.startswith("\t"):
        return False
    return not _MD_BLOCK_START.match(line) and not _MD_THEMATIC_BREAK.fullmatch(line)


# --- reStructuredText ----------------------------------------------------------


class _RstScanner:
    """Section titles of a reStructuredText text, with levels as docutils assigns them.

    A title is a line underlined, or over- and underlined, by one repeated
    punctuation character at least as long as the title (or at least four
    long). It starts a block: it follows a blank line, another title or the
    start of the text, and an underlined title sits at the left margin, so
    indented literal blocks and directive bodies hold no titles. Each (character,
    overlined?) style gets the next level the first time it appears.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.headings: list[_Heading] = []
        self.styles: dict[tuple[str, bool], int] = {}
        self.title_end = -1  # last line of the last title: a title may follow it directly
        self.line = 0
        self.scanned = 0

    def scan(self) -> list[_Heading]:
        for match in _RST_ADORNMENT.finditer(self.text):
            self.line += self.text.count("\n", self.scanned, match.start())
            self.scanned = match.start()
            adornment = match.group().rstrip()
            if not self._underline(match.start(), match.end(), adornment):
                self._overline(match.start(), match.end(), adornment)
        return self.headings

    def _underline(self, pos: int, end: int, adornment: str) -> bool:
        """A title line at the left margin directly above ``adornment``."""
        if self.line == 0:
            return False
        title_pos = _line_start(self.text, pos - 1)
        title = self.text[title_pos : pos - 1].rstrip()
        if not _rst_title_text(title, adornment) or title[0].isspace():
            return False
        if not self._starts_block(title_pos, self.line - 1):
            return False
        self._add(title_pos, self.line - 1, end, (adornment[0], False), title)
        return True

    def _overline(self, pos: int, end: int, adornment: str) -> None:
        """``adornment``, a title line (it may be inset) and the same adornment again."""
        title_end = _line_end(self.text, end + 1)
        under_end = _line_end(self.text, title_end + 1)
        title = self.text[end + 1 : title_end]
        if not _rst_title_text(title.strip(), adornment) or not self._starts_block(pos, self.line):
            return
        if self.text[title_end + 1 : under_end].rstrip() == adornment:
            self._add(pos, self.line, under_end, (adornment[0], True), title)

    def _starts_block(self, pos: int, line: int) -> bool:
        """A title begins a block: after a blank line, another title or nothing."""
        if pos == 0 or line - 1 == self.title_end:
            return True
        return not self.text[_line_start(self.text, pos - 1) : pos - 1].strip()

    def _add(self, pos: int, line: int, end: int, style: tuple[str, bool], title: str) -> None:
        level = self.styles.setdefault(style, len(self.styles) + 1)
        self.headings.append(_Heading(pos, line, min(end + 1, len(self.text)), level, _title(title)))
        self.title_end = line + (2 if style[1] else 1)


def _rst_headings(text: str) -> list[_Heading]:
    return _RstScanner(text).scan()


def _rst_title_text(title: str, adornment: str) -> bool:
    """Whether ``title`` can be the text of a title adorned by ``adornment``.

    The adornment must be as long as the title, except that docutils accepts
    (with a warning) a shorter one of four characters or more.
    """
    if not title.strip() or len(title.strip()) > len(adornment) < 4:
        return False
    return not _RST_ADORNMENT.match(title) and not _RST_NOT_TITLE.match(title)


# --- plain text ----------------------------------------------------------------


def _paragraph_groups(text: str, max_chars: int) -> Iterator[tuple[int, int, int]]:
    """Runs of whole paragraphs within ``max_chars``: start offset, end offset, first line.

    A paragraph longer than ``max_chars`` is a run of its own (and is
    windowed by the caller).
    """
    group: tuple[int, int, int] | None = None
    line, counted = 0, 0
    for start, end in _paragraphs(text):
        line += text.count("\n", counted, start)
        counted = start
        if group and end - group[0] <= max_chars:
            group = (group[0], end, group[2])
            continue
        if group:
            yield group
        group = (start, end, line)
    if group:
        yield group


def _paragraphs(text: str) -> Iterator[tuple[int, int]]:
    """Offsets of the non-blank stretches between blank lines, each starting at a line start."""
    # Matching the separators, not the paragraphs, keeps the regular
    # expression from looping once per line of a long paragraph.
    start = 0
    for blank in _BLANK_LINES.finditer(text):
        if text[start : blank.start()].strip():
            yield start, blank.start()
        start = blank.end()
    if text[start:].strip():
        yield start, len(text)


# --- lines ---------------------------------------------------------------------


def _line_start(text: str, pos: int) -> int:
    """Offset of the start of the line holding ``pos``."""
    return text.rfind("\n", 0, pos) + 1


def _line_end(text: str, pos: int) -> int:
    """Offset of the newline ending the line that starts at ``pos`` (or the text's end)."""
    end = text.find("\n", pos)
    return len(text) if end == -1 else end
