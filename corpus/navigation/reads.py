"""Read utilities for agents (issue #32, from seed 002): a file's checksum, a
unified diff of two documents' text, several slices in one call, and a
file's bytes by range (text or base64) or an image file as an image.

Each reads through the one check and open (``corpus/files.py``,
:meth:`~corpus.security.ExclusionEngine.open`): a path outside the root, an
excluded or secret-bearing file is refused as ``open_file`` refuses it, and
what a diff or a byte range returns is screened for secrets like any
returned text.
"""

from __future__ import annotations

import base64
import collections
import difflib
import hashlib
import itertools
from collections.abc import Callable, Iterator
from typing import NamedTuple

from corpus import containers, files
from corpus.documents import mime_type
from corpus.ingest.classify import SNIFF_BYTES, TEXTUAL_TYPES, classify
from corpus.navigation import images
from corpus.security import ARCHIVE_SEPARATOR, ExclusionEngine, OpenedFile
from kernel import errors
from kernel.jsontypes import JsonObject

ALGORITHMS = ("sha256", "md5", "sha1", "sha512")
#: the largest file a checksum reads
MAX_CHECKSUM_BYTES = 1024 * 1024 * 1024
_BLOCK = 1024 * 1024
#: the text a diff reads of each side (characters), and the lines it compares
MAX_DIFF_CHARS = 2 * 1024 * 1024
MAX_DIFF_LINES = 50_000
#: how much matching a diff may do: steps of difflib's inner loop, counted
#: before each search for a longest match (a few seconds of CPU at most).
#: Past it the lines between the first and the last change are one hunk: the
#: diff stays right, not minimal. Two 50,000-line files with 50 changes
#: spread through them need about 600,000.
MAX_DIFF_WORK = 2_000_000
FORMATS = ("auto", "text", "base64", "image")
#: the bytes a range read returns unless asked for another length, and the most
DEFAULT_LENGTH = 64 * 1024
MAX_LENGTH = 1024 * 1024
# Bytes screened for secrets on each side of a returned range, so a range
# that cuts a key cannot leak it, nor one in the middle of a private key
# block (files.LIVE_CONTEXT).
_CONTEXT = files.LIVE_CONTEXT
# The longest UTF-8 character, less one: how far a text range moves to whole characters.
_UTF8_TAIL = 3


def _no_check() -> None:
    return None


def _the_file_itself(opened: OpenedFile, what: str) -> None:
    """Refuse a document skipped for a secret (an archive member too) or
    served only redacted (its bytes hold the credential), and an archive
    member (the opener opened the archive)."""
    files.live_document(opened.rel, raw_bytes=True)
    if ARCHIVE_SEPARATOR in opened.rel:
        raise errors.Dir2mcpError(
            errors.DOC_TYPE_UNSUPPORTED, f"{what} is of a file's bytes: ask for the archive itself"
        )


def checksum(
    engine: ExclusionEngine,
    rel_path: object,
    *,
    algorithm: str = "sha256",
    check: Callable[[], None] = lambda: None,
) -> JsonObject:
    """The digest of the file's bytes as they are now (one version: a file
    that changed while it was hashed is hashed again). ``check`` is called
    between blocks: a caller that stops the work raises from it."""
    if algorithm not in ALGORITHMS:
        raise errors.Dir2mcpError(
            errors.INVALID_FIELD, f"algorithm must be one of {', '.join(ALGORITHMS)}, not {algorithm!r}"
        )
    if not isinstance(rel_path, str) or not rel_path:
        raise errors.Dir2mcpError(errors.MISSING_FIELD, "rel_path is required")

    def hashed(opened: OpenedFile) -> JsonObject:
        _the_file_itself(opened, "a checksum")
        if opened.st.st_size > MAX_CHECKSUM_BYTES:
            raise errors.Dir2mcpError(
                errors.FILE_TOO_LARGE, f"{opened.rel} is over the {MAX_CHECKSUM_BYTES}-byte checksum limit"
            )
        _servable_whole(engine, opened)
        opened.file.seek(0)
        hasher = hashlib.new(algorithm)
        size, tail = 0, b""
        while block := opened.read(_BLOCK):
            check()
            window = tail + block
            _screen_bytes(engine, opened.rel, window)  # as read_bytes would, range after range
            tail = window[-_CONTEXT:]
            hasher.update(block)
            size += len(block)
        return {
            "rel_path": opened.rel,
            "algorithm": algorithm,
            "digest": hasher.hexdigest(),
            "size_bytes": size,
        }

    return _settled(engine, rel_path, hashed)


