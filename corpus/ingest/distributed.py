"""Ingestion spread over Celery workers (docs/scaling.md).

With ``CELERY_BROKER_URL`` set, a walk of the whole tree is split in two:

- the coordinator (``up``, ``reindex``, ``watch``) walks, skips what is
  unchanged by size, mtime and policy, tombstones what disappeared, and
  hands every other path to the workers in small batches, then waits for
  them, showing their progress from the job's counters;
- a worker (:func:`ingest`, the ``dir2mcp.ingest_paths`` task) reads,
  extracts (OCR and transcription included), chunks and writes its paths,
  then embeds their chunks.

Each path is a :class:`~corpus.models.JobItem`. A worker locks the items it
was given, writes their documents, adds its counters to the job and marks
them ``written`` in one transaction, then embeds and marks them ``done``.
A worker killed at any point leaves either nothing or whole documents; the
redelivered task starts where the killed one stopped, so nothing is written,
counted or embedded twice.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar

from django.db import transaction
from django.db.models import F, Q

from corpus import errors
from corpus.config import Config, default_config_path, load_config
from corpus.embedding import embed_chunks
from corpus.ingest.classify import DOC_TYPES
from corpus.ingest.pipeline import Counters, Indexer, Known
from corpus.models import Chunk, Document, EmbeddingStatus, IndexJob, JobItem, Worker
from corpus.providers.base import Embedder
from corpus.state import StateDir
from corpus.status import write_corpus_json

log = logging.getLogger(__name__)

#: Paths per task, and how long a partial batch waits before it is sent.
DISPATCH_PATHS = 8
DISPATCH_SECONDS = 0.5
#: How often the coordinator reads the workers' progress while it waits.
WAIT_SECONDS = 0.25


def policy_fingerprint(indexer: Indexer) -> str:
    """What every process writing one job must agree on: the policy hash of
    each document type (configuration, and which provider keys are set)."""
    return json.dumps({t: indexer.preparer.policy_hash(t) for t in DOC_TYPES}, sort_keys=True)


def add_to_job(job_id: str, deltas: dict[str, int]) -> None:
    """Add counter deltas to a job in one UPDATE (workers add concurrently)."""
    changes = {name: F(name) + value for name, value in deltas.items() if value}
    if changes:
        IndexJob.objects.filter(job_id=job_id).update(updated_unix=time.time(), **changes)


def _difference(now: Counters, before: Counters) -> dict[str, int]:
    return {f.name: getattr(now, f.name) - getattr(before, f.name) for f in fields(Counters)}


def _from_job(job: IndexJob) -> Counters:
    return Counters(**job.counters())


def _send_task(job_id: str, rel_paths: list[str]) -> None:
    from corpus.tasks import ingest_paths

    ingest_paths.delay(job_id, rel_paths)


# -- the coordinator ----------------------------------------------------------


class DispatchingIndexer(Indexer):
    """Walks the tree like :class:`Indexer`, but hands changed files to
    Celery workers instead of reading them, then waits for the workers.

    Its counters are the job's, read back from the database at every flush;
    what it counts itself (scanned, unchanged, deleted) is added as deltas,
    so the workers' additions are never overwritten.
    """

    def __init__(self, *args, send: Callable[[str, list[str]], None] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._send = send or _send_task
        self._pending: list[str] = []
        self._pending_started = 0.0
        self._dispatched: set[str] = set()
        self._flushed = Counters()
        self._said_waiting = False

    def run(self) -> Counters:
        self._start()
        outcome = "interrupted"
        try:
            for item in self._walk():
                if self.stop.is_set():
                    break
                self._consume(item)
            else:
                self._send_pending()
                self._tombstone_unseen()
                if self._wait_for_workers():
                    self._embed()  # what a worker could not embed, and this process's dense index
                    outcome = "complete"
        finally:
            self._finish(outcome)
        return self.counters

    def _walk(self):
        from corpus.ingest.discover import walk

        return walk(self.engine)

    def _start(self) -> None:
        super()._start()
        assert self.job is not None
        self.job.host = socket.gethostname()
        self.job.policy = policy_fingerprint(self)
        self.job.save(update_fields=["host", "policy"])

    def _consume_file(self, entry) -> None:
        known = self.known.get(entry.rel_path)
        if known and self._stat_unchanged(known, entry.size, entry.mtime_ns):
            self._unchanged(entry.rel_path, known)
            return
        self.counters.scanned -= 1  # the worker that reads it counts it
        if not self._pending:
            self._pending_started = time.monotonic()
        self._pending.append(entry.rel_path)
        self._dispatched.add(entry.rel_path)

    def _maybe_flush(self) -> None:
        if len(self._pending) >= DISPATCH_PATHS or (
            self._pending and time.monotonic() - self._pending_started >= DISPATCH_SECONDS
        ):
            self._send_pending()
        self._flush_counters()

    def _send_pending(self) -> None:
        if not self._pending:
            return
        paths, self._pending = self._pending, []
        assert self.job is not None
        JobItem.objects.bulk_create([JobItem(job=self.job, rel_path=p) for p in paths], ignore_conflicts=True)
        self._send(self.job.job_id, paths)

    def _tombstone_unseen(self) -> None:
        # Members of a dispatched archive are the worker's to keep or tombstone.
        def members_of_dispatched(path: str) -> bool:
            return "!/" in path and path.split("!/", 1)[0] in self._dispatched

        self._tombstone(
            [
                p
                for p, k in self.known.items()
                if not k.deleted and p not in self.seen and not members_of_dispatched(p)
            ]
        )

    def _wait_for_workers(self) -> bool:
        """Until every dispatched path is done (True), or ``stop`` (False)."""
        assert self.job is not None
        items = JobItem.objects.filter(job=self.job).exclude(state=JobItem.DONE)
        while True:
            left = items.count()
            if not left:
                return True
            if not self._said_waiting:
                self._said_waiting = True
                self.reporter.say(f"Waiting for Celery workers: {left} files queued (docs/scaling.md).")
            self._flush_counters(force=True)
            if self.stop.wait(WAIT_SECONDS):
                return False

    def _flush_counters(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_flush < 0.5:
            return
        self._last_flush = now
        job = self.job
        assert job is not None
        with transaction.atomic():
            add_to_job(job.job_id, _difference(self.counters, self._flushed))
            if not job.running:  # _finish: the outcome goes in with the last counts
                IndexJob.objects.filter(job_id=job.job_id).update(
                    running=False, outcome=job.outcome, finished_unix=job.finished_unix
                )
            IndexJob.objects.filter(job_id=job.job_id).update(updated_unix=time.time())
        job.refresh_from_db()
        self.counters = _from_job(job)
        self._flushed = _from_job(job)
        write_corpus_json(self.root, self.state, self.config, job)
        if job.running:
            self.reporter.progress(self.counters.as_dict())


# -- the worker ---------------------------------------------------------------


class WorkerIndexer(Indexer):
    """A worker's share of a job: its paths only, counted for the job."""

    def __init__(self, root: Path, state: StateDir, config: Config, job: IndexJob, rel_paths: list[str]):
        super().__init__(root, state, config)
        self.job = job
        self.mode = job.mode
        near = Q(rel_path__in=rel_paths)
        for path in rel_paths:
            near |= Q(rel_path__startswith=path + "!/")
        self.known = {
            row[0]: Known(*row[1:])
            for row in Document.objects.filter(near).values_list(
                "rel_path",
                "doc_id",
                "doc_type",
                "size_bytes",
                "mtime_ns",
                "content_hash",
                "policy_hash",
                "status",
                "deleted",
            )
        }
        self._sorted_paths = sorted(self.known)

    def _flush_counters(self, *, force: bool = False) -> None:
        """Counted into the job once, with the writes (see :func:`ingest`)."""

    def close(self) -> None:
        for pool in self._pools.values():
            pool.shutdown(wait=True, cancel_futures=True)
        self._pools.clear()
        if self._owned_providers is not None:
            self._owned_providers.close()


