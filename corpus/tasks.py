"""Celery entry points (DESIGN decision 8; docs/scaling.md).

Started as ``celery -A dir2mcp_site worker`` with the same ``DIR2MCP_ROOT``
(the corpus, readable on every worker machine), ``DATABASE_URL`` and
``CELERY_BROKER_URL`` as the server. Tasks take ids and paths, never
documents, and are safe to run twice (corpus.ingest.distributed).
"""

from __future__ import annotations

import logging

from celery.signals import task_postrun, task_prerun, worker_init, worker_process_init, worker_ready
from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, close_old_connections, connections

from dir2mcp_site.celery import app

log = logging.getLogger(__name__)

#: Seconds a worker process keeps its database connection across tasks.
#: Celery's Django fixup would close it after every task (settings.py turns
#: that off), and a new PostgreSQL connection, a new server process with
#: cold caches, per task was a tenth of the work of indexing
#: (docs/benchmarks.md, "Scale-out"). A broken connection is still
#: replaced before the next task.
CONNECTION_MAX_AGE = 300


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


@worker_init.connect
def _keep_connections(**_):
    """Worker processes (a prefork pool's children inherit this) keep their
    database connection between tasks, checked before each reuse."""
    settings = connections.settings[DEFAULT_DB_ALIAS]
    settings["CONN_MAX_AGE"] = CONNECTION_MAX_AGE
    settings["CONN_HEALTH_CHECKS"] = True


@task_prerun.connect
@task_postrun.connect
def _recycle_connections(sender=None, **_):
    """Around each task on a worker, as Django does around a request: close
    connections that failed or outlived CONNECTION_MAX_AGE; keep the rest.
    A task run eagerly (no broker) is part of its caller's work and leaves
    the caller's connection alone."""
    if sender is not None and getattr(sender.request, "is_eager", False):
        return
    close_old_connections()


@worker_process_init.connect
def _load(**_):
    """Each pool process opens the store and loads its embedder once, at
    start: not in the first task, and a wrong root or database fails here."""
    from corpus.ingest.distributed import WorkerRuntime

    _keep_connections()
    runtime = WorkerRuntime.get()
    model = runtime.embedder.model_info("text").model if runtime.embedder else "none"
    log.info("pool process ready: root %s, embedder %s", runtime.root, model)


@worker_ready.connect
def _announce(sender=None, **_):
    """A worker shows in ``status`` as soon as it is up, before any task."""
    from corpus.ingest.distributed import announce

    announce(sender.hostname if sender is not None else "worker")
