"""Reading index state for `status`, `stats` and corpus.json.

Everything here only reads, so it works while another process indexes
(SQLite WAL gives readers a consistent snapshot).
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import Count

from corpus.index.dense import embedding
from corpus.models import Chunk, Document, EmbeddingStatus, IndexJob, JobItem, Representation, Setting, Worker
from corpus.providers.base import ChatModel, Embedder
from corpus.providers.registry import (
    EmbedderChoice,
    EmbedderModels,
    UnavailableEmbedder,
    make_chat,
    plan_embedder,
)
from corpus.store import MODEL_SETTINGS, get_json_setting, get_setting, set_setting, uses_state_sqlite
from kernel import errors
from kernel.config import Config
from kernel.jsontypes import JsonObject
from kernel.state import StateDir, pid_alive, write_json

logger = logging.getLogger(__name__)

#: A secret's value by name, or None when it is not set.
SecretLookup = Callable[[str], str | None]

#: settings key: the corpus.json ``models`` of the latest indexing job (JSON)
MODELS_KEY = "models_in_use"


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
    recent_errors: list[RecentError] = field(default_factory=list)
    #: skipped documents waiting for a provider key, by reason ("needs MISTRAL_API_KEY": 3)
    needs_provider: dict[str, int] = field(default_factory=dict)
    #: live documents whose units an older format cut (re-cut by the next pass)
    older_format: int = 0


def latest_job() -> IndexJob | None:
    return IndexJob.objects.order_by("-started_unix").first()


#: The settings key where `up`'s indexer supervisor records its child
#: (mcp_gateway.indexer_process): JSON with pid, restarts and the last exit.
INDEXER_KEY = "indexer_process"


def indexer_state() -> JsonObject | None:
    """What the indexer supervisor of a server last recorded, with
    ``running`` checked against the process table; None when no server
    has run an indexing child here."""
    found = get_json_setting(INDEXER_KEY)
    if found is None:
        return None
    pid = found.get("pid")
    if not (isinstance(pid, int) and pid_alive(pid)):
        found.update(running=False, pid=None)
    return found


def indexing_complete(dense: bool) -> bool:
    """False while an indexer is alive or chunks still wait for embeddings
    (or code units for their signature views: corpus/index/dense/embedding.py)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT running FROM index_jobs ORDER BY started_unix DESC LIMIT 1), "
            "(SELECT pid FROM index_jobs ORDER BY started_unix DESC LIMIT 1), "
            "EXISTS (SELECT 1 FROM chunks WHERE deleted = %s AND embedding_status = %s) "
            "OR EXISTS (SELECT 1 FROM chunks WHERE view_pending = %s AND deleted = %s)",
            [False, EmbeddingStatus.PENDING, True, False],
        )
        running, pid, pending = cursor.fetchone()
    if running and pid_alive(pid):
        return False
    return not (dense and pending)


@dataclass(frozen=True)
class RecentError:
    """A live document in error: its code (the stored column) and the text shown."""

    rel_path: str
    code: str
    error: str

    def as_dict(self) -> dict[str, str]:
        return {"rel_path": self.rel_path, "code": self.code, "error": self.error}


def recent_errors(limit: int = 10) -> list[RecentError]:
    """Live documents in error, latest first."""
    rows = (
        Document.objects.filter(deleted=False, status="error")
        .order_by("-indexed_unix", "rel_path")
        .values_list("rel_path", "error_code", "error")[:limit]
    )
    return [RecentError(path, code, error or "") for path, code, error in rows]


def summarize(*, error_limit: int = 10) -> IndexSummary:
    by_type = doc_counts()
    live_chunks = Chunk.objects.filter(deleted=False)
    job = latest_job()
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
        recent_errors=recent_errors(error_limit),
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
        count: int = cursor.fetchone()[0]
        return count


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


def scaleout_summary(*, queue_timeout: float = 2.0) -> JsonObject | None:
    """Celery's side of the index for ``status``: the broker (host only,
    never credentials), messages waiting in the queue, files the latest job
    still waits for, and the workers seen lately. None without a broker."""
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
        from corpus.celery_app import app  # celery is imported only with a broker to ask

        with app.connection_for_read() as conn:
            # kombu takes the timeout in seconds as a float, and its channels have
            # queue_declare: celery-types says an int, and a StdChannel without it.
            conn.ensure_connection(max_retries=1, timeout=timeout)  # type: ignore[arg-type]
            channel = conn.default_channel
            depth: int = channel.queue_declare(queue=queue, passive=True).message_count  # type: ignore[attr-defined]
            return depth
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
    return {row["error"] or "": row["n"] for row in rows.order_by("error")}  # error__startswith: never null


