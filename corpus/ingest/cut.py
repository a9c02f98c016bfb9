"""Which chunker a representation goes to (spec §7.5): pages, time windows,
code units or line windows, prose."""

from __future__ import annotations

from dataclasses import replace

from corpus.ingest.chunking import (
    MAX_CODE_CHUNK_CHARS,
    ChunkDraft,
    chunk_code,
    chunk_pages,
    chunk_prose,
    chunk_segments,
)
from corpus.ingest.extracted import Extracted
from corpus.ingest.generated import is_generated
from corpus.ingest.sections import chunk_sections
from corpus.ingest.units import Parsed, code_units
from kernel.config import ChunkingConfig


def chunk_document(
    extracted: Extracted,
    *,
    kind: str,
    config: ChunkingConfig,
    rel_path: str = "",
    doc_type: str = "",
    parsed: Parsed | None = None,
    generated: bool | None = None,
) -> list[ChunkDraft]:
    """Chunk a representation: per page if it has pages, code by definitions
    (or line windows, as a generated file is: corpus/ingest/generated.py;
    ``generated`` says whether it is, when the caller knows), prose by
    sections (or character windows). Every chunk has a context, at
    least its path: a chunk without one was cut by an older format (status
    reports those until they are re-cut)."""
    if kind == "code" and generated is None:
        generated = is_generated(extracted.text)
    drafts = _cut(extracted, kind, config, rel_path, doc_type, parsed, bool(generated))
    if not rel_path:
        return drafts
    return [draft if draft.context else replace(draft, context=rel_path) for draft in drafts]


def _cut(
    extracted: Extracted,
    kind: str,
    config: ChunkingConfig,
    rel_path: str,
    doc_type: str,
    parsed: Parsed | None,
    generated: bool,
) -> list[ChunkDraft]:
    sizes = {
        "max_chars": config.max_chars,
        "overlap_chars": config.overlap_chars,
        "min_chars": config.min_chars,
    }
    if extracted.segments:
        transcript = config.transcript
        return chunk_segments(
            extracted.segments, segment_ms=transcript.segment_ms, overlap_ms=transcript.overlap_ms
        )
    if extracted.pages is not None:
        return chunk_pages(extracted.pages, **sizes)
    if kind == "code":
        code = config.code
        drafts = None
        if code.mode == "units" and not generated:
            drafts = code_units(extracted.text, rel_path, unit_max_lines=code.unit_max_lines, parsed=parsed)
        if drafts is None:
            drafts = chunk_code(extracted.text, max_lines=code.max_lines, overlap_lines=code.overlap_lines)
        if all(len(draft.text) <= MAX_CODE_CHUNK_CHARS for draft in drafts):
            return drafts
        return chunk_prose(extracted.text, **sizes)
    prose = prose_format(doc_type, rel_path)
    if config.prose_mode == "sections" and prose:
        return chunk_sections(extracted.text, fmt=prose, path=rel_path, **sizes)
    return chunk_prose(extracted.text, **sizes)


def prose_format(doc_type: str, rel_path: str) -> str | None:
    """How :func:`chunk_sections` should read a document, or None for windows."""
    if doc_type in ("md", "html"):
        return doc_type
    if doc_type == "text":
        return "rst" if rel_path.lower().endswith((".rst", ".rest")) else "text"
    return None
