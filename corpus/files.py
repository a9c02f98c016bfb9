"""File tools: ``open_file`` (§15.4), ``list_files`` (§15.5) and ``find``.

``open_file`` reads exactly what a search hit cited: lines of the file (or of
the stored text for converted formats such as HTML, whose chunk spans count
lines of that text), a page of the stored page-joined text, or a time range
of a transcript. ``find`` scans the stored representations, so its line
numbers are the ones ``open_file`` returns. Every path goes through
:meth:`ExclusionEngine.resolve` and every returned text through
:meth:`ExclusionEngine.find_secret` (§17).

Files change while they are read (an editor saving in place, a build, the
watcher's own churn). :func:`read_settled` reads one version: a read during
which the open file changed is read again, a file that vanished is
``FILE_NOT_FOUND``, and one that kept changing through every attempt is
``open_file``'s to answer from the text indexed last, flagged ``from_index``.
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import hashlib
import io
import itertools
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import BinaryIO, TypeVar

import regex
from django.db import connection
from django.db.models import Q, QuerySet

from corpus import arguments, cursors, globs, patterns, slices
from corpus import rows as rows_of
from corpus.citations import SpanRef
from corpus.ingest.classify import classify, sniff_magic
from corpus.ingest.extract import byte_order_mark, extract
from corpus.ingest.extracted import PAGE_SEPARATOR
from corpus.models import DocStatus, Document, Representation, RepType, Span
from corpus.security import (
    ARCHIVE_SEPARATOR,
    MAX_PATH_CHARS,
    ExclusionEngine,
    IsDirectory,
    OpenedFile,
    canonical_rel_path,
    check_path_bounds,
)
from kernel import errors
from kernel.jsontypes import JsonObject


def _find_budget() -> float:
    """``DIR2MCP_FIND_BUDGET_SECONDS`` (0.1-60, default 2): how long one
    ``find`` call may scan or run its regex before it answers ``timed_out``."""
    raw = os.environ.get("DIR2MCP_FIND_BUDGET_SECONDS") or "2"
    try:
        seconds = float(raw)
    except ValueError:
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID, f"DIR2MCP_FIND_BUDGET_SECONDS must be a number, not {raw!r}"
        ) from None
    return min(60.0, max(0.1, seconds))


FIND_BUDGET_SECONDS = _find_budget()
#: A document cut after the call waited for its turn at the regex worker,
#: or gave its turn up, is retried on the next page, at most this many
#: pages in a row; then it is passed over as one that took a whole budget,
#: so that following cursors always ends (the cursor counts the retries).
FIND_RETRIES = 2
SNIPPET_CHARS = 240
_READ_BLOCK = 64 * 1024
#: Pieces of at most _READ_BLOCK characters read between two stop checks
_CHECK_PIECES = 256
# Text screened for secrets on each side of a snippet of indexed text, so a
# cut through a key ("AKIA" + 15 of its 16 characters) cannot leak it.
_CONTEXT = 256
#: Text (or bytes) screened on each side of what is read from a file as it
#: is now (``open_file`` lines, ``read_bytes`` ranges), which the indexer
#: may never have screened (a binary file, ``--no-index``, a change not yet
#: indexed): the longest secret the rules know by its start, a private key
#: block (RSA-4096 PEM about 3.3 KB, an OpenPGP one some 7 KB), so a range
#: in its middle still sees its BEGIN line. Until session 22 it was 256, and
#: a key was served range by range past its first few hundred characters.
LIVE_CONTEXT = 16 * 1024
_HTML_READ_CAP = 16 * 1024 * 1024
#: redact mode: the largest file read whole to be redacted (beyond it, streamed and screened)
_REDACT_READ_CAP = 16 * 1024 * 1024
_TEXT_TYPES = frozenset({"code", "text", "md", "data"})
_REP_ORDER = {t: i for i, t in enumerate(RepType.values)}
_FILE_FIELDS = ("rel_path", "doc_type", "size_bytes", "mtime_unix", "status", "error_code")
#: Reads of a file that changed while it was read before the reader gives
#: up on the file itself; the pause between them starts at _REREAD_PAUSE
#: seconds and doubles (35 ms in all).
READ_ATTEMPTS = 4
_REREAD_PAUSE = 0.005
# Decoders that raise without their byte-order mark, whatever ``errors`` says.
_NEEDS_BOM = frozenset({"utf-16", "utf-32"})

T = TypeVar("T")
_Row = TypeVar("_Row", bound=Sequence[object])


def _fail(code: str, message: str) -> errors.Dir2mcpError:
    return errors.Dir2mcpError(code, message)


def canonical_prefix(path_prefix: object) -> str:
    """A canonical path prefix; ``src/`` keeps its slash so it does not match ``src2/``.

    The one check every ``path_prefix`` goes through (``list_files``, ``find``,
    ``search``, ``ask``): a prefix that could name anything outside the root is
    ``PATH_OUTSIDE_ROOT``, not an empty page of hits; ``"."`` is the whole root;
    another spelling of a path (``./src``, ``src//x``, ``src/./x``) is
    ``INVALID_FIELD`` (:func:`~corpus.security.canonical_rel_path`).
    """
    prefix = arguments.text("path_prefix", path_prefix, limit=MAX_PATH_CHARS)
    if prefix in ("", ".", "./"):  # the whole root
        return ""
    check_path_bounds(prefix, "path_prefix")
    # A canonical path, or one with a single trailing slash (a directory's
    # prefix); any other spelling is refused, as for every path.
    directory = prefix.endswith("/") and prefix != "/"  # "/" is absolute: PATH_OUTSIDE_ROOT
    canonical = canonical_rel_path(prefix[:-1] if directory else prefix)
    return canonical + "/" if directory else canonical


def under_prefix(field: str, prefix: str) -> Q:
    """Rows whose ``field`` (a path) starts with ``prefix``: case-sensitively,
    as on PostgreSQL, and on SQLite as an index range (:func:`prefix_range`)."""
    q = Q(**{f"{field}__startswith": prefix})
    bounds = prefix_range(prefix)
    if bounds is not None:
        q &= Q(**{f"{field}__gte": bounds[0], f"{field}__lt": bounds[1]})
    return q


def prefix_range(prefix: str) -> tuple[str, str] | None:
    """``[prefix, successor)``, the paths starting with ``prefix``, on SQLite
    (None elsewhere): there a ``LIKE`` is case-insensitive and scans the
    whole path index, where the range reads only the matches (issue #37).
    Paths are stored as valid UTF-8, whose byte order is code-point order."""
    if connection.vendor != "sqlite" or not prefix or ord(prefix[-1]) >= sys.maxunicode:
        return None
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)


def _glob(value: object) -> globs.Glob | None:
    glob = arguments.text("glob", value, limit=globs.MAX_GLOB_CHARS)
    return globs.compile_glob(glob) if glob else None  # linear-time matching (corpus/globs.py)


def screen(engine: ExclusionEngine, rel_path: str, text: str) -> None:
    """FORBIDDEN when ``text``, about to be returned, holds a secret."""
    rule = engine.find_secret(text)
    if rule:
        raise _fail(errors.FORBIDDEN, f"{rel_path}: content matches a secret pattern ({rule}); not returned")


def refuse_archive_bytes(rel_path: str, kind: str, head: bytes = b"") -> None:
    """FORBIDDEN for the bytes of an archive (``kind`` "archive": zip, tar,
    compressed tar, gzip). They hold its members compressed, and the
    exclusion rules judge each member (``a.zip!/x``): until session 22
    ``read_bytes`` and ``resources/read`` served a zip whole, and the
    ``.env`` or key file refused as a member came out of it unpacked.
    ``head``, the file's first bytes: an archive under another name
    (``notes.txt``, ``photo.png``, ``backup.bin``: its kind is its name's)
    is refused too (until session 31 it was served), but for a zip
    document (``office``), whose parts :mod:`corpus.containers` screens."""
    packed = sniff_magic(head) == "archive" and not (kind == "office" and head.startswith(b"PK"))
    if kind == "archive" or packed:
        raise _fail(
            errors.FORBIDDEN,
            f"{rel_path} is an archive: its bytes are not served (they would hold members the "
            "exclusion rules refuse); read its members by name (archive.zip!/path), a .gz with open_file",
        )


def redacted_text(engine: ExclusionEngine, rel_path: str, text: str) -> str:
    """Redact mode: the text of ``rel_path`` as read from the file, whole,
    with each credential replaced by the redaction the indexer applies
    (:meth:`ExclusionEngine.redact`), so a slice cut from it says what the
    index says; FORBIDDEN when it holds one it cannot be redacted of.
    Exclude mode: ``text`` as it is, for :func:`screen` to judge."""
    if not engine.redacts:
        return text
    redacted = engine.redact(text)
    if redacted is None:
        raise _fail(errors.FORBIDDEN, f"{rel_path}: content matches a secret pattern; cannot be redacted")
    return redacted.text


# -- reading a file that may change -------------------------------------------


class Unsettled(Exception):  # noqa: N818 (a condition the caller handles, not a failure)
    """The file changed during each of :data:`READ_ATTEMPTS` reads."""

    def __init__(self, rel: str) -> None:
        super().__init__(f"{rel} changed while it was read, {READ_ATTEMPTS} times")
        self.rel = rel


def changed_while_open(opened: OpenedFile) -> bool:
    """Whether the open file is no longer the version its open saw: its size,
    modification or status-change time moved (a rewrite in place, a
    truncation, an append; a rename or unlink of it moves the status-change
    time too)."""
    try:
        now = os.fstat(opened.file.fileno())
    except (OSError, ValueError):  # closed: nothing says it is the same
        return True
    then = opened.st
    return any(getattr(now, f) != getattr(then, f) for f in ("st_size", "st_mtime_ns", "st_ctime_ns"))


def read_settled(engine: ExclusionEngine, rel_path: str, read: Callable[[OpenedFile], T]) -> T:
    """``read(opened)`` of one version of ``rel_path``.

    A read during which the file changed may hold parts of two versions (the
    head of the old one, the tail of the new; or a file truncated under it):
    it is read again, from a fresh open (a file replaced by a rename is the
    new one), after a short pause. So is a
    :class:`~kernel.errors.Dir2mcpError` that ``read`` raised from such a
    read (a torn head may look binary, a truncated file too short for the
    lines asked). A file gone by then is ``FILE_NOT_FOUND`` from
    :meth:`ExclusionEngine.open`; one that changed during every attempt
    raises :class:`Unsettled`. A read that nothing changed under is the file
    as it was, even if that was a moment its writer had truncated it and
    not yet written it again: no reader can tell that moment from a file
    that is empty.
    """
    pause, rel = _REREAD_PAUSE, rel_path
    for attempt in range(READ_ATTEMPTS):
        if attempt:
            time.sleep(pause)
            pause *= 2
        try:
            opened = engine.open(rel_path)
        except IsDirectory as directory:
            if not holds_listable(engine, directory.real_rel):
                raise
            raise _fail(
                errors.FILE_NOT_FOUND, f"{directory.rel} is a directory: list it with list_files"
            ) from None
        with opened:
            rel = opened.rel
            try:
                value = read(opened)
            except errors.Dir2mcpError:
                if not changed_while_open(opened):
                    raise
                continue
            if not changed_while_open(opened):
                return value
    raise Unsettled(rel)  # the canonical name the opener gave


# -- open_file -----------------------------------------------------------------


def open_file(
    engine: ExclusionEngine,
    *,
    rel_path: str,
    start_line: int | None = None,
    end_line: int | None = None,
    page: int | None = None,
    start_ms: int | None = None,
    end_ms: int | None = None,
    max_chars: int = 20000,
    check: Callable[[], None] = lambda: None,
) -> JsonObject:
    """The §15.4 output for one slice of ``rel_path``: page, time range, lines, or the beginning.
    ``check`` is called as lines are read: a caller that stops the work raises from it."""
    if rel_path is None or rel_path == "":
        raise _fail(errors.MISSING_FIELD, "rel_path is required")
    arguments.text("rel_path", rel_path, limit=MAX_PATH_CHARS)
    start_line, end_line = (
        arguments.LINE.check("start_line", start_line),
        arguments.LINE.check("end_line", end_line),
    )
    page = arguments.PAGE.check("page", page)
    start_ms, end_ms = (
        arguments.MILLISECOND.check("start_ms", start_ms),
        arguments.MILLISECOND.check("end_ms", end_ms),
    )
    max_chars = _bounded(arguments.MAX_CHARS, "max_chars", max_chars)
    where = (start_line, end_line, page, start_ms, end_ms, max_chars, check)

    def read(opened: OpenedFile) -> JsonObject:
        return _open_slice(engine, opened.rel, opened.file, *where)

    # The one check and open (corpus/security.py): what is read is what was checked.
    try:
        return read_settled(engine, rel_path, read)
    except Unsettled as unsettled:
        # Still changing: the text indexed last, which the search hits cite, flagged.
        return _open_slice(engine, unsettled.rel, None, *where) | {"from_index": True}


def live_document(rel: str, *, raw_bytes: bool = False) -> tuple[Document | None, dict[str, Representation]]:
    """The live document at ``rel`` and its representations by type; a
    document skipped for a secret is refused here, for every reader.
    ``raw_bytes``: the caller answers from the file's bytes as they are (a
    checksum), so a document indexed with its credentials redacted is
    refused too (a digest of the bytes would test guesses of a short
    password against the rest of the file, which redact mode serves)."""
    doc = Document.objects.filter(rel_path=rel, deleted=False).first()
    if doc is not None and doc.status == "skipped" and (doc.error or "").startswith(errors.SECRET_DETECTED):
        raise _fail(errors.FORBIDDEN, f"{rel}: content matches a secret pattern; not returned")
    reps = {r.rep_type: r for r in Representation.objects.filter(document=doc, deleted=False)} if doc else {}
    if raw_bytes and any((rep.meta_json or {}).get("redacted") for rep in reps.values()):
        raise _fail(errors.FORBIDDEN, f"{rel}: holds a credential, served only redacted; not its raw bytes")
    return doc, reps


def _bounded(argument: arguments.Integer, name: str, value: object) -> int:
    """``argument.check`` of an argument that has a default."""
    checked = argument.check(name, value)
    assert checked is not None  # None is only given back for an argument without a default
    return checked


def _open_slice(
    engine: ExclusionEngine,
    rel: str,
    file: BinaryIO | None,
    start_line: int | None,
    end_line: int | None,
    page: int | None,
    start_ms: int | None,
    end_ms: int | None,
    max_chars: int,
    check: Callable[[], None],
) -> JsonObject:
    """The slice, from ``file`` (as :meth:`ExclusionEngine.open` opened it,
    left open), or, with ``file`` None, from the document's indexed text."""
    doc, reps = live_document(rel)
    paged, transcript = _paged(reps), reps.get(RepType.TRANSCRIPT)
    no_lines = start_line is None and end_line is None
    no_time = start_ms is None and end_ms is None
    span: SpanRef | None
    if page is not None or (no_lines and no_time and paged):
        doc_type = doc.doc_type if doc else "unknown"
        content, span, truncated = _page_slice(engine, rel, paged, page or 1, max_chars)
    elif not no_time or (no_lines and transcript):
        doc_type = doc.doc_type if doc else "unknown"
        content, span, truncated = _time_slice(engine, rel, transcript, start_ms, end_ms, max_chars)
    else:
        if paged or transcript:
            unit = "page" if paged else "start_ms/end_ms"
            raise _fail(errors.DOC_TYPE_UNSUPPORTED, f"{rel} has no lines; open it by {unit}")
        if start_line and end_line and start_line > end_line:
            raise _fail(errors.INVALID_RANGE, "start_line must not be greater than end_line")
        doc_type, source = _line_source(engine, file, rel, doc, reps.get(RepType.RAW_TEXT))
        try:
            content, span, truncated, context = _read_lines(
                source, start_line or 1, end_line, max_chars, check
            )
        except UnicodeError:  # no codec chosen raises; a decoder that does meets a changed file
            raise _fail(errors.EXTRACT_FAILED, f"{rel} cannot be decoded as it is now") from None
        finally:
            if isinstance(source, io.TextIOWrapper):
                source.detach()  # the file stays open: read_settled looks at it after the read
        screen(engine, rel, context)
    out = {"rel_path": rel, "doc_type": doc_type, "content": content, "truncated": truncated}
    return out | ({"span": span.as_dict()} if span else {})


@dataclass(frozen=True)
class DocumentText:
    """A document's whole text as the spans of its hits count it: ``lines``
    (the file's text, or the stored text of a converted format), or ``pages``
    (a PDF's or an OCR'd file's text, page by page)."""

    rel_path: str
    doc_type: str
    lines: str | None = None
    pages: list[str] | None = None
    #: more text than ``max_chars`` was there; ``lines`` holds the first part
    truncated: bool = False
    #: the file kept changing while it was read: this is its indexed text
    from_index: bool = False


def read_document(engine: ExclusionEngine, rel_path: object, *, max_chars: int) -> DocumentText:
    """The text of ``rel_path`` through the one check and open that
    ``open_file`` uses (containment, exclusions, a secret-skipped document
    refused): what the navigation tools read."""
    if rel_path is None or rel_path == "":
        raise _fail(errors.MISSING_FIELD, "rel_path is required")
    path = arguments.text("rel_path", rel_path, limit=MAX_PATH_CHARS)
    try:
        return read_settled(
            engine, path, lambda opened: _document_text(engine, opened.rel, opened.file, max_chars)
        )
    except Unsettled as unsettled:
        found = _document_text(engine, unsettled.rel, None, max_chars)
        return DocumentText(**{**found.__dict__, "from_index": True})


def _document_text(engine: ExclusionEngine, rel: str, file: BinaryIO | None, max_chars: int) -> DocumentText:
    doc, reps = live_document(rel)
    paged = _paged(reps)
    if paged is not None:
        assert doc is not None  # its representations came with it
        return DocumentText(rel, doc.doc_type, pages=paged.text.split(PAGE_SEPARATOR))
    if reps.get(RepType.TRANSCRIPT) is not None:
        raise _fail(errors.DOC_TYPE_UNSUPPORTED, f"{rel} is a recording; open it by start_ms/end_ms")
    doc_type, source = _line_source(engine, file, rel, doc, reps.get(RepType.RAW_TEXT))
    try:
        text = source.read(max_chars + 1)
    except UnicodeError:
        raise _fail(errors.EXTRACT_FAILED, f"{rel} cannot be decoded as it is now") from None
    finally:
        if isinstance(source, io.TextIOWrapper):
            source.detach()  # the file stays open: read_settled looks at it after the read
    return DocumentText(rel, doc_type, lines=text[:max_chars], truncated=len(text) > max_chars)


def _paged(reps: dict[str, Representation]) -> Representation | None:
    """OCR output, or a PDF text layer: text whose pages are joined with form feeds."""
    ocr, raw = reps.get(RepType.OCR_MARKDOWN), reps.get(RepType.RAW_TEXT)
    return ocr or (raw if raw is not None and "pages" in (raw.meta_json or {}) else None)


def _page_slice(
    engine: ExclusionEngine, rel: str, rep: Representation | None, page: int, max_chars: int
) -> tuple[str, SpanRef, bool]:
    if rep is None:
        raise _fail(errors.DOC_TYPE_UNSUPPORTED, f"{rel} has no page text (not a PDF, or not extracted yet)")
    pages = rep.text.split(PAGE_SEPARATOR)
    if page > len(pages):
        raise _fail(errors.INVALID_RANGE, f"page {page} does not exist: {rel} has {len(pages)} page(s)")
    text = pages[page - 1]
    screen(engine, rel, text)
    return text[:max_chars], SpanRef("page", page, page), len(text) > max_chars


def _time_chunks(rep: Representation | int) -> list[tuple[int, int, str]]:
    """The transcript's timed chunks, ``(start_ms, end_ms, text)`` in time order."""
    rows = Span.objects.filter(chunk__representation=rep, chunk__deleted=False, span_kind="time")
    fields = ["chunk__representation", "chunk__stored_text", "chunk__text_start", "chunk__text_end"]
    return slices.texts(rows.order_by("start", "chunk__ordinal").values_list("start", "end", *fields), 2)


def _locate(text: str, pieces: list[str]) -> list[tuple[int, int]] | None:
    """Where each chunk sits in the full text; chunks overlap, so each is sought from the previous."""
    spots: list[tuple[int, int]] = []
    pos = 0
    for piece in pieces:
        found = text.find(piece, pos)
        if found < 0:
            return None
        spots.append((found, found + len(piece)))
        pos = found
    return spots


def _time_slice(
    engine: ExclusionEngine,
    rel: str,
    rep: Representation | None,
    start_ms: int | None,
    end_ms: int | None,
    max_chars: int,
) -> tuple[str, SpanRef | None, bool]:
    if rep is None:
        raise _fail(errors.DOC_TYPE_UNSUPPORTED, f"{rel} has no transcript")
    chunks = _time_chunks(rep)
    if not chunks and start_ms is None and end_ms is None:  # untimed transcript: its beginning
        screen(engine, rel, rep.text[: max_chars + _CONTEXT])
        return rep.text[:max_chars], None, len(rep.text) > max_chars
    if not chunks:
        raise _fail(errors.DOC_TYPE_UNSUPPORTED, f"the transcript of {rel} has no timestamps")
    low = start_ms or 0
    if end_ms is not None and low > end_ms:
        raise _fail(errors.INVALID_RANGE, "start_ms must not be greater than end_ms")
    picked = [c for c in chunks if c[1] > low and (end_ms is None or c[0] <= end_ms)]
    if not picked:
        raise _fail(errors.INVALID_RANGE, f"the transcript of {rel} has nothing in that time range")
    spots = _locate(rep.text, [c[2] for c in picked])
    if spots:  # the stored text the chunks cover, so their overlaps are not repeated
        text, begin = rep.text, spots[0][0]
        ends = list(itertools.accumulate((e for _, e in spots), max))
    else:
        text, begin = "\n".join(c[2] for c in picked), 0
        ends = list(itertools.accumulate(len(c[2]) + 1 for c in picked))
        ends[-1] -= 1
    screen(engine, rel, text[begin : ends[-1]])
    count = max(1, sum(1 for end in ends if end - begin <= max_chars))
    content = text[begin : ends[count - 1]]
    span = SpanRef("time", picked[0][0], max(c[1] for c in picked[:count]))
    return content[:max_chars], span, count < len(picked) or len(content) > max_chars


def _line_source(
    engine: ExclusionEngine,
    handle: BinaryIO | None,
    rel: str,
    doc: Document | None,
    raw: Representation | None,
) -> tuple[str, io.TextIOBase]:
    """The doc type and a text stream whose lines are the lines search spans count.

    ``handle`` is the file as :meth:`ExclusionEngine.open` opened it, or
    None for the indexed text (redacted when indexed in redact mode). A
    :class:`io.TextIOWrapper` returned reads the handle; detach it, rather
    than close it, when done. In redact mode the file's text is read whole
    and redacted (:func:`redacted_text`), up to :data:`_REDACT_READ_CAP`
    bytes; a larger file is read as a stream and screened as in exclude
    mode, or, when the indexer redacted it (``ingest.max_file_mb`` above the
    cap), its indexed text is what is read.
    """
    if ARCHIVE_SEPARATOR in rel or (raw is not None and (raw.meta_json or {}).get("converted_from")):
        if raw is None:
            raise _fail(errors.FILE_NOT_FOUND, f"{rel} is not indexed")
        assert doc is not None  # the representation's document
        return doc.doc_type, io.StringIO(raw.text)
    if handle is None:  # the file kept changing: its indexed text
        if raw is None or doc is None or doc.doc_type not in _TEXT_TYPES:  # doc: never None with raw
            raise errors.Dir2mcpError(
                errors.INDEX_NOT_READY,
                f"{rel} changed each time it was read and has no indexed text yet; try again",
            )
        return doc.doc_type, io.StringIO(raw.text)
    head = handle.read(8192)
    handle.seek(0)
    sniffed = classify(rel.rsplit("/", 1)[-1], head)
    # A document the indexer could not read (it vanished or changed under it)
    # has no type yet: the file's bytes say what it is now.
    doc_type = doc.doc_type if doc is not None and doc.status != DocStatus.ERROR else sniffed
    if doc_type == "html" and sniffed == "html":
        data = handle.read(_HTML_READ_CAP + 1)
        if len(data) > _HTML_READ_CAP:
            raise _fail(errors.FILE_TOO_LARGE, f"{rel} is too large to convert before it is indexed")
        return doc_type, io.StringIO(redacted_text(engine, rel, extract("html", rel, data).text))
    if doc_type not in _TEXT_TYPES or sniffed not in _TEXT_TYPES:
        raise _fail(
            errors.DOC_TYPE_UNSUPPORTED, f"{rel} is a {doc_type} file, not text (binary files are not read)"
        )
    encoding, mark = _encoding_for(head, (raw.meta_json or {}).get("encoding") if raw is not None else None)
    handle.seek(mark)
    # Universal newlines split lines exactly as ingestion's normalisation does.
    stream = io.TextIOWrapper(handle, encoding=encoding, errors="replace", newline=None)
    if not engine.redacts:
        return doc_type, stream
    if os.fstat(handle.fileno()).st_size > _REDACT_READ_CAP:
        if raw is None or not (raw.meta_json or {}).get("redacted"):
            return doc_type, stream
        stream.detach()  # indexed redacted (ingest.max_file_mb over the cap): what the index holds
        return doc_type, io.StringIO(raw.text)
    try:
        return doc_type, io.StringIO(redacted_text(engine, rel, stream.read()))
    finally:
        stream.detach()  # the file stays open: read_settled looks at it after the read


def _encoding_for(head: bytes, indexed: str | None) -> tuple[str, int]:
    """The codec for the file's bytes as they are now, and the length of the
    byte-order mark to skip: the codec of the byte order the mark names (as
    the head shows it), else the one indexing found, else UTF-8.

    Never a codec that reads its own mark (``utf-16``, ``utf-32``): those
    raise, whatever ``errors`` says, on bytes without one, which is what a
    file indexed as UTF-16 and rewritten since holds, and what the stream
    holds when the file is rewritten between the head's read and the next."""
    bom = byte_order_mark(head)
    if bom is not None:
        return bom.codec, len(bom.mark)
    try:
        found = codecs.lookup(indexed or "utf-8-sig").name
    except LookupError:
        return "utf-8-sig", 0
    return ("utf-8-sig" if found in _NEEDS_BOM else found), 0


def _read_lines(
    fh: io.TextIOBase, start: int, end: int | None, max_chars: int, check: Callable[[], None]
) -> tuple[str, SpanRef | None, bool, str]:
    """Lines ``start..end`` (1-based) within ``max_chars``, streaming: never a whole file or line.
    ``check`` is called every :data:`_CHECK_PIECES` pieces read on the way to
    ``start``: a line far into a huge file (a sparse one costs its writer
    nothing) took the thread past its call's deadline for as long as the
    reading lasted, holding its call slot (until session 23)."""
    recent: collections.deque[str] = collections.deque()  # the pieces before, LIVE_CONTEXT at least
    held, line_no = 0, 1
    for pieces in itertools.count():
        if line_no >= start:
            break
        if pieces % _CHECK_PIECES == 0:
            check()
        piece = fh.readline(_READ_BLOCK)
        if not piece:
            raise _fail(errors.INVALID_RANGE, f"start_line {start} is past the end of the file")
        recent.append(piece)
        held += len(piece)
        while held - len(recent[0]) >= LIVE_CONTEXT:  # never copied whole per line: linear in the file
            held -= len(recent.popleft())
        line_no += piece.endswith("\n")
    before = "".join(recent)[-LIVE_CONTEXT:]
    out: list[str] = []
    used, truncated, line = 0, False, ""
    while end is None or start + len(out) <= end:
        room = max_chars - used - bool(out)
        line = fh.readline(max(room, 0) + 1)
        if not line:
            break
        body = line[:-1] if line.endswith("\n") else line
        if len(body) > room:
            truncated = True
            if not out:  # one line longer than max_chars: its head, flagged truncated
                out.append(body[:max_chars])
            break
        used += len(body) + bool(out)
        out.append(body)
    if not out and start > 1:
        raise _fail(errors.INVALID_RANGE, f"start_line {start} is past the end of the file")
    content = "\n".join(out)
    context = before + content + (line if truncated else "") + fh.read(LIVE_CONTEXT)
    span = SpanRef("lines", start, start + len(out) - 1) if out else None
    return content, span, truncated, context


# -- whole documents (resources/read, corpus/documents.py) ---------------------


def decode_text(data: bytes, indexed_encoding: str | None) -> str:
    """A text file's bytes as ``open_file`` reads them: the codec its mark or
    the index names, undecodable bytes replaced, newlines normalised."""
    encoding, mark = _encoding_for(data[:8192], indexed_encoding)
    text = data[mark:].decode(encoding, errors="replace")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def timed_pieces(rep: Representation) -> list[tuple[int, int, str]]:
    """A transcript cut at its timed chunks, each piece without the overlap
    the chunk shares with the one before: ``(start_ms, end_ms, text)``."""
    chunks = _time_chunks(rep)
    spots = _locate(rep.text, [c[2] for c in chunks]) if chunks else None
    if not spots:  # the chunks are not in the stored text: each as it is
        return chunks
    pieces: list[tuple[int, int, str]] = []
    done = 0
    for (start_ms, end_ms, _), (low, high) in zip(chunks, spots, strict=True):
        piece = rep.text[max(low, done) : high].strip("\n")
        done = max(done, high)
        if piece:
            pieces.append((start_ms, end_ms, piece))
    return pieces


# -- list_files ----------------------------------------------------------------


def listable_documents() -> QuerySet[Document]:
    """Live documents a client may see: not the ones skipped as secret-bearing,
    which every read refuses. The one rule of every listing: ``list_files``,
    ``find``, ``resources/list``, completions and the recent-files prompt."""
    secret = Q(status=DocStatus.SKIPPED, error__startswith=errors.SECRET_DETECTED)
    return Document.objects.filter(deleted=False).exclude(secret)


def primed(
    engine: ExclusionEngine,
    rows: Iterable[T],
    path: Callable[[T], str] = lambda row: str(row[0]),  # type: ignore[index]  # a row, a path first
    size: int = 0,
) -> Iterator[T]:
    """``rows`` (``path`` of each: its first field), the stored-text
    verdicts of each ``size`` (:data:`PRIMED`) of them judged together
    before they are handed on (``ExclusionEngine.stored_prime``): one
    query a path cost a listing's first pass about 0.9 ms a file
    (docs/benchmarks.md). ``find`` by name, the ``changes`` prompt and
    completions judged so until session 31."""
    remaining = iter(rows)
    while batch := list(itertools.islice(remaining, size or PRIMED)):
        if engine.stored_prime is not None:
            engine.stored_prime(path(row) for row in batch)
        yield from batch


#: rows of a listing whose stored-text verdicts :func:`primed` judges together
PRIMED = 256


def holds_listable(engine: ExclusionEngine, rel_dir: str) -> bool:
    """Whether a file under ``rel_dir`` is one a listing shows now: judged
    in path order, at most ``PASSED_OVER`` files the rules exclude now."""
    prefix = f"{rel_dir}/" if rel_dir else ""
    docs = listable_documents().filter(under_prefix("rel_path", prefix)).order_by("rel_path")
    with engine.pinned(), rows_of.streamed(docs.values_list("rel_path", flat=True), 100) as paths:
        for passed_over, path in enumerate(paths):
            if engine.listed_reason(path) is None:
                return True
            if passed_over >= PASSED_OVER:
                return False
    return False


#: files the rules let through, past a ``list_files`` page, judged to count
#: its ``total``: a longer listing answers ``has_more`` without one
COUNTED_PAST_PAGE = 500
#: files the rules exclude now (still in the index) one ``list_files``
#: answer passes over before it stops judging
PASSED_OVER = 1000


def list_files(
    *,
    path_prefix: str = "",
    glob: str = "",
    limit: int = 200,
    offset: int = 0,
    engine: ExclusionEngine | None = None,
    cursor: str | None = None,
) -> JsonObject:
    """The §15.5 page of listable documents, by rel_path; the glob runs over paths only.

    With ``engine``, everything the answer says is judged against the rules
    as they are now: the index drops a file a rule's change excludes only
    once the walk that change starts has ended (under ``up --no-index``,
    never), and until session 27 ``total`` and ``offset`` counted the
    index's entries, so a glob such as ``src/zz*`` answered ``total: 1``
    with an empty page and narrowing it spelled the name out. ``offset``
    now counts the files the rules let through (at most
    ``arguments.OFFSET.high``), and the matching entries are judged in
    path order from the first, up to the page and :data:`COUNTED_PAST_PAGE`
    more: ``total`` comes only when the listing ended within them, and
    ``has_more`` says whether more follow. Past :data:`PASSED_OVER`
    entries the rules exclude now, judging stops: a page already full is
    answered with ``has_more`` and no ``total``, else ``INDEX_NOT_READY``
    (the walk the rules' change started takes them out; under ``up
    --no-index``, ``dir2mcp reindex``). Without ``engine``, the index is
    taken as it is (counted by the database).

    Past ``offset``'s bound a client pages by cursor (keyset paging): a
    page with more after it hands on ``next_cursor``, which holds the query
    (``path_prefix`` and ``glob``) and the last file the page returned
    (never one it passed over: that would name an excluded file), and the
    page it leads to reads the index after that path, so its cost does not
    grow with how deep the client pages. Such a page has no ``total``: it
    would have to judge every file before the cursor again."""
    prefix, spec = canonical_prefix(path_prefix), _glob(glob)
    limit = _bounded(arguments.LIST_LIMIT, "limit", limit)
    offset = _bounded(arguments.OFFSET, "offset", offset)
    key = hashlib.sha256(json.dumps(["list_files", prefix, glob]).encode()).hexdigest()[:24]
    after, skip = _after(cursor, key, offset) if cursor is not None else ("", -1)
    docs = listable_documents().order_by("rel_path")
    if prefix:
        docs = docs.filter(under_prefix("rel_path", prefix))
    if after:
        docs = docs.filter(rel_path__gt=after) if skip < 0 else docs.filter(rel_path__gte=after)
    if engine is None:
        return _resumable(_listed_from_index(docs, spec, limit, offset), key, after)
    first = offset + max(skip, 0)  # the files let through that come before the page
    allowed: list[tuple[object, ...]] = []
    passed_over, ended, cut_at = 0, True, list[str]()
    deadline = time.monotonic() + FIND_BUDGET_SECONDS
    with engine.pinned(), rows_of.streamed(docs.values_list(*_FILE_FIELDS), 1000) as rows:
        # With a glob, the rows it judges count against find's time budget:
        # one matching little of a large tree judged every row in one call
        # (session 31). Without, each row judged is one the answer counts.
        matching = (
            rows
            if spec is None
            else _judged(rows, lambda r: spec.match_file(str(r[0])), deadline, cut_at, at=0)
        )
        for row in primed(engine, matching):
            if engine.listed_reason(str(row[0])) is not None:
                passed_over += 1
                if passed_over > PASSED_OVER:
                    ended = False
                    break
                continue
            if len(allowed) == first + limit + COUNTED_PAST_PAGE:
                ended = False
                break
            allowed.append(row)
    if ended and cut_at and len(allowed) < first + limit:
        return _timed_out(
            allowed[first:], offset, limit, _cursor(key, cut_at[0], max(first - len(allowed), 0))
        )
    ended = ended and not cut_at
    offset = first if skip >= 0 else offset
    if not ended and len(allowed) < offset + limit:
        raise _fail(
            errors.INDEX_NOT_READY,
            f"over {PASSED_OVER} of the files this listing matches are excluded by the rules as they are "
            "now but still in the index, until the walk their change started ends (under up --no-index, "
            "until dir2mcp reindex): narrow path_prefix or glob, or page with dir2mcp.find",
        )
    files = [_listed(dict(zip(_FILE_FIELDS, row, strict=True))) for row in allowed[offset : offset + limit]]
    out: JsonObject = {"limit": limit, "offset": 0 if skip >= 0 else offset}
    if ended:
        out["total"] = len(allowed)
    out |= {"has_more": not ended or offset + limit < len(allowed), "files": files}
    return _resumable(out, key, after)


def _timed_out(rows: list[tuple[object, ...]], offset: int, limit: int, cursor: str) -> JsonObject:
    """A ``list_files`` page its time budget cut before it filled: the files
    found, and a cursor at the first row not judged (sealed: it may name a
    file the client cannot see, so the client can neither read nor write it),
    which also carries how many files of the offset are still to pass."""
    files = [_listed(dict(zip(_FILE_FIELDS, row, strict=True))) for row in rows]
    page: JsonObject = {"limit": limit, "offset": offset, "has_more": True, "files": files}
    return page | {"timed_out": True, "next_cursor": cursor}


def _after(cursor: object, key: str, offset: int) -> tuple[str, int]:
    """Where a ``list_files`` cursor resumes (find's cursor): after its path
    (``k = -1``, after a page's last file), or at it, ``k`` files the rules
    let through still to pass over (after a page cut by its time budget);
    INVALID_FIELD with an offset."""
    if offset:
        raise _fail(
            errors.INVALID_FIELD, "cursor and offset cannot be combined: pass the cursor alone (offset 0)"
        )
    path, skip, retries = _resume(cursor, key)
    if skip > arguments.OFFSET.high or retries or not path:
        raise _fail(errors.INVALID_FIELD, "invalid cursor")
    return path, skip


def _resumable(page: JsonObject, key: str, after: str) -> JsonObject:
    """A ``list_files`` page with ``next_cursor`` (after its last file) when
    more follow; paged by cursor, without ``total``."""
    if after:
        page.pop("total", None)
    if page["has_more"] and page["files"]:
        page["next_cursor"] = _cursor(key, str(page["files"][-1]["rel_path"]), -1)
    return page


def _listed_from_index(
    docs: QuerySet[Document], spec: globs.Glob | None, limit: int, offset: int
) -> JsonObject:
    """A page of the index as it is, counted by the database."""
    if spec is None:
        total, page = docs.count(), docs.values_list(*_FILE_FIELDS)[offset : offset + limit]
    else:
        rows = docs.values_list("doc_id", "rel_path").iterator(chunk_size=5000)
        ids = [doc_id for doc_id, path in rows if spec.match_file(path)]
        total = len(ids)
        page = docs.filter(doc_id__in=ids[offset : offset + limit]).values_list(*_FILE_FIELDS)
    files = [_listed(dict(zip(_FILE_FIELDS, row, strict=True))) for row in page]
    out = {"limit": limit, "offset": offset, "total": total}
    return out | {"has_more": offset + len(files) < total, "files": files}


def _listed(row: JsonObject) -> JsonObject:
    """A ``list_files`` entry: a file in ``error`` carries its code (issue #24)."""
    if row["status"] != "error" or not row["error_code"]:
        del row["error_code"]
    return row | {"deleted": False}


# -- find ----------------------------------------------------------------------


# ASCII digits only: str.isdigit() is true of "²" and "①", which int() refuses
# (an INTERNAL_ERROR until 2026-11-29).
_UNIX_SECONDS = re.compile(r"-?[0-9]+")


def _modified_after(value: object) -> int | None:
    """Nanoseconds since the epoch from Unix seconds or an ISO-8601 date/datetime (UTC if naive)."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and _UNIX_SECONDS.fullmatch(value.strip()):
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool):
        return value * 1_000_000_000
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            pass
        else:
            moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
            return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000
    raise _fail(errors.INVALID_FIELD, "modified_after must be an ISO-8601 date or datetime, or Unix seconds")


# Pattern recursion ((?R), (?1), (?+1), (?&name), (?P>name)) can take
# unbounded memory before any time limit applies: refused.
_RECURSION = re.compile(r"\(\?(?:R|[+-]?\d|&|P>)")


def _compile(content: str, is_regex: bool, case_sensitive: bool, deadline: float) -> _Pattern:
    """The content pattern for one call, a context manager with ``spans(text, batch)``.

    A regular expression is compiled and run in the regex worker
    (corpus/patterns.py), under the call's deadline and a memory cap; an
    escaped literal compiles in linear time and runs here.
    """
    flags = regex.MULTILINE | (0 if case_sensitive else regex.IGNORECASE)
    if not is_regex:
        return _Literal(regex.compile(regex.escape(content), flags), deadline)
    if _RECURSION.search(content):
        raise _fail(
            errors.INVALID_FIELD, "recursive regular expressions ((?R), (?1), (?&name)) are not supported"
        )
    return patterns.RegexScan(content, flags, deadline)


class _Literal(contextlib.nullcontext["_Literal"]):
    """Escaped text, matched in the server: the ``regex`` module matches
    without holding the GIL, and stops at the deadline."""

    def __init__(self, compiled: regex.Pattern[str], deadline: float) -> None:
        super().__init__(self)
        self.compiled, self.deadline = compiled, deadline

    def spans(self, text: str, batch: int) -> Iterator[tuple[int, int]]:
        try:
            for m in self.compiled.finditer(text, timeout=max(self.deadline - time.monotonic(), 0.001)):
                yield m.span()
        except TimeoutError:
            raise patterns.Overrun() from None


#: a content pattern for one call (:func:`_compile`)
_Pattern = _Literal | patterns.RegexScan
#: a candidate document: doc_id, rel_path, doc_type, mtime_unix, size_bytes
_DocRow = tuple[int, str, str, float, int]
#: a searchable representation: rep_id, rep_type, text, meta_json
_RepRow = tuple[int, str, str, JsonObject | None]


def _cursor(key: str, path: str, skip: int, retries: int = 0) -> str:
    fields: JsonObject = {"q": key, "p": path, "k": skip}
    if retries:
        fields["r"] = retries
    return cursors.seal("find", fields)  # a path and counts the client cannot read or write


def _resume(cursor: object, key: str) -> tuple[str, int, int]:
    """``(rel_path, k, r)``: resume at rel_path after its first k matches;
    k = -1 resumes after it. ``r``: how many pages in a row have retried it
    (``FIND_RETRIES``)."""
    invalid = _fail(errors.INVALID_FIELD, "invalid cursor")
    data = cursors.opened("find", cursor, 8192)
    if data is None or data.get("q") != key or not isinstance(data.get("p"), str):
        raise invalid
    skip = data.get("k")
    if isinstance(skip, bool) or not isinstance(skip, int) or skip < -1:
        raise invalid
    retries = data.get("r", 0)
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= FIND_RETRIES:
        raise invalid
    return data["p"], skip, retries


def find(
    engine: ExclusionEngine,
    *,
    name_glob: str = "",
    content: str = "",
    regex: bool = False,
    case_sensitive: bool = False,
    doc_types: Sequence[str] = (),
    path_prefix: str = "",
    modified_after: object = None,
    limit: int = 50,
    cursor: str | None = None,
    max_matches_per_file: int = 5,
    stop: Callable[[], bool] | None = None,
) -> JsonObject:
    """Files by name, type, date, and matches of a literal or regex in their stored text.

    ``stop`` (a callable) is polled between documents: a cancelled call
    returns what it has at once.

    The scan has a time budget: a pattern that exhausts it stops the page with
    ``timed_out`` and a cursor. A document that exhausts a whole budget on its
    own is skipped by that cursor, and one cut after a wait for the worker
    is retried at most ``FIND_RETRIES`` pages in a row, so following
    cursors always makes progress.
    Regular expressions share one worker (corpus/patterns.py): the wait for
    it counts against the budget, and a call that gets no turn in time
    returns ``timed_out`` with a cursor where it started.
    """
    if not isinstance(regex, bool) or not isinstance(case_sensitive, bool):
        raise _fail(errors.INVALID_FIELD, "regex and case_sensitive must be booleans")
    if not isinstance(doc_types, list | tuple) or not all(isinstance(t, str) for t in doc_types):
        raise _fail(errors.INVALID_FIELD, "doc_types must be a list of strings")
    name_glob = arguments.text("name_glob", name_glob, limit=globs.MAX_GLOB_CHARS)
    content = arguments.text("content", content, limit=patterns.MAX_REGEX_CHARS)
    spec, prefix, after_ns = _glob(name_glob), canonical_prefix(path_prefix), _modified_after(modified_after)
    limit = _bounded(arguments.FIND_LIMIT, "limit", limit)
    per_file = _bounded(arguments.MATCHES_PER_FILE, "max_matches_per_file", max_matches_per_file)
    deadline = time.monotonic() + FIND_BUDGET_SECONDS
    pattern = _compile(content, regex, case_sensitive, deadline) if content else None
    params = [name_glob, content, regex, case_sensitive, sorted(doc_types), prefix, after_ns, per_file]
    key = hashlib.sha256(json.dumps(params).encode()).hexdigest()[:24]
    start_path, start_skip, retries = _resume(cursor, key) if cursor is not None else ("", 0, 0)
    try:
        with pattern if pattern is not None else contextlib.nullcontext():
            # A regex worker that was starting gave its start's time back (corpus/patterns.py).
            deadline = getattr(pattern, "deadline", deadline)
            # Waiting for another call's turn at the worker took part of the
            # budget: the first document's cut does not prove it needs a whole one.
            waited = getattr(pattern, "waited", 0.0) > FIND_BUDGET_SECONDS / 10
            page = (limit, per_file, (start_path, start_skip, retries), deadline, waited)
            return _find_page(engine, key, (spec, prefix, doc_types, after_ns), pattern, page, stop)
    except patterns.Overrun:  # no turn at the regex worker within the budget
        out = {"matches": [], "files_scanned": 0, "timed_out": True}
        return out | {"next_cursor": _cursor(key, start_path, start_skip, retries)}


def _find_page(
    engine: ExclusionEngine,
    key: str,
    where: tuple[globs.Glob | None, str, Sequence[str], int | None],
    pattern: _Pattern | None,
    page: tuple[int, int, tuple[str, int, int], float, bool],
    stop: Callable[[], bool] | None,
) -> JsonObject:
    spec, prefix, doc_types, after_ns = where
    limit, per_file, (start_path, start_skip, start_retries), deadline, waited = page
    docs = listable_documents().order_by("rel_path")
    docs = docs.filter(under_prefix("rel_path", prefix)) if prefix else docs
    docs = docs.filter(doc_type__in=list(doc_types)) if doc_types else docs
    docs = docs.filter(mtime_ns__gt=after_ns) if after_ns is not None else docs
    if start_path:
        docs = (
            docs.filter(rel_path__gt=start_path) if start_skip < 0 else docs.filter(rel_path__gte=start_path)
        )
    if pattern is not None:
        docs = docs.filter(status="ok")
    rows = docs.values_list("doc_id", "rel_path", "doc_type", "mtime_unix", "size_bytes").iterator(
        chunk_size=1000
    )
    # The budget counts the rows judged too: a name glob alone matching
    # little of a large tree judged every row in one call (session 30).
    cut_at: list[str] = []
    # Every candidate's stored text is judged whole, as a listing's (the
    # names of files a secret pattern added since makes secret-bearing,
    # session 30): with a pattern too, since ``files_scanned`` counted such
    # a file, and a name glob naming it told it from a missing one.
    named = _judged(rows, lambda r: spec is None or spec.match_file(r[1]), deadline, cut_at)
    # a page's worth primed at a time: a page stops at its limit
    candidates = (
        row
        for row in primed(engine, named, lambda r: r[1], size=limit + 1)
        if not engine.listed_reason(row[1])
    )
    matches: list[JsonObject] = []
    scanned, timed_out = 0, False
    resume: tuple[str, int] | tuple[str, int, int] | None = None
    for row, reps in _with_reps(candidates, pattern is not None):
        if stop is not None and stop():
            resume = (row[1], 0)
            break
        if len(matches) >= limit:
            resume = (row[1], 0)
            break
        base = {"rel_path": row[1], "doc_type": row[2], "mtime_unix": row[3], "size_bytes": row[4]}
        if pattern is None:
            scanned += 1
            matches.append(base)
            continue
        if scanned and time.monotonic() > deadline:
            timed_out, resume = True, (row[1], 0)
            break
        scanned += 1
        skip = max(start_skip, 0) if row[1] == start_path else 0
        found, cut = _doc_matches(engine, pattern, base, reps, per_file, deadline)
        gave_way = getattr(pattern, "gave_way", False)  # its turn at the regex worker went to another client
        # Pages in a row that retried this document: while another client
        # keeps the worker busy whenever this one comes back, a bound.
        retried = start_retries if scanned == 1 and row[1] == start_path else 0
        if cut and (scanned > 1 or waited or gave_way) and retried < FIND_RETRIES:
            timed_out, resume = True, (row[1], skip, retried + 1)  # a full budget next page
            break
        found = found[skip:]
        room = limit - len(matches)
        matches.extend(found[:room])
        if len(found) > room:
            resume = (row[1], skip + room)
            break
        if cut:
            timed_out, resume = True, (row[1], -1)
            break
    if resume is None and cut_at:  # the rows ran out of budget before the page filled
        timed_out, resume = True, (cut_at[0], 0)
    out = {"matches": matches, "files_scanned": scanned, "timed_out": timed_out}
    return out | ({"next_cursor": _cursor(key, *resume)} if resume else {})


def _judged(
    rows: Iterable[_Row], passes: Callable[[_Row], bool], deadline: float, cut_at: list[str], at: int = 1
) -> Iterator[_Row]:
    """The rows ``passes`` lets through, until the budget runs out: then the
    path (``row[at]``) of the first row not judged is put in ``cut_at`` (a
    page resumes there). At least one row is judged a call, so following
    cursors always makes progress."""
    for judged, row in enumerate(rows):
        if judged and time.monotonic() > deadline:
            cut_at.append(str(row[at]))
            return
        if passes(row):
            yield row


def _with_reps(
    candidates: Iterable[_DocRow], with_text: bool, batch_size: int = 32
) -> Iterator[tuple[_DocRow, list[_RepRow]]]:
    """Candidate rows with their searchable representations, fetched a batch of documents at a time."""
    remaining = iter(candidates)
    while batch := list(itertools.islice(remaining, batch_size if with_text else 1)):
        reps: dict[int, list[_RepRow]] = {}
        if with_text:
            rows = Representation.objects.filter(document_id__in=[r[0] for r in batch], deleted=False)
            for rep in rows.values_list("document_id", "rep_id", "rep_type", "text", "meta_json"):
                reps.setdefault(rep[0], []).append(rep[1:])
        for row in batch:
            mine = sorted(reps.get(row[0], []), key=lambda r: (_REP_ORDER.get(r[1], 99), r[0]))
            # annotation_json is flattened into annotation_text; search it only when that is absent.
            if any(r[1] == RepType.ANNOTATION_TEXT for r in mine):
                mine = [r for r in mine if r[1] != RepType.ANNOTATION_JSON]
            yield row, mine


def _doc_matches(
    engine: ExclusionEngine,
    pattern: _Pattern,
    base: JsonObject,
    reps: list[_RepRow],
    per_file: int,
    deadline: float,
) -> tuple[list[JsonObject], bool]:
    """Up to ``per_file`` matches in the document's texts, and whether the time budget ran out.

    Each match is quoted only when the text around it holds no credential
    (:func:`_match`). A document whose texts hold a credential under the
    rules as they are now (a secret pattern added since it was indexed)
    gives no match at all: a regular expression reads more than its match
    (``anchor(?=[\\s\\S]{1200}KEY-q)`` told the credential's characters
    one by one, session 29), and a literal in a PEM key's body, past the
    window around it, quoted the key a line at a time (session 30)."""
    found: list[JsonObject] = []
    screened = False
    for rep_id, rep_type, text, meta in reps:
        paged = rep_type == RepType.OCR_MARKDOWN or (rep_type == RepType.RAW_TEXT and "pages" in (meta or {}))
        timed = None
        try:
            for pos, end in pattern.spans(text, per_file):
                if time.monotonic() > deadline:
                    return found, True
                if not screened:  # every text of the document, once, at its first match
                    if any(engine.find_secret(whole) for _, _, whole, _ in reps):
                        return [], False
                    screened = True
                if rep_type == RepType.TRANSCRIPT and timed is None:
                    chunks = _time_chunks(rep_id)
                    timed = list(zip(chunks, _locate(text, [c[2] for c in chunks]) or [], strict=False))
                hit = _match(engine, base, rep_type, text, pos, end, paged, timed)
                if hit is not None:
                    found.append(hit)
                if len(found) >= per_file:
                    return found, False
        except patterns.Overrun:
            return found, True
    return found, False


def _match(
    engine: ExclusionEngine,
    base: JsonObject,
    rep_type: str,
    text: str,
    pos: int,
    end: int,
    paged: bool,
    timed: list[tuple[tuple[int, int, str], tuple[int, int]]] | None,
) -> JsonObject | None:
    line_start = max(text.rfind("\n", 0, pos), text.rfind(PAGE_SEPARATOR, 0, pos)) + 1
    ends = [i for i in (text.find("\n", pos), text.find(PAGE_SEPARATOR, pos)) if i >= 0]
    line_end = min(ends) if ends else len(text)
    width = SNIPPET_CHARS - 2  # room for an ellipsis on each side
    left = max(line_start, min(pos - width // 3, line_end - width))
    right = min(line_end, left + width)
    snippet = ("…" if left > line_start else "") + text[left:right] + ("…" if right < line_end else "")
    # Screen around the snippet and the whole match: a secret cut by the window is still a secret.
    if engine.find_secret(text[max(0, min(left, pos) - _CONTEXT) : max(right, end) + _CONTEXT]):
        return None
    span = SpanRef("page", text.count(PAGE_SEPARATOR, 0, pos) + 1, 0) if paged else None
    for (start_ms, end_ms, _), (lo, hi) in timed or ():
        if lo <= pos < hi:
            span = SpanRef("time", start_ms, end_ms)
            break
    if span is None:
        first = text.count("\n", 0, pos) + 1
        span = SpanRef("lines", first, first + text.count("\n", pos, max(pos, end - 1)))
    return base | {"span": span.as_dict(), "snippet": snippet.strip(), "rep_type": rep_type}
