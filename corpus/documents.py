"""Live documents as a client browses them: listed in a stable order, read whole.

The MCP resources (``mcp_gateway/resources.py``) and their REST mirror serve
from here; a slice of a document is ``open_file``'s (``corpus/files.py``).

A listing leaves out what no reader may see: documents skipped because their
content matched a secret pattern, and paths the exclusion rules cover now
(rules change after a file was indexed). A whole read opens the file through
the one resolver (:func:`corpus.files.read_settled`, so
:meth:`ExclusionEngine.open`: outside the root, excluded, missing), refuses a
secret-bearing document as ``open_file`` does, and screens everything it
returns for secrets. What it returns:

* PDFs and scans: the indexed page text, each page under ``--- page N ---``;
* recordings: the transcript, each timed piece under ``[mm:ss-mm:ss]``
  (the windows citations name);
* converted formats (HTML, Office, archive members): the indexed text;
* text files: the file as it is now;
* anything else: its bytes, up to :data:`MAX_BYTES`.
"""

from __future__ import annotations

import mimetypes
from dataclasses import dataclass

from django.db.models import QuerySet

from corpus import containers, files
from corpus.citations import format_ms
from corpus.ingest.classify import classify
from corpus.ingest.extracted import PAGE_SEPARATOR
from corpus.models import DocStatus, Document, Representation, RepType
from corpus.security import ARCHIVE_SEPARATOR, ExclusionEngine, OpenedFile
from kernel import errors

#: Documents per page of a listing.
PAGE_SIZE = 100
#: The most a whole read returns: a file's bytes, or the UTF-8 of its text.
MAX_BYTES = 1024 * 1024
_BATCH = 500
_TEXTUAL = frozenset({"code", "text", "md", "data", "html"})
_TEXT_MIME = {"md": "text/markdown", "html": "text/html"}
# Python's built-in table only: the system's mime.types differs by machine.
_MIME = mimetypes.MimeTypes(filenames=())
_FIELDS = ("rel_path", "doc_type", "size_bytes", "mtime_unix")


@dataclass(frozen=True)
class Listed:
    """One live document of a listing."""

    rel_path: str
    doc_type: str
    size_bytes: int
    mtime_unix: int

    @property
    def name(self) -> str:
        return self.rel_path.rsplit("/", 1)[-1]

    @property
    def mime_type(self) -> str:
        return mime_type(self.rel_path, self.doc_type)


@dataclass(frozen=True)
class Whole:
    """A whole document: ``text``, or the file's bytes in ``data``."""

    rel_path: str
    mime_type: str
    text: str | None = None
    data: bytes | None = None
    #: ``text`` is read by lines (a line slice of it is the same lines), not by pages or times
    lines: bool = True


def mime_type(rel_path: str, doc_type: str) -> str:
    """The file's own media type (its extension's), else its doc type's."""
    guessed, _ = _MIME.guess_type(rel_path.rsplit("/", 1)[-1], strict=False)
    if doc_type not in _TEXTUAL:
        return guessed or "application/octet-stream"
    if guessed and (guessed.startswith("text/") or guessed in ("application/json", "application/xml")):
        return guessed
    return _TEXT_MIME.get(doc_type, "text/plain")


# -- listing ---------------------------------------------------------------------


def _readable() -> QuerySet[Document]:
    """Live documents by rel_path, without those refused for a secret."""
    return files.listable_documents().order_by("rel_path")


def live_page(
    engine: ExclusionEngine, *, after: str = "", limit: int = PAGE_SIZE
) -> tuple[list[Listed], bool]:
    """Up to ``limit`` readable live documents whose rel_path sorts after
    ``after``, and whether more follow. Keyed by path, not by offset, so a
    page stays right while documents come and go."""
    page: list[Listed] = []
    with engine.pinned():
        while True:
            rows = list(_readable().filter(rel_path__gt=after).values_list(*_FIELDS)[:_BATCH])
            for row in files.primed(engine, rows):
                if engine.listed_reason(row[0]) is not None:
                    continue
                if len(page) == limit:
                    return page, True
                page.append(Listed(*row))
            if len(rows) < _BATCH:
                return page, False
            after = rows[-1][0]


# -- reading ---------------------------------------------------------------------