def _servable_whole(engine: ExclusionEngine, opened: OpenedFile) -> str:
    """The file's kind (:func:`classify`); FORBIDDEN for a file whose bytes
    no raw reader serves for what they pack: an archive, a zip document or
    a PDF whose part holds a secret. ``checksum`` asks it too: a digest of
    bytes no reader serves tests guesses of a short secret in them against
    the rest of the file (until session 23 it answered for all of these)."""
    opened.file.seek(0)
    head = opened.read(SNIFF_BYTES)
    kind = classify(opened.rel.rsplit("/", 1)[-1], head)
    files.refuse_archive_bytes(opened.rel, kind, head)
    containers.screen_zip_parts(engine, opened)
    return kind


def _settled(engine: ExclusionEngine, rel_path: str, read: Callable[[OpenedFile], JsonObject]) -> JsonObject:
    """``read`` of one version of the file (:func:`files.read_settled`)."""
    try:
        return files.read_settled(engine, rel_path, read)
    except files.Unsettled as unsettled:
        raise errors.Dir2mcpError(
            errors.INDEX_NOT_READY, f"{unsettled.rel} kept changing while it was read; try again"
        ) from None


def diff(
    engine: ExclusionEngine,
    rel_path_a: object,
    rel_path_b: object,
    *,
    context: int = 3,
    max_chars: int = 20000,
    check: Callable[[], None] = _no_check,
) -> JsonObject:
    """A unified diff of two documents' text: lines of text files, or the
    indexed text of converted ones (two PDFs' text layers or OCR, page by
    page), capped at ``max_chars`` with ``truncated``. ``check`` is called
    between searches for a match: a caller that stops the work raises from it."""
    a, b = (_diff_text(engine, rel) for rel in (rel_path_a, rel_path_b))
    lines = _unified(a, b, context, check)
    out, size, truncated, added, removed = [], 0, False, 0, 0
    for line in lines:
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
        if truncated:
            continue
        if size + len(line) + 1 > max_chars:
            truncated = True
            continue
        out.append(line)
        size += len(line) + 1
    text = "\n".join(out)
    files.screen(engine, f"{a.rel_path} / {b.rel_path}", text)
    return {
        "rel_path_a": a.rel_path,
        "rel_path_b": b.rel_path,
        "identical": not out,
        "added": added,
        "removed": removed,
        "diff": text,
        "truncated": truncated or a.truncated or b.truncated,
    }


class _TooCostly(Exception):
    """The matching ran past :data:`MAX_DIFF_WORK`."""


class _BoundedMatcher(difflib.SequenceMatcher[str]):
    """difflib's matcher, its work counted. Its search for a longest match
    costs, for each line of ``a`` in the range, that line's places in ``b``,
    and it searches once per matching block found: quadratic in the lines
    when many lines match once (a file and the same file with a line
    inserted after each: 5,000 lines took 37 s, 50,000 about an hour) or a
    few lines match often, in pure Python that no deadline stops (found
    2026-11-29). Each search is counted before it runs."""

    def __init__(self, a: list[str], b: list[str], check: Callable[[], None]) -> None:
        super().__init__(None, a, b)
        self.lines_a = a
        self.check = check
        self.spent = 0
        # Where each line of b may match, as difflib's autojunk sees it: a
        # line on more than 1% of 200 or more lines is never a match's start.
        self.places = collections.Counter(b)
        if len(b) >= 200:
            popular = len(b) // 100 + 1
            self.places = collections.Counter({line: n for line, n in self.places.items() if n <= popular})

    def find_longest_match(
        self, alo: int = 0, ahi: int | None = None, blo: int = 0, bhi: int | None = None
    ) -> difflib.Match:
        ahi = len(self.lines_a) if ahi is None else ahi
        places = self.places
        self.spent += (ahi - alo) + sum(map(places.__getitem__, self.lines_a[alo:ahi]))
        if self.spent > MAX_DIFF_WORK:
            raise _TooCostly()
        self.check()
        return super().find_longest_match(alo, ahi, blo, bhi)


def _grouped(a: list[str], b: list[str], context: int, check: Callable[[], None]) -> list[list[Opcode]]:
    """The hunks of a diff of ``a`` and ``b``: difflib's, or, when matching
    them would cost more than :data:`MAX_DIFF_WORK`, the common first and
    last lines kept and everything between them replaced, in one hunk."""
    try:
        return list(_BoundedMatcher(a, b, check).get_grouped_opcodes(context))
    except _TooCostly:
        pass
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    i2, j2 = len(a) - tail, len(b) - tail
    if head == i2 and head == j2:
        return []
    tag = "replace" if head < i2 and head < j2 else "delete" if head < i2 else "insert"
    lead, trail = min(context, head), min(context, tail)
    group: list[Opcode] = [("equal", head - lead, head, head - lead, head)] if lead else []
    group.append((tag, head, i2, head, j2))
    if trail:
        group.append(("equal", i2, i2 + trail, j2, j2 + trail))
    return [group]


