"""On-demand provider work for the MCP tools: transcribe one file, annotate one document.

Both persist what they make through the writer, so the result is searchable
(lexically at once; embedded on the indexer's next pass) and survives restarts.

The file may change meanwhile (the watcher's indexer works on it too). The
audio is read as one version (:func:`corpus.files.read_settled`); an
annotation is stored only if the text it was made from is still the
document's, else returned with ``stored: false``.

Both are screened as the indexer screens what it stores (the one
:func:`corpus.ingest.prepare.screen_extracted`, the one
:meth:`~corpus.security.ExclusionEngine.redact`): a transcript holding a
credential is refused (``FORBIDDEN``) and recorded skipped, or stored and
returned redacted in redact mode, and is never cached; an annotation is
made only from text the index may hold, and refused or redacted likewise.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace

from django.db import IntegrityError, transaction

from corpus import files
from corpus.ingest import writer
from corpus.ingest.chunking import ChunkDraft, chunk_prose
from corpus.ingest.classify import classify
from corpus.ingest.cut import chunk_document
from corpus.ingest.extracted import RAW_TEXT, Extracted
from corpus.ingest.media import OCR_MARKDOWN
from corpus.ingest.prepare import (
    HEAD_BYTES,
    Prepared,
    Preparer,
    capabilities_for,
    screen_extracted,
    secret_reason,
    sha256_hex,
)
from corpus.ingest.transcripts import TRANSCRIPT, transcribe_audio
from corpus.models import Document, Representation
from corpus.providers.annotate import annotate, flatten
from corpus.providers.stt import ElevenLabsStt, MistralStt, Transcript
from corpus.security import ExclusionEngine, OpenedFile
from kernel import errors
from kernel.config import Config
from kernel.jsontypes import JsonObject
from kernel.state import StateDir

ANNOTATION_JSON = "annotation_json"
ANNOTATION_TEXT = "annotation_text"
# The representation an annotation reads, best first.
BEST_TEXT = (OCR_MARKDOWN, TRANSCRIPT, RAW_TEXT)


@dataclass(frozen=True)
class Workspace:
    """What on-demand work needs: the corpus, its config, and the secret resolver."""

    config: Config
    state: StateDir
    engine: ExclusionEngine
    secret: Callable[[str], str | None]


def _key(ws: Workspace, name: str, var: str) -> str:
    value = ws.secret(name)
    if not value:
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID, f"Missing {var}", hint=f"set env {var}=... or run: dir2mcp config init"
        )
    return value


def _read(ws: Workspace, rel_path: str) -> tuple[str, bytes, os.stat_result]:
    """The file's bytes (up to the audio limit, plus one) and the ``fstat`` of what was read.

    Through :meth:`ExclusionEngine.open`: only a regular file is ever
    opened (a FIFO is ``FILE_NOT_FOUND``, never a blocked thread), and what
    is read is what the path check saw. One version of the file: a read it
    changed under is read again (:func:`corpus.files.read_settled`); a file
    still being written after that is ``INDEX_NOT_READY``, retryable.
    """
    limit = ws.config.max_bytes_for("audio") + 1

    def read(opened: OpenedFile) -> tuple[str, bytes, os.stat_result]:
        try:
            return opened.rel, opened.read(limit), opened.st
        except OSError:
            raise errors.Dir2mcpError(errors.FILE_NOT_FOUND, f"cannot read: {opened.rel}") from None

    try:
        return files.read_settled(ws.engine, rel_path, read)
    except files.Unsettled as exc:
        raise errors.Dir2mcpError(
            errors.INDEX_NOT_READY,
            f"{exc.rel} is still being written (it changed during every read); try again",
        ) from None


def _stt_key(ws: Workspace) -> str:
    if ws.config.stt.provider == "elevenlabs":
        return _key(ws, "elevenlabs_api_key", "ELEVENLABS_API_KEY")
    return _key(ws, "mistral_api_key", "MISTRAL_API_KEY")


def stt_provider(ws: Workspace) -> MistralStt | ElevenLabsStt:
    cache = ws.state.cache / "transcribe" if ws.config.ingest.audio.cache else None
    provider = ElevenLabsStt if ws.config.stt.provider == "elevenlabs" else MistralStt
    stt = provider(ws.config, api_key=_stt_key(ws), cache_dir=cache)
    stt.holds_secret = ws.engine.find_secret
    return stt


def transcribe_file(
    ws: Workspace,
    rel_path: str,
    *,
    language: str | None = None,
    timestamps: bool = True,
    refresh: bool = False,
) -> JsonObject:
    """Transcribe an audio file now and store its ``transcript`` (spec §15.7 output)."""
    ws.engine.resolve(rel_path)  # path errors first (reads nothing)
    _stt_key(ws)  # then the key: without one, the file is not read at all
    rel, data, st = _read(ws, rel_path)
    doc_type = classify(rel.rsplit("/", 1)[-1], data[:HEAD_BYTES])
    if doc_type != "audio":
        raise errors.Dir2mcpError(errors.DOC_TYPE_UNSUPPORTED, f"{rel} is not an audio file ({doc_type})")
    if len(data) > ws.config.max_bytes_for("audio"):
        raise errors.Dir2mcpError(errors.FILE_TOO_LARGE, f"{rel} exceeds the audio size limit")
    preparer = Preparer(ws.config, ws.engine, capabilities_for(ws.config, ws.secret))
    if not refresh:
        _refuse_known_secret(rel, sha256_hex(data), preparer.policy_hash("audio", secret=True))
    stt = stt_provider(ws)
    stt.timestamps, stt.language = timestamps, language
    try:
        transcribed = transcribe_audio(rel.rsplit("/", 1)[-1], data, _Refreshing(stt, refresh))
    finally:
        stt.close()
    rule, extracted = screen_extracted(ws.engine, transcribed)
    prepared = Prepared(
        rel_path=rel,
        source_type="file",
        doc_type="audio",
        size=st.st_size,
        mtime_ns=st.st_mtime_ns,
        content_hash=sha256_hex(data),
        policy_hash=preparer.policy_hash("audio", secret=rule is not None),
    )
    if extracted is None:
        assert rule is not None  # screen_extracted drops a document only for a rule it found
        # Recorded as the indexer records it: skipped, what the document held
        # retired, refused to every reader (corpus.files.live_document).
        _write_document(preparer.skipped(prepared, errors.SECRET_DETECTED, secret_reason(ws.engine, rule)))
        raise errors.Dir2mcpError(
            errors.FORBIDDEN,
            f"{rel}: its transcript matches a secret pattern ({rule}); not stored, not returned",
        )
    prepared.extracted = extracted
    prepared.drafts = chunk_document(
        extracted, kind="text", config=ws.config.chunking, rel_path=rel, doc_type="audio"
    )
    _write_document(prepared)
    result = {
        "rel_path": rel,
        "provider": extracted.meta["provider"],
        "model": extracted.meta["model"],
        "indexed": True,
    }
    if timestamps:
        segments = extracted.segments or ()
        result["segments"] = [{"start_ms": s.start_ms, "end_ms": s.end_ms, "text": s.text} for s in segments]
    return result


def _refuse_known_secret(rel: str, content_hash: str, policy_hash: str) -> None:
    """FORBIDDEN, without sending the recording again, when this content was
    found to hold a credential under this policy (by the indexer or by a
    transcription before): skipped ``SECRET_DETECTED``, and not cached."""
    found = Document.objects.filter(
        rel_path=rel, deleted=False, status="skipped", error__startswith=errors.SECRET_DETECTED,
        content_hash=content_hash, policy_hash=policy_hash,
    )  # fmt: skip
    if found.exists():
        raise errors.Dir2mcpError(
            errors.FORBIDDEN, f"{rel}: its transcript matches a secret pattern; not stored, not returned"
        )


def _write_document(prepared: Prepared) -> None:
    """Write ``prepared`` as its path's document. The indexer may create that
    document between the look-up and the insert (two transactions on
    PostgreSQL; SQLite's writes take turns): the insert then fails on the
    unique path and is done again as an update of the row it made."""
    for attempt in range(2):
        try:
            with transaction.atomic():
                doc = Document.objects.filter(rel_path=prepared.rel_path).first()
                writer.write_document(prepared, doc.doc_id if doc else None)
            return
        except IntegrityError:
            if attempt:
                raise


class _Refreshing:
    """An STT provider whose cache is bypassed when asked to retranscribe."""

    def __init__(self, stt: MistralStt | ElevenLabsStt, refresh: bool) -> None:
        self.stt, self.refresh = stt, refresh

    def transcribe(self, name: str, data: bytes) -> Transcript:
        return self.stt.transcribe(name, data, refresh=self.refresh)


def stored_transcript(ws: Workspace, rel_path: str) -> Representation | None:
    """The stored transcript, if it was made from the file's current content.

    The file is read (to compare its hash) only when there is a transcript
    to compare with.
    """
    rel = ws.engine.resolve(rel_path).rel
    doc = Document.objects.filter(rel_path=rel, deleted=False).first()
    if doc is None or doc.status != "ok":
        return None
    rep = Representation.objects.filter(document=doc, rep_type=TRANSCRIPT, deleted=False).first()
    if rep is None:
        return None
    try:
        _, data, _ = _read(ws, rel)
    except errors.Dir2mcpError as exc:
        if exc.code != errors.INDEX_NOT_READY:
            raise
        return None  # still being written: not the transcribed version
    return rep if doc.content_hash == sha256_hex(data) else None


def best_text(rel: str) -> tuple[Document, Representation]:
    """The document's best text; FORBIDDEN for one skipped for a secret, as every reader."""
    doc, reps = files.live_document(rel)
    for rep_type in BEST_TEXT:
        if rep_type in reps and reps[rep_type].text.strip():
            assert doc is not None  # there are representations only of a document
            return doc, reps[rep_type]
    raise errors.Dir2mcpError(
        errors.INDEX_NOT_READY,
        f"{rel} has no indexed text yet (not indexed, skipped, or still being indexed)",
    )


def annotate_document(
    ws: Workspace, rel_path: str, schema: JsonObject, *, index_flattened_text: bool = True
) -> JsonObject:
    """Structured extraction over a document's best text (spec §15.8 output)."""
    rel = ws.engine.resolve(rel_path).rel  # the one path check: refuses excluded paths and escapes
    if schema.get("type", "object") != "object":
        raise errors.Dir2mcpError(errors.INVALID_FIELD, "schema_json must describe an object (type: object)")
    doc, source = best_text(rel)
    result, _cached = annotate(
        ws.config,
        api_key=_key(ws, "mistral_api_key", "MISTRAL_API_KEY"),
        text=_screened(ws, rel, source.text),
        schema=schema,
        cache_dir=ws.state.cache / "annotations",
    )
    result = _screened_object(ws, rel, result)
    meta = {"provider": "mistral", "model": ws.config.annotations.model, "source": source.rep_type}
    text = _screened(ws, rel, "\n".join(flatten(result)))
    with transaction.atomic():
        stored = _still_current(doc, source)
        if stored:
            as_json = Extracted(
                rep_type=ANNOTATION_JSON, text=json.dumps(result, ensure_ascii=False), meta=meta
            )
            writer.write_extra_representation(doc.doc_id, _prepared(rel, as_json, drafts=[]))
        if stored and index_flattened_text and text:
            flat = Extracted(rep_type=ANNOTATION_TEXT, text=text, meta=meta)
            cfg = ws.config.chunking
            drafts = chunk_prose(
                text, max_chars=cfg.max_chars, overlap_chars=cfg.overlap_chars, min_chars=cfg.min_chars
            )
            drafts = [replace(draft, context=rel) for draft in drafts]
            writer.write_extra_representation(doc.doc_id, _prepared(rel, flat, drafts=drafts))
    return {
        "rel_path": rel,
        "stored": stored,
        "flattened_indexed": bool(stored and index_flattened_text and text),
        "annotation_json": result,
        "annotation_text_preview": text[:1000],
    }


def _screened(ws: Workspace, rel: str, text: str) -> str:
    """``text`` as the index may hold it: redacted in redact mode, else
    FORBIDDEN when it holds a credential (what is sent to the provider or
    stored passes here)."""
    text = files.redacted_text(ws.engine, rel, text)
    files.screen(ws.engine, rel, text)
    return text


def _screened_result(ws: Workspace, rel: str, value: object) -> object:
    """An annotation (JSON) with each string :func:`_screened`: the model
    may echo or make up what matches a secret rule."""
    if isinstance(value, str):
        return _screened(ws, rel, value)
    if isinstance(value, dict):
        return _screened_object(ws, rel, value)
    if isinstance(value, list):
        return [_screened_result(ws, rel, item) for item in value]
    return value


def _screened_object(ws: Workspace, rel: str, value: JsonObject) -> JsonObject:
    return {_screened(ws, rel, key): _screened_result(ws, rel, item) for key, item in value.items()}


def _still_current(doc: Document, source: Representation) -> bool:
    """Whether ``source`` is still the live text of the live ``doc`` (in the
    caller's transaction, the document's row locked on PostgreSQL, so the
    indexer's next write of it, which retires every other representation,
    comes after). The file may have been edited or deleted during the
    provider's call: an annotation of text the document no longer holds is
    not stored."""
    live = Document.objects.select_for_update().filter(doc_id=doc.doc_id, deleted=False).first()
    return (
        live is not None
        and Representation.objects.filter(
            rep_id=source.rep_id, rep_hash=source.rep_hash, deleted=False
        ).exists()
    )


def _prepared(rel: str, extracted: Extracted, *, drafts: list[ChunkDraft]) -> Prepared:
    return Prepared(
        rel_path=rel, source_type="file", doc_type="", size=0, mtime_ns=0, extracted=extracted, drafts=drafts
    )