@dataclass
class WorkerRuntime:
    """What a worker process works on: the root it was started for
    (``DIR2MCP_ROOT``), its configuration and its embedder, made once."""

    root: Path
    state: StateDir
    config: Config
    embedder: Embedder | None

    _current: ClassVar[WorkerRuntime | None] = None

    @classmethod
    def from_settings(cls) -> WorkerRuntime:
        from django.conf import settings

        from corpus.providers.registry import make_embedder
        from corpus.secrets import resolve_secret
        from corpus.store import open_store

        root = Path(settings.DIR2MCP_ROOT)
        state = StateDir(Path(settings.DIR2MCP_STATE_DIR))
        config = load_config(default_config_path(root))
        open_store(state)
        embedder = make_embedder(
            config, secrets_lookup=lambda name: resolve_secret(name, config, state, root=root).value
        )
        return cls(root, state, config, embedder)

    @classmethod
    def get(cls) -> WorkerRuntime:
        if cls._current is None:
            cls._current = cls.from_settings()
        return cls._current

    @classmethod
    def install(cls, runtime: WorkerRuntime | None) -> None:
        """Set the process's runtime (an embedded worker, or a test's root)."""
        cls._current = runtime


def ingest(job_id: str, rel_paths: list[str], *, worker: str, runtime: WorkerRuntime | None = None) -> int:
    """Write, count and embed ``rel_paths`` for ``job_id``, each once.

    Returns how many paths this call wrote (0 when a previous delivery had).
    """
    rt = runtime or WorkerRuntime.get()
    job = IndexJob.objects.get(job_id=job_id)
    items = JobItem.objects.filter(job=job, rel_path__in=rel_paths)
    wrote: list[str] = []
    with transaction.atomic():
        # The lock makes a second delivery of this task wait for the first
        # and then find its items written.
        locked = items.select_for_update().filter(state=JobItem.QUEUED)
        queued = list(locked.values_list("rel_path", flat=True))
        if queued:
            indexer = WorkerIndexer(rt.root, rt.state, rt.config, job, queued)
            try:
                if job.policy and policy_fingerprint(indexer) != job.policy:
                    raise errors.Dir2mcpError(
                        errors.CONFIG_INVALID,
                        f"worker {worker} indexes with another configuration or other provider keys "
                        f"than the process that started job {job_id}",
                        hint="Give every worker the same .dir2mcp.yaml, DIR2MCP_* settings and API keys.",
                    )
                for rel_path in queued:
                    indexer._refresh_path(rel_path)
                indexer._flush_batch()
            finally:
                indexer.close()
            add_to_job(job_id, indexer.counters.as_dict())
            items.filter(rel_path__in=queued).update(state=JobItem.WRITTEN, worker=worker)
            wrote = queued
    written = list(items.filter(state=JobItem.WRITTEN).values_list("rel_path", flat=True))
    if written:
        _embed_items(job_id, written, rt)
        items.filter(rel_path__in=written).update(state=JobItem.DONE, finished_unix=time.time())
    _seen(worker, tasks=1)
    return len(wrote)


