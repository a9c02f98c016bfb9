"""Reading index state for `status`, `stats` and corpus.json.

Everything here only reads, so it works while another process indexes
(SQLite WAL gives readers a consistent snapshot).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from django.db.models import Count

from corpus.config import Config
from corpus.models import Chunk, Document, EmbeddingStatus, IndexJob, Representation, Setting
from corpus.state import StateDir, write_json

logger = logging.getLogger(__name__)


def doc_counts() -> dict[str, int]:
    """Live documents by doc_type."""
    rows = Document.objects.filter(deleted=False).values("doc_type").annotate(n=Count("doc_id"))
    return {row["doc_type"]: row["n"] for row in rows.order_by("doc_type")}


def status_counts() -> dict[str, int]:
    rows = Document.objects.filter(deleted=False).values("status").annotate(n=Count("doc_id"))
    return {row["status"]: row["n"] for row in rows.order_by("status")}


@dataclass
class IndexSummary:
    documents: int
    by_type: dict[str, int]
    by_status: dict[str, int]
    deleted: int
    representations: int
    chunks: int
    embedded: int
    pending: int
    embed_error: str
    job: IndexJob | None
    job_alive: bool
    recent_errors: list[tuple[str, str]] = field(default_factory=list)
    #: skipped documents waiting for a provider key, by reason ("needs MISTRAL_API_KEY": 3)
    needs_provider: dict[str, int] = field(default_factory=dict)


def latest_job() -> IndexJob | None:
    return IndexJob.objects.order_by("-started_unix").first()


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def summarize(*, error_limit: int = 10) -> IndexSummary:
    by_type = doc_counts()
    live_chunks = Chunk.objects.filter(deleted=False)
    job = latest_job()
    errors = list(
        Document.objects.filter(deleted=False, status="error")
        .order_by("-indexed_unix")
        .values_list("rel_path", "error")[:error_limit]
    )
    return IndexSummary(
        documents=sum(by_type.values()),
        by_type=by_type,
        by_status=status_counts(),
        deleted=Document.objects.filter(deleted=True).count(),
        representations=Representation.objects.filter(deleted=False).count(),
        chunks=live_chunks.count(),
        embedded=live_chunks.filter(embedding_status=EmbeddingStatus.OK).count(),
        pending=live_chunks.filter(embedding_status=EmbeddingStatus.PENDING).count(),
        embed_error=Setting.objects.filter(key="embed_last_error").values_list("value", flat=True).first()
        or "",
        job=job,
        job_alive=bool(job and job.running and pid_alive(job.pid)),
        recent_errors=[(path, err or "") for path, err in errors],
        needs_provider=needs_provider_counts(),
    )


def needs_provider_counts() -> dict[str, int]:
    """Skipped documents that a provider key would index, counted by reason."""
    rows = (
        Document.objects.filter(deleted=False, status="skipped", error__startswith="needs ")
        .values("error")
        .annotate(n=Count("doc_id"))
    )
    return {row["error"]: row["n"] for row in rows.order_by("error")}


def write_corpus_json(root: Path, state: StateDir, config: Config, job: IndexJob) -> None:
    """``corpus.json`` (spec §4.4): profile, models and the job's counters."""
    counts = doc_counts()
    total = sum(counts.values()) or 1
    summary = {
        "root": str(root),
        "profile": {"doc_counts": counts, "code_ratio": round(counts.get("code", 0) / total, 3)},
        "models": models_summary(config),
        "indexing": {
            "job_id": job.job_id,
            "running": job.running,
            "mode": job.mode,
            **job.counters(),
        },
    }
    try:
        write_json(state.corpus_json, summary)
    except OSError as exc:
        logger.warning("cannot write %s: %s", state.corpus_json, exc)


def models_summary(
    config: Config, *, embedder=None, chat=None, live: bool = False, secret=None
) -> dict[str, str]:
    """The models in use. With ``live``, embeddings and chat name what this
    process actually runs (``none`` when off), not the Mistral defaults; with
    ``secret`` too, OCR and speech-to-text say which key they still need."""
    stt = config.stt.provider
    summary = {
        "embed_text": config.mistral.embed_text_model,
        "embed_code": config.mistral.embed_code_model,
        "ocr": config.mistral.ocr_model,
        "stt_provider": stt,
        "stt_model": getattr(config.stt, stt).model,
        "chat": config.mistral.chat_model,
    }
    if live:
        for kind in ("text", "code"):
            info = embedder.model_info(kind) if embedder is not None else None
            summary[f"embed_{kind}"] = f"{info.provider}/{info.model}" if info else "none"
        summary["chat"] = f"{chat.provider}/{chat.model}" if chat is not None else "none"
    if live and secret is not None:
        from corpus.ingest.pipeline import capabilities_for

        caps = capabilities_for(config, secret)
        if not caps.ocr:
            summary["ocr"] = f"none ({caps.ocr_missing})"
        if not caps.stt:
            summary["stt_model"] = f"none ({caps.stt_missing})"
    return summary