Opcode = tuple[str, int, int, int, int]


def _hunk_range(start: int, stop: int) -> str:
    """A unified diff's range ``start,length`` (1-based; an empty range names the line before it)."""
    length = stop - start
    first = start + 1 if length else start
    return str(first) if length == 1 else f"{first},{length}"


def _unified(a: _Side, b: _Side, context: int, check: Callable[[], None]) -> Iterator[str]:
    """``difflib.unified_diff`` of the two sides (no dates, no line ends),
    over :func:`_grouped`'s bounded hunks."""
    groups = _grouped(a.lines, b.lines, context, check)
    if not groups:
        return
    yield f"--- {a.rel_path}"
    yield f"+++ {b.rel_path}"
    for group in groups:
        first, last = group[0], group[-1]
        yield f"@@ -{_hunk_range(first[1], last[2])} +{_hunk_range(first[3], last[4])} @@"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (" " + line for line in a.lines[i1:i2])
                continue
            if tag in ("replace", "delete"):
                yield from ("-" + line for line in a.lines[i1:i2])
            if tag in ("replace", "insert"):
                yield from ("+" + line for line in b.lines[j1:j2])


class _Side(NamedTuple):
    rel_path: str
    lines: list[str]
    truncated: bool


def _diff_text(engine: ExclusionEngine, rel_path: object) -> _Side:
    document = files.read_document(engine, rel_path, max_chars=MAX_DIFF_CHARS)
    if document.pages is not None:
        numbered = ([f"--- page {n} ---", *page.split("\n")] for n, page in enumerate(document.pages, 1))
        lines = list(itertools.chain.from_iterable(numbered))
    else:
        lines = (document.lines or "").split("\n")
    if len(lines) > MAX_DIFF_LINES:
        return _Side(document.rel_path, lines[:MAX_DIFF_LINES], True)
    return _Side(document.rel_path, lines, document.truncated)


# -- bytes -----------------------------------------------------------------------


def read_bytes(
    engine: ExclusionEngine,
    rel_path: object,
    *,
    offset: int | None = None,
    length: int | None = None,
    fmt: str = "auto",
    check: Callable[[], None] = _no_check,
) -> JsonObject:
    """``length`` bytes of the file from ``offset``, as text or base64, or an
    image file whole as an image (``_image_data``: base64).

    ``auto`` is ``image`` for an image file when no range is given, ``text``
    for a text file and ``base64`` otherwise. ``text`` decodes UTF-8 and
    moves the range to whole characters: its start back to the start of the
    character it falls in, its end back before a character it cuts (or on
    past the one character a range inside it holds); ``offset`` and
    ``length`` say what was returned, and ``lossy`` that bytes that are no
    UTF-8 became U+FFFD. A file that is not text is ``DOC_TYPE_UNSUPPORTED``
    as text. An offset past the end returns nothing, with ``eof``.
    """
    if fmt not in FORMATS:
        raise errors.Dir2mcpError(errors.INVALID_FIELD, f"format must be one of {', '.join(FORMATS)}")
    if not isinstance(rel_path, str) or not rel_path:
        raise errors.Dir2mcpError(errors.MISSING_FIELD, "rel_path is required")
    ranged = offset is not None or length is not None
    if fmt == "image" and ranged:
        raise errors.Dir2mcpError(
            errors.INVALID_FIELD, "an image is read whole: leave out offset and length, or ask format base64"
        )
    start = _bound("offset", offset, 0, 2**53 - 1, 0)
    count = _bound("length", length, 1, MAX_LENGTH, DEFAULT_LENGTH)

    def read(opened: OpenedFile) -> JsonObject:
        _the_file_itself(opened, "a byte range")
        kind = _servable_whole(engine, opened)  # an archive's, or a .docx's parts, compressed in its bytes
        chosen = _chosen(fmt, kind, ranged)
        check()
        if chosen == "image":
            return _image(engine, opened, kind, check)
        if chosen == "text" and kind not in TEXTUAL_TYPES:
            raise errors.Dir2mcpError(
                errors.DOC_TYPE_UNSUPPORTED,
                f"{opened.rel} is a {kind} file, not text: ask format base64 (or image for an image)",
            )
        return _range(engine, opened, start, count, chosen) | {"mime_type": mime_type(opened.rel, kind)}

    return _settled(engine, rel_path, read)