def _embed_items(job_id: str, rel_paths: list[str], rt: WorkerRuntime) -> None:
    """Embed the live pending chunks of these documents (and their archive
    members); each batch's vectors and its count commit together. A provider
    failure leaves them pending for the coordinator's last sweep or the
    next run, as in a single process."""
    if rt.embedder is None:
        return
    near = Q(representation__document__rel_path__in=rel_paths)
    for path in rel_paths:
        near |= Q(representation__document__rel_path__startswith=path + "!/")
    ids = list(
        Chunk.objects.filter(near, deleted=False, embedding_status=EmbeddingStatus.PENDING).values_list(
            "chunk_id", flat=True
        )
    )
    if not ids:
        return
    try:
        embed_chunks(
            rt.embedder,
            ids,
            batch_size=rt.config.embed.batch_size,
            on_stored=lambda n: add_to_job(job_id, {"embedded_ok": n}),
        )
    except errors.Dir2mcpError as exc:
        log.warning("embedding stopped on this worker, chunks stay pending: %s", exc)


def _seen(name: str, *, tasks: int = 0) -> None:
    """Record that worker ``name`` is alive (``status`` lists workers seen)."""
    import os

    now = time.time()
    updated = Worker.objects.filter(name=name).update(
        last_seen_unix=now, pid=os.getpid(), tasks_done=F("tasks_done") + tasks
    )
    if not updated:
        Worker.objects.get_or_create(
            name=name,
            defaults={
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "started_unix": now,
                "last_seen_unix": now,
                "tasks_done": tasks,
            },
        )
