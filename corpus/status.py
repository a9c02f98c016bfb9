"""Reading index state for `status`, `stats` and corpus.json.

Everything here only reads, so it works while another process indexes
(SQLite WAL gives readers a consistent snapshot).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from django.db.models import Count

from corpus.models import Chunk, Document, EmbeddingStatus, IndexJob, Representation


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
    job: IndexJob | None
    job_alive: bool
    recent_errors: list[tuple[str, str]] = field(default_factory=list)


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
        job=job,
        job_alive=bool(job and job.running and pid_alive(job.pid)),
        recent_errors=[(path, err or "") for path, err in errors],
    )
