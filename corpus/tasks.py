"""Celery entry points (DESIGN decision 8; docs/scaling.md).

Started as ``celery -A dir2mcp_site worker`` with the same ``DIR2MCP_ROOT``
(the corpus, readable on every worker machine), ``DATABASE_URL`` and
``CELERY_BROKER_URL`` as the server. Tasks take ids and paths, never
documents, and are safe to run twice (corpus.ingest.distributed).
"""

from __future__ import annotations

import logging

from celery.signals import worker_process_init, worker_ready
from django.db import InterfaceError, OperationalError

from dir2mcp_site.celery import app

log = logging.getLogger(__name__)


class _IngestTask(app.Task):
    def on_failure(self, exc, task_id, args, kwargs, einfo):
        """Out of retries (the database stayed unreachable): give the items
        up, so the job that waits for them ends and says why."""
        from corpus.ingest.distributed import fail_items

        job_id, rel_paths = (list(args) + [kwargs.get("job_id"), kwargs.get("rel_paths")])[:2]
        try:
            fail_items(job_id, rel_paths, f"{type(exc).__name__}: {exc}")
        except Exception:  # the database may be what failed
            log.exception("cannot mark the items of task %s failed", task_id)


@app.task(
    name="dir2mcp.ingest_paths",
    base=_IngestTask,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=True,
    retry_backoff_max=300,
    retry_jitter=True,
    max_retries=8,
    ignore_result=True,
)
def ingest_paths(self, job_id: str, rel_paths: list[str]) -> int:
    """Read, extract, chunk, write and embed these paths of one job."""
    from corpus.ingest.distributed import ingest

    return ingest(job_id, rel_paths, worker=self.request.hostname or "in-process")


@worker_process_init.connect
def _load(**_):
    """Each pool process opens the store and loads its embedder once, at
    start: not in the first task, and a wrong root or database fails here."""
    from corpus.ingest.distributed import WorkerRuntime

    WorkerRuntime.get()


@worker_ready.connect
def _announce(sender=None, **_):
    """A worker shows in ``status`` as soon as it is up, before any task."""
    from corpus.ingest.distributed import _seen

    _seen(sender.hostname if sender is not None else "worker")
