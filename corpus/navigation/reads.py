"""Read utilities for agents (issue #32, from seed 002): a file's checksum, a
unified diff of two documents' text, and several slices in one call.

Each reads through the one check and open (``corpus/files.py``,
:meth:`~corpus.security.ExclusionEngine.open`): a path outside the root, an
excluded or secret-bearing file is refused as ``open_file`` refuses it, and
what a diff returns is screened for secrets like any returned text.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
from collections.abc import Callable
from typing import NamedTuple

from corpus import errors, files
from corpus.security import ARCHIVE_SEPARATOR, ExclusionEngine

ALGORITHMS = ("sha256", "md5", "sha1", "sha512")
#: the largest file a checksum reads
MAX_CHECKSUM_BYTES = 1024 * 1024 * 1024
_BLOCK = 1024 * 1024
#: the text a diff reads of each side (characters), and the lines it compares
MAX_DIFF_CHARS = 2 * 1024 * 1024
MAX_DIFF_LINES = 50_000


def checksum(
    engine: ExclusionEngine, rel_path, *, algorithm: str = "sha256", check: Callable[[], None] = lambda: None
) -> dict:
    """The digest of the file's bytes as they are now (one version: a file
    that changed while it was hashed is hashed again). ``check`` is called
    between blocks: a caller that stops the work raises from it."""
    if algorithm not in ALGORITHMS:
        raise errors.Dir2mcpError(
            errors.INVALID_FIELD, f"algorithm must be one of {', '.join(ALGORITHMS)}, not {algorithm!r}"
        )
    if not isinstance(rel_path, str) or not rel_path:
        raise errors.Dir2mcpError(errors.MISSING_FIELD, "rel_path is required")

    def hashed(opened) -> dict:
        if ARCHIVE_SEPARATOR in opened.rel:  # the opener opened the archive
            raise errors.Dir2mcpError(
                errors.DOC_TYPE_UNSUPPORTED, "a checksum is of a file's bytes: ask for the archive itself"
            )
        files.live_document(opened.rel, raw_bytes=True)  # refuses one skipped for, or redacted of, a secret
        if opened.st.st_size > MAX_CHECKSUM_BYTES:
            raise errors.Dir2mcpError(
                errors.FILE_TOO_LARGE, f"{opened.rel} is over the {MAX_CHECKSUM_BYTES}-byte checksum limit"
            )
        hasher = hashlib.new(algorithm)
        size = 0
        while block := opened.read(_BLOCK):
            check()
            hasher.update(block)
            size += len(block)
        return {
            "rel_path": opened.rel,
            "algorithm": algorithm,
            "digest": hasher.hexdigest(),
            "size_bytes": size,
        }

    try:
        return files.read_settled(engine, rel_path, hashed)
    except files.Unsettled as unsettled:
        raise errors.Dir2mcpError(
            errors.INDEX_NOT_READY, f"{unsettled.rel} kept changing while it was read; try again"
        ) from None


def diff(
    engine: ExclusionEngine, rel_path_a, rel_path_b, *, context: int = 3, max_chars: int = 20000
) -> dict:
    """A unified diff of two documents' text: lines of text files, or the
    indexed text of converted ones (two PDFs' text layers or OCR, page by
    page), capped at ``max_chars`` with ``truncated``."""
    a, b = (_diff_text(engine, rel) for rel in (rel_path_a, rel_path_b))
    lines = difflib.unified_diff(
        a.lines, b.lines, fromfile=a.rel_path, tofile=b.rel_path, n=context, lineterm=""
    )
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


class _Side(NamedTuple):
    rel_path: str
    lines: list[str]
    truncated: bool


def _diff_text(engine: ExclusionEngine, rel_path) -> _Side:
    document = files.read_document(engine, rel_path, max_chars=MAX_DIFF_CHARS)
    if document.pages is not None:
        numbered = ([f"--- page {n} ---", *page.split("\n")] for n, page in enumerate(document.pages, 1))
        lines = list(itertools.chain.from_iterable(numbered))
    else:
        lines = (document.lines or "").split("\n")
    if len(lines) > MAX_DIFF_LINES:
        return _Side(document.rel_path, lines[:MAX_DIFF_LINES], True)
    return _Side(document.rel_path, lines, document.truncated)
