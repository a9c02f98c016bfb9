"""What extraction yields: a document's text, its pages or timed segments.

The types every extractor shares (:mod:`corpus.ingest.extract` for plain
text, HTML and PDF, :mod:`corpus.ingest.office`, transcripts), below them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernel.jsontypes import JsonObject

RAW_TEXT = "raw_text"
PAGE_SEPARATOR = "\f"


@dataclass(frozen=True)
class Page:
    number: int
    text: str
    # A human pointer ("slide 7", "sheet 'Q2'") where a page number alone is not one.
    label: str | None = None


@dataclass(frozen=True)
class Segment:
    """A timed stretch of a transcript, in milliseconds."""

    start_ms: int
    end_ms: int
    text: str


@dataclass(frozen=True)
class Extracted:
    """A document's text; for PDFs ``text`` is the pages joined with form feeds."""

    rep_type: str
    text: str
    pages: tuple[Page, ...] | None = None
    meta: JsonObject = field(default_factory=dict)
    #: transcripts with timestamps: chunked into time windows
    segments: tuple[Segment, ...] | None = None


class NeedsProvider(Exception):
    """The document has no text without an external provider (``"ocr"`` or ``"stt"``)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"document needs the {what} provider")
        self.what = what