def _bound(name: str, value: object, low: int, high: int, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise errors.Dir2mcpError(errors.INVALID_FIELD, f"{name} must be an integer")
    if not low <= value <= high:
        raise errors.Dir2mcpError(errors.INVALID_RANGE, f"{name} must be from {low} to {high}")
    return value


def _chosen(fmt: str, kind: str, ranged: bool) -> str:
    if fmt != "auto":
        return fmt
    if kind == "image" and not ranged:
        return "image"
    return "text" if kind in TEXTUAL_TYPES else "base64"


def _range(engine: ExclusionEngine, opened: OpenedFile, offset: int, length: int, fmt: str) -> JsonObject:
    """The range with :data:`_CONTEXT` bytes on each side read and screened."""
    size = opened.st.st_size
    seek = max(0, min(offset, size) - _CONTEXT)
    opened.file.seek(seek)
    window = opened.read(offset - seek + length + _CONTEXT) if offset <= size else b""
    begin = min(offset - seek, len(window))
    end = min(begin + length, len(window))
    if fmt == "text":
        begin, end = _whole_characters(window, begin, end)
    _screen_bytes(engine, opened.rel, window)
    data = window[begin:end]
    first = seek + begin if window else offset
    out = {
        "rel_path": opened.rel,
        "format": fmt,
        "offset": first,
        "length": len(data),
        "size_bytes": size,
        "eof": first + len(data) >= size,
        "next_offset": first + len(data),
    }
    if fmt == "base64":
        return out | {"content": base64.b64encode(data).decode("ascii")}
    try:
        return out | {"content": data.decode("utf-8"), "lossy": False}
    except UnicodeDecodeError:
        return out | {"content": data.decode("utf-8", errors="replace"), "lossy": True}


def _continues(buf: bytes, i: int) -> bool:
    """Whether ``buf[i]`` continues a UTF-8 character begun before it."""
    return 0 < i < len(buf) and buf[i] & 0xC0 == 0x80


def _whole_characters(buf: bytes, begin: int, end: int) -> tuple[int, int]:
    """``begin:end`` moved to whole UTF-8 characters (see :func:`read_bytes`)."""
    for _ in range(_UTF8_TAIL):
        begin -= _continues(buf, begin)
    cut = end
    for _ in range(_UTF8_TAIL):
        cut -= _continues(buf, cut)
    if cut > begin or end <= begin:
        return begin, cut
    # The range lies inside one character: that character, whole.
    end = begin + 1
    while end - begin <= _UTF8_TAIL and _continues(buf, end):
        end += 1
    return begin, end


def _screen_bytes(engine: ExclusionEngine, rel: str, data: bytes) -> None:
    """FORBIDDEN when the bytes hold a secret: as Latin-1 (every byte one
    character, so ASCII and UTF-8 keys read as themselves), and without
    their NULs (a key in UTF-16 or UTF-32, at any alignment)."""
    files.screen(engine, rel, data.decode("latin-1"))
    if b"\x00" in data:
        files.screen(engine, rel, data.replace(b"\x00", b"").decode("latin-1"))


def _image(engine: ExclusionEngine, opened: OpenedFile, kind: str, check: Callable[[], None]) -> JsonObject:
    rel, size = opened.rel, opened.st.st_size
    if kind != "image":
        raise errors.Dir2mcpError(
            errors.DOC_TYPE_UNSUPPORTED, f"{rel} is a {kind} file, not an image: ask format text or base64"
        )
    if size > images.MAX_SOURCE_BYTES:
        raise errors.Dir2mcpError(
            errors.FILE_TOO_LARGE,
            f"{rel} is over the {images.MAX_SOURCE_BYTES}-byte limit of an image read; read it as base64",
        )
    opened.file.seek(0)
    data = opened.read(size + 1)
    check()
    fitted = images.fit(rel, data)
    _screen_bytes(engine, rel, fitted.data)
    return {
        "rel_path": rel,
        "format": "image",
        "offset": 0,
        "length": len(data),
        "size_bytes": size,
        "eof": True,
        "next_offset": len(data),
        "mime_type": fitted.mime_type,
        "image": {
            "width": fitted.width,
            "height": fitted.height,
            "data_bytes": len(fitted.data),
            "downscaled": fitted.downscaled,
            "recompressed": fitted.recompressed,
            "source_mime_type": fitted.source_mime_type,
            "source_width": fitted.source_width,
            "source_height": fitted.source_height,
        },
        "_image_data": base64.b64encode(fitted.data).decode("ascii"),
    }
