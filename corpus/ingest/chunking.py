"""Chunking (spec §7.5): line windows for code, character windows for prose, pages, time windows.

Every chunk carries the span a citation needs. For ``lines`` spans,
``"\\n".join(text.split("\\n")[start - 1 : end])`` contains the chunk's text
(and equals it for code windows).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from corpus.ingest.extracted import Page, Segment
from kernel.jsontypes import JsonObject

LINES = "lines"
PAGE = "page"
TIME = "time"
# Embedding models take about 8k tokens; a line window longer than this
# (minified or generated code) could not be embedded whole, so such files are
# chunked as prose instead, which still cites line ranges.
MAX_CODE_CHUNK_CHARS = 32_000


@dataclass(frozen=True)
class ChunkDraft:
    """A chunk before it is stored: its text and the span it came from."""

    ordinal: int
    text: str
    span_kind: str
    start: int
    end: int
    extra: JsonObject | None = None
    #: what the unit sits in (path, enclosing definitions or headings, a long
    #: definition's signature): indexed and embedded with ``text``, never
    #: shown as the file's text
    context: str = ""


def chunk_code(text: str, *, max_lines: int = 200, overlap_lines: int = 30) -> list[ChunkDraft]:
    """Windows of ``max_lines`` lines, each overlapping the previous by ``overlap_lines``."""
    if max_lines < 1:
        raise ValueError("max_lines must be at least 1")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    step = max_lines - min(max(overlap_lines, 0), max_lines - 1)
    drafts: list[ChunkDraft] = []
    start = 0
    while start < len(lines):
        end = min(start + max_lines, len(lines))
        window = "\n".join(lines[start:end])
        if window.strip():
            drafts.append(ChunkDraft(len(drafts), window, LINES, start + 1, end))
        if end == len(lines):
            break
        start += step
    return drafts


class _LineCursor:
    """1-based line numbers for increasing offsets, counting each newline once."""

    def __init__(self, text: str, first_line: int) -> None:
        self._text = text
        self._pos = 0
        self._line = first_line

    def line_at(self, pos: int) -> int:
        self._line += self._text.count("\n", self._pos, pos)
        self._pos = pos
        return self._line


def _break_point(text: str, start: int, limit: int) -> int:
    """Where a window from ``start`` should end: after a blank line, a newline or a space."""
    # Breaking in the first half would make many small chunks from text
    # whose only separators come early.
    lowest = start + max((limit - start) // 2, 1)
    for separator in ("\n\n", "\n"):
        found = text.rfind(separator, lowest, limit)
        if found != -1:
            return found + len(separator)
    found = max(text.rfind(" ", lowest, limit), text.rfind("\t", lowest, limit))
    return found + 1 if found != -1 else limit


def _next_start(text: str, start: int, end: int, overlap: int) -> int:
    """Back up about ``overlap`` characters from ``end``, to the start of a line or word."""
    overlap = min(overlap, (end - start) // 2)
    if overlap <= 0:
        return end
    begin = end - overlap
    for separator in ("\n", " "):
        found = text.find(separator, begin, end)
        if found != -1 and found + 1 < end:
            return found + 1
    return begin


def _windows(text: str, max_chars: int, overlap_chars: int, min_chars: int) -> Iterator[tuple[int, int]]:
    start, length = 0, len(text)
    while start < length:
        end = length
        if length - start > max_chars:
            end = _break_point(text, start, start + max_chars)
            if length - end < min_chars:
                end = length
        yield start, end
        if end == length:
            return
        start = _next_start(text, start, end, overlap_chars)


def chunk_prose(
    text: str,
    *,
    max_chars: int = 2500,
    overlap_chars: int = 250,
    min_chars: int = 200,
    line_offset: int = 0,
) -> list[ChunkDraft]:
    """Character windows of at most ``max_chars`` (plus a merged tail under ``min_chars``).

    Windows prefer to end after a blank line, then a newline, then whitespace,
    and overlap by about ``overlap_chars``. Spans are the lines of ``text``
    (shifted by ``line_offset``) that the stripped chunk covers. Linear in
    ``len(text)``.
    """
    if max_chars < 1:
        raise ValueError("max_chars must be at least 1")
    first_lines = _LineCursor(text, line_offset + 1)
    last_lines = _LineCursor(text, line_offset + 1)
    drafts: list[ChunkDraft] = []
    for start, end in _windows(text, max_chars, overlap_chars, min_chars):
        window = text[start:end]
        body = window.strip()
        if not body:
            continue
        body_start = start + len(window) - len(window.lstrip())
        first = first_lines.line_at(body_start)
        last = last_lines.line_at(body_start + len(body))
        drafts.append(ChunkDraft(len(drafts), body, LINES, first, last))
    return drafts


def chunk_pages(
    pages: Sequence[Page], *, max_chars: int = 2500, overlap_chars: int = 250, min_chars: int = 200
) -> list[ChunkDraft]:
    """Chunk each page on its own; every chunk's span is its page."""
    drafts: list[ChunkDraft] = []
    for page in pages:
        for piece in chunk_prose(
            page.text, max_chars=max_chars, overlap_chars=overlap_chars, min_chars=min_chars
        ):
            extra = {"label": page.label} if page.label else None
            drafts.append(ChunkDraft(len(drafts), piece.text, PAGE, page.number, page.number, extra))
    return drafts


def chunk_segments(segments: Sequence[Segment], *, segment_ms: int, overlap_ms: int) -> list[ChunkDraft]:
    """Time windows of whole segments, about ``segment_ms`` long, overlapping by ``overlap_ms``.

    A window takes segments while they end within ``segment_ms`` of its
    start (always at least one); the next starts at the first segment that
    begins at or after the window's end minus ``overlap_ms``, and always
    moves forward.
    """
    drafts: list[ChunkDraft] = []
    first = 0
    while first < len(segments):
        window_start = segments[first].start_ms
        last = first
        while last + 1 < len(segments) and segments[last + 1].end_ms - window_start <= segment_ms:
            last += 1
        taken = segments[first : last + 1]
        text = "\n".join(s.text for s in taken)
        drafts.append(ChunkDraft(len(drafts), text, TIME, taken[0].start_ms, max(s.end_ms for s in taken)))
        if last + 1 >= len(segments):
            break
        resume = segments[last].end_ms - overlap_ms
        following = first + 1
        while following <= last and segments[following].start_ms < resume:
            following += 1
        first = following
    return drafts
