"""Raw text representations (spec §7.4 A, and the PDF text layer for §7.4 B).

Pure functions from a document's bytes to normalized UTF-8 text. Documents
that need an external provider (OCR, speech-to-text) raise
:class:`NeedsProvider` so the caller can route them; everything else that
cannot be read raises :class:`~kernel.errors.Dir2mcpError`.
"""

from __future__ import annotations

import codecs
import io
import zlib
from typing import TYPE_CHECKING, NamedTuple

import charset_normalizer
import html2text

from corpus.ingest.classify import GZIP_MAGIC
from corpus.ingest.extracted import PAGE_SEPARATOR, RAW_TEXT, Extracted, NeedsProvider, Page
from corpus.ingest.office import extract_office
from kernel import errors
from kernel.jsontypes import JsonObject

if TYPE_CHECKING:
    from pypdf import PdfReader

# Text-layer extraction is slow on huge or hostile files; past this many
# pages the rest is left to OCR or simply not indexed.
MAX_PDF_PAGES = 2000
# Fewer non-whitespace characters than this and a page is treated as a scan
# (page numbers and stray marks survive on otherwise image-only pages).
MIN_PAGE_TEXT_CHARS = 4


class ByteOrderMark(NamedTuple):
    mark: bytes
    #: the codec of the bytes after the mark
    codec: str
    #: the codec that reads the mark itself: what indexing decodes with and records
    reader: str


#: Byte-order marks, the longest first (a UTF-32 LE mark starts with UTF-16 LE's).
BYTE_ORDER_MARKS = (
    ByteOrderMark(codecs.BOM_UTF32_LE, "utf-32-le", "utf-32"),
    ByteOrderMark(codecs.BOM_UTF32_BE, "utf-32-be", "utf-32"),
    ByteOrderMark(codecs.BOM_UTF8, "utf-8", "utf-8-sig"),
    ByteOrderMark(codecs.BOM_UTF16_LE, "utf-16-le", "utf-16"),
    ByteOrderMark(codecs.BOM_UTF16_BE, "utf-16-be", "utf-16"),
)


def byte_order_mark(data: bytes) -> ByteOrderMark | None:
    """The mark ``data`` starts with, or None."""
    return next((bom for bom in BYTE_ORDER_MARKS if data.startswith(bom.mark)), None)


_WESTERN_DEFAULT = "cp1252"


