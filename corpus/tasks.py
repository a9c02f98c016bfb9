"""Celery entry points (DESIGN decision 8; docs/scaling.md).

Started as ``celery -A dir2mcp_site worker`` with the same ``DIR2MCP_ROOT``
(the corpus, readable on every worker machine), ``DATABASE_URL`` and
``CELERY_BROKER_URL`` as the server. Tasks take ids and paths, never
documents, and are safe to run twice (corpus.ingest.distributed).

A worker works for one corpus only. Without a root it never starts
(dir2mcp_site/bootstrap.py). With a root that is not a readable directory
(``ROOT_INACCESSIBLE``, exit 3) or not the one recorded in the database
(``CONFIG_INVALID``, exit 2) it stops before it takes a task, with one
line. And when a task comes for a corpus whose recorded root is not its
own (it started on a fresh database, or the server moved), it puts the
task back for a worker of that corpus and stops the same way.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

from celery.exceptions import WorkerShutdown
from celery.signals import (
    task_postrun,
    task_prerun,
    task_received,
    worker_init,
    worker_process_init,
    worker_ready,
)
from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connections,
)

from corpus.celery_app import app
from corpus.ingest.distributed import WorkerRuntime, announce, fail_items, ingest, root_conflict
from kernel import errors
from kernel.state import resolve_root

if TYPE_CHECKING:  # names only needed for annotations
    from billiard.einfo import ExceptionInfo
    from celery import Task
    from celery.worker.consumer import Consumer
    from celery.worker.request import Request

    # The app's own Task class (app.Task, made at run time), as the stubs see it.
    _AppTask = Task[[str, list[str]], int]
else:
    _AppTask = app.Task

log = logging.getLogger(__name__)

#: Seconds a worker process keeps its database connection across tasks.
#: Celery's Django fixup would close it after every task (settings.py turns
#: that off), and a new PostgreSQL connection, a new server process with
#: cold caches, per task was a tenth of the work of indexing
#: (docs/benchmarks.md, "Scale-out"). A broken connection is still
#: replaced before the next task.
CONNECTION_MAX_AGE = 300


class _IngestTask(_AppTask):
    def on_failure(
        self,
        exc: Exception,
        task_id: str,
        args: tuple[Any, ...],  # Any: Task.on_failure's signature (a task's arguments)
        kwargs: dict[str, Any],  # Any: as args
        einfo: ExceptionInfo,
    ) -> None:
        """Out of retries (the database stayed unreachable): give the items
        up, so the job that waits for them ends and says why."""
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
def ingest_paths(self: _IngestTask, job_id: str, rel_paths: list[str]) -> int:
    """Read, extract, chunk, write and embed these paths of one job."""
    return ingest(job_id, rel_paths, worker=self.request.hostname or "in-process")


@worker_init.connect
def _keep_connections(**_: object) -> None:
    """Worker processes (a prefork pool's children inherit this) keep their
    database connection between tasks, checked before each reuse."""
    settings = connections.settings[DEFAULT_DB_ALIAS]
    settings["CONN_MAX_AGE"] = CONNECTION_MAX_AGE
    settings["CONN_HEALTH_CHECKS"] = True


def _stop(exc: errors.Dir2mcpError) -> WorkerShutdown:
    """One line on stderr, and the worker's exit status for ``exc``. The
    process's own stderr: once the worker runs, ``sys.stderr`` is Celery's
    redirection into its log, which would prefix the line."""
    stream = sys.__stderr__ or sys.stderr
    stream.write(f"ERROR: {exc.code}: {exc.message}\n")
    stream.flush()
    return WorkerShutdown(exc.exit_code)


def _conflict() -> errors.Dir2mcpError | None:
    """This worker's root against the one recorded in the database."""
    problem = root_conflict(resolve_root(None))
    return errors.Dir2mcpError(errors.CONFIG_INVALID, problem) if problem else None


@worker_init.connect
def _check_root(**_: object) -> None:
    """Before the worker consumes anything (its main process, once Celery's
    Django fixup has set Django up): its root is a readable directory, and
    the corpus's own when the database records one. A database not
    migrated yet, or not reachable yet, records nothing: each task checks."""
    try:
        refused = _conflict()
    except errors.Dir2mcpError as exc:  # ROOT_INACCESSIBLE
        refused = exc
    except DatabaseError:
        refused = None
    finally:
        # The pool's processes are forked after this: none may inherit the connection.
        connections.close_all()
    if refused is not None:
        raise _stop(refused)


@task_received.connect
def _check_task_root(request: Request | None = None, **_: object) -> None:
    """Each ingestion task, in the worker's main process before a pool
    process runs it: the corpus's recorded root may have appeared or
    changed since the worker started. For another corpus the task goes back
    to the queue, whole, for a worker of that corpus, and this worker stops
    (a raised SystemExit is how Celery's own shutdown leaves its loop; an
    Exception would only be logged and the task run anyway)."""
    if request is None or request.name != ingest_paths.name:
        return
    close_old_connections()  # one that died (a database restart) is replaced
    try:
        refused = _conflict()
    except (errors.Dir2mcpError, DatabaseError):
        return  # the task itself reports a missing root and retries database errors
    if refused is not None:
        request.message.reject(requeue=True)
        raise _stop(refused)


@task_prerun.connect
@task_postrun.connect
def _recycle_connections(sender: Task[Any, Any] | None = None, **_: object) -> None:  # Any: any task
    """Around each task on a worker, as Django does around a request: close
    connections that failed or outlived CONNECTION_MAX_AGE; keep the rest.
    A task run eagerly (no broker) is part of its caller's work and leaves
    the caller's connection alone."""
    if sender is not None and getattr(sender.request, "is_eager", False):
        return
    close_old_connections()


@worker_process_init.connect
def _load(**_: object) -> None:
    """Each pool process opens the store and loads its embedder once, at
    start: not in the first task, and a wrong root or database fails here."""
    _keep_connections()
    runtime = WorkerRuntime.get()
    model = runtime.embedder.model_info("text").model if runtime.embedder else "none"
    log.info("pool process ready: root %s, embedder %s", runtime.root, model)


@worker_ready.connect
def _announce(sender: Consumer | None = None, **_: object) -> None:
    """A worker shows in ``status`` as soon as it is up, before any task."""
    announce(sender.hostname if sender is not None else "worker")