def write_corpus_json(
    root: Path, state: StateDir, config: Config, job: IndexJob, *, models: dict[str, str] | None = None
) -> None:
    """``corpus.json`` (spec §4.4): profile, the models in use (``models``, else
    those the job recorded in ``settings``), the job's counters, and, beyond
    the spec, the documents in error with their codes."""
    counts = doc_counts()
    total = sum(counts.values()) or 1
    summary = {
        "root": str(root),
        "profile": {
            "doc_counts": counts,
            "code_ratio": round(counts.get("code", 0) / total, 3),
            "status_counts": status_counts(),
        },
        "models": models or recorded_job_models() or models_summary(config),
        "indexing": {
            "job_id": job.job_id,
            "running": job.running,
            "mode": job.mode,
            **job.counters(),
        },
        "recent_errors": [error.as_dict() for error in recent_errors()],
    }
    try:
        write_json(state.corpus_json, summary)
    except OSError as exc:
        logger.warning("cannot write %s: %s", state.corpus_json, exc)


def no_chat_reason(config: Config) -> str:
    """Why :func:`corpus.providers.registry.make_chat` made no chat model."""
    if config.chat.provider == "none":
        return "chat.provider is none"
    return "chat.provider is auto and MISTRAL_API_KEY is not set"


def chat_in_use(config: Config, secret: SecretLookup) -> str:
    """``provider/model`` of the chat model ``ask`` answers with under this
    configuration and these keys, or ``none (why)``."""
    try:
        chat = make_chat(config, secrets_lookup=secret)
    except errors.Dir2mcpError as exc:
        return f"none ({exc.message})"
    if chat is None:
        return f"none ({no_chat_reason(config)})"
    label = f"{chat.provider}/{chat.model}"
    close = getattr(chat, "close", None)  # the HTTP client it opened; no request was made
    if close is not None:
        close()
    return label


def models_in_use(config: Config, *, embedder: Embedder | None, secret: SecretLookup) -> dict[str, str]:
    """The ``models`` of corpus.json and ``stats``: what an indexing job (or a
    server) with this embedder, configuration and keys actually uses."""
    summary = models_summary(config, embedder=embedder, live=True, secret=secret)
    summary["chat"] = chat_in_use(config, secret)
    return summary


def record_models(models: dict[str, str], config: Config) -> None:
    """Record the models in use in ``settings`` (spec §5.5): ``ocr_model``,
    ``stt_provider``, ``stt_model`` and ``chat_model`` as corpus.json names
    them, and the whole ``models`` object. The embedding keys
    (``embed_text_model``, ``embed_text_dim``, ...) name the models the
    vectors came from (corpus.index.dense.embedding); before any vectors they are empty."""
    set_setting(MODELS_KEY, json.dumps(models, sort_keys=True))
    for key, name in MODEL_SETTINGS.items():
        if name is not None:
            set_setting(key, models[name])
        elif get_setting(key) is None:
            set_setting(key, "0" if key.endswith("_dim") else "")


def recorded_job_models() -> dict[str, str] | None:
    """The ``models`` the latest indexing job recorded; None before any."""
    return get_json_setting(MODELS_KEY)


def models_summary(
    config: Config,
    *,
    embedder: Embedder | None = None,
    chat: ChatModel | None = None,
    live: bool = False,
    secret: SecretLookup | None = None,
) -> dict[str, str]:
    """The models in use. With ``live``, embeddings and chat name what this
    process actually runs (``none`` when off, with why when ``secret`` is
    given), not the Mistral defaults; with ``secret`` too, OCR and
    speech-to-text say which key they still need."""
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
            if isinstance(embedder, UnavailableEmbedder) and info is not None:
                summary[f"embed_{kind}"] = f"none ({info.provider}/{info.model} {embedder.choice.reason})"
        summary["chat"] = f"{chat.provider}/{chat.model}" if chat is not None else "none"
        if chat is None and secret is not None:
            summary["chat"] = f"none ({no_chat_reason(config)})"
    if live and secret is not None:
        # The extraction pipeline (tree-sitter and the parsers, ~0.1 CPU-s):
        # not imported by a server before its first answer (docs/benchmarks.md).
        from corpus.ingest.prepare import capabilities_for

        caps = capabilities_for(config, secret)
        if not caps.ocr:
            summary["ocr"] = f"none ({caps.ocr_missing})"
        if not caps.stt:
            summary["stt_model"] = f"none ({caps.stt_missing})"
    return summary


def recorded_embedder(state: StateDir) -> EmbedderModels | None:
    """The embedder the index's vectors came from (an EmbedderModels); None before any (or
    before the store exists: this is read before ``open_store`` creates it)."""
    if uses_state_sqlite(state) and not state.meta_db.exists():
        return None
    try:
        return EmbedderModels.from_infos(embedding.recorded_models())
    except DatabaseError:  # no settings table yet: nothing recorded
        return None


def embedder_choice(config: Config, state: StateDir, *, secrets_lookup: SecretLookup) -> EmbedderChoice:
    """The index's recorded embedder, the configured one, and the one `up`
    (or any command) started now would use (an EmbedderChoice): ``status``
    reads it without making any model; a running server's own is in its
    ``stats``."""
    return plan_embedder(config, secrets_lookup=secrets_lookup, recorded=recorded_embedder(state))