def read_whole(engine: ExclusionEngine, rel_path: str) -> Whole:
    """The whole of ``rel_path`` (see the module's docstring); Dir2mcpError
    with ``open_file``'s codes when it may not or cannot be served."""
    try:
        return files.read_settled(engine, rel_path, lambda opened: _whole(engine, opened.rel, opened))
    except files.Unsettled as unsettled:  # still changing: what the index holds
        return _whole(engine, unsettled.rel, None)


def _whole(engine: ExclusionEngine, rel: str, opened: OpenedFile | None) -> Whole:
    doc, reps = files.live_document(rel)
    text = _extracted(rel, reps)
    if text is None:
        return _from_file(engine, rel, doc, reps.get(RepType.RAW_TEXT), opened)
    _check_size(rel, len(text.encode("utf-8")), "read it by page or time range (a slice URI)")
    files.screen(engine, rel, text)
    marked = RepType.OCR_MARKDOWN in reps or RepType.TRANSCRIPT in reps or text.startswith("--- page 1 ---\n")
    return Whole(rel, "text/plain", text=text, lines=not marked)


def _extracted(rel: str, reps: dict[str, Representation]) -> str | None:
    """The indexed text, marked by page or time, when the file itself is not text."""
    ocr, raw, transcript = (
        reps.get(RepType.OCR_MARKDOWN),
        reps.get(RepType.RAW_TEXT),
        reps.get(RepType.TRANSCRIPT),
    )
    paged = ocr or (raw if raw is not None and "pages" in (raw.meta_json or {}) else None)
    if paged is not None:
        pages = paged.text.split(PAGE_SEPARATOR)
        return "\n\n".join(f"--- page {n} ---\n{page.strip()}" for n, page in enumerate(pages, 1))
    if transcript is not None:
        pieces = files.timed_pieces(transcript)
        if not pieces:  # a transcript without timestamps
            return transcript.text
        return "\n".join(f"[{format_ms(start)}-{format_ms(end)}] {text}" for start, end, text in pieces)
    if raw is not None and ((raw.meta_json or {}).get("converted_from") or ARCHIVE_SEPARATOR in rel):
        return raw.text
    if ARCHIVE_SEPARATOR in rel:
        raise errors.Dir2mcpError(errors.FILE_NOT_FOUND, f"{rel} is not indexed")
    return None


def _from_file(
    engine: ExclusionEngine,
    rel: str,
    doc: Document | None,
    raw: Representation | None,
    opened: OpenedFile | None,
) -> Whole:
    """The file's text or bytes as they are now (the indexed text when it kept changing)."""
    doc_type = doc.doc_type if doc is not None else "unknown"
    if opened is None:
        if raw is None or doc_type not in _TEXTUAL:
            raise errors.Dir2mcpError(
                errors.INDEX_NOT_READY,
                f"{rel} changed each time it was read and has no indexed text; try again",
            )
        files.screen(engine, rel, raw.text)
        return Whole(rel, mime_type(rel, doc_type), text=raw.text)
    hint = "read a slice (?lines=A-B)" if doc_type in _TEXTUAL else "it is not served whole"
    _check_size(rel, opened.st.st_size, hint)
    data = opened.read(MAX_BYTES + 1)
    _check_size(rel, len(data), hint)
    sniffed = classify(rel.rsplit("/", 1)[-1], data[:8192])
    if doc is None or doc.status == DocStatus.ERROR:  # no type the index trusts: the bytes say
        doc_type = sniffed
    for kind in (doc_type, sniffed):
        files.refuse_archive_bytes(rel, kind, data[:8192])
    if doc_type in _TEXTUAL and sniffed in _TEXTUAL:
        text = files.decode_text(data, (raw.meta_json or {}).get("encoding") if raw is not None else None)
        text = files.redacted_text(engine, rel, text)
        files.screen(engine, rel, text)
        return Whole(rel, mime_type(rel, doc_type), text=text)
    files.screen(engine, rel, data.decode("latin-1"))  # a key stored in a binary file is still a key
    containers.screen_zip_parts(engine, opened)  # and one in a compressed part of a .docx
    return Whole(rel, mime_type(rel, doc_type), data=data)


def _check_size(rel: str, size: int, hint: str) -> None:
    if size > MAX_BYTES:
        raise errors.Dir2mcpError(
            errors.FILE_TOO_LARGE, f"{rel} is over the {MAX_BYTES}-byte limit of a whole read; {hint}"
        )