def _normalize(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")


def _decode_counting(data: bytes, encoding: str) -> tuple[str, int]:
    """Decode with replacement characters, returning how many bytes were replaced."""
    text = data.decode(encoding, errors="replace")
    replaced = text.count("\ufffd") - data.decode(encoding, errors="ignore").count("\ufffd")
    return text, replaced


def _mostly_utf8(data: bytes) -> tuple[str, int] | None:
    """UTF-8 text with a few stray bytes stays UTF-8; a legacy guess would garble the rest."""
    text, replaced = _decode_counting(data, "utf-8")
    non_ascii = len(text) - len(text.encode("ascii", errors="ignore"))
    valid_non_ascii = non_ascii - text.count("\ufffd")
    return (text, replaced) if valid_non_ascii >= replaced else None


def _guess_legacy(data: bytes) -> tuple[str, str] | None:
    matches = list(charset_normalizer.from_bytes(data))
    if not matches:
        return None
    best = matches[0]
    # Short Western text fits many single-byte code pages equally well; the
    # guesser then picks an arbitrary one, so prefer the common default.
    for match in matches:
        if match.chaos <= best.chaos and _WESTERN_DEFAULT in match.could_be_from_charset:
            return _decode_counting(data, _WESTERN_DEFAULT)[0], _WESTERN_DEFAULT
    return str(best), best.encoding


def decode_text(data: bytes) -> tuple[str, JsonObject]:
    """Decode bytes of unknown encoding to normalized text, with meta describing how."""
    bom = byte_order_mark(data)
    if bom is not None:
        text, replaced = _decode_counting(data, bom.reader)
        return _normalize(text), _meta(bom.reader, replaced)
    try:
        return _normalize(data.decode("utf-8")), {}
    except UnicodeDecodeError:
        pass
    mostly = _mostly_utf8(data)
    if mostly is not None:
        return _normalize(mostly[0]), _meta("utf-8", mostly[1])
    guessed = _guess_legacy(data)
    if guessed is not None:
        return _normalize(guessed[0]), _meta(guessed[1], 0)
    text, replaced = _decode_counting(data, "utf-8")
    return _normalize(text), _meta("utf-8", replaced)


def _meta(encoding: str, replaced: int) -> JsonObject:
    meta: JsonObject = {} if encoding == "utf-8" else {"encoding": encoding}
    if replaced:
        meta["replaced_bytes"] = replaced
    return meta


def html_to_text(html: str) -> str:
    """Readable markdown-ish text from HTML; ``<script>``, ``<style>`` and ``<head>`` are dropped."""
    converter = html2text.HTML2Text()
    converter.body_width = 0
    converter.images_to_alt = True
    converter.unicode_snob = True
    return _normalize(converter.handle(html)).strip()


def _failed(message: str, exc: BaseException | None = None) -> errors.Dir2mcpError:
    detail = f": {type(exc).__name__}: {exc}" if exc is not None else ""
    return errors.Dir2mcpError(errors.EXTRACT_FAILED, f"{message}{detail}"[:500])


def _open_pdf(data: bytes) -> PdfReader:
    # imported on the first PDF: 0.11 CPU-s that every process (up, its indexer, each command) paid at start
    from pypdf import PasswordType, PdfReader

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
            raise _failed("the PDF is encrypted and needs a password")
        len(reader.pages)
    except errors.Dir2mcpError:
        raise
    # pypdf raises a wide and version-dependent set of exceptions (and
    # RecursionError on cyclic page trees) for broken files.
    except Exception as exc:
        raise _failed("not a readable PDF", exc) from None
    return reader


def _page_text(reader: PdfReader, index: int) -> str | None:
    try:
        text = reader.pages[index].extract_text() or ""
    except Exception:
        return None
    return _normalize(text).replace(PAGE_SEPARATOR, "\n").strip()


def extract_pdf_text(data: bytes) -> Extracted:
    """The PDF's text layer, page by page.

    Raises :class:`NeedsProvider` (``"ocr"``) when no page has text, and
    ``EXTRACT_FAILED`` for unreadable or password-protected files. PDFs that
    open with the empty user password (owner-password-only restrictions) are
    extracted normally.
    """
    reader = _open_pdf(data)
    total = len(reader.pages)
    pages: list[Page] = []
    without_text: list[int] = []
    failed: list[int] = []
    for index in range(min(total, MAX_PDF_PAGES)):
        text = _page_text(reader, index)
        if text is None:
            failed.append(index + 1)
            text = ""
        if sum(1 for ch in text if not ch.isspace()) < MIN_PAGE_TEXT_CHARS:
            without_text.append(index + 1)
        pages.append(Page(number=index + 1, text=text))
    if len(without_text) == len(pages):
        raise NeedsProvider("ocr")
    meta: JsonObject = {"source": "pdf_text_layer", "pages": total, "pages_without_text": without_text}
    if failed:
        meta["pages_failed"] = failed
    if total > MAX_PDF_PAGES:
        meta["pages_processed"] = MAX_PDF_PAGES
    joined = PAGE_SEPARATOR.join(page.text for page in pages)
    return Extracted(rep_type=RAW_TEXT, text=joined, pages=tuple(pages), meta=meta)


def _extract_html(data: bytes) -> Extracted:
    html, meta = decode_text(data)
    try:
        text = html_to_text(html)
    except Exception as exc:
        raise _failed("could not convert HTML to text", exc) from None
    return Extracted(rep_type=RAW_TEXT, text=text, meta={**meta, "converted_from": "html"})


# Plain gzip files (spec §7.3 lists archives; a lone ``.gz`` such as
# /usr/share/doc/*/changelog.Debian.gz holds one file): read in blocks, as
# archive members are (corpus/ingest/archives.py), so a bomb stops early.
_GZIP_BLOCK = 64 * 1024
#: a small file may compress very well; the ratio only counts past this
GZIP_RATIO_GRACE_BYTES = 1 * 2**20


def gunzip_bounded(data: bytes, *, max_bytes: int, max_ratio: float) -> bytes:
    """What the gzip stream ``data`` holds (every member of a concatenated one),
    never more than ``max_bytes`` + one block in memory.

    Raises ``FILE_TOO_LARGE`` past ``max_bytes``, ``ARCHIVE_REJECTED`` when the
    output grows past ``max_ratio`` times the input (a gzip bomb), and
    ``EXTRACT_FAILED`` for corrupt or truncated data.
    """
    out: list[bytes] = []
    size = consumed = 0
    rest = data
    try:
        while rest:
            stream = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            pending = rest
            while not stream.eof:
                piece = stream.decompress(pending, _GZIP_BLOCK)
                consumed += len(pending) - len(stream.unconsumed_tail) - len(stream.unused_data)
                pending = stream.unconsumed_tail
                size += len(piece)
                # Against what was read so far: a bomb is caught a megabyte in.
                if size > GZIP_RATIO_GRACE_BYTES and size / max(consumed, 1) > max_ratio:
                    raise errors.Dir2mcpError(
                        errors.ARCHIVE_REJECTED,
                        f"compression ratio exceeds {max_ratio:g} (a gzip bomb?); not decompressed further",
                    )
                if size > max_bytes:
                    raise errors.Dir2mcpError(
                        errors.FILE_TOO_LARGE, f"decompressed content exceeds {max_bytes} bytes"
                    )
                out.append(piece)
                if not piece and not pending and not stream.eof:
                    raise _failed("truncated gzip data")
            rest = stream.unused_data
            if not rest.startswith(GZIP_MAGIC):
                break  # trailing padding after the last member, as gzip(1) allows
    except zlib.error as exc:
        raise _failed("corrupt gzip data", exc) from None
    return b"".join(out)


_DECODED_TYPES = frozenset({"code", "text", "md", "data"})
_PROVIDER_FOR = {"image": "ocr", "audio": "stt"}


def extract(doc_type: str, name: str, data: bytes) -> Extracted:
    """The ``raw_text`` representation of a document of ``doc_type``."""
    if doc_type in _DECODED_TYPES:
        text, meta = decode_text(data)
        return Extracted(rep_type=RAW_TEXT, text=text, meta=meta)
    if doc_type == "html":
        return _extract_html(data)
    if doc_type == "pdf":
        return extract_pdf_text(data)
    if doc_type == "office":
        return extract_office(name, data)
    if doc_type in _PROVIDER_FOR:
        raise NeedsProvider(_PROVIDER_FOR[doc_type])
    raise errors.Dir2mcpError(
        errors.DOC_TYPE_UNSUPPORTED, f"{name}: documents of type '{doc_type}' have no text representation"
    )
