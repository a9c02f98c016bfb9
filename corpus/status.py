"""Reading index state for `status`, `stats` and corpus.json.

Everything here only reads, so it works while another process indexes
(SQLite WAL gives readers a consistent snapshot).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from django.db import connection
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
    #: live documents whose units an older format cut (re-cut by the next pass)
    older_format: int = 0


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
        job_alive=job_alive(job),
        recent_errors=[(path, err or "") for path, err in errors],
        needs_provider=needs_provider_counts(),
        older_format=older_format_documents(),
    )


def older_format_documents() -> int:
    """Live documents with units cut by an older format: every unit now has
    a context (at least its path), so a live chunk without one is older.
    They keep serving until the next pass re-cuts their files."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(DISTINCT r.document_id) FROM chunks c "
            "JOIN representations r ON r.rep_id = c.representation_id "
            "WHERE c.deleted = %s AND c.context = ''",
            [False],
        )
        return cursor.fetchone()[0]


#: A job dispatched from another machine counts as alive while its
#: coordinator keeps updating it (it does several times a second).
REMOTE_JOB_STALE_SECONDS = 60.0
#: Workers seen within this window are listed by ``status``.
WORKER_WINDOW_SECONDS = 600.0


def job_alive(job: IndexJob | None) -> bool:
    if job is None or not job.running:
        return False
    if job.host and job.host != socket.gethostname():
        return time.time() - job.updated_unix < REMOTE_JOB_STALE_SECONDS
    return pid_alive(job.pid)


def scaleout_summary(*, queue_timeout: float = 2.0) -> dict | None:
    """Celery's side of the index for ``status``: the broker (host only,
    never credentials), messages waiting in the queue, files the latest job
    still waits for, and the workers seen lately. None without a broker."""
    from django.conf import settings

    from corpus.models import JobItem, Worker

    broker = settings.CELERY_BROKER_URL
    if not broker:
        return None
    job = latest_job()
    waiting = JobItem.objects.filter(job=job).exclude(state=JobItem.DONE).count() if job else 0
    since = time.time() - WORKER_WINDOW_SECONDS
    workers = [
        {
            "name": w.name,
            "hostname": w.hostname,
            "pid": w.pid,
            "last_seen_unix": w.last_seen_unix,
            "tasks_done": w.tasks_done,
        }
        for w in Worker.objects.filter(last_seen_unix__gte=since).order_by("name")
    ]
    return {
        "broker": _redacted(broker),
        "queue": settings.CELERY_TASK_DEFAULT_QUEUE,
        "queued_messages": _queue_depth(settings.CELERY_TASK_DEFAULT_QUEUE, queue_timeout),
        "files_waiting": waiting,
        "workers": workers,
    }


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _queue_depth(queue: str, timeout: float) -> int | None:
    """Messages waiting in the broker's queue; None when it cannot be asked."""
    try:
        from dir2mcp_site.celery import app

        with app.connection_for_read() as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout)
            return conn.default_channel.queue_declare(queue=queue, passive=True).message_count
    except Exception as exc:  # an absent queue or an unreachable broker
        logger.info("cannot read the depth of queue %s: %s", queue, exc)
        return 0 if "NOT_FOUND" in str(exc) else None


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
        from corpus.providers.registry import UnavailableEmbedder

        for kind in ("text", "code"):
            info = embedder.model_info(kind) if embedder is not None else None
            summary[f"embed_{kind}"] = f"{info.provider}/{info.model}" if info else "none"
            if isinstance(embedder, UnavailableEmbedder):
                summary[f"embed_{kind}"] = f"none ({info.provider}/{info.model} {embedder.choice.reason})"
        summary["chat"] = f"{chat.provider}/{chat.model}" if chat is not None else "none"
    if live and secret is not None:
        from corpus.ingest.pipeline import capabilities_for

        caps = capabilities_for(config, secret)
        if not caps.ocr:
            summary["ocr"] = f"none ({caps.ocr_missing})"
        if not caps.stt:
            summary["stt_model"] = f"none ({caps.stt_missing})"
    return summary


def recorded_embedder(state: StateDir):
    """The embedder the index's vectors came from (an EmbedderModels); None before any (or
    before the store exists: this is read before ``open_store`` creates it)."""
    from django.db import DatabaseError

    from corpus.embedding import recorded_models
    from corpus.providers.registry import EmbedderModels
    from corpus.store import uses_state_sqlite

    if uses_state_sqlite(state) and not state.meta_db.exists():
        return None
    try:
        return EmbedderModels.from_infos(recorded_models())
    except DatabaseError:  # no settings table yet: nothing recorded
        return None


def embedder_choice(config: Config, state: StateDir, *, secrets_lookup):
    """The index's recorded embedder, the configured one, and the one `up`
    (or any command) started now would use (an EmbedderChoice): ``status``
    reads it without making any model; a running server's own is in its
    ``stats``."""
    from corpus.providers.registry import plan_embedder

    return plan_embedder(config, secrets_lookup=secrets_lookup, recorded=recorded_embedder(state))
